/* models.c - `omniserve recommend` (which catalog models and quantizations
 * fit this machine, with the generation speed to expect), `omniserve models`
 * (what the model cache holds) and the alias resolution serve and pull use.
 *
 * Expected speed: generation reads every active weight once per token, so
 * tokens/s ~ 85% of the machine's read bandwidth (measured here as `bench`
 * measures it, or --bandwidth) / the bytes of active weights; that fraction
 * is what `bench` reports as bandwidth_fraction on the reference shapes. */
#include "src/cli/models.h"
#include "src/cli/bench_util.h"
#include "src/cli/cli.h"
#include "src/core/catalog.h"
#include "src/core/download.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/threadpool.h"
#include "llm/model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MODELS_DEFAULT_CTX = 8192, MODELS_WALK_DEPTH = 6 };
#define MODELS_BW_FRACTION 0.85

uint64_t models_ram_bytes(void)
{
    return omni_meminfo_bytes("MemTotal");
}

static bool type_supported(int type)
{
    return omni_quant_ops(type) != NULL;
}

int models_resolve_alias(const char *ref, int n_ctx, char *repo, size_t repo_cap, char *quant,
                         size_t quant_cap, char *err, size_t errlen)
{
    char name[128];
    const char *colon = strchr(ref, ':');
    const size_t n = colon ? (size_t)(colon - ref) : strlen(ref);
    if (strchr(ref, '/') || n >= sizeof name)
        return 0;
    memcpy(name, ref, n);
    name[n] = 0;
    const struct catalog_model *m = catalog_find(name);
    if (!m)
        return 0;
    if (!llm_arch_supported(m->arch))
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "%s is a %s model: that architecture "
                         "is not supported yet (omniserve recommend lists what runs)", m->alias,
                         m->arch);
    const struct catalog_quant *q = NULL;
    if (colon) {
        if (!(q = catalog_quant_find(colon + 1)))
            return omni_fail(err, errlen, OMNI_ERR_ARG, "%s: unknown quantization '%.32s' (%s "
                             "has: %s)", m->alias, colon + 1, m->alias, m->quants);
    } else {
        struct catalog_fit fit;
        const uint64_t ram = models_ram_bytes();
        if (catalog_pick(m, ram, n_ctx, type_supported, &fit) < 0)
            return omni_fail(err, errlen, OMNI_ERR_LIMIT, "%s does not fit this machine: %.1f GiB "
                             "of RAM, %s needs about %.1f GiB with %d tokens of context (omniserve "
                             "recommend lists what fits)", m->alias, (double)ram / (1 << 30),
                             fit.quant ? fit.quant->tag : "its smallest quantization",
                             (double)fit.need_bytes / (1 << 30), n_ctx);
        q = fit.quant;
    }
    snprintf(repo, repo_cap, "%s", m->repo);
    snprintf(quant, quant_cap, "%s", q->tag);
    return 1;
}

// ---- recommend -----------------------------------------------------------------

static void recommend_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve recommend [options]\n"
            "  Which models of the catalog fit this machine, in which quantization (the best\n"
            "  quality whose file, KV cache and working memory fit), and the generation speed\n"
            "  to expect. 'omniserve serve -m ALIAS' and 'omniserve pull ALIAS' fetch that pick.\n"
            "  --ram GIB        memory to plan for (default: this machine's, %.1f GiB)\n"
            "  --ctx N          context to keep room for in the KV cache (default %d)\n"
            "  --bandwidth GBS  read bandwidth in GB/s for the speed estimate (default: measured,\n"
            "                   a 1 GiB streaming read on every core; 0: no estimate)\n"
            "  --all            also list architectures this build cannot run yet\n"
            "  --json           one JSON object\n",
            (double)models_ram_bytes() / (1 << 30), MODELS_DEFAULT_CTX);
}

static double measure_bandwidth(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char err[256];
    struct tpool *tp = tpool_new(cores > 0 ? (int)cores : 1, err, sizeof err);
    if (!tp)
        return 0;
    fprintf(stderr, "recommend: measuring read bandwidth (1 GiB, %ld threads)...\n", cores);
    double bw = bench_read_bandwidth(tp, (size_t)1 << 30, 3);
    tpool_free(tp);
    return bw;
}

static double gb(uint64_t b) { return (double)b / 1e9; }

int cli_recommend(int argc, char **argv)
{
    uint64_t ram = models_ram_bytes();
    int n_ctx = MODELS_DEFAULT_CTX;
    double bw = -1;
    bool json = false, all = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            recommend_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--all")) {
            all = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "recommend: %s: unknown option or missing value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        double x = strtod(v, &end);
        if (*end || x < 0 || x > 1e6) {
            fprintf(stderr, "recommend: %s %s: not a number in range\n", a, v);
            return 2;
        }
        if (!strcmp(a, "--ram"))
            ram = (uint64_t)(x * (1 << 30));
        else if (!strcmp(a, "--ctx") && x >= 1)
            n_ctx = (int)x;
        else if (!strcmp(a, "--bandwidth"))
            bw = x * 1e9;
        else {
            fprintf(stderr, "recommend: %s: unknown option (see --help)\n", a);
            return 2;
        }
    }
    if (!ram) {
        fprintf(stderr, "recommend: cannot read this machine's memory: pass --ram GIB\n");
        return 1;
    }
    if (bw < 0)
        bw = measure_bandwidth();
    const uint64_t usable = catalog_usable(ram);
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
    cJSON_AddNumberToObject(root, "ram_bytes", (double)ram);
    cJSON_AddNumberToObject(root, "usable_bytes", (double)usable);
    cJSON_AddNumberToObject(root, "ctx", n_ctx);
    cJSON_AddNumberToObject(root, "bandwidth_gb_s", bw / 1e9);
    cJSON_AddNumberToObject(root, "bandwidth_fraction", MODELS_BW_FRACTION);
    if (!json) {
        printf("%.1f GiB of RAM, %.1f GiB of it for a model; KV cache for %d tokens", (double)ram / (1 << 30),
               (double)usable / (1 << 30), n_ctx);
        if (bw > 0)
            printf("; read bandwidth %.1f GB/s (speed = %.0f%% of it / active weight bytes)",
                   bw / 1e9, MODELS_BW_FRACTION * 100);
        printf("\n\n%-21s %-8s %8s %8s %8s %10s  %s\n", "alias", "quant", "file GB", "KV GB",
               "need GB", "~tok/s", "note");
    }
    for (int i = 0; i < catalog_count(); i++) {
        const struct catalog_model *m = catalog_at(i);
        const bool runs = llm_arch_supported(m->arch);
        if (!runs && !all)
            continue;
        struct catalog_fit fit;
        const bool fits = catalog_pick(m, ram, n_ctx, type_supported, &fit) == 0;
        double tok_s = 0;
        if (fit.quant && bw > 0)
            tok_s = MODELS_BW_FRACTION * bw / (m->active_b * 1e9 * fit.quant->bpw / 8.0);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "alias", m->alias);
        cJSON_AddStringToObject(o, "arch", m->arch);
        cJSON_AddBoolToObject(o, "supported", runs);
        cJSON_AddStringToObject(o, "repo", m->repo);
        cJSON_AddBoolToObject(o, "fits", fits);
        if (fit.quant) {
            cJSON_AddStringToObject(o, "quant", fit.quant->tag);
            cJSON_AddNumberToObject(o, "file_bytes", (double)fit.file_bytes);
            cJSON_AddNumberToObject(o, "kv_bytes", (double)fit.kv_bytes);
            cJSON_AddNumberToObject(o, "need_bytes", (double)fit.need_bytes);
            if (tok_s > 0)
                cJSON_AddNumberToObject(o, "tok_s_est", (double)(int)(tok_s * 10 + 0.5) / 10);
        }
        cJSON_AddItemToArray(arr, o);
        if (json)
            continue;
        const char *note = !runs ? "architecture not supported yet"
                           : !fit.quant ? "no quantization this build reads"
                           : !fits ? "too large for this memory" : "";
        if (fit.quant)
            printf("%-21s %-8s %8.1f %8.2f %8.1f %10.1f  %s\n", m->alias,
                   fits ? fit.quant->tag : "-", gb(fit.file_bytes), gb(fit.kv_bytes),
                   gb(fit.need_bytes), fits ? tok_s : 0.0, note);
        else
            printf("%-21s %-8s %8s %8s %8s %10s  %s\n", m->alias, "-", "-", "-", "-", "-", note);
    }
    if (json) {
        char *s = cJSON_PrintUnformatted(root);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("\nomniserve serve -m ALIAS fetches the pick on first use (ALIAS:QUANT names another).\n");
    }
    cJSON_Delete(root);
    return 0;
}

// ---- models: what the cache holds -------------------------------------------------

struct models_walk {
    cJSON *arr;
    size_t root_len;
    uint64_t total;
};

/* Every .gguf under dir (depth-limited: the cache is {repo owner}/{repo
 * name}[@rev]/{file path}). */
static void models_walk(struct models_walk *w, const char *dir, int depth)
{
    DIR *d = depth <= MODELS_WALK_DEPTH ? opendir(dir) : NULL;
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            continue;
        struct stat st;
        if (lstat(path, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            models_walk(w, path, depth + 1);
            continue;
        }
        const size_t n = strlen(e->d_name);
        if (!S_ISREG(st.st_mode) || n < 5 || strcmp(e->d_name + n - 5, ".gguf"))
            continue;
        /* repo = the first two components below the root */
        const char *rel = path + w->root_len + 1, *s1 = strchr(rel, '/');
        const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
        if (!s2)
            continue;
        cJSON *o = cJSON_CreateObject();
        char repo[1024];
        snprintf(repo, sizeof repo, "%.*s", (int)(s2 - rel), rel);
        cJSON_AddStringToObject(o, "repo", repo);
        cJSON_AddStringToObject(o, "file", s2 + 1);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddNumberToObject(o, "bytes", (double)st.st_size);
        for (int i = 0; i < catalog_count(); i++)
            if (!strcmp(catalog_at(i)->repo, repo))
                cJSON_AddStringToObject(o, "alias", catalog_at(i)->alias);
        cJSON_AddItemToArray(w->arr, o);
        w->total += (uint64_t)st.st_size;
    }
    closedir(d);
}

static int models_cmp(const void *a, const void *b)
{
    const cJSON *x = *(cJSON *const *)a, *y = *(cJSON *const *)b;
    return strcmp(cJSON_GetObjectItem(x, "path")->valuestring,
                  cJSON_GetObjectItem(y, "path")->valuestring);
}

int cli_models(int argc, char **argv)
{
    bool json = false;
    struct download_params p = download_default_params();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: omniserve models [--cache-dir DIR] [--json]\n"
                   "  The GGUF files in the model cache ($OMNISERVE_CACHE or ~/.cache/omniserve),\n"
                   "  with sizes and the alias of the catalog each belongs to.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc)
            p.cache_dir = argv[++i];
        else {
            fprintf(stderr, "models: %s: unknown option or missing value (see --help)\n", argv[i]);
            return 2;
        }
    }
    char root[4096], err[512];
    if (download_cache_root(&p, root, sizeof root, err, sizeof err)) {
        fprintf(stderr, "models: %s\n", err);
        return 1;
    }
    struct models_walk w = { .arr = cJSON_CreateArray(), .root_len = strlen(root) };
    models_walk(&w, root, 0);
    const int n = cJSON_GetArraySize(w.arr);
    cJSON **items = calloc((size_t)n + 1, sizeof *items);
    for (int i = 0; items && i < n; i++)
        items[i] = cJSON_GetArrayItem(w.arr, i);
    if (items)
        qsort(items, (size_t)n, sizeof *items, models_cmp);
    if (json) {
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "models");
        cJSON_AddStringToObject(o, "cache", root);
        cJSON_AddNumberToObject(o, "bytes", (double)w.total);
        for (int i = 0; items && i < n; i++)
            cJSON_AddItemToArray(arr, cJSON_Duplicate(items[i], true));
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s ? s : "{}");
        free(s);
        cJSON_Delete(o);
    } else {
        printf("%s: %d file%s, %.2f GB\n", root, n, n == 1 ? "" : "s", gb(w.total));
        for (int i = 0; items && i < n; i++) {
            const cJSON *a = cJSON_GetObjectItem(items[i], "alias");
            printf("  %9.2f GB  %s/%s%s%s%s\n", gb((uint64_t)cJSON_GetObjectItem(items[i], "bytes")->valuedouble),
                   cJSON_GetObjectItem(items[i], "repo")->valuestring,
                   cJSON_GetObjectItem(items[i], "file")->valuestring, a ? "  (" : "",
                   a ? a->valuestring : "", a ? ")" : "");
        }
    }
    free(items);
    cJSON_Delete(w.arr);
    return 0;
}
