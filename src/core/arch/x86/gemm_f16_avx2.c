/* gemm_f16_avx2.c - prompt-size products with F16 weights (AVX2 + FMA +
 * F16C): a packed float GEMM whose weight packing is the F16 -> F32
 * conversion, so W is read once per K slab straight from its F16 rows.
 *
 * Dequantizing a chunk of W to floats and calling OpenBLAS sgemm (the
 * generic prompt path of matmul.c) spends, besides the multiply-adds, a pass
 * writing the floats, OpenBLAS's copy of them into its panels, a copy of x
 * per call and a pass zeroing y (beta = 0): 10-15% of an F16 prefill. Here,
 * x is copied once per call into panels of 6 rows per K slab (a[k][6],
 * shared by the threads); per group of 64 weight rows and K slab, each strip
 * of 16 rows is converted into b[k][16], and a 6 x 16 register tile (12
 * accumulators) runs over every x panel against the group's strips; the
 * first slab stores y, later ones add to it (no zeroing pass). One core,
 * M = 512: 44-47 G multiply-adds/s (88-92% of the FMA peak) against 41-44
 * for dequantize + sgemm.
 * The sum for one output runs over k in a fixed order whatever the batch
 * size or the thread's column range, so its bits depend on its own rows. */
#include "gemm_f16_avx2.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>
#include <string.h>

#define MR 6   /* x rows per register tile */
#define NR 16  /* weight rows per register tile (two vectors) */
/* K values per slab: an x panel's slab (6 KB) in L1. Weight rows per
 * group: their slab (64 KB) and the group's y columns (128 KB at 512 rows)
 * in L2 across the slabs. KC 256-512 and NG 32-128 measured alike. */
#define KC 256
#define NG 64

size_t omni_x86_gemm_f16_x_bytes(int64_t n_in, int64_t n_batch)
{
    return (size_t)((n_batch + MR - 1) / MR * MR) * (size_t)n_in * sizeof(float);
}

size_t omni_x86_gemm_f16_scratch(int64_t n_in)
{
    (void)n_in;
    return (size_t)KC * NG * sizeof(float);
}

/* 8 x 8 transpose of r[0..7] in place */
static inline void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* x rows [0, m) columns [k0, k0 + kw) of panels [p0, p1) of MR rows:
 * a[p][k][i] = x[p * MR + i][k0 + k], zero past row m. */
static void pack_a(const float *x, int64_t n_in, int64_t m, int64_t k0, int kw, int64_t p0, int64_t p1,
                   float *a)
{
    for (int64_t p = p0; p < p1; p++) {
        float *ap = a + (size_t)p * MR * kw;
        const int rows = m - p * MR < MR ? (int)(m - p * MR) : MR;
        const float *xr[MR];
        for (int i = 0; i < MR; i++)
            xr[i] = x + (size_t)(p * MR + (i < rows ? i : 0)) * n_in + k0;
        if (rows == MR) {
            int k = 0;
            /* 8 columns at a time: the 6 rows (and 2 zero ones) transposed
             * in registers; each column's 8 floats are stored at its 6-float
             * slot, the 2 extra ones overwritten by the next column's store,
             * so the last column of the slab goes the scalar way */
            for (; k + 8 < kw; k += 8) {
                __m256 v[8];
                for (int i = 0; i < MR; i++)
                    v[i] = _mm256_loadu_ps(xr[i] + k);
                v[6] = v[7] = _mm256_setzero_ps();
                transpose8(v);
                for (int c = 0; c < 8; c++)
                    _mm256_storeu_ps(ap + (k + c) * MR, v[c]);
            }
            for (; k < kw; k++)
                for (int i = 0; i < MR; i++)
                    ap[k * MR + i] = xr[i][k];
            continue;
        }
        for (int k = 0; k < kw; k++)
            for (int i = 0; i < MR; i++)
                ap[k * MR + i] = i < rows ? xr[i][k] : 0.0f;
    }
}

void omni_x86_gemm_f16_pack_x(const float *x, int64_t n_in, int64_t n_batch, float *xp, int ith, int nth)
{
    const int64_t panels = (n_batch + MR - 1) / MR;
    const int64_t p0 = panels * ith / nth, p1 = panels * (ith + 1) / nth;
    for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
        const int kw = n_in - k0 < KC ? (int)(n_in - k0) : KC;
        pack_a(x, n_in, n_batch, k0, kw, p0, p1, xp + (size_t)k0 * panels * MR);
    }
}

/* Weight rows [r, r + nr) (nr <= NR), columns [k0, k0 + kw), as floats:
 * b[k][j] = W[r + j][k0 + k], zero for j >= nr. */
static void pack_b(const uint16_t *w, int64_t n_in, int64_t r, int nr, int64_t k0, int kw, float *b)
{
    int k = 0;
    if (nr == NR)
        for (; k + 8 <= kw; k += 8)
            for (int j0 = 0; j0 < NR; j0 += 8) {
                __m256 v[8];
                for (int j = 0; j < 8; j++)
                    v[j] = _mm256_cvtph_ps(
                        _mm_loadu_si128((const __m128i *)(w + (size_t)(r + j0 + j) * n_in + k0 + k)));
                transpose8(v); /* v[i]: column k + i of rows j0 .. j0 + 7 */
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps(b + (size_t)(k + i) * NR + j0, v[i]);
            }
    for (; k < kw; k++)
        for (int j = 0; j < NR; j++)
            b[(size_t)k * NR + j] = j < nr ? _cvtsh_ss(w[(size_t)(r + j) * n_in + k0 + k]) : 0.0f;
}

/* c (MR x NR, row stride ldc) = (add ? c : 0) + a^T b over kw values of k. */
static inline __attribute__((always_inline)) void tile(int kw, const float *a, const float *b, float *c,
                                                       size_t ldc, int add)
{
    __m256 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
    if (add) {
        c0l = _mm256_loadu_ps(c), c0h = _mm256_loadu_ps(c + 8);
        c1l = _mm256_loadu_ps(c + ldc), c1h = _mm256_loadu_ps(c + ldc + 8);
        c2l = _mm256_loadu_ps(c + 2 * ldc), c2h = _mm256_loadu_ps(c + 2 * ldc + 8);
        c3l = _mm256_loadu_ps(c + 3 * ldc), c3h = _mm256_loadu_ps(c + 3 * ldc + 8);
        c4l = _mm256_loadu_ps(c + 4 * ldc), c4h = _mm256_loadu_ps(c + 4 * ldc + 8);
        c5l = _mm256_loadu_ps(c + 5 * ldc), c5h = _mm256_loadu_ps(c + 5 * ldc + 8);
    } else {
        c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int k = 0; k < kw; k++) {
        const __m256 bl = _mm256_load_ps(b + (size_t)k * NR), bh = _mm256_load_ps(b + (size_t)k * NR + 8);
        const float *ak = a + (size_t)k * MR;
        __m256 av = _mm256_broadcast_ss(ak);
        c0l = _mm256_fmadd_ps(av, bl, c0l), c0h = _mm256_fmadd_ps(av, bh, c0h);
        av = _mm256_broadcast_ss(ak + 1);
        c1l = _mm256_fmadd_ps(av, bl, c1l), c1h = _mm256_fmadd_ps(av, bh, c1h);
        av = _mm256_broadcast_ss(ak + 2);
        c2l = _mm256_fmadd_ps(av, bl, c2l), c2h = _mm256_fmadd_ps(av, bh, c2h);
        av = _mm256_broadcast_ss(ak + 3);
        c3l = _mm256_fmadd_ps(av, bl, c3l), c3h = _mm256_fmadd_ps(av, bh, c3h);
        av = _mm256_broadcast_ss(ak + 4);
        c4l = _mm256_fmadd_ps(av, bl, c4l), c4h = _mm256_fmadd_ps(av, bh, c4h);
        av = _mm256_broadcast_ss(ak + 5);
        c5l = _mm256_fmadd_ps(av, bl, c5l), c5h = _mm256_fmadd_ps(av, bh, c5h);
    }
    _mm256_storeu_ps(c, c0l), _mm256_storeu_ps(c + 8, c0h);
    _mm256_storeu_ps(c + ldc, c1l), _mm256_storeu_ps(c + ldc + 8, c1h);
    _mm256_storeu_ps(c + 2 * ldc, c2l), _mm256_storeu_ps(c + 2 * ldc + 8, c2h);
    _mm256_storeu_ps(c + 3 * ldc, c3l), _mm256_storeu_ps(c + 3 * ldc + 8, c3h);
    _mm256_storeu_ps(c + 4 * ldc, c4l), _mm256_storeu_ps(c + 4 * ldc + 8, c4h);
    _mm256_storeu_ps(c + 5 * ldc, c5l), _mm256_storeu_ps(c + 5 * ldc + 8, c5h);
}

void omni_x86_gemm_f16_avx2(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                            int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    const int64_t panels = (n_batch + MR - 1) / MR;
    float *b = scratch;
    for (int64_t g = r0; g < r1; g += NG) {
        const int64_t g1 = g + NG < r1 ? g + NG : r1;
        for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
            const int kw = n_in - k0 < KC ? (int)(n_in - k0) : KC;
            const int add = k0 > 0;
            const float *a = xp + (size_t)k0 * panels * MR;
            for (int64_t r = g; r < g1; r += NR) {
                const int nr = g1 - r < NR ? (int)(g1 - r) : NR;
                pack_b(w, n_in, r, nr, k0, kw, b + (size_t)(r - g) * KC);
            }
            for (int64_t p = 0; p < panels; p++) {
                const float *ap = a + (size_t)p * MR * kw;
                const int mr = n_batch - p * MR < MR ? (int)(n_batch - p * MR) : MR;
                for (int64_t r = g; r < g1; r += NR) {
                    const int nr = g1 - r < NR ? (int)(g1 - r) : NR;
                    const float *bp = b + (size_t)(r - g) * KC;
                    float *c = y + (size_t)p * MR * n_out + r;
                    if (mr == MR && nr == NR) {
                        tile(kw, ap, bp, c, (size_t)n_out, add);
                        continue;
                    }
                    /* a partial tile through a full one on the stack */
                    float t[MR * NR];
                    for (int i = 0; i < MR; i++)
                        for (int j = 0; j < NR; j++)
                            t[i * NR + j] = add && i < mr && j < nr ? c[(size_t)i * n_out + j] : 0.0f;
                    tile(kw, ap, bp, t, NR, 1);
                    for (int i = 0; i < mr; i++)
                        memcpy(c + (size_t)i * n_out, t + i * NR, (size_t)nr * sizeof(float));
                }
            }
        }
    }
}

#else

size_t omni_x86_gemm_f16_x_bytes(int64_t n_in, int64_t n_batch)
{
    (void)n_in;
    (void)n_batch;
    return 0;
}

size_t omni_x86_gemm_f16_scratch(int64_t n_in)
{
    (void)n_in;
    return 0;
}

void omni_x86_gemm_f16_pack_x(const float *x, int64_t n_in, int64_t n_batch, float *xp, int ith, int nth)
{
    (void)x, (void)n_in, (void)n_batch, (void)xp, (void)ith, (void)nth;
}

void omni_x86_gemm_f16_avx2(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                            int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    (void)w, (void)n_in, (void)n_out, (void)xp, (void)n_batch, (void)y, (void)r0, (void)r1, (void)scratch;
}

#endif /* __x86_64__ */
