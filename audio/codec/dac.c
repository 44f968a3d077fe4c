/* dac.c - the DAC decoder: GGUF loading, the layer pipeline, streaming.
 *
 * Activations are time-major ([t][channels]) so that every convolution is
 * a GEMM over time steps (src/core/conv1d.h). The quantizer's out_proj is
 * applied to every codebook entry at load (a [codebook_size][hidden] table
 * per codebook, bias included), so the lookup of a frame is a sum of rows.
 * Decoding, streamed or one-shot, runs the layers as a pipeline of stages
 * that each keep the rows they still need (see "the layer pipeline"). */
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

static int lookahead_frames(const struct dac_model *m);

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
    m->context_frames = lookahead_frames(m);
    I->n_params = m->w.n_params;
    gguf_free(g);
    return m;
fail:
    dac_free(m);
    gguf_free(g);
    return NULL;
}

// ---- codes ----

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

// ---- the layer pipeline ----

/* The decoder as a chain of stages, each a layer that maps its input
 * signal (rows of steps) to its output signal: conv_in, then per block the
 * Snake + transposed conv and three residual units, then Snake + conv_out
 * + tanh. A stream keeps, per stage, the input rows later outputs still
 * read (the left context) and the rows whose outputs still wait for right
 * context; each run computes every output step its input now determines,
 * appends it to the next stage's input, and drops what no later step
 * reads. Zero rows stand for the padding before step 0 (at the start) and
 * after the end (at finish), so every layer is a valid (unpadded)
 * convolution over the rows held, and nothing is computed twice. The
 * kernels sum each output in an order fixed by the layer's shape, so the
 * samples do not depend on how the frames were fed. */
enum stage_kind { ST_CONV, ST_UP, ST_RES, ST_OUT };

struct stage {
    enum stage_kind kind;
    int c_in, c_out;
    const struct omni_conv1d *conv;    /* CONV, OUT: the conv; RES: conv1 */
    const struct omni_conv1d *conv2;   /* RES: the k1 conv */
    const struct omni_conv_t1d *up;    /* UP */
    const float *alpha;                /* Snake before the conv (NULL for conv_in) */
    const float *alpha2;               /* RES: Snake between conv1 and conv2 */
    int p;                             /* CONV, RES, OUT: steps read either side */
    int lead;                          /* zero rows ahead of step 0 */
};

#define DAC_MAX_STAGES (2 + 4 * DAC_MAX_BLOCKS)
/* frames' worth of rows per piece of a stage: bounds the stages' buffers
 * (the last stage's rows: hop per frame) and keeps a piece's activations in
 * cache */
#define DAC_PIECE_FRAMES 32
/* most frames a run feeds the first stage (the one-shot decode's runs) */
#define DAC_RUN_FRAMES 128

static int n_stages(const struct dac_model *m) { return 2 + 4 * m->info.n_blocks; }

static struct stage stage_at(const struct dac_model *m, int i)
{
    struct stage S = { 0 };
    if (i == 0) {
        S = (struct stage){ .kind = ST_CONV, .c_in = m->conv_in.c_in, .c_out = m->conv_in.c_out,
                            .conv = &m->conv_in, .p = m->conv_in.pad };
    } else if (i == n_stages(m) - 1) {
        S = (struct stage){ .kind = ST_OUT, .c_in = m->conv_out.c_in, .c_out = 1,
                            .conv = &m->conv_out, .alpha = m->alpha_out, .p = m->conv_out.pad };
    } else {
        const struct dac_block *B = &m->blocks[(i - 1) / 4];
        int j = (i - 1) % 4;
        if (j == 0) {
            S = (struct stage){ .kind = ST_UP, .c_in = B->up.c_in, .c_out = B->up.c_out,
                                .up = &B->up, .alpha = B->alpha };
        } else {
            const struct dac_res_unit *R = &B->res[j - 1];
            S = (struct stage){ .kind = ST_RES, .c_in = R->conv1.c_in, .c_out = R->conv1.c_out,
                                .conv = &R->conv1, .conv2 = &R->conv2, .alpha = R->alpha1,
                                .alpha2 = R->alpha2, .p = R->conv1.pad };
        }
    }
    if (S.kind == ST_UP) {
        int64_t s0, s1;
        omni_conv_t1d_reads(S.up, 0, 1, &s0, &s1);
        S.lead = (int)-s0;
    } else {
        S.lead = S.p;
    }
    return S;
}

/* Output steps a stage can compute from input steps [.., end), of a signal
 * whose input has t_in steps (-1: not known yet). */
static int64_t stage_avail(const struct stage *S, int64_t end, int64_t t_in)
{
    int64_t o;
    if (S->kind == ST_UP) {
        o = end * S->up->stride - S->up->pad;
        if (t_in >= 0 && o > omni_conv_t1d_out_len(S->up, t_in))
            o = omni_conv_t1d_out_len(S->up, t_in);
    } else {
        o = end - S->p;
        if (t_in >= 0 && o > t_in)
            o = t_in;
    }
    return o;
}

/* First input step outputs from o on read. */
static int64_t stage_first_read(const struct stage *S, int64_t o)
{
    if (S->kind == ST_UP) {
        int64_t s0, s1;
        omni_conv_t1d_reads(S->up, o, o + 1, &s0, &s1);
        return s0;
    }
    return o - S->p;
}

/* Right context in frames: samples lag the frames fed by a constant once
 * the stages are primed; the lag, rounded up to frames. */
static int lookahead_frames(const struct dac_model *m)
{
    const int64_t F = 4096;
    int64_t end = F, ratio = 1;
    for (int i = 0; i < n_stages(m); i++) {
        struct stage S = stage_at(m, i);
        end = stage_avail(&S, end, -1);
        if (S.kind == ST_UP)
            ratio *= S.up->stride;
    }
    int64_t lag = F * ratio - end;
    return (int)((lag + m->info.hop - 1) / m->info.hop);
}

/* One stage's input: rows of c_in floats, row r = step base + r. */
struct stage_buf {
    float *x;
    int64_t base, n, cap;   /* cap in rows */
    int64_t out_next;       /* next output step */
    bool closed;            /* end padding appended: the input is complete */
    bool done;              /* closed and every output computed */
    int64_t t_in, t_out;    /* once closed: the signal's input and output steps */
};

struct dac_stream {
    const struct dac_model *m;
    struct dac_stream_params p;
    int n_q, n_st;
    struct stage st[DAC_MAX_STAGES];
    struct stage_buf buf[DAC_MAX_STAGES];
    int32_t *pending;       /* frames pushed, not yet fed: frame-major */
    int64_t n_pending, cap_pending;
    int64_t frames;         /* frames pushed */
    int64_t samples;        /* samples emitted */
    bool finished, failed;
    float *scr, *z;         /* a run's Snake'd input and residual middle */
    size_t cap_scr, cap_z;
    float *out;             /* this call's samples */
    size_t cap_out, n_out;
};

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

/* Room for rows more input rows in stage i's buffer. */
static int buf_reserve(struct dac_stream *s, int i, int64_t rows)
{
    struct stage_buf *B = &s->buf[i];
    if (B->n + rows <= B->cap)
        return 0;
    int64_t cap = B->cap ? B->cap : 256;
    while (cap < B->n + rows)
        cap *= 2;
    float *x = realloc(B->x, (size_t)cap * s->st[i].c_in * sizeof(float));
    if (!x)
        return OMNI_ERR_NOMEM;
    B->x = x;
    B->cap = cap;
    return 0;
}

static int buf_zeros(struct dac_stream *s, int i, int64_t rows)
{
    if (rows <= 0)
        return 0;
    int rc = buf_reserve(s, i, rows);
    if (rc)
        return rc;
    struct stage_buf *B = &s->buf[i];
    memset(B->x + (size_t)B->n * s->st[i].c_in, 0, (size_t)rows * s->st[i].c_in * sizeof(float));
    B->n += rows;
    return 0;
}

/* Stage i's outputs [o0, o1) into y (rows of c_out; for the last stage the
 * samples). */
static int stage_run(struct dac_stream *s, struct tpool *tp, int i, int64_t o0, int64_t o1,
                     float *y)
{
    const struct stage *S = &s->st[i];
    const struct stage_buf *B = &s->buf[i];
    const int64_t rows = o1 - o0;
    if (S->kind == ST_UP) {
        int64_t s0, s1;
        omni_conv_t1d_reads(S->up, o0, o1, &s0, &s1);
        if (grow_floats(&s->scr, &s->cap_scr, (size_t)(s1 - s0) * S->c_in))
            return OMNI_ERR_NOMEM;
        struct omni_conv_fuse f = { .snake_in = S->alpha };
        return omni_conv_t1d_part(tp, S->up, B->x + (size_t)(s0 - B->base) * S->c_in, s0,
                                  s1 - s0, o0, o1, s->scr, y, &f);
    }
    const float *x = B->x + (size_t)(o0 - S->p - B->base) * S->c_in;
    const int64_t t_in = rows + 2 * (int64_t)S->p;
    if (S->alpha && grow_floats(&s->scr, &s->cap_scr, (size_t)t_in * S->c_in))
        return OMNI_ERR_NOMEM;
    if (S->kind == ST_CONV) {
        return omni_conv1d_valid(tp, S->conv, x, t_in, NULL, y, NULL);
    } else if (S->kind == ST_OUT) {
        struct omni_conv_fuse f = { .snake_in = S->alpha };
        int rc = omni_conv1d_valid(tp, S->conv, x, t_in, s->scr, y, &f);
        for (int64_t t = 0; t < rows && !rc; t++)
            y[t] = tanhf(y[t]);
        return rc;
    }
    /* residual unit: y = x + conv2(snake2(conv1(snake1(x)))) */
    if (grow_floats(&s->z, &s->cap_z, (size_t)rows * S->c_out))
        return OMNI_ERR_NOMEM;
    struct omni_conv_fuse f1 = { .snake_in = S->alpha, .snake_out = S->alpha2 };
    int rc = omni_conv1d_valid(tp, S->conv, x, t_in, s->scr, s->z, &f1);
    if (rc)
        return rc;
    struct omni_conv_fuse f2 = { .resid = x + (size_t)S->p * S->c_in };
    return omni_conv1d_valid(tp, S->conv2, s->z, rows, NULL, y, &f2);
}

/* Rows a stage's GEMM takes per piece (its output rows; a transposed
 * conv's per phase): DAC_PIECE_FRAMES frames' worth, and at least
 * DAC_MIN_ROWS, so that conv_in and the first upsampler, whose weights
 * (44 and 75 MB for DAC.speech) stream from memory, get enough rows per
 * pass when a run brings more frames (the one-shot decode). */
#define DAC_MIN_ROWS 128

static int64_t piece_rows(const struct dac_stream *s, int i)
{
    int64_t per_frame = 1;   /* the stage's input rows per frame */
    for (int j = 0; j < i; j++)
        if (s->st[j].kind == ST_UP)
            per_frame *= s->st[j].up->stride;
    int64_t m = per_frame * DAC_PIECE_FRAMES;
    if (m < DAC_MIN_ROWS)
        m = DAC_MIN_ROWS;
    return s->st[i].kind == ST_UP ? m * s->st[i].up->stride : m;
}

/* Run stage i as far as its input goes, a piece at a time, each piece
 * carried on through the later stages before the next (depth first: a
 * piece's activations are still in cache when the next stage reads them).
 * With closing, the whole signal's frames are in: a stage whose input is
 * complete gets its end padding. Samples go to s->out. */
static int run_from(struct dac_stream *s, struct tpool *tp, int i, bool closing)
{
    const struct stage *S = &s->st[i];
    struct stage_buf *B = &s->buf[i];
    if (closing && !B->closed && (i == 0 || s->buf[i - 1].done)) {
        /* zeros for the steps past the end that the last outputs read */
        B->t_in = B->base + B->n;
        B->t_out = S->kind == ST_UP ? omni_conv_t1d_out_len(S->up, B->t_in) : B->t_in;
        int64_t need = B->t_out > 0 ? (S->kind == ST_UP
                                       ? (B->t_out - 1 + S->up->pad) / S->up->stride + 1
                                       : B->t_out + S->p) : B->t_in;
        int rc = buf_zeros(s, i, need - B->t_in);
        if (rc)
            return rc;
        B->closed = true;
    }
    const int64_t cap = piece_rows(s, i);
    bool ran = false;
    for (;;) {
        int64_t o0 = B->out_next, o1 = stage_avail(S, B->base + B->n, B->closed ? B->t_in : -1);
        if (B->closed && o0 >= B->t_out)
            B->done = true;
        if (o1 <= o0)
            break;
        if (o1 - o0 > cap)
            o1 = o0 + cap;
        float *y;
        if (i + 1 < s->n_st) {
            int rc = buf_reserve(s, i + 1, o1 - o0);
            if (rc)
                return rc;
            y = s->buf[i + 1].x + (size_t)s->buf[i + 1].n * s->st[i + 1].c_in;
        } else {
            if (grow_floats(&s->out, &s->cap_out, s->n_out + (size_t)(o1 - o0)))
                return OMNI_ERR_NOMEM;
            y = s->out + s->n_out;
        }
        int rc = stage_run(s, tp, i, o0, o1, y);
        if (rc)
            return rc;
        if (i + 1 < s->n_st)
            s->buf[i + 1].n += o1 - o0;
        else
            s->n_out += (size_t)(o1 - o0);
        B->out_next = o1;
        if (B->closed && o1 >= B->t_out)
            B->done = true;
        /* drop the rows no later output reads */
        int64_t drop = stage_first_read(S, o1) - B->base;
        if (drop > B->n)
            drop = B->n;
        if (drop > 0) {
            memmove(B->x, B->x + (size_t)drop * S->c_in,
                    (size_t)(B->n - drop) * S->c_in * sizeof(float));
            B->base += drop;
            B->n -= drop;
        }
        ran = true;
        if (i + 1 < s->n_st && (rc = run_from(s, tp, i + 1, closing)))
            return rc;
    }
    /* nothing new here: the later stages may still close or have input left */
    return !ran && i + 1 < s->n_st ? run_from(s, tp, i + 1, closing) : 0;
}

static int pipeline_run(struct dac_stream *s, struct tpool *tp, bool closing)
{
    return run_from(s, tp, 0, closing);
}

/* Feed n pending frames (the latent rows: sums of the codebooks' projected
 * entries) into the first stage and run the pipeline. */
static int feed(struct dac_stream *s, struct tpool *tp, int64_t n)
{
    const struct dac_model *m = s->m;
    const int H = m->info.hidden_size, n_q = s->n_q;
    for (int64_t f0 = 0; f0 < n; f0 += DAC_RUN_FRAMES) {
        int64_t nf = n - f0 < DAC_RUN_FRAMES ? n - f0 : DAC_RUN_FRAMES;
        int rc = buf_reserve(s, 0, nf);
        if (rc)
            return rc;
        struct stage_buf *B = &s->buf[0];
        for (int64_t f = 0; f < nf; f++) {
            const int32_t *c = s->pending + (f0 + f) * n_q;
            float *row = B->x + (size_t)(B->n + f) * H;
            memcpy(row, m->table[0] + (size_t)c[0] * H, (size_t)H * sizeof(float));
            for (int q = 1; q < n_q; q++) {
                const float *e = m->table[q] + (size_t)c[q] * H;
                for (int h = 0; h < H; h++)
                    row[h] += e[h];
            }
        }
        B->n += nf;
        if ((rc = pipeline_run(s, tp, false)))
            return rc;
    }
    s->n_pending -= n;
    memmove(s->pending, s->pending + n * n_q, (size_t)s->n_pending * n_q * sizeof *s->pending);
    return 0;
}

// ---- streaming ----

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
    s->n_st = n_stages(m);
    for (int i = 0; i < s->n_st; i++) {
        s->st[i] = stage_at(m, i);
        s->buf[i].base = -s->st[i].lead;   /* the zero padding ahead of step 0 */
        if (buf_zeros(s, i, s->st[i].lead)) {
            dac_stream_free(s);
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
            return NULL;
        }
    }
    return s;
}

void dac_stream_free(struct dac_stream *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_st; i++)
        free(s->buf[i].x);
    free(s->pending);
    free(s->scr);
    free(s->z);
    free(s->out);
    free(s);
}

int64_t dac_stream_frames(const struct dac_stream *s) { return s->frames; }
int64_t dac_stream_samples(const struct dac_stream *s) { return s->samples; }

int dac_stream_push(struct dac_stream *s, struct tpool *tp, const int32_t *codes,
                    int n_frames, const float **out, int64_t *n_out, char *err, size_t errlen)
{
    *out = s->out;
    *n_out = 0;
    if (s->finished)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: stream already finished");
    if (s->failed)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: stream failed earlier");
    if (n_frames < 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: negative frame count");
    int rc = check_codes(s->m, codes, s->n_q, n_frames, s->frames, true, err, errlen);
    if (rc)
        return rc;
    if (s->n_pending + n_frames > s->cap_pending) {
        int64_t cap = s->cap_pending ? 2 * s->cap_pending : 256;
        while (cap < s->n_pending + n_frames)
            cap *= 2;
        int32_t *c = realloc(s->pending, (size_t)cap * s->n_q * sizeof *c);
        if (!c)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
        s->pending = c;
        s->cap_pending = cap;
    }
    if (n_frames > 0) /* codes may be NULL when no frame comes */
        memcpy(s->pending + s->n_pending * s->n_q, codes,
               (size_t)n_frames * s->n_q * sizeof *codes);
    s->n_pending += n_frames;
    s->frames += n_frames;
    s->n_out = 0;
    /* until audio has come, runs of first_chunk_frames: the first samples
     * as soon as their right context is in */
    for (;;) {
        int64_t chunk = s->samples + (int64_t)s->n_out == 0 ? s->p.first_chunk_frames
                                                            : s->p.chunk_frames;
        if (s->n_pending < chunk)
            break;
        if ((rc = feed(s, tp, chunk))) {
            s->failed = true;
            return omni_fail(err, errlen, rc, "dac: decode failed (%s)", omni_strerror(rc));
        }
    }
    s->samples += (int64_t)s->n_out;
    *out = s->out;
    *n_out = (int64_t)s->n_out;
    return 0;
}

int dac_stream_finish(struct dac_stream *s, struct tpool *tp, const float **out,
                      int64_t *n_out, char *err, size_t errlen)
{
    *out = s->out;
    *n_out = 0;
    if (s->finished)
        return 0;
    if (s->failed)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "dac: stream failed earlier");
    s->finished = true;
    s->n_out = 0;
    int rc = s->n_pending > 0 ? feed(s, tp, s->n_pending) : 0;
    if (!rc && s->frames > 0)
        rc = pipeline_run(s, tp, true);
    if (rc) {
        s->failed = true;
        return omni_fail(err, errlen, rc, "dac: decode failed (%s)", omni_strerror(rc));
    }
    s->samples += (int64_t)s->n_out;
    *out = s->out;
    *n_out = (int64_t)s->n_out;
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
    /* the stream, fed in runs of DAC_RUN_FRAMES: the same samples, memory bounded */
    struct dac_stream_params p = { .first_chunk_frames = DAC_RUN_FRAMES,
                                   .chunk_frames = DAC_RUN_FRAMES };
    struct dac_stream *s = fm && pcm ? dac_stream_new(m, &p, n_q, err, errlen) : NULL;
    if (!s) {
        free(fm);
        free(pcm);
        return fm && pcm ? OMNI_ERR_NOMEM
                         : omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory");
    }
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n_q; q++)
            fm[f * n_q + q] = codes[q * n_frames + f];
    int64_t got = 0, k = 0;
    const float *chunk;
    for (int64_t f = 0; f < n_frames && !rc; f += DAC_RUN_FRAMES) {
        int nf = (int)(n_frames - f < DAC_RUN_FRAMES ? n_frames - f : DAC_RUN_FRAMES);
        rc = dac_stream_push(s, tp, fm + f * n_q, nf, &chunk, &k, err, errlen);
        if (!rc && got + k <= n && k > 0) /* chunk is NULL while nothing is ready */
            memcpy(pcm + got, chunk, (size_t)k * sizeof(float));
        got += k;
    }
    if (!rc)
        rc = dac_stream_finish(s, tp, &chunk, &k, err, errlen);
    if (!rc && got + k == n && k > 0)
        memcpy(pcm + got, chunk, (size_t)k * sizeof(float));
    if (!rc && got + k != n)
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: stream gave %lld samples, not %lld",
                       (long long)(got + k), (long long)n);
    dac_stream_free(s);
    free(fm);
    if (rc) {
        free(pcm);
        return rc;
    }
    *out = pcm;
    *n_out = n;
    return 0;
}
