/* test_attention_dev.c - the backend's prompt attention (steps of more than
 * 64 tokens: cuda's FlashAttention-style kernel, src/core/cuda/flash_attn.cu)
 * against a float64 reference over the same pool values. One step packs
 * two sequences' chunks (a 64-token tile spans both), one with context
 * already in the pool, rows out of position order, scattered block tables;
 * F16 and F32 pools, head_dim 64 / 96 / 128, with and without a sliding
 * window. The backend is $OMNI_DEV_BACKEND ("cpu" by default), as in
 * test_model_dev.c. */
#include "test.h"

#include "src/core/backend.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *att_backend(void)
{
    const char *b = getenv("OMNI_DEV_BACKEND");
    return b && *b ? b : "cpu";
}

static uint32_t att_rng;
static float att_rand(void)
{
    att_rng = att_rng * 1664525u + 1013904223u;
    return (float)((att_rng >> 8) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

enum { AT_NH = 8, AT_NKV = 2, AT_PBS = 16, AT_NB = 16, AT_SLOTS = AT_NB * AT_PBS, AT_HDM = 128 };
enum { AT_TOK = 150, AT_SEQ1 = 50 }; /* rows 0..49: sequence 1 from 0; the rest: sequence 0 from 40 */

/* out[t] of the reference: softmax over first..pos of q . k * scale, in
 * double, from the pool as stored (kc / vc: floats per slot). */
static void att_reference(const float *q, const float *kc, const float *vc, const int32_t *pos,
                          const int32_t *seq, const int32_t *tables, int hd, int n_swa,
                          float scale, float *out)
{
    const int kv_dim = AT_NKV * hd, g = AT_NH / AT_NKV;
    double *w = malloc(sizeof(double) * AT_SLOTS);
    for (int t = 0; t < AT_TOK; t++)
        for (int h = 0; h < AT_NH; h++) {
            const float *qr = q + ((size_t)t * AT_NH + h) * hd;
            const int p = pos[t], first = n_swa > 0 && p >= n_swa ? p - n_swa + 1 : 0;
            const int32_t *table = tables + seq[t] * AT_NB;
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
            float *o = out + ((size_t)t * AT_NH + h) * hd;
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

TEST(backend_prompt_attention)
{
    char err[256];
    struct omni_backend *be = omni_backend_new(att_backend(), 0, err, sizeof err);
    if (!be) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    /* positions: sequence 1 at 0..49 with rows 10 and 11 swapped; sequence
     * 0 at 40..139 (0..39 already in the pool) */
    int32_t pos[AT_TOK], seq[AT_TOK], tables[2 * AT_NB];
    for (int t = 0; t < AT_TOK; t++) {
        seq[t] = t < AT_SEQ1 ? 1 : 0;
        pos[t] = t < AT_SEQ1 ? t : 40 + t - AT_SEQ1;
    }
    pos[10] = 11;
    pos[11] = 10;
    static const int32_t perm[AT_NB] = { 7, 2, 12, 0, 9, 14, 4, 11, 1, 15, 6, 3, 13, 8, 5, 10 };
    for (int i = 0; i < AT_NB; i++) {
        tables[i] = perm[i];                        /* sequence 0: 9 blocks used */
        tables[AT_NB + i] = perm[(i + 9) % AT_NB]; /* sequence 1: 4 blocks, none shared */
    }
    const size_t qn = (size_t)AT_TOK * AT_NH * AT_HDM, pn = (size_t)AT_SLOTS * AT_NKV * AT_HDM;
    float *q = malloc(qn * sizeof(float)), *out = malloc(qn * sizeof(float));
    float *ref = malloc(qn * sizeof(float)), *kv[2], *pool[2];
    uint16_t *raw = malloc(pn * sizeof(float));
    int64_t slots[AT_SLOTS];
    for (int i = 0; i < AT_SLOTS; i++)
        slots[i] = i;
    for (int i = 0; i < 2; i++) {
        kv[i] = malloc(pn * sizeof(float));
        pool[i] = malloc(pn * sizeof(float));
    }
    float *dq = be->alloc(be, qn * sizeof(float)), *dout = be->alloc(be, qn * sizeof(float));
    float *dkv[2] = { be->alloc(be, pn * sizeof(float)), be->alloc(be, pn * sizeof(float)) };
    void *dpool[2] = { be->alloc(be, pn * sizeof(float)), be->alloc(be, pn * sizeof(float)) };
    int32_t *dint = be->alloc(be, (2 * AT_TOK + 2 * AT_NB) * sizeof(int32_t));
    int64_t *dslot = be->alloc(be, sizeof slots);
    CHECK(q && out && ref && raw && kv[0] && kv[1] && pool[0] && pool[1]);
    CHECK(dq && dout && dkv[0] && dkv[1] && dpool[0] && dpool[1] && dint && dslot);
    if (test_failed_now())
        goto done;
    CHECK(be->upload(be, dint, pos, sizeof pos) == 0);
    CHECK(be->upload(be, dint + AT_TOK, seq, sizeof seq) == 0);
    CHECK(be->upload(be, dint + 2 * AT_TOK, tables, sizeof tables) == 0);
    CHECK(be->upload(be, dslot, slots, sizeof slots) == 0);
    static const int kv_types[2] = { GGML_TYPE_F16, GGML_TYPE_F32 }, hds[3] = { 64, 96, 128 };
    static const int swa[2] = { 0, 24 };
    att_rng = 77;
    for (int c = 0; c < 12 && !test_failed_now(); c++) {
        const int kvt = kv_types[c & 1], hd = hds[(c >> 1) % 3], n_swa = swa[c / 6];
        const int kv_dim = AT_NKV * hd;
        const size_t nq = (size_t)AT_TOK * AT_NH * hd, np = (size_t)AT_SLOTS * kv_dim;
        for (size_t i = 0; i < nq; i++)
            q[i] = att_rand() * 2.0f;
        for (int i = 0; i < 2; i++)
            for (size_t j = 0; j < np; j++)
                kv[i][j] = att_rand();
        for (int i = 0; i < 2; i++)
            CHECK(be->upload(be, dkv[i], kv[i], np * sizeof(float)) == 0);
        CHECK(be->kv_store(be, dkv[0], dkv[1], dpool[0], dpool[1], kvt, dslot, AT_SLOTS, kv_dim) == 0);
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
            .out = dout, .q = dq, .k = dpool[0], .v = dpool[1], .kv_type = kvt, .n_tok = AT_TOK,
            .pos = dint, .seq = dint + AT_TOK, .tables = dint + 2 * AT_TOK, .max_blocks = AT_NB,
            .block_size = AT_PBS, .n_head = AT_NH, .n_head_kv = AT_NKV, .head_dim = hd,
            .scale = scale, .n_swa = n_swa,
        };
        CHECK(be->attention(be, &a) == 0);
        CHECK(be->download(be, out, dout, nq * sizeof(float)) == 0);
        att_reference(q, pool[0], pool[1], pos, seq, tables, hd, n_swa, scale, ref);
        /* cuda rounds q and the probabilities to F16 for the tensor cores
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
        CHECK_MSG(worst <= tol, "%s: %s pool, head_dim %d, window %d: max diff %.3g at token %zu head %zu",
                  be->name, ggml_type_name(kvt), hd, n_swa, worst, at / ((size_t)AT_NH * hd),
                  at / hd % AT_NH);
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
    free(q), free(out), free(ref), free(raw);
    omni_backend_free(be);
}
