/* dac_conv.c - the DAC GGUF loading the decoder and encoder share
 * (dac_conv.h): owned arrays, shape-checked tensors, packed convs, Snake
 * alphas, residual units, header keys. */
#include "audio/codec/dac_conv.h"

#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *dac_weights_alloc(struct dac_weights *w, size_t bytes)
{
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        void **p = realloc(w->owned, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        w->owned = p;
        w->cap_owned = cap;
    }
    void *f = malloc(bytes ? bytes : 1);
    if (f)
        w->owned[w->n_owned++] = f;
    return f;
}

void dac_weights_free(struct dac_weights *w)
{
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    w->owned = NULL;
    w->n_owned = w->cap_owned = 0;
}

float *dac_load_tensor(struct dac_weights *w, const struct gguf *g, const char *name, int nd,
                       const int64_t *dims, char *err, size_t errlen)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: tensor '%s' missing%s%s%s", gguf_path(g),
                  name, w->missing_hint ? " (" : "", w->missing_hint ? w->missing_hint : "",
                  w->missing_hint ? ")" : "");
        return NULL;
    }
    size_t n = 1;
    bool ok = t->n_dims == nd;
    for (int i = 0; i < nd && ok; i++) {
        ok = t->ne[i] == dims[nd - 1 - i];
        n *= (size_t)dims[i];
    }
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < nd; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "x" : "",
                     (long long)dims[i]);
        for (int i = t->n_dims - 1; i >= 0; i--)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld",
                     i != t->n_dims - 1 ? "x" : "", (long long)t->ne[i]);
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: tensor '%s' has shape %s, expected %s",
                  gguf_path(g), name, got, want);
        return NULL;
    }
    float *f = dac_weights_alloc(w, n * sizeof(float));
    if (!f) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: %s: out of memory for '%s'", gguf_path(g),
                  name);
        return NULL;
    }
    const unsigned char *p = t->data;
    switch (t->type) {
    case GGML_TYPE_F32:
        memcpy(f, p, n * sizeof(float));
        break;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = t->type == GGML_TYPE_F16 ? omni_fp16_to_fp32(h) : omni_bf16_to_fp32(h);
        }
        break;
    default:
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "dac: %s: tensor '%s' has type %s "
                  "(F32, F16 or BF16 expected)", gguf_path(g), name, ggml_type_name(t->type));
        return NULL;
    }
    w->n_params += (int64_t)n;
    return f;
}

int dac_load_conv(struct dac_weights *w, const struct gguf *g, const char *prefix, int c_in,
                  int c_out, int k, int dilation, struct omni_conv1d *c, char *err, size_t errlen)
{
    char name[192];
    snprintf(name, sizeof name, "%s.weight", prefix);
    float *wt = dac_load_tensor(w, g, name, 3, (int64_t[]){ c_out, c_in, k }, err, errlen);
    if (!wt)
        return OMNI_ERR_FORMAT;
    snprintf(name, sizeof name, "%s.bias", prefix);
    float *b = dac_load_tensor(w, g, name, 1, (int64_t[]){ c_out }, err, errlen);
    float *wp = b ? dac_weights_alloc(w, omni_conv1d_packed_floats(c_out, c_in, k) * sizeof(float))
                   : NULL;
    if (!wp)
        return b ? omni_fail(err, errlen, OMNI_ERR_NOMEM, "dac: out of memory") : OMNI_ERR_FORMAT;
    omni_conv1d_pack(wt, c_out, c_in, k, wp);
    *c = (struct omni_conv1d){ .c_in = c_in, .c_out = c_out, .k = k, .dilation = dilation,
                               .pad = (k - 1) * dilation / 2, .w = wp, .b = b };
    return 0;
}

float *dac_load_alpha(struct dac_weights *w, const struct gguf *g, const char *prefix, int c,
                      char *err, size_t errlen)
{
    char name[192];
    snprintf(name, sizeof name, "%s.alpha", prefix);
    return dac_load_tensor(w, g, name, 1, (int64_t[]){ c }, err, errlen);
}

int dac_load_res_unit(struct dac_weights *w, const struct gguf *g, const char *block, int j, int c,
                      struct dac_res_unit *r, char *err, size_t errlen)
{
    static const int dil[3] = { 1, 3, 9 };
    char q[160];
    snprintf(q, sizeof q, "%s.res_unit%d.snake1", block, j + 1);
    if (!(r->alpha1 = dac_load_alpha(w, g, q, c, err, errlen)))
        return OMNI_ERR_FORMAT;
    snprintf(q, sizeof q, "%s.res_unit%d.snake2", block, j + 1);
    if (!(r->alpha2 = dac_load_alpha(w, g, q, c, err, errlen)))
        return OMNI_ERR_FORMAT;
    snprintf(q, sizeof q, "%s.res_unit%d.conv1", block, j + 1);
    if (dac_load_conv(w, g, q, c, c, 7, dil[j], &r->conv1, err, errlen))
        return OMNI_ERR_FORMAT;
    snprintf(q, sizeof q, "%s.res_unit%d.conv2", block, j + 1);
    return dac_load_conv(w, g, q, c, c, 1, 1, &r->conv2, err, errlen) ? OMNI_ERR_FORMAT : 0;
}

int dac_check_arch(const struct gguf *g, const char *path, char *err, size_t errlen)
{
    size_t alen = 0;
    const char *arch = gguf_get_str(g, "general.architecture", &alen);
    if (!arch || alen != 3 || memcmp(arch, "dac", 3) != 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: general.architecture is '%.*s', "
                         "not 'dac' (convert a DacModel checkpoint with tools/hf_dac_to_gguf.py)",
                         path, arch ? (int)(alen > 40 ? 40 : alen) : 6, arch ? arch : "absent");
    return 0;
}

int dac_get_u32(const struct gguf *g, const char *key, int *out, char *err, size_t errlen)
{
    uint32_t v;
    if (gguf_get_u32(g, key, &v) != 0 || v == 0 || v > (1u << 20))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "dac: %s: key '%s' missing or out of "
                         "range", gguf_path(g), key);
    *out = (int)v;
    return 0;
}
