/* catalog.c - the model catalog behind `recommend`, `serve -m ALIAS` and
 * `pull ALIAS`: hub repositories and shapes of the models people run, and
 * the arithmetic that picks a quantization for a memory budget.
 *
 * Facts: repositories as their owners publish them (the official or the
 * widely used community GGUF repository where the official one splits its
 * files); parameter counts, attention layers, KV heads and head sizes from
 * the models' configs; bits per weight of each quantization as llama.cpp's
 * quantize reports them for its mixes. */
#include "src/core/catalog.h"
#include "src/core/tensor.h"

#include <string.h>
#include <strings.h>

enum { T_END = -1 };

/* Best quality first: the order catalog_pick walks. */
static const struct catalog_quant quants[] = {
    { "BF16", 16.0, { GGML_TYPE_BF16, T_END } },
    { "F16", 16.0, { T_END } },
    { "Q8_0", 8.50, { GGML_TYPE_Q8_0, T_END } },
    { "Q6_K", 6.56, { GGML_TYPE_Q6_K, T_END } },
    { "Q5_K_M", 5.69, { GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, T_END } },
    { "Q4_K_M", 4.89, { GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, T_END } },
    { "MXFP4", 4.63, { GGML_TYPE_MXFP4, T_END } },
    { "Q4_0", 4.55, { GGML_TYPE_Q4_0, T_END } },
    { "IQ4_XS", 4.46, { GGML_TYPE_IQ4_XS, T_END } },
    { "Q3_K_M", 3.91, { GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, T_END } },
    { "Q2_K", 3.35, { GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, T_END } },
};
#define N_QUANTS ((int)(sizeof quants / sizeof *quants))

#define K_QUANTS "Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M Q2_K"

/* Recurrent state of one sequence, F32 as the engine keeps it: a Gated
 * DeltaNet layer holds (conv - 1) steps of its q, k, v conv inputs and a
 * dv x dk matrix per value head; an lfm2 conv block (l_cache - 1) steps of
 * its n_embd inputs. */
#define GDN_STATE(layers, conv, nk, nv, dk, dv) \
    ((uint64_t)(layers) * 4u * ((uint64_t)((conv) - 1) * (2u * (nk) * (dk) + (uint64_t)(nv) * (dv)) + \
                                (uint64_t)(nv) * (dk) * (dv)))
#define CONV_STATE(layers, l_cache, n_embd) \
    ((uint64_t)(layers) * 4u * (uint64_t)((l_cache) - 1) * (n_embd))

static const struct catalog_model models[] = {
    { "qwen2.5-0.5b", "qwen2", "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "Qwen2.5 0.5B Instruct (the default chat model)",
      0.49, 0.49, 24, 2, 64, K_QUANTS " Q4_0", 0 },
    { "qwen2.5-1.5b", "qwen2", "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "Qwen2.5 1.5B Instruct",
      1.54, 1.54, 28, 2, 128, K_QUANTS " Q4_0", 0 },
    { "qwen2.5-7b", "qwen2", "bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5 7B Instruct",
      7.62, 7.62, 28, 4, 128, K_QUANTS, 0 },
    { "qwen3-0.6b", "qwen3", "unsloth/Qwen3-0.6B-GGUF", "Qwen3 0.6B (thinking and tools)",
      0.60, 0.60, 28, 8, 128, K_QUANTS, 0 },
    { "qwen3-1.7b", "qwen3", "unsloth/Qwen3-1.7B-GGUF", "Qwen3 1.7B",
      1.72, 1.72, 28, 8, 128, K_QUANTS, 0 },
    { "qwen3-4b", "qwen3", "unsloth/Qwen3-4B-GGUF", "Qwen3 4B",
      4.02, 4.02, 36, 8, 128, K_QUANTS, 0 },
    { "qwen3-8b", "qwen3", "unsloth/Qwen3-8B-GGUF", "Qwen3 8B",
      8.19, 8.19, 36, 8, 128, K_QUANTS, 0 },
    { "qwen3-14b", "qwen3", "unsloth/Qwen3-14B-GGUF", "Qwen3 14B",
      14.8, 14.8, 40, 8, 128, K_QUANTS, 0 },
    { "qwen3-30b-a3b", "qwen3moe", "unsloth/Qwen3-30B-A3B-GGUF", "Qwen3 30B-A3B (mixture of experts, 3.3B active)",
      30.5, 3.3, 48, 4, 128, K_QUANTS, 0 },
    { "qwen3-coder-30b-a3b", "qwen3moe", "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF", "Qwen3-Coder 30B-A3B Instruct (agents)",
      30.5, 3.3, 48, 4, 128, K_QUANTS, 0 },
    { "qwen3.5-4b", "qwen35", "unsloth/Qwen3.5-4B-GGUF", "Qwen3.5 4B (hybrid Gated DeltaNet)",
      4.0, 4.0, 8, 4, 256, K_QUANTS, GDN_STATE(24, 4, 16, 32, 128, 128) },
    { "qwen3.5-9b", "qwen35", "unsloth/Qwen3.5-9B-GGUF", "Qwen3.5 9B (hybrid Gated DeltaNet)",
      9.0, 9.0, 8, 4, 256, K_QUANTS, GDN_STATE(24, 4, 16, 32, 128, 128) },
    { "qwen3.5-35b-a3b", "qwen35moe", "unsloth/Qwen3.5-35B-A3B-GGUF", "Qwen3.5 35B-A3B (hybrid, mixture of experts)",
      35.0, 3.0, 10, 2, 256, K_QUANTS, GDN_STATE(30, 4, 16, 32, 128, 128) },
    { "llama-3.2-1b", "llama", "bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama 3.2 1B Instruct",
      1.24, 1.24, 16, 8, 64, K_QUANTS " Q4_0", 0 },
    { "llama-3.2-3b", "llama", "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama 3.2 3B Instruct",
      3.21, 3.21, 28, 8, 128, K_QUANTS " Q4_0", 0 },
    { "llama-3.1-8b", "llama", "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Llama 3.1 8B Instruct",
      8.03, 8.03, 32, 8, 128, K_QUANTS " Q4_0", 0 },
    { "gemma-3-1b", "gemma3", "ggml-org/gemma-3-1b-it-GGUF", "Gemma 3 1B IT",
      1.0, 1.0, 26, 1, 256, "Q8_0 Q4_K_M", 0 },
    { "gemma-3-4b", "gemma3", "ggml-org/gemma-3-4b-it-GGUF", "Gemma 3 4B IT",
      3.88, 3.88, 34, 4, 256, "Q8_0 Q4_K_M", 0 },
    { "gemma-3-12b", "gemma3", "ggml-org/gemma-3-12b-it-GGUF", "Gemma 3 12B IT",
      12.2, 12.2, 48, 8, 256, "Q8_0 Q4_K_M", 0 },
    { "phi-4-mini", "phi3", "bartowski/microsoft_Phi-4-mini-instruct-GGUF", "Phi-4-mini Instruct",
      3.84, 3.84, 32, 8, 128, K_QUANTS, 0 },
    { "ministral-8b", "llama", "bartowski/Ministral-8B-Instruct-2410-GGUF", "Ministral 8B Instruct",
      8.02, 8.02, 36, 8, 128, K_QUANTS, 0 },
    { "mistral-nemo", "llama", "bartowski/Mistral-Nemo-Instruct-2407-GGUF", "Mistral-Nemo 12B Instruct",
      12.2, 12.2, 40, 8, 128, K_QUANTS, 0 },
    { "smollm3-3b", "smollm3", "ggml-org/SmolLM3-3B-GGUF", "SmolLM3 3B",
      3.08, 3.08, 36, 4, 128, "Q8_0 Q4_K_M", 0 },
    { "lfm2-1.2b", "lfm2", "LiquidAI/LFM2-1.2B-GGUF", "LFM2 1.2B (short convolutions beside attention)",
      1.17, 1.17, 6, 8, 64, "Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0", CONV_STATE(10, 3, 2048) },
    { "gpt-oss-20b", "gpt-oss", "ggml-org/gpt-oss-20b-GGUF", "gpt-oss 20B (mixture of experts, 3.6B active)",
      20.9, 3.6, 24, 8, 64, "MXFP4", 0 },
};
#define N_MODELS ((int)(sizeof models / sizeof *models))

int catalog_count(void) { return N_MODELS; }

const struct catalog_model *catalog_at(int i)
{
    return i >= 0 && i < N_MODELS ? &models[i] : NULL;
}

const struct catalog_model *catalog_find(const char *alias)
{
    for (int i = 0; alias && i < N_MODELS; i++)
        if (!strcasecmp(models[i].alias, alias))
            return &models[i];
    return NULL;
}

const struct catalog_quant *catalog_quant_find(const char *tag)
{
    for (int i = 0; tag && i < N_QUANTS; i++)
        if (!strcasecmp(quants[i].tag, tag))
            return &quants[i];
    return NULL;
}

void catalog_estimate(const struct catalog_model *m, const struct catalog_quant *q, int n_ctx,
                      struct catalog_fit *out)
{
    out->quant = q;
    out->file_bytes = (uint64_t)(m->params_b * 1e9 * q->bpw / 8.0);
    /* K and V, F16, of every attention layer */
    const uint64_t per_token = (uint64_t)m->kv_layers * 2u * (uint64_t)m->n_head_kv *
                               (uint64_t)m->head_dim * 2u;
    out->kv_bytes = (uint64_t)n_ctx * per_token;
    if (m->state_bytes) {
        /* the sequence's own state, and the prefix cache's snapshot store:
         * by default (--state-snapshot-memory auto) a quarter of the budget
         * the engine picks, so a third on top of the K/V */
        out->kv_bytes += m->state_bytes + out->kv_bytes / 3;
    }
    /* activations, logits and the prompt chunk's scratch: about 5% of the
     * weights, at least 256 MiB */
    uint64_t work = out->file_bytes / 20;
    if (work < (256ull << 20))
        work = 256ull << 20;
    out->need_bytes = out->file_bytes + out->kv_bytes + work;
}

uint64_t catalog_usable(uint64_t ram_bytes)
{
    uint64_t keep = ram_bytes / 10;
    if (keep < (3ull << 29))
        keep = 3ull << 29;
    return ram_bytes > keep ? ram_bytes - keep : 0;
}

/* Is tag one of the space-separated words of list? */
static bool has_word(const char *list, const char *tag)
{
    const size_t n = strlen(tag);
    for (const char *p = list; (p = strstr(p, tag)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0))
            return true;
    return false;
}

static bool quant_usable(const struct catalog_quant *q, bool (*type_ok)(int))
{
    for (int k = 0; type_ok && k < 5 && q->types[k] != T_END; k++)
        if (!type_ok(q->types[k]))
            return false;
    return true;
}

int catalog_pick(const struct catalog_model *m, uint64_t ram_bytes, int n_ctx,
                 bool (*type_ok)(int ggml_type), struct catalog_fit *out)
{
    const uint64_t usable = catalog_usable(ram_bytes);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < N_QUANTS; i++) {
        const struct catalog_quant *q = &quants[i];
        if (!has_word(m->quants, q->tag) || !quant_usable(q, type_ok))
            continue;
        catalog_estimate(m, q, n_ctx, out); /* the last one tried: the smallest usable */
        if (out->need_bytes <= usable)
            return 0;
    }
    return -1;
}
