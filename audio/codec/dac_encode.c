/* dac_encode.c - the DAC encoder (dac_encode.h): GGUF loading, the conv
 * stack over whole-signal activations with each convolution run in time
 * tiles, and the residual vector quantizer.
 *
 * Activations are time-major ([t][channels]) as in the decoder. A tile's
 * input is copied with its halo (zeros past either end, torch's padding), so
 * the im2col scratch stays small for a 20 s reference at 24 kHz. The
 * strided convs (k 2s, stride s) need no strided kernel: with the padded
 * input seen as rows of s steps ([t/s][s * C]), the conv is a stride-1 conv
 * of kernel 2 over those rows with the same packed weights ([c_out][2s][C]
 * is [c_out][2][s * C]). */
#include "audio/codec/dac_encode.h"

#include "audio/codec/dac_conv.h"

#include "src/core/conv1d.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DACE_MAX_BLOCKS 8
#define DACE_MAX_CODEBOOKS 64
#define DACE_TILE 2048   /* output steps of a convolution per tile (default) */

struct dace_block {
    struct dac_res_unit res[3];          /* on c_in channels */
    float *alpha;                    /* [c_in] */
    struct omni_conv1d down;         /* stride-1 form: c_in = stride * C, k 2, no pad */
    int stride, pad, c_in, c_out;    /* torch's conv: k 2*stride, padding ceil(stride/2) */
};

struct dace_vq {
    struct omni_conv1d in_proj;      /* hidden -> dim, k1 */
    float *codebook;                 /* [size][dim] */
    float *unit;                     /* [size][dim]: L2-normalized entries */
    double *unit_sq;                 /* [size]: |unit|^2 (1 up to rounding; transformers adds it) */
    struct omni_conv1d out_proj;     /* dim -> hidden, k1 */
};

struct dac_encoder {
    struct dac_encoder_info info;
    int codebook_dim;
    struct omni_conv1d conv_in;      /* 1 -> C0, k7 */
    struct dace_block blocks[DACE_MAX_BLOCKS];
    float *alpha_out;                /* [d_model] */
    struct omni_conv1d conv_out;     /* d_model -> hidden, k3 */
    struct dace_vq vq[DACE_MAX_CODEBOOKS];
    int tile;                        /* output steps per conv tile */
    struct dac_weights w;            /* every array above, for dac_encoder_free */
};

const struct dac_encoder_info *dac_encoder_get_info(const struct dac_encoder *m)
{
    return &m->info;
}

void dac_encoder_set_tile(struct dac_encoder *m, int steps)
{
    m->tile = steps >= 1 ? steps : DACE_TILE;
}

void dac_encoder_free(struct dac_encoder *m)
{
    if (!m)
        return;
    dac_weights_free(&m->w);
    free(m);
}

int64_t dac_encoder_frames(const struct dac_encoder *m, int64_t n)
{
    for (int i = 0; i < m->info.n_blocks && n > 0; i++) {
        const struct dace_block *B = &m->blocks[i];
        int64_t span = n + 2 * B->pad - 2 * B->stride;
        n = span < 0 ? 0 : span / B->stride + 1;
    }
    return n > 0 ? n : 0;
}

// ---- loading ----

struct dac_encoder *dac_encoder_load(const char *path, char *err, size_t errlen)
{
    struct gguf *g = gguf_open(path, err, errlen);
    if (!g)
        return NULL;
    struct dac_encoder *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
        goto fail;
    }
    m->w.missing_hint = "a DAC GGUF converted with its encoder: tools/hf_dac_to_gguf.py without "
                        "--no-encoder";
    if (dac_check_arch(g, path, err, errlen))
        goto fail;
    m->tile = DACE_TILE;
    struct dac_encoder_info *I = &m->info;
    if (dac_get_u32(g, "dac.sampling_rate", &I->sample_rate, err, errlen) ||
        dac_get_u32(g, "dac.hidden_size", &I->hidden_size, err, errlen) ||
        dac_get_u32(g, "dac.n_codebooks", &I->n_codebooks, err, errlen) ||
        dac_get_u32(g, "dac.codebook_size", &I->codebook_size, err, errlen) ||
        dac_get_u32(g, "dac.codebook_dim", &m->codebook_dim, err, errlen))
        goto fail;
    if (I->n_codebooks > DACE_MAX_CODEBOOKS) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: dac.n_codebooks %d over %d", path,
                  I->n_codebooks, DACE_MAX_CODEBOOKS);
        goto fail;
    }
    enum gguf_type et;
    uint64_t nr = 0;
    const void *rp = gguf_get_arr_data(g, "dac.downsampling_ratios");
    if (gguf_get_arr(g, "dac.downsampling_ratios", &et, &nr) != 0 || !rp ||
        (et != GGUF_TYPE_UINT32 && et != GGUF_TYPE_INT32) || nr == 0 || nr > DACE_MAX_BLOCKS) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: key 'dac.downsampling_ratios' missing "
                  "or not 1..%d integers (needed to encode)", path, DACE_MAX_BLOCKS);
        goto fail;
    }
    /* the first conv's width: the key when the converter wrote it, else the tensor */
    uint32_t ehs = 0;
    const struct gguf_tensor *c1 = gguf_find_tensor(g, "encoder.conv1.weight");
    if (gguf_get_u32(g, "dac.encoder_hidden_size", &ehs) != 0)
        ehs = c1 && c1->n_dims == 3 ? (uint32_t)c1->ne[2] : 0;
    if (!c1 || ehs == 0 || ehs > 4096) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: no encoder (tensor "
                  "'encoder.conv1.weight' missing: converted with --no-encoder?)", path);
        goto fail;
    }
    I->encoder_hidden_size = (int)ehs;
    I->n_blocks = (int)nr;
    I->hop = 1;
    int c = I->encoder_hidden_size;
    if (dac_load_conv(&m->w, g, "encoder.conv1", 1, c, 7, 1, &m->conv_in, err, errlen))
        goto fail;
    for (int i = 0; i < I->n_blocks; i++) {
        uint32_t s;
        memcpy(&s, (const char *)rp + 4 * i, 4);
        if (s == 0 || s > 64 || c > (1 << 16)) {
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: downsampling ratio %u of block "
                      "%d out of range", path, s, i);
            goto fail;
        }
        I->hop *= (int)s;
        struct dace_block *B = &m->blocks[i];
        char p[48], q[128];
        snprintf(p, sizeof p, "encoder.block.%d", i);
        for (int j = 0; j < 3; j++)
            if (dac_load_res_unit(&m->w, g, p, j, c, &B->res[j], err, errlen))
                goto fail;
        snprintf(q, sizeof q, "%s.snake1", p);
        if (!(B->alpha = dac_load_alpha(&m->w, g, q, c, err, errlen)))
            goto fail;
        snprintf(q, sizeof q, "%s.conv1", p);
        if (dac_load_conv(&m->w, g, q, c, 2 * c, 2 * (int)s, 1, &B->down, err, errlen))
            goto fail;
        /* the packed [2c][2s][c] weight read as [2c][2][s * c] */
        B->down.c_in = (int)s * c;
        B->down.k = 2;
        B->down.pad = 0;
        B->stride = (int)s;
        B->pad = ((int)s + 1) / 2;
        B->c_in = c;
        B->c_out = 2 * c;
        c *= 2;
    }
    int H = I->hidden_size, D = m->codebook_dim, K = I->codebook_size;
    if (!(m->alpha_out = dac_load_alpha(&m->w, g, "encoder.snake1", c, err, errlen)) ||
        dac_load_conv(&m->w, g, "encoder.conv2", c, H, 3, 1, &m->conv_out, err, errlen))
        goto fail;
    for (int q = 0; q < I->n_codebooks; q++) {
        struct dace_vq *V = &m->vq[q];
        char p[64], name[160];
        snprintf(p, sizeof p, "quantizer.quantizers.%d", q);
        snprintf(name, sizeof name, "%s.in_proj", p);
        if (dac_load_conv(&m->w, g, name, H, D, 1, 1, &V->in_proj, err, errlen))
            goto fail;
        snprintf(name, sizeof name, "%s.out_proj", p);
        if (dac_load_conv(&m->w, g, name, D, H, 1, 1, &V->out_proj, err, errlen))
            goto fail;
        snprintf(name, sizeof name, "%s.codebook.weight", p);
        if (!(V->codebook = dac_load_tensor(&m->w, g, name, 2, (int64_t[]){ K, D }, err, errlen)))
            goto fail;
        V->unit = dac_weights_alloc(&m->w, (size_t)K * D * sizeof(float));
        V->unit_sq = dac_weights_alloc(&m->w, (size_t)K * sizeof(double));
        if (!V->unit || !V->unit_sq) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
            goto fail;
        }
        for (int k = 0; k < K; k++) {   /* F.normalize: x / max(|x|, 1e-12) */
            const float *e = V->codebook + (size_t)k * D;
            double ss = 0, us = 0;
            for (int d = 0; d < D; d++)
                ss += (double)e[d] * e[d];
            double nrm = fmax(sqrt(ss), 1e-12);
            for (int d = 0; d < D; d++) {
                float u = (float)(e[d] / nrm);
                V->unit[(size_t)k * D + d] = u;
                us += (double)u * u;
            }
            V->unit_sq[k] = us;
        }
    }
    gguf_free(g);
    return m;
fail:
    dac_encoder_free(m);
    gguf_free(g);
    return NULL;
}

// ---- the conv stack ----

struct dace_work {
    int tile;            /* output steps per tile */
    float *tin;          /* a tile's input with its halo */
    float *scratch;      /* a tile's conv scratch */
    size_t tin_cap, scratch_cap;
};

static int work_fit(float **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    float *p = realloc(*buf, n * sizeof(float));
    if (!p)
        return OMNI_ERR_NOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

/* y[t][c_out] (+)= conv(x[t][c_in]) with c's padding, a tile at a time. */
static int conv_tiled(struct tpool *tp, const struct omni_conv1d *c, const float *x, int64_t t,
                      float *y, bool accumulate, struct dace_work *w)
{
    int reach = (c->k - 1) * c->dilation;
    struct omni_conv1d v = *c;
    v.pad = 0;
    for (int64_t a = 0; a < t; a += w->tile) {
        int64_t b = a + w->tile < t ? a + w->tile : t, rows = b - a + reach;
        if (work_fit(&w->tin, &w->tin_cap, (size_t)rows * c->c_in) ||
            work_fit(&w->scratch, &w->scratch_cap, omni_conv1d_scratch(&v, rows, accumulate)))
            return OMNI_ERR_NOMEM;
        for (int64_t r = 0; r < rows; r++) {
            int64_t src = a - c->pad + r;
            float *dst = w->tin + (size_t)r * c->c_in;
            if (src < 0 || src >= t)
                memset(dst, 0, (size_t)c->c_in * sizeof *dst);
            else
                memcpy(dst, x + (size_t)src * c->c_in, (size_t)c->c_in * sizeof *dst);
        }
        int rc = omni_conv1d_run(tp, &v, w->tin, rows, w->scratch, y + (size_t)a * c->c_out,
                                 accumulate);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* y[t_out][2C] = the block's strided conv of x[t][C] (torch's k 2s, stride
 * s, padding p), as a stride-1 conv of kernel 2 over rows of s steps. */
static int down_tiled(struct tpool *tp, const struct dace_block *B, const float *x, int64_t t,
                      int64_t t_out, float *y, struct dace_work *w)
{
    int s = B->stride, C = B->c_in;
    for (int64_t a = 0; a < t_out; a += w->tile) {
        int64_t b = a + w->tile < t_out ? a + w->tile : t_out, rows = b - a + 1;
        if (work_fit(&w->tin, &w->tin_cap, (size_t)rows * s * C) ||
            work_fit(&w->scratch, &w->scratch_cap, omni_conv1d_scratch(&B->down, rows, false)))
            return OMNI_ERR_NOMEM;
        for (int64_t r = 0; r < rows; r++)
            for (int j = 0; j < s; j++) {
                int64_t src = (a + r) * s + j - B->pad;
                float *dst = w->tin + ((size_t)r * s + j) * C;
                if (src < 0 || src >= t)
                    memset(dst, 0, (size_t)C * sizeof *dst);
                else
                    memcpy(dst, x + (size_t)src * C, (size_t)C * sizeof *dst);
            }
        int rc = omni_conv1d_run(tp, &B->down, w->tin, rows, w->scratch, y + (size_t)a * B->c_out,
                                 false);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* x += conv2(snake2(conv1(snake1(x)))), x [t][c]; a, b: [t][c] temporaries */
static int res_unit(struct tpool *tp, const struct dac_res_unit *R, float *x, int64_t t, int c,
                    float *a, float *b, struct dace_work *w)
{
    omni_snake(tp, x, t, c, R->alpha1, a);
    int rc = conv_tiled(tp, &R->conv1, a, t, b, false, w);
    if (rc < 0)
        return rc;
    omni_snake(tp, b, t, c, R->alpha2, b);
    return conv_tiled(tp, &R->conv2, b, t, x, true, w);
}

/* The nearest entry of codebook V for e[0..D) by transformers' rule. */
static int vq_nearest(const struct dace_vq *V, int K, int D, const float *e)
{
    double ss = 0;
    for (int d = 0; d < D; d++)
        ss += (double)e[d] * e[d];
    double nrm = fmax(sqrt(ss), 1e-12), ee = 0;
    float u[256];
    for (int d = 0; d < D; d++) {
        u[d] = (float)(e[d] / nrm);
        ee += (double)u[d] * u[d];
    }
    int best = 0;
    double best_s = -INFINITY;
    for (int k = 0; k < K; k++) {
        const float *c = V->unit + (size_t)k * D;
        double dot = 0;
        for (int d = 0; d < D; d++)
            dot += (double)u[d] * c[d];
        double s = -(ee - 2 * dot) + V->unit_sq[k];
        if (s > best_s) {   /* the first of equal scores, as torch's max */
            best_s = s;
            best = k;
        }
    }
    return best;
}

int dac_encode(const struct dac_encoder *m, struct tpool *tp, const float *pcm, int64_t n,
               int n_q, int32_t **codes, int64_t *n_frames, float **latent, char *err,
               size_t errlen)
{
    *codes = NULL;
    *n_frames = 0;
    if (latent)
        *latent = NULL;
    const struct dac_encoder_info *I = &m->info;
    if (n_q < 1 || n_q > I->n_codebooks)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: %d codebooks asked, the codec has %d",
                         n_q, I->n_codebooks);
    if (m->codebook_dim > 256)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: codebook_dim %d over 256",
                         m->codebook_dim);
    int64_t T = dac_encoder_frames(m, n);
    if (!pcm || n <= 0 || T <= 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: %lld samples are less than one frame "
                         "(%d samples)", (long long)n, I->hop);
    /* the largest activation: t * channels over the stages */
    size_t act = (size_t)n * I->encoder_hidden_size;
    int64_t t = n;
    for (int i = 0; i < I->n_blocks; i++) {
        int64_t span = t + 2 * m->blocks[i].pad - 2 * m->blocks[i].stride;
        t = span / m->blocks[i].stride + 1;
        size_t sz = (size_t)t * m->blocks[i].c_out;
        act = sz > act ? sz : act;
    }
    if ((size_t)T * I->hidden_size > act)
        act = (size_t)T * I->hidden_size;
    int H = I->hidden_size, D = m->codebook_dim, K = I->codebook_size;
    struct dace_work w = { .tile = m->tile };
    float *x = malloc(act * sizeof *x), *a = malloc(act * sizeof *a), *b = malloc(act * sizeof *b);
    int32_t *out = malloc((size_t)n_q * T * sizeof *out);
    float *proj = malloc((size_t)T * D * sizeof *proj);
    int rc = 0;
    if (!x || !a || !b || !out || !proj) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory encoding %lld samples",
                       (long long)n);
        goto out;
    }
    /* conv_in: the waveform is [n][1] */
    t = n;
    if ((rc = conv_tiled(tp, &m->conv_in, pcm, t, x, false, &w)) < 0)
        goto fail;
    for (int i = 0; i < I->n_blocks; i++) {
        const struct dace_block *B = &m->blocks[i];
        for (int j = 0; j < 3; j++)
            if ((rc = res_unit(tp, &B->res[j], x, t, B->c_in, a, b, &w)) < 0)
                goto fail;
        omni_snake(tp, x, t, B->c_in, B->alpha, a);
        int64_t t2 = (t + 2 * B->pad - 2 * B->stride) / B->stride + 1;
        if ((rc = down_tiled(tp, B, a, t, t2, x, &w)) < 0)
            goto fail;
        t = t2;
    }
    int c_last = m->conv_out.c_in;
    omni_snake(tp, x, t, c_last, m->alpha_out, a);
    if ((rc = conv_tiled(tp, &m->conv_out, a, t, x, false, &w)) < 0)   /* x: the latent [T][H] */
        goto fail;
    if (latent) {
        float *l = malloc((size_t)H * T * sizeof *l);
        if (!l) {
            rc = OMNI_ERR_NOMEM;
            goto fail;
        }
        for (int64_t f = 0; f < T; f++)
            for (int h = 0; h < H; h++)
                l[(size_t)h * T + f] = x[(size_t)f * H + h];
        *latent = l;
    }
    /* residual VQ on x: each codebook's nearest entry, its out_proj subtracted */
    for (int q = 0; q < n_q; q++) {
        const struct dace_vq *V = &m->vq[q];
        if ((rc = conv_tiled(tp, &V->in_proj, x, T, proj, false, &w)) < 0)
            goto fail;
        for (int64_t f = 0; f < T; f++) {
            int k = vq_nearest(V, K, D, proj + (size_t)f * D);
            out[(size_t)q * T + f] = k;
            memcpy(proj + (size_t)f * D, V->codebook + (size_t)k * D, (size_t)D * sizeof *proj);
        }
        if (q + 1 == n_q)
            break;   /* the last residual is not needed */
        if ((rc = conv_tiled(tp, &V->out_proj, proj, T, a, false, &w)) < 0)
            goto fail;
        for (size_t i = 0; i < (size_t)T * H; i++)
            x[i] -= a[i];
    }
    *codes = out;
    *n_frames = T;
    out = NULL;
    goto out;
fail:
    if (rc == OMNI_ERR_NOMEM)
        omni_fail(err, errlen, rc, "dac: out of memory encoding %lld samples", (long long)n);
    else
        omni_fail(err, errlen, rc, "dac: encoding failed (%d)", rc);
    if (latent) {
        free(*latent);
        *latent = NULL;
    }
out:
    free(w.tin);
    free(w.scratch);
    free(x);
    free(a);
    free(b);
    free(out);
    free(proj);
    return rc;
}
