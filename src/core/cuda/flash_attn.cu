/* flash_attn.cu - prompt attention over the paged KV pool on tensor cores,
 * FlashAttention style (docs/gpu.md "Prompt attention"). A block of 4 warps
 * takes 64 query tokens of one head; each warp holds 16 query rows as F16
 * mma fragments. Key tiles of 64 keys (K and V rows found through the
 * sequence's block table) are copied into shared memory with cp.async, two
 * tiles in flight; S = q k^T and O += P v are mma.sync m16n8k16 (F16 in,
 * F32 accumulation) with the online softmax on S in registers, so every
 * key and value row is read once per 64 queries instead of once per query
 * (the one-warp-per-query kernel of backend_cuda.cu).
 *
 * The tokens of a step need not share a sequence or be in order: the rows
 * of a block are taken in runs of one sequence, and each row masks the keys
 * outside its own range (first .. pos, as struct omni_battn says), so a
 * step that packs several prompts' chunks gets the same result as one
 * prompt at a time.
 *
 * Decode steps take the flash decoding kernel further down: over long
 * contexts with the keys split in slices, and for steps of many tokens
 * unsplit (docs/gpu.md "Flash decoding for many sequences"). */
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "src/core/cuda/flash_attn.h"
#include "src/core/cuda/launch.h"

extern "C" {
#include "src/core/tensor.h"
}

#define FA_BQ 64    /* query tokens a block */
#define FA_BK 64    /* keys a tile */
#define FA_WARPS 4  /* 16 query rows a warp */

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}

/* c += a b: one m16n8k16 step, F16 operands, F32 accumulators */
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* four 8x8 F16 matrices from shared memory: lane l gives the address of row
 * l % 8 of matrix l / 8; trans: each comes transposed */
template <bool TRANS> __device__ __forceinline__ void ldsm4(uint32_t r[4], const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* 16 bytes global -> shared, asynchronously; ok false: 16 zero bytes */
__device__ __forceinline__ void cp16(__half *dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(ok ? 16 : 0));
}

/* 8 F32 values -> 8 F16 in shared memory (the F32 pool; synchronous) */
__device__ __forceinline__ void cp8_f32(__half *dst, const float *src, bool ok)
{
    uint4 u = make_uint4(0, 0, 0, 0);
    if (ok) {
        const float4 x = *(const float4 *)src, y = *(const float4 *)(src + 4);
        u = make_uint4(pack_h2(x.x, x.y), pack_h2(x.z, x.w), pack_h2(y.x, y.y), pack_h2(y.z, y.w));
    }
    *(uint4 *)dst = u;
}

/* Key and value rows k0 .. k0 + NK - 1 of a sequence into Ks / Vs (rows
 * D + 8 halves apart) by threads tid, tid + nthr, ...; rows outside kmin ..
 * kmax become zeros (a pool slot that was never written may hold anything,
 * and a masked key's probability 0 times a NaN value would still be NaN).
 * Ends a cp.async group. */
template <typename KT, int D, int NK>
__device__ __forceinline__ void fa_load_tile(const struct omni_battn &a, const int32_t *table,
                                             int kvh, int k0, int kmin, int kmax, __half *Ks,
                                             __half *Vs, int tid, int nthr)
{
    constexpr int RS = D + 8, CPR = D / 8;
    const int64_t kv_dim = (int64_t)a.n_head_kv * D;
    const KT *K = (const KT *)a.k, *V = (const KT *)a.v;
    for (int c = tid; c < NK * CPR; c += nthr) {
        const int kr = c / CPR, cc = c % CPR, j = k0 + kr;
        const bool ok = j >= kmin && j <= kmax;
        int64_t off = 0;
        if (ok)
            off = ((int64_t)table[j / a.block_size] * a.block_size + j % a.block_size) * kv_dim +
                  (int64_t)kvh * D + cc * 8;
        if constexpr (sizeof(KT) == 2) {
            cp16(Ks + kr * RS + cc * 8, K + off, ok);
            cp16(Vs + kr * RS + cc * 8, V + off, ok);
        } else {
            cp8_f32(Ks + kr * RS + cc * 8, (const float *)K + off, ok);
            cp8_f32(Vs + kr * RS + cc * 8, (const float *)V + off, ok);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* A lane's two query rows (g and g + 8 of its warp's 16) as m16n8k16 A
 * fragments, scaled by scale * log2(e) so that the softmax can use exp2;
 * a row that is not there (NULL) is zeros. */
template <int D>
__device__ __forceinline__ void fa_load_q(uint32_t (&qf)[D / 16][4], const float *qlo,
                                          const float *qhi, float scale)
{
    const float qs = scale * 1.4426950408889634f;
    const int t4 = threadIdx.x & 3;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const int c = ks * 16 + 2 * t4;
        const float2 z = make_float2(0.0f, 0.0f);
        const float2 a0 = qlo ? *(const float2 *)(qlo + c) : z;
        const float2 a1 = qhi ? *(const float2 *)(qhi + c) : z;
        const float2 a2 = qlo ? *(const float2 *)(qlo + c + 8) : z;
        const float2 a3 = qhi ? *(const float2 *)(qhi + c + 8) : z;
        qf[ks][0] = pack_h2(a0.x * qs, a0.y * qs);
        qf[ks][1] = pack_h2(a1.x * qs, a1.y * qs);
        qf[ks][2] = pack_h2(a2.x * qs, a2.y * qs);
        qf[ks][3] = pack_h2(a3.x * qs, a3.y * qs);
    }
}

/* What a lane's two rows see: in (the row takes part in this pass), keys
 * first .. pos. */
struct fa_rows {
    bool in_lo, in_hi;
    int first_lo, pos_lo, first_hi, pos_hi;
};

/* A warp's online-softmax state: its 16 rows' outputs (C fragments of the
 * D / 8 n-tiles), maxima (shared by the row's 4 lanes) and this lane's part
 * of the sums. */
template <int D> struct fa_acc {
    float o[D / 8][4];
    float m_lo, m_hi, l_lo, l_hi;
    __device__ void init()
    {
#pragma unroll
        for (int i = 0; i < D / 8; i++)
            o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        m_lo = m_hi = -INFINITY;
        l_lo = l_hi = 0.0f;
    }
};

/* One warp, one tile of NT * 8 keys from k0 (Kb / Vb in shared memory):
 * S = q k^T, masked, the online softmax, O += P v. */
template <int D, int NT>
__device__ __forceinline__ void fa_tile(const uint32_t (&qf)[D / 16][4], const __half *Kb,
                                        const __half *Vb, int k0, const fa_rows &rw,
                                        fa_acc<D> &st)
{
    constexpr int RS = D + 8, KS = D / 16, DT = D / 8;
    const int lane = threadIdx.x & 31, t4 = lane & 3, mi = lane >> 3, mr = lane & 7;
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks += 2) {
            uint32_t b[4];
            ldsm4<false>(b, Kb + (n * 8 + mr) * RS + ks * 16 + mi * 8);
            mma_f16(s[n], qf[ks], b[0], b[1]);
            mma_f16(s[n], qf[ks + 1], b[2], b[3]);
        }
    }
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = k0 + n * 8 + 2 * t4 + (e & 1);
            const bool ok = e < 2 ? rw.in_lo && j >= rw.first_lo && j <= rw.pos_lo
                                  : rw.in_hi && j >= rw.first_hi && j <= rw.pos_hi;
            s[n][e] = ok ? s[n][e] : -INFINITY;
        }
        mx_lo = fmaxf(mx_lo, fmaxf(s[n][0], s[n][1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, sh));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, sh));
    }
    const float mn_lo = fmaxf(st.m_lo, mx_lo), mn_hi = fmaxf(st.m_hi, mx_hi);
    /* a row with no key yet keeps m = -inf: its factors stay 1 and its
     * probabilities 0 */
    const float c_lo = mn_lo == -INFINITY ? 1.0f : exp2f(st.m_lo - mn_lo);
    const float c_hi = mn_hi == -INFINITY ? 1.0f : exp2f(st.m_hi - mn_hi);
    const float b_lo = mn_lo == -INFINITY ? 0.0f : mn_lo;
    const float b_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
    st.m_lo = mn_lo;
    st.m_hi = mn_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        s[n][0] = exp2f(s[n][0] - b_lo);
        s[n][1] = exp2f(s[n][1] - b_lo);
        s[n][2] = exp2f(s[n][2] - b_hi);
        s[n][3] = exp2f(s[n][3] - b_hi);
        sum_lo += s[n][0] + s[n][1];
        sum_hi += s[n][2] + s[n][3];
    }
    st.l_lo = st.l_lo * c_lo + sum_lo;
    st.l_hi = st.l_hi * c_hi + sum_hi;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        st.o[i][0] *= c_lo;
        st.o[i][1] *= c_lo;
        st.o[i][2] *= c_hi;
        st.o[i][3] *= c_hi;
    }
    /* O += P v: the S fragments of key groups 2u and 2u + 1 are P's A
     * fragment for keys 16u .. 16u + 15 */
#pragma unroll
    for (int u = 0; u < NT / 2; u++) {
        const uint32_t pa[4] = {pack_h2(s[2 * u][0], s[2 * u][1]), pack_h2(s[2 * u][2], s[2 * u][3]),
                                pack_h2(s[2 * u + 1][0], s[2 * u + 1][1]),
                                pack_h2(s[2 * u + 1][2], s[2 * u + 1][3])};
#pragma unroll
        for (int dn = 0; dn < DT; dn += 2) {
            uint32_t b[4];
            ldsm4<true>(b, Vb + (u * 16 + (mi & 1) * 8 + mr) * RS + dn * 8 + (mi >> 1) * 8);
            mma_f16(st.o[dn], pa, b[0], b[1]);
            mma_f16(st.o[dn + 1], pa, b[2], b[3]);
        }
    }
}

/* The row sums' four lane parts together (after a warp's last tile). */
template <int D> __device__ __forceinline__ void fa_sum_lanes(fa_acc<D> &st)
{
#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        st.l_lo += __shfl_xor_sync(0xffffffffu, st.l_lo, sh);
        st.l_hi += __shfl_xor_sync(0xffffffffu, st.l_hi, sh);
    }
}

template <typename KT, int D>
__global__ void __launch_bounds__(FA_WARPS * 32, 2) k_flash_attn(struct omni_battn a)
{
    constexpr int RS = D + 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char fa_sm[];
    __half *Ks = (__half *)fa_sm; /* [2][FA_BK][RS] */
    __half *Vs = Ks + 2 * FA_BK * RS;
    int *mseq = (int *)(Vs + 2 * FA_BK * RS), *mpos = mseq + FA_BQ, *mfirst = mpos + FA_BQ;

    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int t0 = blockIdx.x * FA_BQ, h = blockIdx.y;
    const int nrows = min(FA_BQ, a.n_tok - t0);
    const int kvh = h / (a.n_head / a.n_head_kv);
    if (threadIdx.x < FA_BQ) {
        const int r = threadIdx.x;
        const int p = r < nrows ? a.pos[t0 + r] : -1;
        mseq[r] = r < nrows ? a.seq[t0 + r] : -1;
        mpos[r] = p;
        mfirst[r] = a.n_swa > 0 && p >= a.n_swa ? p - a.n_swa + 1 : 0;
    }
    const int rlo = wid * 16 + g, rhi = rlo + 8;
    const size_t qrow = (size_t)a.n_head * D;
    uint32_t qf[D / 16][4];
    fa_load_q<D>(qf, rlo < nrows ? a.q + (size_t)(t0 + rlo) * qrow + (size_t)h * D : NULL,
                 rhi < nrows ? a.q + (size_t)(t0 + rhi) * qrow + (size_t)h * D : NULL, a.scale);
    __syncthreads();

    fa_rows rw;
    rw.pos_lo = mpos[rlo];
    rw.pos_hi = mpos[rhi];
    rw.first_lo = mfirst[rlo];
    rw.first_hi = mfirst[rhi];
    fa_acc<D> st;
    st.init();
    for (int r0 = 0; r0 < nrows;) {
        /* the run of rows r0 .. r1 - 1 of one sequence, and the keys any of
         * them sees */
        const int sq = mseq[r0];
        int r1 = r0 + 1, kmin = mfirst[r0], kmax = mpos[r0];
        while (r1 < nrows && mseq[r1] == sq) {
            kmin = min(kmin, mfirst[r1]);
            kmax = max(kmax, mpos[r1]);
            r1++;
        }
        rw.in_lo = rlo >= r0 && rlo < r1;
        rw.in_hi = rhi >= r0 && rhi < r1;
        /* the keys this warp's rows of the run see (a warp above the
         * diagonal skips the tile's products) */
        int wmin = INT_MAX, wmax = -1;
        if (rw.in_lo) {
            wmin = rw.first_lo;
            wmax = rw.pos_lo;
        }
        if (rw.in_hi) {
            wmin = min(wmin, rw.first_hi);
            wmax = max(wmax, rw.pos_hi);
        }
#pragma unroll
        for (int sh = 16; sh > 0; sh >>= 1) {
            wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, sh));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, sh));
        }
        const int32_t *table = a.tables + (size_t)sq * a.max_blocks;
        const int kbeg = kmin / FA_BK * FA_BK, ntile = (kmax - kbeg) / FA_BK + 1;
        const int nthr = FA_WARPS * 32;
        fa_load_tile<KT, D, FA_BK>(a, table, kvh, kbeg, kmin, kmax, Ks, Vs, threadIdx.x, nthr);
        for (int it = 0; it < ntile; it++) {
            const int buf = it & 1, k0 = kbeg + it * FA_BK;
            if (it + 1 < ntile) {
                fa_load_tile<KT, D, FA_BK>(a, table, kvh, k0 + FA_BK, kmin, kmax,
                                           Ks + (buf ^ 1) * FA_BK * RS, Vs + (buf ^ 1) * FA_BK * RS,
                                           threadIdx.x, nthr);
                asm volatile("cp.async.wait_group 1;" ::: "memory");
            } else {
                asm volatile("cp.async.wait_group 0;" ::: "memory");
            }
            __syncthreads();
            if (wmax >= k0 && wmin < k0 + FA_BK)
                fa_tile<D, FA_BK / 8>(qf, Ks + buf * FA_BK * RS, Vs + buf * FA_BK * RS, k0, rw, st);
            __syncthreads(); /* the next iteration loads into the buffer just read */
        }
        r0 = r1;
    }
    fa_sum_lanes<D>(st);
    const float i_lo = st.l_lo > 0.0f ? 1.0f / st.l_lo : 0.0f;
    const float i_hi = st.l_hi > 0.0f ? 1.0f / st.l_hi : 0.0f;
    float *olo = a.out + (size_t)(t0 + rlo) * qrow + (size_t)h * D + 2 * t4;
    float *ohi = a.out + (size_t)(t0 + rhi) * qrow + (size_t)h * D + 2 * t4;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        if (rlo < nrows)
            *(float2 *)(olo + i * 8) = make_float2(st.o[i][0] * i_lo, st.o[i][1] * i_lo);
        if (rhi < nrows)
            *(float2 *)(ohi + i * 8) = make_float2(st.o[i][2] * i_hi, st.o[i][3] * i_hi);
    }
}

/* ---- decode steps (flash decoding) -----------------------------------------
 * Over long contexts, a one- or few-token step: a block per (token, K/V
 * head, slice of the keys); a step of many tokens takes it with one slice
 * (a block per (token, K/V head), no merge). Its rows are the group's query heads (up to 16, one warp's mma
 * rows), each of its 4 warps takes every 4th 32-key tile of the slice, and
 * the warps' states are merged in shared memory; with several slices each
 * block leaves its (max, sum, unnormalized output) in the scratch, and the
 * last block of the (token, K/V head) to finish merges them. So a long
 * context is read by 2 blocks an SM whatever the step's heads, where
 * backend_cuda.cu's decode kernels take a block per (token, query head). */
#define FD_WARPS 4
#define FD_BK 32           /* keys a warp's tile */
#define FD_MAX_SPLIT 64    /* slices of a (token, K/V head) at most */
#define FD_PART(D) (32 + 16 * (D)) /* floats a block leaves: m[16], l[16], o[16][D] */

template <typename KT, int D>
__global__ void __launch_bounds__(FD_WARPS * 32) k_flash_decode(struct omni_battn a, int chunk,
                                                                float *part, int *count, bool pf)
{
    constexpr int RS = D + 8, DT = D / 8, PS = FD_PART(D);
    extern __shared__ __align__(16) unsigned char fd_sm[];
    __shared__ int last;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* launched programmatically: the next kernel may start loading its
     * weights */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int item = blockIdx.x, split = blockIdx.y, nsplit = gridDim.y;
    const int t = item / a.n_head_kv, kvh = item % a.n_head_kv, G = a.n_head / a.n_head_kv;
    const int pos = a.pos[t]; /* positions and tables came by copies before the step */
    const int first = a.n_swa > 0 && pos >= a.n_swa ? pos - a.n_swa + 1 : 0;
    const int cbeg = first + split * chunk, cend = min(pos, cbeg + chunk - 1);
    const int32_t *table = a.tables + (size_t)a.seq[t] * a.max_blocks;
    if (pf) { /* the slice's key and value rows on their way to L2 while the
               * previous kernel finishes (hints: the rows it writes too) */
        const int64_t kv_dim = (int64_t)a.n_head_kv * D;
        for (int j = cbeg + (int)threadIdx.x; j <= cend; j += blockDim.x) {
            const int64_t off = ((int64_t)table[j / a.block_size] * a.block_size + j % a.block_size) * kv_dim +
                                (int64_t)kvh * D;
            const char *kr = (const char *)((const KT *)a.k + off), *vr = (const char *)((const KT *)a.v + off);
#pragma unroll
            for (int b = 0; b < D * (int)sizeof(KT); b += 128) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(kr + b));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + b));
            }
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* the previous kernel's q, K and V */
#endif
    const size_t qrow = (size_t)a.n_head * D;
    const float *q0 = a.q + (size_t)t * qrow + (size_t)kvh * G * D;
    uint32_t qf[D / 16][4];
    fa_load_q<D>(qf, g < G ? q0 + (size_t)g * D : NULL, g + 8 < G ? q0 + (size_t)(g + 8) * D : NULL,
                 a.scale);
    /* every row sees the slice's keys (the tiles past it are zeros) */
    const fa_rows rw = {g < G, g + 8 < G, cbeg, cend, cbeg, cend};
    fa_acc<D> st;
    st.init();
    __half *Kb = (__half *)fd_sm + wid * 2 * FD_BK * RS, *Vb = Kb + FD_BK * RS;
    for (int k0 = cbeg + wid * FD_BK; k0 <= cend; k0 += FD_WARPS * FD_BK) {
        fa_load_tile<KT, D, FD_BK>(a, table, kvh, k0, cbeg, cend, Kb, Vb, lane, 32);
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
        fa_tile<D, FD_BK / 8>(qf, Kb, Vb, k0, rw, st);
        __syncwarp(); /* the next tile goes where this one was read */
    }
    fa_sum_lanes<D>(st);
    __syncthreads(); /* the tiles' memory holds the warps' states from here */
    float *wm = (float *)fd_sm, *wl = wm + FD_WARPS * 16, *wo = wl + FD_WARPS * 16;
    const int rlo = wid * 16 + g, rhi = rlo + 8;
    if (t4 == 0) {
        wm[rlo] = st.m_lo;
        wm[rhi] = st.m_hi;
        wl[rlo] = st.l_lo;
        wl[rhi] = st.l_hi;
    }
#pragma unroll
    for (int i = 0; i < DT; i++) {
        *(float2 *)(wo + (size_t)rlo * D + i * 8 + 2 * t4) = make_float2(st.o[i][0], st.o[i][1]);
        *(float2 *)(wo + (size_t)rhi * D + i * 8 + 2 * t4) = make_float2(st.o[i][2], st.o[i][3]);
    }
    __syncthreads();
    float *out = a.out + (size_t)t * qrow + (size_t)kvh * G * D;
    float *mine = part + ((size_t)item * nsplit + split) * PS;
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        for (int w = 0; w < FD_WARPS; w++)
            M = fmaxf(M, wm[w * 16 + r]);
        for (int w = 0; w < FD_WARPS; w++) {
            const float f = wm[w * 16 + r] == -INFINITY ? 0.0f : exp2f(wm[w * 16 + r] - M);
            L += f * wl[w * 16 + r];
            O += f * wo[(size_t)(w * 16 + r) * D + d];
        }
        if (nsplit == 1) {
            out[(size_t)r * D + d] = L > 0.0f ? O / L : 0.0f;
        } else {
            mine[32 + r * D + d] = O;
            if (d == 0) {
                mine[r] = M;
                mine[16 + r] = L;
            }
        }
    }
    if (nsplit == 1)
        return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&count[item], 1) == nsplit - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    /* the last block merges the slices: their maxima and sums into shared
     * memory in one go (the warps' states there are read), each slice's
     * factor, then the outputs in float4 pieces with 8 slices' loads in
     * flight (one thread reading slice after slice is a chain of L2 round
     * trips: 45 us a layer at 33 slices) */
    const float *all = part + (size_t)item * nsplit * PS;
    float *sf = (float *)fd_sm, *sl = sf + FD_MAX_SPLIT * 16, *sL = sl + FD_MAX_SPLIT * 16;
    for (int i = threadIdx.x; i < nsplit * 16; i += blockDim.x) {
        sf[i] = __ldcg(all + (size_t)(i >> 4) * PS + (i & 15));
        sl[i] = __ldcg(all + (size_t)(i >> 4) * PS + 16 + (i & 15));
    }
    __syncthreads();
    if (threadIdx.x < 16) {
        const int r = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        for (int sp = 0; sp < nsplit; sp++)
            M = fmaxf(M, sf[sp * 16 + r]);
        for (int sp = 0; sp < nsplit; sp++) {
            const float m = sf[sp * 16 + r], f = m == -INFINITY ? 0.0f : exp2f(m - M);
            sf[sp * 16 + r] = f;
            L += f * sl[sp * 16 + r];
        }
        sL[r] = L > 0.0f ? 1.0f / L : 0.0f;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < G * D / 4; c += blockDim.x) {
        const int r = c * 4 / D;
        const float4 *o4 = (const float4 *)(all + 32) + c;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int sp = 0;
        for (; sp + 8 <= nsplit; sp += 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = __ldcg(o4 + (size_t)(sp + u) * (PS / 4));
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const float f = sf[(sp + u) * 16 + r];
                acc.x += f * v[u].x;
                acc.y += f * v[u].y;
                acc.z += f * v[u].z;
                acc.w += f * v[u].w;
            }
        }
        for (; sp < nsplit; sp++) {
            const float4 v = __ldcg(o4 + (size_t)sp * (PS / 4));
            const float f = sf[sp * 16 + r];
            acc.x += f * v.x;
            acc.y += f * v.y;
            acc.z += f * v.z;
            acc.w += f * v.w;
        }
        const float inv = sL[r];
        *(float4 *)(out + (size_t)c * 4) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
    if (threadIdx.x == 0)
        count[item] = 0; /* ready for the next step (and a graph's replay) */
}

/* The scratch of the decode kernel: partials and counters for 4 blocks an SM */
static size_t fd_scratch_bytes(int n_sm, int *n_part)
{
    *n_part = 4 * n_sm;
    return (size_t)*n_part * FD_PART(128) * sizeof(float) + (size_t)*n_part * sizeof(int);
}

/* keys a slice, whole rounds of the block's warps' tiles */
static int64_t fd_chunk(int64_t keys, int ns)
{
    const int r = FD_WARPS * FD_BK;
    return ((keys + ns - 1) / ns + r - 1) / r * r;
}

int flash_decode_splits(const struct omni_battn *a, int n_sm, int min_keys, int wide_min)
{
    if ((min_keys <= 0 && wide_min <= 0) || a->n_tok < 1 || a->n_head_kv < 1 ||
        a->n_head % a->n_head_kv || a->n_head / a->n_head_kv > 16 ||
        (a->head_dim != 64 && a->head_dim != 128) ||
        (a->kv_type != GGML_TYPE_F16 && a->kv_type != GGML_TYPE_F32))
        return 0;
    const int64_t keys = (int64_t)a->max_blocks * a->block_size; /* a sequence's most */
    const int items = a->n_tok * a->n_head_kv;
    const int unsplit = wide_min > 0 && a->n_tok >= wide_min ? 1 : 0;
    if (min_keys <= 0 || keys < min_keys || items >= 2 * n_sm)
        return unsplit;
    int ns = (2 * n_sm + items - 1) / items;
    ns = ns < FD_MAX_SPLIT ? ns : FD_MAX_SPLIT;
    while (ns > 1 && (int64_t)items * ns > 4 * n_sm)
        ns--;
    const int64_t chunk = fd_chunk(keys, ns);
    ns = (int)((keys + chunk - 1) / chunk);
    return ns >= 2 ? ns : unsplit;
}

/* Lets kernel k take smem bytes of dynamic shared memory (past the
 * default 48 KiB), once: *done keeps that it did (the same value from any
 * thread, so a race is harmless). */
static bool smem_allowed(const void *k, size_t smem, bool *done)
{
    if (!*done) {
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
            return false;
        *done = true;
    }
    return true;
}

template <typename KT, int D>
static bool fd_launch(const struct omni_battn *a, int ns, int pdl, float *part, int *count, cudaStream_t s)
{
    constexpr size_t tiles = (size_t)FD_WARPS * 2 * FD_BK * (D + 8) * sizeof(__half);
    constexpr size_t merge = (size_t)(FD_WARPS * 32 + FD_WARPS * 16 * D) * sizeof(float);
    constexpr size_t smem = tiles > merge ? tiles : merge;
    static_assert(smem >= (2 * FD_MAX_SPLIT * 16 + 16) * sizeof(float), "the slices' merge fits");
    static bool attr;
    if (!smem_allowed((const void *)k_flash_decode<KT, D>, smem, &attr))
        return false;
    const int chunk = (int)fd_chunk((int64_t)a->max_blocks * a->block_size, ns);
    return launch_kernel(k_flash_decode<KT, D>, dim3((unsigned)(a->n_tok * a->n_head_kv), (unsigned)ns),
                         dim3(FD_WARPS * 32), smem, s, pdl != 0, *a, chunk, part, count, pdl > 1) == cudaSuccess;
}

/* fd_launch for a's pool type and head_dim */
static bool fd_dispatch(const struct omni_battn *a, int ns, int pdl, float *part, int *count, cudaStream_t s)
{
    const bool f16 = a->kv_type == GGML_TYPE_F16;
    if (a->head_dim == 64)
        return f16 ? fd_launch<__half, 64>(a, ns, pdl, part, count, s) : fd_launch<float, 64>(a, ns, pdl, part, count, s);
    return f16 ? fd_launch<__half, 128>(a, ns, pdl, part, count, s) : fd_launch<float, 128>(a, ns, pdl, part, count, s);
}

bool flash_decode_launch(const struct omni_battn *a, int ns, int n_sm, bool capturing, int pdl,
                         void **scratch, cudaStream_t s)
{
    if (ns == 1) /* unsplit: no partials, no counters */
        return fd_dispatch(a, 1, pdl, NULL, NULL, s);
    int n_part;
    const size_t bytes = fd_scratch_bytes(n_sm, &n_part);
    if (!*scratch) {
        if (capturing || cudaMalloc(scratch, bytes) != cudaSuccess) {
            *scratch = NULL;
            return false;
        }
        if (cudaMemset(*scratch, 0, bytes) != cudaSuccess) {
            cudaFree(*scratch);
            *scratch = NULL;
            return false;
        }
    }
    if ((int64_t)a->n_tok * a->n_head_kv * ns > n_part)
        return false;
    float *part = (float *)*scratch;
    return fd_dispatch(a, ns, pdl, part, (int *)(part + (size_t)n_part * FD_PART(128)), s);
}

template <typename KT, int D> static bool fa_launch(const struct omni_battn *a, cudaStream_t s)
{
    constexpr size_t smem = (size_t)2 * 2 * FA_BK * (D + 8) * sizeof(__half) + 3 * FA_BQ * sizeof(int);
    static bool attr;
    if (!smem_allowed((const void *)k_flash_attn<KT, D>, smem, &attr))
        return false;
    const dim3 grid((unsigned)((a->n_tok + FA_BQ - 1) / FA_BQ), (unsigned)a->n_head);
    k_flash_attn<KT, D><<<grid, FA_WARPS * 32, smem, s>>>(*a);
    return true;
}

bool flash_attn_launch(const struct omni_battn *a, cudaStream_t s)
{
    if (a->n_tok < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->n_head > 65535)
        return false;
    const bool f16 = a->kv_type == GGML_TYPE_F16;
    if (!f16 && a->kv_type != GGML_TYPE_F32)
        return false;
    switch (a->head_dim) {
    case 64: return f16 ? fa_launch<__half, 64>(a, s) : fa_launch<float, 64>(a, s);
    case 128: return f16 ? fa_launch<__half, 128>(a, s) : fa_launch<float, 128>(a, s);
    default: return false;
    }
}
