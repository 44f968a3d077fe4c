/* gemm_f16_avx512.c - prompt-size products with F16 weights on AVX-512F:
 * the blocking of gemm_f16_avx2.c (x panels of 6 rows per 256-value K slab,
 * weight groups converted to floats per slab, partial sums between slabs
 * in per-thread scratch, y written by the last slab) with a 6 x 32
 * register tile of 16-float vectors: 12 accumulators, each k two weight
 * loads and six broadcast multiply-adds pairs. Zen 5 runs two 512-bit FMAs
 * a cycle, twice the multiply-adds of the 256-bit tile.
 * The weights are converted 16 x 16 values at a time (cvtph + an in-register
 * transpose), edges by the AVX2 file's packing.
 * Each output's sum runs over k in the order of the AVX2 kernel (one fused
 * multiply-add per k from zero, the slabs in turn), so both kernels give
 * the same bits, whatever the batch size or a thread's column range. */
#include "gemm_f16_avx512.h"

#include "gemm_f16_avx2.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f")

#include <immintrin.h>
#include <string.h>

#define MR OMNI_GEMM_F16_MR /* x rows per register tile (the packing's panels) */
#define NR 32               /* weight rows per register tile (two vectors) */
#define KC OMNI_GEMM_F16_KC /* K values per slab: a strip's slab is 32 KB */
#define NG 128              /* weight rows per group: their slab (128 KB) in L2 */

size_t omni_x86_gemm_f16_scratch_avx512(int64_t n_in, int64_t n_batch)
{
    (void)n_in;
    const size_t panels = (size_t)((n_batch + MR - 1) / MR);
    return (size_t)KC * NG * sizeof(float) + panels * NG * MR * sizeof(float);
}

/* 16 x 16 transpose of r[0..15] in place (r[i] = row i: afterwards r[c] =
 * column c): pairs of rows interleaved, 4 x 4 blocks within 128-bit lanes,
 * then the lanes gathered across rows in two steps. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* u[4i + c]: rows 4i..4i+3 at column c of each lane */
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee);
        const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        const __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88), r[4 + c] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
        r[8 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88), r[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
    }
}

/* Weight rows [r, r + nr) (nr <= NR), columns [k0, k0 + kw), as floats:
 * b[k][j] = W[r + j][k0 + k], zero for j >= nr. A full strip converts 16
 * values a row at a time and transposes 16 x 16 (the AVX2 packing's 8 x 8
 * blocks took ~7% of a Qwen2.5-0.5B F16 prompt beside the GEMM's 74%); the
 * last columns of a slab and a partial strip go through that packing. */
static void pack_w(const uint16_t *w, int64_t n_in, int64_t r, int nr, int64_t k0, int kw, float *b)
{
    int k = 0;
    if (nr == NR)
        for (; k + 16 <= kw; k += 16)
            for (int j0 = 0; j0 < NR; j0 += 16) {
                __m512 v[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    v[j] = _mm512_cvtph_ps(
                        _mm256_loadu_si256((const __m256i *)(w + (size_t)(r + j0 + j) * n_in + k0 + k)));
                transpose16(v);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    _mm512_store_ps(b + (size_t)(k + i) * NR + j0, v[i]);
            }
    if (k == kw)
        return;
    for (int j0 = 0; j0 < NR; j0 += 16) {
        const int left = nr - j0;
        omni_x86_gemm_f16_pack_w(w, n_in, r + j0, left <= 0 ? 0 : left < 16 ? left : 16, k0 + k, kw - k,
                                 b + (size_t)k * NR + j0, NR);
    }
}

/* o (rows x NR, row stride ldo) = (add ? c : 0) + a^T b over kw values of
 * k, c a tile of row stride NR; rows (1..MR) is a constant at each call. */
#define ROW_LOAD(i)                                                                      \
    if (rows > i)                                                                        \
        c##i##l = add ? _mm512_load_ps(c + i * NR) : _mm512_setzero_ps(),                \
        c##i##h = add ? _mm512_load_ps(c + i * NR + 16) : _mm512_setzero_ps();
#define ROW_FMA(i)                                                                       \
    if (rows > i) {                                                                      \
        const __m512 av = _mm512_set1_ps(ak[i]);                                         \
        c##i##l = _mm512_fmadd_ps(av, bl, c##i##l), c##i##h = _mm512_fmadd_ps(av, bh, c##i##h); \
    }
#define ROW_STORE(i)                                                                     \
    if (rows > i)                                                                        \
        _mm512_storeu_ps(o + i * ldo, c##i##l), _mm512_storeu_ps(o + i * ldo + 16, c##i##h);
static inline __attribute__((always_inline)) void tile(int kw, const float *a, const float *b, const float *c,
                                                       float *o, size_t ldo, int add, const int rows)
{
    __m512 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
    c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm512_setzero_ps();
    ROW_LOAD(0) ROW_LOAD(1) ROW_LOAD(2) ROW_LOAD(3) ROW_LOAD(4) ROW_LOAD(5)
#pragma GCC unroll 4
    for (int k = 0; k < kw; k++) {
        const __m512 bl = _mm512_load_ps(b + (size_t)k * NR), bh = _mm512_load_ps(b + (size_t)k * NR + 16);
        const float *ak = a + (size_t)k * MR;
        ROW_FMA(0) ROW_FMA(1) ROW_FMA(2) ROW_FMA(3) ROW_FMA(4) ROW_FMA(5)
    }
    ROW_STORE(0) ROW_STORE(1) ROW_STORE(2) ROW_STORE(3) ROW_STORE(4) ROW_STORE(5)
}

/* Two adjacent strips for a panel of rows <= 3 (b: strip s, b + NR * KC:
 * strip s + 1; c: strip s's partial sums, strip s + 1's at c + MR * NR;
 * o0, o1: the two outputs, row stride ldo): 4 vectors a row keep 4-12
 * multiply-add chains going where one strip would leave 2-6. */
#define PAIR_LOAD(i)                                                                     \
    if (rows > i) {                                                                      \
        p##i##a = add ? _mm512_load_ps(c + i * NR) : _mm512_setzero_ps();                \
        p##i##b = add ? _mm512_load_ps(c + i * NR + 16) : _mm512_setzero_ps();           \
        p##i##c = add ? _mm512_load_ps(c + MR * NR + i * NR) : _mm512_setzero_ps();      \
        p##i##d = add ? _mm512_load_ps(c + MR * NR + i * NR + 16) : _mm512_setzero_ps(); \
    }
#define PAIR_FMA(i)                                                                      \
    if (rows > i) {                                                                      \
        const __m512 av = _mm512_set1_ps(ak[i]);                                         \
        p##i##a = _mm512_fmadd_ps(av, b0, p##i##a), p##i##b = _mm512_fmadd_ps(av, b1, p##i##b); \
        p##i##c = _mm512_fmadd_ps(av, b2, p##i##c), p##i##d = _mm512_fmadd_ps(av, b3, p##i##d); \
    }
#define PAIR_STORE(i)                                                                    \
    if (rows > i) {                                                                      \
        _mm512_storeu_ps(o0 + i * ldo, p##i##a), _mm512_storeu_ps(o0 + i * ldo + 16, p##i##b); \
        _mm512_storeu_ps(o1 + i * ldo, p##i##c), _mm512_storeu_ps(o1 + i * ldo + 16, p##i##d); \
    }
static inline __attribute__((always_inline)) void tile_pair(int kw, const float *a, const float *b,
                                                            const float *c, float *o0, float *o1, size_t ldo,
                                                            int add, const int rows)
{
    __m512 p0a, p0b, p0c, p0d, p1a, p1b, p1c, p1d, p2a, p2b, p2c, p2d;
    p0a = p0b = p0c = p0d = p1a = p1b = p1c = p1d = p2a = p2b = p2c = p2d = _mm512_setzero_ps();
    PAIR_LOAD(0) PAIR_LOAD(1) PAIR_LOAD(2)
    const float *b2p = b + (size_t)NR * KC;
#pragma GCC unroll 4
    for (int k = 0; k < kw; k++) {
        const __m512 b0 = _mm512_load_ps(b + (size_t)k * NR), b1 = _mm512_load_ps(b + (size_t)k * NR + 16);
        const __m512 b2 = _mm512_load_ps(b2p + (size_t)k * NR), b3 = _mm512_load_ps(b2p + (size_t)k * NR + 16);
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

void omni_x86_gemm_f16_avx512(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                              int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    const int64_t panels = (n_batch + MR - 1) / MR;
    float *b = scratch;
    float *cb = b + (size_t)KC * NG; /* partial sums: [panel][strip][MR][NR] */
    for (int64_t g = r0; g < r1; g += NG) {
        const int64_t g1 = g + NG < r1 ? g + NG : r1;
        const int64_t strips = (g1 - g + NR - 1) / NR;
        for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
            const int kw = n_in - k0 < KC ? (int)(n_in - k0) : KC;
            const int add = k0 > 0, last = k0 + KC >= n_in;
            const float *a = xp + (size_t)k0 * panels * MR;
            for (int64_t r = g; r < g1; r += NR)
                pack_w(w, n_in, r, g1 - r < NR ? (int)(g1 - r) : NR, k0, kw, b + (size_t)(r - g) * KC);
            for (int64_t p = 0; p < panels; p++) {
                const float *ap = a + (size_t)p * MR * kw;
                const int mr = n_batch - p * MR < MR ? (int)(n_batch - p * MR) : MR;
                /* the next panel into L1 while this one runs its strips */
                const char *pn = (const char *)(ap + (size_t)MR * kw);
                for (int64_t s = 0; s < strips; s++) {
                    const int64_t r = g + s * NR;
                    const int nr = g1 - r < NR ? (int)(g1 - r) : NR;
                    const float *bp = b + (size_t)s * NR * KC;
                    if (p + 1 < panels)
                        for (int q = 0; q < MR * kw * 4 / 64; q += (int)strips)
                            _mm_prefetch(pn + (size_t)(q + s) * 64, _MM_HINT_T0);
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

#else

size_t omni_x86_gemm_f16_scratch_avx512(int64_t n_in, int64_t n_batch)
{
    (void)n_in;
    (void)n_batch;
    return 0;
}

void omni_x86_gemm_f16_avx512(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                              int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    (void)w, (void)n_in, (void)n_out, (void)xp, (void)n_batch, (void)y, (void)r0, (void)r1, (void)scratch;
}

#endif /* __x86_64__ */
