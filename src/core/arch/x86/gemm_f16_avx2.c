/* gemm_f16_avx2.c - prompt-size products with F16 weights (AVX2 + FMA +
 * F16C): a packed float GEMM whose weight packing is the F16 -> F32
 * conversion, so W is read once per K slab straight from its F16 rows.
 *
 * Dequantizing a chunk of W to floats and calling OpenBLAS sgemm (the
 * generic prompt path of matmul.c) spends, besides the multiply-adds, a pass
 * writing the floats, OpenBLAS's copy of them into its panels, a copy of x
 * per call and a pass zeroing y (beta = 0): 10-15% of an F16 prefill. Here,
 * x is copied once per call into panels of 6 rows per K slab (a[k][6],
 * shared by the threads); per group of NG weight rows and K slab, each
 * strip of 16 rows is converted into b[k][16] (the group's 128 KB in L2),
 * and each x panel (6 KB, L1) runs a 6 x 16 register tile (12
 * accumulators) against every strip of the group, the panels that come
 * next prefetched into L2 meanwhile. Partial sums between slabs live in a
 * contiguous per-thread buffer, tile by tile, and only the last slab writes
 * y: y's rows lie n_out floats apart, and revisiting them once per slab
 * cost 3-5% in cache-set conflicts. A last panel of under 6 rows runs only
 * its own rows (1-3 of them two strips at a time, to keep enough
 * independent FMA chains).
 * The tile alone runs at ~98% of the FMA peak with its data in cache; the
 * blocking is what keeps it near there (one core, M = 512, the
 * Llama-3.2-1B shapes: 44-46 -> 47.5-48 G multiply-adds/s).
 * The sum for one output runs over k in a fixed order whatever the batch
 * size or the thread's column range, so its bits depend on its own rows. */
#include "gemm_f16_avx2.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>
#include <string.h>

#define MR OMNI_GEMM_F16_MR /* x rows per register tile */
#define NR 16  /* weight rows per register tile (two vectors) */
/* K values per slab: an x panel's slab (6 KB) in L1, a strip's (16 KB)
 * beside it. NG weight rows per group (their converted slab, 128 KB, in
 * L2; 64 rows measured 1-4% slower, 192-256 alike). MC x panels per
 * prefetch block (96 KB). Panel-outer measured 0.5-2% faster than
 * strip-outer (b in L1, x panels from L2); KC 384-512 1-3% slower. */
#define KC OMNI_GEMM_F16_KC
#define NG 128
#define MC 16

size_t omni_x86_gemm_f16_x_bytes(int64_t n_in, int64_t n_batch)
{
    return (size_t)((n_batch + MR - 1) / MR * MR) * (size_t)n_in * sizeof(float);
}

size_t omni_x86_gemm_f16_scratch(int64_t n_in, int64_t n_batch)
{
    (void)n_in;
    const size_t panels = (size_t)((n_batch + MR - 1) / MR);
    return (size_t)KC * NG * sizeof(float) + panels * NG * MR * sizeof(float);
}

/* 8 x 8 transpose of r[0..7] in place; written out and always inlined so
 * that it stays in registers (as loops over arrays, GCC -O2 kept them on
 * the stack: the packing of W took 0.39 ns a value instead of 0.20) */
static inline __attribute__((always_inline)) void transpose8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
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
#pragma GCC unroll 8
                for (int i = 0; i < MR; i++)
                    v[i] = _mm256_loadu_ps(xr[i] + k);
                v[6] = v[7] = _mm256_setzero_ps();
                transpose8(v);
#pragma GCC unroll 8
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

/* Weight rows [r, r + nr) (nr <= 16), columns [k0, k0 + kw), as floats:
 * b[k * ldb + j] = W[r + j][k0 + k], zero for nr <= j < 16 (ldb: 16 here,
 * 32 for gemm_f16_avx512.c's strips, which pack theirs in two halves). */
void omni_x86_gemm_f16_pack_w(const void *wv, int64_t n_in, int64_t r, int nr, int64_t k0, int kw, float *b,
                              int ldb)
{
    const uint16_t *w = wv;
    int k = 0;
    if (nr == 16)
        for (; k + 8 <= kw; k += 8)
            for (int j0 = 0; j0 < 16; j0 += 8) {
                __m256 v[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    v[j] = _mm256_cvtph_ps(
                        _mm_loadu_si128((const __m128i *)(w + (size_t)(r + j0 + j) * n_in + k0 + k)));
                transpose8(v); /* v[i]: column k + i of rows j0 .. j0 + 7 */
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps(b + (size_t)(k + i) * ldb + j0, v[i]);
            }
    for (; k < kw; k++)
        for (int j = 0; j < 16; j++)
            b[(size_t)k * ldb + j] = j < nr ? _cvtsh_ss(w[(size_t)(r + j) * n_in + k0 + k]) : 0.0f;
}

/* o (rows x NR, row stride ldo) = (add ? c : 0) + a^T b over kw values of
 * k, c a tile of row stride NR; rows (1..MR) is a constant at each call, so
 * a partial panel runs only its own rows' multiply-adds. */
#define ROW_LOAD(i)                                                                    \
    if (rows > i)                                                                      \
        c##i##l = add ? _mm256_load_ps(c + i * NR) : _mm256_setzero_ps(),              \
        c##i##h = add ? _mm256_load_ps(c + i * NR + 8) : _mm256_setzero_ps();
#define ROW_FMA(i)                                                                     \
    if (rows > i) {                                                                    \
        const __m256 av = _mm256_broadcast_ss(ak + i);                                 \
        c##i##l = _mm256_fmadd_ps(av, bl, c##i##l), c##i##h = _mm256_fmadd_ps(av, bh, c##i##h); \
    }
#define ROW_STORE(i)                                                                   \
    if (rows > i)                                                                      \
        _mm256_storeu_ps(o + i * ldo, c##i##l), _mm256_storeu_ps(o + i * ldo + 8, c##i##h);
static inline __attribute__((always_inline)) void tile(int kw, const float *a, const float *b, const float *c,
                                                       float *o, size_t ldo, int add, const int rows)
{
    __m256 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
    c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm256_setzero_ps();
    ROW_LOAD(0) ROW_LOAD(1) ROW_LOAD(2) ROW_LOAD(3) ROW_LOAD(4) ROW_LOAD(5)
#pragma GCC unroll 4
    for (int k = 0; k < kw; k++) {
        const __m256 bl = _mm256_load_ps(b + (size_t)k * NR), bh = _mm256_load_ps(b + (size_t)k * NR + 8);
        const float *ak = a + (size_t)k * MR;
        ROW_FMA(0) ROW_FMA(1) ROW_FMA(2) ROW_FMA(3) ROW_FMA(4) ROW_FMA(5)
    }
    ROW_STORE(0) ROW_STORE(1) ROW_STORE(2) ROW_STORE(3) ROW_STORE(4) ROW_STORE(5)
}

/* Two adjacent strips for a panel of rows <= 3 (b: strip s, b + NR * KC:
 * strip s + 1; c: strip s's partial sums, strip s + 1's at c + MR * NR;
 * o0, o1: the two outputs, row stride ldo): 4 vectors a row give the FMA units 4-12 independent chains, where
 * one strip of 1-3 rows leaves them waiting on the FMA latency. Each
 * output's chain of multiply-adds is the one a 6-row tile runs. */
#define PAIR_LOAD(i)                                                                   \
    if (rows > i) {                                                                    \
        p##i##a = add ? _mm256_load_ps(c + i * NR) : _mm256_setzero_ps();              \
        p##i##b = add ? _mm256_load_ps(c + i * NR + 8) : _mm256_setzero_ps();          \
        p##i##c = add ? _mm256_load_ps(c + MR * NR + i * NR) : _mm256_setzero_ps();    \
        p##i##d = add ? _mm256_load_ps(c + MR * NR + i * NR + 8) : _mm256_setzero_ps(); \
    }
#define PAIR_FMA(i)                                                                    \
    if (rows > i) {                                                                    \
        const __m256 av = _mm256_broadcast_ss(ak + i);                                 \
        p##i##a = _mm256_fmadd_ps(av, b0, p##i##a), p##i##b = _mm256_fmadd_ps(av, b1, p##i##b); \
        p##i##c = _mm256_fmadd_ps(av, b2, p##i##c), p##i##d = _mm256_fmadd_ps(av, b3, p##i##d); \
    }
#define PAIR_STORE(i)                                                                  \
    if (rows > i) {                                                                    \
        _mm256_storeu_ps(o0 + i * ldo, p##i##a), _mm256_storeu_ps(o0 + i * ldo + 8, p##i##b); \
        _mm256_storeu_ps(o1 + i * ldo, p##i##c), _mm256_storeu_ps(o1 + i * ldo + 8, p##i##d); \
    }
static inline __attribute__((always_inline)) void tile_pair(int kw, const float *a, const float *b,
                                                            const float *c, float *o0, float *o1, size_t ldo,
                                                            int add, const int rows)
{
    __m256 p0a, p0b, p0c, p0d, p1a, p1b, p1c, p1d, p2a, p2b, p2c, p2d;
    p0a = p0b = p0c = p0d = p1a = p1b = p1c = p1d = p2a = p2b = p2c = p2d = _mm256_setzero_ps();
    PAIR_LOAD(0) PAIR_LOAD(1) PAIR_LOAD(2)
    const float *b2p = b + (size_t)NR * KC;
#pragma GCC unroll 4
    for (int k = 0; k < kw; k++) {
        const __m256 b0 = _mm256_load_ps(b + (size_t)k * NR), b1 = _mm256_load_ps(b + (size_t)k * NR + 8);
        const __m256 b2 = _mm256_load_ps(b2p + (size_t)k * NR), b3 = _mm256_load_ps(b2p + (size_t)k * NR + 8);
        const float *ak = a + (size_t)k * MR;
        PAIR_FMA(0) PAIR_FMA(1) PAIR_FMA(2)
    }
    PAIR_STORE(0) PAIR_STORE(1) PAIR_STORE(2)
}

static void tile_pair_part(int kw, const float *a, const float *b, const float *c, float *o0, float *o1,
                           size_t ldo, int add, int mr)
{
    switch (mr) {
    case 1: tile_pair(kw, a, b, c, o0, o1, ldo, add, 1); break;
    case 2: tile_pair(kw, a, b, c, o0, o1, ldo, add, 2); break;
    default: tile_pair(kw, a, b, c, o0, o1, ldo, add, 3); break;
    }
}

/* the tile for a panel of mr rows */
static void tile_part(int kw, const float *a, const float *b, const float *c, float *o, size_t ldo, int add,
                      int mr)
{
    switch (mr) {
    case 1: tile(kw, a, b, c, o, ldo, add, 1); break;
    case 2: tile(kw, a, b, c, o, ldo, add, 2); break;
    case 3: tile(kw, a, b, c, o, ldo, add, 3); break;
    case 4: tile(kw, a, b, c, o, ldo, add, 4); break;
    case 5: tile(kw, a, b, c, o, ldo, add, 5); break;
    default: tile(kw, a, b, c, o, ldo, add, MR); break;
    }
}

void omni_x86_gemm_f16_avx2(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                            int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    const int64_t panels = (n_batch + MR - 1) / MR;
    const char *xp_end = (const char *)(xp + (size_t)panels * MR * n_in);
    float *b = scratch;
    float *cb = b + (size_t)KC * NG; /* partial sums: [panel][strip][MR][NR] */
    for (int64_t g = r0; g < r1; g += NG) {
        const int64_t g1 = g + NG < r1 ? g + NG : r1;
        const int64_t strips = (g1 - g + NR - 1) / NR;
        for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
            const int kw = n_in - k0 < KC ? (int)(n_in - k0) : KC;
            const int add = k0 > 0, last = k0 + KC >= n_in;
            const float *a = xp + (size_t)k0 * panels * MR;
            for (int64_t r = g; r < g1; r += NR) {
                const int nr = g1 - r < NR ? (int)(g1 - r) : NR;
                omni_x86_gemm_f16_pack_w(w, n_in, r, nr, k0, kw, b + (size_t)(r - g) * KC, NR);
            }
            for (int64_t pb = 0; pb < panels; pb += MC) {
                const int64_t pe = pb + MC < panels ? pb + MC : panels;
                /* the x panels that come next in memory (this slab's next
                 * block, else the next slab's first), into L2 a few lines per
                 * tile: they would otherwise arrive from L3 on demand (2-3%) */
                const char *pf = (const char *)(a + (size_t)pe * MR * kw); /* <= xp_end */
                const size_t pf_left = (size_t)(xp_end - pf), pf_block = (size_t)MC * MR * KC * sizeof(float);
                const char *pf_end = pf + (pf_left < pf_block ? pf_left : pf_block);
                const int pf_step = (int)((size_t)MC * MR * KC * sizeof(float) / 64 / (size_t)((pe - pb) * strips)) + 1;
                for (int64_t p = pb; p < pe; p++) {
                    const float *ap = a + (size_t)p * MR * kw;
                    const int mr = n_batch - p * MR < MR ? (int)(n_batch - p * MR) : MR;
                    for (int64_t s = 0; s < strips; s++) {
                        const int64_t r = g + s * NR;
                        const int nr = g1 - r < NR ? (int)(g1 - r) : NR;
                        const float *bp = b + (size_t)s * NR * KC;
                        for (int q = 0; q < pf_step && pf < pf_end; q++, pf += 64)
                            _mm_prefetch(pf, _MM_HINT_T1);
                        float *cp = cb + (size_t)(p * strips + s) * MR * NR;
                        if (mr <= 3 && s + 1 < strips && g1 - r >= 2 * NR) {
                            /* a panel of 1-3 rows takes two full strips at once */
                            if (!last) { /* strip s + 1's tile follows strip s's in cb */
                                tile_pair_part(kw, ap, bp, cp, cp, cp + MR * NR, NR, add, mr);
                            } else {
                                float *c = y + (size_t)p * MR * n_out + r;
                                tile_pair_part(kw, ap, bp, cp, c, c + NR, (size_t)n_out, add, mr);
                            }
                            s++;
                            continue;
                        }
                        if (!last) {
                            if (mr == MR)
                                tile(kw, ap, bp, cp, cp, NR, add, MR);
                            else
                                tile_part(kw, ap, bp, cp, cp, NR, add, mr);
                            continue;
                        }
                        float *c = y + (size_t)p * MR * n_out + r;
                        if (mr == MR && nr == NR) {
                            tile(kw, ap, bp, cp, c, (size_t)n_out, add, MR);
                            continue;
                        }
                        /* a partial strip through a full one on the stack */
                        float t[MR * NR];
                        tile_part(kw, ap, bp, cp, t, NR, add, mr);
                        for (int i = 0; i < mr; i++)
                            memcpy(c + (size_t)i * n_out, t + i * NR, (size_t)nr * sizeof(float));
                    }
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

size_t omni_x86_gemm_f16_scratch(int64_t n_in, int64_t n_batch)
{
    (void)n_in;
    (void)n_batch;
    return 0;
}

void omni_x86_gemm_f16_pack_x(const float *x, int64_t n_in, int64_t n_batch, float *xp, int ith, int nth)
{
    (void)x, (void)n_in, (void)n_batch, (void)xp, (void)ith, (void)nth;
}

void omni_x86_gemm_f16_pack_w(const void *w, int64_t n_in, int64_t r, int nr, int64_t k0, int kw, float *b,
                              int ldb)
{
    (void)w, (void)n_in, (void)r, (void)nr, (void)k0, (void)kw, (void)b, (void)ldb;
}

void omni_x86_gemm_f16_avx2(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                            int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    (void)w, (void)n_in, (void)n_out, (void)xp, (void)n_batch, (void)y, (void)r0, (void)r1, (void)scratch;
}

#endif /* __x86_64__ */
