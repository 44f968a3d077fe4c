/* models.h - model aliases ("qwen3-4b", "gemma-3-4b:Q8_0") for serve and
 * pull: the catalog's hub repository and the quantization that fits this
 * machine's memory (src/core/catalog.h).
 *
 *   char repo[256], quant[32], err[512];
 *   int rc = models_resolve_alias("qwen3-4b", 8192, repo, sizeof repo, quant, sizeof quant,
 *                                 err, sizeof err);
 *   // 1: an alias (download repo with params.quant = quant); 0: not an alias; <0: error
 */
#ifndef OMNI_CLI_MODELS_H
#define OMNI_CLI_MODELS_H

#include <stddef.h>
#include <stdint.h>

/* This machine's memory in bytes (MemTotal), 0 when unknown. */
uint64_t models_ram_bytes(void);

/* ref = ALIAS or ALIAS:QUANT. 1 and repo/quant filled when it names a
 * catalog model (QUANT absent: the best that fits this machine's RAM with
 * n_ctx tokens of KV cache); 0 when ref is no alias (a path or a repo);
 * negative with err when the alias is known but nothing of it fits or the
 * quantization is unknown. */
int models_resolve_alias(const char *ref, int n_ctx, char *repo, size_t repo_cap, char *quant,
                         size_t quant_cap, char *err, size_t errlen);

#endif
