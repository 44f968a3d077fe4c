/* clip.c - the ViT encoders of mmproj GGUF files (CLIP for LLaVA, SigLIP for
 * Idefics3/SmolVLM and Gemma 3), their projectors and the families' prompt
 * layouts. Gemma 3's projector averages 4x4 patches, applies an RMSNorm
 * (the file stores Gemma's 1 + w gain) and multiplies by
 * mm.input_projection, which is stored as HF's [vision, text] x @ W
 * matrix and transposed here once at load.
 * The forward pass follows the Hugging Face modules the files are converted
 * from: CLIP puts a class token before the patches and has a pre-norm;
 * SigLIP has a patch bias and a post-norm; LLaVA reads the output of layer
 * clip.vision.feature_layer without the class token. Matrix products go
 * through omni_matmul on the caller's thread pool. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "media/image.h"
#include "media/video.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "vision/qwen2vl.h"
#include "vision/qwen3vl.h"
#include "vision/vision.h"

struct clip_layer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;                 /* (n_embd) */
    struct omni_tensor q, k, v, o;                        /* (n_embd, n_embd) */
    float *q_b, *k_b, *v_b, *o_b;                         /* (n_embd) */
    struct omni_tensor up, down;                          /* (n_ff, n_embd), (n_embd, n_ff) */
    float *up_b, *down_b;                                 /* (n_ff), (n_embd) */
};

struct vision_model {
    struct gguf *g;
    struct vision_info info;
    char marker[48];
    struct qwen2vl_model *qv;        /* Qwen2.5-VL files: the whole tower lives there */
    struct qwen3vl_model *q3;        /* Qwen3-VL files: likewise (vision/qwen3vl.c) */
    int n_ff;
    float eps;
    bool gelu;                       /* GELU (tanh form) in the ViT MLP; else quick GELU */
    struct omni_tensor patch;        /* (n_embd, 3 * patch * patch) conv kernel as a matrix */
    float *patch_b;                  /* (n_embd) or NULL */
    float *cls;                      /* (n_embd) or NULL */
    float *pos;                      /* (n_pos, n_embd) */
    float *pre_w, *pre_b, *post_w, *post_b; /* (n_embd) or NULL */
    struct clip_layer *layers;       /* (n_layer) */
    struct omni_tensor mm0, mm2;     /* llava: (n_mid, n_embd), (n_embd_lm, n_mid) */
    float *mm0_b, *mm2_b;
    struct omni_tensor fc;           /* idefics3: (n_embd_lm, n_embd * scale^2); gemma3: the
                                        projection transposed, F32 (n_embd_lm, n_embd) */
    float *fc_data;                  /* gemma3: fc's storage */
    float *soft_norm;                /* gemma3: (n_embd) RMSNorm gain before the projection */
    int n_patches, n_pos;
};

struct vision_ctx {
    const struct vision_model *m;
    struct tpool *tp;
    float *patches;                  /* (n_patches, 3 * patch^2) */
    float *x, *h, *q, *k, *v, *att;  /* (n_pos, n_embd) */
    float *scores;                   /* (threads, n_pos, n_pos): one score matrix per thread */
    float *ff;                       /* (n_pos, max(n_ff, projector widths)) */
    float *shuf;                     /* (tokens_per_image, n_embd * scale^2) */
};

// ---- loading -------------------------------------------------------------------

struct loader {
    struct vision_model *m;
    const char *path;
    char *err;
    size_t errlen;
    int rc;
};

static int lfail(struct loader *l, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lfail(struct loader *l, int code, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->rc = omni_fail(l->err, l->errlen, code, "vision: %s: %s", l->path, msg);
    return l->rc;
}

static int get_u32(struct loader *l, const char *key, int *out, bool required)
{
    uint32_t v;
    int rc = gguf_get_u32(l->m->g, key, &v);
    if (rc == OMNI_ERR_NOTFOUND && !required)
        return 0;
    if (rc < 0 || v == 0 || v > 1u << 20)
        return lfail(l, OMNI_ERR_FORMAT, "key '%s' missing or out of range", key);
    *out = (int)v;
    return 0;
}

static const struct gguf_tensor *find(struct loader *l, const char *name, bool required)
{
    const struct gguf_tensor *t = gguf_find_tensor(l->m->g, name);
    if (!t && required)
        lfail(l, OMNI_ERR_FORMAT, "tensor '%s' missing", name);
    if (t) {
        const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
        if (!tr || !tr->supported) {
            lfail(l, OMNI_ERR_UNSUPPORTED, "tensor '%s': unsupported type", name);
            return NULL;
        }
    }
    return t;
}

/* A weight matrix of n_out rows of n_in; absent optional ones give type -1. */
static int get_mat(struct loader *l, const char *name, int64_t n_in, int64_t n_out,
                   struct omni_tensor *out, bool required)
{
    out->type = -1;
    const struct gguf_tensor *t = find(l, name, required);
    if (!t)
        return l->rc;
    if (t->ne[0] != n_in || t->ne[1] * t->ne[2] * t->ne[3] != n_out)
        return lfail(l, OMNI_ERR_FORMAT, "tensor '%s': shape [%lld x ...], expected [%lld x ...]",
                     name, (long long)t->ne[0], (long long)n_in);
    *out = (struct omni_tensor){ .type = t->type, .ne = { n_in, n_out }, .data = t->data };
    return 0;
}

/* A vector (or n_rows x n) as floats, malloc'ed; NULL for an absent optional one. */
static float *get_vec(struct loader *l, const char *name, int64_t n, int64_t n_rows, bool required)
{
    const struct gguf_tensor *t = find(l, name, required);
    if (!t)
        return NULL;
    if (t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != n_rows) {
        lfail(l, OMNI_ERR_FORMAT, "tensor '%s': %lld elements per row, expected %lld", name,
              (long long)t->ne[0], (long long)n);
        return NULL;
    }
    float *v = malloc(sizeof *v * (size_t)(n * n_rows));
    if (!v) {
        l->rc = omni_fail(l->err, l->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        return NULL;
    }
    struct omni_tensor w = { .type = t->type, .ne = { n, n_rows }, .data = t->data };
    for (int64_t r = 0; r < n_rows; r++)
        omni_tensor_get_row(&w, r, v + r * n);
    return v;
}

static int get_f32_array3(struct loader *l, const char *key, float out[3])
{
    enum gguf_type et;
    uint64_t n;
    const void *p = gguf_get_arr_data(l->m->g, key);
    if (gguf_get_arr(l->m->g, key, &et, &n) < 0 || et != GGUF_TYPE_FLOAT32 || n < 3 || !p)
        return lfail(l, OMNI_ERR_FORMAT, "key '%s' missing or not 3 floats", key);
    memcpy(out, p, 3 * sizeof(float));
    return 0;
}

static void free_layers(struct vision_model *m)
{
    for (int i = 0; m->layers && i < m->info.n_layer; i++) {
        struct clip_layer *L = &m->layers[i];
        float *v[] = { L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->q_b, L->k_b, L->v_b, L->o_b,
                       L->up_b, L->down_b };
        for (size_t j = 0; j < sizeof v / sizeof *v; j++)
            free(v[j]);
    }
    free(m->layers);
}

void vision_model_free(struct vision_model *m)
{
    if (!m)
        return;
    free_layers(m);
    qwen2vl_free(m->qv);
    qwen3vl_free(m->q3);
    float *v[] = { m->patch_b, m->cls, m->pos, m->pre_w, m->pre_b, m->post_w, m->post_b,
                   m->mm0_b, m->mm2_b, m->fc_data, m->soft_norm };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    gguf_free(m->g);
    free(m);
}

static uint64_t file_hash(const char *path, struct loader *l)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lfail(l, OMNI_ERR_IO, "cannot read");
        return 0;
    }
    static _Thread_local uint8_t buf[1 << 16];
    uint64_t h = 0x6d6d70726f6aULL; /* "mmproj" */
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = vision_hash(h, buf, n);
    fclose(f);
    return h;
}

static int load_layers(struct loader *l)
{
    struct vision_model *m = l->m;
    const int D = m->info.n_embd, F = m->n_ff;
    m->layers = calloc((size_t)m->info.n_layer, sizeof *m->layers);
    if (!m->layers)
        return l->rc = omni_fail(l->err, l->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "v.blk.%d.%s", i, s), n)
    for (int i = 0; i < m->info.n_layer && !l->rc; i++) {
        struct clip_layer *L = &m->layers[i];
        L->ln1_w = get_vec(l, NAME("ln1.weight"), D, 1, true);
        L->ln1_b = get_vec(l, NAME("ln1.bias"), D, 1, true);
        L->ln2_w = get_vec(l, NAME("ln2.weight"), D, 1, true);
        L->ln2_b = get_vec(l, NAME("ln2.bias"), D, 1, true);
        get_mat(l, NAME("attn_q.weight"), D, D, &L->q, true);
        get_mat(l, NAME("attn_k.weight"), D, D, &L->k, true);
        get_mat(l, NAME("attn_v.weight"), D, D, &L->v, true);
        get_mat(l, NAME("attn_out.weight"), D, D, &L->o, true);
        L->q_b = get_vec(l, NAME("attn_q.bias"), D, 1, false);
        L->k_b = get_vec(l, NAME("attn_k.bias"), D, 1, false);
        L->v_b = get_vec(l, NAME("attn_v.bias"), D, 1, false);
        L->o_b = get_vec(l, NAME("attn_out.bias"), D, 1, false);
        if (l->rc)
            break;
        /* Files from llama.cpp's older converters name fc1 "ffn_down" and fc2
         * "ffn_up"; the shapes tell which is which. */
        const struct gguf_tensor *up = find(l, NAME("ffn_up.weight"), true);
        const struct gguf_tensor *down = find(l, NAME("ffn_down.weight"), true);
        if (!up || !down)
            break;
        bool swapped = up->ne[0] == F && down->ne[0] == D;
        const char *up_name = swapped ? "ffn_down" : "ffn_up", *down_name = swapped ? "ffn_up" : "ffn_down";
        char b[24];
        snprintf(b, sizeof b, "%s.weight", up_name);
        get_mat(l, NAME(b), D, F, &L->up, true);
        snprintf(b, sizeof b, "%s.bias", up_name);
        L->up_b = get_vec(l, NAME(b), F, 1, false);
        snprintf(b, sizeof b, "%s.weight", down_name);
        get_mat(l, NAME(b), F, D, &L->down, true);
        snprintf(b, sizeof b, "%s.bias", down_name);
        L->down_b = get_vec(l, NAME(b), D, 1, false);
    }
#undef NAME
    return l->rc;
}

/* Gemma 3: mm.input_projection.weight is [n_embd rows of n_embd_lm] (ne =
 * {n_embd_lm, n_embd}, HF's x @ W); transposed once into F32 rows of n_embd
 * so omni_matmul takes it like any projection. The soft-embedding norm
 * gain is stored with Gemma's + 1 applied. */
static int load_gemma3_projector(struct loader *l)
{
    struct vision_model *m = l->m;
    const int D = m->info.n_embd;
    const struct gguf_tensor *t = find(l, "mm.input_projection.weight", true);
    if (!t)
        return l->rc;
    if (t->ne[1] != D || t->ne[2] * t->ne[3] != 1 || t->ne[0] < 1 || t->ne[0] > 65536)
        return lfail(l, OMNI_ERR_FORMAT, "tensor 'mm.input_projection.weight': shape [%lld x %lld], "
                     "expected [LM width x %d]", (long long)t->ne[0], (long long)t->ne[1], D);
    const int E = (int)t->ne[0];
    m->info.n_embd_lm = E;
    float *row = malloc(sizeof(float) * (size_t)E);
    m->fc_data = malloc(sizeof(float) * (size_t)E * D);
    if (!row || !m->fc_data) {
        free(row);
        return l->rc = omni_fail(l->err, l->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    }
    const struct omni_tensor w = { .type = t->type, .ne = { E, D }, .data = t->data };
    for (int r = 0; r < D; r++) {
        omni_tensor_get_row(&w, r, row);
        for (int c = 0; c < E; c++)
            m->fc_data[(size_t)c * D + r] = row[c];
    }
    free(row);
    m->fc = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { D, E }, .data = m->fc_data };
    m->soft_norm = get_vec(l, "mm.soft_emb_norm.weight", D, 1, true);
    return l->rc;
}

/* Every qwen2vl preprocessing parameter, image and video, as one hash. */
static void qwen_preprocess_hash(struct vision_info *in)
{
    const int64_t pp[] = { in->family, in->patch_size, in->merge_size, in->min_pixels, in->max_pixels,
                           in->video_min_pixels, in->video_max_pixels, in->video_total_pixels,
                           in->video_clip_budget };
    in->preprocess_hash = vision_hash(vision_hash(0x71776e32ULL, pp, sizeof pp), in->image_mean,
                                      sizeof in->image_mean + sizeof in->image_std);
}

int vision_model_set_video_limits(struct vision_model *m, int64_t min_pixels, int64_t max_pixels,
                                  int64_t total_pixels)
{
    struct vision_info *in = &m->info;
    if (in->family != VISION_QWEN2VL)
        return OMNI_OK;
    const int64_t lo = min_pixels > 0 ? min_pixels : in->video_min_pixels;
    const int64_t hi = max_pixels > 0 ? max_pixels : in->video_max_pixels;
    const int64_t unit = (int64_t)in->patch_size * in->merge_size * in->patch_size * in->merge_size;
    if (lo > hi || hi < unit)
        return OMNI_ERR_ARG;
    in->video_min_pixels = lo, in->video_max_pixels = hi;
    in->video_total_pixels = total_pixels < 0 ? 0 : total_pixels > 0 ? total_pixels : in->video_total_pixels;
    qwen_preprocess_hash(in);
    return OMNI_OK;
}

struct vision_model *vision_model_load(const char *path, char *err, size_t errlen)
{
    struct vision_model *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        return NULL;
    }
    struct loader l = { m, path, err, errlen, 0 };
    struct vision_info *in = &m->info;
    if (!(m->g = gguf_open(path, err, errlen)))
        goto fail;
    size_t len;
    const char *proj = gguf_get_str(m->g, "clip.projector_type", &len);
    bool llava_flag = false;
    gguf_get_bool(m->g, "clip.has_llava_projector", &llava_flag);
    if ((proj && len == 3 && !memcmp(proj, "mlp", 3)) || (!proj && llava_flag)) {
        in->family = VISION_LLAVA, in->projector = "mlp";
    } else if (proj && len == 8 && !memcmp(proj, "idefics3", 8)) {
        in->family = VISION_IDEFICS3, in->projector = "idefics3";
    } else if (proj && len == 6 && !memcmp(proj, "gemma3", 6)) {
        in->family = VISION_GEMMA3, in->projector = "gemma3";
    } else if (qwen2vl_is_projector(proj, len) || qwen3vl_is_projector(proj, len)) {
        if (qwen3vl_is_projector(proj, len) ? !(m->q3 = qwen3vl_load(m->g, path, in, err, errlen))
                                            : !(m->qv = qwen2vl_load(m->g, path, in, err, errlen)))
            goto fail;
        snprintf(m->marker, sizeof m->marker, "<|vision_start|><|image_pad|><|vision_end|>");
        in->file_hash = file_hash(path, &l);
        qwen_preprocess_hash(in);
        if (l.rc)
            goto fail;
        return m;
    } else {
        lfail(&l, OMNI_ERR_UNSUPPORTED, "clip.projector_type '%.*s' not supported (mlp, idefics3, gemma3, qwen2.5vl_merger, qwen3vl_merger)",
              proj ? (int)(len > 40 ? 40 : len) : 6, proj ? proj : "(none)");
        goto fail;
    }
    /* Gemma 3's chat template writes <start_of_image> where an image goes */
    snprintf(m->marker, sizeof m->marker, "%s", in->family == VISION_GEMMA3 ? "<start_of_image>" : "<image>");
    int n_block = 0;
    if (get_u32(&l, "clip.vision.embedding_length", &in->n_embd, true) ||
        get_u32(&l, "clip.vision.feed_forward_length", &m->n_ff, true) ||
        get_u32(&l, "clip.vision.block_count", &n_block, true) ||
        get_u32(&l, "clip.vision.attention.head_count", &in->n_head, true) ||
        get_u32(&l, "clip.vision.image_size", &in->image_size, true) ||
        get_u32(&l, "clip.vision.patch_size", &in->patch_size, true) ||
        get_f32_array3(&l, "clip.vision.image_mean", in->image_mean) ||
        get_f32_array3(&l, "clip.vision.image_std", in->image_std))
        goto fail;
    m->eps = 1e-6f;
    gguf_get_f32(m->g, "clip.vision.attention.layer_norm_epsilon", &m->eps);
    gguf_get_bool(m->g, "clip.use_gelu", &m->gelu);
    if (in->n_embd % in->n_head || in->image_size % in->patch_size || in->image_size > 4096) {
        lfail(&l, OMNI_ERR_FORMAT, "inconsistent sizes (embedding %d, heads %d, image %d, patch %d)",
              in->n_embd, in->n_head, in->image_size, in->patch_size);
        goto fail;
    }
    int side = in->image_size / in->patch_size;
    m->n_patches = side * side;
    in->scale_factor = 1;
    in->n_layer = n_block;
    if (in->family == VISION_LLAVA) {
        /* The projector reads the output of layer feature_layer (1-based); files
         * without the key hold one layer past it, as llama.cpp assumes. */
        enum gguf_type et;
        uint64_t n_fl;
        in->n_layer = n_block - 1;
        if (gguf_get_arr(m->g, "clip.vision.feature_layer", &et, &n_fl) == 0) {
            const uint8_t *p = gguf_get_arr_data(m->g, "clip.vision.feature_layer");
            int32_t v;
            if (n_fl != 1 || (et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32) || !p) {
                lfail(&l, OMNI_ERR_UNSUPPORTED, "clip.vision.feature_layer: only one layer is supported");
                goto fail;
            }
            memcpy(&v, p, 4);
            in->n_layer = v;
        }
        if (in->n_layer < 1 || in->n_layer > n_block) {
            lfail(&l, OMNI_ERR_FORMAT, "feature layer %d outside the %d blocks",
                  in->n_layer, n_block);
            goto fail;
        }
        in->tokens_per_image = m->n_patches;
    } else if (in->family == VISION_GEMMA3) {
        /* average pool of k x k patches (k = llama.cpp's projector.scale_factor,
         * 4 when absent: 64 x 64 patches of 896 px -> 256 tokens) */
        in->scale_factor = 4;
        if (get_u32(&l, "clip.vision.projector.scale_factor", &in->scale_factor, false))
            goto fail;
        in->longest_edge = in->image_size;
        if (side % in->scale_factor) {
            lfail(&l, OMNI_ERR_FORMAT, "patch grid %d not divisible by the pooling %d",
                  side, in->scale_factor);
            goto fail;
        }
        in->tokens_per_image = m->n_patches / (in->scale_factor * in->scale_factor);
    } else {
        in->scale_factor = 2;
        if (get_u32(&l, "clip.vision.projector.scale_factor", &in->scale_factor, false))
            goto fail;
        in->longest_edge = in->image_size;
        if (get_u32(&l, "clip.vision.preproc_image_size", &in->longest_edge, false))
            goto fail;
        if (side % in->scale_factor || in->longest_edge > 16384) {
            lfail(&l, OMNI_ERR_FORMAT, "patch grid %d not divisible by scale factor %d",
                  side, in->scale_factor);
            goto fail;
        }
        in->tokens_per_image = m->n_patches / (in->scale_factor * in->scale_factor);
    }
    const int D = in->n_embd, P = in->patch_size;
    const struct gguf_tensor *pe = find(&l, "v.patch_embd.weight", true);
    if (!pe)
        goto fail;
    if (pe->ne[0] * pe->ne[1] * pe->ne[2] != 3LL * P * P || pe->ne[3] * (pe->n_dims == 4) != D) {
        lfail(&l, OMNI_ERR_FORMAT, "tensor 'v.patch_embd.weight': not [%d x %d x 3 x %d]",
              P, P, D);
        goto fail;
    }
    m->patch = (struct omni_tensor){ .type = pe->type, .ne = { 3LL * P * P, D }, .data = pe->data };
    if (!ggml_row_size(pe->type, 3LL * P * P)) {
        lfail(&l, OMNI_ERR_UNSUPPORTED, "tensor 'v.patch_embd.weight': type %s", ggml_type_name(pe->type));
        goto fail;
    }
    m->patch_b = get_vec(&l, "v.patch_embd.bias", D, 1, false);
    if (in->family == VISION_LLAVA)
        m->cls = get_vec(&l, "v.class_embd", D, 1, true);
    m->n_pos = m->n_patches + (m->cls ? 1 : 0);
    m->pos = get_vec(&l, "v.position_embd.weight", D, m->n_pos, true);
    m->pre_w = get_vec(&l, "v.pre_ln.weight", D, 1, false);
    m->pre_b = get_vec(&l, "v.pre_ln.bias", D, 1, m->pre_w != NULL);
    if (in->family != VISION_LLAVA) {
        m->post_w = get_vec(&l, "v.post_ln.weight", D, 1, true);
        m->post_b = get_vec(&l, "v.post_ln.bias", D, 1, true);
    }
    if (l.rc || load_layers(&l))
        goto fail;
    if (in->family == VISION_GEMMA3) {
        if (load_gemma3_projector(&l) < 0)
            goto fail;
    } else {
    /* The output width comes from the projector's last matrix: files from
     * llama.cpp's LLaVA converter store CLIP's own projection width (768)
     * in clip.vision.projection_dim, not the language model's. */
    const struct gguf_tensor *last = find(&l, in->family == VISION_LLAVA ? "mm.2.weight" : "mm.model.fc.weight", true);
    const struct gguf_tensor *t0 = in->family == VISION_LLAVA ? find(&l, "mm.0.weight", true) : last;
    if (!last || !t0)
        goto fail;
    if (last->ne[1] < 1 || last->ne[1] > 65536 || t0->ne[1] < 1 || t0->ne[1] > 65536) {
        lfail(&l, OMNI_ERR_FORMAT, "projector output width %lld out of range", (long long)last->ne[1]);
        goto fail;
    }
    in->n_embd_lm = (int)last->ne[1];
    if (in->family == VISION_LLAVA) {
        int64_t mid = t0->ne[1];
        if (get_mat(&l, "mm.0.weight", D, mid, &m->mm0, true) ||
            get_mat(&l, "mm.2.weight", mid, in->n_embd_lm, &m->mm2, true))
            goto fail;
        m->mm0_b = get_vec(&l, "mm.0.bias", mid, 1, false);
        m->mm2_b = get_vec(&l, "mm.2.bias", in->n_embd_lm, 1, false);
    } else if (get_mat(&l, "mm.model.fc.weight", (int64_t)D * in->scale_factor * in->scale_factor,
                       in->n_embd_lm, &m->fc, true)) {
        goto fail;
    }
    }
    if (l.rc)
        goto fail;
    in->file_hash = file_hash(path, &l);
    if (l.rc)
        goto fail;
    int pp[] = { in->family, in->image_size, in->patch_size, in->scale_factor, in->longest_edge };
    in->preprocess_hash = vision_hash(vision_hash(0x70726570ULL, pp, sizeof pp), in->image_mean,
                                      sizeof in->image_mean + sizeof in->image_std);
    return m;
fail:
    vision_model_free(m);
    return NULL;
}

const struct vision_info *vision_model_info(const struct vision_model *m) { return &m->info; }

const char *vision_image_marker(const struct vision_model *m) { return m->marker; }

// ---- scratch ---------------------------------------------------------------------

void vision_ctx_free(struct vision_ctx *c)
{
    if (!c)
        return;
    float *v[] = { c->patches, c->x, c->h, c->q, c->k, c->v, c->att, c->scores, c->ff, c->shuf };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    free(c);
}

struct vision_ctx *vision_ctx_new(const struct vision_model *m, struct tpool *tp, char *err,
                                  size_t errlen)
{
    struct vision_ctx *c = calloc(1, sizeof *c);
    if (!c)
        goto oom;
    c->m = m, c->tp = tp;
    if (m->qv || m->q3)
        return c; /* qwen2vl_encode sizes its scratch per image */
    const struct vision_info *in = &m->info;
    const size_t n = (size_t)m->n_pos, D = (size_t)in->n_embd;
    /* idefics3's pixel shuffle gathers scale^2 patches per row; gemma3's pool one row of D */
    const size_t s2 = in->family == VISION_GEMMA3 ? 1 : (size_t)in->scale_factor * in->scale_factor;
    size_t wide = (size_t)m->n_ff;
    if (m->mm0.type >= 0 && (size_t)m->mm0.ne[1] > wide)
        wide = (size_t)m->mm0.ne[1];
    if ((size_t)in->n_embd_lm > wide)
        wide = (size_t)in->n_embd_lm;
    c->patches = malloc(sizeof(float) * (size_t)m->n_patches * 3 * in->patch_size * in->patch_size);
    float **nd[] = { &c->x, &c->h, &c->q, &c->k, &c->v, &c->att };
    for (size_t j = 0; j < sizeof nd / sizeof *nd; j++)
        *nd[j] = malloc(sizeof(float) * n * D);
    c->scores = malloc(sizeof(float) * n * n * (size_t)(tp ? tpool_size(tp) : 1));
    c->ff = malloc(sizeof(float) * n * wide);
    c->shuf = malloc(sizeof(float) * (size_t)in->tokens_per_image * D * s2);
    if (!c->patches || !c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->scores || !c->ff || !c->shuf)
        goto oom;
    return c;
oom:
    vision_ctx_free(c);
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory for encoder scratch");
    return NULL;
}

// ---- forward -----------------------------------------------------------------------

static void layer_norm(float *x, const float *w, const float *b, int n_rows, int n, float eps,
                       float *out)
{
    omni_layer_norm_rows(x, w, b, n_rows, n, eps, out);
}

static void add_bias(float *y, const float *b, int n_rows, int n)
{
    if (b)
        for (int r = 0; r < n_rows; r++)
            for (int i = 0; i < n; i++)
                y[(size_t)r * n + i] += b[i];
}

static void linear(struct vision_ctx *c, const struct omni_tensor *w, const float *b,
                   const float *x, int n_rows, float *y)
{
    omni_matmul(c->tp, w, x, n_rows, y);
    add_bias(y, b, n_rows, (int)w->ne[1]);
}

/* The MLP's GELU in place over n values, split across the pool: the tanh
 * form or the quick one, x sigmoid(1.702 x) (ops.h). */
struct gelu_job {
    float *y;
    size_t n;
    bool tanh_form;
};

static void gelu_worker(void *arg, int ith, int nth)
{
    const struct gelu_job *j = arg;
    const struct omni_ops *op = omni_ops();
    const size_t per = (j->n + (size_t)nth - 1) / (size_t)nth, from = (size_t)ith * per;
    const size_t to = from + per < j->n ? from + per : j->n;
    if (from >= to)
        return;
    if (j->tanh_form)
        op->gelu_tanh(j->y + from, (int64_t)(to - from));
    else
        op->gelu_quick(j->y + from, (int64_t)(to - from));
}

static void gelu_rows(struct vision_ctx *c, float *y, size_t n, bool tanh_form)
{
    struct gelu_job j = { y, n, tanh_form };
    if (c->tp)
        tpool_run(c->tp, gelu_worker, &j);
    else
        gelu_worker(&j, 0, 1);
}

struct attn_job {
    struct vision_ctx *c;
    int n;
};

/* softmax(Q K^T / sqrt(d)) V for heads ith, ith + nth, ...: strided sgemm
 * calls straight on the [n][n_embd] Q/K/V rows (no per-head copies), one
 * score matrix per thread; att = the heads side by side. */
static void attention_heads(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    struct vision_ctx *c = j->c;
    const int n = j->n, D = c->m->info.n_embd, H = c->m->info.n_head, dh = D / H;
    const float scale = 1.0f / sqrtf((float)dh);
    float *scores = c->scores + (size_t)ith * n * n;
    for (int hd = ith; hd < H; hd += nth) {
        const float *q = c->q + hd * dh, *k = c->k + hd * dh, *v = c->v + hd * dh;
        omni_attn_dense(q, k, v, c->att + hd * dh, (size_t)D, n, n, dh, scale, scores, NULL, NULL);
    }
}

static void attention(struct vision_ctx *c, int n)
{
    struct attn_job j = { c, n };
    if (c->tp)
        tpool_run(c->tp, attention_heads, &j);
    else
        attention_heads(&j, 0, 1);
}

/* One image plane [3][S][S] through the ViT; leaves the tokens in c->x and
 * returns the index of the first patch token (after a class token). */
static int vit_forward(struct vision_ctx *c, const float *plane)
{
    const struct vision_model *m = c->m;
    const int D = m->info.n_embd, P = m->info.patch_size, S = m->info.image_size, side = S / P;
    const int n = m->n_pos, first = m->cls ? 1 : 0, F = m->n_ff;
    // patch embedding: the conv kernel as a matrix over (channel, ky, kx)
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *row = c->patches + (size_t)(py * side + px) * 3 * P * P;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(row + (ch * P + ky) * P,
                           plane + ((size_t)ch * S + py * P + ky) * S + px * P, sizeof(float) * P);
        }
    linear(c, &m->patch, m->patch_b, c->patches, m->n_patches, c->x + (size_t)first * D);
    if (m->cls)
        memcpy(c->x, m->cls, sizeof(float) * D);
    // position embeddings, pre-norm
    for (size_t i = 0; i < (size_t)n * D; i++)
        c->x[i] += m->pos[i];
    if (m->pre_w)
        layer_norm(c->x, m->pre_w, m->pre_b, n, D, m->eps, c->x);
    for (int l = 0; l < m->info.n_layer; l++) {
        const struct clip_layer *L = &m->layers[l];
        // attention block: x += out(attn(ln1(x)))
        layer_norm(c->x, L->ln1_w, L->ln1_b, n, D, m->eps, c->h);
        linear(c, &L->q, L->q_b, c->h, n, c->q);
        linear(c, &L->k, L->k_b, c->h, n, c->k);
        linear(c, &L->v, L->v_b, c->h, n, c->v);
        attention(c, n);
        linear(c, &L->o, L->o_b, c->att, n, c->h);
        for (size_t i = 0; i < (size_t)n * D; i++)
            c->x[i] += c->h[i];
        // MLP block: x += down(act(up(ln2(x))))
        layer_norm(c->x, L->ln2_w, L->ln2_b, n, D, m->eps, c->h);
        linear(c, &L->up, L->up_b, c->h, n, c->ff);
        gelu_rows(c, c->ff, (size_t)n * F, m->gelu);
        linear(c, &L->down, L->down_b, c->ff, n, c->h);
        for (size_t i = 0; i < (size_t)n * D; i++)
            c->x[i] += c->h[i];
    }
    if (m->post_w)
        layer_norm(c->x, m->post_w, m->post_b, n, D, m->eps, c->x);
    return first;
}

/* Gemma 3: token (i2, j2) = the mean of the k x k patches below it (an
 * AvgPool2d over the [D][side][side] grid, tokens in raster order), then
 * RMSNorm with the stored gain, then the projection. */
static void project_gemma3(struct vision_ctx *c, const float *feat, float *out)
{
    const struct vision_model *m = c->m;
    const int D = m->info.n_embd, k = m->info.scale_factor, side = m->info.image_size / m->info.patch_size;
    const int so = side / k;
    const float inv = 1.0f / (float)(k * k);
    const struct omni_ops *op = omni_ops();
    for (int i2 = 0; i2 < so; i2++)
        for (int j2 = 0; j2 < so; j2++) {
            float *dst = c->shuf + (size_t)(i2 * so + j2) * D;
            memset(dst, 0, sizeof(float) * D);
            for (int di = 0; di < k; di++)
                for (int dj = 0; dj < k; dj++) {
                    const float *src = feat + ((size_t)(i2 * k + di) * side + j2 * k + dj) * D;
                    for (int d = 0; d < D; d++)
                        dst[d] += src[d];
                }
            for (int d = 0; d < D; d++)
                dst[d] *= inv;
            op->rmsnorm(dst, dst, m->soft_norm, D, m->eps);
        }
    linear(c, &m->fc, NULL, c->shuf, so * so, out);
}

/* Features [n_patches][D] -> rows [tokens_per_image][n_embd_lm]. */
static void project(struct vision_ctx *c, const float *feat, float *out)
{
    const struct vision_model *m = c->m;
    const int D = m->info.n_embd;
    if (m->info.family == VISION_LLAVA) {
        // linear_1, GELU (erf form, as the HF projector), linear_2
        const int mid = (int)m->mm0.ne[1];
        linear(c, &m->mm0, m->mm0_b, feat, m->n_patches, c->ff);
        omni_gelu_erf(c->ff, (int64_t)m->n_patches * mid);
        linear(c, &m->mm2, m->mm2_b, c->ff, m->n_patches, out);
        return;
    }
    if (m->info.family == VISION_GEMMA3) {
        project_gemma3(c, feat, out);
        return;
    }
    // pixel shuffle: token (i2, j2) gathers the s x s block below it,
    // out[i2][j2][(di * s + dj) * D + d] = x[i2 * s + di][j2 * s + dj][d]
    const int s = m->info.scale_factor, side = m->info.image_size / m->info.patch_size;
    const int so = side / s;
    for (int i2 = 0; i2 < so; i2++)
        for (int j2 = 0; j2 < so; j2++)
            for (int di = 0; di < s; di++)
                for (int dj = 0; dj < s; dj++)
                    memcpy(c->shuf + ((size_t)(i2 * so + j2) * s * s + di * s + dj) * D,
                           feat + ((size_t)(i2 * s + di) * side + j2 * s + dj) * D,
                           sizeof(float) * D);
    linear(c, &m->fc, NULL, c->shuf, so * so, out);
}

int vision_encode_pixels(struct vision_ctx *c, const float *pixels, int n_images, float *features,
                         struct vision_embd *out, char *err, size_t errlen)
{
    const struct vision_model *m = c->m;
    const struct vision_info *in = &m->info;
    const size_t plane = (size_t)3 * in->image_size * in->image_size;
    const size_t rows = (size_t)in->tokens_per_image;
    memset(out, 0, sizeof *out);
    if (m->qv || m->q3)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: qwen2vl images go through vision_encode_image");
    if (n_images < 1 || n_images > 1024)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %d images per encode", n_images);
    out->data = malloc(sizeof(float) * rows * n_images * in->n_embd_lm);
    if (!out->data)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory for embeddings");
    out->n_tokens = (int)rows * n_images;
    out->n_embd = in->n_embd_lm;
    out->n_images = n_images;
    for (int i = 0; i < n_images; i++) {
        /* One image (or tile) is one unit of the pool's compute budget, if
         * it has one: engine steps and speech passes get their turn between
         * the tiles of a large image. */
        if (tpool_begin(c->tp, false) < 0) {
            free(out->data);
            memset(out, 0, sizeof *out);
            return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: shutting down");
        }
        int first = vit_forward(c, pixels + plane * i);
        const float *feat = c->x + (size_t)first * in->n_embd;
        if (features)
            memcpy(features + (size_t)i * m->n_patches * in->n_embd, feat,
                   sizeof(float) * m->n_patches * in->n_embd);
        project(c, feat, out->data + rows * i * in->n_embd_lm);
        tpool_end(c->tp);
    }
    return OMNI_OK;
}

int vision_encode_image(struct vision_ctx *c, const struct media_image *img, bool tiles,
                        struct vision_embd *out, char *err, size_t errlen)
{
    float *pixels;
    int n_images, rows, cols;
    memset(out, 0, sizeof *out);
    int rc = vision_preprocess(c->m, img, tiles, &pixels, &n_images, &rows, &cols, err, errlen);
    if (rc < 0)
        return rc;
    if (c->m->q3) {
        const struct qwen2vl_image qi = { pixels, rows, cols, 1 };
        rc = qwen3vl_encode_batch(c->m->q3, c->tp, &qi, 1, NULL, NULL, NULL, out, err, errlen);
        free(pixels);
        return rc;
    }
    if (c->m->qv) {
        rc = qwen2vl_encode(c->m->qv, c->tp, pixels, rows, cols, NULL, out, err, errlen);
        free(pixels);
        return rc;
    }
    rc = vision_encode_pixels(c, pixels, n_images, NULL, out, err, errlen);
    free(pixels);
    out->tile_rows = rows, out->tile_cols = cols;
    return rc;
}

/* One image's planes, a pass each (so a cancel is seen between tiles). */
static int encode_planes(struct vision_ctx *c, const struct vision_input *in,
                         int (*cancelled)(void *user), void *user, struct vision_embd *out,
                         char *err, size_t errlen)
{
    const struct vision_info *vi = &c->m->info;
    const size_t plane = (size_t)3 * vi->image_size * vi->image_size;
    const size_t rows = (size_t)vi->tokens_per_image * vi->n_embd_lm;
    if (in->n_images < 1 || in->n_images > 1024)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %d images per encode", in->n_images);
    if (!(out->data = malloc(sizeof(float) * rows * in->n_images)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory for embeddings");
    for (int t = 0; t < in->n_images; t++) {
        struct vision_embd one;
        int rc = cancelled && cancelled(user)
                     ? omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: the encode was cancelled")
                     : vision_encode_pixels(c, in->pixels + plane * t, 1, NULL, &one, err, errlen);
        if (rc < 0)
            return rc; /* the caller frees out */
        memcpy(out->data + rows * t, one.data, sizeof(float) * rows);
        vision_embd_release(&one);
    }
    out->n_tokens = vi->tokens_per_image * in->n_images;
    out->n_embd = vi->n_embd_lm;
    out->n_images = in->n_images;
    out->tile_rows = in->tile_rows, out->tile_cols = in->tile_cols;
    return OMNI_OK;
}

int vision_encode_batch(struct vision_ctx *c, const struct vision_input *in, int n,
                        int (*cancelled)(void *user), void *user, struct vision_embd *outs,
                        char *err, size_t errlen)
{
    enum { PASS_MAX = 64 };
    int rc = OMNI_OK;
    for (int i = 0; i < n; i++)
        memset(&outs[i], 0, sizeof outs[i]);
    for (int i = 0; i < n && rc >= 0;) {
        if (!c->m->qv && !c->m->q3) {
            rc = encode_planes(c, &in[i], cancelled, user, &outs[i], err, errlen);
            i++;
            continue;
        }
        /* as many images as one pass holds */
        struct qwen2vl_image qi[PASS_MAX];
        int k = 0;
        int64_t rows = 0;
        while (i + k < n && k < PASS_MAX) {
            const int64_t r = (int64_t)in[i + k].tile_rows * in[i + k].tile_cols;
            if (k && rows + r > QWEN2VL_MAX_BATCH_PATCHES)
                break;
            qi[k] = (struct qwen2vl_image){ in[i + k].pixels, in[i + k].tile_rows, in[i + k].tile_cols,
                                            in[i + k].frames };
            rows += r, k++;
        }
        rc = c->m->q3 ? qwen3vl_encode_batch(c->m->q3, c->tp, qi, k, cancelled, user, NULL, outs + i, err, errlen)
                      : qwen2vl_encode_batch(c->m->qv, c->tp, qi, k, cancelled, user, NULL, outs + i, err, errlen);
        i += k;
    }
    if (rc < 0)
        for (int i = 0; i < n; i++)
            vision_embd_release(&outs[i]);
    return rc;
}

int vision_encode_bytes(struct vision_ctx *c, struct vision_cache *cache, const void *data,
                        size_t len, const struct media_image_params *ip, struct vision_embd *out,
                        bool *hit, char *err, size_t errlen)
{
    uint64_t key = vision_cache_key(c->m, data, len);
    memset(out, 0, sizeof *out);
    if (hit)
        *hit = false;
    if (cache && vision_cache_get(cache, key, out)) {
        if (hit)
            *hit = true;
        return OMNI_OK;
    }
    double t0 = omni_time_s();
    struct media_image img;
    int rc = media_image_decode(data, len, ip, &img, err, errlen);
    if (rc < 0)
        return rc;
    rc = vision_encode_image(c, &img, true, out, err, errlen);
    media_image_release(&img);
    if (rc < 0)
        return rc;
    out->key_hash = key;
    if (cache)
        vision_cache_put(cache, key, out, (omni_time_s() - t0) * 1e3);
    return OMNI_OK;
}

int vision_encode_video(struct vision_ctx *c, struct vision_cache *cache, const void *data,
                        size_t len, const struct media_video_params *vp, struct vision_embd **frames,
                        int *n_frames, double **times_s, int *n_hits, char *err, size_t errlen)
{
    struct media_video_params def = media_video_default_params();
    struct media_video_frames v;
    if (!vp)
        vp = &def;
    *frames = NULL, *n_frames = 0;
    if (times_s)
        *times_s = NULL;
    if (n_hits)
        *n_hits = 0;
    int rc = media_video_sample(data, len, vp, &v, err, errlen);
    if (rc < 0)
        return rc;
    struct vision_embd *out = calloc((size_t)v.n_frames, sizeof *out);
    if (!out) {
        media_video_frames_release(&v);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    }
    /* the clip's key, then one per frame: index and sampling settings */
    uint64_t base = vision_cache_key(c->m, data, len);
    int i;
    for (i = 0; i < v.n_frames; i++) {
        struct { uint64_t base; int index, max_frames; double fps; } k = { base, i, vp->max_frames, vp->fps };
        uint64_t key = vision_hash(0x766964656fULL, &k, sizeof k);
        if (cache && vision_cache_get(cache, key, &out[i])) {
            if (n_hits)
                ++*n_hits;
            continue;
        }
        double t0 = omni_time_s();
        if ((rc = vision_encode_image(c, &v.frames[i], false, &out[i], err, errlen)) < 0)
            break;
        out[i].key_hash = key;
        if (cache)
            vision_cache_put(cache, key, &out[i], (omni_time_s() - t0) * 1e3);
    }
    if (rc < 0) {
        for (int j = 0; j < i; j++)
            vision_embd_release(&out[j]);
        free(out);
    } else {
        *frames = out, *n_frames = v.n_frames;
        if (times_s && (*times_s = malloc(sizeof **times_s * v.n_frames)))
            memcpy(*times_s, v.time_s, sizeof **times_s * v.n_frames);
    }
    media_video_frames_release(&v);
    return rc;
}

void vision_embd_release(struct vision_embd *e)
{
    if (!e)
        return;
    free(e->data);
    memset(e, 0, sizeof *e);
}

// ---- prompt layout ------------------------------------------------------------------

void vision_layout_release(struct vision_layout *l)
{
    if (!l)
        return;
    free(l->seg);
    free(l->storage);
    memset(l, 0, sizeof *l);
}

int vision_layout_build(const struct vision_model *m, const struct vision_embd *e,
                        struct vision_layout *out, char *err, size_t errlen)
{
    const int per = m->qv || m->q3 ? e->n_tokens : m->info.tokens_per_image;
    const int R = m->qv || m->q3 ? 0 : e->tile_rows, C = e->tile_cols;
    memset(out, 0, sizeof *out);
    if (e->n_tokens != per * e->n_images || (m->info.family == VISION_IDEFICS3 && R * C + 1 != e->n_images) ||
        ((m->info.family == VISION_LLAVA || m->info.family == VISION_GEMMA3) && e->n_images != 1))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: embeddings do not match the model");
    const int max_seg = 2 * e->n_images + R + 2;
    out->seg = calloc((size_t)max_seg, sizeof *out->seg);
    out->storage = malloc((size_t)max_seg * 64);
    if (!out->seg || !out->storage) {
        vision_layout_release(out);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    }
    char *p = out->storage;
#define TEXT(...) (out->seg[out->n++].text = p, p += sprintf(p, __VA_ARGS__) + 1)
#define ROWS(r0) (out->seg[out->n].row0 = (r0), out->seg[out->n++].n_rows = per)
    if (m->info.family == VISION_LLAVA) {
        ROWS(0);
        return OMNI_OK;
    }
    if (m->info.family == VISION_GEMMA3) { /* as Gemma3Processor expands <start_of_image> */
        TEXT("\n\n<start_of_image>");
        ROWS(0);
        TEXT("<end_of_image>\n\n");
        return OMNI_OK;
    }
    if (m->qv || m->q3) { /* the marker's <|image_pad|> becomes the rows */
        TEXT("<|vision_start|>");
        ROWS(0);
        TEXT("<|vision_end|>");
        return OMNI_OK;
    }
    const char *fake = "<fake_token_around_image>";
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C; c++) {
            TEXT("%s<row_%d_col_%d>", fake, r + 1, c + 1);
            ROWS((r * C + c) * per);
        }
        TEXT("\n");
    }
    TEXT("%s%s<global-img>", R ? "\n" : "", fake);
    ROWS(R * C * per);
    TEXT("%s", fake);
#undef TEXT
#undef ROWS
    return OMNI_OK;
}
