/* gpu_info.h - memory and utilisation of an NVIDIA GPU for /metrics, read
 * through NVML (libnvidia-ml.so.1, which comes with the NVIDIA driver),
 * opened with dlopen on first use: no build dependency, and "unavailable"
 * (an error) on machines without the driver.
 *
 *   struct gpu_info gi;
 *   if (gpu_info_read(0, &gi) == 0)
 *       printf("%llu of %llu bytes, %u%% busy\n", gi.mem_used, gi.mem_total, gi.util_pct);
 *
 * The index is NVML's, which is the CUDA device index unless
 * CUDA_VISIBLE_DEVICES reorders the devices.
 *
 * Thread safety: any thread (NVML is thread-safe; loading happens once). */
#ifndef OMNI_GPU_INFO_H
#define OMNI_GPU_INFO_H

struct gpu_info {
    unsigned long long mem_total, mem_used; /* bytes, the whole device */
    unsigned util_pct;                      /* % of the last sample period a kernel ran */
};

/* 0, or a negative omni_err: OMNI_ERR_UNSUPPORTED without NVML, OMNI_ERR_ARG
 * for a device NVML does not know, OMNI_ERR_IO when a query fails. */
int gpu_info_read(int device, struct gpu_info *out);

#endif
