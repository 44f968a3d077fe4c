/* test_attention_dev.c - the backend's attention against a float64
 * reference over the same pool values: prompt steps (more than 64 tokens:
 * cuda's FlashAttention-style kernel, src/core/cuda/flash_attn.cu) and
 * decode steps over long contexts (cuda's flash decoding there). The prompt
 * step packs two sequences' chunks (a 64-token tile spans both), one with
 * context already in the pool, rows out of position order; the decode step
 * has tokens of 5,000, 1,234 and 18 keys (most slices of the short ones
 * empty). Scattered block tables, F16 and F32 pools, head_dim 64 / 96 /
 * 128, with and without a sliding window. The backend is $OMNI_DEV_BACKEND
 * ("cpu" by default), as in test_model_dev.c. */
#include "test.h"

#include "src/core/backend.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t att_rng;
static float att_rand(void)
{
    att_rng = att_rng * 1664525u + 1013904223u;
    return (float)((att_rng >> 8) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

#define AT_PBS 16 /* pool block size */

/* One step's shape: n_tok tokens (pos, seq) over 2 sequences of nb blocks
 * each (tables: distinct scattered blocks of a pool of 2 * nb). */
struct att_shape {
    int nh, nkv, nb, n_tok;
    const int32_t *pos, *seq;
};

/* out[t] of the reference: softmax over first..pos of q . k * scale, in
 * double, from the pool as stored (kc / vc: floats per slot). */
static void att_reference(const struct att_shape *c, const float *q, const float *kc,
                          const float *vc, const int32_t *tables, int hd, int n_swa, float scale,
                          float *out)
{
    const int kv_dim = c->nkv * hd, g = c->nh / c->nkv;
    double *w = malloc(sizeof(double) * c->nb * AT_PBS);
    for (int t = 0; t < c->n_tok; t++)
        for (int h = 0; h < c->nh; h++) {
            const float *qr = q + ((size_t)t * c->nh + h) * hd;
            const int p = c->pos[t], first = n_swa > 0 && p >= n_swa ? p - n_swa + 1 : 0;
            const int32_t *table = tables + c->seq[t] * c->nb;
            double mx = -INFINITY, sum = 0.0;
            for (int j = first; j <= p; j++) {
                const int64_t slot = (int64_t)table[j / AT_PBS] * AT_PBS + j % AT_PBS;
                const float *kr = kc + slot * kv_dim + (h / g) * hd;
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)qr[i] * kr[i];
                w[j] = d * scale;
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int j = first; j <= p; j++)
                sum += (w[j] = exp(w[j] - mx));
            float *o = out + ((size_t)t * c->nh + h) * hd;
            for (int i = 0; i < hd; i++) {
                double acc = 0.0;
                for (int j = first; j <= p; j++) {
                    const int64_t slot = (int64_t)table[j / AT_PBS] * AT_PBS + j % AT_PBS;
                    acc += w[j] * vc[slot * kv_dim + (h / g) * hd + i];
                }
                o[i] = (float)(acc / sum);
            }
        }
    free(w);
}

/* The step of c on the backend for F16 / F32 pools, head_dim 64 / 96 / 128
 * and the windows swa[0..1], each against the reference. */
static void att_check(const struct att_shape *c, const int swa[2])
{
    char err[256];
    const char *name = getenv("OMNI_DEV_BACKEND");
    struct omni_backend *be = omni_backend_new(name && *name ? name : "cpu", 0, err, sizeof err);
    if (!be) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    enum { HDM = 128 };
    const int slots_n = 2 * c->nb * AT_PBS;
    int32_t *tables = malloc(2 * c->nb * sizeof(int32_t));
    int64_t *slots = malloc(slots_n * sizeof(int64_t));
    for (int i = 0; i < 2 * c->nb; i++) /* a permutation of the pool's blocks */
        tables[i] = (int32_t)(((int64_t)i * 7919 + 3) % (2 * c->nb));
    for (int i = 0; i < slots_n; i++)
        slots[i] = i;
    const size_t qn = (size_t)c->n_tok * c->nh * HDM, pn = (size_t)slots_n * c->nkv * HDM;
    float *q = malloc(qn * sizeof(float)), *out = malloc(qn * sizeof(float));
    float *ref = malloc(qn * sizeof(float)), *kv[2], *pool[2];
    uint16_t *raw = malloc(pn * sizeof(uint16_t));
    for (int i = 0; i < 2; i++) {
        kv[i] = malloc(pn * sizeof(float));
        pool[i] = malloc(pn * sizeof(float));
    }
    float *dq = be->alloc(be, qn * sizeof(float)), *dout = be->alloc(be, qn * sizeof(float));
    float *dkv[2] = { be->alloc(be, pn * sizeof(float)), be->alloc(be, pn * sizeof(float)) };
    void *dpool[2] = { be->alloc(be, pn * sizeof(float)), be->alloc(be, pn * sizeof(float)) };
    int32_t *dint = be->alloc(be, (2 * c->n_tok + 2 * c->nb) * sizeof(int32_t));
    int64_t *dslot = be->alloc(be, slots_n * sizeof(int64_t));
    CHECK(tables && slots && q && out && ref && raw && kv[0] && kv[1] && pool[0] && pool[1]);
    CHECK(dq && dout && dkv[0] && dkv[1] && dpool[0] && dpool[1] && dint && dslot);
    if (test_failed_now())
        goto done;
    CHECK(be->upload(be, dint, c->pos, c->n_tok * sizeof(int32_t)) == 0);
    CHECK(be->upload(be, dint + c->n_tok, c->seq, c->n_tok * sizeof(int32_t)) == 0);
    CHECK(be->upload(be, dint + 2 * c->n_tok, tables, 2 * c->nb * sizeof(int32_t)) == 0);
    CHECK(be->upload(be, dslot, slots, slots_n * sizeof(int64_t)) == 0);
    static const int kv_types[2] = { GGML_TYPE_F16, GGML_TYPE_F32 }, hds[3] = { 64, 96, 128 };
    att_rng = 77;
    for (int k = 0; k < 12 && !test_failed_now(); k++) {
        const int kvt = kv_types[k & 1], hd = hds[(k >> 1) % 3], n_swa = swa[k / 6];
        const int kv_dim = c->nkv * hd;
        const size_t nq = (size_t)c->n_tok * c->nh * hd, np = (size_t)slots_n * kv_dim;
        for (size_t i = 0; i < nq; i++)
            q[i] = att_rand() * 2.0f;
        for (int i = 0; i < 2; i++)
            for (size_t j = 0; j < np; j++)
                kv[i][j] = att_rand();
        for (int i = 0; i < 2; i++)
            CHECK(be->upload(be, dkv[i], kv[i], np * sizeof(float)) == 0);
        CHECK(be->kv_store(be, dkv[0], dkv[1], dpool[0], dpool[1], kvt, dslot, slots_n, kv_dim) == 0);
        /* the reference reads the pool as stored (F16-rounded or not) */
        for (int i = 0; i < 2; i++) {
            if (kvt == GGML_TYPE_F16) {
                CHECK(be->download(be, raw, dpool[i], np * sizeof(uint16_t)) == 0);
                for (size_t j = 0; j < np; j++)
                    pool[i][j] = omni_fp16_to_fp32(raw[j]);
            } else {
                CHECK(be->download(be, pool[i], dpool[i], np * sizeof(float)) == 0);
            }
        }
        CHECK(be->upload(be, dq, q, nq * sizeof(float)) == 0);
        const float scale = 1.0f / sqrtf((float)hd);
        const struct omni_battn a = {
            .out = dout, .q = dq, .k = dpool[0], .v = dpool[1], .kv_type = kvt, .n_tok = c->n_tok,
            .pos = dint, .seq = dint + c->n_tok, .tables = dint + 2 * c->n_tok,
            .max_blocks = c->nb, .block_size = AT_PBS, .n_head = c->nh, .n_head_kv = c->nkv,
            .head_dim = hd, .scale = scale, .n_swa = n_swa,
        };
        CHECK(be->attention(be, &a) == 0);
        CHECK(be->download(be, out, dout, nq * sizeof(float)) == 0);
        att_reference(c, q, pool[0], pool[1], tables, hd, n_swa, scale, ref);
        /* cuda's tensor-core kernels round q and the probabilities to F16
         * (and an F32 pool's rows too): ~1e-3 of outputs that are averages
         * of values in [-1, 1]; the cpu backend computes in F32 */
        const double tol = !strcmp(be->name, "cpu") ? 1e-4 : 4e-3;
        double worst = 0.0;
        size_t at = 0;
        for (size_t i = 0; i < nq; i++) {
            const double d = fabs((double)out[i] - ref[i]);
            if (!(d <= worst)) {
                worst = d;
                at = i;
            }
        }
        CHECK_MSG(worst <= tol,
                  "%s, %d tokens: %s pool, head_dim %d, window %d: max diff %.3g at token %zu head %zu",
                  be->name, c->n_tok, ggml_type_name(kvt), hd, n_swa, worst,
                  at / ((size_t)c->nh * hd), at / hd % c->nh);
    }
done:
    be->free(be, dq);
    be->free(be, dout);
    for (int i = 0; i < 2; i++) {
        be->free(be, dkv[i]);
        be->free(be, dpool[i]);
        free(kv[i]);
        free(pool[i]);
    }
    be->free(be, dint);
    be->free(be, dslot);
    free(tables), free(slots), free(q), free(out), free(ref), free(raw);
    omni_backend_free(be);
}

TEST(backend_prompt_attention)
{
    /* sequence 1 at 0..49 with rows 10 and 11 swapped; sequence 0 at
     * 40..139 (0..39 already in the pool) */
    enum { N = 150, N1 = 50 };
    int32_t pos[N], seq[N];
    for (int t = 0; t < N; t++) {
        seq[t] = t < N1 ? 1 : 0;
        pos[t] = t < N1 ? t : 40 + t - N1;
    }
    pos[10] = 11;
    pos[11] = 10;
    static const int swa[2] = { 0, 24 };
    const struct att_shape c = { .nh = 8, .nkv = 2, .nb = 10, .n_tok = N, .pos = pos, .seq = seq };
    att_check(&c, swa);
}

TEST(backend_long_decode_attention)
{
    /* 7 query heads a K/V head (Qwen2.5-7B's groups); 320 blocks a
     * sequence: cuda's flash decoding takes tables of 4,096+ keys */
    static const int32_t pos[3] = { 4999, 1233, 17 }, seq[3] = { 0, 1, 0 };
    static const int swa[2] = { 0, 1000 };
    const struct att_shape c = { .nh = 14, .nkv = 2, .nb = 320, .n_tok = 3, .pos = pos, .seq = seq };
    att_check(&c, swa);
}

TEST(backend_wide_decode_attention)
{
    /* 40 decode tokens of two sequences over short contexts (8 blocks a
     * sequence), 4 query heads a K/V head: on cuda the unsplit flash
     * decoding (OMNI_CUDA_FDW=8) and the many-token decode kernel it
     * replaces (k_attention_gqa, OMNI_CUDA_FDW=0) */
    enum { N = 40 };
    int32_t pos[N], seq[N];
    for (int t = 0; t < N; t++) {
        seq[t] = t & 1;
        pos[t] = t & 1 ? 127 - t : 3 * t + 1; /* 1..118 and 126..88 */
    }
    static const int swa[2] = { 0, 50 };
    const struct att_shape c = { .nh = 16, .nkv = 4, .nb = 8, .n_tok = N, .pos = pos, .seq = seq };
    char *saved = test_env_save("OMNI_CUDA_FDW");
    for (int round = 0; round < 2; round++) {
        setenv("OMNI_CUDA_FDW", round ? "0" : "8", 1);
        att_check(&c, swa);
    }
    test_env_restore("OMNI_CUDA_FDW", saved);
}
