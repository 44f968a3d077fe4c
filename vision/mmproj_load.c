/* mmproj_load.c - an mmproj GGUF's tensors and keys with one error record
 * (see mmproj_load.h). */
#include "vision/mmproj_load.h"

#include <stdlib.h>

#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"

int mmproj_fail(struct mmproj_load *l, int code, const char *what, const char *name)
{
    if (!l->rc)
        l->rc = omni_fail(l->err, l->errlen, code, "vision: %s: %s '%s'", l->path, what, name);
    return l->rc;
}

const struct gguf_tensor *mmproj_find(struct mmproj_load *l, const char *name, bool required)
{
    const struct gguf_tensor *t = gguf_find_tensor(l->g, name);
    if (!t) {
        if (required)
            mmproj_fail(l, OMNI_ERR_FORMAT, "missing tensor", name);
        return NULL;
    }
    const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
    if (!tr || !tr->supported) {
        mmproj_fail(l, OMNI_ERR_UNSUPPORTED, "unsupported type of tensor", name);
        return NULL;
    }
    return t;
}

void mmproj_mat(struct mmproj_load *l, const char *name, int64_t n_in, int64_t n_out,
                struct omni_tensor *out)
{
    const struct gguf_tensor *t = mmproj_find(l, name, true);
    if (!t)
        return;
    if (t->ne[0] != n_in || t->ne[1] * t->ne[2] * t->ne[3] != n_out) {
        mmproj_fail(l, OMNI_ERR_FORMAT, "wrong shape of tensor", name);
        return;
    }
    *out = (struct omni_tensor){ .type = t->type, .ne = { n_in, n_out }, .data = t->data };
}

float *mmproj_vec(struct mmproj_load *l, const char *name, int64_t n, bool required)
{
    const struct gguf_tensor *t = mmproj_find(l, name, required);
    if (!t)
        return NULL;
    if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n) {
        mmproj_fail(l, OMNI_ERR_FORMAT, "wrong size of tensor", name);
        return NULL;
    }
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) {
        mmproj_fail(l, OMNI_ERR_NOMEM, "out of memory for", name);
        return NULL;
    }
    struct omni_tensor w = { .type = t->type, .ne = { n, 1 }, .data = t->data };
    omni_tensor_get_row(&w, 0, v);
    return v;
}

int mmproj_key(struct mmproj_load *l, const char *key, int *out, bool required, int max)
{
    uint32_t v;
    int rc = gguf_get_u32(l->g, key, &v);
    if (rc == OMNI_ERR_NOTFOUND && !required)
        return 0;
    if (rc < 0 || v == 0 || v > (uint32_t)max)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "missing or out-of-range key", key);
    *out = (int)v;
    return 0;
}
