/* backend.c - picks a compute backend by name (backend.h). The CUDA one is
 * linked only in `make CUDA=1` builds, which define OMNI_HAVE_CUDA; other
 * builds answer a request for it with an error that says how to get it. */
#include "backend.h"

#include "omni.h"

#include <string.h>

/* src/core/backend_cpu.c */
struct omni_backend *omni_backend_cpu_new(char *err, size_t errlen);
#ifdef OMNI_HAVE_CUDA
/* src/core/cuda/backend_cuda.cu */
struct omni_backend *omni_backend_cuda_new(int device, char *err, size_t errlen);
#endif

bool omni_backend_available(const char *name)
{
    if (name && !strcmp(name, "cpu"))
        return true;
#ifdef OMNI_HAVE_CUDA
    if (name && !strcmp(name, "cuda"))
        return true;
#endif
    return false;
}

struct omni_backend *omni_backend_new(const char *name, int device, char *err, size_t errlen)
{
    if (!name) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "backend: no name");
        return NULL;
    }
    if (!strcmp(name, "cpu"))
        return omni_backend_cpu_new(err, errlen);
    if (!strcmp(name, "cuda")) {
#ifdef OMNI_HAVE_CUDA
        return omni_backend_cuda_new(device, err, errlen);
#else
        (void)device;
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                  "backend: cuda: this build has no CUDA backend (build with make CUDA=1)");
        return NULL;
#endif
    }
    omni_fail(err, errlen, OMNI_ERR_ARG, "backend: '%.32s' unknown (cpu, cuda)", name);
    return NULL;
}

void omni_backend_free(struct omni_backend *be)
{
    if (be)
        be->destroy(be);
}
