/* catalog.h - the models people run, by short name: which hub repository
 * holds each one's GGUF files, its size, and which quantization of it fits a
 * machine's memory with room for the KV cache (`omniserve recommend`,
 * `serve -m qwen3-4b`, `pull gemma-3-4b`).
 *
 *   const struct catalog_model *m = catalog_find("qwen3-4b");
 *   struct catalog_fit fit;
 *   if (m && catalog_pick(m, ram_bytes, 8192, type_ok, &fit) == 0)
 *       pull(m->repo, fit.quant->tag);       // the best quality that fits
 *
 * Sizes are estimates (parameters x bits per weight of the quantization mix
 * llama.cpp's quantize writes); the KV cache is F16 K and V of the attention
 * layers at the given context, plus for hybrid models their recurrent state
 * and the prefix cache's snapshots of it (one every kv-block-size-16 blocks
 * as the engine picks them: about as much as the K/V). Pure data and arithmetic: no I/O, safe from
 * any thread. */
#ifndef OMNI_CATALOG_H
#define OMNI_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A quantization as downloads name it ("Q4_K_M") and what it is made of. */
struct catalog_quant {
    const char *tag;        /* the file-name tag the repositories use */
    double bpw;             /* average bits per weight of the file */
    int types[5];           /* ggml tensor types it needs beyond F32/F16 (-1 ends) */
};

struct catalog_model {
    const char *alias;      /* "qwen3-4b" */
    const char *arch;       /* general.architecture of its GGUF */
    const char *repo;       /* hub repository of GGUF files */
    const char *about;      /* one line for listings */
    double params_b;        /* parameters, billions (all experts) */
    double active_b;        /* read per generated token, billions (MoE: active experts) */
    int kv_layers;          /* layers with a KV cache (hybrids: the attention layers) */
    int n_head_kv, head_dim;
    const char *quants;     /* tags the repository has, best quality first, space separated */
    uint64_t state_bytes;   /* hybrids: one sequence's recurrent state (conv + DeltaNet), else 0 */
};

/* The choice for one model and a memory budget. */
struct catalog_fit {
    const struct catalog_quant *quant;
    uint64_t file_bytes;    /* estimated size of the GGUF */
    uint64_t kv_bytes;      /* KV cache at the context asked for (hybrids: + state snapshots) */
    uint64_t need_bytes;    /* file + KV + the server's working memory */
};

int catalog_count(void);
const struct catalog_model *catalog_at(int i);
/* By alias, case-insensitive; NULL when unknown. */
const struct catalog_model *catalog_find(const char *alias);
/* A quantization by tag ("q4_k_m" too); NULL when unknown. */
const struct catalog_quant *catalog_quant_find(const char *tag);

/* The estimate for quantization q of m at n_ctx tokens. */
void catalog_estimate(const struct catalog_model *m, const struct catalog_quant *q, int n_ctx,
                      struct catalog_fit *out);
/* Memory a budget of ram_bytes leaves for a model: the system and the
 * server's other buffers keep max(1.5 GiB, 10%). */
uint64_t catalog_usable(uint64_t ram_bytes);
/* The best quality quantization of m that the repository has, type_ok
 * accepts every tensor type of (NULL: all), and fits ram_bytes with n_ctx
 * tokens of KV cache. 0 and *out filled, or -1 when none fits (out then
 * holds the smallest usable one's estimate, quant NULL if none is usable). */
int catalog_pick(const struct catalog_model *m, uint64_t ram_bytes, int n_ctx,
                 bool (*type_ok)(int ggml_type), struct catalog_fit *out);

#endif
