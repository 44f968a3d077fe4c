/* launch.h - a kernel launch with programmatic dependent launch (PDL) or
 * without, for the .cu files of the CUDA backend: with it the kernel may
 * start while the previous one on the stream finishes, and must wait
 * (griddepcontrol.wait) before reading what that one wrote. C++ (nvcc)
 * only. */
#ifndef OMNI_CUDA_LAUNCH_H
#define OMNI_CUDA_LAUNCH_H

#include <cuda_runtime.h>

template <typename... KArgs, typename... Args>
static inline cudaError_t launch_kernel(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t s, bool pdl, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, args...);
}

#endif
