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
 * prompt at a time. */
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "src/core/cuda/flash_attn.h"

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

/* One tile's key and value rows k0 .. k0 + FA_BK - 1 of a sequence (rows
 * outside kmin .. kmax become zeros: a pool slot that was never written may
 * hold anything, and a masked key's probability 0 times a NaN value would
 * still be NaN) into Ks / Vs, rows RS halves apart. */
template <typename KT, int D>
__device__ __forceinline__ void fa_load_tile(const struct omni_battn &a, const int32_t *table,
                                             int kvh, int k0, int kmin, int kmax, __half *Ks,
                                             __half *Vs)
{
    constexpr int RS = D + 8, CPR = D / 8;
    const int64_t kv_dim = (int64_t)a.n_head_kv * D;
    const KT *K = (const KT *)a.k, *V = (const KT *)a.v;
    for (int c = threadIdx.x; c < FA_BK * CPR; c += FA_WARPS * 32) {
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

template <typename KT, int D>
__global__ void __launch_bounds__(FA_WARPS * 32, 2) k_flash_attn(struct omni_battn a)
{
    constexpr int RS = D + 8, KS = D / 16, NT = FA_BK / 8, DT = D / 8;
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

    /* this lane's two rows (g and g + 8 of the warp's 16) as A fragments,
     * scaled by scale * log2(e) so that the softmax can use exp2 */
    const int rlo = wid * 16 + g, rhi = rlo + 8;
    const float qs = a.scale * 1.4426950408889634f;
    const size_t qrow = (size_t)a.n_head * D;
    uint32_t qf[KS][4];
    {
        const float *qlo = a.q + (size_t)(t0 + rlo) * qrow + (size_t)h * D;
        const float *qhi = a.q + (size_t)(t0 + rhi) * qrow + (size_t)h * D;
        const bool lo_ok = rlo < nrows, hi_ok = rhi < nrows;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int c = ks * 16 + 2 * t4;
            const float2 z = make_float2(0.0f, 0.0f);
            const float2 a0 = lo_ok ? *(const float2 *)(qlo + c) : z;
            const float2 a1 = hi_ok ? *(const float2 *)(qhi + c) : z;
            const float2 a2 = lo_ok ? *(const float2 *)(qlo + c + 8) : z;
            const float2 a3 = hi_ok ? *(const float2 *)(qhi + c + 8) : z;
            qf[ks][0] = pack_h2(a0.x * qs, a0.y * qs);
            qf[ks][1] = pack_h2(a1.x * qs, a1.y * qs);
            qf[ks][2] = pack_h2(a2.x * qs, a2.y * qs);
            qf[ks][3] = pack_h2(a3.x * qs, a3.y * qs);
        }
    }
    __syncthreads();

    const int pos_lo = mpos[rlo], pos_hi = mpos[rhi];
    const int first_lo = mfirst[rlo], first_hi = mfirst[rhi];
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

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
        const bool in_lo = rlo >= r0 && rlo < r1, in_hi = rhi >= r0 && rhi < r1;
        /* the keys this warp's rows of the run see (a warp above the
         * diagonal skips the tile's products) */
        int wmin = INT_MAX, wmax = -1;
        if (in_lo) {
            wmin = first_lo;
            wmax = pos_lo;
        }
        if (in_hi) {
            wmin = min(wmin, first_hi);
            wmax = max(wmax, pos_hi);
        }
#pragma unroll
        for (int sh = 16; sh > 0; sh >>= 1) {
            wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, sh));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, sh));
        }
        const int32_t *table = a.tables + (size_t)sq * a.max_blocks;
        const int kbeg = kmin / FA_BK * FA_BK, ntile = (kmax - kbeg) / FA_BK + 1;
        fa_load_tile<KT, D>(a, table, kvh, kbeg, kmin, kmax, Ks, Vs);
        for (int it = 0; it < ntile; it++) {
            const int buf = it & 1, k0 = kbeg + it * FA_BK;
            if (it + 1 < ntile) {
                fa_load_tile<KT, D>(a, table, kvh, k0 + FA_BK, kmin, kmax, Ks + (buf ^ 1) * FA_BK * RS,
                                    Vs + (buf ^ 1) * FA_BK * RS);
                asm volatile("cp.async.wait_group 1;" ::: "memory");
            } else {
                asm volatile("cp.async.wait_group 0;" ::: "memory");
            }
            __syncthreads();
            if (wmax >= k0 && wmin < k0 + FA_BK) {
                const __half *Kb = Ks + buf * FA_BK * RS, *Vb = Vs + buf * FA_BK * RS;
                const int mi = lane >> 3, mr = lane & 7;
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
                /* mask, then the online softmax of the two rows */
                float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
                for (int n = 0; n < NT; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = k0 + n * 8 + 2 * t4 + (e & 1);
                        const bool ok = e < 2 ? in_lo && j >= first_lo && j <= pos_lo
                                              : in_hi && j >= first_hi && j <= pos_hi;
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
                const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
                /* a row with no key yet keeps m = -inf: its factors stay 1
                 * and its probabilities 0 */
                const float c_lo = mn_lo == -INFINITY ? 1.0f : exp2f(m_lo - mn_lo);
                const float c_hi = mn_hi == -INFINITY ? 1.0f : exp2f(m_hi - mn_hi);
                const float b_lo = mn_lo == -INFINITY ? 0.0f : mn_lo;
                const float b_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
                m_lo = mn_lo;
                m_hi = mn_hi;
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
                l_lo = l_lo * c_lo + sum_lo;
                l_hi = l_hi * c_hi + sum_hi;
#pragma unroll
                for (int i = 0; i < DT; i++) {
                    o[i][0] *= c_lo;
                    o[i][1] *= c_lo;
                    o[i][2] *= c_hi;
                    o[i][3] *= c_hi;
                }
                /* O += P v: the S fragments of key tiles 2u and 2u + 1 are
                 * P's A fragment for keys 16u .. 16u + 15 */
#pragma unroll
                for (int u = 0; u < NT / 2; u++) {
                    const uint32_t pa[4] = {pack_h2(s[2 * u][0], s[2 * u][1]),
                                            pack_h2(s[2 * u][2], s[2 * u][3]),
                                            pack_h2(s[2 * u + 1][0], s[2 * u + 1][1]),
                                            pack_h2(s[2 * u + 1][2], s[2 * u + 1][3])};
#pragma unroll
                    for (int dn = 0; dn < DT; dn += 2) {
                        uint32_t b[4];
                        ldsm4<true>(b, Vb + (u * 16 + (mi & 1) * 8 + mr) * RS + dn * 8 + (mi >> 1) * 8);
                        mma_f16(o[dn], pa, b[0], b[1]);
                        mma_f16(o[dn + 1], pa, b[2], b[3]);
                    }
                }
            }
            __syncthreads(); /* the next iteration loads into the buffer just read */
        }
        r0 = r1;
    }

#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, sh);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, sh);
    }
    const float i_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, i_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
    float *olo = a.out + (size_t)(t0 + rlo) * qrow + (size_t)h * D + 2 * t4;
    float *ohi = a.out + (size_t)(t0 + rhi) * qrow + (size_t)h * D + 2 * t4;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        if (rlo < nrows)
            *(float2 *)(olo + i * 8) = make_float2(o[i][0] * i_lo, o[i][1] * i_lo);
        if (rhi < nrows)
            *(float2 *)(ohi + i * 8) = make_float2(o[i][2] * i_hi, o[i][3] * i_hi);
    }
}

template <typename KT, int D> static bool fa_launch(const struct omni_battn *a, cudaStream_t s)
{
    constexpr size_t smem = (size_t)2 * 2 * FA_BK * (D + 8) * sizeof(__half) + 3 * FA_BQ * sizeof(int);
    static bool attr; /* the same value from any thread: a race is harmless */
    if (!attr) {
        if (cudaFuncSetAttribute(k_flash_attn<KT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) != cudaSuccess)
            return false;
        attr = true;
    }
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
