/* backend_cuda.cu - the "cuda" compute backend (src/core/backend.h), built
 * by `make CUDA=1`. Weights stay in their GGUF block layout in device
 * memory. Products of up to 8 activation rows (decode) run a matvec kernel:
 * one warp per weight row, each lane dequantizing 32-value chunks of the row
 * into registers and dotting them with every activation row (F32), so the
 * weights are read once per step. Longer batches (prompts) dequantize the
 * matrix to F16 in a scratch buffer and multiply on tensor cores through
 * cuBLAS (F32 weights: cublasSgemm, no TF32). Attention is one warp per
 * (token, query head) walking the sequence's block table 32 keys at a time
 * with an online softmax. All work is queued on one stream.
 *
 * One activation row on a prepared Q4_K / Q6_K / Q8_0 matrix (decode at
 * batch 1) takes the "mv2" kernels instead (see their section): 16-byte
 * pieces of quant bytes, Q6_K / Q8_0 from a copy repacked at prepare, and
 * programmatic dependent launch so that a product's first weight loads
 * overlap the kernel before it (docs/gpu.md "Decode at batch 1").
 *
 * prepare (llm/model_dev.c calls it for every matrix at load) keeps an F16
 * copy of a quantized matrix for the GEMM path, so that batched decode
 * steps of 32+ rows read 2 bytes a weight once, with no dequantization per
 * step (and can be captured in a graph); without the memory for it, the
 * per-call dequantization stays. OMNI_CUDA_NO_F16_CACHE at build time, or
 * OMNI_CUDA_F16_CACHE=0 at run time, turns it off. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/cuda/byte_ops.h"
#include "src/core/cuda/flash_attn.h"
#include "src/core/cuda/gemm_lt.h"
#include "src/core/cuda/launch.h"
#include "src/core/cuda/mmq.h"

extern "C" {
#include "src/core/backend.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
}

// ---- state -------------------------------------------------------------------

/* prepare's copies of a quantized matrix, found by its data pointer and
 * shape: an F16 copy (h, for the GEMM path; NULL without one) and, for the
 * one-row matvec (mv2), a repacked copy (rp: Q5_K, Q6_K, Q8_0) or the
 * GGUF layout itself (Q4_K: mv2 set, rp NULL). base: the allocation h
 * lies in (h itself, or the first copy of a prepare_group's one
 * allocation). */
struct f16_copy {
    const void *w;
    __half *h, *base;
    void *rp;
    int64_t rows, cols;
    int type;
    bool mv2;
};

/* A one-row RMSNorm y = x / rms(x) * w whose 1 / rms is left to the
 * products of y (norm fusion, see its section): the Q8_0 blocks they read
 * are those of x * w, ss holds x's sum of squares a 32-value group, and
 * their blocks write y between them. ss NULL: a plain norm's blocks. */
struct nscale {
    const float *ss;
    const float *x, *w;
    float *y;
    int dim;
    float eps;
};

struct cuda_state {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    __half *wh;        /* dequantized weights of the GEMM path */
    size_t wh_cap;     /* elements */
    __half *xh;        /* activations as F16 for the GEMM path */
    size_t xh_cap;
    /* xh holds x (nh_n rows of nh_cols) while nh_valid: q/k/v and gate/up
     * of a batched step convert their input once; dropped as nq_valid is
     * (OMNI_CUDA_F16_REUSE=0: every GEMM converts; H100 job f_c1: reuse
     * took bench-engine at 64 sequences from 12,805 to 15,361 tok/s) */
    bool nh_on, nh_valid;
    bool nh_bf;        /* while nh_valid: xh holds x as BF16 (bf16_input), not F16 */
    /* OMNI_CUDA_GEMM_CAT (bits, default 3): a batched step's products over
     * a prepare_group's matrices as one GEMM: 1 gate and up, 2 q, k and v */
    int gemm_cat;
    float *gc;         /* that GEMM's output (gc_cap floats: 64 rows of the
                        * largest group), made at prepare, never moved after */
    size_t gc_cap;
    int splitk;        /* OMNI_CUDA_SPLITK=S: batched GEMMs of up to 64 rows as S K-slices
                        * (-1, =auto: S per shape, see splitk_for) */
    int n_sm;          /* the device's SMs */
    /* OMNI_CUDA_LT=N (default 64; 0 off): F16 GEMMs of 2..N activation rows
     * through cuBLASLt with the algorithm timed per shape at prepare
     * (gemm_lt.h) */
    struct gemm_lt *lt;
    int lt_max;
    float *sk;         /* their partial products (S x n x rows floats), never moved */
    size_t sk_cap;     /* floats */
    const float *nh_x;
    int nh_n, nh_cols;
    void *xq;          /* activations as Q8_0: int8 values, then a float scale per 32 */
    size_t xq_cap;     /* bytes */
    bool capturing;    /* a graph capture is open: no allocation, no sync */
    bool f32_act;      /* OMNI_CUDA_ACT=f32: quantized matvecs on F32 activations */
    /* prepare's F16 copies of quantized matrices, by their data pointer */
    struct f16_copy *f16;
    int n_f16, cap_f16;
    bool f16_off;      /* OMNI_CUDA_F16_CACHE=0 */
    bool mv2_off;      /* OMNI_CUDA_MV2=0: one-row products on k_matvec_q8 as before */
    /* xq holds x (n rows of cols) as Q8_0 while nq_valid: a norm that
     * quantized its output on the way, or the last int8 product, so that
     * the products right after reuse it; any op that may write device
     * memory drops it (touch) */
    bool nq_valid;
    struct nscale nq_ns; /* while nq_valid: xq's blocks lack this norm's 1 / rms (ss set) */
    const float *nq_x;
    int nq_n, nq_cols;
    int8_t *nq_buf;    /* where: xq, or xq2 (the fused gate/up's output: its
                        * input is in xq) */
    void *xq2;         /* allocated once, never moved (graphs use it) */
    size_t xq2_cap;
    bool att_split_off; /* OMNI_CUDA_ATT_SPLIT=0: decode attention one warp per head */
    bool fa_off;        /* OMNI_CUDA_FA=0: prompt attention one warp per (token, head) */
    /* decode steps whose block tables hold fd_min+ keys take flash_attn.cu's
     * flash decoding (OMNI_CUDA_FD=N, 0 off); fd_scratch: its partials */
    int fd_min;
    int fd_wide; /* OMNI_CUDA_FDW=N: decode steps of N+ tokens take it unsplit (0 off) */
    bool fd_pf;  /* its key / value rows sent to L2 before its wait (OMNI_CUDA_FD_PF=0: not;
                  * H100 job f_w2: +2.1% at 64 sequences) */
    void *fd_scratch;
    int int8_rows;      /* quantized products of up to this many rows take the int8
                         * matvec (OMNI_CUDA_INT8_ROWS, default Q8_ACT_MAX - 1);
                         * more: the F16 GEMM */
    /* the same for Q4_K / Q5_K / Q6_K (OMNI_CUDA_INT8_ROWS_K, default 8, at
     * most int8_rows): their int8 dots do not match the CPU's anyway (32-value
     * activation blocks against Q8_K's 256), and F16 activations lose
     * less than int8 ones. H100 job f_d2, bench-engine 1B Q4_K_M at 16
     * sequences with the grouped GEMMs: 5,695 -> 7,718 tok/s. */
    int int8_rows_k;
    /* k_argmax_sliced's candidates and per-row counters (zero between
     * launches), made at creation; NULL: k_argmax alone */
    float *am_pv;
    int *am_pi;
    unsigned *am_count;
    /* Norm fusion (OMNI_CUDA_NORM_FUSE, default on; see its section): a
     * one-row o / down product is held back (tp) until the next op shows
     * whether it is the residual add + RMSNorm of its output, which it then
     * takes in; every other op launches it first (tail_flush). nf_ss: the
     * sums of squares of its 32-value groups, nf_q their Q8_0 blocks of x *
     * w (NF_GROUPS groups; tp NULL: no fusion). pn_on: the fused norm's y
     * is not written yet (pn says where from; norm_flush writes it). */
    struct tail_pend *tp;
    float *nf_ss;
    int8_t *nf_q;
    bool pn_on;
    struct nscale pn;
    /* a one-token step's rope_kv held back for the attention after it
     * (OMNI_CUDA_ATT_ROPE, att_rope_takes; rope_flush launches it) */
    bool rk_on;
    struct omni_brope_kv rk;
    long n_capture, n_capture_ok, n_replay; /* graphs (OMNI_CUDA_STATS=1 prints them) */
    /* Q4_K / Q6_K products of int8_rows_k + 1 .. mmq_max rows on the int8
     * tensor-core kernels of mmq.cu (OMNI_CUDA_MMQ=N, at most 64; default
     * 32; 0: the F16 GEMM as before), K split over mmq_ks warps
     * (OMNI_CUDA_MMQ_KS, 0: per shape). H100 job f_g2, bench-engine 1B
     * Q4_K_M at 16 / 64 sequences: 9,477 / 17,634 tok/s with 32, 7,743 /
     * 15,647 with 0, 9,503 / 14,863 with 64 (at 64 rows the kernels are
     * slower than cuBLAS on the F16 copy: 36 us for 8192 x 2048 against
     * 22). xm holds their quantized activations, standing for
     * nm_x (nm_n rows of nm_cols) while nm_valid (dropped as nq_valid is). */
    int mmq_max, mmq_ks;
    void *xm;
    size_t xm_cap;
    bool nm_valid;
    const float *nm_x;
    int nm_n, nm_cols;
};

static struct cuda_state *st(struct omni_backend *be) { return (struct cuda_state *)be->impl; }

static void rope_flush(struct omni_backend *be);
static void tail_flush(struct omni_backend *be);
static void norm_flush(struct omni_backend *be);
static void norm_flush(struct cuda_state *s);
static bool pn_hits(const struct cuda_state *s, const float *p, int64_t n);
static bool tail_try_norm(struct omni_backend *be, float *x, const float *dx, float *y,
                          const float *w, int rows, int dim, float eps);

/* What may read or write device memory waits for nothing held back: the
 * held-back product is launched, a fused norm's y written. */
static void flush_pending(struct omni_backend *be)
{
    rope_flush(be);
    tail_flush(be);
    norm_flush(be);
}

/* An op that may write device memory: xq no longer stands for its x (and
 * what is held back goes first). */
static void touch(struct omni_backend *be)
{
    flush_pending(be);
    st(be)->nq_valid = false;
    st(be)->nh_valid = false;
    st(be)->nm_valid = false;
}

/* OMNI_CUDA_SKIP (bits; for measuring only: the results are wrong): ops
 * that return at once, so that a graph-mode step shows what the others
 * cost with the programmatic-launch overlap that per-op timing cannot
 * show (docs/gpu.md "Where a 7B step goes"). 1 attention, 2 rmsnorm /
 * add_rmsnorm / add, 4 rope / rope_kv / kv_store, 8 the products. The
 * buffers keep their last values. */
static int skip_ops;
#define SKIP_ATT 1
#define SKIP_NORM 2
#define SKIP_ROPE 4
#define SKIP_MM 8

static bool skipped(struct omni_backend *be, int bit)
{
    if (!(skip_ops & bit))
        return false;
    touch(be);
    return true;
}

/* For src/core/cuda/whisper_ops.cu: the stream of be's ops (which write
 * device memory: touched), and the call that adds Whisper's ops
 * (layernorm, gelu, im2col_k3, attention_dense). */
extern "C" cudaStream_t omni_cuda_stream(struct omni_backend *be) { touch(be); return st(be)->stream; }
extern "C" void omni_cuda_whisper_ops(struct omni_backend *be);
/* For src/core/cuda/optimer.cu (OMNI_CUDA_TIMERS=1): the stream without
 * touching (its events write nothing), and the call that wraps the ops. */
extern "C" cudaStream_t omni_cuda_stream_raw(struct omni_backend *be) { return st(be)->stream; }
extern "C" void omni_cuda_optimer_install(struct omni_backend *be);

/* Launch / API errors: one line on stderr naming the op, OMNI_ERR_IO back. */
static int chk(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "backend: cuda: %s: %s\n", what, cudaGetErrorString(e));
    return OMNI_ERR_IO;
}

static int chk_launch(const char *what) { return chk(cudaGetLastError(), what); }

static int chk_blas(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    fprintf(stderr, "backend: cuda: %s: cuBLAS status %d\n", what, (int)s);
    return OMNI_ERR_IO;
}

// ---- device helpers ------------------------------------------------------------

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/* Blocks of Q4_0 / Q8_0 / Q6_K are only 2-byte aligned: 16-bit loads. */
__device__ __forceinline__ uint32_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* A Q8_0 block's scale for its largest magnitude amax (quant.h's rule),
 * and in *id the factor that quantizes (0 for an all-zero block). */
__device__ __forceinline__ float q8_scale(float amax, float *id)
{
    const float dd = amax / 127.0f;
    *id = dd != 0.0f ? 1.0f / dd : 0.0f;
    return dd;
}

/* y = v, and with Q its Q8_0 form as k_quant_q8_0 makes it (row r of
 * [rows][dim] int8 q, scales qd [rows][dim / 32]); the 32 lanes of the warp
 * hold one 32-value block (dim a multiple of 32, whole warps per row). */
template <bool Q>
__device__ __forceinline__ void norm_out(float *yr, int i, float v, int8_t *q, float *qd)
{
    yr[i] = v;
    if (Q) {
        const float amax = warp_max(fabsf(v));
        float id;
        const float dd = q8_scale(amax, &id);
        q[i] = (int8_t)roundf(v * id);
        if ((i & 31) == 0)
            qd[i >> 5] = __half2float(__float2half_rn(dd));
    }
}

/* Values 32c .. 32c+31 of a quantized row into w (the layouts of quant.h). */
template <int T> __device__ __forceinline__ void dq32(const uint8_t *row, int c, float *w);

template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q4_0>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)c * 18;
    const float d = h2f((uint16_t)ld16(b));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t u = ld16(b + 2 + 2 * i);
        const int b0 = u & 0xff, b1 = u >> 8;
        w[2 * i] = d * (float)((b0 & 15) - 8);
        w[2 * i + 1] = d * (float)((b1 & 15) - 8);
        w[2 * i + 16] = d * (float)((b0 >> 4) - 8);
        w[2 * i + 17] = d * (float)((b1 >> 4) - 8);
    }
}

template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q8_0>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)c * 34;
    const float d = h2f((uint16_t)ld16(b));
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const uint32_t u = ld16(b + 2 + 2 * i);
        w[2 * i] = d * (float)(int8_t)(u & 0xff);
        w[2 * i + 1] = d * (float)(int8_t)(u >> 8);
    }
}

/* Sub-block j's scale and min of a Q4_K / Q5_K super-block b (their
 * headers are alike: d, dmin, 12 bytes of 6-bit scales and mins). */
__device__ __forceinline__ void kq_scale_min(const uint8_t *b, int j, float *d1, float *m1)
{
    const float d = h2f((uint16_t)ld16(b)), dmin = h2f((uint16_t)ld16(b + 2));
    const uint8_t *sc = b + 4;
    int s, m;
    if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
    } else {
        s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    *d1 = d * (float)s;
    *m1 = dmin * (float)m;
}

template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q4_K>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)(c >> 3) * 144;
    const int j = c & 7;
    float d1, m1;
    kq_scale_min(b, j, &d1, &m1);
    /* sub-blocks 2g and 2g+1 share qs[32g .. 32g+31]: low, then high nibbles */
    const uint32_t *q = (const uint32_t *)(b + 16 + 32 * (j >> 1));
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t u = q[i] >> shift;
        w[4 * i] = d1 * (float)(u & 15) - m1;
        w[4 * i + 1] = d1 * (float)((u >> 8) & 15) - m1;
        w[4 * i + 2] = d1 * (float)((u >> 16) & 15) - m1;
        w[4 * i + 3] = d1 * (float)((u >> 24) & 15) - m1;
    }
}

template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q6_K>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)(c >> 3) * 210;
    const int s = c & 7, h = s >> 2, qd = s & 3;
    /* group qd of half h: ql[64h + 32(qd&1) + l] (low nibble for qd < 2,
     * else high), 2-bit high part (qh[32h + l] >> 2qd) & 3, scale
     * sc[8h + l/16 + 2qd] */
    const uint8_t *ql = b + 64 * h + 32 * (qd & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * qd;
    const float d = h2f((uint16_t)ld16(b + 208));
    const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
    const int lshift = (qd >> 1) * 4, hshift = 2 * qd;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const uint32_t l2 = ld16(ql + 2 * i), h2 = ld16(qh + 2 * i);
        const int q0 = (int)(((l2 >> lshift) & 15) | (((h2 >> hshift) & 3) << 4)) - 32;
        const int q1 = (int)(((l2 >> (8 + lshift)) & 15) | (((h2 >> (8 + hshift)) & 3) << 4)) - 32;
        const float dd = i < 8 ? d0 : d1;
        w[2 * i] = dd * (float)q0;
        w[2 * i + 1] = dd * (float)q1;
    }
}

/* Q5_0 and Q5_1 keep the 5th bit of value j at bit j of a 32-bit qh;
 * spread4 puts bits 0-3 of b at bit 4 of bytes 0-3 (for values 4i .. 4i+3,
 * whose low nibbles are the 4 bytes of one word of qs). */
__device__ __forceinline__ uint32_t spread4(uint32_t b)
{
    return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

/* Blocks of Q4_1 (20 bytes) and Q5_1 (24) are 4-byte aligned: word loads. */
__device__ __forceinline__ uint32_t ld32(const uint8_t *p) { return *(const uint32_t *)p; }

template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q4_1>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)c * 20;
    const uint32_t dm = ld32(b);
    const float d = h2f((uint16_t)(dm & 0xffff)), m = h2f((uint16_t)(dm >> 16));
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld32(b + 4 + 4 * i);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[4 * i + k] = d * (float)((u >> (8 * k)) & 15) + m;
            w[4 * i + k + 16] = d * (float)((u >> (8 * k + 4)) & 15) + m;
        }
    }
}

/* Q5_0: d | qh[4] | qs[16], value j = d * ((nibble | bit j of qh << 4) - 16)
 * (low nibbles values 0-15, high 16-31); 22-byte blocks: 16-bit loads. */
template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q5_0>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)c * 22;
    const float d = h2f((uint16_t)ld16(b));
    const uint32_t qh = ld16(b + 2) | (ld16(b + 4) << 16);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t u = ld16(b + 6 + 2 * i);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int j = 2 * i + k, q = (int)((u >> (8 * k)) & 0xff);
            const int h0 = (int)((qh >> j) & 1), h1 = (int)((qh >> (j + 16)) & 1); /* signed: q - 16 < 0 */
            w[j] = d * (float)(((q & 15) | (h0 << 4)) - 16);
            w[j + 16] = d * (float)(((q >> 4) | (h1 << 4)) - 16);
        }
    }
}

/* Q5_1: d | m | qh[4] | qs[16], value = d * q + m with q as Q5_0's */
template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q5_1>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)c * 24;
    const uint32_t dm = ld32(b), qh = ld32(b + 4);
    const float d = h2f((uint16_t)(dm & 0xffff)), m = h2f((uint16_t)(dm >> 16));
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld32(b + 8 + 4 * i);
        const uint32_t lo = (u & 0x0f0f0f0fu) | spread4(qh >> (4 * i));
        const uint32_t hi = ((u >> 4) & 0x0f0f0f0fu) | spread4(qh >> (16 + 4 * i));
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[4 * i + k] = d * (float)((lo >> (8 * k)) & 31) + m;
            w[4 * i + k + 16] = d * (float)((hi >> (8 * k)) & 31) + m;
        }
    }
}

/* Q5_K: Q4_K's header (d, dmin, 12 bytes of scales and mins), then qh[32]
 * and qs[128]: value l of sub-block j has its 5th bit at bit j of qh[l]. */
template <> __device__ __forceinline__ void dq32<GGML_TYPE_Q5_K>(const uint8_t *row, int c, float *w)
{
    const uint8_t *b = row + (size_t)(c >> 3) * 176;
    const int j = c & 7;
    float d1, m1;
    kq_scale_min(b, j, &d1, &m1);
    const uint32_t *q = (const uint32_t *)(b + 48 + 32 * (j >> 1));
    const uint32_t *qh = (const uint32_t *)(b + 16);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t u = ((q[i] >> shift) & 0x0f0f0f0fu) | (((qh[i] >> j) & 0x01010101u) << 4);
        w[4 * i] = d1 * (float)(u & 31) - m1;
        w[4 * i + 1] = d1 * (float)((u >> 8) & 31) - m1;
        w[4 * i + 2] = d1 * (float)((u >> 16) & 31) - m1;
        w[4 * i + 3] = d1 * (float)((u >> 24) & 31) - m1;
    }
}

// ---- matmul ---------------------------------------------------------------------

#define MV_WARPS 4 /* rows (warps) per block of the matvec kernels */

/* y[t][r] = sum_c W[r][c] x[t][c], t < N: one warp per row, each lane 32-value
 * chunks lane, lane + 32, ...; the N dots share each dequantized chunk. */
template <int T, int N>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_q(const uint8_t *__restrict__ W, size_t row_bytes, int rows, int cols,
               const float *__restrict__ x, float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const uint8_t *row = W + (size_t)r * row_bytes;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++)
        acc[t] = 0.0f;
    for (int c = lane; c < (cols >> 5); c += 32) {
        float w[32];
        dq32<T>(row, c, w);
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float4 *xp = (const float4 *)(x + (size_t)t * cols + 32 * c);
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 v = __ldg(xp + i);
                s += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
            }
            acc[t] += s;
        }
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(size_t)t * rows + r] = s;
    }
}

__device__ __forceinline__ float ldw(const float *p, size_t i) { return __ldg(p + i); }
__device__ __forceinline__ float ldw(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ldw(const __nv_bfloat16 *p, size_t i)
{
    return __bfloat162float(p[i]);
}

/* F32 / F16 / BF16 rows of any length: lanes stride over the elements. */
template <typename WT, int N>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_f(const WT *__restrict__ W, int rows, int cols, const float *__restrict__ x,
               float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++)
        acc[t] = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        const float w = ldw(W, (size_t)r * cols + c);
#pragma unroll
        for (int t = 0; t < N; t++)
            acc[t] += w * __ldg(x + (size_t)t * cols + c);
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(size_t)t * rows + r] = s;
    }
}

/* The whole matrix as F16 (GEMM path): one thread per 32-value chunk. */
template <int T>
__global__ void k_dequant_f16(const uint8_t *__restrict__ W, size_t row_bytes, int rows, int cols,
                              __half *__restrict__ out)
{
    const int64_t chunks = (int64_t)rows * (cols >> 5);
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks)
        return;
    const int r = (int)(i / (cols >> 5)), c = (int)(i % (cols >> 5));
    float w[32];
    dq32<T>(W + (size_t)r * row_bytes, c, w);
    __half2 *o = (__half2 *)(out + (size_t)r * cols + 32 * c);
#pragma unroll
    for (int k = 0; k < 16; k++)
        o[k] = __floats2half2_rn(w[2 * k], w[2 * k + 1]);
}

/* y = the sum of the S partial products of a split-K GEMM (slice order) */
__global__ void k_sum_slices(const float *__restrict__ part, int S, int64_t n, float *__restrict__ y)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = part[i];
        for (int k = 1; k < S; k++)
            v += part[(int64_t)k * n + i];
        y[i] = v;
    }
}

__global__ void k_f32_to_f16(const float *__restrict__ x, __half *__restrict__ y, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2half_rn(x[i]);
}

__global__ void k_f32_to_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2bfloat16_rn(x[i]);
}

static unsigned blocks_for(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* Activation rows as Q8_0 the way quant.c's quantize_row_q8_0_ref makes
 * them (d = amax / 127 kept as F16, q = round(x / d) with the unrounded d):
 * one warp per 32 values. With Q8_0 / Q4_0 weights the CPU multiplies these,
 * so the device does too (same integers, same scales). */
__global__ void k_quant_q8_0(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ q,
                             float *__restrict__ d)
{
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= n_blocks)
        return;
    const float v = x[b * 32 + lane];
    const float amax = warp_max(fabsf(v));
    float id;
    const float dd = q8_scale(amax, &id);
    q[b * 32 + lane] = (int8_t)roundf(v * id);
    if (lane == 0)
        d[b] = __half2float(__float2half_rn(dd));
}

/* Block c of a Q8_0 / Q4_0 weight row as 8 words of 4 signed bytes (values
 * 4i .. 4i+3 in word i); returns the block scale. */
template <int T> __device__ __forceinline__ float q8w(const uint8_t *row, int c, int *wq);

template <> __device__ __forceinline__ float q8w<GGML_TYPE_Q8_0>(const uint8_t *row, int c, int *wq)
{
    const uint8_t *b = row + (size_t)c * 34;
#pragma unroll
    for (int i = 0; i < 8; i++)
        wq[i] = (int)(ld16(b + 2 + 4 * i) | (ld16(b + 4 + 4 * i) << 16));
    return h2f((uint16_t)ld16(b));
}

template <> __device__ __forceinline__ float q8w<GGML_TYPE_Q4_0>(const uint8_t *row, int c, int *wq)
{
    const uint8_t *b = row + (size_t)c * 18;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld16(b + 2 + 4 * i) | (ld16(b + 4 + 4 * i) << 16);
        wq[i] = bytes_minus(u & 0x0f0f0f0fu, 0x08080808u);            /* values 4i .. */
        wq[4 + i] = bytes_minus((u >> 4) & 0x0f0f0f0fu, 0x08080808u); /* values 16 + 4i .. */
    }
    return h2f((uint16_t)ld16(b));
}

template <> __device__ __forceinline__ float q8w<GGML_TYPE_Q5_0>(const uint8_t *row, int c, int *wq)
{
    const uint8_t *b = row + (size_t)c * 22;
    const uint32_t qh = ld16(b + 2) | (ld16(b + 4) << 16);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld16(b + 6 + 4 * i) | (ld16(b + 8 + 4 * i) << 16);
        wq[i] = bytes_minus((u & 0x0f0f0f0fu) | spread4(qh >> (4 * i)), 0x10101010u);
        wq[4 + i] = bytes_minus(((u >> 4) & 0x0f0f0f0fu) | spread4(qh >> (16 + 4 * i)),
                                0x10101010u);
    }
    return h2f((uint16_t)ld16(b));
}

/* Block c of a Q4_1 / Q5_1 row as 8 words of 4 unsigned bytes (0..15 /
 * 0..31) with its scale a and offset b: value = a * q + b. */
template <int T> __device__ __forceinline__ void q1w(const uint8_t *row, int c, int *wq, float *a,
                                                     float *b);

template <> __device__ __forceinline__ void q1w<GGML_TYPE_Q4_1>(const uint8_t *row, int c, int *wq,
                                                                float *a, float *b)
{
    const uint8_t *blk = row + (size_t)c * 20;
    const uint32_t dm = ld32(blk);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld32(blk + 4 + 4 * i);
        wq[i] = (int)(u & 0x0f0f0f0fu);
        wq[4 + i] = (int)((u >> 4) & 0x0f0f0f0fu);
    }
    *a = h2f((uint16_t)(dm & 0xffff));
    *b = h2f((uint16_t)(dm >> 16));
}

template <> __device__ __forceinline__ void q1w<GGML_TYPE_Q5_1>(const uint8_t *row, int c, int *wq,
                                                                float *a, float *b)
{
    const uint8_t *blk = row + (size_t)c * 24;
    const uint32_t dm = ld32(blk), qh = ld32(blk + 4);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t u = ld32(blk + 8 + 4 * i);
        wq[i] = (int)((u & 0x0f0f0f0fu) | spread4(qh >> (4 * i)));
        wq[4 + i] = (int)(((u >> 4) & 0x0f0f0f0fu) | spread4(qh >> (16 + 4 * i)));
    }
    *a = h2f((uint16_t)(dm & 0xffff));
    *b = h2f((uint16_t)(dm >> 16));
}

/* a = d * scale and b = dmin * min of sub-block j from a Q4_K / Q5_K
 * super-block header loaded in one 16-byte load (d, dmin, 12 scale bytes) */
__device__ __forceinline__ void kq_hdr_scale(uint4 hdr, int j, float *a, float *b)
{
    const int sh = 8 * (j & 3);
    const float d = h2f((uint16_t)(hdr.x & 0xffff)), dmin = h2f((uint16_t)(hdr.x >> 16));
    const int by = (hdr.y >> sh) & 0xff, bz = (hdr.z >> sh) & 0xff, bw = (hdr.w >> sh) & 0xff;
    int s, m;
    if (j < 4) { /* scales[j], scales[j + 4] */
        s = by & 63;
        m = bz & 63;
    } else {     /* scales[j + 4] low / high nibble, top bits of scales[j - 4] / scales[j] */
        s = (bw & 0x0f) | ((by >> 6) << 4);
        m = (bw >> 4) | ((bz >> 6) << 4);
    }
    *a = d * (float)s;
    *b = dmin * (float)m;
}

/* K-quant chunks for the same integer dots: 8 words of 4 unsigned (Q4_K,
 * 0..15; Q5_K, 0..31) or signed (Q6_K, q - 32) bytes and the chunk's float
 * parameters: Q4_K / Q5_K value = a * q - b (a = d * scale, b = dmin *
 * min); Q6_K values 0-15 have scale a, 16-31 scale b. */
__device__ __forceinline__ void q4kw(const uint8_t *row, int c, int *wq, float *a, float *b)
{
    /* 16-byte loads: a super-block is 144 bytes and rows start 16-byte
     * aligned (device allocations, rows of whole super-blocks): the header
     * (d, dmin, 12 scale bytes) in one load, the chunk's 32 quant bytes in
     * two */
    const uint8_t *blk = row + (size_t)(c >> 3) * 144;
    const int j = c & 7;
    kq_hdr_scale(__ldg((const uint4 *)blk), j, a, b);
    const uint4 *q = (const uint4 *)(blk + 16 + 32 * (j >> 1));
    const uint4 q0 = __ldg(q), q1 = __ldg(q + 1);
    const int shift = (j & 1) * 4;
    wq[0] = (int)((q0.x >> shift) & 0x0f0f0f0fu);
    wq[1] = (int)((q0.y >> shift) & 0x0f0f0f0fu);
    wq[2] = (int)((q0.z >> shift) & 0x0f0f0f0fu);
    wq[3] = (int)((q0.w >> shift) & 0x0f0f0f0fu);
    wq[4] = (int)((q1.x >> shift) & 0x0f0f0f0fu);
    wq[5] = (int)((q1.y >> shift) & 0x0f0f0f0fu);
    wq[6] = (int)((q1.z >> shift) & 0x0f0f0f0fu);
    wq[7] = (int)((q1.w >> shift) & 0x0f0f0f0fu);
}

/* Q5_K: Q4_K's header and nibbles 32 bytes further on (qh[32] between),
 * the 5th bits (bit j of qh[l] for value l of sub-block j) in two more
 * 16-byte loads; 176-byte super-blocks keep rows 16-byte aligned. */
__device__ __forceinline__ void q5kw(const uint8_t *row, int c, int *wq, float *a, float *b)
{
    const uint8_t *blk = row + (size_t)(c >> 3) * 176;
    const int j = c & 7;
    kq_hdr_scale(__ldg((const uint4 *)blk), j, a, b);
    const uint4 *h = (const uint4 *)(blk + 16), *q = (const uint4 *)(blk + 48 + 32 * (j >> 1));
    const uint4 h0 = __ldg(h), h1 = __ldg(h + 1), q0 = __ldg(q), q1 = __ldg(q + 1);
    const int shift = (j & 1) * 4;
    const uint32_t hw[8] = { h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w };
    const uint32_t qw[8] = { q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w };
#pragma unroll
    for (int i = 0; i < 8; i++)
        wq[i] = (int)(((qw[i] >> shift) & 0x0f0f0f0fu) | (((hw[i] >> j) & 0x01010101u) << 4));
}

__device__ __forceinline__ void q6kw(const uint8_t *row, int c, int *wq, float *a, float *b)
{
    const uint8_t *blk = row + (size_t)(c >> 3) * 210;
    const int s = c & 7, h = s >> 2, qd = s & 3;
    const uint8_t *ql = blk + 64 * h + 32 * (qd & 1), *qh = blk + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * qd;
    const float d = h2f((uint16_t)ld16(blk + 208));
    *a = d * (float)sc[0];
    *b = d * (float)sc[1];
    const int lshift = (qd >> 1) * 4, hshift = 2 * qd;
    /* 210-byte blocks are 2-byte aligned: the 32 bytes of ql and of qh as
     * 9 aligned words each (the 9th stays inside the block), funnel-shifted
     * by 0 or 16 bits (ql and qh share the block's alignment) */
    const uint32_t *lw = (const uint32_t *)((uintptr_t)ql & ~(uintptr_t)3);
    const uint32_t *hw = (const uint32_t *)((uintptr_t)qh & ~(uintptr_t)3);
    const unsigned fs = ((unsigned)(uintptr_t)ql & 2u) * 8u;
    uint32_t L[9], H[9];
#pragma unroll
    for (int i = 0; i < 9; i++) {
        L[i] = __ldg(lw + i);
        H[i] = __ldg(hw + i);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t l4 = __funnelshift_r(L[i], L[i + 1], fs);
        const uint32_t h4 = __funnelshift_r(H[i], H[i + 1], fs);
        const uint32_t q = ((l4 >> lshift) & 0x0f0f0f0fu) | (((h4 >> hshift) & 0x03030303u) << 4);
        wq[i] = bytes_minus(q, 0x20202020u);
    }
}

/* The sum of the 32 signed bytes of a and b (an activation block). */
__device__ __forceinline__ int sum_i8(const int4 a, const int4 b)
{
    int sx = __dp4a(0x01010101, a.x, 0);
    sx = __dp4a(0x01010101, a.y, sx);
    sx = __dp4a(0x01010101, a.z, sx);
    sx = __dp4a(0x01010101, a.w, sx);
    sx = __dp4a(0x01010101, b.x, sx);
    sx = __dp4a(0x01010101, b.y, sx);
    sx = __dp4a(0x01010101, b.z, sx);
    return __dp4a(0x01010101, b.w, sx);
}

/* acc[t] += weight row `row` (type T, nb = cols / 32 chunks) dotted with
 * activation row t < N as Q8_0 (xq int8 [N][cols], xd scales [N][nb]):
 * lanes over chunks lane, lane + 32, ...; per chunk an integer dot (dp4a)
 * times the two scales, summed in the CPU's order within a block; the lanes'
 * partial sums are not yet added. */
template <int T, int N>
__device__ __forceinline__ void dot_q8(const uint8_t *__restrict__ row, int nb, int cols,
                                       const int8_t *__restrict__ xq,
                                       const float *__restrict__ xd, float *acc, int lane,
                                       int stride = 32)
{
#pragma unroll 2
    for (int c = lane; c < nb; c += stride) {
        int wq[8];
        float pa = 0.0f, pb = 0.0f;
        if constexpr (T == GGML_TYPE_Q4_K)
            q4kw(row, c, wq, &pa, &pb);
        else if constexpr (T == GGML_TYPE_Q5_K)
            q5kw(row, c, wq, &pa, &pb);
        else if constexpr (T == GGML_TYPE_Q6_K)
            q6kw(row, c, wq, &pa, &pb);
        else if constexpr (T == GGML_TYPE_Q4_1 || T == GGML_TYPE_Q5_1)
            q1w<T>(row, c, wq, &pa, &pb);
        else
            pa = q8w<T>(row, c, wq);
#pragma unroll
        for (int t = 0; t < N; t++) {
            const int4 *xp = (const int4 *)(xq + (size_t)t * cols + 32 * c);
            const int4 a = __ldg(xp), b = __ldg(xp + 1);
            int lo = __dp4a(wq[0], a.x, 0);
            lo = __dp4a(wq[1], a.y, lo);
            lo = __dp4a(wq[2], a.z, lo);
            lo = __dp4a(wq[3], a.w, lo);
            int hi = __dp4a(wq[4], b.x, 0);
            hi = __dp4a(wq[5], b.y, hi);
            hi = __dp4a(wq[6], b.z, hi);
            hi = __dp4a(wq[7], b.w, hi);
            const float dx = __ldg(xd + (size_t)t * nb + c);
            if constexpr (T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K) {
                /* sum of the activation integers, for the min term */
                const int sx = sum_i8(a, b);
                acc[t] += dx * (pa * (float)(lo + hi) - pb * (float)sx);
            } else if constexpr (T == GGML_TYPE_Q4_1 || T == GGML_TYPE_Q5_1) {
                /* the CPU's Q8_1 activations carry s = sum(q) * d as F16
                 * (d unrounded there, its F16 value here: s can differ in
                 * its last bit) */
                const float sy = __half2float(__float2half_rn((float)sum_i8(a, b) * dx));
                acc[t] += (float)(lo + hi) * (pa * dx) + pb * sy;
            } else if constexpr (T == GGML_TYPE_Q6_K) {
                acc[t] += dx * (pa * (float)lo + pb * (float)hi);
            } else {
                acc[t] += (float)(lo + hi) * (pa * dx); /* the CPU's order */
            }
        }
    }
}

/* dot_q8 with the weight type chosen at run time (the fused launches mix
 * matrices of different types: a Q4_K_M file's attn_v is Q6_K in some
 * layers). X: also Q5_K, Q5_0, Q4_1 and Q5_1 (a kernel of its own, so
 * that the others' registers stay as they were: 8 more at 2 rows). */
template <int N, bool X>
__device__ __forceinline__ void dot_q8_any(int type, const uint8_t *__restrict__ row, int nb,
                                           int cols, const int8_t *__restrict__ xq,
                                           const float *__restrict__ xd, float *acc, int lane)
{
    switch (type) {
    case GGML_TYPE_Q4_K: dot_q8<GGML_TYPE_Q4_K, N>(row, nb, cols, xq, xd, acc, lane); break;
    case GGML_TYPE_Q6_K: dot_q8<GGML_TYPE_Q6_K, N>(row, nb, cols, xq, xd, acc, lane); break;
    case GGML_TYPE_Q8_0: dot_q8<GGML_TYPE_Q8_0, N>(row, nb, cols, xq, xd, acc, lane); break;
    default:
        if constexpr (!X) {
            dot_q8<GGML_TYPE_Q4_0, N>(row, nb, cols, xq, xd, acc, lane);
        } else {
            switch (type) {
            case GGML_TYPE_Q4_0: dot_q8<GGML_TYPE_Q4_0, N>(row, nb, cols, xq, xd, acc, lane); break;
            case GGML_TYPE_Q5_K: dot_q8<GGML_TYPE_Q5_K, N>(row, nb, cols, xq, xd, acc, lane); break;
            case GGML_TYPE_Q5_0: dot_q8<GGML_TYPE_Q5_0, N>(row, nb, cols, xq, xd, acc, lane); break;
            case GGML_TYPE_Q4_1: dot_q8<GGML_TYPE_Q4_1, N>(row, nb, cols, xq, xd, acc, lane); break;
            default: dot_q8<GGML_TYPE_Q5_1, N>(row, nb, cols, xq, xd, acc, lane); break;
            }
        }
        break;
    }
}

/* k_matvec_q over Q8_0 activations (dot_q8): one warp per row. */
template <int T, int N>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_q8(const uint8_t *__restrict__ W, size_t row_bytes, int rows, int cols,
                const int8_t *__restrict__ xq, const float *__restrict__ xd, float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++)
        acc[t] = 0.0f;
    dot_q8<T, N>(W + (size_t)r * row_bytes, cols >> 5, cols, xq, xd, acc, lane);
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(size_t)t * rows + r] = s;
    }
}

/* One activation row, long rows (OMNI_CUDA_MV_SPLIT=1, an experiment): a
 * block of MV_WARPS warps per weight row, the 128 threads striding over its
 * chunks, partial sums added in shared memory (more loads in flight per
 * row; other sums' order than k_matvec_q8). */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_q8_split(const uint8_t *__restrict__ W, size_t row_bytes, int cols,
                      const int8_t *__restrict__ xq, const float *__restrict__ xd,
                      float *__restrict__ y)
{
    __shared__ float part[MV_WARPS];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float acc = 0.0f;
    dot_q8<T, 1>(W + (size_t)blockIdx.x * row_bytes, cols >> 5, cols, xq, xd, &acc, threadIdx.x,
                 MV_WARPS * 32);
    acc = warp_sum(acc);
    if (lane == 0)
        part[wid] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < MV_WARPS; w++)
            s += part[w];
        y[blockIdx.x] = s;
    }
}

/* Up to 3 matrices of equal cols against the same Q8_0 activations in one
 * launch (q, k, v): matrix i takes blocks b0 .. of the grid, one warp per
 * row, its rows into its own y. */
struct mv_seg {
    const uint8_t *W;
    size_t rb;
    float *y;
    int rows, type, b0;
};
struct mv_segs {
    mv_seg s[3];
    int n;
};

template <int N, bool X>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_seg(const mv_segs sg, int cols, const int8_t *__restrict__ xq,
                 const float *__restrict__ xd)
{
    const int lane = threadIdx.x & 31;
    int i = 0;
    while (i + 1 < sg.n && (int)blockIdx.x >= sg.s[i + 1].b0)
        i++;
    const int r = ((int)blockIdx.x - sg.s[i].b0) * MV_WARPS + (threadIdx.x >> 5);
    const int rows = sg.s[i].rows;
    if (r >= rows)
        return;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++)
        acc[t] = 0.0f;
    dot_q8_any<N, X>(sg.s[i].type, sg.s[i].W + (size_t)r * sg.s[i].rb, cols >> 5, cols, xq, xd,
                     acc, lane);
    float *y = sg.s[i].y;
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(size_t)t * rows + r] = s;
    }
}

/* y[t][r] = silu(g) * u with g, u the dots of gate and up row r (both of
 * type T): SwiGLU fused into one launch over both matrices; the same sums
 * and the same expression as k_matvec_q8 then k_swiglu. */
template <int T, int N>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_matvec_glu(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu, size_t rb,
                 int rows, int cols, const int8_t *__restrict__ xq,
                 const float *__restrict__ xd, float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    float g[N], u[N];
#pragma unroll
    for (int t = 0; t < N; t++)
        g[t] = u[t] = 0.0f;
    dot_q8<T, N>(Wg + (size_t)r * rb, cols >> 5, cols, xq, xd, g, lane);
    dot_q8<T, N>(Wu + (size_t)r * rb, cols >> 5, cols, xq, xd, u, lane);
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float gs = warp_sum(g[t]), us = warp_sum(u[t]);
        if (lane == 0)
            y[(size_t)t * rows + r] = us * (gs / (1.0f + expf(-gs)));
    }
}

// ---- one-row matvec over 16-byte pieces (mv2) -------------------------------------
/* Decode at batch 1 reads every weight once per token, so these kernels are
 * about bytes in flight. A "piece" is 32 weights whose quant bytes come in
 * 16-byte loads: Q4_K in its GGUF layout (144-byte super-blocks stay 16-byte
 * aligned; a piece is 16 qs bytes, the low nibbles one 32-value sub-block's
 * 16 values, the high nibbles the next one's), Q5_K, Q6_K and Q8_0 from
 * prepare's repacked copy (Q5_K: Q4_K's pieces with the 5th bits in a word
 * each; Q6_K, Q8_0: quant bytes apart from their scales, so that they are
 * aligned: see k_repack_*). A group of TPR threads (32, 64 or 128) takes a
 * row, thread i pieces i, i + TPR, ...; each thread first issues the loads
 * of U pieces, then does their int8 dots (dp4a) against the Q8_0
 * activations (read through L1, shared by the rows of the block). With
 * programmatic dependent launch (OMNI_CUDA_PDL=1) the first loads of the
 * weights go out before the previous kernel has finished
 * (griddepcontrol.wait comes after them: the weights do not depend on it). */

#define MV2_BLOCK 128 /* threads a block of k_mv2 / k_mv2_seg */
#define MV2_U 4       /* pieces in flight a thread (one row) */
#define MV2_UG 2      /* the same for the gate/up kernel (two rows) */

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Where a matrix's pieces are (see above). */
struct mv2m {
    const uint8_t *q;  /* quant bytes, rows of qrb bytes (16-byte aligned) */
    const uint8_t *sc; /* Q6_K: 16 int8 scales a super-block, rows of srb bytes */
    const uint16_t *d; /* Q6_K / Q8_0: an F16 scale a super-block / block, rows of drb */
    size_t qrb;
    int srb, drb, type;
    int na; /* OMNI_CUDA_MV2_NA=1: quant bytes loaded without L1 allocation */
};

/* 16 weight bytes: through the read-only path, or (na) without allocating
 * in L1, which then keeps the activations every row of the block reads. */
__device__ __forceinline__ uint4 ldw16(const uint8_t *p, int na)
{
    if (!na)
        return __ldg((const uint4 *)p);
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* The same for a 4-byte word. */
__device__ __forceinline__ uint32_t ldw4(const uint8_t *p, int na)
{
    if (!na)
        return __ldg((const uint32_t *)p);
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

/* One piece's weight bytes as loaded (a: quants; b: Q4_K / Q5_K the
 * super-block header, Q6_K the high bits, Q8_0 the second 16 quants; e:
 * Q5_K the two low bits of its 16 high values (k_repack_q5k), Q6_K the two
 * 16-value scales and d, Q8_0 d). */
struct mv2raw {
    uint4 a, b;
    uint32_t e;
};

/* Q4_K scales and mins of sub-blocks 2g and 2g + 1 from the header (d,
 * dmin, then 12 bytes of 6-bit fields): the two come as the byte pair at
 * 16 (g & 1) of the y, z, w words, unpacked two at a time; both forms
 * (g < 2, g >= 2) made, then selected, since the lanes of a warp take
 * both. */
__device__ __forceinline__ void q4k_sm2(const uint4 &hdr, int g, int *s0, int *m0, int *s1,
                                        int *m1)
{
    const int sh = 16 * (g & 1);
    const uint32_t y = (hdr.y >> sh) & 0xffffu, z = (hdr.z >> sh) & 0xffffu,
                   w = (hdr.w >> sh) & 0xffffu;
    const uint32_t s_hi = (w & 0x0f0fu) | ((y >> 2) & 0x3030u);
    const uint32_t m_hi = ((w >> 4) & 0x0f0fu) | ((z >> 2) & 0x3030u);
    const uint32_t sp = g < 2 ? y & 0x3f3fu : s_hi, mp = g < 2 ? z & 0x3f3fu : m_hi;
    *s0 = (int)(sp & 0xffu);
    *s1 = (int)(sp >> 8);
    *m0 = (int)(mp & 0xffu);
    *m1 = (int)(mp >> 8);
}

/* (offsets within a matrix in 32 bits: mv2_of takes matrices under 2 GiB;
 * 64-bit products a load cost the loops instructions they are short of) */
template <int T>
__device__ __forceinline__ void mv2_ld(const mv2m &m, int r, int p, mv2raw &w)
{
    const uint32_t ur = (uint32_t)r, up = (uint32_t)p;
    if constexpr (T == GGML_TYPE_Q4_K) {
        /* piece t of a super-block: qs bytes 16t .. 16t + 15 */
        const uint8_t *blk = m.q + (ur * (uint32_t)m.qrb + (up >> 3) * 144u);
        w.b = __ldg((const uint4 *)blk);
        w.a = ldw16(blk + 16 + 16 * (up & 7), m.na);
        w.e = 0;
    } else if constexpr (T == GGML_TYPE_Q5_K) {
        /* repacked (k_repack_q5k): piece t's quant bytes at 48 + 16t, its
         * word of bits at 16 + 4t, the header as Q4_K's */
        const uint8_t *blk = m.q + (ur * (uint32_t)m.qrb + (up >> 3) * 176u);
        w.b = __ldg((const uint4 *)blk);
        w.a = ldw16(blk + 48 + 16 * (up & 7), m.na);
        w.e = ldw4(blk + 16 + 4 * (up & 7), m.na);
    } else if constexpr (T == GGML_TYPE_Q6_K) {
        /* piece t = 4h + 2a + k: ql bytes 16t .., qh bytes 128 + 32h + 16k .. */
        const uint32_t sb = up >> 3, t = up & 7, h = t >> 2, a = (t >> 1) & 1, k = t & 1;
        const uint8_t *blk = m.q + (ur * (uint32_t)m.qrb + sb * 192u);
        w.a = ldw16(blk + 16 * t, m.na);
        w.b = __ldg((const uint4 *)(blk + 128 + 32 * h + 16 * k));
        /* the scales of values 16 (2a + k) and 64 further: bytes 2a + k and
         * 2a + k + 4 of the half super-block's 8 (one 8-byte load) */
        const uint2 sc = __ldg((const uint2 *)(m.sc + (ur * (uint32_t)m.srb + 16 * sb + 8 * h)));
        const uint32_t j = 2 * a + k;
        w.e = __byte_perm(sc.x, sc.y, j | (j + 4) << 4) & 0xffffu;
        w.e |= (uint32_t)__ldg(m.d + (ur * (uint32_t)m.drb + sb)) << 16;
    } else { /* Q8_0: 32 quants of block p, then its scale */
        const uint8_t *q = m.q + (ur * (uint32_t)m.qrb + 32 * up);
        w.a = ldw16(q, m.na);
        w.b = ldw16(q + 16, m.na);
        w.e = __ldg(m.d + (ur * (uint32_t)m.drb + up));
    }
}

/* dp4a of unsigned bytes a with signed bytes b (PTX dp4a.u32.s32) */
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ int dp4a4(int a0, int a1, int a2, int a3, const int4 &x, int acc)
{
    acc = __dp4a(a0, x.x, acc);
    acc = __dp4a(a1, x.y, acc);
    acc = __dp4a(a2, x.z, acc);
    return __dp4a(a3, x.w, acc);
}

/* What piece p's dot takes from the activations, loaded (and for Q4_K
 * summed) once for all the rows that use piece p (mv2_rows' streams): the
 * two 16-value halves, their scales, and for Q4_K's (Q5_K's) min term
 * their sums. */
struct mv2act {
    int4 A, B;
    float da, db;
    int sa, sb;
};

template <int T>
__device__ __forceinline__ void mv2_act(int p, const int8_t *__restrict__ xq,
                                        const float *__restrict__ xd, mv2act &a)
{
    if constexpr (T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K) { /* (the same pieces) */
        const int sb = p >> 3, g = (p & 7) >> 1, h = p & 1;
        const int8_t *xa = xq + 256 * sb + 64 * g + 16 * h; /* low nibbles: sub-block 2g */
        a.A = __ldg((const int4 *)xa);
        a.B = __ldg((const int4 *)(xa + 32));
        a.da = __ldg(xd + 8 * sb + 2 * g);
        a.db = __ldg(xd + 8 * sb + 2 * g + 1);
        const int one = 0x01010101;
        a.sa = dp4a4(one, one, one, one, a.A, 0);
        a.sb = dp4a4(one, one, one, one, a.B, 0);
    } else if constexpr (T == GGML_TYPE_Q6_K) {
        const int sb = p >> 3, t = p & 7, h = t >> 2, ha = (t >> 1) & 1, k = t & 1;
        /* low nibbles: values 128h + 32a + 16k + 0..15 (activation block 4h + a),
         * high: 64 further (block 4h + 2 + a) */
        const int8_t *xa = xq + 256 * sb + 128 * h + 32 * ha + 16 * k;
        a.A = __ldg((const int4 *)xa);
        a.B = __ldg((const int4 *)(xa + 64));
        a.da = __ldg(xd + 8 * sb + 4 * h + ha);
        a.db = __ldg(xd + 8 * sb + 4 * h + 2 + ha);
        const int one = 0x01010101; /* for the -32 of every quant (mv2_dot) */
        a.sa = dp4a4(one, one, one, one, a.A, 0);
        a.sb = dp4a4(one, one, one, one, a.B, 0);
    } else {
        const int4 *xp = (const int4 *)(xq + 32 * (size_t)p);
        a.A = __ldg(xp);
        a.B = __ldg(xp + 1);
        a.da = __ldg(xd + p);
    }
}

/* Piece p's contribution to the row's dot with the Q8_0 activations (a:
 * mv2_act of piece p). */
/* The dot of the high nibbles of w, left in place (16 q: no shifts), with
 * x: 16 times the dot, exactly. */
__device__ __forceinline__ int q4_hi16(const uint4 &w, const int4 &x)
{
    const uint32_t m = 0xf0f0f0f0u;
    int acc = dp4a_us(w.x & m, x.x, 0);
    acc = dp4a_us(w.y & m, x.y, acc);
    acc = dp4a_us(w.z & m, x.z, acc);
    return dp4a_us(w.w & m, x.w, acc);
}

/* Q5_K's repacked piece (k_repack_q5k): the dot of its 16 high values
 * with x, each as 8 q (bits 5-7 of its quant byte, bits 3-4 from e's
 * pair of bits for it: word i's at bits 2i, 2i + 1 of each byte): 8
 * times the dot, exactly (8 q <= 248, an unsigned byte). */
__device__ __forceinline__ int q5_hi8(const uint4 &w, uint32_t e, const int4 &x)
{
    const uint32_t m = 0xe0e0e0e0u, mb = 0x18181818u;
    int acc = dp4a_us((w.x & m) | ((e << 3) & mb), x.x, 0);
    acc = dp4a_us((w.y & m) | ((e << 1) & mb), x.y, acc);
    acc = dp4a_us((w.z & m) | ((e >> 1) & mb), x.z, acc);
    return dp4a_us((w.w & m) | ((e >> 3) & mb), x.w, acc);
}

template <int T>
__device__ __forceinline__ float mv2_dot(const mv2raw &w, int p, const mv2act &a)
{
    if constexpr (T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K) {
        const int g = (p & 7) >> 1;
        int lo, hi;
        if constexpr (T == GGML_TYPE_Q4_K) {
            const uint32_t m4 = 0x0f0f0f0fu;
            lo = dp4a4((int)(w.a.x & m4), (int)(w.a.y & m4), (int)(w.a.z & m4), (int)(w.a.w & m4),
                       a.A, 0);
            hi = q4_hi16(w.a, a.B) >> 4;
        } else { /* low values whole in bits 0-4 of their bytes */
            const uint32_t m5 = 0x1f1f1f1fu;
            lo = dp4a4((int)(w.a.x & m5), (int)(w.a.y & m5), (int)(w.a.z & m5), (int)(w.a.w & m5),
                       a.A, 0);
            hi = q5_hi8(w.a, w.e, a.B) >> 3;
        }
        int s0, m0, s1, m1;
        q4k_sm2(w.b, g, &s0, &m0, &s1, &m1);
        const float d = h2f((uint16_t)(w.b.x & 0xffff)), dmin = h2f((uint16_t)(w.b.x >> 16));
        /* the integer products first (exact: under 2^24), then d and dmin
         * once: fewer conversions and float steps a piece */
        const float t = fmaf(a.db, (float)(s1 * hi), a.da * (float)(s0 * lo));
        const float u = fmaf(a.db, (float)(m1 * a.sb), a.da * (float)(m0 * a.sa));
        return fmaf(d, t, -dmin * u);
    } else if constexpr (T == GGML_TYPE_Q6_K) {
        const int hs = 2 * (((p & 7) >> 1) & 1);
        const uint32_t l[4] = { w.a.x, w.a.y, w.a.z, w.a.w }, hb[4] = { w.b.x, w.b.y, w.b.z, w.b.w };
        /* the 6-bit quants q as unsigned bytes; sum (q - 32) x as sum q x
         * - 32 sum x (the same integers: no byte saturates) */
        int lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t h = hb[i] >> hs; /* this piece's two high bits at 0-1 and 4-5 */
            const uint32_t qa = (l[i] & 0x0f0f0f0fu) | ((h << 4) & 0x30303030u);
            const uint32_t qb = ((l[i] >> 4) & 0x0f0f0f0fu) | (h & 0x30303030u);
            lo = dp4a_us(qa, i == 0 ? a.A.x : i == 1 ? a.A.y : i == 2 ? a.A.z : a.A.w, lo);
            hi = dp4a_us(qb, i == 0 ? a.B.x : i == 1 ? a.B.y : i == 2 ? a.B.z : a.B.w, hi);
        }
        lo -= 32 * a.sa;
        hi -= 32 * a.sb;
        const float d = h2f((uint16_t)(w.e >> 16));
        const int sa = (int8_t)(w.e & 0xff), sbs = (int8_t)((w.e >> 8) & 0xff);
        return d * fmaf(a.db, (float)(sbs * hi), a.da * (float)(sa * lo));
    } else {
        int s = dp4a4((int)w.a.x, (int)w.a.y, (int)w.a.z, (int)w.a.w, a.A, 0);
        s = dp4a4((int)w.b.x, (int)w.b.y, (int)w.b.z, (int)w.b.w, a.B, s);
        return (float)s * (h2f((uint16_t)w.e) * a.da); /* the CPU's order in a block */
    }
}

struct mv2_nopre {
    __device__ void operator()() const {}
};

/* acc[k] = thread i's part of a row over np pieces, TPR threads a row,
 * for k < R streams: row r of m0 (R = 1); and of m1 (R = 2: gate and up);
 * and row r2 of m0 and of m1 (R = 4). U pieces of each stream are loaded,
 * then dotted; the first loads go out before pdl_wait. A row's sum has the
 * same order whatever U and R. pre() runs right after pdl_wait: loads of
 * what the previous kernel wrote that the caller needs only at its end
 * (their latency then hides behind the row's). */
template <int T, int TPR, int U, int R, bool RM = false, typename P = mv2_nopre>
__device__ __forceinline__ void mv2_rows(const mv2m &m0, const mv2m &m1, int r, int r2, int i,
                                         int np, const int8_t *__restrict__ xq,
                                         const float *__restrict__ xd, float *acc,
                                         const P &pre = P())
{
    /* RM (R 2): rows r and r2 of m0, which share each piece's activations */
    mv2raw w[R][U];
#pragma unroll
    for (int k = 0; k < R; k++)
        acc[k] = 0.0f;
    int p = i;
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int k = 0; k < R; k++)
            if (p + u * TPR < np)
                mv2_ld<T>(RM ? m0 : k & 1 ? m1 : m0, RM ? (k ? r2 : r) : k < 2 ? r : r2,
                          p + u * TPR, w[k][u]);
    pdl_wait();
    pre();
    for (;;) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p + u * TPR < np) {
                mv2act a; /* once for the R streams */
                mv2_act<T>(p + u * TPR, xq, xd, a);
#pragma unroll
                for (int k = 0; k < R; k++)
                    acc[k] += mv2_dot<T>(w[k][u], p + u * TPR, a);
            }
        p += U * TPR;
        if (p >= np)
            break;
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < R; k++)
                if (p + u * TPR < np)
                    mv2_ld<T>(RM ? m0 : k & 1 ? m1 : m0, RM ? (k ? r2 : r) : k < 2 ? r : r2,
                          p + u * TPR, w[k][u]);
    }
}

/* The sum over a row's TPR threads, in thread i == 0 of the group (TPR
 * 16: the two rows of a warp summed apart, lanes xor within the half). */
template <int TPR>
__device__ __forceinline__ float mv2_reduce(float v, float *red)
{
    if constexpr (TPR < 32) {
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
    v = warp_sum(v);
    if constexpr (TPR > 32) {
        if ((threadIdx.x & 31) == 0)
            red[threadIdx.x >> 5] = v;
        __syncthreads();
        if (threadIdx.x % TPR == 0) {
            v = 0.0f;
#pragma unroll
            for (int k = 0; k < TPR / 32; k++)
                v += red[(threadIdx.x >> 5) + k];
        }
    }
    return v;
}

#define NS_SH 128 /* groups' sums copied to shared memory early: rows up to 4096 */

/* What a product of a fused norm's y (struct nscale) loads: w[i] before
 * the wait (constant); x[i] and the groups' sums of squares right after
 * it (pre: the sums as asynchronous copies into shared memory, so that
 * no registers wait for them); then 1 / rms (the sums in a fixed order:
 * every block gets the same) and y[i] written at its end. i: the thread's
 * value of y (blockIdx.x * blockDim.x + threadIdx.x: the first blocks
 * write y). */
struct nscale_ld {
    float w, x;
    int i;
    __device__ void init(const nscale &ns)
    {
        i = blockIdx.x * blockDim.x + threadIdx.x;
        w = ns.ss && i < ns.dim ? __ldg(ns.w + i) : 0.0f;
        x = 0.0f;
    }
    __device__ void after_wait(const nscale &ns, float *sh)
    {
        if (!ns.ss)
            return;
        const int ng = ns.dim / 32 < NS_SH ? ns.dim / 32 : NS_SH;
        if (threadIdx.x < 32) {
            for (int k = threadIdx.x; k < ng / 4; k += 32) /* 16 bytes, through L2 */
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(sh + 4 * k)),
                             "l"(ns.ss + 4 * k));
            for (int g = ng / 4 * 4 + threadIdx.x; g < ng; g += 32)
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((uint32_t)__cvta_generic_to_shared(sh + g)),
                             "l"(ns.ss + g));
            asm volatile("cp.async.commit_group;");
        }
        if (i < ns.dim)
            x = __ldcg(ns.x + i);
    }
    /* 1 / rms (1 without a fused norm), y[i] written; every thread of the
     * block calls it, with after_wait's sh */
    __device__ float finish(const nscale &ns, float *sh) const
    {
        __shared__ float rs;
        if (!ns.ss)
            return 1.0f;
        if (threadIdx.x < 32)
            asm volatile("cp.async.wait_all;" ::: "memory");
        __syncwarp();
        if (threadIdx.x < 32) {
            float t = 0.0f;
            for (int g = threadIdx.x; g < ns.dim / 32; g += 32)
                t += g < NS_SH ? sh[g] : __ldcg(ns.ss + g);
            t = warp_sum(t);
            if (threadIdx.x == 0)
                rs = 1.0f / sqrtf(t / (float)ns.dim + ns.eps);
        }
        __syncthreads();
        if (i < ns.dim)
            ns.y[i] = x * rs * w;
        return rs;
    }
};

/* y[r] = W[r] . x for one activation row; NR x MV2_BLOCK / TPR rows a
 * block. NR 2 (the default, see mv2_r2): each thread group takes rows r
 * and r + MV2_BLOCK / TPR, each piece's activations (and their scales)
 * loaded once for both, half the pieces in flight a row (the same
 * registers); a row's sum has NR 1's order. MINB > 1
 * (OMNI_CUDA_MV2_MINB) asks the compiler for that many blocks an SM (fewer
 * registers: Q6_K takes 72 at MINB 1, 7 blocks an SM). */
template <int T, int TPR, int MINB, int NR>
__global__ void __launch_bounds__(MV2_BLOCK, MINB)
    k_mv2(const mv2m m, int rows, int np, const int8_t *__restrict__ xq,
          const float *__restrict__ xd, float *__restrict__ y)
{
    __shared__ float red[MV2_BLOCK / 32];
    pdl_trigger();
    constexpr int RPB = MV2_BLOCK / TPR;
    const int i = threadIdx.x % TPR;
    const int r = blockIdx.x * NR * RPB + threadIdx.x / TPR, r2 = r + RPB;
    float acc[2] = { 0.0f, 0.0f };
    if (NR == 2 && r2 < rows)
        mv2_rows<T, TPR, MV2_U / 2, 2, true>(m, m, r, r2, i, np, xq, xd, acc);
    else if (r < rows)
        mv2_rows<T, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, acc);
    else
        pdl_wait();
    const float a0 = mv2_reduce<TPR>(acc[0], red);
    if (i == 0 && r < rows)
        y[r] = a0;
    if constexpr (NR == 2) {
        if (TPR > 32)
            __syncthreads(); /* red is reused */
        const float a1 = mv2_reduce<TPR>(acc[1], red);
        if (i == 0 && r2 < rows)
            y[r2] = a1;
    }
}

/* q, k, v (up to 3 matrices of equal cols, each of its own type) in one
 * launch: matrix k takes blocks b0[k] .. of the grid. ns: a fused norm's
 * 1 / rms to apply (ns.ss NULL: none). The weight types a kernel takes
 * (X, each a kernel of its own so that the others' registers stay as they
 * were): 0 Q4_K, Q6_K, Q8_0; 1 Q5_K, Q6_K, Q8_0 (a Q5_K_M file's q/k/v);
 * 2 all four, for a set of both Q4_K and Q5_K (a Q4_K_S file's first
 * layers: 4 bytes of spill, where 0 and 1 have none). */
struct mv2_segs {
    mv2m m[3];
    float *y[3];
    int rows[3], b0[3];
    int n;
};

template <int TPR, int X>
__global__ void __launch_bounds__(MV2_BLOCK, 8) /* (64 registers, as without a fused norm) */
    k_mv2_seg(const mv2_segs sg, int np, const int8_t *__restrict__ xq,
              const float *__restrict__ xd, const nscale ns)
{
    __shared__ float red[MV2_BLOCK / 32];
    pdl_trigger();
    const int k = sg.n > 2 && (int)blockIdx.x >= sg.b0[2] ? 2
                  : sg.n > 1 && (int)blockIdx.x >= sg.b0[1] ? 1 : 0;
    const mv2m m = k == 0 ? sg.m[0] : k == 1 ? sg.m[1] : sg.m[2];
    const int rows = k == 0 ? sg.rows[0] : k == 1 ? sg.rows[1] : sg.rows[2];
    const int b0 = k == 0 ? sg.b0[0] : k == 1 ? sg.b0[1] : sg.b0[2];
    float *y = k == 0 ? sg.y[0] : k == 1 ? sg.y[1] : sg.y[2];
    const int i = threadIdx.x % TPR;
    const int r = ((int)blockIdx.x - b0) * (MV2_BLOCK / TPR) + threadIdx.x / TPR;
    __shared__ __align__(16) float nsh[NS_SH];
    nscale_ld nl;
    nl.init(ns);
    const auto pre = [&]() { nl.after_wait(ns, nsh); };
    float acc = 0.0f;
    if (r < rows) {
        if constexpr (X == 2) {
            switch (m.type) {
            case GGML_TYPE_Q5_K: mv2_rows<GGML_TYPE_Q5_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            case GGML_TYPE_Q4_K: mv2_rows<GGML_TYPE_Q4_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            case GGML_TYPE_Q6_K: mv2_rows<GGML_TYPE_Q6_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            default: mv2_rows<GGML_TYPE_Q8_0, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            }
        } else if constexpr (X == 1) {
            switch (m.type) {
            case GGML_TYPE_Q5_K: mv2_rows<GGML_TYPE_Q5_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            case GGML_TYPE_Q6_K: mv2_rows<GGML_TYPE_Q6_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            default: mv2_rows<GGML_TYPE_Q8_0, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            }
        } else {
            switch (m.type) {
            case GGML_TYPE_Q4_K: mv2_rows<GGML_TYPE_Q4_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            case GGML_TYPE_Q6_K: mv2_rows<GGML_TYPE_Q6_K, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            default: mv2_rows<GGML_TYPE_Q8_0, TPR, MV2_U, 1>(m, m, r, r, i, np, xq, xd, &acc, pre); break;
            }
        }
    } else {
        pdl_wait();
        pre();
    }
    acc = mv2_reduce<TPR>(acc, red) * nl.finish(ns, nsh);
    if (i == 0 && r < rows)
        y[r] = acc;
}

/* k_matvec_glu_q on pieces: silu(gate) * up of 32 consecutive rows a block
 * (a warp a row, TPR 32), written as F32 and as Q8_0 for the down product. */
template <int T>
__global__ void __launch_bounds__(1024)
    k_mv2_glu_q(const mv2m mg, const mv2m mu, int np, const int8_t *__restrict__ xq,
                const float *__restrict__ xd, float *__restrict__ y, int8_t *__restrict__ oq,
                float *__restrict__ oqd)
{
    __shared__ float vals[32];
    pdl_trigger();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int r = blockIdx.x * 32 + wid;
    float a[2];
    mv2_rows<T, 32, MV2_UG, 2>(mg, mu, r, r, lane, np, xq, xd, a);
    const float gs = warp_sum(a[0]), us = warp_sum(a[1]);
    if (lane == 0)
        vals[wid] = us * (gs / (1.0f + expf(-gs)));
    __syncthreads();
    if (wid == 0)
        norm_out<true>(y + blockIdx.x * 32, lane, vals[lane], oq + blockIdx.x * 32,
                       oqd + blockIdx.x);
}

/* The same with 16 warps a block, each taking rows r and r + 16 of the
 * block's 32 (OMNI_CUDA_MV2_GLU=512: two blocks fit an SM where one of
 * 1024 threads does; but Q4_K takes 65 registers at MINB 1, so only one
 * fits: OMNI_CUDA_MV2_GLU=512b2 asks for 2, 64 registers). U pieces of
 * each of the 4 streams in flight a lane (OMNI_CUDA_MV2_GLU=512u2: U 2,
 * all of a 1B row's pieces at once; 128 registers, one block an SM). ns:
 * as k_mv2_seg's. */
template <int T, int U, int MINB>
__global__ void __launch_bounds__(512, MINB)
    k_mv2_glu_q16(const mv2m mg, const mv2m mu, int np, const int8_t *__restrict__ xq,
                  const float *__restrict__ xd, float *__restrict__ y, int8_t *__restrict__ oq,
                  float *__restrict__ oqd, const nscale ns)
{
    __shared__ float vals[32];
    pdl_trigger();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int r = blockIdx.x * 32 + wid;
    __shared__ __align__(16) float nsh[NS_SH];
    nscale_ld nl;
    nl.init(ns);
    float a[4];
    mv2_rows<T, 32, U, 4>(mg, mu, r, r + 16, lane, np, xq, xd, a, [&]() { nl.after_wait(ns, nsh); });
    const float rs = nl.finish(ns, nsh);
    const float g0 = warp_sum(a[0]) * rs, u0 = warp_sum(a[1]) * rs;
    const float g1 = warp_sum(a[2]) * rs, u1 = warp_sum(a[3]) * rs;
    if (lane == 0) {
        vals[wid] = u0 * (g0 / (1.0f + expf(-g0)));
        vals[wid + 16] = u1 * (g1 / (1.0f + expf(-g1)));
    }
    __syncthreads();
    if (wid == 0)
        norm_out<true>(y + blockIdx.x * 32, lane, vals[lane], oq + blockIdx.x * 32,
                       oqd + blockIdx.x);
}

/* prepare's copies for mv2: Q6_K super-blocks as 192 quant bytes (ql, qh),
 * 16 scales and d in three arrays; Q8_0 blocks as 32 quants and d in two
 * (one thread a super-block / block; rows stay contiguous, so block i of
 * the matrix lands at i in each array). */
__global__ void k_repack_q6k(const uint8_t *__restrict__ W, int64_t n, uint8_t *__restrict__ q,
                             uint8_t *__restrict__ sc, uint16_t *__restrict__ d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint8_t *b = W + i * 210;
    for (int j = 0; j < 192; j++)
        q[i * 192 + j] = b[j];
    for (int j = 0; j < 16; j++)
        sc[i * 16 + j] = b[192 + j];
    d[i] = (uint16_t)(b[208] | (b[209] << 8));
}

/* Q5_K super-blocks as the header (d, dmin, scales: 16 bytes), 8 words of
 * bits and 8 pieces of 16 quant bytes (Q4_K's pieces: piece t = 2g + h
 * holds values 16h .. 16h + 15 of sub-blocks 2g (lo) and 2g + 1 (hi)).
 * Byte k of piece t: lo (all 5 bits) in bits 0-4, hi >> 2 in bits 5-7;
 * hi & 3 in bits 2i, 2i + 1 of byte k & 3 of word t (i = k >> 2: the
 * piece's word i of quant bytes): mv2_dot takes a low value with one mask
 * (Q4_K's step), a high one with a shift, a mask and an or (q5_hi8),
 * where reading qh itself would take a shift and a mask for each and 16
 * bytes more in flight a piece. One thread a super-block; 176 bytes as
 * GGUF's. */
__global__ void k_repack_q5k(const uint8_t *__restrict__ W, int64_t n, uint8_t *__restrict__ out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint8_t *b = W + i * 176, *qh = b + 16, *qs = b + 48;
    uint8_t *o = out + i * 176;
    for (int j = 0; j < 16; j++)
        o[j] = b[j];
    for (int t = 0; t < 8; t++) {
        const int g = t >> 1, h = t & 1;
        uint32_t e = 0;
        for (int k = 0; k < 16; k++) {
            const int ql = qs[16 * t + k], hb = qh[16 * h + k];
            const int lo = (ql & 15) | ((hb >> (2 * g)) & 1) << 4;
            const int hi = (ql >> 4) | ((hb >> (2 * g + 1)) & 1) << 4;
            o[48 + 16 * t + k] = (uint8_t)(lo | (hi >> 2) << 5);
            e |= (uint32_t)(hi & 3) << (8 * (k & 3) + 2 * (k >> 2));
        }
        for (int j = 0; j < 4; j++)
            o[16 + 4 * t + j] = (uint8_t)(e >> (8 * j));
    }
}

__global__ void k_repack_q8_0(const uint8_t *__restrict__ W, int64_t n, uint8_t *__restrict__ q,
                              uint16_t *__restrict__ d)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint8_t *b = W + i * 34;
    d[i] = (uint16_t)(b[0] | (b[1] << 8));
    for (int j = 0; j < 32; j++)
        q[i * 32 + j] = b[2 + j];
}

/* OMNI_CUDA_PDL (read at backend creation): 1 launches the mv2 products
 * with programmatic dependent launch, 2 (the default) also the other
 * kernels of a decode step (norms, RoPE + K/V store, attention, argmax:
 * each waits for the previous kernel at its top); 0 none. */
static int pdl_level;

/* A launch with programmatic stream serialization when pdl_level >= level
 * (the kernel may start while the previous one finishes; it waits in
 * pdl_wait before reading what that one wrote). */
template <typename... KArgs, typename... Args>
static void launch_pdl_at(int level, void (*k)(KArgs...), dim3 grid, dim3 block, cudaStream_t s,
                          Args... args)
{
    launch_kernel(k, grid, block, 0, s, pdl_level >= level, args...);
}

template <typename... KArgs, typename... Args>
static void launch_pdl(void (*k)(KArgs...), dim3 grid, dim3 block, cudaStream_t s, Args... args)
{
    launch_pdl_at(1, k, grid, block, s, args...);
}

/* OMNI_CUDA_MV2_PPT: pieces a thread before a row gets more threads.
 * Default from the card's nominal DRAM bandwidth (mv2_ppt_for): a faster
 * memory needs more bytes in flight a thread to cover the same latency.
 * H200 (4.8 TB/s) job g_h4: 4 against 2 tg128 7B 1.047x, 1B 1.001x; H100
 * (3.35 TB/s) job f_i11: 7B 1.000x, 1B 0.972x, so 2 there. */
static int mv2_ppt = 2;
static int mv2_ppt_for(double dram_gb_s)
{
    return dram_gb_s >= 4000.0 ? 4 : 2;
}
static int mv2_tmin = 32; /* OMNI_CUDA_MV2_TMIN: the fewest threads a row (16 or 32) */
/* k_mv2 at 64 registers (8 blocks an SM; Q6_K takes 83 without the cap);
 * OMNI_CUDA_MV2_MINB=1: no cap. H100 job f_c1: tg128 +4.0% (1B Q4_K_M),
 * +1.8% (7B) alone. */
static int mv2_minb = 8;
static bool mv2_glu16;    /* k_mv2_glu_q16 (OMNI_CUDA_MV2_GLU=1024: k_mv2_glu_q) */
/* k_mv2_glu_q16's form: 1 (default) two blocks an SM (64 registers; H100
 * job f_c1: tg128 +5.9% on 1B Q4_K_M, +5.0% on 7B), 0 no cap
 * (OMNI_CUDA_MV2_GLU=512: Q4_K took 65 registers, one block an SM), 2 two
 * pieces a stream in flight (=512u2) */
static int mv2_glu_v = 1;
static int mv2_na;        /* see ldw16 (OMNI_CUDA_MV2_NA=0: through L1) */
/* k_mv2 with NR 2 for the one-row products of launch_mv2 (o, down, output;
 * OMNI_CUDA_MV2_R2=0: NR 1). H100 job f_h5: tg128 1.019x on 1B Q4_K_M,
 * 0.998x on 7B; per op the output product 11-13% faster, 7B's Q4_K down
 * 8%. */
static bool mv2_r2 = true;
/* Threads a row for np pieces: mv2_tmin (16, 32) up to 128. Fewer
 * threads a row give each more pieces, so more bytes in flight a thread. */
static int mv2_tpr(int np)
{
    int t = mv2_tmin;
    while (t < MV2_BLOCK && np > t * mv2_ppt)
        t *= 2;
    return t;
}

template <int T, int MINB>
static void launch_mv2_b(const mv2m &m, int rows, int np, const int8_t *xq, const float *xd,
                         float *y, cudaStream_t s)
{
    const int tpr = mv2_tpr(np), nr = mv2_r2 ? 2 : 1;
    const dim3 grid(blocks_for(rows, nr * (MV2_BLOCK / tpr))), block(MV2_BLOCK);
    switch (nr * 1000 + tpr) {
    case 1016: launch_pdl(k_mv2<T, 16, MINB, 1>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 1032: launch_pdl(k_mv2<T, 32, MINB, 1>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 1064: launch_pdl(k_mv2<T, 64, MINB, 1>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 1128: launch_pdl(k_mv2<T, 128, MINB, 1>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 2016: launch_pdl(k_mv2<T, 16, MINB, 2>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 2032: launch_pdl(k_mv2<T, 32, MINB, 2>, grid, block, s, m, rows, np, xq, xd, y); break;
    case 2064: launch_pdl(k_mv2<T, 64, MINB, 2>, grid, block, s, m, rows, np, xq, xd, y); break;
    default: launch_pdl(k_mv2<T, 128, MINB, 2>, grid, block, s, m, rows, np, xq, xd, y); break;
    }
}

template <int T>
static void launch_mv2(const mv2m &m, int rows, int np, const int8_t *xq, const float *xd,
                       float *y, cudaStream_t s)
{
    if (mv2_minb == 8)
        launch_mv2_b<T, 8>(m, rows, np, xq, xd, y, s);
    else
        launch_mv2_b<T, 1>(m, rows, np, xq, xd, y, s);
}

/* k_mv2_seg<., X> over blocks blocks at tpr threads a row (q/k/v, plain
 * or held back). */
template <int X>
static void launch_mv2_seg_x(const mv2_segs &sg, unsigned blocks, int tpr, int np,
                             const int8_t *xq, const float *xd, const nscale &ns, cudaStream_t s)
{
    const dim3 grid(blocks), block(MV2_BLOCK);
    switch (tpr) {
    case 16: launch_pdl(k_mv2_seg<16, X>, grid, block, s, sg, np, xq, xd, ns); break;
    case 32: launch_pdl(k_mv2_seg<32, X>, grid, block, s, sg, np, xq, xd, ns); break;
    case 64: launch_pdl(k_mv2_seg<64, X>, grid, block, s, sg, np, xq, xd, ns); break;
    default: launch_pdl(k_mv2_seg<128, X>, grid, block, s, sg, np, xq, xd, ns); break;
    }
}

static void launch_mv2_seg(const mv2_segs &sg, unsigned blocks, int tpr, int np, const int8_t *xq,
                           const float *xd, const nscale &ns, cudaStream_t s)
{
    bool q4 = false, q5 = false;
    for (int i = 0; i < sg.n; i++) {
        q4 = q4 || sg.m[i].type == GGML_TYPE_Q4_K;
        q5 = q5 || sg.m[i].type == GGML_TYPE_Q5_K;
    }
    if (!q5)
        launch_mv2_seg_x<0>(sg, blocks, tpr, np, xq, xd, ns, s);
    else if (!q4)
        launch_mv2_seg_x<1>(sg, blocks, tpr, np, xq, xd, ns, s);
    else
        launch_mv2_seg_x<2>(sg, blocks, tpr, np, xq, xd, ns, s);
}

/* A one-row mv2 product (o, down) held back for the norm fusion (see its
 * section); kind 0: none. */
struct tail_pend {
    int kind;
    mv2m m;
    int type, rows;
    float *y;
    int np;
    const int8_t *xq;
    const float *xd;
};

template <int T>
static void launch_matvec_q(const uint8_t *W, size_t rb, int rows, int cols, const float *x, int n,
                            float *y, cudaStream_t s)
{
    const dim3 grid(blocks_for(rows, MV_WARPS)), block(MV_WARPS * 32);
    switch (n) {
    case 1: k_matvec_q<T, 1><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 2: k_matvec_q<T, 2><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 3: k_matvec_q<T, 3><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 4: k_matvec_q<T, 4><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 5: k_matvec_q<T, 5><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 6: k_matvec_q<T, 6><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    case 7: k_matvec_q<T, 7><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    default: k_matvec_q<T, 8><<<grid, block, 0, s>>>(W, rb, rows, cols, x, y); break;
    }
}

static bool mv_split_on; /* OMNI_CUDA_MV_SPLIT=1 (read at backend creation) */

template <int T>
static void launch_matvec_q8(const uint8_t *W, size_t rb, int rows, int cols, const int8_t *xq,
                             const float *xd, int n, float *y, cudaStream_t s)
{
    if (n == 1 && mv_split_on && cols >= 4096) {
        k_matvec_q8_split<T><<<rows, MV_WARPS * 32, 0, s>>>(W, rb, cols, xq, xd, y);
        return;
    }
    const dim3 grid(blocks_for(rows, MV_WARPS)), block(MV_WARPS * 32);
    switch (n) {
    case 1: k_matvec_q8<T, 1><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 2: k_matvec_q8<T, 2><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 3: k_matvec_q8<T, 3><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 4: k_matvec_q8<T, 4><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 5: k_matvec_q8<T, 5><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 6: k_matvec_q8<T, 6><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 7: k_matvec_q8<T, 7><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 8: k_matvec_q8<T, 8><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
#ifndef OMNI_CUDA_NO_F16_CACHE
    case 9: k_matvec_q8<T, 9><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 10: k_matvec_q8<T, 10><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 11: k_matvec_q8<T, 11><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 12: k_matvec_q8<T, 12><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 13: k_matvec_q8<T, 13><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 14: k_matvec_q8<T, 14><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    case 15: k_matvec_q8<T, 15><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
    default: k_matvec_q8<T, 16><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
#else
    default: k_matvec_q8<T, 8><<<grid, block, 0, s>>>(W, rb, rows, cols, xq, xd, y); break;
#endif
    }
}

template <typename WT>
static void launch_matvec_f(const WT *W, int rows, int cols, const float *x, int n, float *y,
                            cudaStream_t s)
{
    const dim3 grid(blocks_for(rows, MV_WARPS)), block(MV_WARPS * 32);
    switch (n) {
    case 1: k_matvec_f<WT, 1><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 2: k_matvec_f<WT, 2><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 3: k_matvec_f<WT, 3><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 4: k_matvec_f<WT, 4><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 5: k_matvec_f<WT, 5><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 6: k_matvec_f<WT, 6><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    case 7: k_matvec_f<WT, 7><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    default: k_matvec_f<WT, 8><<<grid, block, 0, s>>>(W, rows, cols, x, y); break;
    }
}

/* The block types: the int8 matvec (dot_q8), dq32 for the F32-activation
 * matvec, get_rows and the F16 copies. */
static bool is_quant(int type)
{
    return type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_Q6_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q5_0 ||
           type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
}

/* The K-quants: rows of 256-value super-blocks, activation blocks of 32
 * values where the CPU's Q8_K has 256 (int8_max). */
static bool is_kquant(int type)
{
    return type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K;
}

static bool cuda_supports(const struct omni_backend *be, int type)
{
    (void)be;
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 ||
           is_quant(type);
}

/* Scratch of at least n elements (grown, never shrunk). */
static int grow(__half **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if (chk(cudaMalloc((void **)p, n * sizeof(__half)), "scratch"))
        return OMNI_ERR_NOMEM;
    *cap = n;
    return 0;
}

static int grow_bytes(struct cuda_state *s, void **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    if (s->capturing) /* buffers are sized by a run before any capture */
        return OMNI_ERR_LIMIT;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if (chk(cudaMalloc(p, n), "scratch"))
        return OMNI_ERR_NOMEM;
    *cap = n;
    return 0;
}

static int quant_chunk_ok(const struct omni_btensor *w)
{
    return !is_quant(w->type) ||
           (w->cols % 32 == 0 && (!is_kquant(w->type) || w->cols % 256 == 0));
}

#define MATVEC_MAX 8 /* rows of activations through the matvec kernels */
/* rows per launch of the int8 matvec: 16 (a batched decode step of 16
 * sequences reads the weights once), 8 without the batched build */
#ifndef OMNI_CUDA_NO_F16_CACHE
#define MATVEC_Q8_MAX 16
#else
#define MATVEC_Q8_MAX 8
#endif
/* Quantized weights: batches below this (matmul.h's OMNI_MATMUL_BLAS_MIN,
 * where the CPU leaves its quantized dots for sgemm) multiply Q8_0-style
 * activations (int8 per 32 values + a scale) with dp4a, 16 rows per launch:
 * Q8_0 / Q4_0 exactly as the CPU's dots; Q4_K / Q6_K with 32-value
 * activation blocks where the CPU uses Q8_K's 256. */
#define Q8_ACT_MAX 32

/* Whether xq holds x (n rows of cols) as Q8_0. */
static bool nq_holds(const struct cuda_state *s, const float *x, int n, int cols)
{
    return s->nq_valid && s->nq_x == x && s->nq_n == n && s->nq_cols == cols;
}

/* x (n rows of cols) as Q8_0 activations in xq (int8 [n][cols], then a
 * scale per 32): reused when xq already holds them (nq_valid), else
 * quantized now and remembered. ns: a product that applies a fused norm's
 * 1 / rms (struct nscale) gets it there, and may take blocks that lack it;
 * NULL: blocks of x as it is. */
static int quant_act(struct cuda_state *s, const float *x, int n, int cols, int8_t **xq,
                     float **xd, struct nscale *ns = NULL)
{
    const int64_t nb = (int64_t)n * cols / 32;
    if (ns)
        memset(ns, 0, sizeof *ns);
    if (s->pn_on && s->pn.y == x && !(nq_holds(s, x, n, cols) && ns))
        norm_flush(s); /* y (not written yet) and its blocks from a plain norm */
    if (nq_holds(s, x, n, cols) && (!s->nq_ns.ss || ns)) {
        if (ns)
            *ns = s->nq_ns;
        *xq = s->nq_buf;
        *xd = (float *)(*xq + nb * 32);
        return 0;
    }
    {
        s->nq_valid = false;
        s->nq_ns.ss = NULL;
        int rc = grow_bytes(s, &s->xq, &s->xq_cap, (size_t)nb * 32 + (size_t)nb * sizeof(float));
        if (rc < 0)
            return rc;
        k_quant_q8_0<<<blocks_for(nb * 32, 256), 256, 0, s->stream>>>(
            x, nb, (int8_t *)s->xq, (float *)((int8_t *)s->xq + nb * 32));
        if ((rc = chk_launch("quantize q8_0")) < 0)
            return rc;
        s->nq_valid = true;
        s->nq_x = x;
        s->nq_n = n;
        s->nq_cols = cols;
        s->nq_buf = (int8_t *)s->xq;
    }
    *xq = (int8_t *)s->xq;
    *xd = (float *)(*xq + nb * 32);
    return 0;
}

/* A product wrote y[n][rows]: xq no longer stands for x if they overlap. */
static void wrote(struct cuda_state *s, const float *y, int64_t n)
{
    if (s->nq_valid && y < s->nq_x + (int64_t)s->nq_n * s->nq_cols && s->nq_x < y + n)
        s->nq_valid = false;
    if (s->nh_valid && y < s->nh_x + (int64_t)s->nh_n * s->nh_cols && s->nh_x < y + n)
        s->nh_valid = false;
    if (s->nm_valid && y < s->nm_x + (int64_t)s->nm_n * s->nm_cols && s->nm_x < y + n)
        s->nm_valid = false;
}

/* prepare's entry for matrix w (same data, shape and type), or NULL. */
static const struct f16_copy *find_copy(const struct cuda_state *s, const struct omni_btensor *w)
{
    for (int i = 0; i < s->n_f16; i++)
        if (s->f16[i].w == w->data && s->f16[i].rows == w->rows && s->f16[i].cols == w->cols &&
            s->f16[i].type == w->type)
            return &s->f16[i];
    return NULL;
}

/* Where mv2 finds matrix w's pieces; false: w takes k_matvec_q8 (not
 * prepared, another type, or OMNI_CUDA_MV2=0). */
static bool mv2_of(const struct cuda_state *s, const struct omni_btensor *w, mv2m *m)
{
    if (s->mv2_off || s->f32_act)
        return false;
    const struct f16_copy *c = find_copy(s, w);
    if (!c || !c->mv2)
        return false;
    const int64_t nb = w->cols / 32, nsb = w->cols / 256;
    if ((int64_t)ggml_row_size(w->type, w->cols) * w->rows >= ((int64_t)1 << 31))
        return false; /* mv2_ld's offsets are 32-bit */
    memset(m, 0, sizeof *m);
    m->type = w->type;
    m->na = mv2_na;
    switch (w->type) {
    case GGML_TYPE_Q4_K:
        m->q = (const uint8_t *)w->data;
        m->qrb = (size_t)nsb * 144;
        return true;
    case GGML_TYPE_Q5_K:
        m->q = (const uint8_t *)c->rp;
        m->qrb = (size_t)nsb * 176;
        return true;
    case GGML_TYPE_Q6_K:
        m->q = (const uint8_t *)c->rp;
        m->qrb = (size_t)nsb * 192;
        m->sc = m->q + (size_t)w->rows * nsb * 192;
        m->srb = (int)nsb * 16;
        m->d = (const uint16_t *)(m->sc + (size_t)w->rows * nsb * 16);
        m->drb = (int)nsb;
        return true;
    case GGML_TYPE_Q8_0:
        m->q = (const uint8_t *)c->rp;
        m->qrb = (size_t)w->cols;
        m->d = (const uint16_t *)(m->q + (size_t)w->rows * w->cols);
        m->drb = (int)nb;
        return true;
    }
    return false;
}

static int matmul_impl(struct omni_backend *be, const struct omni_btensor *w, const float *x,
                       int n, float *y);

/* x (n rows of cols) as F16 in xh for the GEMM path: kept from the last
 * conversion while nh_valid says it stands for x */
static int f16_input(struct cuda_state *s, const float *x, int n, int cols)
{
    if (s->nh_valid && !s->nh_bf && s->nh_x == x && s->nh_n == n && s->nh_cols == cols)
        return 0;
    const int64_t nx = (int64_t)n * cols;
    int rc;
    s->nh_valid = false;
    if ((size_t)nx > s->xh_cap && s->capturing)
        return OMNI_ERR_LIMIT;
    if ((rc = grow(&s->xh, &s->xh_cap, (size_t)nx)) < 0)
        return rc;
    k_f32_to_f16<<<blocks_for(nx, 256), 256, 0, s->stream>>>(x, s->xh, nx);
    if ((rc = chk_launch("f32_to_f16")) < 0)
        return rc;
    if (s->nh_on) {
        s->nh_valid = true;
        s->nh_bf = false;
        s->nh_x = x;
        s->nh_n = n;
        s->nh_cols = cols;
    }
    return 0;
}

/* x (n rows of cols) as BF16 in xh (the same 2 bytes a value, so the room
 * sized for F16 at load serves) for the BF16 GEMM, kept while nh_valid
 * and nh_bf say it stands for x. */
static int bf16_input(struct cuda_state *s, const float *x, int n, int cols)
{
    if (s->nh_valid && s->nh_bf && s->nh_x == x && s->nh_n == n && s->nh_cols == cols)
        return 0;
    const int64_t nx = (int64_t)n * cols;
    int rc;
    s->nh_valid = false;
    if ((size_t)nx > s->xh_cap && s->capturing)
        return OMNI_ERR_LIMIT;
    if ((rc = grow(&s->xh, &s->xh_cap, (size_t)nx)) < 0)
        return rc;
    k_f32_to_bf16<<<blocks_for(nx, 256), 256, 0, s->stream>>>(x, (__nv_bfloat16 *)s->xh, nx);
    if ((rc = chk_launch("f32_to_bf16")) < 0)
        return rc;
    if (s->nh_on) {
        s->nh_valid = true;
        s->nh_bf = true;
        s->nh_x = x;
        s->nh_n = n;
        s->nh_cols = cols;
    }
    return 0;
}

static bool f16_out_on = true; /* OMNI_CUDA_F16_OUT=0: the products convert (read at creation) */

/* Where an op writing rows x cols of F32 that a batched product may take
 * next also writes their F16 form, so that the product's f16_input has it
 * already (one conversion launch less a product): xh when it has room
 * (it never grows here: a graph may be recording) and the rows are past
 * the int8 paths; NULL: none. f16_done records it after the launch. */
static __half *f16_out(struct cuda_state *s, int rows, int cols)
{
    if (!f16_out_on || !s->nh_on || s->f32_act || rows <= s->int8_rows ||
        (size_t)rows * cols > s->xh_cap)
        return NULL;
    return s->xh;
}

static void f16_done(struct cuda_state *s, const __half *h, const float *y, int rows, int cols)
{
    if (!h)
        return;
    s->nh_valid = true;
    s->nh_bf = false;
    s->nh_x = y;
    s->nh_n = rows;
    s->nh_cols = cols;
}

/* Where mmq.cu reads matrix w: Q4_K its GGUF rows, Q6_K prepare's repacked
 * copy (the mv2 one); false: not there (unprepared Q6_K, another type). */
static bool mmq_of(const struct cuda_state *s, const struct omni_btensor *w, struct mmq_w *m)
{
    memset(m, 0, sizeof *m);
    m->type = w->type;
    if (w->type == GGML_TYPE_Q4_K) {
        m->q = (const uint8_t *)w->data;
        m->qrb = ggml_row_size(w->type, w->cols);
        return ((uintptr_t)m->q & 15) == 0;
    }
    const struct f16_copy *c = w->type == GGML_TYPE_Q6_K ? find_copy(s, w) : NULL;
    if (!c || !c->rp)
        return false;
    const size_t nb = (size_t)w->rows * (w->cols / 256);
    m->q = (const uint8_t *)c->rp;
    m->sc = (const int8_t *)(m->q + nb * 192);
    m->d = (const uint16_t *)(m->q + nb * 208);
    m->qrb = (size_t)(w->cols / 256) * 192;
    return true;
}

static int int8_max(const struct cuda_state *s, int type);

/* Whether matmul_impl multiplies w by n rows on mmq.cu's kernels. */
static bool mmq_takes(const struct cuda_state *s, const struct omni_btensor *w, int n)
{
    struct mmq_w m;
    return n <= s->mmq_max && n > int8_max(s, w->type) && !s->f32_act &&
           mmq_shape_ok(w->type, w->rows, w->cols, n) && mmq_of(s, w, &m);
}

/* y = w x on mmq.cu's kernels (mmq_takes said yes), the activations
 * quantized once for the products on the same x. */
static int mmq_run(struct cuda_state *s, const struct omni_btensor *w, const float *x, int n,
                   float *y)
{
    const int cols = (int)w->cols;
    if (!(s->nm_valid && s->nm_x == x && s->nm_n == n && s->nm_cols == cols)) {
        s->nm_valid = false;
        if (((uintptr_t)x & 15) != 0)
            return OMNI_ERR_UNSUPPORTED;
        int rc = grow_bytes(s, &s->xm, &s->xm_cap, mmq_act_bytes(n, cols));
        if (rc < 0)
            return rc;
        if ((rc = chk(mmq_quantize(x, n, cols, s->xm, s->stream), "mmq quantize")) < 0)
            return rc;
        s->nm_valid = true;
        s->nm_x = x;
        s->nm_n = n;
        s->nm_cols = cols;
    }
    struct mmq_w m;
    mmq_of(s, w, &m);
    int rc = chk(mmq_product(&m, (int)w->rows, cols, n, s->xm, y, s->n_sm, s->mmq_ks, s->stream),
                 "mmq product");
    return rc;
}

/* The most rows a product with weights of type takes on the int8 matvec. */
static int int8_max(const struct cuda_state *s, int type)
{
    return is_kquant(type) && s->int8_rows_k < s->int8_rows ? s->int8_rows_k : s->int8_rows;
}

/* Whether matmul_impl multiplies w by n rows through the F16 GEMM (not the
 * int8 or F32 matvecs). */
static bool gemm_path(const struct cuda_state *s, const struct omni_btensor *w, int n)
{
    return is_quant(w->type) && (n > int8_max(s, w->type) || s->f32_act) && n > MATVEC_MAX &&
           !mmq_takes(s, w, n);
}

/* The F16 copies of w[0..nw) when a prepare_group put them in one
 * allocation in this order (one GEMM over all their rows takes them), and
 * the GEMM path takes n rows for each; else NULL. */
static const __half *cat_copies(const struct cuda_state *s, int nw,
                                const struct omni_btensor *const *w, int n)
{
    const __half *h0 = NULL;
    int64_t off = 0;
    for (int i = 0; i < nw; i++) {
        const struct f16_copy *c = gemm_path(s, w[i], n) ? find_copy(s, w[i]) : NULL;
        if (!c || !c->h || (i > 0 && c->h != h0 + off) || w[i]->cols != w[0]->cols)
            return NULL;
        if (i == 0)
            h0 = c->h;
        off += c->rows * c->cols;
    }
    return h0;
}

/* out[k] = rows o.rows[k] of the concatenated GEMM output c ([n][total]),
 * token by token: the layout of separate products */
struct cat_out {
    float *y[3];
    int rows[3];
    int n;
};

__global__ void k_uncat(const float *__restrict__ c, int total, int64_t count, struct cat_out o)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    const int64_t t = i / total;
    int j = (int)(i % total), k = 0;
    while (k < o.n - 1 && j >= o.rows[k])
        j -= o.rows[k++];
    o.y[k][t * o.rows[k] + j] = c[i];
}

/* y = silu(gate) * up from the concatenated output c ([n][2 rows]: gate's
 * rows, then up's), the expression of k_swiglu */
__global__ void k_swiglu_cat(const float *__restrict__ c, int rows, int64_t count,
                             float *__restrict__ y, __half *h)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    const int64_t t = i / rows;
    const int j = (int)(i % rows);
    const float g = c[t * 2 * rows + j];
    const float v = c[t * 2 * rows + rows + j] * (g / (1.0f + expf(-g)));
    y[i] = v;
    if (h)
        h[i] = __float2half_rn(v);
}

/* Split-K (OMNI_CUDA_SPLITK): a batched step's GEMM has few output tiles
 * (n <= 64 columns: 16 tiles of 128 rows for a 2048-row o product), so
 * most SMs idle while each tile walks all of K. As S products over K / S
 * (one strided-batched call) and a sum, the card gets S times the tiles.
 * S is OMNI_CUDA_SPLITK's fixed value, or with =auto the most (up to 8)
 * that keep the tiles times S within the SMs' count, K-slices of at least
 * 512; 1: none. */
#define LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's split-K partial sums */

static int splitk_for(const struct cuda_state *s, int rows, int n, int cols)
{
    if (n > 64 || !s->splitk)
        return 1;
    if (s->splitk > 1)
        return rows <= 32768 && cols % (8 * s->splitk) == 0 ? s->splitk : 1;
    const int tiles = (rows + 127) / 128;
    int S = 1;
    while (S < 8 && tiles * S * 2 <= s->n_sm && cols % (16 * S) == 0 && cols / (2 * S) >= 512)
        S *= 2;
    return S;
}

/* y[n][rows] = x . A^T through cuBLAS on F16 (x in xh: f16_input): up to
 * lt_max rows with the cuBLASLt algorithm timed for the shape at prepare
 * (gemm_lt.h), else cublasGemmEx, split over K where splitk_for says. The split's scratch is made outside a
 * graph capture and never moves; a capture that would need more runs the
 * plain GEMM. */
static int gemm_f16(struct cuda_state *s, const __half *A, int rows, int n, int cols, float *y)
{
    const float one = 1.0f, zero = 0.0f;
    if (s->lt && n >= 2 && n <= s->lt_max) {
        if (gemm_lt_run(s->lt, s->stream, A, rows, n, cols, s->xh, y))
            return 0;
    }
    const int S = splitk_for(s, rows, n, cols);
    if (S > 1) {
        const size_t need = (size_t)S * n * rows;
        if (!s->sk && !s->capturing) {
            /* the largest case: fixed S, 64 rows of 32768 outputs; auto,
             * S x rows within one 128-row tile an SM */
            const size_t cap = s->splitk > 1 ? (size_t)s->splitk * 64 * 32768
                                             : (size_t)64 * 128 * s->n_sm;
            if (cudaMalloc((void **)&s->sk, cap * sizeof(float)) == cudaSuccess)
                s->sk_cap = cap;
            else
                cudaGetLastError();
        }
        if (need <= s->sk_cap) {
            const int kc = cols / S;
            int rc;
            if ((rc = chk_blas(cublasGemmStridedBatchedEx(
                                   s->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, kc, &one, A,
                                   CUDA_R_16F, cols, kc, s->xh, CUDA_R_16F, cols, kc, &zero,
                                   s->sk, CUDA_R_32F, rows, (long long)rows * n, S,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                               "gemm f16 split-k")) < 0)
                return rc;
            const int64_t ny = (int64_t)n * rows;
            k_sum_slices<<<blocks_for(ny, 256), 256, 0, s->stream>>>(s->sk, S, ny, y);
            return chk_launch("split-k sum");
        }
    }
    return chk_blas(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, A,
                                 CUDA_R_16F, cols, s->xh, CUDA_R_16F, cols, &zero, y, CUDA_R_32F,
                                 rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "gemm f16");
}

/* y[n][rows] = x . W^T for BF16 weights W through cuBLAS on BF16 inputs
 * (x rounded to BF16 by bf16_input), F32 accumulation. Not through an F16
 * copy as the quantized types: BF16 has F32's exponent range, so a weight
 * beyond F16's 65504 would become inf there (and one below 2^-24 zero),
 * and clamping would change the model. Read as it is, the GGUF data needs
 * no copy and no memory beyond the weights; the price is the activations'
 * precision (8 significant bits where F16 keeps 11: a relative error of up
 * to 2^-9 each; the CPU multiplies F32 activations, dequantize + sgemm). */
static int gemm_bf16(struct cuda_state *s, const __nv_bfloat16 *W, int rows, int n, int cols,
                     const float *x, float *y)
{
    int rc = bf16_input(s, x, n, cols);
    if (rc < 0)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    return chk_blas(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W,
                                 CUDA_R_16BF, cols, s->xh, CUDA_R_16BF, cols, &zero, y, CUDA_R_32F,
                                 rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "gemm bf16");
}

/* One GEMM of n rows over the nw matrices of w (cat_copies' h0, total
 * rows) into gc; OMNI_ERR_UNSUPPORTED when gc is too small. */
static int gemm_cat_run(struct cuda_state *s, const __half *h0, int total, int cols,
                        const float *x, int n)
{
    if ((size_t)n * total > s->gc_cap)
        return OMNI_ERR_UNSUPPORTED;
    int rc = f16_input(s, x, n, cols);
    if (rc < 0)
        return rc;
    return gemm_f16(s, h0, total, n, cols, s->gc);
}

static int cuda_matmul(struct omni_backend *be, const struct omni_btensor *w, const float *x, int n,
                       float *y)
{
    if (skipped(be, SKIP_MM))
        return 0;
    flush_pending(be); /* (a fused norm's y: only matmul_multi / _glu apply its 1 / rms) */
    const int rc = matmul_impl(be, w, x, n, y);
    wrote(st(be), y, (int64_t)n * w->rows);
    return rc;
}

static int matmul_impl(struct omni_backend *be, const struct omni_btensor *w, const float *x,
                       int n, float *y)
{
    struct cuda_state *s = st(be);
    if (!cuda_supports(be, w->type) || !quant_chunk_ok(w) || w->rows > INT32_MAX ||
        w->cols > INT32_MAX)
        return OMNI_ERR_UNSUPPORTED;
    if (n < 1)
        return 0;
    const int rows = (int)w->rows, cols = (int)w->cols;
    const size_t rb = ggml_row_size(w->type, w->cols);
    const uint8_t *W = (const uint8_t *)w->data;
    if (mmq_takes(s, w, n)) {
        const int rc = mmq_run(s, w, x, n, y);
        if (rc != OMNI_ERR_UNSUPPORTED)
            return rc;
    }
    if (is_quant(w->type) && n <= int8_max(s, w->type) && !s->f32_act) {
        /* as the CPU below its BLAS switch point: Q8_0 activations, integer dots */
        int8_t *xq;
        float *xd;
        int rc = quant_act(s, x, n, cols, &xq, &xd);
        if (rc < 0)
            return rc;
        mv2m m;
        if (n == 1 && mv2_of(s, w, &m) && s->tp) {
            /* held back: an add_rmsnorm of y next takes it into its launch */
            *s->tp = (struct tail_pend){ .kind = 1, .m = m, .type = w->type, .rows = rows,
                                         .y = y, .np = cols / 32, .xq = xq, .xd = xd };
            return 0;
        }
        if (n == 1 && mv2_of(s, w, &m)) {
            switch (w->type) {
            case GGML_TYPE_Q4_K: launch_mv2<GGML_TYPE_Q4_K>(m, rows, cols / 32, xq, xd, y, s->stream); break;
            case GGML_TYPE_Q5_K: launch_mv2<GGML_TYPE_Q5_K>(m, rows, cols / 32, xq, xd, y, s->stream); break;
            case GGML_TYPE_Q6_K: launch_mv2<GGML_TYPE_Q6_K>(m, rows, cols / 32, xq, xd, y, s->stream); break;
            default: launch_mv2<GGML_TYPE_Q8_0>(m, rows, cols / 32, xq, xd, y, s->stream); break;
            }
            return chk_launch("matvec mv2");
        }
        for (int r0 = 0; r0 < n; r0 += MATVEC_Q8_MAX) {
            const int m = n - r0 < MATVEC_Q8_MAX ? n - r0 : MATVEC_Q8_MAX;
            const int8_t *q = xq + (size_t)r0 * cols;
            const float *d = xd + (size_t)r0 * (cols / 32);
            float *yr = y + (size_t)r0 * rows;
            switch (w->type) {
            case GGML_TYPE_Q8_0: launch_matvec_q8<GGML_TYPE_Q8_0>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q4_0: launch_matvec_q8<GGML_TYPE_Q4_0>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q4_K: launch_matvec_q8<GGML_TYPE_Q4_K>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q6_K: launch_matvec_q8<GGML_TYPE_Q6_K>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q5_K: launch_matvec_q8<GGML_TYPE_Q5_K>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q5_0: launch_matvec_q8<GGML_TYPE_Q5_0>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q4_1: launch_matvec_q8<GGML_TYPE_Q4_1>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            case GGML_TYPE_Q5_1: launch_matvec_q8<GGML_TYPE_Q5_1>(W, rb, rows, cols, q, d, m, yr, s->stream); break;
            }
        }
        return chk_launch("matvec q8");
    }
    if (n <= MATVEC_MAX) {
        switch (w->type) {
        case GGML_TYPE_F32: launch_matvec_f((const float *)W, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_F16: launch_matvec_f((const __half *)W, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_BF16: launch_matvec_f((const __nv_bfloat16 *)W, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q4_0: launch_matvec_q<GGML_TYPE_Q4_0>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q8_0: launch_matvec_q<GGML_TYPE_Q8_0>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q4_K: launch_matvec_q<GGML_TYPE_Q4_K>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q6_K: launch_matvec_q<GGML_TYPE_Q6_K>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q5_K: launch_matvec_q<GGML_TYPE_Q5_K>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q5_0: launch_matvec_q<GGML_TYPE_Q5_0>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q4_1: launch_matvec_q<GGML_TYPE_Q4_1>(W, rb, rows, cols, x, n, y, s->stream); break;
        case GGML_TYPE_Q5_1: launch_matvec_q<GGML_TYPE_Q5_1>(W, rb, rows, cols, x, n, y, s->stream); break;
        }
        return chk_launch("matvec");
    }
    const float one = 1.0f, zero = 0.0f;
    /* column-major view: C[rows][n] = op(A = W^T stored [cols][rows])^T . B[cols][n] */
    if (w->type == GGML_TYPE_F32) {
        const int rc = chk_blas(cublasSgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one,
                                            (const float *)W, cols, x, cols, &zero, y, rows),
                                "sgemm");
        return rc;
    }
    if (w->type == GGML_TYPE_BF16)
        return gemm_bf16(s, (const __nv_bfloat16 *)W, rows, n, cols, x, y);
    int rc;
    const __half *A = (const __half *)W;
    const struct f16_copy *fc = w->type != GGML_TYPE_F16 ? find_copy(s, w) : NULL;
    if (fc && fc->h) /* prepare's copy: no dequantization */
        A = fc->h;
    if (w->type != GGML_TYPE_F16 && A == (const __half *)W) {
        if (s->capturing)
            return OMNI_ERR_LIMIT;
        if ((rc = grow(&s->wh, &s->wh_cap, (size_t)rows * cols)) < 0)
            return rc;
        const int64_t chunks = (int64_t)rows * (cols / 32);
        const unsigned g = blocks_for(chunks, 256);
        switch (w->type) {
        case GGML_TYPE_Q4_0: k_dequant_f16<GGML_TYPE_Q4_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q8_0: k_dequant_f16<GGML_TYPE_Q8_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q4_K: k_dequant_f16<GGML_TYPE_Q4_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q6_K: k_dequant_f16<GGML_TYPE_Q6_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q5_K: k_dequant_f16<GGML_TYPE_Q5_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q5_0: k_dequant_f16<GGML_TYPE_Q5_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q4_1: k_dequant_f16<GGML_TYPE_Q4_1><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        case GGML_TYPE_Q5_1: k_dequant_f16<GGML_TYPE_Q5_1><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, s->wh); break;
        }
        if ((rc = chk_launch("dequant")) < 0)
            return rc;
        A = s->wh;
    }
    if ((rc = f16_input(s, x, n, cols)) < 0)
        return rc;
    rc = gemm_f16(s, A, rows, n, cols, y);
    return rc;
}

#define MV_CASES(X) \
    X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)

/* Whether matmul_multi / matmul_glu take their one-launch path: quantized
 * matrices on int8 activations, at most MATVEC_Q8_MAX rows. */
static bool fused_ok(const struct cuda_state *s, const struct omni_btensor *w, int cols, int n)
{
    return !s->f32_act && n <= MATVEC_Q8_MAX && n <= int8_max(s, w->type) &&
           is_quant(w->type) && quant_chunk_ok(w) &&
           w->cols == cols && w->rows <= INT32_MAX && w->cols <= INT32_MAX;
}

static int cuda_matmul_multi(struct omni_backend *be, int nw, const struct omni_btensor *const *w,
                             const float *x, int n, float *const *y)
{
    if (skipped(be, SKIP_MM))
        return 0;
    struct cuda_state *s = st(be);
    tail_flush(be);
    if (nw < 1 || nw > 3)
        return OMNI_ERR_ARG;
    if (n < 1)
        return 0;
    const int cols = (int)w[0]->cols;
    bool one = true;
    for (int i = 0; i < nw; i++)
        one = one && fused_ok(s, w[i], cols, n);
    mv2_segs sg2;
    bool two = one && n == 1; /* the one-row mv2 kernel: it applies a fused norm's 1 / rms */
    for (int i = 0; two && i < nw; i++)
        two = mv2_of(s, w[i], &sg2.m[i]) && !pn_hits(s, y[i], (int64_t)n * w[i]->rows);
    if (!two || (s->pn_on && x != s->pn.y))
        norm_flush(be);
    int rc = 0;
    const __half *h0 = !one && (s->gemm_cat & 2) && nw > 1 ? cat_copies(s, nw, w, n) : NULL;
    if (h0) { /* one GEMM over the matrices' rows, then each its part */
        struct cat_out o = {};
        int total = 0;
        o.n = nw;
        for (int i = 0; i < nw; i++) {
            o.y[i] = y[i];
            o.rows[i] = (int)w[i]->rows;
            total += o.rows[i];
        }
        rc = gemm_cat_run(s, h0, total, cols, x, n);
        if (rc >= 0) {
            const int64_t count = (int64_t)n * total;
            k_uncat<<<blocks_for(count, 256), 256, 0, s->stream>>>(s->gc, total, count, o);
            for (int i = 0; i < nw; i++)
                wrote(s, y[i], (int64_t)n * w[i]->rows);
            return chk_launch("gemm cat split");
        }
        if (rc != OMNI_ERR_UNSUPPORTED)
            return rc;
        rc = 0;
    }
    if (!one) { /* one product after the other (xq reused when int8) */
        for (int i = 0; rc >= 0 && i < nw; i++) {
            tail_flush(be); /* one held back at a time */
            rc = matmul_impl(be, w[i], x, n, y[i]);
        }
        for (int i = 0; i < nw; i++)
            wrote(s, y[i], (int64_t)n * w[i]->rows);
        return rc;
    }
    int8_t *xq;
    float *xd;
    nscale ns;
    if ((rc = quant_act(s, x, n, cols, &xq, &xd, two ? &ns : NULL)) < 0)
        return rc;
    if (two) {
        const int np = cols / 32, tpr = mv2_tpr(np);
        int b = 0;
        sg2.n = nw;
        for (int i = 0; i < 3; i++) {
            if (i >= nw)
                sg2.m[i] = sg2.m[0];
            sg2.y[i] = i < nw ? y[i] : NULL;
            sg2.rows[i] = i < nw ? (int)w[i]->rows : 0;
            sg2.b0[i] = b;
            b += i < nw ? (int)blocks_for(w[i]->rows, MV2_BLOCK / tpr) : 0;
        }
        launch_mv2_seg(sg2, (unsigned)b, tpr, np, (const int8_t *)xq, (const float *)xd, ns, s->stream);
        if (ns.ss && s->pn_on && s->pn.y == ns.y)
            s->pn_on = false; /* its blocks write y */
        for (int i = 0; i < nw; i++)
            wrote(s, y[i], (int64_t)n * w[i]->rows);
        return chk_launch("matvec mv2 q/k/v");
    }
    mv_segs sg;
    memset(&sg, 0, sizeof sg);
    sg.n = nw;
    int blocks = 0;
    bool ext = false; /* a type beyond Q4_0 / Q8_0 / Q4_K / Q6_K */
    for (int i = 0; i < nw; i++) {
        ext = ext || (w[i]->type != GGML_TYPE_Q4_0 && w[i]->type != GGML_TYPE_Q8_0 &&
                      w[i]->type != GGML_TYPE_Q4_K && w[i]->type != GGML_TYPE_Q6_K);
        sg.s[i].W = (const uint8_t *)w[i]->data;
        sg.s[i].rb = ggml_row_size(w[i]->type, w[i]->cols);
        sg.s[i].y = y[i];
        sg.s[i].rows = (int)w[i]->rows;
        sg.s[i].type = w[i]->type;
        sg.s[i].b0 = blocks;
        blocks += (int)blocks_for(w[i]->rows, MV_WARPS);
    }
    switch (n) {
#define C(N) case N: \
        if (ext) \
            k_matvec_seg<N, true><<<blocks, MV_WARPS * 32, 0, s->stream>>>(sg, cols, xq, xd); \
        else \
            k_matvec_seg<N, false><<<blocks, MV_WARPS * 32, 0, s->stream>>>(sg, cols, xq, xd); \
        break;
        MV_CASES(C)
#undef C
    }
    for (int i = 0; i < nw; i++)
        wrote(s, y[i], (int64_t)n * w[i]->rows);
    return chk_launch("matvec q/k/v");
}

/* k_matvec_glu for one activation row with its output also as Q8_0 (for
 * the down projection: no quantization launch): a block of 32 warps takes
 * 32 consecutive rows, one 32-value block of the output; rows % 32 == 0. */
template <int T>
__global__ void __launch_bounds__(1024)
    k_matvec_glu_q(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu, size_t rb,
                   int rows, int cols, const int8_t *__restrict__ xq,
                   const float *__restrict__ xd, float *__restrict__ y, int8_t *__restrict__ oq,
                   float *__restrict__ oqd)
{
    __shared__ float vals[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int r = blockIdx.x * 32 + wid;
    float g = 0.0f, u = 0.0f;
    dot_q8<T, 1>(Wg + (size_t)r * rb, cols >> 5, cols, xq, xd, &g, lane);
    dot_q8<T, 1>(Wu + (size_t)r * rb, cols >> 5, cols, xq, xd, &u, lane);
    const float gs = warp_sum(g), us = warp_sum(u);
    if (lane == 0)
        vals[wid] = us * (gs / (1.0f + expf(-gs)));
    __syncthreads();
    if (wid == 0)
        norm_out<true>(y + blockIdx.x * 32, lane, vals[lane], oq + blockIdx.x * 32,
                       oqd + blockIdx.x);
}

template <int T>
static void launch_glu(const uint8_t *Wg, const uint8_t *Wu, size_t rb, int rows, int cols,
                       const int8_t *xq, const float *xd, int n, float *y, cudaStream_t s)
{
    const unsigned g = blocks_for(rows, MV_WARPS);
    switch (n) {
#define C(N) case N: k_matvec_glu<T, N><<<g, MV_WARPS * 32, 0, s>>>(Wg, Wu, rb, rows, cols, xq, xd, y); break;
        MV_CASES(C)
#undef C
    }
}

static int cuda_matmul_glu(struct omni_backend *be, const struct omni_btensor *wg,
                           const struct omni_btensor *wu, const float *x, int n, float *y)
{
    if (skipped(be, SKIP_MM))
        return 0;
    struct cuda_state *s = st(be);
    tail_flush(be);
    if (n < 1)
        return 0;
    const int cols = (int)wg->cols;
    int rc;
    const struct omni_btensor *const wgu[2] = { wg, wu };
    const __half *h0 = (s->gemm_cat & 1) && wg->rows == wu->rows && wg->rows <= INT32_MAX / 2
                           ? cat_copies(s, 2, wgu, n) : NULL;
    if (h0) { /* gate and up as one GEMM, then SwiGLU from its output */
        const int rows = (int)wg->rows;
        norm_flush(be);
        rc = gemm_cat_run(s, h0, 2 * rows, cols, x, n);
        if (rc >= 0) {
            const int64_t count = (int64_t)n * rows;
            __half *h = f16_out(s, n, rows);
            k_swiglu_cat<<<blocks_for(count, 256), 256, 0, s->stream>>>(s->gc, rows, count, y, h);
            wrote(s, y, count);
            f16_done(s, h, y, n, rows);
            return chk_launch("gemm cat swiglu");
        }
        if (rc != OMNI_ERR_UNSUPPORTED)
            return rc;
    }
    if (!fused_ok(s, wg, cols, n) || !fused_ok(s, wu, cols, n) || wg->type != wu->type ||
        wg->rows != wu->rows) {
        /* gate into y, up into the scratch of F32 rows, then SwiGLU: the
         * plain ops with y as the gate */
        return OMNI_ERR_UNSUPPORTED;
    }
    const uint8_t *Wg = (const uint8_t *)wg->data, *Wu = (const uint8_t *)wu->data;
    const size_t rb = ggml_row_size(wg->type, wg->cols);
    const int rows = (int)wg->rows;
    /* one row: the output as Q8_0 too, into xq2 (allocated on first use,
     * outside a capture, and never moved after) */
    const size_t need = (size_t)rows + (size_t)(rows / 32) * sizeof(float);
    if (n == 1 && rows % 32 == 0 && !s->xq2 && !s->capturing) {
        if (cudaMalloc(&s->xq2, need) == cudaSuccess) {
            s->xq2_cap = need;
        } else {
            s->xq2 = NULL;
            cudaGetLastError(); /* no room: the plain path below */
        }
    }
    const bool q8out = n == 1 && rows % 32 == 0 && s->xq2 && need <= s->xq2_cap;
    mv2m mg, mu;
    const bool two = q8out && mv2_of(s, wg, &mg) && mv2_of(s, wu, &mu);
    /* k_mv2_glu_q16 applies a fused norm's 1 / rms; the others want y */
    const bool scales = two && mv2_glu16 && !pn_hits(s, y, rows);
    if (!scales || (s->pn_on && x != s->pn.y))
        norm_flush(be);
    int8_t *xq;
    float *xd;
    nscale ns;
    if ((rc = quant_act(s, x, n, cols, &xq, &xd, scales ? &ns : NULL)) < 0)
        return rc;
    if (q8out && xq != (int8_t *)s->xq2) {
        int8_t *oq = (int8_t *)s->xq2;
        float *oqd = (float *)(oq + rows);
        const unsigned g = (unsigned)(rows / 32);
        if (two) {
            const int np = cols / 32;
            if (mv2_glu16) {
                const dim3 gd(g), bd(512);
                const int8_t *cq = xq;
                const float *cd = xd;
                switch (wg->type * 4 + mv2_glu_v) {
                case GGML_TYPE_Q4_K * 4 + 1: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q4_K, 1, 2>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q4_K * 4 + 2: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q4_K, 2, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q4_K * 4: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q4_K, 1, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q5_K * 4 + 1: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q5_K, 1, 2>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q5_K * 4 + 2: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q5_K, 2, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q5_K * 4: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q5_K, 1, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q6_K * 4 + 1: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q6_K, 1, 2>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q6_K * 4 + 2: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q6_K, 2, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q6_K * 4: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q6_K, 1, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q8_0 * 4 + 1: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q8_0, 1, 2>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                case GGML_TYPE_Q8_0 * 4 + 2: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q8_0, 2, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                default: launch_pdl(k_mv2_glu_q16<GGML_TYPE_Q8_0, 1, 1>, gd, bd, s->stream, mg, mu, np, cq, cd, y, oq, oqd, ns); break;
                }
            } else switch (wg->type) {
            case GGML_TYPE_Q4_K: launch_pdl(k_mv2_glu_q<GGML_TYPE_Q4_K>, dim3(g), dim3(1024), s->stream, mg, mu, np, (const int8_t *)xq, (const float *)xd, y, oq, oqd); break;
            case GGML_TYPE_Q5_K: launch_pdl(k_mv2_glu_q<GGML_TYPE_Q5_K>, dim3(g), dim3(1024), s->stream, mg, mu, np, (const int8_t *)xq, (const float *)xd, y, oq, oqd); break;
            case GGML_TYPE_Q6_K: launch_pdl(k_mv2_glu_q<GGML_TYPE_Q6_K>, dim3(g), dim3(1024), s->stream, mg, mu, np, (const int8_t *)xq, (const float *)xd, y, oq, oqd); break;
            default: launch_pdl(k_mv2_glu_q<GGML_TYPE_Q8_0>, dim3(g), dim3(1024), s->stream, mg, mu, np, (const int8_t *)xq, (const float *)xd, y, oq, oqd); break;
            }
        } else {
            switch (wg->type) {
            case GGML_TYPE_Q8_0: k_matvec_glu_q<GGML_TYPE_Q8_0><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q4_0: k_matvec_glu_q<GGML_TYPE_Q4_0><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q4_K: k_matvec_glu_q<GGML_TYPE_Q4_K><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q6_K: k_matvec_glu_q<GGML_TYPE_Q6_K><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q5_K: k_matvec_glu_q<GGML_TYPE_Q5_K><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q5_0: k_matvec_glu_q<GGML_TYPE_Q5_0><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q4_1: k_matvec_glu_q<GGML_TYPE_Q4_1><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            case GGML_TYPE_Q5_1: k_matvec_glu_q<GGML_TYPE_Q5_1><<<g, 1024, 0, s->stream>>>(Wg, Wu, rb, rows, cols, xq, xd, y, oq, oqd); break;
            }
        }
        if (ns.ss && s->pn_on && s->pn.y == ns.y)
            s->pn_on = false; /* its blocks write y */
        s->nq_valid = true;
        s->nq_ns.ss = NULL;
        s->nq_x = y;
        s->nq_n = 1;
        s->nq_cols = rows;
        s->nq_buf = oq;
        return chk_launch("matvec glu q8");
    }
    switch (wg->type) {
    case GGML_TYPE_Q8_0: launch_glu<GGML_TYPE_Q8_0>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q4_0: launch_glu<GGML_TYPE_Q4_0>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q4_K: launch_glu<GGML_TYPE_Q4_K>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q6_K: launch_glu<GGML_TYPE_Q6_K>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q5_K: launch_glu<GGML_TYPE_Q5_K>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q5_0: launch_glu<GGML_TYPE_Q5_0>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q4_1: launch_glu<GGML_TYPE_Q4_1>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    case GGML_TYPE_Q5_1: launch_glu<GGML_TYPE_Q5_1>(Wg, Wu, rb, rows, cols, xq, xd, n, y, s->stream); break;
    }
    wrote(s, y, (int64_t)n * rows);
    return chk_launch("matvec glu");
}

/* prepare: for quantized matrix w, an F16 copy for the GEMM path (see the
 * top; not with OMNI_CUDA_NO_F16_CACHE / OMNI_CUDA_F16_CACHE=0) and the
 * one-row matvec's repacked copy (Q5_K, Q6_K, Q8_0; Q4_K needs none); 0
 * also when there is no memory for them (the per-call paths stay). */
static bool preparable(const struct cuda_state *s, const struct omni_btensor *w)
{
    return is_quant(w->type) && quant_chunk_ok(w) && w->rows <= INT32_MAX &&
           w->cols <= INT32_MAX && !s->capturing && !find_copy(s, w);
}

/* prepare's work for w; its F16 copy into at when not NULL (part of a
 * group's allocation, whose first copy is base), else into its own */
static int prepare_one(struct cuda_state *s, const struct omni_btensor *w, __half *at,
                       __half *base)
{
    if (s->n_f16 == s->cap_f16) {
        const int cap = s->cap_f16 ? 2 * s->cap_f16 : 256;
        struct f16_copy *t = (struct f16_copy *)realloc(s->f16, (size_t)cap * sizeof *t);
        if (!t)
            return OMNI_ERR_NOMEM;
        s->f16 = t;
        s->cap_f16 = cap;
    }
    const int rows = (int)w->rows, cols = (int)w->cols;
    const size_t rb = ggml_row_size(w->type, w->cols);
    const uint8_t *W = (const uint8_t *)w->data;
    __half *h = NULL;
    void *rp = NULL;
    int rc = 0;
#ifndef OMNI_CUDA_NO_F16_CACHE
    if (!s->f16_off) {
        if (at) {
            h = at;
        } else if (cudaMalloc((void **)&h, (size_t)rows * cols * sizeof(__half)) != cudaSuccess) {
            cudaGetLastError(); /* no room: this matrix keeps the per-call path */
            h = NULL;
        }
        if (h) {
            const unsigned g = blocks_for((int64_t)rows * (cols / 32), 256);
            switch (w->type) {
            case GGML_TYPE_Q4_0: k_dequant_f16<GGML_TYPE_Q4_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q8_0: k_dequant_f16<GGML_TYPE_Q8_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q4_K: k_dequant_f16<GGML_TYPE_Q4_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q6_K: k_dequant_f16<GGML_TYPE_Q6_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q5_K: k_dequant_f16<GGML_TYPE_Q5_K><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q5_0: k_dequant_f16<GGML_TYPE_Q5_0><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q4_1: k_dequant_f16<GGML_TYPE_Q4_1><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            case GGML_TYPE_Q5_1: k_dequant_f16<GGML_TYPE_Q5_1><<<g, 256, 0, s->stream>>>(W, rb, rows, cols, h); break;
            }
            rc = chk_launch("prepare f16");
        }
    }
#endif
    const bool repack = w->type == GGML_TYPE_Q5_K || w->type == GGML_TYPE_Q6_K ||
                        w->type == GGML_TYPE_Q8_0;
    if (rc >= 0 && repack) {
        if (cudaMalloc(&rp, rb * rows) != cudaSuccess) {
            cudaGetLastError(); /* no room: k_matvec_q8 on the GGUF layout */
            rp = NULL;
        } else if (w->type == GGML_TYPE_Q6_K) {
            const int64_t n = (int64_t)rows * (cols / 256);
            uint8_t *q = (uint8_t *)rp;
            k_repack_q6k<<<blocks_for(n, 256), 256, 0, s->stream>>>(
                W, n, q, q + n * 192, (uint16_t *)(q + n * 208));
            rc = chk_launch("prepare repack q6_k");
        } else if (w->type == GGML_TYPE_Q5_K) {
            const int64_t n = (int64_t)rows * (cols / 256);
            k_repack_q5k<<<blocks_for(n, 256), 256, 0, s->stream>>>(W, n, (uint8_t *)rp);
            rc = chk_launch("prepare repack q5_k");
        } else {
            const int64_t n = (int64_t)rows * (cols / 32);
            uint8_t *q = (uint8_t *)rp;
            k_repack_q8_0<<<blocks_for(n, 256), 256, 0, s->stream>>>(W, n, q,
                                                                    (uint16_t *)(q + n * 32));
            rc = chk_launch("prepare repack q8_0");
        }
    }
    if (rc < 0) {
        if (!at)
            cudaFree(h);
        cudaFree(rp);
        return rc;
    }
    const bool mv2 = w->type == GGML_TYPE_Q4_K || (repack && rp);
    if (!h && !mv2)
        return 0;
    struct f16_copy *c = &s->f16[s->n_f16++];
    c->w = w->data;
    c->h = h;
    c->base = at ? base : h;
    c->rp = rp;
    c->rows = w->rows;
    c->cols = w->cols;
    c->type = w->type;
    c->mv2 = mv2;
    return h && s->lt ? gemm_lt_tune(s->lt, s->stream, h, rows, cols, s->lt_max) : 0;
}

static int cuda_prepare(struct omni_backend *be, const struct omni_btensor *w)
{
    struct cuda_state *s = st(be);
    flush_pending(be);
    return preparable(s, w) ? prepare_one(s, w, NULL, NULL) : 0;
}

/* prepare_group (backend.h): the F16 copies of w[0..nw) in one allocation,
 * in this order, and the GEMM output scratch sized for 64 rows of the
 * largest group (made here, before any graph records it). Falls back to
 * prepare's separate copies where a condition fails. */
static int cuda_prepare_group(struct omni_backend *be, int nw,
                              const struct omni_btensor *const *w)
{
    struct cuda_state *s = st(be);
    flush_pending(be);
    if (nw < 2 || s->f16_off)
        return 0;
#ifdef OMNI_CUDA_NO_F16_CACHE
    return 0;
#endif
    int64_t total = 0;
    for (int i = 0; i < nw; i++) {
        if (!preparable(s, w[i]) || w[i]->cols != w[0]->cols)
            return 0;
        total += w[i]->rows;
    }
    if (total > INT32_MAX)
        return 0;
    const size_t need = (size_t)64 * total;
    if (need > s->gc_cap) {
        float *g = NULL;
        if (cudaMalloc((void **)&g, need * sizeof(float)) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        cudaFree(s->gc);
        s->gc = g;
        s->gc_cap = need;
    }
    __half *base = NULL;
    if (cudaMalloc((void **)&base, (size_t)total * w[0]->cols * sizeof(__half)) != cudaSuccess) {
        cudaGetLastError(); /* no room in one piece: prepare makes them apart */
        return 0;
    }
    __half *at = base;
    for (int i = 0; i < nw; i++) {
        const int rc = prepare_one(s, w[i], at, base);
        if (rc < 0) {
            if (i == 0)
                cudaFree(base);
            return rc;
        }
        at += w[i]->rows * w[i]->cols;
    }
    /* the one GEMM over the group's rows (gemm_cat_run) */
    return s->lt ? gemm_lt_tune(s->lt, s->stream, base, (int)total, (int)w[0]->cols, s->lt_max) : 0;
}

static size_t cuda_mem_available(struct omni_backend *be)
{
    (void)be;
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return free_b;
}

// ---- rows, norms, elementwise ------------------------------------------------------

/* out[i] = row ids[i] of W: a block per row. */
template <int T>
__global__ void k_get_rows_q(const uint8_t *__restrict__ W, size_t rb, int cols,
                             const int32_t *__restrict__ ids, float *__restrict__ out)
{
    const uint8_t *row = W + (size_t)ids[blockIdx.x] * rb;
    float *o = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols / 32; c += blockDim.x) {
        float w[32];
        dq32<T>(row, c, w);
#pragma unroll
        for (int k = 0; k < 32; k++)
            o[32 * c + k] = w[k];
    }
}

template <typename WT>
__global__ void k_get_rows_f(const WT *__restrict__ W, int cols, const int32_t *__restrict__ ids,
                             float *__restrict__ out)
{
    const size_t r = (size_t)ids[blockIdx.x];
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[(size_t)blockIdx.x * cols + c] = ldw(W, r * cols + c);
}

static int cuda_get_rows(struct omni_backend *be, const struct omni_btensor *w, const int32_t *ids,
                         int n, float *out)
{
    touch(be);
    if (!cuda_supports(be, w->type) || !quant_chunk_ok(w) || w->cols > INT32_MAX)
        return OMNI_ERR_UNSUPPORTED;
    if (n < 1)
        return 0;
    cudaStream_t s = st(be)->stream;
    const int cols = (int)w->cols;
    const size_t rb = ggml_row_size(w->type, w->cols);
    const uint8_t *W = (const uint8_t *)w->data;
    switch (w->type) {
    case GGML_TYPE_F32: k_get_rows_f<<<n, 256, 0, s>>>((const float *)W, cols, ids, out); break;
    case GGML_TYPE_F16: k_get_rows_f<<<n, 256, 0, s>>>((const __half *)W, cols, ids, out); break;
    case GGML_TYPE_BF16: k_get_rows_f<<<n, 256, 0, s>>>((const __nv_bfloat16 *)W, cols, ids, out); break;
    case GGML_TYPE_Q4_0: k_get_rows_q<GGML_TYPE_Q4_0><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q8_0: k_get_rows_q<GGML_TYPE_Q8_0><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q4_K: k_get_rows_q<GGML_TYPE_Q4_K><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q6_K: k_get_rows_q<GGML_TYPE_Q6_K><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q5_K: k_get_rows_q<GGML_TYPE_Q5_K><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q5_0: k_get_rows_q<GGML_TYPE_Q5_0><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q4_1: k_get_rows_q<GGML_TYPE_Q4_1><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    case GGML_TYPE_Q5_1: k_get_rows_q<GGML_TYPE_Q5_1><<<n, 64, 0, s>>>(W, rb, cols, ids, out); break;
    }
    return chk_launch("get_rows");
}

#define NORM_V 16 /* values a thread keeps in registers in a staged norm */
static bool norm_stage = true; /* OMNI_CUDA_NORM_STAGE=0: the strided loop (read at creation) */
/* The staged norm loads its weights with the row, before the sum of
 * squares: after the barrier their loads were a DRAM round trip of their
 * own (the step's weight stream evicts them from L2). Same values and sums.
 * H100 job f_c2: tg128 +10.5% (1B Q4_K_M), +10.2% (Q8_0), +10.2% (7B).
 * OMNI_CUDA_NORM_WPRE=0: after the barrier, as before. */
static bool norm_wpre = true;
/* The norms' Q8_0 blocks a thread a block from a shared copy (norm_q8_smem;
 * OMNI_CUDA_NORM_QS=0: a warp maximum per value, norm_out) */
static bool norm_qs_on = true;
/* threads of a one-row norm block (OMNI_CUDA_NORM_THREADS=128|256|512;
 * 1024 would exceed the register file at the staged norm's 80) */
static int norm_nt = 256;
/* OMNI_CUDA_PRE (bits, default 7): loads that do not depend on the kernel
 * before go out before griddepcontrol.wait, so that their DRAM round trip
 * overlaps that kernel's tail: 1 the norms' weights, 2 rope_kv's angles
 * (positions, inv_freq) and biases, 4 the decode attention's first key
 * tile (one-token steps, ATT_UNROLL=2 kernels: one-token steps take them
 * by default). H100 job f_c3: tg128 with 7 (and the ATT_UNROLL=2 kernels)
 * +5.7% on 1B Q4_K_M, +1.4% on 7B; test_cuda passed with it. */
static int pre_bits = 7;

/* The block's sum of each thread's v, in every thread (blockDim.x a
 * multiple of 32; once a kernel: its shared slots are not fenced for a
 * second call). */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0)
            part[0] = t;
    }
    __syncthreads();
    return part[0];
}

/* One row's RMSNorm (ADD: x += dx first, written back) with the row held in
 * registers, V values a thread (dim <= V * blockDim.x): every load is
 * issued before the first store. The strided loop of k_rmsnorm /
 * k_add_rmsnorm has a store in each iteration, so each iteration waits for
 * its loads in turn: a chain of dim / blockDim L2 round trips for one
 * block. The sums, their order and the values written are the same. */
#define NORM_QS_MAX 8192 /* the widest row whose Q8_0 blocks norm_q8_smem makes */
#define NORM_QS_STRIDE 36 /* floats a 32-value block takes in its shared copy */

/* The Q8_0 form of the dim values in sv (block b at NORM_QS_STRIDE b: the
 * padding keeps the 16-byte loads of 8 threads in distinct banks), a thread
 * a block of 32, as norm_out makes it. */
__device__ __forceinline__ void norm_q8_smem(const float *sv, int dim, int8_t *q, float *qd)
{
    for (int b = threadIdx.x; b < dim / 32; b += blockDim.x) {
        float4 t[8];
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            t[j] = *(const float4 *)(sv + NORM_QS_STRIDE * b + 4 * j);
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(t[j].x), fabsf(t[j].y)),
                                     fmaxf(fabsf(t[j].z), fabsf(t[j].w))));
        }
        float id;
        const float dd = q8_scale(amax, &id);
        uint32_t wq[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            wq[j] = ((uint32_t)(uint8_t)(int8_t)roundf(t[j].x * id)) |
                    ((uint32_t)(uint8_t)(int8_t)roundf(t[j].y * id) << 8) |
                    ((uint32_t)(uint8_t)(int8_t)roundf(t[j].z * id) << 16) |
                    ((uint32_t)(uint8_t)(int8_t)roundf(t[j].w * id) << 24);
        *(uint4 *)(q + 32 * b) = make_uint4(wq[0], wq[1], wq[2], wq[3]);
        *(uint4 *)(q + 32 * b + 16) = make_uint4(wq[4], wq[5], wq[6], wq[7]);
        qd[b] = __half2float(__float2half_rn(dd));
    }
}

/* sv: with Q and dim <= NORM_QS_MAX, shared memory of NORM_QS_MAX / 32
 * blocks of NORM_QS_STRIDE floats: the Q8_0 blocks are then made a thread
 * a block (norm_q8_smem) instead of by a warp maximum per value a thread
 * holds (a chain of shuffles the next product waits for). */
template <bool Q, bool ADD, int V>
__device__ __forceinline__ void norm_row_staged(float *xr, const float *dr, float *yr,
                                                const float *__restrict__ w, int dim, float eps,
                                                int8_t *q, float *qd, bool wpre, bool wait,
                                                float *sv = NULL, __half *h = NULL)
{
    float v[V], wv[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int i = threadIdx.x + k * blockDim.x;
        wv[k] = 0.0f;
        if (wpre && i < dim)
            wv[k] = __ldg(w + i);
    }
    if (wait) /* (OMNI_CUDA_PRE bit 1) the weights' loads are out: now the row */
        pdl_wait();
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int i = threadIdx.x + k * blockDim.x;
        v[k] = 0.0f;
        if (i < dim)
            v[k] = ADD ? __ldcg(xr + i) + __ldcg(dr + i) : __ldcg(xr + i);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < dim) {
            if (ADD)
                xr[i] = v[k];
            ss += v[k] * v[k];
        }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss) / (float)dim + eps);
    if (Q && sv && dim <= NORM_QS_MAX) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < dim) {
                const float y = v[k] * inv * (wpre ? wv[k] : w[i]);
                yr[i] = y;
                sv[NORM_QS_STRIDE * (i >> 5) + (i & 31)] = y;
            }
        }
        __syncthreads();
        norm_q8_smem(sv, dim, q, qd);
        return;
    }
    /* (a warp's 32 values are all in the row or all past it: dim % 32 == 0
     * where Q needs whole warps) */
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < dim) {
            const float y = v[k] * inv * (wpre ? wv[k] : w[i]);
            norm_out<Q>(yr, i, y, q, qd);
            if (h)
                h[i] = __float2half_rn(y);
        }
    }
}

/* The strided norm's end, row blockIdx.x: the block's sum of squares from
 * each thread's ss, then y = x / rms * w (and its Q8_0 form with Q, its
 * F16 form into h when h is set). */
template <bool Q>
__device__ __forceinline__ void norm_strided_out(float ss, const float *xr, float *yr,
                                                 const float *__restrict__ w, int dim, float eps,
                                                 int8_t *q, float *qd, __half *h)
{
    const float inv = 1.0f / sqrtf(block_sum(ss) / (float)dim + eps);
    int8_t *qr = Q ? q + (size_t)blockIdx.x * dim : NULL;
    float *qdr = Q ? qd + (size_t)blockIdx.x * (dim >> 5) : NULL;
    __half *hr = h ? h + (size_t)blockIdx.x * dim : NULL;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] * inv * w[i];
        norm_out<Q>(yr, i, v, qr, qdr);
        if (hr)
            hr[i] = __float2half_rn(v);
    }
}

/* A block of 256 threads per row: sum of squares, then scale (y may be x);
 * Q: the output as Q8_0 too, into q / qd (norm_out). */
template <bool Q>
__global__ void k_rmsnorm(float *y, const float *x, const float *__restrict__ w, int dim, float eps,
                          int8_t *q, float *qd, bool stage, bool wpre, bool pre, bool norm_qs,
                          __half *h)
{
    pdl_trigger(); /* the product after it may start loading its weights */
    const bool staged = stage && dim <= NORM_V * (int)blockDim.x;
    if (!(staged && pre))
        pdl_wait(); /* (OMNI_CUDA_PDL=2) the previous kernel's output */
    if (staged) {
        __shared__ __align__(16) float sv[Q ? NORM_QS_MAX / 32 * NORM_QS_STRIDE : 4];
        norm_row_staged<Q, false, NORM_V>((float *)x + (size_t)blockIdx.x * dim, NULL,
                                          y + (size_t)blockIdx.x * dim, w, dim, eps,
                                          Q ? q + (size_t)blockIdx.x * dim : NULL,
                                          Q ? qd + (size_t)blockIdx.x * (dim >> 5) : NULL, wpre || pre, pre,
                                          norm_qs ? sv : NULL, h ? h + (size_t)blockIdx.x * dim : NULL);
        return;
    }
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    norm_strided_out<Q>(ss, xr, yr, w, dim, eps, q, qd, h);
}

/* Whether a norm of rows x dim writes its Q8_0 form into xq on the way (the
 * int8 products after it then skip their quantization): what they would
 * quantize, in the room xq already has (it never grows here: a graph may
 * be recording). */
static bool norm_quant(struct cuda_state *s, int rows, int dim, int8_t **q, float **qd)
{
    const size_t need = (size_t)rows * dim + (size_t)rows * (dim / 32) * sizeof(float);
    if (s->f32_act || dim % 32 || rows > s->int8_rows || need > s->xq_cap)
        return false;
    *q = (int8_t *)s->xq;
    *qd = (float *)(*q + (size_t)rows * dim);
    return true;
}

static void norm_quant_done(struct cuda_state *s, const float *y, int rows, int dim)
{
    s->nq_buf = (int8_t *)s->xq;
    s->nq_valid = true;
    s->nq_ns.ss = NULL;
    s->nq_x = y;
    s->nq_n = rows;
    s->nq_cols = dim;
}

static int cuda_rmsnorm(struct omni_backend *be, float *y, const float *x, const float *w, int rows,
                        int dim, float eps)
{
    if (skipped(be, SKIP_NORM))
        return 0;
    if (rows < 1)
        return 0;
    struct cuda_state *s = st(be);
    touch(be);
    const int threads = dim >= norm_nt ? norm_nt : (dim + 31) / 32 * 32;
    int8_t *q;
    float *qd;
    if (norm_quant(s, rows, dim, &q, &qd)) {
        launch_pdl_at(2, k_rmsnorm<true>, dim3(rows), dim3(threads), s->stream, y, x, w, dim, eps, q, qd, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, (__half *)NULL);
        norm_quant_done(s, y, rows, dim);
    } else {
        __half *h = f16_out(s, rows, dim);
        k_rmsnorm<false><<<rows, threads, 0, s->stream>>>(y, x, w, dim, eps, NULL, NULL, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, h);
        f16_done(s, h, y, rows, dim);
    }
    return chk_launch("rmsnorm");
}

/* x += dx, then y = x / rms(x) * w: a block of 256 threads per row; each
 * thread reads its dx values before the barrier and writes y after, so y
 * may be dx. */
template <bool Q>
__global__ void k_add_rmsnorm(float *x, const float *dx, float *y, const float *__restrict__ w,
                              int dim, float eps, int8_t *q, float *qd, bool stage, bool wpre,
                              bool pre, bool norm_qs, __half *h)
{
    pdl_trigger(); /* the product after it may start loading its weights */
    const bool staged = stage && dim <= NORM_V * (int)blockDim.x;
    if (!(staged && pre))
        pdl_wait(); /* (OMNI_CUDA_PDL=2) the previous kernel's output */
    if (staged) {
        __shared__ __align__(16) float sv[Q ? NORM_QS_MAX / 32 * NORM_QS_STRIDE : 4];
        norm_row_staged<Q, true, NORM_V>(x + (size_t)blockIdx.x * dim, dx + (size_t)blockIdx.x * dim,
                                         y + (size_t)blockIdx.x * dim, w, dim, eps,
                                         Q ? q + (size_t)blockIdx.x * dim : NULL,
                                         Q ? qd + (size_t)blockIdx.x * (dim >> 5) : NULL, wpre || pre, pre,
                                         norm_qs ? sv : NULL, h ? h + (size_t)blockIdx.x * dim : NULL);
        return;
    }
    float *xr = x + (size_t)blockIdx.x * dim;
    const float *dr = dx + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] + dr[i];
        xr[i] = v;
        ss += v * v;
    }
    norm_strided_out<Q>(ss, xr, yr, w, dim, eps, q, qd, h);
}

static int cuda_add_rmsnorm(struct omni_backend *be, float *x, const float *dx, float *y,
                            const float *w, int rows, int dim, float eps)
{
    if (skipped(be, SKIP_NORM))
        return 0;
    if (tail_try_norm(be, x, dx, y, w, rows, dim, eps))
        return chk_launch("mv2 + add_rmsnorm");
    if (rows < 1)
        return 0;
    struct cuda_state *s = st(be);
    touch(be);
    const int threads = dim >= norm_nt ? norm_nt : (dim + 31) / 32 * 32;
    int8_t *q;
    float *qd;
    if (norm_quant(s, rows, dim, &q, &qd)) {
        launch_pdl_at(2, k_add_rmsnorm<true>, dim3(rows), dim3(threads), s->stream, x, dx, y, w, dim, eps, q, qd, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, (__half *)NULL);
        norm_quant_done(s, y, rows, dim);
    } else {
        __half *h = f16_out(s, rows, dim);
        k_add_rmsnorm<false><<<rows, threads, 0, s->stream>>>(x, dx, y, w, dim, eps, NULL, NULL, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, h);
        f16_done(s, h, y, rows, dim);
    }
    return chk_launch("add_rmsnorm");
}

__global__ void k_add(float *y, const float *x, const float *b, int64_t n, int dim)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += b ? b[i % dim] : x[i];
}

static int cuda_add(struct omni_backend *be, float *y, const float *x, const float *b, int rows,
                    int dim)
{
    if (skipped(be, SKIP_NORM))
        return 0;
    touch(be);
    const int64_t n = (int64_t)rows * dim;
    if (n < 1)
        return 0;
    k_add<<<blocks_for(n, 256), 256, 0, st(be)->stream>>>(y, x, b, n, dim);
    return chk_launch("add");
}

/* RoPE pair p of a head of head_dim = 2 half: the two values it rotates
 * (*a, *c: adjacent, or p and p + half for neox), and cos / sin of its
 * angle at position pos times attn_factor. Every RoPE kernel uses these. */
__device__ __forceinline__ void rope_pair(bool neox, int p, int half, int *a, int *c)
{
    *a = neox ? p : 2 * p;
    *c = neox ? p + half : 2 * p + 1;
}

__device__ __forceinline__ void rope_cs(int32_t pos, const float *inv_freq, int p, float attn_factor,
                                        float *cs, float *sn)
{
    const float angle = (float)pos * inv_freq[p];
    *cs = cosf(angle) * attn_factor;
    *sn = sinf(angle) * attn_factor;
}

/* One thread per (token, head, rotated pair). */
__global__ void k_rope(float *x, const int32_t *__restrict__ pos, int n_tok, int n_head,
                       int head_dim, int half, const float *__restrict__ inv_freq,
                       float attn_factor, bool neox)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n_tok * n_head * half)
        return;
    const int p = (int)(i % half);
    const int64_t th = i / half; /* token * n_head + head */
    const int t = (int)(th / n_head);
    float c, s;
    rope_cs(pos[t], inv_freq, p, attn_factor, &c, &s);
    float *v = x + th * head_dim;
    int a, b;
    rope_pair(neox, p, half, &a, &b);
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
}

static int cuda_rope(struct omni_backend *be, float *x, const int32_t *pos, int n_tok, int n_head,
                     int head_dim, int n_rot, const float *inv_freq, float attn_factor, bool neox)
{
    if (skipped(be, SKIP_ROPE))
        return 0;
    touch(be);
    const int64_t n = (int64_t)n_tok * n_head * (n_rot / 2);
    if (n < 1)
        return 0;
    k_rope<<<blocks_for(n, 256), 256, 0, st(be)->stream>>>(x, pos, n_tok, n_head, head_dim,
                                                           n_rot / 2, inv_freq, attn_factor, neox);
    return chk_launch("rope");
}

__global__ void k_swiglu(const float *__restrict__ g, float *u, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = g[i];
        u[i] *= v / (1.0f + expf(-v));
    }
}

static int cuda_swiglu(struct omni_backend *be, const float *g, float *u, int64_t n)
{
    touch(be);
    if (n < 1)
        return 0;
    k_swiglu<<<blocks_for(n, 256), 256, 0, st(be)->stream>>>(g, u, n);
    return chk_launch("swiglu");
}

// ---- KV and attention ------------------------------------------------------------------

template <typename KT> __device__ __forceinline__ KT to_kv(float v);
template <> __device__ __forceinline__ float to_kv<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to_kv<__half>(float v) { return __float2half_rn(v); }

template <typename KT>
__global__ void k_kv_store(const float *__restrict__ k, const float *__restrict__ v, KT *kc, KT *vc,
                           const int64_t *__restrict__ slot, int n, int kv_dim)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * kv_dim)
        return;
    const int t = (int)(i / kv_dim), e = (int)(i % kv_dim);
    const int64_t at = slot[t] * kv_dim + e;
    kc[at] = to_kv<KT>(k[i]);
    vc[at] = to_kv<KT>(v[i]);
}

static int cuda_kv_store(struct omni_backend *be, const float *k, const float *v, void *kc,
                         void *vc, int kv_type, const int64_t *slot, int n, int kv_dim)
{
    if (skipped(be, SKIP_ROPE))
        return 0;
    touch(be);
    const int64_t total = (int64_t)n * kv_dim;
    if (total < 1)
        return 0;
    cudaStream_t s = st(be)->stream;
    if (kv_type == GGML_TYPE_F16)
        k_kv_store<__half><<<blocks_for(total, 256), 256, 0, s>>>(k, v, (__half *)kc, (__half *)vc,
                                                                  slot, n, kv_dim);
    else if (kv_type == GGML_TYPE_F32)
        k_kv_store<float><<<blocks_for(total, 256), 256, 0, s>>>(k, v, (float *)kc, (float *)vc,
                                                                 slot, n, kv_dim);
    else
        return OMNI_ERR_UNSUPPORTED;
    return chk_launch("kv_store");
}

/* rope_kv (backend.h): one thread per (token, pair) over the q heads, the
 * k heads and the v heads of a row; the same expressions as k_add, k_rope
 * and k_kv_store one after the other. rope_kv_item is work item i (a
 * rotated pair of q or k, or two values of v); q, k, v, which the kernel
 * before wrote, are read through L2 (__ldcg). */
template <typename KT>
__device__ __forceinline__ void rope_kv_item(const struct omni_brope_kv &r, int half, int64_t i)
{
    const int per_tok = (r.n_head + 2 * r.n_head_kv) * half, hd = r.head_dim;
    const int t = (int)(i / per_tok);
    int u = (int)(i % per_tok);
    const int64_t kv_dim = (int64_t)r.n_head_kv * hd;
    if (u >= (r.n_head + r.n_head_kv) * half) { /* v: values 2p, 2p + 1 of a head */
        u -= (r.n_head + r.n_head_kv) * half;
        const int e = (u / half) * hd + 2 * (u % half);
        float *v = r.v + (size_t)t * kv_dim + e;
        float v0 = __ldcg(v), v1 = __ldcg(v + 1);
        if (r.bv) {
            v0 += r.bv[e];
            v1 += r.bv[e + 1];
            v[0] = v0;
            v[1] = v1;
        }
        KT *vc = (KT *)r.vc + r.slot[t] * kv_dim + e;
        vc[0] = to_kv<KT>(v0);
        vc[1] = to_kv<KT>(v1);
        return;
    }
    const bool is_q = u < r.n_head * half;
    if (!is_q)
        u -= r.n_head * half;
    const int h = u / half, p = u % half;
    float *x = is_q ? r.q + ((size_t)t * r.n_head + h) * hd : r.k + (size_t)t * kv_dim + h * hd;
    const float *b = is_q ? r.bq : r.bk;
    int a, c;
    rope_pair(r.neox, p, half, &a, &c);
    float x0 = __ldcg(x + a), x1 = __ldcg(x + c);
    if (b) {
        x0 += b[h * hd + a];
        x1 += b[h * hd + c];
    }
    float cs, sn;
    rope_cs(r.pos[t], r.inv_freq, p, r.attn_factor, &cs, &sn);
    const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
    x[a] = y0;
    x[c] = y1;
    if (!is_q) {
        KT *kc = (KT *)r.kc + r.slot[t] * kv_dim + h * hd;
        kc[a] = to_kv<KT>(y0);
        kc[c] = to_kv<KT>(y1);
    }
}

/* rope_kv_item with what does not depend on the kernel before (positions,
 * slots, inv_freq, biases, the angle's sine and cosine) computed before
 * pdl_wait (OMNI_CUDA_PRE bit 2); the same expressions. */
template <typename KT>
__device__ __forceinline__ void rope_kv_item_pre(const struct omni_brope_kv &r, int half, int64_t i)
{
    const int per_tok = (r.n_head + 2 * r.n_head_kv) * half, hd = r.head_dim;
    const int t = (int)(i / per_tok);
    int u = (int)(i % per_tok);
    const int64_t kv_dim = (int64_t)r.n_head_kv * hd;
    const int64_t slot = r.slot[t];
    if (u >= (r.n_head + r.n_head_kv) * half) { /* v */
        u -= (r.n_head + r.n_head_kv) * half;
        const int e = (u / half) * hd + 2 * (u % half);
        float b0 = 0.0f, b1 = 0.0f;
        if (r.bv) {
            b0 = r.bv[e];
            b1 = r.bv[e + 1];
        }
        pdl_wait();
        float *v = r.v + (size_t)t * kv_dim + e;
        float v0 = __ldcg(v), v1 = __ldcg(v + 1);
        if (r.bv) {
            v0 += b0;
            v1 += b1;
            v[0] = v0;
            v[1] = v1;
        }
        KT *vc = (KT *)r.vc + slot * kv_dim + e;
        vc[0] = to_kv<KT>(v0);
        vc[1] = to_kv<KT>(v1);
        return;
    }
    const bool is_q = u < r.n_head * half;
    if (!is_q)
        u -= r.n_head * half;
    const int h = u / half, p = u % half;
    const float *b = is_q ? r.bq : r.bk;
    int a, c;
    rope_pair(r.neox, p, half, &a, &c);
    float ba = 0.0f, bc = 0.0f;
    if (b) {
        ba = b[h * hd + a];
        bc = b[h * hd + c];
    }
    float cs, sn;
    rope_cs(r.pos[t], r.inv_freq, p, r.attn_factor, &cs, &sn);
    pdl_wait(); /* q, k of the product before */
    float *x = is_q ? r.q + ((size_t)t * r.n_head + h) * hd : r.k + (size_t)t * kv_dim + h * hd;
    float x0 = __ldcg(x + a), x1 = __ldcg(x + c);
    if (b) {
        x0 += ba;
        x1 += bc;
    }
    const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
    x[a] = y0;
    x[c] = y1;
    if (!is_q) {
        KT *kc = (KT *)r.kc + slot * kv_dim + h * hd;
        kc[a] = to_kv<KT>(y0);
        kc[c] = to_kv<KT>(y1);
    }
}

template <typename KT>
__global__ void k_rope_kv(const struct omni_brope_kv r, int half, int64_t total, bool pre)
{
    pdl_trigger();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pre) { /* each item waits after its independent loads */
        if (i < total)
            rope_kv_item_pre<KT>(r, half, i);
        return;
    }
    pdl_wait(); /* (OMNI_CUDA_PDL=2) q, k, v of the product before */
    if (i < total)
        rope_kv_item<KT>(r, half, i);
}

// ---- norm fusion (OMNI_CUDA_NORM_FUSE) ---------------------------------------------
/* A one-token step runs the residual add + RMSNorm twice a layer, between
 * products (after o, after down). As a kernel of its own it costs a launch
 * and a grid-wide wait: about 4.7 us each of a 7B step's 86 us a layer
 * (H100 job f_i12, docs/gpu.md), mostly the product before draining and
 * the next one filling, not the norm's own work. Here it has no launch:
 * - the product before (k_mv2_addg, a block of 32 rows) adds its rows into
 *   x and makes its group's Q8_0 block of x * w and sum of squares;
 * - the 1 / rms, which needs every group, is left to the products after:
 *   a Q8_0 block of x * w has the quants of one of x * w / rms, its scale
 *   times rms, so the q/k/v and gate/up products multiply their sums by
 *   1 / rms (struct nscale: each block sums the groups' squares itself,
 *   copied in early), and their blocks write the normed row y between them.
 * The product is held back at matmul (tail_pend) until the add_rmsnorm of
 * its output comes; any other op launches it plain first (tail_flush).
 * Until such a product has written y, every other op first gets y from a
 * plain norm (norm_flush).
 * H100 jobs f_j1-f_j5, tg128: 1B Q4_K_M 1.13x, Q8_0 1.08x, Qwen2.5-1.5B
 * 1.04x, 7B 1.03x. Measured and dropped there: blocks of k_mv2's shape
 * with a counter a 32-row group (the group's last block made its Q8_0
 * block; 1-2% slower), the row's sum made once by the product's last
 * group and read by the products after (1-6% slower: a longer chain at
 * the product's end), the products' sums loaded after their rows instead
 * of copied in early (7B 0.97x). The earlier form, the product's last
 * block doing the whole norm (FUSE_TAIL, jobs f_c2, f_i6), was slower
 * still: one counter bumped by every block, and the norm on one SM. */

#define NF_GROUPS 1024 /* 32-value groups of a fused norm: rows up to 32768 */

/* k_mv2 of one row into dx, x += dx, and per 32-row group the Q8_0 block
 * of x * w (oq, oqd) and x's sum of squares (ss[g]): a block a group, 32
 * rows a warp each (1024 threads), so that no block waits for another's
 * rows. rows % 32 == 0. */
template <int T>
__global__ void __launch_bounds__(1024, 1)
    k_mv2_addg(const mv2m m, const int np, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, float *dx, float *x, const float *__restrict__ w,
               int8_t *oq, float *oqd, float *ss)
{
    __shared__ float vals[32];
    pdl_trigger();
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int g = blockIdx.x, e = 32 * g + lane;
    const float wv = wid == 0 ? __ldg(w + e) : 0.0f; /* (constant: before the wait) */
    float xv = 0.0f;
    float acc;
    mv2_rows<T, 32, MV2_U, 1>(m, m, 32 * g + wid, 32 * g + wid, lane, np, xq, xd, &acc,
                              [&]() { if (wid == 0) xv = __ldcg(x + e); });
    acc = warp_sum(acc);
    if (lane == 0)
        vals[wid] = acc;
    __syncthreads();
    if (wid)
        return;
    const float a = vals[lane], v = xv + a, t = v * wv;
    dx[e] = a;
    x[e] = v;
    const float s2 = warp_sum(v * v);
    float id;
    const float dd = q8_scale(warp_max(fabsf(t)), &id);
    oq[e] = (int8_t)roundf(t * id);
    if (lane == 0) { /* (the scale not rounded to F16: the products scale it again) */
        oqd[g] = dd;
        ss[g] = s2;
    }
}

/* The held-back product, launched as it would have been. */
static void tail_flush(struct omni_backend *be)
{
    struct cuda_state *s = st(be);
    if (!s || !s->tp || !s->tp->kind)
        return;
    const struct tail_pend p = *s->tp;
    s->tp->kind = 0;
    switch (p.type) {
    case GGML_TYPE_Q4_K: launch_mv2<GGML_TYPE_Q4_K>(p.m, p.rows, p.np, p.xq, p.xd, p.y, s->stream); break;
    case GGML_TYPE_Q5_K: launch_mv2<GGML_TYPE_Q5_K>(p.m, p.rows, p.np, p.xq, p.xd, p.y, s->stream); break;
    case GGML_TYPE_Q6_K: launch_mv2<GGML_TYPE_Q6_K>(p.m, p.rows, p.np, p.xq, p.xd, p.y, s->stream); break;
    default: launch_mv2<GGML_TYPE_Q8_0>(p.m, p.rows, p.np, p.xq, p.xd, p.y, s->stream); break;
    }
}

/* add_rmsnorm(x, dx, y) right after the held-back product of dx: the
 * product fused with the add and the norm's groups; y is left to the
 * products of it (nscale). False (nothing queued) when it does not fit. */
static bool tail_try_norm(struct omni_backend *be, float *x, const float *dx, float *y,
                          const float *w, int rows, int dim, float eps)
{
    struct cuda_state *s = st(be);
    struct tail_pend *p = s->tp;
    if (!p || p->kind != 1 || dx != p->y || rows != 1 || dim != p->rows || dim % 32 ||
        dim / 32 > NF_GROUPS || s->pn_on)
        return false;
    p->kind = 0;
    int8_t *oq = s->nf_q;
    float *oqd = (float *)(oq + dim);
    const dim3 grid(dim / 32), block(1024);
    switch (p->type) {
    case GGML_TYPE_Q4_K: launch_pdl(k_mv2_addg<GGML_TYPE_Q4_K>, grid, block, s->stream, p->m, p->np, p->xq, p->xd, p->y, x, w, oq, oqd, s->nf_ss); break;
    case GGML_TYPE_Q5_K: launch_pdl(k_mv2_addg<GGML_TYPE_Q5_K>, grid, block, s->stream, p->m, p->np, p->xq, p->xd, p->y, x, w, oq, oqd, s->nf_ss); break;
    case GGML_TYPE_Q6_K: launch_pdl(k_mv2_addg<GGML_TYPE_Q6_K>, grid, block, s->stream, p->m, p->np, p->xq, p->xd, p->y, x, w, oq, oqd, s->nf_ss); break;
    default: launch_pdl(k_mv2_addg<GGML_TYPE_Q8_0>, grid, block, s->stream, p->m, p->np, p->xq, p->xd, p->y, x, w, oq, oqd, s->nf_ss); break;
    }
    s->nh_valid = false;
    s->nm_valid = false;
    s->pn = (struct nscale){ s->nf_ss, x, w, y, dim, eps };
    s->pn_on = true;
    s->nq_valid = true;
    s->nq_ns = s->pn;
    s->nq_x = y;
    s->nq_n = 1;
    s->nq_cols = dim;
    s->nq_buf = oq;
    return true;
}

/* The pending fused norm's y (and xq's Q8_0 blocks of it) from a plain
 * norm of its x: for an op that is not one of the products that apply
 * its 1 / rms. */
static void norm_flush(struct cuda_state *s)
{
    if (!s || !s->pn_on)
        return;
    s->pn_on = false;
    const struct nscale n = s->pn;
    const int threads = n.dim >= norm_nt ? norm_nt : (n.dim + 31) / 32 * 32;
    int8_t *q;
    float *qd;
    if (norm_quant(s, 1, n.dim, &q, &qd)) {
        launch_pdl_at(2, k_rmsnorm<true>, dim3(1), dim3(threads), s->stream, n.y, n.x, n.w, n.dim, n.eps, q, qd, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, (__half *)NULL);
        norm_quant_done(s, n.y, 1, n.dim);
    } else {
        k_rmsnorm<false><<<1, threads, 0, s->stream>>>(n.y, n.x, n.w, n.dim, n.eps, NULL, NULL, norm_stage, norm_wpre, (pre_bits & 1) != 0, norm_qs_on, (__half *)NULL);
        if (s->nq_valid && s->nq_ns.ss)
            s->nq_valid = false;
    }
}

static void norm_flush(struct omni_backend *be) { norm_flush(st(be)); }

/* Whether a product reading or writing [p, p + n) must wait for the
 * pending norm's y: it touches that norm's x, w or y. */
static bool pn_hits(const struct cuda_state *s, const float *p, int64_t n)
{
    if (!s->pn_on || !p)
        return false;
    const struct nscale &c = s->pn;
    return (p < c.x + c.dim && c.x < p + n) || (p < c.y + c.dim && c.y < p + n) ||
           (p < c.w + c.dim && c.w < p + n);
}

/* OMNI_CUDA_ATT_ROPE (default on; 0 off): a one-token step's rope_kv is
 * held back (rk_on) and done inside the attention right after it
 * (att_rope), one launch and one grid-wide wait less a layer. */
static bool att_rope_on = true;

/* k_rope_kv over all of r's items (r checked by cuda_rope_kv) */
static void launch_rope_kv(cudaStream_t s, const struct omni_brope_kv *r)
{
    const int half = r->head_dim / 2;
    const int64_t total = (int64_t)r->n_tok * (r->n_head + 2 * r->n_head_kv) * half;
    if (r->kv_type == GGML_TYPE_F16)
        launch_pdl_at(2, k_rope_kv<__half>, dim3(blocks_for(total, 256)), dim3(256), s, *r, half, total, (pre_bits & 2) != 0);
    else
        launch_pdl_at(2, k_rope_kv<float>, dim3(blocks_for(total, 256)), dim3(256), s, *r, half, total, (pre_bits & 2) != 0);
}

static int cuda_rope_kv(struct omni_backend *be, const struct omni_brope_kv *r)
{
    if (skipped(be, SKIP_ROPE))
        return 0;
    touch(be);
    if (r->n_rot != r->head_dim || r->head_dim % 2 || r->n_tok < 0 ||
        (r->kv_type != GGML_TYPE_F16 && r->kv_type != GGML_TYPE_F32) || r->n_head_kv < 1 ||
        r->n_head % r->n_head_kv)
        return OMNI_ERR_UNSUPPORTED;
    if (r->n_tok < 1 || r->head_dim < 2) /* nothing to do */
        return 0;
    struct cuda_state *s = st(be);
    if (att_rope_on && r->n_tok == 1 && r->head_dim <= 128) { /* for the attention after it */
        s->rk = *r;
        s->rk_on = true;
        return 0;
    }
    launch_rope_kv(s->stream, r);
    return chk_launch("rope_kv");
}

/* The held-back rope_kv, launched as it would have been. */
static void rope_flush(struct omni_backend *be)
{
    struct cuda_state *s = st(be);
    if (!s || !s->rk_on)
        return;
    s->rk_on = false;
    launch_rope_kv(s->stream, &s->rk);
}

/* Whether the held-back rope_kv is this attention's (one token, its q,
 * its pools, its positions and heads): then it is taken out (*r) for the
 * attention kernel to do; otherwise it stays for touch to launch. */
static bool att_rope_takes(struct cuda_state *s, const struct omni_battn *a,
                           struct omni_brope_kv *r)
{
    const struct omni_brope_kv &k = s->rk;
    if (!s->rk_on || a->n_tok != 1 || k.q != a->q || k.kc != a->k || k.vc != a->v ||
        k.kv_type != a->kv_type || k.pos != a->pos || k.n_head != a->n_head ||
        k.n_head_kv != a->n_head_kv || k.head_dim != a->head_dim || k.q == a->out)
        return false;
    *r = k;
    s->rk_on = false;
    return true;
}

__device__ __forceinline__ float2 ld2(const __half *p) { return __half22float2(*(const __half2 *)p); }
__device__ __forceinline__ float2 ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float ld1(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float ld1(const float *p) { return *p; }

#define ATT_WARPS 4

/* q[0..7] . k[0..7] with one 16-byte load of k (8 halves or 2 x 4 floats) */
template <typename KT> __device__ __forceinline__ float dot8(const float *q, const KT *k);
template <> __device__ __forceinline__ float dot8<__half>(const float *q, const __half *k)
{
    const uint4 u = *(const uint4 *)k;
    const __half2 *h = (const __half2 *)&u;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        s += q[2 * i] * f.x + q[2 * i + 1] * f.y;
    }
    return s;
}
template <> __device__ __forceinline__ float dot8<float>(const float *q, const float *k)
{
    const float4 a = *(const float4 *)k, b = *(const float4 *)(k + 4);
    return q[0] * a.x + q[1] * a.y + q[2] * a.z + q[3] * a.w + q[4] * b.x + q[5] * b.y +
           q[6] * b.z + q[7] * b.w;
}

/* dot8 in two halves: the 8 values as loaded (kraw8, ldk8), then their dot
 * (dotk8, the same sums as dot8), so that a lane can issue the loads of a
 * whole key row before the first dot (k_attention_split with U = 2). */
template <typename KT> struct kraw8;
template <> struct kraw8<__half> { uint4 u; };
template <> struct kraw8<float> { float4 a, b; };
__device__ __forceinline__ void ldk8(kraw8<__half> &r, const __half *k) { r.u = *(const uint4 *)k; }
__device__ __forceinline__ void ldk8(kraw8<float> &r, const float *k)
{
    r.a = *(const float4 *)k;
    r.b = *(const float4 *)(k + 4);
}
__device__ __forceinline__ float dotk8(const float *q, const kraw8<__half> &r)
{
    const __half2 *h = (const __half2 *)&r.u;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        s += q[2 * i] * f.x + q[2 * i + 1] * f.y;
    }
    return s;
}
__device__ __forceinline__ float dotk8(const float *q, const kraw8<float> &r)
{
    const float4 a = r.a, b = r.b;
    return q[0] * a.x + q[1] * a.y + q[2] * a.z + q[3] * a.w + q[4] * b.x + q[5] * b.y +
           q[6] * b.z + q[7] * b.w;
}

/* One warp per (token, query head): keys 32 at a time (lane j scores key
 * j0 + j against the scaled query in shared memory, 16-byte loads when
 * head_dim is a multiple of 8), online softmax over the tiles; lane l
 * accumulates the output pairs (2p, 2p+1), p = l, l + 32, ... (DPL2 pairs). */
template <typename KT, int DPL2>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attention(struct omni_battn a)
{
    __shared__ float qs[ATT_WARPS][256];
    const int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int item = blockIdx.x * ATT_WARPS + wid;
    if (item >= a.n_tok * a.n_head)
        return;
    const int t = item / a.n_head, h = item % a.n_head, hd = a.head_dim;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int64_t kv_dim = (int64_t)a.n_head_kv * hd;
    const int pos = a.pos[t];
    const int first = a.n_swa > 0 && pos >= a.n_swa ? pos - a.n_swa + 1 : 0;
    const int32_t *table = a.tables + (size_t)a.seq[t] * a.max_blocks;
    const KT *K = (const KT *)a.k, *V = (const KT *)a.v;
    const float *q = a.q + (size_t)item * hd;
    for (int d = lane; d < hd; d += 32)
        qs[wid][d] = q[d] * a.scale;
    __syncwarp();
    const bool vec8 = (hd & 7) == 0;
    float m = -INFINITY, l = 0.0f;
    float2 acc[DPL2];
#pragma unroll
    for (int i = 0; i < DPL2; i++)
        acc[i] = make_float2(0.0f, 0.0f);
    for (int j0 = first; j0 <= pos; j0 += 32) {
        const int j = j0 + lane;
        const bool valid = j <= pos;
        int64_t base = 0;
        float s = -INFINITY;
        if (valid) {
            const int64_t slot = (int64_t)table[j / a.block_size] * a.block_size + j % a.block_size;
            base = slot * kv_dim + (int64_t)kvh * hd;
            const KT *kr = K + base;
            float dot = 0.0f;
            if (vec8) {
                for (int d = 0; d < hd; d += 8)
                    dot += dot8<KT>(&qs[wid][d], kr + d);
            } else {
                for (int d = 0; d < hd; d += 2) { /* head_dim is even */
                    const float2 kv = ld2(kr + d);
                    dot += qs[wid][d] * kv.x + qs[wid][d + 1] * kv.y;
                }
            }
            s = dot;
        }
        const float m_new = fmaxf(m, warp_max(s));
        const float p = valid ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new); /* 0 on the first tile */
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int i = 0; i < DPL2; i++) {
            acc[i].x *= corr;
            acc[i].y *= corr;
        }
        const int n_valid = pos - j0 + 1 < 32 ? pos - j0 + 1 : 32;
        for (int k = 0; k < n_valid; k++) {
            const float pk = __shfl_sync(0xffffffffu, p, k);
            const int64_t bk = __shfl_sync(0xffffffffu, (long long)base, k);
#pragma unroll
            for (int i = 0; i < DPL2; i++) {
                const int d = 2 * (lane + 32 * i);
                if (d < hd) {
                    const float2 v = ld2(V + bk + d);
                    acc[i].x += pk * v.x;
                    acc[i].y += pk * v.y;
                }
            }
        }
        m = m_new;
    }
    float *out = a.out + (size_t)item * hd;
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < DPL2; i++) {
        const int d = 2 * (lane + 32 * i);
        if (d < hd) {
            out[d] = acc[i].x * inv;
            out[d + 1] = acc[i].y * inv;
        }
    }
}

#define ATT_SPLIT 8          /* warps a block of k_attention_split (below) */
#define ATT_SPLIT_MAX_TOK 64 /* steps of up to this many tokens */

__device__ __forceinline__ void prefetch_line(const char *p, bool l1)
{
    if (l1)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
    else
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* A one-token step's key and value rows of j < pos sent towards the SM
 * before pdl_wait (k_attention_split's pre & 6): lane j's rows of every
 * tile of its warp, the key row past what kpre holds (from_kpre), as
 * prefetches (no registers held): to L1 (l1) or L2. */
template <typename KT>
__device__ __forceinline__ void att_prefetch(const KT *K, const KT *V, const int32_t *table,
                                             int block_size, int64_t kv_dim, int kvh, int hd,
                                             int j, int pos, bool from_kpre, bool l1)
{
    const int row = hd * (int)sizeof(KT);
    for (bool first_tile = true; j < pos; j += 32 * ATT_SPLIT, first_tile = false) {
        const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
        const int64_t base = slot * kv_dim + (int64_t)kvh * hd;
        const char *kb = (const char *)(K + base), *vb = (const char *)(V + base);
        for (int o = first_tile && from_kpre ? 64 * (int)sizeof(KT) : 0; o < row; o += 128)
            prefetch_line(kb + o, l1);
        for (int o = 0; o < row; o += 128)
            prefetch_line(vb + o, l1);
    }
}

__device__ __forceinline__ float kv_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float kv_f(float v) { return v; }

/* rope_kv of a one-token step inside its attention (OMNI_CUDA_ATT_ROPE;
 * k_attention_split with RK, head_dim <= 128: a thread an item). Thread
 * i < hd / 2 rotates pair i of the block's query head (into qs, scaled,
 * and back into r.q, which only this block touches); hd / 2 <= i < hd
 * pair i - hd / 2 of its K/V head's key, as the cache holds it (KT), into
 * ks; hd <= i < 2 hd value i - hd of v (+ bias) into vs. The group's first
 * query head's block stores that key and value into the cache for the
 * steps after (the other blocks of the group do not read them there).
 * What does not depend on the product before (angles, biases, the slot)
 * is read before pdl_wait; the same expressions as rope_kv_item. */
template <typename KT>
struct att_rope {
    int kind, a, c; /* kind 0 q pair, 1 k pair, 2 v value, 3 nothing */
    float cs, sn, b0, b1;
    int64_t at; /* the newest key's row in the cache */
    __device__ void init(const struct omni_brope_kv &r, int h, int kvh, int hd)
    {
        const int i = threadIdx.x, half = hd / 2;
        kind = i < half ? 0 : i < hd ? 1 : i < 2 * hd ? 2 : 3;
        b0 = b1 = cs = sn = 0.0f;
        a = c = 0;
        if (kind < 2) {
            const int p = kind ? i - half : i, hh = kind ? kvh : h;
            rope_pair(r.neox, p, half, &a, &c);
            const float *b = kind ? r.bk : r.bq;
            if (b) {
                b0 = b[hh * hd + a];
                b1 = b[hh * hd + c];
            }
            rope_cs(r.pos[0], r.inv_freq, p, r.attn_factor, &cs, &sn);
        } else if (kind == 2) {
            a = i - hd;
            if (r.bv)
                b0 = r.bv[kvh * hd + a];
        }
        at = r.slot[0] * ((int64_t)r.n_head_kv * hd) + (int64_t)kvh * hd;
    }
    __device__ void run(const struct omni_brope_kv &r, int h, int kvh, int hd, float scale,
                        float *qs, float *ks, float *vs) const
    {
        const bool owner = h % (r.n_head / r.n_head_kv) == 0;
        if (kind < 2) {
            float *x = kind ? r.k + (size_t)kvh * hd : r.q + (size_t)h * hd;
            float x0 = __ldcg(x + a), x1 = __ldcg(x + c);
            const float *b = kind ? r.bk : r.bq;
            if (b) {
                x0 += b0;
                x1 += b1;
            }
            const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
            if (kind == 0) {
                x[a] = y0;
                x[c] = y1;
                qs[a] = y0 * scale;
                qs[c] = y1 * scale;
            } else {
                const KT k0 = to_kv<KT>(y0), k1 = to_kv<KT>(y1);
                ks[a] = kv_f(k0);
                ks[c] = kv_f(k1);
                if (owner) {
                    ((KT *)r.kc)[at + a] = k0;
                    ((KT *)r.kc)[at + c] = k1;
                }
            }
        } else if (kind == 2) {
            float v = __ldcg(r.v + (size_t)kvh * hd + a);
            if (r.bv)
                v += b0;
            const KT vk = to_kv<KT>(v);
            vs[a] = kv_f(vk);
            if (owner)
                ((KT *)r.vc)[at + a] = vk;
        }
    }
};

/* Decode steps (few tokens): a block of ATT_SPLIT warps per (token, query
 * head), warp w taking the 32-key tiles w, w + ATT_SPLIT, ... with its own
 * online softmax (k_attention's loop), then the warps' maxima, sums and
 * outputs merged in shared memory. A one-token step of 32 heads otherwise
 * has 32 warps walking the whole context one tile after the other. RK: the
 * step's rope_kv done here (att_rope; one token), the newest key merged as
 * one more entry. H100 job f_k1, tg128 against a rope_kv launch of its own
 * (both with the prefetch): 7B Q4_K_M 1.006x, 1B Q4_K_M 1.004x,
 * Qwen2.5-1.5B 1.013x; with the prefetch (pre & 6) 1.014x / 1.025x / 1.036x
 * against neither. */
/* U (OMNI_CUDA_ATT_UNROLL; the default for head_dim <= 64): a tile's V rows 8 keys at a time, their
 * loads issued together (a short context's step is one tile a warp, and
 * one key after the other is a chain of L2 round trips); the sums keep
 * the same order. */
template <typename KT, int DPL2, bool Q, int U, bool RK = false>
__global__ void __launch_bounds__(ATT_SPLIT * 32)
    k_attention_split(struct omni_battn a, int8_t *oq, float *oqd, int pre,
                      const struct omni_brope_kv r)
{
    pdl_trigger(); /* the output projection may start loading its weights */
    constexpr int NE = ATT_SPLIT + (RK ? 1 : 0); /* RK: entry ATT_SPLIT is the newest key */
    __shared__ float qs[256];
    __shared__ float ks[RK ? 128 : 1];
    __shared__ float sm_m[NE], sm_l[NE], sm_f[NE];
    __shared__ float sm_acc[NE][256];
    const int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int item = blockIdx.x;
    const int t = item / a.n_head, h = item % a.n_head, hd = a.head_dim;
    const int kvh = h / (a.n_head / a.n_head_kv);
    const int64_t kv_dim = (int64_t)a.n_head_kv * hd;
    const int pos = a.pos[t];
    const int first = a.n_swa > 0 && pos >= a.n_swa ? pos - a.n_swa + 1 : 0;
    const int last = RK ? pos - 1 : pos; /* the keys read from the cache */
    const int32_t *table = a.tables + (size_t)a.seq[t] * a.max_blocks;
    const KT *K = (const KT *)a.k, *V = (const KT *)a.v;
    att_rope<KT> rk;
    if constexpr (RK)
        rk.init(r, h, kvh, hd);
    /* (OMNI_CUDA_PRE bit 4: pre & 1) a one-token step's first tile of keys
     * before pdl_wait: every key but the newest (pos) was stored by earlier
     * steps; the block table and positions were uploaded before the step.
     * pre & 6 (OMNI_CUDA_ATT_PF): the rest of those key rows and their
     * value rows sent to L2 (2) or L1 (4) too, every tile of the warp. */
    kraw8<KT> kpre[8];
    bool have_pre = false;
    if constexpr (U == 2) {
        const int j = first + 32 * wid + lane;
        if ((pre & 1) && a.n_tok == 1 && (hd & 7) == 0 && j < pos) {
            const int64_t slot = (int64_t)table[j / a.block_size] * a.block_size + j % a.block_size;
            const KT *kr = K + slot * kv_dim + (int64_t)kvh * hd;
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (8 * c < hd)
                    ldk8(kpre[c], kr + 8 * c);
            have_pre = true;
        }
        if ((pre & 6) && a.n_tok == 1)
            att_prefetch(K, V, table, a.block_size, kv_dim, kvh, hd, j, pos, (pre & 1) != 0,
                         (pre & 4) != 0);
    }
    pdl_wait(); /* (OMNI_CUDA_PDL=2) the previous kernel's q, K, V */
    if constexpr (RK) {
        rk.run(r, h, kvh, hd, a.scale, qs, ks, sm_acc[ATT_SPLIT]);
    } else {
        const float *q = a.q + (size_t)item * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            qs[d] = q[d] * a.scale;
    }
    __syncthreads();
    if constexpr (RK) { /* the newest key's score, by the warp that starts last */
        if (wid == ATT_SPLIT - 1) {
            float sn = 0.0f;
            for (int d = lane; d < hd; d += 32)
                sn += qs[d] * ks[d];
            sn = warp_sum(sn);
            if (lane == 0) {
                sm_m[ATT_SPLIT] = sn;
                sm_l[ATT_SPLIT] = 1.0f;
            }
        }
    }
    const bool vec8 = (hd & 7) == 0;
    float m = -INFINITY, l = 0.0f;
    float2 acc[DPL2];
#pragma unroll
    for (int i = 0; i < DPL2; i++)
        acc[i] = make_float2(0.0f, 0.0f);
    for (int j0 = first + 32 * wid; j0 <= last; j0 += 32 * ATT_SPLIT) {
        const int j = j0 + lane;
        const bool valid = j <= last;
        int64_t base = 0;
        float s = -INFINITY;
        if (valid) {
            const int64_t slot = (int64_t)table[j / a.block_size] * a.block_size + j % a.block_size;
            base = slot * kv_dim + (int64_t)kvh * hd;
            const KT *kr = K + base;
            float dot = 0.0f;
            if (vec8 && U == 2) { /* 8 loads of 8 values in flight, then their dots */
                for (int d0 = 0; d0 < hd; d0 += 64) {
                    kraw8<KT> kv[8];
                    if (d0 == 0 && have_pre) { /* loaded before pdl_wait */
#pragma unroll
                        for (int c = 0; c < 8; c++)
                            kv[c] = kpre[c];
                    } else {
#pragma unroll
                        for (int c = 0; c < 8; c++)
                            if (d0 + 8 * c < hd)
                                ldk8(kv[c], kr + d0 + 8 * c);
                    }
#pragma unroll
                    for (int c = 0; c < 8; c++)
                        if (d0 + 8 * c < hd)
                            dot += dotk8(&qs[d0 + 8 * c], kv[c]);
                }
            } else if (vec8) {
                for (int d = 0; d < hd; d += 8)
                    dot += dot8<KT>(&qs[d], kr + d);
            } else {
                for (int d = 0; d < hd; d += 2) {
                    const float2 kv = ld2(kr + d);
                    dot += qs[d] * kv.x + qs[d + 1] * kv.y;
                }
            }
            s = dot;
        }
        const float m_new = fmaxf(m, warp_max(s));
        const float p = valid ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new);
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int i = 0; i < DPL2; i++) {
            acc[i].x *= corr;
            acc[i].y *= corr;
        }
        const int n_valid = last - j0 + 1 < 32 ? last - j0 + 1 : 32;
        int k0 = 0;
        if constexpr (U == 2) { /* all pairs of 8 keys loaded, then accumulated (same order) */
            for (; k0 + 8 <= n_valid; k0 += 8) {
                float pk[8];
                long long bk[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    pk[u] = __shfl_sync(0xffffffffu, p, k0 + u);
                    bk[u] = __shfl_sync(0xffffffffu, (long long)base, k0 + u);
                }
                float2 v[DPL2][8];
#pragma unroll
                for (int i = 0; i < DPL2; i++) {
                    const int d = 2 * (lane + 32 * i);
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        v[i][u] = d < hd ? ld2(V + bk[u] + d) : make_float2(0.0f, 0.0f);
                }
#pragma unroll
                for (int i = 0; i < DPL2; i++) {
                    if (2 * (lane + 32 * i) < hd) {
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            acc[i].x += pk[u] * v[i][u].x;
                            acc[i].y += pk[u] * v[i][u].y;
                        }
                    }
                }
            }
        } else if constexpr (U == 1) {
            for (; k0 + 8 <= n_valid; k0 += 8) {
                float pk[8];
                long long bk[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    pk[u] = __shfl_sync(0xffffffffu, p, k0 + u);
                    bk[u] = __shfl_sync(0xffffffffu, (long long)base, k0 + u);
                }
#pragma unroll
                for (int i = 0; i < DPL2; i++) {
                    const int d = 2 * (lane + 32 * i);
                    if (d < hd) {
                        float2 v[8];
#pragma unroll
                        for (int u = 0; u < 8; u++)
                            v[u] = ld2(V + bk[u] + d);
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            acc[i].x += pk[u] * v[u].x;
                            acc[i].y += pk[u] * v[u].y;
                        }
                    }
                }
            }
        }
        for (int k = k0; k < n_valid; k++) {
            const float pk = __shfl_sync(0xffffffffu, p, k);
            const int64_t bk = __shfl_sync(0xffffffffu, (long long)base, k);
#pragma unroll
            for (int i = 0; i < DPL2; i++) {
                const int d = 2 * (lane + 32 * i);
                if (d < hd) {
                    const float2 v = ld2(V + bk + d);
                    acc[i].x += pk * v.x;
                    acc[i].y += pk * v.y;
                }
            }
        }
        m = m_new;
        have_pre = false; /* the first tile only */
    }
    /* merge: a warp without keys has m = -inf, l = 0 and weighs 0 (warp 0
     * always has key `first`, or RK's entry the newest key: m its score,
     * l 1, its value row in sm_acc) */
    if (lane == 0) {
        sm_m[wid] = m;
        sm_l[wid] = l;
    }
#pragma unroll
    for (int i = 0; i < DPL2; i++) {
        const int d = 2 * (lane + 32 * i);
        if (d < hd) {
            sm_acc[wid][d] = acc[i].x;
            sm_acc[wid][d + 1] = acc[i].y;
        }
    }
    __syncthreads();
    if (threadIdx.x < NE) {
        float mx = sm_m[0];
        for (int w = 1; w < NE; w++)
            mx = fmaxf(mx, sm_m[w]);
        sm_f[threadIdx.x] = sm_l[threadIdx.x] > 0.0f ? expf(sm_m[threadIdx.x] - mx) : 0.0f;
    }
    __syncthreads();
    float lsum = 0.0f;
    for (int w = 0; w < NE; w++)
        lsum += sm_f[w] * sm_l[w];
    const float inv = 1.0f / lsum;
    float *out = a.out + (size_t)item * hd;
    /* Q: the output as Q8_0 too for the output projection (norm_out; a
     * head is whole 32-value blocks, one warp each) */
    int8_t *q8 = Q ? oq + (size_t)item * hd : NULL;
    float *q8d = Q ? oqd + (size_t)item * (hd >> 5) : NULL;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < NE; w++)
            o += sm_f[w] * sm_acc[w][d];
        norm_out<Q>(out, d, o * inv, q8, q8d);
    }
}

/* Decode attention with the query heads of a K/V head together
 * (OMNI_CUDA_ATT_GQA=1, steps of 8+ tokens): a block per (token, K/V
 * head), its 8 warps over the key tiles as k_attention_split, each lane
 * scoring its key against the G query heads of the group, so that a key
 * and value row is read once for G heads (k_attention_split reads it once
 * per query head: the 64-sequence step's largest op). Per head the same
 * sums in the same order as k_attention_split. */
template <typename KT, int DPL2, int G, bool Q>
__global__ void __launch_bounds__(ATT_SPLIT * 32)
    k_attention_gqa(struct omni_battn a, int8_t *oq, float *oqd)
{
    pdl_trigger(); /* the output projection may start loading its weights */
    pdl_wait();    /* (OMNI_CUDA_PDL=2) the previous kernel's q, K, V */
    constexpr int HD = 64 * DPL2; /* the most head_dim this instance takes */
    __shared__ float qs[G][HD];
    __shared__ float sm_m[ATT_SPLIT][G], sm_l[ATT_SPLIT][G], sm_f[ATT_SPLIT][G];
    __shared__ float sm_acc[ATT_SPLIT][G * HD];
    const int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x / a.n_head_kv, kvh = blockIdx.x % a.n_head_kv, hd = a.head_dim;
    const int64_t kv_dim = (int64_t)a.n_head_kv * hd;
    const int pos = a.pos[t];
    const int first = a.n_swa > 0 && pos >= a.n_swa ? pos - a.n_swa + 1 : 0;
    const int32_t *table = a.tables + (size_t)a.seq[t] * a.max_blocks;
    const KT *K = (const KT *)a.k, *V = (const KT *)a.v;
    const size_t head0 = (size_t)t * a.n_head + (size_t)kvh * G; /* the group's first query head */
    const float *q = a.q + head0 * hd;
    for (int e = threadIdx.x; e < G * hd; e += blockDim.x)
        qs[e / hd][e % hd] = q[e] * a.scale;
    __syncthreads();
    const bool vec8 = (hd & 7) == 0;
    float m[G], l[G];
    float2 acc[G][DPL2];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL2; i++)
            acc[g][i] = make_float2(0.0f, 0.0f);
    }
    for (int j0 = first + 32 * wid; j0 <= pos; j0 += 32 * ATT_SPLIT) {
        const int j = j0 + lane;
        const bool valid = j <= pos;
        int64_t base = 0;
        float sc[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            sc[g] = -INFINITY;
        if (valid) {
            const int64_t slot = (int64_t)table[j / a.block_size] * a.block_size + j % a.block_size;
            base = slot * kv_dim + (int64_t)kvh * hd;
            const KT *kr = K + base;
            float dot[G];
#pragma unroll
            for (int g = 0; g < G; g++)
                dot[g] = 0.0f;
            if (vec8) {
                for (int d0 = 0; d0 < hd; d0 += 64) {
                    kraw8<KT> kv[8];
#pragma unroll
                    for (int c = 0; c < 8; c++)
                        if (d0 + 8 * c < hd)
                            ldk8(kv[c], kr + d0 + 8 * c);
#pragma unroll
                    for (int c = 0; c < 8; c++)
                        if (d0 + 8 * c < hd)
#pragma unroll
                            for (int g = 0; g < G; g++)
                                dot[g] += dotk8(&qs[g][d0 + 8 * c], kv[c]);
                }
            } else {
                for (int d = 0; d < hd; d += 2) {
                    const float2 kv = ld2(kr + d);
#pragma unroll
                    for (int g = 0; g < G; g++)
                        dot[g] += qs[g][d] * kv.x + qs[g][d + 1] * kv.y;
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++)
                sc[g] = dot[g];
        }
        float p[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float m_new = fmaxf(m[g], warp_max(sc[g]));
            p[g] = valid ? expf(sc[g] - m_new) : 0.0f;
            const float corr = expf(m[g] - m_new);
            l[g] = l[g] * corr + warp_sum(p[g]);
#pragma unroll
            for (int i = 0; i < DPL2; i++) {
                acc[g][i].x *= corr;
                acc[g][i].y *= corr;
            }
            m[g] = m_new;
        }
        const int n_valid = pos - j0 + 1 < 32 ? pos - j0 + 1 : 32;
        int k0 = 0;
        for (; k0 + 8 <= n_valid; k0 += 8) { /* 8 keys' V rows loaded, then used */
            long long bk[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                bk[u] = __shfl_sync(0xffffffffu, (long long)base, k0 + u);
            float2 v[DPL2][8];
#pragma unroll
            for (int i = 0; i < DPL2; i++) {
                const int d = 2 * (lane + 32 * i);
#pragma unroll
                for (int u = 0; u < 8; u++)
                    v[i][u] = d < hd ? ld2(V + bk[u] + d) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float pk = __shfl_sync(0xffffffffu, p[g], k0 + u);
#pragma unroll
                    for (int i = 0; i < DPL2; i++) {
                        acc[g][i].x += pk * v[i][u].x;
                        acc[g][i].y += pk * v[i][u].y;
                    }
                }
        }
        for (int k = k0; k < n_valid; k++) {
            const int64_t bk = __shfl_sync(0xffffffffu, (long long)base, k);
            float2 v[DPL2];
#pragma unroll
            for (int i = 0; i < DPL2; i++) {
                const int d = 2 * (lane + 32 * i);
                v[i] = d < hd ? ld2(V + bk + d) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float pk = __shfl_sync(0xffffffffu, p[g], k);
#pragma unroll
                for (int i = 0; i < DPL2; i++) {
                    acc[g][i].x += pk * v[i].x;
                    acc[g][i].y += pk * v[i].y;
                }
            }
        }
    }
    /* merge the warps per head (a warp without keys weighs 0) */
    if (lane == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            sm_m[wid][g] = m[g];
            sm_l[wid][g] = l[g];
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < DPL2; i++) {
            const int d = 2 * (lane + 32 * i);
            if (d < hd) {
                sm_acc[wid][g * hd + d] = acc[g][i].x;
                sm_acc[wid][g * hd + d + 1] = acc[g][i].y;
            }
        }
    __syncthreads();
    if (threadIdx.x < ATT_SPLIT * G) {
        const int w = threadIdx.x % ATT_SPLIT, g = threadIdx.x / ATT_SPLIT;
        float mx = sm_m[0][g];
        for (int x = 1; x < ATT_SPLIT; x++)
            mx = fmaxf(mx, sm_m[x][g]);
        sm_f[w][g] = sm_l[w][g] > 0.0f ? expf(sm_m[w][g] - mx) : 0.0f;
    }
    __syncthreads();
    float *out = a.out + head0 * hd;
    int8_t *q8 = Q ? oq + head0 * hd : NULL;
    float *q8d = Q ? oqd + head0 * (hd >> 5) : NULL;
    for (int e = threadIdx.x; e < G * hd; e += blockDim.x) {
        const int g = e / hd;
        float lsum = 0.0f, o = 0.0f;
        for (int w = 0; w < ATT_SPLIT; w++)
            lsum += sm_f[w][g] * sm_l[w][g];
        for (int w = 0; w < ATT_SPLIT; w++)
            o += sm_f[w][g] * sm_acc[w][e];
        norm_out<Q>(out, e, o * (1.0f / lsum), q8, q8d);
    }
}

/* OMNI_CUDA_ATT_UNROLL (read at backend creation): 1 the V unroll, 2 also
 * the K row loads and both V halves issued together, 0 neither; unset: 1
 * for steps of several tokens at head_dim <= 64 (H100 job f_c2: tg128 +8%
 * on Llama-3.2-1B, head_dim 64; 2 there: -3% at 16 sequences), 2 above
 * (job f_c1: +4.4% on qwen2.5-7b, head_dim 128, where 1 was -5%) and for
 * one-token steps (their first key tile loaded before pdl_wait: job f_c3,
 * with OMNI_CUDA_PRE=7, +5.7% on 1B Q4_K_M) */
static int att_unroll = -1;
/* OMNI_CUDA_ATT_GQA=N: k_attention_gqa for steps of N+ tokens (default
 * 32; below 8: 8; 0: never). H100 job f_d1, bench-engine 1B Q4_K_M with
 * 8+: +4.8% at 64 sequences, -2.8% at 16. */
static int att_gqa_min = 32;
/* OMNI_CUDA_ATT_PF: a one-token step's key and value rows prefetched
 * before pdl_wait (att_prefetch): 1 to L2, 2 to L1, 0 not */
static int att_pf = 1;

/* k_attention_split's pre bits (OMNI_CUDA_PRE bit 4, OMNI_CUDA_ATT_PF) */
static int att_pre(void) { return ((pre_bits & 4) ? 1 : 0) | (att_pf == 1 ? 2 : att_pf == 2 ? 4 : 0); }

/* k_attention_gqa when it takes the shape (head_dim <= 128, G of 2, 4, 6,
 * 7 or 8 query heads a K/V head: 2 for the golden fixtures); false: not
 * launched */
template <typename KT, bool Q>
static bool launch_attention_gqa(const struct omni_battn *a, int8_t *q, float *qd, cudaStream_t s)
{
    if (!att_gqa_min || a->n_tok < att_gqa_min || a->head_dim > 128 || (Q && a->head_dim % 32))
        return false;
    const int G = a->n_head / a->n_head_kv;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv)), block(ATT_SPLIT * 32);
    const bool d1 = a->head_dim <= 64;
    switch (G * 2 + (d1 ? 0 : 1)) {
    case 4: launch_pdl_at(2, k_attention_gqa<KT, 1, 2, Q>, grid, block, s, *a, q, qd); return true;
    case 5: launch_pdl_at(2, k_attention_gqa<KT, 2, 2, Q>, grid, block, s, *a, q, qd); return true;
    case 8: launch_pdl_at(2, k_attention_gqa<KT, 1, 4, Q>, grid, block, s, *a, q, qd); return true;
    case 9: launch_pdl_at(2, k_attention_gqa<KT, 2, 4, Q>, grid, block, s, *a, q, qd); return true;
    case 12: launch_pdl_at(2, k_attention_gqa<KT, 1, 6, Q>, grid, block, s, *a, q, qd); return true;
    case 13: launch_pdl_at(2, k_attention_gqa<KT, 2, 6, Q>, grid, block, s, *a, q, qd); return true;
    case 14: launch_pdl_at(2, k_attention_gqa<KT, 1, 7, Q>, grid, block, s, *a, q, qd); return true;
    case 15: launch_pdl_at(2, k_attention_gqa<KT, 2, 7, Q>, grid, block, s, *a, q, qd); return true;
    case 16: launch_pdl_at(2, k_attention_gqa<KT, 1, 8, Q>, grid, block, s, *a, q, qd); return true;
    case 17: launch_pdl_at(2, k_attention_gqa<KT, 2, 8, Q>, grid, block, s, *a, q, qd); return true;
    default: return false;
    }
}

template <typename KT, bool Q, int U>
static void launch_attention_split_u(const struct omni_battn *a, int8_t *q, float *qd,
                                     cudaStream_t s)
{
    const unsigned g = (unsigned)((int64_t)a->n_tok * a->n_head);
    const int pre = att_pre();
    const struct omni_brope_kv none = {};
    if (a->head_dim <= 64)
        launch_pdl_at(2, k_attention_split<KT, 1, Q, U>, dim3(g), dim3(ATT_SPLIT * 32), s, *a, q, qd, pre, none);
    else if (a->head_dim <= 128)
        launch_pdl_at(2, k_attention_split<KT, 2, Q, U>, dim3(g), dim3(ATT_SPLIT * 32), s, *a, q, qd, pre, none);
    else
        launch_pdl_at(2, k_attention_split<KT, 4, Q, U>, dim3(g), dim3(ATT_SPLIT * 32), s, *a, q, qd, pre, none);
}

/* k_attention_split with the step's rope_kv inside (att_rope_takes) */
template <typename KT, bool Q>
static void launch_attention_rope(const struct omni_battn *a, const struct omni_brope_kv *r,
                                  int8_t *q, float *qd, cudaStream_t s)
{
    const unsigned g = (unsigned)a->n_head;
    if (a->head_dim <= 64)
        launch_pdl_at(2, k_attention_split<KT, 1, Q, 2, true>, dim3(g), dim3(ATT_SPLIT * 32), s, *a, q, qd, att_pre(), *r);
    else
        launch_pdl_at(2, k_attention_split<KT, 2, Q, 2, true>, dim3(g), dim3(ATT_SPLIT * 32), s, *a, q, qd, att_pre(), *r);
}

template <typename KT, bool Q>
static void launch_attention_split(const struct omni_battn *a, int8_t *q, float *qd,
                                   cudaStream_t s)
{
    if (att_unroll == 2)
        launch_attention_split_u<KT, Q, 2>(a, q, qd, s);
    else if (att_unroll < 0 && (a->head_dim > 64 || a->n_tok == 1))
        launch_attention_split_u<KT, Q, 2>(a, q, qd, s);
    else if (att_unroll == 1 || att_unroll < 0)
        launch_attention_split_u<KT, Q, 1>(a, q, qd, s);
    else
        launch_attention_split_u<KT, Q, 0>(a, q, qd, s);
}

/* split: k_attention_split (decode steps), whose output is also written
 * as Q8_0 into q / qd when q is not NULL; r: the step's rope_kv inside it */
template <typename KT>
static void launch_attention(const struct omni_battn *a, bool split, int8_t *q, float *qd,
                             const struct omni_brope_kv *r, cudaStream_t s)
{
    if (r) {
        if (q)
            launch_attention_rope<KT, true>(a, r, q, qd, s);
        else
            launch_attention_rope<KT, false>(a, r, NULL, NULL, s);
        return;
    }
    if (split) {
        if (q) {
            if (!launch_attention_gqa<KT, true>(a, q, qd, s))
                launch_attention_split<KT, true>(a, q, qd, s);
        } else if (!launch_attention_gqa<KT, false>(a, NULL, NULL, s)) {
            launch_attention_split<KT, false>(a, NULL, NULL, s);
        }
        return;
    }
    const unsigned g = blocks_for((int64_t)a->n_tok * a->n_head, ATT_WARPS);
    if (a->head_dim <= 64)
        k_attention<KT, 1><<<g, ATT_WARPS * 32, 0, s>>>(*a);
    else if (a->head_dim <= 128)
        k_attention<KT, 2><<<g, ATT_WARPS * 32, 0, s>>>(*a);
    else
        k_attention<KT, 4><<<g, ATT_WARPS * 32, 0, s>>>(*a);
}

static int cuda_attention(struct omni_backend *be, const struct omni_battn *a)
{
    if (skipped(be, SKIP_ATT))
        return 0;
    if (a->head_dim > 256 || a->head_dim % 2 || a->n_head % a->n_head_kv)
        return OMNI_ERR_UNSUPPORTED;
    if (a->n_tok < 1)
        return 0;
    struct cuda_state *cs = st(be);
    cudaStream_t s = cs->stream;
    const bool split = a->n_tok <= ATT_SPLIT_MAX_TOK && !cs->att_split_off;
    const int fd_ns = split ? flash_decode_splits(a, cs->n_sm, cs->fd_min, cs->fd_wide) : 0;
    if (fd_ns) {
        touch(be); /* a held-back rope_kv goes first */
        if (flash_decode_launch(a, fd_ns, cs->n_sm, cs->capturing,
                                pdl_level < 2 ? 0 : cs->fd_pf ? 2 : 1, &cs->fd_scratch, s))
            return chk_launch("flash decoding");
    }
    struct omni_brope_kv r;
    const bool with_rope = split && att_rope_takes(cs, a, &r);
    touch(be); /* (a held-back rope_kv that does not fit goes first) */
    const int q_dim = a->n_head * a->head_dim;
    int8_t *q = NULL;
    float *qd = NULL;
    const bool quant = split && a->head_dim % 32 == 0 && norm_quant(cs, a->n_tok, q_dim, &q, &qd);
    if (!split && !cs->fa_off && flash_attn_launch(a, s))
        return chk_launch("flash attention");
    if (a->kv_type == GGML_TYPE_F16)
        launch_attention<__half>(a, split, q, qd, with_rope ? &r : NULL, s);
    else if (a->kv_type == GGML_TYPE_F32)
        launch_attention<float>(a, split, q, qd, with_rope ? &r : NULL, s);
    else
        return OMNI_ERR_UNSUPPORTED;
    if (quant)
        norm_quant_done(cs, a->out, a->n_tok, q_dim);
    return chk_launch("attention");
}

/* A block per row: the largest value, the first index on ties. */
__global__ void k_argmax(const float *__restrict__ x, int n, int32_t *out)
{
    __shared__ float bv[32];
    __shared__ int bi[32];
    const float *row = x + (size_t)blockIdx.x * n;
    float v = -INFINITY;
    int idx = n; /* none yet */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float xi = row[i];
        if (idx == n || xi > v) { /* strictly larger: a thread keeps its first */
            v = xi;
            idx = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) {
            v = ov;
            idx = oi;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        bv[threadIdx.x >> 5] = v;
        bi[threadIdx.x >> 5] = idx;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const unsigned nw = blockDim.x >> 5;
        v = threadIdx.x < nw ? bv[threadIdx.x] : -INFINITY;
        idx = threadIdx.x < nw ? bi[threadIdx.x] : n;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (ov > v || (ov == v && oi < idx)) {
                v = ov;
                idx = oi;
            }
        }
        if (threadIdx.x == 0)
            out[blockIdx.x] = idx < n ? idx : 0;
    }
}

/* The larger of two (value, index) candidates, the smaller index on ties;
 * index n: none. */
__device__ __forceinline__ void am_pick(float &v, int &i, float ov, int oi, int n)
{
    if (oi < n && (i >= n || ov > v || (ov == v && oi < i))) {
        v = ov;
        i = oi;
    }
}

__device__ __forceinline__ void am_block(float &v, int &i, int n, float *bv, int *bi)
{
    for (int o = 16; o > 0; o >>= 1)
        am_pick(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o), n);
    if ((threadIdx.x & 31) == 0) {
        bv[threadIdx.x >> 5] = v;
        bi[threadIdx.x >> 5] = i;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const unsigned nw = blockDim.x >> 5;
        v = threadIdx.x < nw ? bv[threadIdx.x] : -INFINITY;
        i = threadIdx.x < nw ? bi[threadIdx.x] : n;
        for (int o = 16; o > 0; o >>= 1)
            am_pick(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o), n);
    }
}

/* argmax over AM_SLICES blocks per row (one block read a 128k vocabulary
 * alone for ~45 us): each block its slice, candidates into pv / pi, and the
 * last block of the row to finish (a counter, reset by it) picks among them;
 * the same answer as k_argmax (the first index of the largest value). */
#define AM_SLICES 32
#define AM_ROWS 1024 /* rows the scratch holds; more: k_argmax */
__global__ void __launch_bounds__(256)
    k_argmax_sliced(const float *__restrict__ x, int n, float *pv, int *pi, unsigned *count,
                    int32_t *out)
{
    pdl_wait(); /* (OMNI_CUDA_PDL=2) the logits */
    __shared__ float bv[8];
    __shared__ int bi[8];
    __shared__ bool last;
    const int row = blockIdx.y, per = (n + AM_SLICES - 1) / AM_SLICES;
    const int lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    const float *xr = x + (size_t)row * n;
    float v = -INFINITY;
    int idx = n;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float xi = xr[i];
        if (idx == n || xi > v) {
            v = xi;
            idx = i;
        }
    }
    am_block(v, idx, n, bv, bi);
    if (threadIdx.x == 0) {
        pv[row * AM_SLICES + blockIdx.x] = v;
        pi[row * AM_SLICES + blockIdx.x] = idx;
        __threadfence();
        last = atomicAdd(&count[row], 1u) == AM_SLICES - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    v = -INFINITY;
    idx = n;
    if (threadIdx.x < AM_SLICES) {
        v = __ldcg(pv + row * AM_SLICES + threadIdx.x);
        idx = __ldcg(pi + row * AM_SLICES + threadIdx.x);
    }
    __syncthreads(); /* bv / bi are reused */
    am_block(v, idx, n, bv, bi);
    if (threadIdx.x == 0) {
        out[row] = idx < n ? idx : 0;
        count[row] = 0;
    }
}

static int cuda_argmax(struct omni_backend *be, const float *x, int rows, int n, int32_t *out)
{
    touch(be);
    struct cuda_state *s = st(be);
    if (rows < 1)
        return 0;
    if (s->am_pv && rows <= AM_ROWS && n >= 8 * AM_SLICES) {
        launch_pdl_at(2, k_argmax_sliced, dim3(AM_SLICES, rows), dim3(256), s->stream, x, n,
                      s->am_pv, s->am_pi, s->am_count, out);
        return chk_launch("argmax");
    }
    k_argmax<<<rows, 1024, 0, s->stream>>>(x, n, out);
    return chk_launch("argmax");
}

// ---- memory --------------------------------------------------------------------------

static void *cuda_alloc(struct omni_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* clear it: out of memory is an answer, not a broken context */
        return NULL;
    }
    return p;
}

static void cuda_free(struct omni_backend *be, void *p)
{
    struct cuda_state *s = st(be);
    flush_pending(be);
    /* a matrix freed: its copies go too (the address may come back) */
    for (int i = 0; p && i < s->n_f16; i++)
        if (s->f16[i].w == p) {
            if (s->f16[i].base == s->f16[i].h && s->f16[i].h) { /* its allocation: */
                for (int j = 0; j < s->n_f16; j++)    /* the group's other copies go too */
                    if (j != i && s->f16[j].base == s->f16[i].h)
                        s->f16[j].h = s->f16[j].base = NULL;
                cudaFree(s->f16[i].h);
            }
            cudaFree(s->f16[i].rp);
            s->f16[i--] = s->f16[--s->n_f16];
        }
    if (p)
        cudaFree(p);
}

static int cuda_upload(struct omni_backend *be, void *dst, const void *src, size_t bytes)
{
    touch(be);
    return chk(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st(be)->stream), "upload");
}

static int cuda_download(struct omni_backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_state *s = st(be);
    flush_pending(be);
    int rc = chk(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream), "download");
    return rc ? rc : chk(cudaStreamSynchronize(s->stream), "download sync");
}

static int cuda_memset0(struct omni_backend *be, void *dst, size_t bytes)
{
    touch(be);
    return chk(cudaMemsetAsync(dst, 0, bytes, st(be)->stream), "memset");
}

static int cuda_sync(struct omni_backend *be)
{
    flush_pending(be);
    return chk(cudaStreamSynchronize(st(be)->stream), "sync");
}

static void *cuda_host_alloc(struct omni_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(struct omni_backend *be, void *p)
{
    (void)be;
    if (p)
        cudaFreeHost(p);
}

static int cuda_graph_begin(struct omni_backend *be)
{
    struct cuda_state *s = st(be);
    flush_pending(be);
    s->nh_valid = false; /* a graph converts its own inputs */
    s->nm_valid = false;
    s->n_capture++;
    int rc = chk(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed), "graph begin");
    s->capturing = rc == 0;
    return rc;
}

static int cuda_graph_end(struct omni_backend *be, void **graph)
{
    struct cuda_state *s = st(be);
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    *graph = NULL;
    flush_pending(be); /* into the graph */
    s->capturing = false;
    int rc = chk(cudaStreamEndCapture(s->stream, &g), "graph end");
    if (rc == 0)
        rc = chk(cudaGraphInstantiate(&exec, g, 0), "graph instantiate");
    if (g)
        cudaGraphDestroy(g);
    if (rc == 0) {
        *graph = exec;
        s->n_capture_ok++;
    }
    cudaGetLastError();
    return rc;
}

static int cuda_graph_launch(struct omni_backend *be, void *graph)
{
    touch(be);
    st(be)->n_replay++;
    return chk(cudaGraphLaunch((cudaGraphExec_t)graph, st(be)->stream), "graph launch");
}

static void cuda_graph_free(struct omni_backend *be, void *graph)
{
    (void)be;
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static void cuda_destroy(struct omni_backend *be)
{
    struct cuda_state *s = st(be);
    if (s) {
        flush_pending(be);
        if (s->stream)
            cudaStreamSynchronize(s->stream);
        const char *stats = getenv("OMNI_CUDA_STATS");
        if (stats && !strcmp(stats, "1"))
            fprintf(stderr, "backend: cuda: graphs: %ld captures, %ld made, %ld replays\n",
                    s->n_capture, s->n_capture_ok, s->n_replay);
        if (stats && !strcmp(stats, "1") && s->lt) {
            int shapes, changed;
            gemm_lt_stats(s->lt, &shapes, &changed);
            fprintf(stderr, "backend: cuda: cuBLASLt: %d shapes timed, %d on another algorithm than the first\n",
                    shapes, changed);
        }
        if (s->wh)
            cudaFree(s->wh);
        if (s->fd_scratch)
            cudaFree(s->fd_scratch);
        if (s->sk)
            cudaFree(s->sk);
        if (s->xh)
            cudaFree(s->xh);
        if (s->xq)
            cudaFree(s->xq);
        if (s->xm)
            cudaFree(s->xm);
        if (s->xq2)
            cudaFree(s->xq2);
        if (s->am_pv)
            cudaFree(s->am_pv);
        if (s->am_pi)
            cudaFree(s->am_pi);
        if (s->am_count)
            cudaFree(s->am_count);
        cudaFree(s->nf_ss);
        cudaFree(s->nf_q);
        free(s->tp);
        for (int i = 0; i < s->n_f16; i++) {
            if (s->f16[i].base == s->f16[i].h)
                cudaFree(s->f16[i].h);
            cudaFree(s->f16[i].rp);
        }
        cudaFree(s->gc);
        free(s->f16);
        gemm_lt_free(s->lt);
        if (s->blas)
            cublasDestroy(s->blas);
        if (s->stream)
            cudaStreamDestroy(s->stream);
        free(s);
    }
    free(be);
}

extern "C" struct omni_backend *omni_backend_cuda_new(int device, char *err, size_t errlen)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "backend: cuda: no usable GPU (%s)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device < 0 || device >= count) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "backend: cuda: device %d of %d", device, count);
        return NULL;
    }
    struct omni_backend *be = (struct omni_backend *)calloc(1, sizeof *be);
    struct cuda_state *s = (struct cuda_state *)calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "backend: cuda: out of memory");
        return NULL;
    }
    be->impl = s;
    s->device = device;
    const char *act = getenv("OMNI_CUDA_ACT");
    s->f32_act = act && !strcmp(act, "f32");
    const char *fc = getenv("OMNI_CUDA_F16_CACHE");
    s->f16_off = fc && !strcmp(fc, "0");
    const char *ir = getenv("OMNI_CUDA_INT8_ROWS");
    s->int8_rows = ir && atoi(ir) >= 0 && atoi(ir) < Q8_ACT_MAX ? atoi(ir) : Q8_ACT_MAX - 1;
    const char *irk = getenv("OMNI_CUDA_INT8_ROWS_K");
    s->int8_rows_k = irk && atoi(irk) >= 0 && atoi(irk) < Q8_ACT_MAX ? atoi(irk) : 8;
    const char *ms = getenv("OMNI_CUDA_MV_SPLIT");
    mv_split_on = ms && !strcmp(ms, "1");
    const char *m2 = getenv("OMNI_CUDA_MV2");
    s->mv2_off = m2 && !strcmp(m2, "0");
    const char *pd = getenv("OMNI_CUDA_PDL");
    pdl_level = pd && atoi(pd) >= 0 && atoi(pd) <= 2 ? atoi(pd) : 2;
    const char *pp = getenv("OMNI_CUDA_MV2_PPT");
    mv2_ppt = pp && atoi(pp) > 0 && atoi(pp) <= 64 ? atoi(pp) : 0; /* 0: from the card, below */
    const char *mg = getenv("OMNI_CUDA_MV2_GLU");
    mv2_glu16 = !(mg && !strcmp(mg, "1024"));
    mv2_glu_v = mg && !strcmp(mg, "512") ? 0 : mg && !strcmp(mg, "512u2") ? 2 : 1;
    const char *tm = getenv("OMNI_CUDA_MV2_TMIN");
    mv2_tmin = tm && atoi(tm) == 16 ? 16 : 32;
    const char *mb = getenv("OMNI_CUDA_MV2_MINB");
    mv2_minb = mb && atoi(mb) == 1 ? 1 : 8;
    const char *na = getenv("OMNI_CUDA_MV2_NA");
    mv2_na = !(na && !strcmp(na, "0"));
    const char *r2e = getenv("OMNI_CUDA_MV2_R2");
    mv2_r2 = !(r2e && !strcmp(r2e, "0"));
    const char *ns = getenv("OMNI_CUDA_NORM_STAGE");
    norm_stage = !(ns && !strcmp(ns, "0"));
    const char *nnt = getenv("OMNI_CUDA_NORM_THREADS");
    norm_nt = nnt && (atoi(nnt) == 128 || atoi(nnt) == 256 || atoi(nnt) == 512) ? atoi(nnt) : 256;
    const char *nqs = getenv("OMNI_CUDA_NORM_QS");
    norm_qs_on = !(nqs && !strcmp(nqs, "0"));
    const char *nw = getenv("OMNI_CUDA_NORM_WPRE");
    norm_wpre = !(nw && !strcmp(nw, "0"));
    const char *ag = getenv("OMNI_CUDA_ATT_GQA");
    att_gqa_min = !ag ? 32 : atoi(ag) <= 0 ? 0 : atoi(ag) < 8 ? 8 : atoi(ag);
    const char *apf = getenv("OMNI_CUDA_ATT_PF");
    att_pf = apf && atoi(apf) >= 0 && atoi(apf) <= 2 ? atoi(apf) : 1;
    const char *aro = getenv("OMNI_CUDA_ATT_ROPE");
    att_rope_on = !(aro && !strcmp(aro, "0"));
    const char *pb = getenv("OMNI_CUDA_PRE");
    pre_bits = pb && atoi(pb) >= 0 && atoi(pb) <= 7 ? atoi(pb) : 7;
    const char *au = getenv("OMNI_CUDA_ATT_UNROLL");
    att_unroll = au && (!strcmp(au, "0") || !strcmp(au, "1") || !strcmp(au, "2")) ? atoi(au) : -1;
    const char *sk_ops = getenv("OMNI_CUDA_SKIP");
    skip_ops = sk_ops ? atoi(sk_ops) & 15 : 0;
    const char *nf = getenv("OMNI_CUDA_NORM_FUSE");
    const bool norm_fuse = !(nf && !strcmp(nf, "0"));
    const char *fr = getenv("OMNI_CUDA_F16_REUSE");
    s->nh_on = !(fr && !strcmp(fr, "0"));
    const char *fo = getenv("OMNI_CUDA_F16_OUT");
    f16_out_on = !(fo && !strcmp(fo, "0"));
    const char *gc = getenv("OMNI_CUDA_GEMM_CAT");
    s->gemm_cat = gc && atoi(gc) >= 0 && atoi(gc) <= 3 ? atoi(gc) : 3;
    const char *sk = getenv("OMNI_CUDA_SPLITK");
    s->splitk = sk && !strcmp(sk, "auto") ? -1 : sk && atoi(sk) >= 2 && atoi(sk) <= 8 ? atoi(sk) : 0;
    const char *as = getenv("OMNI_CUDA_ATT_SPLIT");
    s->att_split_off = as && !strcmp(as, "0");
    const char *fa = getenv("OMNI_CUDA_FA");
    s->fa_off = fa && !strcmp(fa, "0");
    const char *fd = getenv("OMNI_CUDA_FD");
    s->fd_min = fd ? (atoi(fd) > 0 ? atoi(fd) : 0) : FD_DEFAULT_MIN_KEYS;
    const char *fdw = getenv("OMNI_CUDA_FDW");
    s->fd_wide = fdw ? (atoi(fdw) > 0 ? atoi(fdw) : 0) : FD_DEFAULT_WIDE_TOKENS;
    const char *fdp = getenv("OMNI_CUDA_FD_PF");
    s->fd_pf = !(fdp && !strcmp(fdp, "0"));
    const char *mq = getenv("OMNI_CUDA_MMQ");
    s->mmq_max = !mq ? MMQ_DEFAULT_ROWS : atoi(mq) <= 0 ? 0 : atoi(mq) < MMQ_MAX_ROWS ? atoi(mq) : MMQ_MAX_ROWS;
    const char *lt = getenv("OMNI_CUDA_LT");
    s->lt_max = !lt ? 64 : atoi(lt) > 0 ? atoi(lt) : 0;
    const char *mk = getenv("OMNI_CUDA_MMQ_KS");
    s->mmq_ks = mk && (atoi(mk) == 1 || atoi(mk) == 2 || atoi(mk) == 4) ? atoi(mk) : 0;
    be->destroy = cuda_destroy;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMemGetInfo(&be->mem_free, &be->mem_total)) != cudaSuccess) {
        omni_fail(err, errlen, OMNI_ERR_IO, "backend: cuda: device %d: %s", device,
                  cudaGetErrorString(e));
        cuda_destroy(be);
        return NULL;
    }
    s->n_sm = prop.multiProcessorCount;
    /* nominal DRAM bandwidth: 2 transfers a memory clock (kHz) over the bus */
    int mem_khz = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess)
        mem_khz = 0;
    if (!mv2_ppt)
        mv2_ppt = mv2_ppt_for(2.0 * mem_khz * 1e3 * (prop.memoryBusWidth / 8) / 1e9);
    if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(s->blas, s->stream) != CUBLAS_STATUS_SUCCESS) {
        omni_fail(err, errlen, OMNI_ERR_IO, "backend: cuda: cuBLAS initialisation failed");
        cuda_destroy(be);
        return NULL;
    }
    /* cuBLASLt for the batched steps' GEMMs (without it, cublasGemmEx) */
    if (s->lt_max)
        s->lt = gemm_lt_new(LT_WORKSPACE);
    /* the sliced argmax's scratch (small; without it, k_argmax) */
    if (cudaMalloc((void **)&s->am_pv, AM_ROWS * AM_SLICES * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&s->am_pi, AM_ROWS * AM_SLICES * sizeof(int)) != cudaSuccess ||
        cudaMalloc((void **)&s->am_count, AM_ROWS * sizeof(unsigned)) != cudaSuccess ||
        cudaMemset(s->am_count, 0, AM_ROWS * sizeof(unsigned)) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(s->am_pv);
        cudaFree(s->am_pi);
        cudaFree(s->am_count);
        s->am_pv = NULL;
        s->am_pi = NULL;
        s->am_count = NULL;
    }
    /* the norm fusion's counters and buffers (without them, no fusion) */
    if (norm_fuse) {
        s->tp = (struct tail_pend *)calloc(1, sizeof *s->tp);
        if (!s->tp || cudaMalloc((void **)&s->nf_ss, NF_GROUPS * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&s->nf_q, NF_GROUPS * (32 + sizeof(float))) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(s->nf_ss);
            cudaFree(s->nf_q);
            s->nf_ss = NULL;
            s->nf_q = NULL;
            free(s->tp);
            s->tp = NULL;
        }
    }
    snprintf(be->device, sizeof be->device, "%.96s (sm_%d%d, %zu MiB)", prop.name, prop.major,
             prop.minor, be->mem_total >> 20);
    be->name = "cuda";
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->memset0 = cuda_memset0;
    be->sync = cuda_sync;
    be->matmul = cuda_matmul;
    be->get_rows = cuda_get_rows;
    be->rmsnorm = cuda_rmsnorm;
    be->add = cuda_add;
    be->add_rmsnorm = cuda_add_rmsnorm;
    be->rope = cuda_rope;
    be->swiglu = cuda_swiglu;
    be->kv_store = cuda_kv_store;
    be->attention = cuda_attention;
    be->argmax = cuda_argmax;
    be->matmul_multi = cuda_matmul_multi;
    be->matmul_glu = cuda_matmul_glu;
    be->rope_kv = cuda_rope_kv;
    be->supports = cuda_supports;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->graph_begin = cuda_graph_begin;
    be->graph_end = cuda_graph_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_free = cuda_graph_free;
    be->prepare = cuda_prepare;
    be->prepare_group = cuda_prepare_group;
    be->mem_available = cuda_mem_available;
    omni_cuda_whisper_ops(be);
    omni_cuda_optimer_install(be);
    return be;
}
