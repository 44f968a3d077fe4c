/* vad.c - Silero VAD v6 forward pass and speech segmentation, reproducing
 * whisper.cpp's VAD (the oracle): each 512-sample window is reflect-padded by
 * 64 on both sides (not prefixed with real context), and every convolution
 * rounds its input to f16 first, as ggml_conv_1d's f16 im2col does. Weights
 * are widened to f32 at load; the network is small enough for plain loops. */
#include "audio/vad.h"

#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAD_PAD 64          /* reflect padding on each side of a window */
#define VAD_PADDED (VAD_WINDOW + 2 * VAD_PAD)
#define VAD_NFFT 256        /* STFT filter width */
#define VAD_HOP 128
#define VAD_FRAMES 4        /* (640 - 256) / 128 + 1 */
#define VAD_BINS 129
#define VAD_HIDDEN 128
#define VAD_MAX_FILE_BYTES ((size_t)64 << 20)

struct vad_model {
    float *stft;        /* [258][256]: rows 0..128 real, 129..257 imaginary DFT filters */
    float *enc_w[4];    /* [out][in][3] */
    float *enc_b[4];    /* [out] */
    float *w_ih, *w_hh; /* [512][128], gate blocks i, f, g, o */
    float *b_ih, *b_hh; /* [512] */
    float *head_w;      /* [128] final 1x1 conv */
    float *head_b;      /* [1] */
    float *mem;         /* one allocation behind all of the above */
};

/* Encoder layers: channels and strides fixed by whisper.cpp's graph. */
static const struct { int in, out, stride, len_in, len_out; } vad_enc[4] = {
    { 129, 128, 1, 4, 4 },
    { 128, 64, 2, 4, 2 },
    { 64, 64, 2, 2, 1 },
    { 64, 128, 1, 1, 1 },
};

enum {
    T_ENC0_W, T_ENC0_B, T_ENC1_W, T_ENC1_B, T_ENC2_W, T_ENC2_B, T_ENC3_W, T_ENC3_B,
    T_W_IH, T_W_HH, T_B_IH, T_B_HH, T_HEAD_W, T_HEAD_B, T_STFT, T_COUNT
};

/* Expected tensors, extents in ggml order (fastest first, missing = 1). */
static const struct { const char *name; int64_t ne[3]; } vad_tensors[T_COUNT] = {
    [T_ENC0_W] = { "_model.encoder.0.reparam_conv.weight", { 3, 129, 128 } },
    [T_ENC0_B] = { "_model.encoder.0.reparam_conv.bias", { 128, 1, 1 } },
    [T_ENC1_W] = { "_model.encoder.1.reparam_conv.weight", { 3, 128, 64 } },
    [T_ENC1_B] = { "_model.encoder.1.reparam_conv.bias", { 64, 1, 1 } },
    [T_ENC2_W] = { "_model.encoder.2.reparam_conv.weight", { 3, 64, 64 } },
    [T_ENC2_B] = { "_model.encoder.2.reparam_conv.bias", { 64, 1, 1 } },
    [T_ENC3_W] = { "_model.encoder.3.reparam_conv.weight", { 3, 64, 128 } },
    [T_ENC3_B] = { "_model.encoder.3.reparam_conv.bias", { 128, 1, 1 } },
    [T_W_IH] = { "_model.decoder.rnn.weight_ih", { 128, 512, 1 } },
    [T_W_HH] = { "_model.decoder.rnn.weight_hh", { 128, 512, 1 } },
    [T_B_IH] = { "_model.decoder.rnn.bias_ih", { 512, 1, 1 } },
    [T_B_HH] = { "_model.decoder.rnn.bias_hh", { 512, 1, 1 } },
    [T_HEAD_W] = { "_model.decoder.decoder.2.weight", { 128, 1, 1 } },
    [T_HEAD_B] = { "_model.decoder.decoder.2.bias", { 1, 1, 1 } },
    [T_STFT] = { "_model.stft.forward_basis_buffer", { 256, 1, 258 } },
};

// ---- loading -----------------------------------------------------------------

struct reader {
    const uint8_t *p;
    size_t len, pos;
    const char *name;
    char *err;
    size_t errlen;
};

static int rd_i32(struct reader *r, const char *field, int32_t *v)
{
    if (r->len - r->pos < 4)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                         "vad: %s: truncated at byte %zu reading %s", r->name, r->pos, field);
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return OMNI_OK;
}

static int load_header(struct reader *r)
{
    int32_t magic, len, v[3];
    int rc;
    if ((rc = rd_i32(r, "magic", &magic)) < 0)
        return rc;
    if ((uint32_t)magic != 0x67676d6cu)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                         "vad: %s: bad magic 0x%08x (not a whisper.cpp ggml VAD file)", r->name,
                         (uint32_t)magic);
    if ((rc = rd_i32(r, "model type length", &len)) < 0)
        return rc;
    if (len < 0 || len > 256 || (size_t)len > r->len - r->pos)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                         "vad: %s: model type length %d invalid", r->name, len);
    if (len < 6 || memcmp(r->p + r->pos, "silero", 6) != 0)
        return omni_fail(r->err, r->errlen, OMNI_ERR_UNSUPPORTED,
                         "vad: %s: model type '%.*s' is not a Silero VAD", r->name, len,
                         (const char *)r->p + r->pos);
    r->pos += (size_t)len;
    for (int i = 0; i < 3; i++)
        if ((rc = rd_i32(r, "version", &v[i])) < 0)
            return rc;
    static const struct { const char *field; int32_t want; } fixed[] = {
        { "n_window", VAD_WINDOW }, { "n_context", 64 }, { "n_encoder_layers", 4 },
    };
    for (int i = 0; i < 3; i++) {
        int32_t x;
        if ((rc = rd_i32(r, fixed[i].field, &x)) < 0)
            return rc;
        if (x != fixed[i].want)
            return omni_fail(r->err, r->errlen, OMNI_ERR_UNSUPPORTED,
                             "vad: %s: %s is %d, expected %d", r->name, fixed[i].field, x,
                             fixed[i].want);
    }
    for (int l = 0; l < 4; l++) {
        for (int i = 0; i < 3; i++)
            if ((rc = rd_i32(r, "encoder layer shape", &v[i])) < 0)
                return rc;
        if (v[0] != vad_enc[l].in || v[1] != vad_enc[l].out || v[2] != 3)
            return omni_fail(r->err, r->errlen, OMNI_ERR_UNSUPPORTED,
                             "vad: %s: encoder layer %d is (%d, %d, %d), expected (%d, %d, 3)",
                             r->name, l, v[0], v[1], v[2], vad_enc[l].in, vad_enc[l].out);
    }
    static const struct { const char *field; int32_t want; } tail[] = {
        { "lstm_input_size", 128 }, { "lstm_hidden_size", VAD_HIDDEN },
        { "final_conv_in", 128 }, { "final_conv_out", 1 },
    };
    for (int i = 0; i < 4; i++) {
        int32_t x;
        if ((rc = rd_i32(r, tail[i].field, &x)) < 0)
            return rc;
        if (x != tail[i].want)
            return omni_fail(r->err, r->errlen, OMNI_ERR_UNSUPPORTED,
                             "vad: %s: %s is %d, expected %d", r->name, tail[i].field, x,
                             tail[i].want);
    }
    return OMNI_OK;
}

/* Read tensor records to the end of the file into m's f32 slots. */
static int load_tensors(struct reader *r, float *slot[T_COUNT])
{
    int seen[T_COUNT] = { 0 };
    int rc;
    while (r->pos < r->len) {
        size_t rec = r->pos;
        int32_t n_dims, name_len, type, ne[4] = { 1, 1, 1, 1 };
        if ((rc = rd_i32(r, "tensor n_dims", &n_dims)) < 0 ||
            (rc = rd_i32(r, "tensor name length", &name_len)) < 0 ||
            (rc = rd_i32(r, "tensor type", &type)) < 0)
            return rc;
        if (n_dims < 0 || n_dims > 4 || name_len < 1 || name_len > 256 || (type != 0 && type != 1))
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                             "vad: %s: tensor record at byte %zu: n_dims %d, name length %d, "
                             "type %d invalid", r->name, rec, n_dims, name_len, type);
        for (int d = 0; d < n_dims; d++)
            if ((rc = rd_i32(r, "tensor extent", &ne[d])) < 0)
                return rc;
        if ((size_t)name_len > r->len - r->pos)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                             "vad: %s: tensor name at byte %zu past end of file", r->name,
                             r->pos);
        const char *name = (const char *)r->p + r->pos;
        r->pos += (size_t)name_len;
        int t = 0;
        while (t < T_COUNT && (strlen(vad_tensors[t].name) != (size_t)name_len ||
                               memcmp(vad_tensors[t].name, name, (size_t)name_len) != 0))
            t++;
        if (t == T_COUNT)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "vad: %s: unknown tensor '%.*s'",
                             r->name, name_len, name);
        if (seen[t]++)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "vad: %s: tensor '%s' twice",
                             r->name, vad_tensors[t].name);
        if (ne[0] != vad_tensors[t].ne[0] || ne[1] != vad_tensors[t].ne[1] ||
            ne[2] != vad_tensors[t].ne[2] || ne[3] != 1)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                             "vad: %s: tensor '%s' has extents (%d, %d, %d, %d), expected "
                             "(%lld, %lld, %lld)", r->name, vad_tensors[t].name, ne[0], ne[1],
                             ne[2], ne[3], (long long)vad_tensors[t].ne[0],
                             (long long)vad_tensors[t].ne[1], (long long)vad_tensors[t].ne[2]);
        size_t nel = (size_t)ne[0] * (size_t)ne[1] * (size_t)ne[2]; /* extents checked above */
        size_t bytes = nel * (type == 0 ? 4 : 2);
        if (bytes > r->len - r->pos)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                             "vad: %s: tensor '%s': %zu data bytes at offset %zu past end of "
                             "file (%zu bytes)", r->name, vad_tensors[t].name, bytes, r->pos,
                             r->len);
        const uint8_t *d = r->p + r->pos;
        for (size_t i = 0; i < nel; i++) {
            if (type == 0) {
                memcpy(&slot[t][i], d + 4 * i, 4);
            } else {
                uint16_t h;
                memcpy(&h, d + 2 * i, 2);
                slot[t][i] = omni_fp16_to_fp32(h);
            }
        }
        r->pos += bytes;
    }
    for (int t = 0; t < T_COUNT; t++)
        if (!seen[t])
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "vad: %s: tensor '%s' missing",
                             r->name, vad_tensors[t].name);
    return OMNI_OK;
}

struct vad_model *vad_model_load_memory(const void *data, size_t len, const char *name, char *err,
                                        size_t errlen)
{
    struct reader r = { .p = data, .len = data ? len : 0, .name = name ? name : "(memory)",
                        .err = err, .errlen = errlen };
    struct vad_model *m = calloc(1, sizeof *m);
    size_t total = 0;
    for (int t = 0; t < T_COUNT; t++)
        total += (size_t)(vad_tensors[t].ne[0] * vad_tensors[t].ne[1] * vad_tensors[t].ne[2]);
    if (!m || !(m->mem = malloc(total * sizeof(float)))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vad: %s: out of memory", r.name);
        goto fail;
    }
    float *slot[T_COUNT], *p = m->mem;
    for (int t = 0; t < T_COUNT; t++) {
        slot[t] = p;
        p += vad_tensors[t].ne[0] * vad_tensors[t].ne[1] * vad_tensors[t].ne[2];
    }
    if (load_header(&r) < 0 || load_tensors(&r, slot) < 0)
        goto fail;
    m->stft = slot[T_STFT];
    for (int l = 0; l < 4; l++) {
        m->enc_w[l] = slot[T_ENC0_W + 2 * l];
        m->enc_b[l] = slot[T_ENC0_B + 2 * l];
    }
    m->w_ih = slot[T_W_IH];
    m->w_hh = slot[T_W_HH];
    m->b_ih = slot[T_B_IH];
    m->b_hh = slot[T_B_HH];
    m->head_w = slot[T_HEAD_W];
    m->head_b = slot[T_HEAD_B];
    return m;
fail:
    vad_model_free(m);
    return NULL;
}

struct vad_model *vad_model_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        omni_fail(err, errlen, OMNI_ERR_IO, "vad: %s: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || (size_t)size > VAD_MAX_FILE_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        omni_fail(err, errlen, size < 0 ? OMNI_ERR_IO : OMNI_ERR_LIMIT,
                  "vad: %s: size %ld unusable (limit %zu bytes)", path, size, VAD_MAX_FILE_BYTES);
        return NULL;
    }
    buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(buf);
        omni_fail(err, errlen, buf ? OMNI_ERR_IO : OMNI_ERR_NOMEM, "vad: %s: cannot read", path);
        return NULL;
    }
    fclose(f);
    struct vad_model *m = vad_model_load_memory(buf, (size_t)size, path, err, errlen);
    free(buf);
    return m;
}

void vad_model_free(struct vad_model *m)
{
    if (!m)
        return;
    free(m->mem);
    free(m);
}

// ---- forward pass --------------------------------------------------------------

/* ggml_conv_1d converts its input to f16 (im2col) before the product. */
static inline float f16_round(float x)
{
    return omni_fp16_to_fp32(omni_fp32_to_fp16(x));
}

/* Dot product with eight independent partial sums, so that the compiler can
 * vectorize it without reassociating a single float sum. */
static float vad_dot(const float *a, const float *b, int n)
{
    float acc[8] = { 0 }, s = 0;
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[k + j] * b[k + j];
    for (; k < n; k++)
        s += a[k] * b[k];
    for (int j = 0; j < 8; j++)
        s += acc[j];
    return s;
}

/* out[o][t] = ReLU(bias[o] + sum_c,k w[o][c][k] * in[c][t*stride + k - 1]):
 * kernel 3, zero padding 1. The columns are gathered first (im2col, as
 * ggml does) so each output is one contiguous dot product. */
static void conv3_relu(const float *w, const float *b, int c_in, int c_out, int len_in, int stride,
                       int len_out, const float *in, float *out)
{
    float col[VAD_BINS * 3];
    for (int t = 0; t < len_out; t++) {
        for (int c = 0; c < c_in; c++)
            for (int k = 0; k < 3; k++) {
                int x = t * stride + k - 1;
                col[c * 3 + k] = x >= 0 && x < len_in ? in[c * len_in + x] : 0.0f;
            }
        for (int o = 0; o < c_out; o++) {
            float y = vad_dot(w + (size_t)o * c_in * 3, col, c_in * 3) + b[o];
            out[o * len_out + t] = y > 0 ? y : 0;
        }
    }
}

static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* One 512-sample window -> speech probability; h and c are the LSTM state. */
static float vad_window(const struct vad_model *m, float *h, float *c, const float *win)
{
    float pad[VAD_PADDED];
    float spec[2 * VAD_BINS][VAD_FRAMES];
    float act[2][VAD_BINS * VAD_FRAMES]; /* ping-pong activations [channels][len] */
    float gates[4 * VAD_HIDDEN];

    /* 1. STFT: reflect-pad (edge not repeated), filter bank with hop 128, magnitude. */
    for (int j = 0; j < VAD_PAD; j++) {
        pad[j] = f16_round(win[VAD_PAD - j]);
        pad[VAD_PAD + VAD_WINDOW + j] = f16_round(win[VAD_WINDOW - 2 - j]);
    }
    for (int i = 0; i < VAD_WINDOW; i++)
        pad[VAD_PAD + i] = f16_round(win[i]);
    for (int o = 0; o < 2 * VAD_BINS; o++) {
        const float *f = m->stft + (size_t)o * VAD_NFFT;
        for (int t = 0; t < VAD_FRAMES; t++) {
            spec[o][t] = vad_dot(f, pad + t * VAD_HOP, VAD_NFFT);
        }
    }
    for (int b = 0; b < VAD_BINS; b++)
        for (int t = 0; t < VAD_FRAMES; t++) {
            float re = spec[b][t], im = spec[VAD_BINS + b][t];
            act[0][b * VAD_FRAMES + t] = f16_round(sqrtf(re * re + im * im));
        }

    /* 2. Encoder: four conv + ReLU layers; the next conv sees f16 inputs. */
    for (int l = 0; l < 4; l++) {
        float *in = act[l & 1], *out = act[(l + 1) & 1];
        conv3_relu(m->enc_w[l], m->enc_b[l], vad_enc[l].in, vad_enc[l].out, vad_enc[l].len_in,
                   vad_enc[l].stride, vad_enc[l].len_out, in, out);
        if (l < 3)
            for (int i = 0; i < vad_enc[l].out * vad_enc[l].len_out; i++)
                out[i] = f16_round(out[i]);
    }
    const float *x = act[0]; /* 128 features, length 1 */

    /* 3. LSTM cell: (W_ih x + b_ih) + (W_hh h + b_hh), gates i f g o. */
    for (int r = 0; r < 4 * VAD_HIDDEN; r++) {
        const float *wi = m->w_ih + (size_t)r * VAD_HIDDEN, *wh = m->w_hh + (size_t)r * VAD_HIDDEN;
        gates[r] = (vad_dot(wi, x, VAD_HIDDEN) + m->b_ih[r]) +
                   (vad_dot(wh, h, VAD_HIDDEN) + m->b_hh[r]);
    }
    float head = 0;
    for (int k = 0; k < VAD_HIDDEN; k++) {
        float ig = sigmoidf(gates[k]), fg = sigmoidf(gates[VAD_HIDDEN + k]);
        float gg = tanhf(gates[2 * VAD_HIDDEN + k]), og = sigmoidf(gates[3 * VAD_HIDDEN + k]);
        c[k] = fg * c[k] + ig * gg;
        h[k] = og * tanhf(c[k]);
        /* 4. Head: ReLU, 1x1 conv (f16 input again), sigmoid. */
        head += m->head_w[k] * f16_round(h[k] > 0 ? h[k] : 0);
    }
    return sigmoidf(head + m->head_b[0]);
}

int vad_detect(const struct vad_model *m, const float *pcm, size_t n, float **probs,
               size_t *n_probs, char *err, size_t errlen)
{
    *probs = NULL;
    *n_probs = 0;
    if (!m || (n && !pcm))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vad: no model or no samples");
    size_t nw = n / VAD_WINDOW + (n % VAD_WINDOW != 0);
    if (nw == 0)
        return OMNI_OK;
    float *p = malloc(nw * sizeof *p);
    if (!p)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vad: out of memory for %zu windows", nw);
    float h[VAD_HIDDEN] = { 0 }, c[VAD_HIDDEN] = { 0 }, last[VAD_WINDOW];
    for (size_t w = 0; w < nw; w++) {
        const float *win = pcm + w * VAD_WINDOW;
        size_t have = n - w * VAD_WINDOW;
        if (have < VAD_WINDOW) { /* the last window is zero-padded */
            memcpy(last, win, have * sizeof(float));
            memset(last + have, 0, (VAD_WINDOW - have) * sizeof(float));
            win = last;
        }
        p[w] = vad_window(m, h, c, win);
    }
    *probs = p;
    *n_probs = nw;
    return OMNI_OK;
}

// ---- segments ------------------------------------------------------------------

struct vad_params vad_default_params(void)
{
    return (struct vad_params){
        .threshold = 0.5f,
        .min_speech_duration_ms = 250,
        .min_silence_duration_ms = 100,
        .max_speech_duration_s = FLT_MAX,
        .speech_pad_ms = 30,
        .samples_overlap_s = 0.1f,
        .merge_gap_ms = 200,
    };
}

int64_t vad_samples_to_cs(int64_t samples)
{
    return (int64_t)((double)samples / VAD_SAMPLE_RATE * 100.0 + 0.5);
}

/* Parameters in samples, as whisper_vad_segments_from_probs derives them. */
struct seg_cfg {
    float threshold, neg_threshold;
    int64_t min_speech, min_silence, pad, max_speech, merge_gap;
    int64_t min_silence_at_max_speech; /* silence that marks a split point (98 ms, Silero's) */
    int max_speech_limited;
};

static int seg_cfg_init(const struct vad_params *p, struct seg_cfg *c, char *err, size_t errlen)
{
    if (!(p->threshold >= 0 && p->threshold <= 1) || p->min_speech_duration_ms < 0 ||
        p->min_silence_duration_ms < 0 || p->speech_pad_ms < 0 || p->speech_pad_ms > 60000 ||
        p->min_speech_duration_ms > 3600000 || p->min_silence_duration_ms > 3600000 ||
        p->merge_gap_ms < 0 || p->merge_gap_ms > 3600000 || !(p->max_speech_duration_s > 0))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vad: segment parameters out of range");
    c->threshold = p->threshold;
    c->neg_threshold = p->threshold - 0.15f < 0.01f ? 0.01f : p->threshold - 0.15f;
    c->min_speech = (int64_t)VAD_SAMPLE_RATE * p->min_speech_duration_ms / 1000;
    c->min_silence = (int64_t)VAD_SAMPLE_RATE * p->min_silence_duration_ms / 1000;
    c->pad = (int64_t)VAD_SAMPLE_RATE * p->speech_pad_ms / 1000;
    c->merge_gap = (int64_t)VAD_SAMPLE_RATE * p->merge_gap_ms / 1000;
    c->min_silence_at_max_speech = (int64_t)VAD_SAMPLE_RATE * 98 / 1000;
    c->max_speech_limited = p->max_speech_duration_s <= 100000.0f;
    c->max_speech = INT64_MAX / 4;
    if (c->max_speech_limited) {
        int64_t t = (int64_t)VAD_SAMPLE_RATE * (int64_t)p->max_speech_duration_s - VAD_WINDOW -
                    2 * c->pad;
        if (t >= 0)
            c->max_speech = t;
        else
            c->max_speech_limited = 0;
    }
    return OMNI_OK;
}

/* Silero's start/stop state machine. Positions are samples; 0 in temp_end,
 * prev_end and next_start means "unset", a quirk kept from the reference. */
struct seg_raw {
    int in_speech;
    int64_t start, temp_end, prev_end, next_start;
};

/* Feed the probability of the window starting at sample cur; raw segments
 * completed by it go to out[] (at most 2). Returns how many. */
static int seg_raw_step(const struct seg_cfg *c, struct seg_raw *s, float prob, int64_t cur,
                        struct vad_segment out[2])
{
    int n = 0;
    if (prob >= c->threshold && s->temp_end) { /* back to speech: forget the tentative end */
        s->temp_end = 0;
        if (s->next_start < s->prev_end)
            s->next_start = cur;
    }
    if (prob >= c->threshold && !s->in_speech) {
        s->in_speech = 1;
        s->start = cur;
        return n;
    }
    if (s->in_speech && cur - s->start > c->max_speech) {
        /* Too long: split at the last long-enough silence, else right here. */
        if (s->prev_end) {
            out[n++] = (struct vad_segment){ s->start, s->prev_end };
            if (s->next_start < s->prev_end)
                s->in_speech = 0;
            else
                s->start = s->next_start;
            s->prev_end = s->next_start = s->temp_end = 0;
        } else {
            out[n++] = (struct vad_segment){ s->start, cur };
            s->prev_end = s->next_start = s->temp_end = 0;
            s->in_speech = 0;
            return n;
        }
    }
    if (prob < c->neg_threshold && s->in_speech) {
        if (!s->temp_end)
            s->temp_end = cur;
        if (cur - s->temp_end > c->min_silence_at_max_speech)
            s->prev_end = s->temp_end;
        if (cur - s->temp_end >= c->min_silence) {
            if (s->temp_end - s->start > c->min_speech)
                out[n++] = (struct vad_segment){ s->start, s->temp_end };
            s->prev_end = s->next_start = s->temp_end = 0;
            s->in_speech = 0;
        }
    }
    return n;
}

int vad_segments_from_probs(const float *probs, size_t n_probs, const struct vad_params *p,
                            struct vad_segment **segs, size_t *n_segs, char *err, size_t errlen)
{
    struct vad_params defaults = vad_default_params();
    struct seg_cfg c;
    *segs = NULL;
    *n_segs = 0;
    int rc = seg_cfg_init(p ? p : &defaults, &c, err, errlen);
    if (rc < 0)
        return rc;
    if (n_probs > (size_t)INT64_MAX / VAD_WINDOW / 4)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vad: %zu probabilities", n_probs);
    const int64_t audio_len = (int64_t)n_probs * VAD_WINDOW;
    /* At most one raw segment per two windows, plus splits: n_probs + 2 bound it. */
    struct vad_segment *s = malloc((n_probs + 2) * sizeof *s);
    if (!s)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vad: out of memory");
    size_t n = 0;
    struct seg_raw raw = { 0 };
    for (size_t i = 0; i < n_probs; i++)
        n += (size_t)seg_raw_step(&c, &raw, probs[i], (int64_t)i * VAD_WINDOW, s + n);
    if (raw.in_speech && audio_len - raw.start > c.min_speech)
        s[n++] = (struct vad_segment){ raw.start, audio_len };

    /* Merge neighbours closer than the merge gap, then drop what is still short. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && s[i].start_sample - s[k - 1].end_sample < c.merge_gap)
            s[k - 1].end_sample = s[i].end_sample;
        else
            s[k++] = s[i];
    }
    n = 0;
    for (size_t i = 0; i < k; i++)
        if (s[i].end_sample - s[i].start_sample >= c.min_speech)
            s[n++] = s[i];

    /* Padding: close neighbours split the gap, others get the full pad. */
    for (size_t i = 0; i < n; i++) {
        if (i == 0)
            s[i].start_sample = s[i].start_sample > c.pad ? s[i].start_sample - c.pad : 0;
        if (i + 1 < n) {
            int64_t gap = s[i + 1].start_sample - s[i].end_sample;
            int64_t d = gap < 2 * c.pad ? gap / 2 : c.pad;
            s[i].end_sample = gap < 2 * c.pad ? s[i].end_sample + d
                              : s[i].end_sample + d < audio_len ? s[i].end_sample + d : audio_len;
            s[i + 1].start_sample = s[i + 1].start_sample > d ? s[i + 1].start_sample - d : 0;
        } else {
            s[i].end_sample = s[i].end_sample + c.pad < audio_len ? s[i].end_sample + c.pad
                                                                  : audio_len;
        }
    }
    if (n == 0) {
        free(s);
        return OMNI_OK;
    }
    *segs = s;
    *n_segs = n;
    return OMNI_OK;
}

// ---- streaming -------------------------------------------------------------------
/* The batch rules run incrementally, in the same order: raw segments (Silero's
 * state machine), merged into groups while closer than merge_gap, short groups
 * dropped, padding added. A group that survives gets its START as soon as it
 * is sure to be long enough; it then becomes the "tail" when no later speech
 * can merge with it, and the tail's STOP waits until its padding is known:
 * pad, unless the next surviving group starts closer than 2 * pad, in which
 * case both sides get half the gap (the STOP then goes out right before that
 * group's START). */

#define VAD_STREAM_PROBS 65536 /* unpulled probabilities kept */
#define VAD_STREAM_EVENTS 256  /* unpopped events kept */

struct vad_stream {
    const struct vad_model *m;
    struct seg_cfg cfg;
    float h[VAD_HIDDEN], c[VAD_HIDDEN];
    float win[VAD_WINDOW];
    int n_win;               /* samples waiting in win */
    uint64_t n_windows;      /* probabilities computed */
    int finished, in_speech;
    struct seg_raw raw;
    /* The group of kept raw segments that later speech may still extend. */
    int has_group, group_started;
    int64_t group_start, group_end;
    int open_started;        /* START already sent for the open raw segment */
    /* The last group that survived: START sent, STOP waiting for its padding. */
    int has_tail;
    int64_t tail_end;
    float *probs;            /* ring of VAD_STREAM_PROBS */
    size_t p_head, p_count;
    struct vad_event ev[VAD_STREAM_EVENTS];
    size_t e_head, e_count;
};

static void stream_emit(struct vad_stream *s, enum vad_event_type type, int64_t sample)
{
    if (s->e_count == VAD_STREAM_EVENTS) {
        s->e_head = (s->e_head + 1) % VAD_STREAM_EVENTS;
        s->e_count--;
    }
    s->ev[(s->e_head + s->e_count++) % VAD_STREAM_EVENTS] = (struct vad_event){ type, sample };
    s->in_speech = type == VAD_SPEECH_START;
}

/* The tail's STOP with padding d (audio_len > 0: clipped to the audio). */
static void stream_stop_tail(struct vad_stream *s, int64_t d, int64_t audio_len)
{
    int64_t end = s->tail_end + d;
    stream_emit(s, VAD_SPEECH_STOP, audio_len && end > audio_len ? audio_len : end);
    s->has_tail = 0;
}

/* A group starting at start is sure to survive: the tail before it learns
 * its padding and stops, then the group starts, padded alike. */
static void stream_start(struct vad_stream *s, int64_t start)
{
    int64_t d = s->cfg.pad;
    if (s->has_tail) {
        int64_t gap = start - s->tail_end;
        if (gap < 2 * s->cfg.pad)
            d = gap / 2;
        stream_stop_tail(s, d, 0);
    }
    stream_emit(s, VAD_SPEECH_START, start > d ? start - d : 0);
}

/* The pending group can no longer grow: a long enough one becomes the tail. */
static void stream_close_group(struct vad_stream *s)
{
    if (s->group_end - s->group_start >= s->cfg.min_speech) {
        if (!s->group_started)
            stream_start(s, s->group_start);
        s->has_tail = 1;
        s->tail_end = s->group_end;
    }
    s->has_group = 0;
}

static void stream_add_raw(struct vad_stream *s, struct vad_segment seg)
{
    if (s->has_group && seg.start_sample - s->group_end < s->cfg.merge_gap) {
        s->group_end = seg.end_sample;
    } else {
        if (s->has_group)
            stream_close_group(s);
        s->has_group = 1;
        s->group_start = seg.start_sample;
        s->group_end = seg.end_sample;
        s->group_started = s->open_started;
    }
    s->open_started = 0;
}

/* After a window: close the group if no later speech can merge with it, send
 * START as soon as the speech is sure to survive the length rules, and stop
 * the tail once no surviving group can start within 2 * pad of it. */
static void stream_update(struct vad_stream *s, int64_t next)
{
    const struct seg_cfg *c = &s->cfg;
    int open_sure = 0;
    int64_t open_end = 0; /* lower bound of where the open raw segment will end */
    if (s->raw.in_speech) {
        open_end = s->raw.temp_end ? s->raw.temp_end : next;
        if (c->max_speech_limited && s->raw.prev_end && s->raw.prev_end < open_end)
            open_end = s->raw.prev_end;
        open_sure = open_end - s->raw.start > c->min_speech;
    }
    int64_t earliest_start = s->raw.in_speech ? s->raw.start : next;
    if (s->has_group) {
        if (earliest_start - s->group_end >= c->merge_gap) {
            stream_close_group(s);
        } else if (!s->group_started) {
            int64_t end = s->group_end;
            if (open_sure && open_end > end) /* the open segment will merge into the group */
                end = open_end;
            if (end - s->group_start >= c->min_speech) {
                stream_start(s, s->group_start);
                s->group_started = 1;
            }
        }
    }
    if (!s->has_group && open_sure && !s->open_started) {
        stream_start(s, s->raw.start);
        s->open_started = 1;
    }
    if (s->has_tail && (s->has_group ? s->group_start : earliest_start) - s->tail_end >= 2 * c->pad)
        stream_stop_tail(s, c->pad, 0);
}

/* One window's probability: keep it for pulling, run the segment rules. */
static void stream_prob(struct vad_stream *s, float p)
{
    if (s->p_count == VAD_STREAM_PROBS) {
        s->p_head = (s->p_head + 1) % VAD_STREAM_PROBS;
        s->p_count--;
    }
    s->probs[(s->p_head + s->p_count++) % VAD_STREAM_PROBS] = p;
    struct vad_segment done[2];
    int64_t cur = (int64_t)s->n_windows * VAD_WINDOW;
    int n = seg_raw_step(&s->cfg, &s->raw, p, cur, done);
    for (int i = 0; i < n; i++)
        stream_add_raw(s, done[i]);
    s->n_windows++;
    stream_update(s, cur + VAD_WINDOW);
}

static void stream_window(struct vad_stream *s, const float *win)
{
    stream_prob(s, vad_window(s->m, s->h, s->c, win));
}

struct vad_stream *vad_stream_new(const struct vad_model *m, const struct vad_params *p,
                                  char *err, size_t errlen)
{
    struct vad_params defaults = vad_default_params();
    if (!p)
        p = &defaults;
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "vad: no model");
        return NULL;
    }
    if (p->speech_pad_ms > 100) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                  "vad: speech_pad_ms %d: streams support at most 100", p->speech_pad_ms);
        return NULL;
    }
    struct vad_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->probs = malloc(VAD_STREAM_PROBS * sizeof(float)))) {
        free(s);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vad: out of memory");
        return NULL;
    }
    if (seg_cfg_init(p, &s->cfg, err, errlen) < 0) {
        vad_stream_free(s);
        return NULL;
    }
    s->m = m;
    return s;
}

int vad_stream_push(struct vad_stream *s, const float *pcm, size_t n, char *err, size_t errlen)
{
    if (s->finished)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vad: stream already finished");
    while (n > 0) {
        size_t k = VAD_WINDOW - (size_t)s->n_win;
        if (k > n)
            k = n;
        memcpy(s->win + s->n_win, pcm, k * sizeof(float));
        s->n_win += (int)k;
        pcm += k;
        n -= k;
        if (s->n_win == VAD_WINDOW) {
            stream_window(s, s->win);
            s->n_win = 0;
        }
    }
    return OMNI_OK;
}

int vad_stream_finish(struct vad_stream *s, char *err, size_t errlen)
{
    if (s->finished)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vad: stream already finished");
    s->finished = 1;
    if (s->n_win > 0) {
        memset(s->win + s->n_win, 0, (size_t)(VAD_WINDOW - s->n_win) * sizeof(float));
        stream_window(s, s->win);
        s->n_win = 0;
    }
    int64_t audio_len = (int64_t)s->n_windows * VAD_WINDOW;
    if (s->raw.in_speech && audio_len - s->raw.start > s->cfg.min_speech)
        stream_add_raw(s, (struct vad_segment){ s->raw.start, audio_len });
    s->raw = (struct seg_raw){ 0 };
    if (s->has_group)
        stream_close_group(s);
    if (s->has_tail) /* nothing follows: the full padding, within the audio */
        stream_stop_tail(s, s->cfg.pad, audio_len);
    return OMNI_OK;
}

int vad_stream_push_probs(struct vad_stream *s, const float *probs, size_t n, char *err,
                          size_t errlen)
{
    if (s->finished)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vad: stream already finished");
    if (s->n_win > 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "vad: probabilities pushed into a stream with a partial audio window");
    for (size_t i = 0; i < n; i++)
        stream_prob(s, probs[i]);
    return OMNI_OK;
}

void vad_stream_reset(struct vad_stream *s)
{
    const struct vad_model *m = s->m;
    struct seg_cfg cfg = s->cfg;
    float *probs = s->probs;
    memset(s, 0, sizeof *s);
    s->m = m;
    s->cfg = cfg;
    s->probs = probs;
}

size_t vad_stream_pull_probs(struct vad_stream *s, float *out, size_t max)
{
    size_t n = 0;
    for (; n < max && s->p_count > 0; n++) {
        out[n] = s->probs[s->p_head];
        s->p_head = (s->p_head + 1) % VAD_STREAM_PROBS;
        s->p_count--;
    }
    return n;
}

int vad_stream_next_event(struct vad_stream *s, struct vad_event *ev)
{
    if (s->e_count == 0)
        return 0;
    *ev = s->ev[s->e_head];
    s->e_head = (s->e_head + 1) % VAD_STREAM_EVENTS;
    s->e_count--;
    return 1;
}

uint64_t vad_stream_n_windows(const struct vad_stream *s)
{
    return s->n_windows;
}

int vad_stream_in_speech(const struct vad_stream *s)
{
    return s->in_speech;
}

int vad_stream_pending_end(const struct vad_stream *s, int64_t *end)
{
    int64_t e;
    if (!s->in_speech)
        return 0;
    if (s->has_tail)
        e = s->tail_end;            /* ended; the STOP waits only for its padding */
    else if (s->raw.in_speech && s->raw.temp_end)
        e = s->raw.temp_end;        /* below the threshold: the raw segment would end here */
    else if (!s->raw.in_speech && s->has_group && s->group_started)
        e = s->group_end;           /* closed; only merging speech could extend it */
    else
        return 0;
    *end = e + s->cfg.pad;
    return 1;
}

void vad_stream_free(struct vad_stream *s)
{
    if (!s)
        return;
    free(s->probs);
    free(s);
}
