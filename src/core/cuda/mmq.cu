/* mmq.cu - K-quant products of 9-64 activation rows on int8 tensor cores
 * (mmq.h). A batched decode step of the F16 GEMM path reads 2 bytes a
 * weight from prepare's F16 copy; these kernels read the quantized blocks
 * themselves (Q4_K 4.5 bits a weight, Q6_K 6.6) and multiply them with
 * mma.sync on int8 activations.
 *
 * Activations are quantized per 256 values (one float scale, like the
 * CPU's Q8_K for K-quant dots), with the int16 sum of each 32 values for
 * Q4_K's min term. A warp computes 16 weight rows x 8 n-tiles of 8
 * activation rows. Per 256-value super-block and n-tile:
 *   Q4_K: 8 mma m16n8k32 (one per 32-value sub-block), each integer
 *         result times its 6-bit scale summed in int32, the min term
 *         sum_j m_j * sum(x in j) from the sums (dp2a), then one float
 *         step: acc += dx * (d * isum - dmin * msum);
 *   Q6_K: 16 mma m16n8k16 (one per 16-value sub-block and its int8 scale),
 *         then acc += dx * d * isum.
 * The k order inside an m16n8k32 is permuted (any order serves a dot
 * product as long as both operands agree): a lane's 8 k-slots are 8
 * consecutive bytes of the row and of the activations, so each operand
 * comes in one 8-byte load. A block is 4 warps: 4 row tiles, or 2 row tiles
 * x 2 halves of K, or 1 row tile x 4 quarters of K (summed in shared
 * memory at the end), so that a product of few rows still fills the SMs.
 * Each warp loads its super-block's weight bytes and multiplies them; the
 * other warps of the SM (3 blocks of 168 registers) hide the latency.
 *
 * On an H100 (docs/gpu.md, jobs f_g1-f_g3) this beats cuBLAS on the F16
 * copy up to 32 rows (bench-engine at 16 sequences +23%) but not at 64:
 * there each mma carries 4 integer scale steps and the kernels are bound
 * by issue, not by the bytes they read (8192 x 2048 at 64 rows: 36 us
 * against 22 for the F16 GEMM; 28 us with the activations shared through
 * shared memory, a form dropped after measuring, 69c576b). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "src/core/cuda/byte_ops.h"
#include "src/core/cuda/mmq.h"

extern "C" {
#include "src/core/tensor.h"
}

#define MMQ_WARPS 4
#ifndef MMQ_MINB
#define MMQ_MINB 3 /* blocks an SM: 168 registers (4: 128, with spills at 6-8 n-tiles) */
#endif
#define M4 0x0f0f0f0fu

static __device__ __forceinline__ float mmq_h2f(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffff)));
}

/* d[4] = A (16 x 32, rows g and g + 8: a0 a2 / a1 a3) . B (32 x 8, column g: b0 b1) */
static __device__ __forceinline__ void mma_k32(int *d, int a0, int a1, int a2, int a3, int b0,
                                               int b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

/* d[4] = A (16 x 16: a0 row g, a1 row g + 8) . B (16 x 8: b0 column g) */
static __device__ __forceinline__ void mma_k16(int *d, int a0, int a1, int b0)
{
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* Byte i (0..3) of word v, signed or not. */
static __device__ __forceinline__ int ubyte(uint32_t v, int i) { return (int)((v >> (8 * i)) & 0xff); }
static __device__ __forceinline__ int sbyte(uint32_t v, int i) { return (int)(int8_t)((v >> (8 * i)) & 0xff); }

// ---- activations ---------------------------------------------------------------------

/* One warp per 256 values (a row's super-block w = t * nsb + sb): lane i
 * takes values 8i .. 8i + 7. */
__global__ void k_mmq_quant(const float *__restrict__ x, int64_t nw, int8_t *__restrict__ q,
                            float *__restrict__ d, int16_t *__restrict__ s)
{
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= nw)
        return;
    const float4 *xp = (const float4 *)(x + w * 256 + lane * 8);
    const float4 u = xp[0], v = xp[1];
    float amax = fmaxf(fmaxf(fmaxf(fabsf(u.x), fabsf(u.y)), fmaxf(fabsf(u.z), fabsf(u.w))),
                       fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const int q0 = __float2int_rn(u.x * id), q1 = __float2int_rn(u.y * id);
    const int q2 = __float2int_rn(u.z * id), q3 = __float2int_rn(u.w * id);
    const int q4 = __float2int_rn(v.x * id), q5 = __float2int_rn(v.y * id);
    const int q6 = __float2int_rn(v.z * id), q7 = __float2int_rn(v.w * id);
    int2 pk;
    pk.x = (q0 & 0xff) | (q1 & 0xff) << 8 | (q2 & 0xff) << 16 | (int)((unsigned)q3 << 24);
    pk.y = (q4 & 0xff) | (q5 & 0xff) << 8 | (q6 & 0xff) << 16 | (int)((unsigned)q7 << 24);
    *(int2 *)(q + w * 256 + lane * 8) = pk;
    int sum = q0 + q1 + q2 + q3 + q4 + q5 + q6 + q7;
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((lane & 3) == 0)
        s[w * 8 + (lane >> 2)] = (int16_t)sum;
    if (lane == 0)
        d[w] = dd;
}

struct mmq_act {
    const int8_t *q;   /* [n][cols] */
    const float *d;    /* [n][cols / 256] */
    const int16_t *s;  /* [n][cols / 32] */
};

static size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

static mmq_act act_parts(const void *act, int n, int cols)
{
    const size_t nq = (size_t)n * cols, nd = (size_t)n * (cols / 256);
    mmq_act a;
    a.q = (const int8_t *)act;
    a.d = (const float *)((const uint8_t *)act + nq);
    a.s = (const int16_t *)((const uint8_t *)act + align16(nq + nd * sizeof(float)));
    return a;
}

size_t mmq_act_bytes(int n, int cols)
{
    const size_t nq = (size_t)n * cols, nd = (size_t)n * (cols / 256);
    return align16(nq + nd * sizeof(float)) + (size_t)n * (cols / 32) * sizeof(int16_t);
}

cudaError_t mmq_quantize(const float *x, int n, int cols, void *act, cudaStream_t st)
{
    const int64_t nw = (int64_t)n * (cols / 256);
    const mmq_act a = act_parts(act, n, cols);
    k_mmq_quant<<<(unsigned)((nw * 32 + 255) / 256), 256, 0, st>>>(
        x, nw, (int8_t *)a.q, (float *)a.d, (int16_t *)a.s);
    return cudaGetLastError();
}

// ---- products ----------------------------------------------------------------------------

/* A lane's weight bytes of one super-block, for rows g (a) and g + 8 (b). */
struct q4k_raw {
    uint4 ha, hb; /* headers: d, dmin, 12 scale bytes */
    uint2 qa[4], qb[4]; /* qs bytes 32p + 8 tig .. + 7 of each 64-value pair p */
};

static __device__ __forceinline__ void q4k_load(q4k_raw &r, const uint8_t *ba, const uint8_t *bb,
                                                int tig)
{
    r.ha = __ldg((const uint4 *)ba);
    r.hb = __ldg((const uint4 *)bb);
#pragma unroll
    for (int p = 0; p < 4; p++) {
        r.qa[p] = __ldg((const uint2 *)(ba + 16 + 32 * p + 8 * tig));
        r.qb[p] = __ldg((const uint2 *)(bb + 16 + 32 * p + 8 * tig));
    }
}

struct q6k_raw {
    uint32_t la[8], lb[8]; /* ql words 64h + 32k + 16e + 4 tig at [4h + 2k + e] */
    uint32_t ha[4], hb[4]; /* qh words 128 + 32h + 16e + 4 tig at [2h + e] */
    uint4 sa, sb;          /* the 16 scales */
    uint32_t da, db;       /* F16 d */
};

static __device__ __forceinline__ void q6k_load(q6k_raw &r, const uint8_t *qa, const uint8_t *qb,
                                                const int8_t *sa, const int8_t *sb,
                                                const uint16_t *da, const uint16_t *db, int tig)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int off = 64 * (i >> 2) + 32 * ((i >> 1) & 1) + 16 * (i & 1) + 4 * tig;
        r.la[i] = __ldg((const uint32_t *)(qa + off));
        r.lb[i] = __ldg((const uint32_t *)(qb + off));
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int off = 128 + 32 * (i >> 1) + 16 * (i & 1) + 4 * tig;
        r.ha[i] = __ldg((const uint32_t *)(qa + off));
        r.hb[i] = __ldg((const uint32_t *)(qb + off));
    }
    r.sa = __ldg((const uint4 *)sa);
    r.sb = __ldg((const uint4 *)sb);
    r.da = __ldg(da);
    r.db = __ldg(db);
}

/* sum_j m_j s_j over a super-block's 8 sub-blocks: s the int16 sums (two
 * a word), m the 6-bit mins as bytes (lo: j 0-3, hi: 4-7). */
static __device__ __forceinline__ int min_dot(const int4 &s, uint32_t mlo, uint32_t mhi)
{
    int r = __dp2a_lo(s.x, (int)mlo, 0);
    r = __dp2a_hi(s.y, (int)mlo, r);
    r = __dp2a_lo(s.z, (int)mhi, r);
    return __dp2a_hi(s.w, (int)mhi, r);
}

/* One super-block of Q4_K rows a, b against the NT n-tiles: ia[j] = the
 * int32 sums of scale x dot for (a, t0) (a, t1) (b, t0) (b, t1) of n-tile
 * j. Sub-blocks outside, n-tiles inside: a sub-block's A fragments and
 * scales are made once for all n-tiles. xr[j]: n-tile j's activation row
 * of this lane at the super-block (+ 8 tig). */
template <int NT>
static __device__ __forceinline__ void q4k_tiles(const q4k_raw &r, const int8_t *const *xr,
                                                 int (*ia)[4])
{
    const uint32_t sal = r.ha.y & 0x3f3f3f3fu, sah = (r.ha.w & M4) | ((r.ha.y >> 2) & 0x30303030u);
    const uint32_t sbl = r.hb.y & 0x3f3f3f3fu, sbh = (r.hb.w & M4) | ((r.hb.y >> 2) & 0x30303030u);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int p = c >> 1, sh = (c & 1) * 4;
        const int a0 = (int)((r.qa[p].x >> sh) & M4), a2 = (int)((r.qa[p].y >> sh) & M4);
        const int a1 = (int)((r.qb[p].x >> sh) & M4), a3 = (int)((r.qb[p].y >> sh) & M4);
        const int sa = ubyte(c < 4 ? sal : sah, c & 3), sb = ubyte(c < 4 ? sbl : sbh, c & 3);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int2 b = __ldg((const int2 *)(xr[j] + 32 * c));
            int d[4];
            mma_k32(d, a0, a1, a2, a3, b.x, b.y);
            ia[j][0] += sa * d[0];
            ia[j][1] += sa * d[1];
            ia[j][2] += sb * d[2];
            ia[j][3] += sb * d[3];
        }
    }
}

/* The same for Q6_K: 16-value sub-blocks (xr[j] + 4 tig). */
template <int NT>
static __device__ __forceinline__ void q6k_tiles(const q6k_raw &r, const int8_t *const *xr,
                                                 int (*ia)[4])
{
    const uint32_t sa[4] = { r.sa.x, r.sa.y, r.sa.z, r.sa.w };
    const uint32_t sb[4] = { r.sb.x, r.sb.y, r.sb.z, r.sb.w };
#pragma unroll
    for (int s = 0; s < 16; s++) {
        /* values 128h + 32k + 16e + 0..15, scale s = 8h + 2k + e */
        const int h = s >> 3, k = (s >> 1) & 3, e = s & 1;
        const int li = 4 * h + 2 * (k & 1) + e, hi = 2 * h + e;
        const int lsh = (k >> 1) * 4, hsh = 2 * k;
        const int a0 = bytes_minus(((r.la[li] >> lsh) & M4) | (((r.ha[hi] >> hsh) & 0x03030303u) << 4),
                                   0x20202020u);
        const int a1 = bytes_minus(((r.lb[li] >> lsh) & M4) | (((r.hb[hi] >> hsh) & 0x03030303u) << 4),
                                   0x20202020u);
        const int ca = sbyte(sa[s >> 2], s & 3), cb = sbyte(sb[s >> 2], s & 3);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int b = __ldg((const int *)(xr[j] + 16 * s)); /* 128h + 32k + 16e */
            int d[4];
            mma_k16(d, a0, a1, b);
            ia[j][0] += ca * d[0];
            ia[j][1] += ca * d[1];
            ia[j][2] += cb * d[2];
            ia[j][3] += cb * d[3];
        }
    }
}

/* y = W . x for NT n-tiles (8 activation rows each; rows past n repeat
 * row n - 1 and are not stored), KS warps of a block over K. */
template <int T, int NT, int KS>
__global__ void __launch_bounds__(MMQ_WARPS * 32, MMQ_MINB)
    k_mmq(const mmq_w w, int rows, int nsb, int n, const mmq_act x, float *__restrict__ y)
{
    constexpr int RT = MMQ_WARPS / KS;
    __shared__ float red[KS > 1 ? (KS - 1) * RT * NT * 4 * 32 : 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int rt = warp % RT, ks = warp / RT;
    const int row0 = ((int)blockIdx.x * RT + rt) * 16;
    const int ra = min(row0 + g, rows - 1), rb = min(row0 + g + 8, rows - 1);
    const int cols = nsb * 256, ncs = nsb * 8;
    const int sb0 = ks * nsb / KS, sb1 = (ks + 1) * nsb / KS;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    using raw_t = typename std::conditional<T == GGML_TYPE_Q4_K, q4k_raw, q6k_raw>::type;
    raw_t cur;
    auto load = [&](raw_t &r, int sb) {
        if constexpr (T == GGML_TYPE_Q4_K) {
            q4k_load(r, w.q + (size_t)ra * w.qrb + (size_t)sb * 144,
                     w.q + (size_t)rb * w.qrb + (size_t)sb * 144, tig);
        } else {
            const size_t ia = (size_t)ra * nsb + sb, ib = (size_t)rb * nsb + sb;
            q6k_load(r, w.q + ia * 192, w.q + ib * 192, w.sc + ia * 16, w.sc + ib * 16, w.d + ia,
                     w.d + ib, tig);
        }
    };
    for (int sb = sb0; sb < sb1; sb++) {
        load(cur, sb);
        int ia[NT][4];
        const int8_t *xr[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            ia[j][0] = ia[j][1] = ia[j][2] = ia[j][3] = 0;
            xr[j] = x.q + (size_t)min(8 * j + g, n - 1) * cols + sb * 256 +
                    (T == GGML_TYPE_Q4_K ? 8 : 4) * tig;
        }
        if constexpr (T == GGML_TYPE_Q4_K)
            q4k_tiles<NT>(cur, xr, ia);
        else
            q6k_tiles<NT>(cur, xr, ia);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int t0 = min(8 * j + 2 * tig, n - 1), t1 = min(8 * j + 2 * tig + 1, n - 1);
            const float x0 = __ldg(x.d + (size_t)t0 * nsb + sb), x1 = __ldg(x.d + (size_t)t1 * nsb + sb);
            if constexpr (T == GGML_TYPE_Q4_K) {
                const uint32_t mal = cur.ha.z & 0x3f3f3f3fu,
                               mah = ((cur.ha.w >> 4) & M4) | ((cur.ha.z >> 2) & 0x30303030u);
                const uint32_t mbl = cur.hb.z & 0x3f3f3f3fu,
                               mbh = ((cur.hb.w >> 4) & M4) | ((cur.hb.z >> 2) & 0x30303030u);
                const int4 s0 = __ldg((const int4 *)(x.s + (size_t)t0 * ncs + sb * 8));
                const int4 s1 = __ldg((const int4 *)(x.s + (size_t)t1 * ncs + sb * 8));
                const float da = mmq_h2f(cur.ha.x), dma = mmq_h2f(cur.ha.x >> 16);
                const float db = mmq_h2f(cur.hb.x), dmb = mmq_h2f(cur.hb.x >> 16);
                acc[j][0] += x0 * (da * (float)ia[j][0] - dma * (float)min_dot(s0, mal, mah));
                acc[j][1] += x1 * (da * (float)ia[j][1] - dma * (float)min_dot(s1, mal, mah));
                acc[j][2] += x0 * (db * (float)ia[j][2] - dmb * (float)min_dot(s0, mbl, mbh));
                acc[j][3] += x1 * (db * (float)ia[j][3] - dmb * (float)min_dot(s1, mbl, mbh));
            } else {
                const float da = mmq_h2f(cur.da), db = mmq_h2f(cur.db);
                acc[j][0] += x0 * (da * (float)ia[j][0]);
                acc[j][1] += x1 * (da * (float)ia[j][1]);
                acc[j][2] += x0 * (db * (float)ia[j][2]);
                acc[j][3] += x1 * (db * (float)ia[j][3]);
            }
        }
    }
    if constexpr (KS > 1) {
        if (ks > 0) {
            float *r = red + ((ks - 1) * RT + rt) * NT * 4 * 32;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    r[(j * 4 + e) * 32 + lane] = acc[j][e];
        }
        __syncthreads();
        if (ks > 0)
            return;
#pragma unroll
        for (int k = 1; k < KS; k++) {
            const float *r = red + ((k - 1) * RT + rt) * NT * 4 * 32;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[j][e] += r[(j * 4 + e) * 32 + lane];
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = row0 + g + (e >> 1) * 8, t = 8 * j + 2 * tig + (e & 1);
            if (r < rows && t < n)
                y[(size_t)t * rows + r] = acc[j][e];
        }
}

bool mmq_shape_ok(int type, int64_t rows, int64_t cols, int n)
{
    return (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K) && n >= 1 && n <= MMQ_MAX_ROWS &&
           rows >= 1 && rows <= (int64_t)1 << 30 && cols >= 256 && cols % 256 == 0 &&
           cols <= (int64_t)1 << 24;
}

template <int T, int NT>
static void launch_nt(const mmq_w &w, int rows, int nsb, int n, const mmq_act &x, float *y, int ks,
                      cudaStream_t st)
{
    const int tiles = (rows + 15) / 16;
    const dim3 bd(MMQ_WARPS * 32);
    switch (ks) {
    case 4: k_mmq<T, NT, 4><<<tiles, bd, 0, st>>>(w, rows, nsb, n, x, y); break;
    case 2: k_mmq<T, NT, 2><<<(tiles + 1) / 2, bd, 0, st>>>(w, rows, nsb, n, x, y); break;
    default: k_mmq<T, NT, 1><<<(tiles + 3) / 4, bd, 0, st>>>(w, rows, nsb, n, x, y); break;
    }
}

template <int T>
static void launch_t(const mmq_w &w, int rows, int nsb, int n, const mmq_act &x, float *y, int ks,
                     cudaStream_t st)
{
    if (n <= 16)
        launch_nt<T, 2>(w, rows, nsb, n, x, y, ks, st);
    else if (n <= 32)
        launch_nt<T, 4>(w, rows, nsb, n, x, y, ks, st);
    else if (n <= 48)
        launch_nt<T, 6>(w, rows, nsb, n, x, y, ks, st);
    else
        launch_nt<T, 8>(w, rows, nsb, n, x, y, ks, st);
}

cudaError_t mmq_product(const struct mmq_w *w, int rows, int cols, int n, const void *act,
                        float *y, int n_sm, int ks, cudaStream_t st)
{
    if (!mmq_shape_ok(w->type, rows, cols, n))
        return cudaErrorInvalidValue;
    const int nsb = cols / 256, tiles = (rows + 15) / 16;
    if (ks != 1 && ks != 2 && ks != 4) {
        /* the fewest K-splits that give every SM a block, while each warp
         * keeps 2+ super-blocks */
        ks = 1;
        while (ks < 4 && (tiles * ks + 3) / 4 < n_sm && nsb >= 4 * ks)
            ks *= 2;
    }
    const mmq_act x = act_parts(act, n, cols);
    if (w->type == GGML_TYPE_Q4_K)
        launch_t<GGML_TYPE_Q4_K>(*w, rows, nsb, n, x, y, ks, st);
    else
        launch_t<GGML_TYPE_Q6_K>(*w, rows, nsb, n, x, y, ks, st);
    return cudaGetLastError();
}
