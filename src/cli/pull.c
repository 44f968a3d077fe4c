/* pull.c - `omniserve pull REPO[:FILE]`: a model from the Hugging Face hub
 * into the model cache (src/core/download.h), with progress on stderr and
 * the cached file's path on stdout (so scripts can `MODEL=$(omniserve pull ...)`).
 * Without a REPO it fetches the default chat model. */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/models.h"
#include "src/core/download.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pull_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve pull [REPO[:FILE] | hf://REPO/FILE | ALIAS[:QUANT]] [options]\n"
            "  REPO                owner/name on the hub (default %s:%s);\n"
            "                      without FILE: its only GGUF, or its Q4_K_M\n"
            "  ALIAS[:QUANT]       a model of 'omniserve recommend' (qwen3-4b, gemma-3-4b, ...):\n"
            "                      its repo, in QUANT or the best quantization that fits this RAM\n"
            "  --revision REV      branch, tag or commit (default main)\n"
            "  --endpoint URL      hub address (default $HF_ENDPOINT or https://huggingface.co)\n"
            "  --cache-dir DIR     model cache (default $OMNISERVE_CACHE or ~/.cache/omniserve)\n"
            "  --retries N         resumes after a broken transfer (default 5)\n"
            "  --quiet             no progress\n"
            "$HF_TOKEN is sent to the hub as 'Authorization: Bearer' (gated and private repos);\n"
            "HF_HUB_OFFLINE=1 only looks in the cache. The file's path goes to stdout.\n",
            DOWNLOAD_DEFAULT_REPO, DOWNLOAD_DEFAULT_FILE);
}

int cli_pull(int argc, char **argv)
{
    struct download_params p = download_default_params();
    const char *ref = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pull_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            p.progress = false;
            continue;
        }
        if (a[0] != '-') {
            if (ref) {
                fprintf(stderr, "pull: one model at a time ('%s' and '%s')\n", ref, a);
                return 2;
            }
            ref = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pull: %s: unknown option or missing value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--revision"))
            p.revision = v;
        else if (!strcmp(a, "--endpoint"))
            p.endpoint = v;
        else if (!strcmp(a, "--cache-dir"))
            p.cache_dir = v;
        else if (!strcmp(a, "--retries")) {
            long n;
            if (cli_long("pull", a, v, 0, 100, &n))
                return 2;
            p.max_retries = (int)n;
        } else {
            fprintf(stderr, "pull: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    char repo[512], file[1024], path[4096], err[1024], quant[32];
    int alias = ref ? models_resolve_alias(ref, 8192, repo, sizeof repo, quant, sizeof quant, err,
                                           sizeof err) : 0;
    if (alias < 0) {
        fprintf(stderr, "pull: %s\n", err);
        return 2;
    }
    if (alias) {
        file[0] = 0;
        p.quant = quant;
        if (p.progress)
            fprintf(stderr, "pull: %s is %s, %s\n", ref, repo, quant);
    } else if (!ref) {
        snprintf(repo, sizeof repo, "%s", DOWNLOAD_DEFAULT_REPO);
        snprintf(file, sizeof file, "%s", DOWNLOAD_DEFAULT_FILE);
    } else if (download_parse_ref(ref, repo, sizeof repo, file, sizeof file, err, sizeof err)) {
        fprintf(stderr, "pull: %s\n", err);
        return 2;
    }
    int rc = download_hf_file(&p, repo, file, path, sizeof path, err, sizeof err);
    if (rc) {
        fprintf(stderr, "pull: %s\n", err);
        return rc == OMNI_ERR_ARG ? 2 : 1;
    }
    printf("%s\n", path);
    return 0;
}
