// cuda_stream_probe.cu - how fast one kernel can stream a buffer of a given
// size from GPU memory: the ceiling for a decode product that reads a
// matrix once (docs/gpu.md "What one kernel can read"). A grid-stride read
// of 16-byte loads (one or four in flight a thread) over 7 MB .. 1 GB, at
// four grid sizes, L2 flushed before each run, best of 5 by CUDA events.
// Prints one JSON line a case: bytes, blocks, unroll, us, tb_s.
// Build and run on the GPU machine (no project libraries needed):
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe tools/cuda_stream_probe.cu && /tmp/probe
#include <cstdio>
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

int main()
{
    const size_t max_bytes = (size_t)1 << 30, flush_bytes = (size_t)200 << 20;
    uint4 *buf;
    unsigned *sink;
    char *flush;
    if (cudaMalloc(&buf, max_bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess ||
        cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
        fprintf(stderr, "cuda_stream_probe: cannot allocate %zu MB on the GPU\n", (max_bytes + flush_bytes) >> 20);
        return 1;
    }
    cudaMemset(buf, 1, max_bytes);
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
