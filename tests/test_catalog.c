/* test_catalog.c - the model catalog's picks (src/core/catalog.c): the best
 * quantization that fits a memory budget, what a missing tensor type rules
 * out, estimates that grow with context, and every entry well formed. */
#include "tests/test.h"
#include "src/core/catalog.h"
#include "src/core/tensor.h"

#include <stdbool.h>

#define GIB (1ull << 30)

TEST(catalog_entries_well_formed)
{
    CHECK(catalog_count() > 10);
    for (int i = 0; i < catalog_count(); i++) {
        const struct catalog_model *m = catalog_at(i);
        CHECK(m && m->alias && m->arch && m->repo && strchr(m->repo, '/'));
        CHECK(catalog_find(m->alias) == m);
        CHECK(m->params_b > 0 && m->active_b > 0 && m->active_b <= m->params_b);
        CHECK(m->kv_layers > 0 && m->n_head_kv > 0 && m->head_dim > 0);
        /* every tag of the entry is a quantization the catalog knows */
        char tags[128];
        snprintf(tags, sizeof tags, "%s", m->quants);
        for (char *save, *t = strtok_r(tags, " ", &save); t; t = strtok_r(NULL, " ", &save))
            CHECK(catalog_quant_find(t) != NULL);
    }
    CHECK(catalog_find("QWEN3-4B") == catalog_find("qwen3-4b"));
    CHECK(catalog_find("qwen3-4") == NULL);
    CHECK(catalog_quant_find("q4_k_m") == catalog_quant_find("Q4_K_M"));
}

static bool no_low_bits(int type)
{
    return type != GGML_TYPE_Q3_K && type != GGML_TYPE_Q2_K;
}

TEST(catalog_picks_best_that_fits)
{
    const struct catalog_model *m = catalog_find("qwen3-4b");
    CHECK(m);
    struct catalog_fit fit;
    /* plenty of memory: the best quality the repo has */
    CHECK(catalog_pick(m, 64 * GIB, 8192, NULL, &fit) == 0);
    CHECK_STR_CONTAINS(fit.quant->tag, "Q8_0");
    CHECK(fit.need_bytes >= fit.file_bytes + fit.kv_bytes);
    CHECK(fit.need_bytes <= catalog_usable(64 * GIB));
    /* 8 GiB: Q8_0 (4.3 GB + 1.2 GB of KV) still fits; 6 GiB: a smaller one */
    CHECK(catalog_pick(m, 8 * GIB, 8192, NULL, &fit) == 0);
    CHECK_STR_CONTAINS(fit.quant->tag, "Q8_0");
    CHECK(catalog_pick(m, 6 * GIB, 8192, NULL, &fit) == 0);
    const double bpw6 = fit.quant->bpw;
    CHECK(bpw6 < 8.5);
    CHECK(fit.need_bytes <= catalog_usable(6 * GIB));
    /* a longer context takes room from the weights */
    CHECK(catalog_pick(m, 6 * GIB, 16384, NULL, &fit) == 0);
    CHECK(fit.quant->bpw < bpw6);
    /* 4 GiB: only the 2-3 bit mixes; a build without their types has nothing */
    CHECK(catalog_pick(m, 4 * GIB, 2048, NULL, &fit) == 0);
    CHECK(fit.quant->bpw < 4.0);
    CHECK(catalog_pick(m, 4 * GIB, 2048, no_low_bits, &fit) == -1);
    CHECK(fit.quant && fit.need_bytes > catalog_usable(4 * GIB)); /* the smallest usable */
    /* 1 GiB: nothing */
    CHECK(catalog_pick(m, 1 * GIB, 8192, NULL, &fit) == -1);
}

/* Hybrids: K/V of the attention layers, the sequence's state (Qwen3.5-9B:
 * 50.25 MiB, against 32 KiB of K/V per token) and the snapshot store, by
 * default a quarter of the engine's budget: a third on top of the K/V. */
TEST(catalog_hybrid_counts_state_snapshots)
{
    const struct catalog_model *m = catalog_find("qwen3.5-9b");
    CHECK(m && m->state_bytes == 24ull * 4 * (3 * 8192 + 32 * 128 * 128));
    struct catalog_fit fit;
    catalog_estimate(m, catalog_quant_find("Q4_K_M"), 16160, &fit);
    const uint64_t kv = 16160ull * 8 * 2 * 4 * 256 * 2;
    CHECK_EQ(fit.kv_bytes, kv + m->state_bytes + kv / 3);
    CHECK(fit.kv_bytes < 2 * kv + m->state_bytes);
    CHECK(catalog_find("qwen3-4b")->state_bytes == 0);
}

TEST(catalog_moe_reads_active_experts)
{
    const struct catalog_model *moe = catalog_find("qwen3-30b-a3b");
    CHECK(moe && moe->active_b < moe->params_b / 5);
    struct catalog_fit fit;
    /* the file holds every expert */
    catalog_estimate(moe, catalog_quant_find("Q4_K_M"), 4096, &fit);
    CHECK(fit.file_bytes > 15ull * 1000 * 1000 * 1000);
    CHECK(catalog_usable(24 * GIB) < 24 * GIB - GIB);
}
