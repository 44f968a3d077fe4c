/* embed_load.c - loading embedding models from files for the embedding
 * service (embed.h): the architecture decides between the encoder path
 * (llm/bert.h) and a decoder in the engine. Apart from embed.c so that code
 * that only runs jobs (the API routes, their fuzz harness) does not link the
 * model loaders and the engine's registration. */
#define _GNU_SOURCE /* memmem */
#include "src/embed/embed.h"

#include "llm/model.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"

#include <stdio.h>
#include <string.h>

int embed_file_is_encoder(const char *path, char *err, size_t errlen)
{
    struct gguf *g = gguf_open(path, err, errlen);
    if (!g)
        return OMNI_ERR_IO;
    size_t len = 0;
    const char *arch = gguf_get_str(g, "general.architecture", &len);
    /* bert, nomic-bert, jina-bert-v2, modernbert: llama.cpp's encoder families */
    const bool enc = arch && len < 64 && memmem(arch, len, "bert", 4);
    gguf_free(g);
    return enc;
}

static void free_llm(void *m) { llm_model_free(m); }

int embed_service_load(struct embed_service *s, const char *path, enum embed_role role,
                       struct engine *e, struct compute *compute, const char *name, int pooling,
                       int normalize, char *err, size_t errlen)
{
    char base[128];
    if (!name) {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf"))
            n -= 5;
        snprintf(base, sizeof base, "%.*s", (int)(n < sizeof base - 1 ? n : sizeof base - 1), b);
        name = base;
    }
    const int enc = embed_file_is_encoder(path, err, errlen);
    if (enc < 0)
        return enc;
    if (enc)
        return embed_service_load_bert(s, path, compute, name, pooling, normalize, err, errlen);
    if (!e)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: %s: a decoder model needs the engine",
                         path);
    struct llm_model *m = llm_model_load(path, NULL, err, errlen);
    if (!m)
        return OMNI_ERR_FORMAT;
    char ename[32];
    snprintf(ename, sizeof ename, "embed-%d", embed_service_n_models(s));
    int idx = engine_add_model(e, m, ename, err, errlen);
    if (idx < 0) {
        llm_model_free(m);
        return idx;
    }
    /* the engine borrows m from here on: it lives until the service is freed
     * (after the engine), also when the service refuses it below */
    embed_service_keep(s, m, free_llm);
    return embed_service_add_engine(s, e, idx, name, role, pooling, normalize, err, errlen);
}
