// cuda_stream_probe.cu - how fast one kernel can stream a buffer of a given
// size from GPU memory: the ceiling for a decode product that reads a
// matrix once (docs/gpu.md "What one kernel can read"). A grid-stride read
// of 16-byte loads (one or four in flight a thread) over 7 MB .. 1 GB, at
// four grid sizes, L2 flushed before each run, best of 5 by CUDA events.
// Prints one JSON line a case: bytes, blocks, unroll, us, tb_s.
// `probe chain` instead streams a 7B decode step's weights as the step
// reads them (Qwen2.5-7B Q4_K_M: 28 layers of q/k/v 9.3 MB, o 7.2 MB,
// gate/up 76.3 MB, down 38.2 or 55.7 MB, then the 447 MB output), one
// kernel a product captured in a CUDA graph, each with programmatic
// dependent launch (its first loads before griddepcontrol.wait, as the
// products do) or without, against one kernel reading the same bytes: what
// a step of one kernel a product could reach if each were a pure stream.
// Build and run on the GPU machine (no project libraries needed):
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe tools/cuda_stream_probe.cu && /tmp/probe [chain]
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void k_read(const uint4 *p, size_t n, unsigned *sink, int unroll)
{
    unsigned acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t step = (size_t)gridDim.x * blockDim.x;
    if (unroll == 4)
        for (; i + 3 * step < n; i += 4 * step) {
            const uint4 a = __ldg(p + i), b = __ldg(p + i + step), c = __ldg(p + i + 2 * step),
                        d = __ldg(p + i + 3 * step);
            acc ^= a.x ^ b.y ^ c.z ^ d.w;
        }
    for (; i < n; i += step) {
        const uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.w;
    }
    if (acc == 0x12345678u) /* never in practice: keeps the loads */
        sink[0] = acc;
}

static const size_t flush_bytes = (size_t)200 << 20; /* written before each run: L2 emptied */

/* The buffer read (bytes, set), the loads' sink and the flush buffer */
static bool buffers(size_t bytes, void **buf, unsigned **sink, char **flush)
{
    if (cudaMalloc(buf, bytes) != cudaSuccess || cudaMalloc((void **)sink, 4) != cudaSuccess ||
        cudaMalloc((void **)flush, flush_bytes) != cudaSuccess) {
        fprintf(stderr, "cuda_stream_probe: cannot allocate %zu MB on the GPU\n", (bytes + flush_bytes) >> 20);
        return false;
    }
    cudaMemset(*buf, 1, bytes);
    return true;
}

/* One product of the chain: every thread's first 4 loads go out before
 * the wait for the previous kernel (the weights do not depend on it). */
__global__ void k_read_link(const uint4 *p, size_t n, unsigned *sink)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const size_t step = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint4 f[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
        f[u] = i + u * step < n ? __ldg(p + i + u * step) : make_uint4(0, 0, 0, 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned acc = f[0].x ^ f[1].y ^ f[2].z ^ f[3].w;
    for (i += 4 * step; i + 3 * step < n; i += 4 * step) {
        const uint4 a = __ldg(p + i), b = __ldg(p + i + step), c = __ldg(p + i + 2 * step),
                    d = __ldg(p + i + 3 * step);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += step)
        acc ^= __ldg(p + i).x;
    if (acc == 0x12345678u)
        sink[0] = acc;
}

/* The chain mode (see the top): best of 5 graph replays, L2 flushed before each */
static int chain(int sms)
{
    const double mb[4] = { 9.29, 7.22, 76.31, 38.16 }, down6 = 55.66, out = 447.0;
    size_t len[28 * 4 + 1], total = 0;
    int n = 0;
    for (int l = 0; l < 28; l++)
        for (int k = 0; k < 4; k++)
            len[n++] = (size_t)((k == 3 && l % 2 ? down6 : mb[k]) * 1e6) / 256 * 256;
    len[n++] = (size_t)(out * 1e6) / 256 * 256;
    for (int i = 0; i < n; i++)
        total += len[i];
    char *buf, *flush;
    unsigned *sink;
    if (!buffers(total, (void **)&buf, &sink, &flush))
        return 1;
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (int per_sm : { 2, 4, 8 })
        for (int mode = 0; mode < 3; mode++) { /* 0: one kernel, 1: chain, 2: chain with PDL */
            cudaGraph_t g;
            cudaGraphExec_t ge;
            cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
            size_t off = 0;
            for (int i = 0; i < (mode ? n : 1); i++) {
                const size_t bytes = mode ? len[i] : total;
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3((unsigned)(sms * per_sm));
                cfg.blockDim = dim3(256);
                cfg.stream = st;
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = at;
                cfg.numAttrs = mode == 2 ? 1 : 0;
                cudaLaunchKernelEx(&cfg, k_read_link, (const uint4 *)(buf + off), bytes / 16, sink);
                off += bytes;
            }
            cudaStreamEndCapture(st, &g);
            if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
                fprintf(stderr, "cuda_stream_probe: graph instantiation failed\n");
                return 1;
            }
            float best = 1e9f;
            for (int rep = 0; rep < 5; rep++) {
                cudaMemsetAsync(flush, rep, flush_bytes, st);
                cudaEventRecord(t0, st);
                cudaGraphLaunch(ge, st);
                cudaEventRecord(t1, st);
                cudaEventSynchronize(t1);
                float ms = 0.0f;
                cudaEventElapsedTime(&ms, t0, t1);
                best = ms < best ? ms : best;
            }
            printf("{\"bench\":\"stream_chain\",\"mode\":\"%s\",\"kernels\":%d,\"bytes\":%zu,\"blocks\":%d,"
                   "\"us\":%.1f,\"tb_s\":%.3f,\"of_3_35\":%.3f}\n",
                   mode == 0 ? "one" : mode == 1 ? "chain" : "chain_pdl", mode ? n : 1, total, sms * per_sm,
                   best * 1e3, total / (best * 1e-3) / 1e12, total / (best * 1e-3) / 3.35e12);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "cuda_stream_probe: a launch failed\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "chain")) {
        int sms = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        return chain(sms);
    }
    const size_t max_bytes = (size_t)1 << 30;
    uint4 *buf;
    unsigned *sink;
    char *flush;
    if (!buffers(max_bytes, (void **)&buf, &sink, &flush))
        return 1;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    const size_t sizes[] = { (size_t)7 << 20, (size_t)38 << 20, (size_t)76 << 20, (size_t)300 << 20, max_bytes };
    const int per_sm[] = { 4, 8, 16, 32 };
    for (size_t bytes : sizes)
        for (int b : per_sm)
            for (int unroll : { 1, 4 }) {
                float best = 1e9f;
                for (int rep = 0; rep < 5; rep++) {
                    cudaMemset(flush, rep, flush_bytes); /* out of L2 */
                    cudaEventRecord(t0);
                    k_read<<<sms * b, 256>>>(buf, bytes / 16, sink, unroll);
                    cudaEventRecord(t1);
                    cudaEventSynchronize(t1);
                    float ms = 0.0f;
                    cudaEventElapsedTime(&ms, t0, t1);
                    best = ms < best ? ms : best;
                }
                printf("{\"bench\":\"stream_read\",\"bytes\":%zu,\"blocks\":%d,\"unroll\":%d,\"us\":%.2f,\"tb_s\":%.3f}\n",
                       bytes, sms * b, unroll, best * 1e3, bytes / (best * 1e-3) / 1e12);
            }
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "cuda_stream_probe: a launch failed\n");
        return 1;
    }
    return 0;
}
