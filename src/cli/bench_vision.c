/* bench_vision.c - `omniserve bench-vision -m LM.gguf --mmproj MM.gguf --image F`:
 * vision encoder speed, the vision cache and a chat turn with the image fused.
 *
 * The first encode of the image (decode + preprocess + every tile's encoder
 * pass) goes through an empty vision cache; then --reps repeats of the same
 * bytes must hit the cache, and their median cost is reported beside its
 * ratio to the first (the server's cost for a repeated image). A chat turn
 * "User: <image> question / Assistant:" is laid out with vision_prompt_build,
 * token rows taken from token_embd, image rows as encoded, prefilled in one
 * llm_forward (llm_batch.embd) and followed by -n decode steps fed their own
 * argmax: prompt and generation tok/s, medians over --reps. With --video the
 * clip is sampled (media_video_sample, --fps, --max-frames) and every frame
 * encoded as one global view (Qwen2.5-VL / Qwen3-VL: frame pairs as temporal
 * patches in one vision_encode_batch call, as the server does): frames
 * sampled, frames decoded (seeking skips the rest), encoder passes,
 * sampling ms and encoder ms. --encode-only (no -m) times just
 * the encoder: the first encode and the median of --reps more, uncached
 * (for encoders whose language model does not load, e.g. Qwen2.5-VL).
 * --images N (with --encode-only) encodes the image N times one request
 * after the other (N vision_encode_batch calls of one image) and as one
 * request (one call of N: Qwen2.5-VL images share encoder passes),
 * alternating the two --reps times (A B, then B A), and reports both
 * medians, their ratio and the process CPU seconds of each; --size WxH
 * resamples the decoded image first (smaller grids, quicker runs). */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"

#include "llm/model.h"
#include "media/image.h"
#include "media/video.h"
#include "src/core/cpu.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "vision/qwen2vl.h"
#include "vision/vision.h"

#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#define BVIS_KV_BLOCK 16
#define BVIS_MAX_FILE_BYTES ((long)512 << 20)

struct bvis_opts {
    const char *model, *mmproj, *image, *video;
    int n_threads;
    int reps;
    int n_gen;           /* decode steps per chat turn */
    double fps;          /* video sampling */
    int max_frames;
    bool json_only;
    bool encode_only;    /* no language model: time the encoder alone */
    int n_images;        /* --images N: N images one after the other vs in one batch */
    int size_w, size_h;  /* --size WxH: the decoded image resampled first (0: as decoded) */
};

static void bvis_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-vision -m LM.gguf --mmproj MMPROJ.gguf --image FILE [options]\n"
            "  -m, --model FILE  language model the projector feeds\n"
            "  --mmproj FILE     vision encoder (llama.cpp mmproj GGUF)\n"
            "  --image FILE      image to encode (any format media_image_decode reads)\n"
            "  --video FILE      also sample and encode this clip\n"
            "  --fps F           video frames per second sampled (default 2)\n"
            "  --max-frames N    at most N video frames (default 8)\n"
            "  -t, --threads N   compute threads (default: physical cores, %d here)\n"
            "  --reps R          repetitions of the cached encode and the chat turn (default 3)\n"
            "  -n N              generated tokens per chat turn (default 32)\n"
            "  --encode-only     no -m: time the encoder alone (median of --reps uncached encodes)\n"
            "  --images N        with --encode-only: N images one after the other vs in one batch\n"
            "  --size WxH        resample the decoded image to W x H pixels first\n"
            "  --json            print only one JSON line\n",
            omni_physical_cores());
}

static bool bvis_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    long v;
    if (cli_long("bench-vision", opt, s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* 0 on success, 2 on bad usage, -1 when --help was printed. */
static int bvis_parse(int argc, char **argv, struct bvis_opts *o)
{
    *o = (struct bvis_opts){ .n_threads = omni_physical_cores(), .reps = 3, .n_gen = 32,
                             .fps = 2, .max_frames = 8, .n_images = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bvis_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json_only = true;
            continue;
        }
        if (!strcmp(a, "--encode-only")) {
            o->encode_only = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-vision: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--mmproj"))
            o->mmproj = v;
        else if (!strcmp(a, "--image"))
            o->image = v;
        else if (!strcmp(a, "--video"))
            o->video = v;
        else if (!strcmp(a, "--fps")) {
            if (cli_double("bench-vision", a, v, 0.01, 100, &o->fps))
                return 2;
        } else if (!strcmp(a, "--max-frames")) {
            if (!bvis_int(a, v, 1, 256, &o->max_frames))
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!bvis_int(a, v, 1, 1024, &o->n_threads))
                return 2;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "-r")) {
            if (!bvis_int(a, v, 1, 1000, &o->reps))
                return 2;
        } else if (!strcmp(a, "--images")) {
            if (!bvis_int(a, v, 1, 64, &o->n_images))
                return 2;
        } else if (!strcmp(a, "--size")) {
            if (sscanf(v, "%dx%d", &o->size_w, &o->size_h) != 2 || o->size_w < 1 || o->size_h < 1 ||
                o->size_w > 8192 || o->size_h > 8192) {
                fprintf(stderr, "bench-vision: --size takes WxH (1..8192 each), not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-n")) {
            if (!bvis_int(a, v, 0, 4096, &o->n_gen))
                return 2;
        } else {
            fprintf(stderr, "bench-vision: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (o->n_images > 1 && !o->encode_only) {
        fprintf(stderr, "bench-vision: --images N goes with --encode-only\n");
        return 2;
    }
    if ((!o->model && !o->encode_only) || !o->mmproj || !o->image) {
        fprintf(stderr, "bench-vision: -m LM.gguf, --mmproj MMPROJ.gguf and --image FILE are "
                        "required (see --help)\n");
        return 2;
    }
    return 0;
}

/* The whole file, malloc'ed; NULL with a message. */
static char *bvis_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= BVIS_MAX_FILE_BYTES &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        fclose(f);
        *len = (size_t)n;
        return buf;
    }
    fprintf(stderr, "bench-vision: cannot read %s%s\n", path,
            n > BVIS_MAX_FILE_BYTES ? " (over 512 MiB)" : "");
    free(buf);
    if (f)
        fclose(f);
    return NULL;
}

/* Everything one chat turn needs, sized for the prompt and its generation. */
struct bvis_turn {
    int n_prompt, n_gen, n_vocab;
    float *x;            /* [n_prompt][n_embd] input rows */
    int32_t *pos, *zeros;/* [n_prompt] */
    float *logits;       /* [n_vocab] */
    struct llm_ctx *ctx;
    struct llm_kv *kv;
    int32_t *table;
    struct llm_seq_view seq;
};

/* Prefill the fused prompt, then n_gen decode steps; tok/s of each. 0, or
 * 1 with a message. */
static int bvis_turn_run(struct bvis_turn *t, double *pp_tok_s, double *tg_tok_s)
{
    for (int i = 0; i < t->n_prompt; i++)
        t->pos[i] = i;
    struct llm_batch b = { .n_tokens = t->n_prompt, .embd = t->x, .pos = t->pos, .seq = t->zeros };
    double t0 = omni_time_s();
    int rc = llm_forward(t->ctx, &b, t->kv, &t->seq, t->logits);
    double t_pp = omni_time_s() - t0;
    if (rc != 1) {
        fprintf(stderr, "bench-vision: prefill failed: %s\n",
                rc < 0 ? omni_strerror(rc) : "wrong number of logit rows");
        return 1;
    }
    double t_tg = bench_decode("bench-vision", t->ctx, t->kv, &t->seq,
                               bench_argmax_finite(t->logits, t->n_vocab), t->n_prompt, t->n_gen,
                               t->logits, t->n_vocab, t->zeros);
    if (t_tg < 0)
        return 1;
    *pp_tok_s = t->n_prompt / t_pp;
    *tg_tok_s = t->n_gen ? t->n_gen / t_tg : 0;
    return 0;
}

/* Lay out "User: <image> question\nAssistant:" with e's rows and build the
 * turn's buffers. 0, or 1 with a message. */
static int bvis_turn_new(struct llm_model *lm, const struct vision_model *vm, struct tpool *tp,
                         const struct vision_embd *e, int n_gen, struct bvis_turn *t)
{
    char err[512], text[256];
    const struct llm_hparams *hp = llm_model_hparams(lm);
    snprintf(text, sizeof text, "User:%s Describe this picture in one sentence.\nAssistant:",
             vision_image_marker(vm));
    struct vision_prompt vp;
    if (vision_prompt_build(vm, llm_model_tokenizer(lm), text, strlen(text), true, e, 1, &vp, err,
                            sizeof err) < 0) {
        fprintf(stderr, "bench-vision: %s\n", err);
        return 1;
    }
    const struct gguf_tensor *te = gguf_find_tensor(llm_model_gguf(lm), "token_embd.weight");
    /* an input row: n_embd, plus the DeepStack parts of a qwen3vl LM (zeros for text) */
    const int D = hp->n_embd, W = D * (1 + hp->n_deepstack);
    *t = (struct bvis_turn){ .n_prompt = vp.n_positions, .n_gen = n_gen, .n_vocab = hp->n_vocab };
    int n_ctx = t->n_prompt + n_gen, n_blocks = (n_ctx + BVIS_KV_BLOCK - 1) / BVIS_KV_BLOCK;
    t->x = calloc((size_t)t->n_prompt * (size_t)W, sizeof *t->x);
    t->pos = malloc(sizeof *t->pos * (size_t)t->n_prompt);
    t->zeros = calloc((size_t)t->n_prompt, sizeof *t->zeros);
    t->logits = malloc(sizeof *t->logits * (size_t)t->n_vocab);
    t->table = malloc(sizeof *t->table * (size_t)n_blocks);
    if (!te || !t->x || !t->pos || !t->zeros || !t->logits || !t->table) {
        fprintf(stderr, "bench-vision: %s\n", te ? "out of memory" : "no token_embd.weight");
        vision_prompt_release(&vp);
        return 1;
    }
    struct omni_tensor tok = { te->type, { te->ne[0], te->ne[1] }, te->data };
    for (int i = 0, k = 0; k < vp.n_parts; k++) {
        const struct vision_prompt_part *pt = &vp.parts[k];
        for (int j = 0; j < pt->n; j++, i++) {
            if (pt->embd)
                memcpy(t->x + (size_t)i * W, pt->embd + (size_t)j * W, sizeof(float) * W);
            else
                omni_tensor_get_row(&tok, pt->tokens[j], t->x + (size_t)i * W);
        }
    }
    vision_prompt_release(&vp);
    for (int i = 0; i < n_blocks; i++)
        t->table[i] = i;
    t->seq = (struct llm_seq_view){ t->table, n_blocks };
    if (!(t->ctx = llm_ctx_new(lm, t->n_prompt, tp, err, sizeof err)) ||
        !(t->kv = llm_kv_new(lm, GGML_TYPE_F16, BVIS_KV_BLOCK, n_blocks, err, sizeof err))) {
        fprintf(stderr, "bench-vision: %s\n", err);
        return 1;
    }
    return 0;
}

static void bvis_turn_release(struct bvis_turn *t)
{
    free(t->x);
    free(t->pos);
    free(t->zeros);
    free(t->logits);
    free(t->table);
    llm_kv_free(t->kv);
    llm_ctx_free(t->ctx);
}

struct bvis_video {
    int n_frames, n_decoded, n_units; /* n_units: encoder inputs (frames, or frame pairs) */
    bool seeked;
    double duration_s, sample_ms, encode_ms;
};

static double bvis_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* --images N: the decoded (and --size'd) image preprocessed once, then per
 * round N one-image encodes (A) and one N-image encode (B), the order
 * swapped every round so both see the same drift in the machine's load. */
static int bvis_batch(const struct bvis_opts *o, struct vision_model *vm, struct vision_ctx *vc,
                      const char *img, size_t img_len)
{
    char err[512];
    const int N = o->n_images;
    struct media_image dec = { 0 }, sized = { 0 };
    float *pixels = NULL;
    struct vision_input *in = calloc((size_t)N, sizeof *in);
    struct vision_embd *outs = calloc((size_t)N, sizeof *outs);
    double *a_ms = calloc((size_t)o->reps, sizeof *a_ms), *b_ms = calloc((size_t)o->reps, sizeof *b_ms);
    double *a_cpu = calloc((size_t)o->reps, sizeof *a_cpu), *b_cpu = calloc((size_t)o->reps, sizeof *b_cpu);
    int ret = 1, n_planes = 0, rows = 0, cols = 0;
    if (!in || !outs || !a_ms || !b_ms || !a_cpu || !b_cpu) {
        fprintf(stderr, "bench-vision: out of memory\n");
        goto done;
    }
    if (media_image_decode(img, img_len, NULL, &dec, err, sizeof err) < 0) {
        fprintf(stderr, "bench-vision: %s: %s\n", o->image, err);
        goto done;
    }
    const struct media_image *use = &dec;
    if (o->size_w) {
        sized = (struct media_image){ o->size_w, o->size_h, malloc((size_t)o->size_w * o->size_h * 3) };
        if (!sized.rgb) {
            fprintf(stderr, "bench-vision: out of memory\n");
            goto done;
        }
        vision_resample(dec.rgb, dec.width, dec.height, sized.rgb, o->size_w, o->size_h,
                        VISION_FILTER_BICUBIC);
        use = &sized;
    }
    if (vision_preprocess(vm, use, true, &pixels, &n_planes, &rows, &cols, err, sizeof err) < 0) {
        fprintf(stderr, "bench-vision: %s\n", err);
        goto done;
    }
    for (int i = 0; i < N; i++)
        in[i] = (struct vision_input){ pixels, n_planes, rows, cols, 1 };
    for (int r = 0; r < o->reps; r++)
        for (int half = 0; half < 2; half++) {
            const bool batch = (half == 0) == (r % 2 == 1); /* A B, B A, A B, ... */
            double t0 = omni_time_s(), c0 = bvis_cpu_s();
            for (int i = 0; i < (batch ? 1 : N); i++)
                if (vision_encode_batch(vc, batch ? in : &in[i], batch ? N : 1, NULL, NULL,
                                        batch ? outs : &outs[i], err, sizeof err) < 0) {
                    fprintf(stderr, "bench-vision: %s\n", err);
                    goto done;
                }
            double ms = 1e3 * (omni_time_s() - t0), cpu = bvis_cpu_s() - c0;
            for (int i = 0; i < N; i++)
                vision_embd_release(&outs[i]);
            (batch ? b_ms : a_ms)[r] = ms, (batch ? b_cpu : a_cpu)[r] = cpu;
            fprintf(stderr, "bench-vision: round %d/%d: %d images %s: %.1f ms (%.1f ms each), cpu %.2f s\n",
                    r + 1, o->reps, N, batch ? "in one batch" : "one after the other", ms, ms / N, cpu);
        }
    const struct vision_info *vi = vision_model_info(vm);
    const char *cpu = omni_cpu_level_name(omni_cpu_level());
    const double a = bench_median(a_ms, o->reps), b = bench_median(b_ms, o->reps);
    const double ac = bench_median(a_cpu, o->reps), bc = bench_median(b_cpu, o->reps);
    double load[3] = { 0 };
    if (getloadavg(load, 3) < 1)
        load[0] = -1;
    if (!o->json_only)
        printf("encoder  %s %d layers, %d images of %d x %d patches\n"
               "serial   %.1f ms (%.1f ms per image), cpu %.2f s\n"
               "batch    %.1f ms (%.1f ms per image), cpu %.2f s\n"
               "speedup  %.3f x (load %.2f)\n",
               vi->projector, vi->n_layer, N, rows, cols, a, a / N, ac, b, b / N, bc, b > 0 ? a / b : 0,
               load[0]);
    printf("{\"projector\": \"%s\", \"cpu\": \"%s\", \"threads\": %d, \"reps\": %d, \"layers\": %d, "
           "\"images\": %d, \"grid_rows\": %d, \"grid_cols\": %d, \"serial_ms\": %.3f, "
           "\"batch_ms\": %.3f, \"serial_ms_per_image\": %.3f, \"batch_ms_per_image\": %.3f, "
           "\"serial_cpu_s\": %.3f, \"batch_cpu_s\": %.3f, \"speedup\": %.4f, \"loadavg\": %.2f}\n",
           vi->projector, cpu, o->n_threads, o->reps, vi->n_layer, N, rows, cols, a, b, a / N, b / N,
           ac, bc, b > 0 ? a / b : 0, load[0]);
    fflush(stdout);
    ret = 0;
done:
    for (int i = 0; outs && i < N; i++)
        vision_embd_release(&outs[i]);
    free(outs), free(in), free(pixels);
    free(a_ms), free(b_ms), free(a_cpu), free(b_cpu);
    media_image_release(&dec);
    free(sized.rgb);
    return ret;
}

/* Sample the clip and encode each frame as a global view. 0, or 1 with a message. */
/* --encode-only: decode + preprocess + encode the image once, then --reps
 * more times without a cache; the median is the encoder's cost per image. */
static int bvis_encode_only(const struct bvis_opts *o)
{
    char err[512];
    struct vision_model *vm = NULL;
    struct tpool *tp = NULL;
    struct vision_ctx *vc = NULL;
    struct vision_embd e = { 0 };
    char *img = NULL;
    size_t img_len = 0;
    double *ms = malloc(sizeof *ms * (size_t)o->reps), first_ms = 0;
    int ret = 1;
    if (!ms || !(vm = vision_model_load(o->mmproj, err, sizeof err)) ||
        !(tp = tpool_new(o->n_threads, err, sizeof err)) || !(vc = vision_ctx_new(vm, tp, err, sizeof err))) {
        fprintf(stderr, "bench-vision: %s\n", ms ? err : "out of memory");
        goto done;
    }
    if (!(img = bvis_read(o->image, &img_len)))
        goto done;
    if (o->n_images > 1 || o->size_w) {
        ret = bvis_batch(o, vm, vc, img, img_len);
        goto done;
    }
    for (int r = -1; r < o->reps; r++) {
        vision_embd_release(&e);
        double t0 = omni_time_s();
        if (vision_encode_bytes(vc, NULL, img, img_len, NULL, &e, NULL, err, sizeof err) < 0) {
            fprintf(stderr, "bench-vision: %s: %s\n", o->image, err);
            goto done;
        }
        double t = 1e3 * (omni_time_s() - t0);
        if (r < 0)
            first_ms = t;
        else
            ms[r] = t;
        fprintf(stderr, "bench-vision: %s encode %d/%d: %d rows (%d x %d), %.1f ms\n", o->image, r + 2,
                o->reps + 1, e.n_tokens, e.tile_rows, e.tile_cols, t);
    }
    const struct vision_info *vi = vision_model_info(vm);
    const char *cpu = omni_cpu_level_name(omni_cpu_level());
    double med = bench_median(ms, o->reps);
    if (!o->json_only)
        printf("encoder  %s %d layers, %d rows (%d x %d); first %.1f ms, median %.1f ms per image\n"
               "cpu      %s, %d threads\n",
               vi->projector, vi->n_layer, e.n_tokens, e.tile_rows, e.tile_cols, first_ms, med, cpu,
               o->n_threads);
    printf("{\"projector\": \"%s\", \"cpu\": \"%s\", \"threads\": %d, \"reps\": %d, \"layers\": %d, "
           "\"image_rows\": %d, \"grid_rows\": %d, \"grid_cols\": %d, \"encode_first_ms\": %.3f, "
           "\"encode_ms\": %.3f}\n",
           vi->projector, cpu, o->n_threads, o->reps, vi->n_layer, e.n_tokens, e.tile_rows, e.tile_cols,
           first_ms, med);
    fflush(stdout);
    ret = 0;
done:
    vision_embd_release(&e);
    free(img);
    free(ms);
    vision_ctx_free(vc);
    tpool_free(tp);
    vision_model_free(vm);
    return ret;
}

/* Qwen2.5-VL / Qwen3-VL: the frames as temporal patches of two (an odd
 * last frame with itself), all in one vision_encode_batch call. */
static int bvis_video_pairs(const struct vision_model *vm, struct vision_ctx *vc,
                            const struct media_video_frames *v, struct bvis_video *r)
{
    char err[512];
    const int n = (v->n_frames + 1) / 2, P = vision_model_info(vm)->patch_size;
    struct vision_input *in = calloc((size_t)n, sizeof *in);
    struct vision_embd *out = calloc((size_t)n, sizeof *out);
    int ret = !in || !out, k = 0;
    for (; k < n && !ret; k++) {
        float *a = NULL, *b = NULL;
        int ni, ra, ca, rb, cb;
        const struct media_image *fb = &v->frames[2 * k + 1 < v->n_frames ? 2 * k + 1 : 2 * k];
        if (vision_preprocess_frame(vm, &v->frames[2 * k], v->n_frames, &a, &ni, &ra, &ca, err, sizeof err) < 0 ||
            vision_preprocess_frame(vm, fb, v->n_frames, &b, &ni, &rb, &cb, err, sizeof err) < 0 || ra != rb ||
            ca != cb) {
            fprintf(stderr, "bench-vision: frame pair %d: %s\n", k, a && b ? "frames change size" : err);
            ret = 1;
        } else if (!(in[k].pixels = qwen2vl_pair_frames(a, b, ra * ca, P))) {
            fprintf(stderr, "bench-vision: out of memory\n");
            ret = 1;
        }
        in[k].n_images = 1, in[k].tile_rows = ra, in[k].tile_cols = ca, in[k].frames = 2;
        free(a), free(b);
    }
    if (!ret && vision_encode_batch(vc, in, n, NULL, NULL, out, err, sizeof err) < 0) {
        fprintf(stderr, "bench-vision: video: %s\n", err);
        ret = 1;
    }
    for (int i = 0; !ret && i < n; i++)
        vision_embd_release(&out[i]);
    for (int i = 0; in && i < k; i++)
        free((float *)in[i].pixels);
    free(in), free(out);
    r->n_units = n;
    return ret;
}

static int bvis_video_run(const struct vision_model *vm, struct vision_ctx *vc, const struct bvis_opts *o,
                          struct bvis_video *r)
{
    char err[512];
    struct media_video_params p = media_video_default_params();
    p.fps = o->fps;
    p.max_frames = o->max_frames;
    struct media_video_frames v;
    double t0 = omni_time_s();
    if (media_video_sample_file(o->video, &p, &v, err, sizeof err) < 0) {
        fprintf(stderr, "bench-vision: %s\n", err);
        return 1;
    }
    *r = (struct bvis_video){ .n_frames = v.n_frames, .n_decoded = v.n_decoded, .seeked = v.seeked,
                              .duration_s = v.duration_s,
                              .sample_ms = 1e3 * (omni_time_s() - t0) };
    int ret = 0;
    t0 = omni_time_s();
    if (vision_model_info(vm)->family == VISION_QWEN2VL) {
        ret = bvis_video_pairs(vm, vc, &v, r);
        r->encode_ms = 1e3 * (omni_time_s() - t0);
        media_video_frames_release(&v);
        return ret;
    }
    r->n_units = v.n_frames;
    for (int i = 0; i < v.n_frames && !ret; i++) {
        struct vision_embd e;
        if (vision_encode_image(vc, &v.frames[i], false, &e, err, sizeof err) < 0) {
            fprintf(stderr, "bench-vision: frame %d: %s\n", i, err);
            ret = 1;
        } else {
            vision_embd_release(&e);
        }
    }
    r->encode_ms = 1e3 * (omni_time_s() - t0);
    media_video_frames_release(&v);
    return ret;
}

int cli_bench_vision(int argc, char **argv)
{
    struct bvis_opts o;
    int rc = bvis_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.encode_only)
        return bvis_encode_only(&o);

    char err[512];
    struct llm_model *lm = NULL;
    struct vision_model *vm = NULL;
    struct tpool *tp = NULL;
    struct vision_ctx *vc = NULL;
    struct vision_cache *cache = NULL;
    struct vision_embd first = { 0 };
    struct bvis_turn turn = { 0 };
    char *img = NULL;
    double *rep_ms = NULL, *pp = NULL, *tg = NULL;
    size_t img_len = 0;
    int ret = 1;

    if (!(lm = llm_model_load(o.model, NULL, err, sizeof err)) ||
        !(vm = vision_model_load(o.mmproj, err, sizeof err)) ||
        !(tp = tpool_new(o.n_threads, err, sizeof err)) ||
        !(vc = vision_ctx_new(vm, tp, err, sizeof err))) {
        fprintf(stderr, "bench-vision: %s\n", err);
        goto done;
    }
    const struct vision_info *vi = vision_model_info(vm);
    if (vi->n_embd_lm != llm_model_hparams(lm)->n_embd) {
        fprintf(stderr, "bench-vision: the projector writes %d-wide rows, the model is %d wide\n",
                vi->n_embd_lm, llm_model_hparams(lm)->n_embd);
        goto done;
    }
    cache = vision_cache_new((size_t)256 << 20);
    rep_ms = malloc(sizeof *rep_ms * (size_t)o.reps);
    pp = malloc(sizeof *pp * (size_t)o.reps);
    tg = malloc(sizeof *tg * (size_t)o.reps);
    if (!cache || !rep_ms || !pp || !tg) {
        fprintf(stderr, "bench-vision: out of memory\n");
        goto done;
    }
    if (!(img = bvis_read(o.image, &img_len)))
        goto done;

    /* the first request: decode, preprocess, every encoder pass */
    bool hit;
    double t0 = omni_time_s();
    if (vision_encode_bytes(vc, cache, img, img_len, NULL, &first, &hit, err, sizeof err) < 0) {
        fprintf(stderr, "bench-vision: %s: %s\n", o.image, err);
        goto done;
    }
    double first_ms = 1e3 * (omni_time_s() - t0);
    fprintf(stderr, "bench-vision: %s: %d encoder passes (%d x %d tiles), %d rows, %.1f ms\n",
            o.image, first.n_images, first.tile_rows, first.tile_cols, first.n_tokens, first_ms);
    /* the same bytes again: the cache must answer */
    for (int r = 0; r < o.reps; r++) {
        struct vision_embd e;
        t0 = omni_time_s();
        if (vision_encode_bytes(vc, cache, img, img_len, NULL, &e, &hit, err, sizeof err) < 0) {
            fprintf(stderr, "bench-vision: %s\n", err);
            goto done;
        }
        rep_ms[r] = 1e3 * (omni_time_s() - t0);
        vision_embd_release(&e);
        if (!hit) {
            fprintf(stderr, "bench-vision: the repeated image missed the vision cache\n");
            goto done;
        }
    }
    struct vision_cache_stats cs = vision_cache_stats(cache);
    double repeat_ms = bench_median(rep_ms, o.reps);

    if (bvis_turn_new(lm, vm, tp, &first, o.n_gen, &turn))
        goto done;
    for (int r = 0; r < o.reps; r++) {
        if (bvis_turn_run(&turn, &pp[r], &tg[r]))
            goto done;
        fprintf(stderr, "bench-vision: turn %d/%d: %d prompt positions %.1f tok/s, %d generated "
                "%.1f tok/s\n", r + 1, o.reps, turn.n_prompt, pp[r], o.n_gen, tg[r]);
    }
    double pp_med = bench_median(pp, o.reps), tg_med = bench_median(tg, o.reps);

    struct bvis_video vid = { 0 };
    if (o.video && bvis_video_run(vm, vc, &o, &vid))
        goto done;
    const char *cpu = omni_cpu_level_name(omni_cpu_level());
    double ratio = first_ms > 0 ? repeat_ms / first_ms : 0;

    if (!o.json_only) {
        printf("encoder  %s %d layers, %d px tiles; first image %.1f ms (%d passes, %.1f ms each)\n",
               vi->projector, vi->n_layer, vi->image_size, first_ms, first.n_images,
               first_ms / first.n_images);
        printf("cache    repeated image %.3f ms = %.5f of the first (hits %llu, misses %llu)\n",
               repeat_ms, ratio, (unsigned long long)cs.hits, (unsigned long long)cs.misses);
        printf("turn     %d prompt positions (%d image rows): pp %.2f tok/s, tg%d %.2f tok/s\n",
               turn.n_prompt, first.n_tokens, pp_med, o.n_gen, tg_med);
        if (o.video)
            printf("video    %d frames of %.2f s (%d decoded, %s), %d encoder inputs: sample %.1f ms, "
                   "encode %.1f ms\n", vid.n_frames, vid.duration_s, vid.n_decoded,
                   vid.seeked ? "seeking" : "no seek", vid.n_units, vid.sample_ms, vid.encode_ms);
        printf("cpu      %s, %d threads\n", cpu, o.n_threads);
    }
    printf("{\"projector\": \"%s\", \"cpu\": \"%s\", \"threads\": %d, \"reps\": %d, "
           "\"encoder_passes\": %d, \"image_rows\": %d, \"encode_first_ms\": %.3f, "
           "\"encode_ms_per_pass\": %.3f, \"repeat_ms\": %.4f, \"repeat_ratio\": %.6f, "
           "\"cache_hits\": %llu, \"cache_misses\": %llu, \"prompt_positions\": %d, \"n\": %d, "
           "\"pp_tok_s\": %.3f, \"tg_tok_s\": %.3f",
           vi->projector, cpu, o.n_threads, o.reps, first.n_images, first.n_tokens, first_ms,
           first_ms / first.n_images, repeat_ms, ratio, (unsigned long long)cs.hits,
           (unsigned long long)cs.misses, turn.n_prompt, o.n_gen, pp_med, tg_med);
    if (o.video)
        printf(", \"video_frames\": %d, \"video_frames_decoded\": %d, \"video_seeked\": %s, "
               "\"video_duration_s\": %.3f, \"video_sample_ms\": %.3f, \"video_encode_ms\": %.3f, "
               "\"video_encoder_inputs\": %d",
               vid.n_frames, vid.n_decoded, vid.seeked ? "true" : "false", vid.duration_s,
               vid.sample_ms, vid.encode_ms, vid.n_units);
    printf("}\n");
    fflush(stdout);
    ret = 0;

done:
    bvis_turn_release(&turn);
    vision_embd_release(&first);
    free(img);
    free(rep_ms);
    free(pp);
    free(tg);
    vision_cache_free(cache);
    vision_ctx_free(vc);
    tpool_free(tp);
    vision_model_free(vm);
    llm_model_free(lm);
    return ret;
}
