/* gpu_info.c - NVML through dlopen (gpu_info.h). Only the few entry points
 * used are declared here, with NVML's documented C signatures; NVML returns
 * 0 (NVML_SUCCESS) on success. */
#include "gpu_info.h"

#include "omni.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct nvml_device *nvml_device_t;
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_utilization {
    unsigned gpu, memory;
};

static struct {
    pthread_once_t once;
    bool ok;
    int (*init)(void);
    int (*handle)(unsigned index, nvml_device_t *dev);
    int (*memory)(nvml_device_t dev, struct nvml_memory *m);
    int (*util)(nvml_device_t dev, struct nvml_utilization *u);
} nv = { .once = PTHREAD_ONCE_INIT };

static void nv_load(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    *(void **)&nv.init = dlsym(h, "nvmlInit_v2");
    *(void **)&nv.handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nv.memory = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&nv.util = dlsym(h, "nvmlDeviceGetUtilizationRates");
    nv.ok = nv.init && nv.handle && nv.memory && nv.util && nv.init() == 0;
    if (!nv.ok)
        dlclose(h);
}

int gpu_info_read(int device, struct gpu_info *out)
{
    pthread_once(&nv.once, nv_load);
    if (!nv.ok)
        return OMNI_ERR_UNSUPPORTED;
    nvml_device_t dev = NULL;
    if (device < 0 || nv.handle((unsigned)device, &dev) != 0)
        return OMNI_ERR_ARG;
    struct nvml_memory m;
    struct nvml_utilization u;
    if (nv.memory(dev, &m) != 0)
        return OMNI_ERR_IO;
    out->mem_total = m.total;
    out->mem_used = m.used;
    out->util_pct = nv.util(dev, &u) == 0 ? u.gpu : 0;
    return 0;
}
