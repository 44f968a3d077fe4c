/* dac.c - the DAC decoder: GGUF loading, window decode, streaming.
 *
 * Activations are time-major ([t][channels]) so that every convolution is
 * a GEMM over time steps (src/core/conv1d.h). The quantizer's out_proj is
 * applied to every codebook entry at load (a [codebook_size][hidden] table
 * per codebook, bias included), so the lookup of a frame is a sum of rows.
 * A window of frames [a, b) decodes to samples [a * hop, ...) of the whole
 * signal: every layer's output step t of the window is step t of the whole
 * signal shifted by a * (upsampling so far), so windows stitch exactly once
 * the context on each side covers the receptive field. */
#include "audio/codec/dac.h"

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

#define DAC_MAX_BLOCKS 8
#define DAC_MAX_CODEBOOKS 64
/* one-shot windows longer than this go through the stream (bounded memory) */
#define DAC_MAX_WINDOW 1024

struct dac_block {
    float *alpha;                    /* [c_in] */
    struct omni_conv_t1d up;         /* c_in -> c_out, k 2*stride */
    struct dac_res_unit res[3];
};

struct dac_model {
    struct dac_info info;
    int codebook_dim;
    int ratios[DAC_MAX_BLOCKS];
    float *table[DAC_MAX_CODEBOOKS]; /* [codebook_size][hidden]: out_proj(codebook) + bias */
    struct omni_conv1d conv_in;      /* hidden -> c0, k7 */
    struct dac_block blocks[DAC_MAX_BLOCKS];
    float *alpha_out;                /* [c_last] */
    struct omni_conv1d conv_out;     /* c_last -> 1, k7 */
    int context_frames;
    struct dac_weights w;            /* every array above, for dac_free */
};

const struct dac_info *dac_get_info(const struct dac_model *m) { return &m->info; }
int dac_context_frames(const struct dac_model *m) { return m->context_frames; }

int64_t dac_samples_for_frames(const struct dac_model *m, int64_t n_frames)
{
    int64_t n = n_frames;
    for (int i = 0; i < m->info.n_blocks && n > 0; i++)
        n = omni_conv_t1d_out_len(&m->blocks[i].up, n);
    return n > 0 ? n : 0;
}

void dac_free(struct dac_model *m)
{
    if (!m)
        return;
    dac_weights_free(&m->w);
    free(m);
}

// ---- loading ----

/* Frames of context each side: the receptive field's half-width, summed
 * layer by layer in frame units (a layer at r samples per frame that reads
 * d steps either side adds d / r), rounded up with a frame to spare. */
static int context_frames(const struct dac_model *m)
{
    double r = 1, f = 3;                       /* conv_in: k7 */
    for (int i = 0; i < m->info.n_blocks; i++) {
        const struct omni_conv_t1d *u = &m->blocks[i].up;
        f += (double)(u->k / u->stride + 1) / r;  /* inputs feeding one output step */
        r *= u->stride;
        for (int j = 0; j < 3; j++)
            f += (double)m->blocks[i].res[j].conv1.pad / r;
    }
    f += 3 / r;                                /* conv_out */
    return (int)ceil(f) + 1;
}

struct dac_model *dac_load(const char *path, char *err, size_t errlen)
{
    struct gguf *g = gguf_open(path, err, errlen);
    if (!g)
        return NULL;
    struct dac_model *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
        goto fail;
    }
    m->w.missing_hint = "not a DAC GGUF from tools/hf_dac_to_gguf.py?";
    if (dac_check_arch(g, path, err, errlen))
        goto fail;
    struct dac_info *I = &m->info;
    if (dac_get_u32(g, "dac.sampling_rate", &I->sample_rate, err, errlen) ||
        dac_get_u32(g, "dac.hidden_size", &I->hidden_size, err, errlen) ||
        dac_get_u32(g, "dac.decoder_hidden_size", &I->decoder_hidden_size, err, errlen) ||
        dac_get_u32(g, "dac.n_codebooks", &I->n_codebooks, err, errlen) ||
        dac_get_u32(g, "dac.codebook_size", &I->codebook_size, err, errlen) ||
        dac_get_u32(g, "dac.codebook_dim", &m->codebook_dim, err, errlen))
        goto fail;
    enum gguf_type et;
    uint64_t nr = 0;
    const void *rp = gguf_get_arr_data(g, "dac.upsampling_ratios");
    if (gguf_get_arr(g, "dac.upsampling_ratios", &et, &nr) != 0 || !rp ||
        (et != GGUF_TYPE_UINT32 && et != GGUF_TYPE_INT32) || nr == 0 || nr > DAC_MAX_BLOCKS) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: key 'dac.upsampling_ratios' missing "
                  "or not 1..%d integers", path, DAC_MAX_BLOCKS);
        goto fail;
    }
    if (I->n_codebooks > DAC_MAX_CODEBOOKS) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: dac.n_codebooks %d over %d", path,
                  I->n_codebooks, DAC_MAX_CODEBOOKS);
        goto fail;
    }
    I->n_blocks = (int)nr;
    I->hop = 1;
    for (int i = 0; i < I->n_blocks; i++) {
        uint32_t v;
        memcpy(&v, (const char *)rp + 4 * i, 4);
        if (v == 0 || v > 64 || I->decoder_hidden_size % (2 << i) != 0) {
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: upsampling ratio %u or "
                      "decoder_hidden_size %d does not fit block %d", path, v,
                      I->decoder_hidden_size, i);
            goto fail;
        }
        m->ratios[i] = (int)v;
        I->hop *= (int)v;
    }

    /* quantizer: out_proj applied to every entry, in double */
    int H = I->hidden_size, D = m->codebook_dim, K = I->codebook_size;
    for (int q = 0; q < I->n_codebooks; q++) {
        char name[160];
        snprintf(name, sizeof name, "quantizer.quantizers.%d.codebook.weight", q);
        float *cb = dac_load_tensor(&m->w, g, name, 2, (int64_t[]){ K, D }, err, errlen);
        snprintf(name, sizeof name, "quantizer.quantizers.%d.out_proj.weight", q);
        float *w = cb ? dac_load_tensor(&m->w, g, name, 3, (int64_t[]){ H, D, 1 }, err, errlen) : NULL;
        snprintf(name, sizeof name, "quantizer.quantizers.%d.out_proj.bias", q);
        float *b = w ? dac_load_tensor(&m->w, g, name, 1, (int64_t[]){ H }, err, errlen) : NULL;
        if (!b)
            goto fail;
        float *tab = dac_weights_alloc(&m->w, (size_t)K * H * sizeof(float));
        if (!tab) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
            goto fail;
        }
        for (int c = 0; c < K; c++)
            for (int h = 0; h < H; h++) {
                double s = b[h];
                for (int d = 0; d < D; d++)
                    s += (double)w[(size_t)h * D + d] * cb[(size_t)c * D + d];
                tab[(size_t)c * H + h] = (float)s;
            }
        m->table[q] = tab;
    }

    /* decoder */
    int c = I->decoder_hidden_size;
    if (dac_load_conv(&m->w, g, "decoder.conv1", H, c, 7, 1, &m->conv_in, err, errlen))
        goto fail;
    for (int i = 0; i < I->n_blocks; i++) {
        struct dac_block *B = &m->blocks[i];
        int co = c / 2, s = m->ratios[i];
        char p[48], q[128];
        snprintf(p, sizeof p, "decoder.block.%d", i);
        snprintf(q, sizeof q, "%s.snake1", p);
        if (!(B->alpha = dac_load_alpha(&m->w, g, q, c, err, errlen)))
            goto fail;
        snprintf(q, sizeof q, "%s.conv_t1.weight", p);
        float *w = dac_load_tensor(&m->w, g, q, 3, (int64_t[]){ c, co, 2 * s }, err, errlen);
        snprintf(q, sizeof q, "%s.conv_t1.bias", p);
        float *b = w ? dac_load_tensor(&m->w, g, q, 1, (int64_t[]){ co }, err, errlen) : NULL;
        float *wp = b ? dac_weights_alloc(&m->w, omni_conv_t1d_packed_floats(c, co, 2 * s, s) *
                                                    sizeof(float))
                       : NULL;
        if (!wp) {
            if (b)
                omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
            goto fail;
        }
        omni_conv_t1d_pack(w, c, co, 2 * s, s, wp);
        B->up = (struct omni_conv_t1d){ .c_in = c, .c_out = co, .k = 2 * s, .stride = s,
                                        .pad = (s + 1) / 2, .w = wp, .b = b };
        for (int j = 0; j < 3; j++)
            if (dac_load_res_unit(&m->w, g, p, j, co, &B->res[j], err, errlen))
                goto fail;
        c = co;
    }
    if (!(m->alpha_out = dac_load_alpha(&m->w, g, "decoder.snake1", c, err, errlen)) ||
        dac_load_conv(&m->w, g, "decoder.conv2", c, 1, 7, 1, &m->conv_out, err, errlen))
        goto fail;
    m->context_frames = context_frames(m);
    I->n_params = m->w.n_params;
    gguf_free(g);
    return m;
fail:
    dac_free(m);
    gguf_free(g);
    return NULL;
}

// ---- window decode ----

/* Buffers for windows of up to max_frames frames. */
struct dac_work {
    int64_t max_frames;
    float *x, *y, *z;      /* activations, each the largest [t][c] of any layer */
    float *scratch;        /* the largest conv scratch */
};

static void work_free(struct dac_work *w)
{
    free(w->x);
    free(w->y);
    free(w->z);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static int work_reserve(struct dac_work *w, const struct dac_model *m, int64_t n_frames)
{
    if (n_frames <= w->max_frames)
        return 0;
    size_t act = (size_t)n_frames * m->info.hidden_size, scr = 0;
    int64_t t = n_frames;
    act = max_sz(act, (size_t)t * m->conv_in.c_out);
    scr = max_sz(scr, omni_conv1d_scratch(&m->conv_in, t, false));
    for (int i = 0; i < m->info.n_blocks; i++) {
        const struct dac_block *B = &m->blocks[i];
        scr = max_sz(scr, omni_conv_t1d_scratch(&B->up, t));
        t = omni_conv_t1d_out_len(&B->up, t);
        act = max_sz(act, (size_t)t * B->up.c_out);
        scr = max_sz(scr, omni_conv1d_scratch(&B->res[0].conv1, t, false));
        scr = max_sz(scr, omni_conv1d_scratch(&B->res[2].conv1, t, false));
        scr = max_sz(scr, omni_conv1d_scratch(&B->res[0].conv2, t, true));
    }
    scr = max_sz(scr, omni_conv1d_scratch(&m->conv_out, t, false));
    work_free(w);
    w->x = malloc(act * sizeof(float));
    w->y = malloc(act * sizeof(float));
    w->z = malloc(act * sizeof(float));
    w->scratch = malloc(max_sz(scr, 1) * sizeof(float));
    if (!w->x || !w->y || !w->z || !w->scratch) {
        work_free(w);
        return OMNI_ERR_NOMEM;
    }
    w->max_frames = n_frames;
    return 0;
}

static int check_codes(const struct dac_model *m, const int32_t *codes, int n_q,
                       int64_t n_frames, int64_t frame0, bool frame_major, char *err,
                       size_t errlen)
{
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n_q; q++) {
            int32_t c = frame_major ? codes[f * n_q + q] : codes[q * n_frames + f];
            if (c < 0 || c >= m->info.codebook_size)
                return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: code %ld of codebook %d at "
                                 "frame %lld is out of range [0, %d)", (long)c, q,
                                 (long long)(frame0 + f), m->info.codebook_size);
        }
    return 0;
}

/* Decode frames codes[f * n_q + q] (checked) of a window into out
 * (dac_samples_for_frames(n_frames) samples). */
static int decode_window(const struct dac_model *m, struct dac_work *w, struct tpool *tp,
                         const int32_t *codes, int n_q, int64_t n_frames, float *out)
{
    int rc = work_reserve(w, m, n_frames);
    if (rc)
        return rc;
    int H = m->info.hidden_size;
    float *x = w->x, *y = w->y, *z = w->z, *tmp;
    /* latent: sum of the codebooks' projected entries */
    for (int64_t f = 0; f < n_frames; f++) {
        float *row = x + (size_t)f * H;
        memcpy(row, m->table[0] + (size_t)codes[f * n_q] * H, (size_t)H * sizeof(float));
        for (int q = 1; q < n_q; q++) {
            const float *e = m->table[q] + (size_t)codes[f * n_q + q] * H;
            for (int h = 0; h < H; h++)
                row[h] += e[h];
        }
    }
    int64_t t = n_frames;
    if ((rc = omni_conv1d_run(tp, &m->conv_in, x, t, w->scratch, y, false)))
        return rc;
    tmp = x, x = y, y = tmp;
    for (int i = 0; i < m->info.n_blocks; i++) {
        const struct dac_block *B = &m->blocks[i];
        omni_snake(tp, x, t, B->up.c_in, B->alpha, x);
        if ((rc = omni_conv_t1d_run(tp, &B->up, x, t, w->scratch, y)))
            return rc;
        t = omni_conv_t1d_out_len(&B->up, t);
        tmp = x, x = y, y = tmp;
        int c = B->up.c_out;
        for (int j = 0; j < 3; j++) {
            const struct dac_res_unit *R = &B->res[j];
            omni_snake(tp, x, t, c, R->alpha1, y);
            if ((rc = omni_conv1d_run(tp, &R->conv1, y, t, w->scratch, z, false)))
                return rc;
            omni_snake(tp, z, t, c, R->alpha2, z);
            /* x += conv2(z): the residual connection */
            if ((rc = omni_conv1d_run(tp, &R->conv2, z, t, w->scratch, x, true)))
                return rc;
        }
    }
    omni_snake(tp, x, t, m->conv_out.c_in, m->alpha_out, x);
    if ((rc = omni_conv1d_run(tp, &m->conv_out, x, t, w->scratch, y, false)))
        return rc;
    for (int64_t i = 0; i < t; i++)
        out[i] = tanhf(y[i]);
    return 0;
}

// ---- streaming ----

struct dac_stream {
    const struct dac_model *m;
    struct dac_stream_params p;
    int n_q, ctx;
    int32_t *codes;        /* frames [base, base + n_kept), frame-major */
    int64_t base, n_kept, cap_frames;
    int64_t emitted;       /* frames whose samples have been emitted */
    int64_t samples;       /* samples emitted */
    bool finished;
    struct dac_work work;
    float *win;            /* one window's samples */
    size_t cap_win;
    float *out;            /* this call's samples */
    size_t cap_out;
};

struct dac_stream_params dac_stream_default_params(void)
{
    return (struct dac_stream_params){ .first_chunk_frames = 8, .chunk_frames = 32 };
}

struct dac_stream *dac_stream_new(const struct dac_model *m, const struct dac_stream_params *p,
                                  int n_q, char *err, size_t errlen)
{
    if (n_q < 1 || n_q > m->info.n_codebooks) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "dac: %d codebooks asked, the model has %d", n_q,
                  m->info.n_codebooks);
        return NULL;
    }
    struct dac_stream *s = calloc(1, sizeof *s);
    if (!s) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
        return NULL;
    }
    s->m = m;
    s->p = p ? *p : dac_stream_default_params();
    if (s->p.first_chunk_frames < 1)
        s->p.first_chunk_frames = 1;
    if (s->p.chunk_frames < 1)
        s->p.chunk_frames = 1;
    s->n_q = n_q;
    s->ctx = m->context_frames;
    return s;
}

void dac_stream_free(struct dac_stream *s)
{
    if (!s)
        return;
    work_free(&s->work);
    free(s->codes);
    free(s->win);
    free(s->out);
    free(s);
}

int64_t dac_stream_frames(const struct dac_stream *s) { return s->base + s->n_kept; }
int64_t dac_stream_samples(const struct dac_stream *s) { return s->samples; }

static int grow_floats(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < n)
        c *= 2;
    float *q = realloc(*p, c * sizeof(float));
    if (!q)
        return OMNI_ERR_NOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Decode frames [a, b) and append the samples of frames [e0, e1) - to the
 * end of the window's samples when last. */
static int stream_emit(struct dac_stream *s, struct tpool *tp, int64_t a, int64_t b, int64_t e1,
                       bool last, size_t *n_out)
{
    const struct dac_model *m = s->m;
    int64_t n_win = dac_samples_for_frames(m, b - a);
    if (grow_floats(&s->win, &s->cap_win, (size_t)n_win))
        return OMNI_ERR_NOMEM;
    int rc = decode_window(m, &s->work, tp, s->codes + (a - s->base) * s->n_q, s->n_q, b - a,
                           s->win);
    if (rc)
        return rc;
    int64_t hop = m->info.hop, from = (s->emitted - a) * hop;
    int64_t to = last ? n_win : (e1 - a) * hop;
    if (to > n_win)
        to = n_win;
    if (to > from) {
        if (grow_floats(&s->out, &s->cap_out, *n_out + (size_t)(to - from)))
            return OMNI_ERR_NOMEM;
        memcpy(s->out + *n_out, s->win + from, (size_t)(to - from) * sizeof(float));
        *n_out += (size_t)(to - from);
        s->samples += to - from;
    }
    s->emitted = e1;
    return 0;
}

/* Drop frames no later window reads (left of emitted - ctx). */
static void stream_trim(struct dac_stream *s)
{
    int64_t keep_from = s->emitted - s->ctx;
    if (keep_from - s->base < 4096)
        return;
    int64_t drop = keep_from - s->base;
    memmove(s->codes, s->codes + drop * s->n_q, (size_t)(s->n_kept - drop) * s->n_q * 4);
    s->base += drop;
    s->n_kept -= drop;
}

int dac_stream_push(struct dac_stream *s, struct tpool *tp, const int32_t *codes,
                    int n_frames, const float **out, int64_t *n_out, char *err, size_t errlen)
{
    *out = s->out;
    *n_out = 0;
    if (s->finished)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: stream already finished");
    if (n_frames < 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: negative frame count");
    int rc = check_codes(s->m, codes, s->n_q, n_frames, dac_stream_frames(s), true, err, errlen);
    if (rc)
        return rc;
    if (s->n_kept + n_frames > s->cap_frames) {
        int64_t cap = s->cap_frames ? 2 * s->cap_frames : 256;
        while (cap < s->n_kept + n_frames)
            cap *= 2;
        int32_t *c = realloc(s->codes, (size_t)cap * s->n_q * sizeof *c);
        if (!c)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
        s->codes = c;
        s->cap_frames = cap;
    }
    if (n_frames > 0) /* codes may be NULL when no frame comes */
        memcpy(s->codes + s->n_kept * s->n_q, codes, (size_t)n_frames * s->n_q * sizeof *codes);
    s->n_kept += n_frames;
    size_t n = 0;
    for (;;) {
        int64_t total = dac_stream_frames(s);
        int64_t chunk = s->emitted == 0 ? s->p.first_chunk_frames : s->p.chunk_frames;
        int64_t e1 = s->emitted + chunk;
        if (e1 + s->ctx > total)
            break;
        int64_t a = s->emitted - s->ctx > 0 ? s->emitted - s->ctx : 0;
        if ((rc = stream_emit(s, tp, a, e1 + s->ctx, e1, false, &n)))
            return omni_fail(err, errlen, rc, "dac: decode failed (%s)", omni_strerror(rc));
        stream_trim(s);
    }
    *out = s->out;
    *n_out = (int64_t)n;
    return 0;
}

int dac_stream_finish(struct dac_stream *s, struct tpool *tp, const float **out,
                      int64_t *n_out, char *err, size_t errlen)
{
    *out = s->out;
    *n_out = 0;
    if (s->finished)
        return 0;
    s->finished = true;
    int64_t total = dac_stream_frames(s);
    size_t n = 0;
    /* what is left, in windows of at most DAC_MAX_WINDOW frames */
    while (s->emitted < total) {
        int64_t e1 = s->emitted + DAC_MAX_WINDOW - 2 * s->ctx;
        bool last = e1 + s->ctx >= total;
        if (last)
            e1 = total;
        int64_t a = s->emitted - s->ctx > 0 ? s->emitted - s->ctx : 0;
        int64_t b = last ? total : e1 + s->ctx;
        int rc = stream_emit(s, tp, a, b, e1, last, &n);
        if (rc)
            return omni_fail(err, errlen, rc, "dac: decode failed (%s)", omni_strerror(rc));
    }
    *out = s->out;
    *n_out = (int64_t)n;
    return 0;
}

// ---- one shot ----

int dac_decode(const struct dac_model *m, struct tpool *tp, const int32_t *codes, int n_q,
               int64_t n_frames, float **out, int64_t *n_out, char *err, size_t errlen)
{
    *out = NULL;
    *n_out = 0;
    if (n_q < 1 || n_q > m->info.n_codebooks)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: %d codebooks given, the model has %d",
                         n_q, m->info.n_codebooks);
    if (n_frames < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: no frames to decode");
    int rc = check_codes(m, codes, n_q, n_frames, 0, false, err, errlen);
    if (rc)
        return rc;
    int64_t n = dac_samples_for_frames(m, n_frames);
    int32_t *fm = malloc((size_t)n_frames * n_q * sizeof *fm);
    float *pcm = malloc((size_t)(n > 0 ? n : 1) * sizeof *pcm);
    if (!fm || !pcm) {
        free(fm);
        free(pcm);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
    }
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n_q; q++)
            fm[f * n_q + q] = codes[q * n_frames + f];
    if (n_frames <= DAC_MAX_WINDOW) {
        struct dac_work w = { 0 };
        rc = decode_window(m, &w, tp, fm, n_q, n_frames, pcm);
        work_free(&w);
    } else {
        /* long inputs: the stream's windows keep memory bounded */
        struct dac_stream_params p = { .first_chunk_frames = DAC_MAX_WINDOW / 2,
                                       .chunk_frames = DAC_MAX_WINDOW / 2 };
        struct dac_stream *s = dac_stream_new(m, &p, n_q, err, errlen);
        rc = s ? 0 : OMNI_ERR_NOMEM;
        int64_t got = 0, k;
        const float *chunk;
        if (!rc)
            rc = dac_stream_push(s, tp, fm, (int)n_frames, &chunk, &k, err, errlen);
        if (!rc) {
            if (k > 0) /* chunk is NULL while nothing is ready */
                memcpy(pcm, chunk, (size_t)k * sizeof(float));
            got = k;
            rc = dac_stream_finish(s, tp, &chunk, &k, err, errlen);
        }
        if (!rc && got + k == n && k > 0)
            memcpy(pcm + got, chunk, (size_t)k * sizeof(float));
        else if (!rc && got + k != n)
            rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: stream gave %lld samples, not "
                           "%lld", (long long)(got + k), (long long)n);
        dac_stream_free(s);
    }
    free(fm);
    if (rc) {
        free(pcm);
        if (!err || !err[0])
            omni_fail(err, errlen, rc, "dac: decode failed (%s)", omni_strerror(rc));
        return rc;
    }
    *out = pcm;
    *n_out = n;
    return 0;
}
