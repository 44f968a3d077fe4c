/* inspect.c - `omniserve inspect FILE.gguf`: what is inside a GGUF file.
 *
 * Prints the header facts, architecture and every `<arch>.*` hyper-parameter,
 * whether omniserve runs the architecture as a language model (and, for a
 * mixture of experts, what share of the weights a decoded token reads), a
 * tokenizer summary, whether a chat template is present, and a table of
 * tensors with totals per type. Works on any GGUF (models, vocabularies,
 * mmproj files) because all keys are printed generically. */
#include "llm/model.h"
#include "src/cli/cli.h"
#include "src/core/gguf.h"
#include "src/core/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values longer than this are cut in summaries (--template prints whole). */
#define INSPECT_STR_MAX 60
#define INSPECT_ARR_SHOW 4

static void inspect_usage(FILE *f)
{
    fprintf(f, "usage: omniserve inspect [--kv] [--template] FILE.gguf\n"
               "  --kv        also dump every metadata key with its type and value\n"
               "  --template  print only the chat template (tokenizer.chat_template), whole\n");
}

/* Print s[0..len) quoted, escaping control bytes (C0 and UTF-8-encoded C1) so
 * that a hostile vocabulary cannot drive the terminal; cut after max bytes
 * (0 = no limit). */
static void inspect_put_str(const char *s, size_t len, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = max && len > max ? max : len;
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else if (c == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
            printf("\\u%04x", u[++i]);
        else
            putchar(c);
    }
    putchar('"');
    if (n < len)
        printf("... (%zu bytes)", len);
}

static size_t inspect_elem_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Element i of a packed numeric array (little-endian, unaligned) as double. */
static double inspect_arr_num(const void *data, enum gguf_type t, uint64_t i)
{
    const unsigned char *p = (const unsigned char *)data + i * inspect_elem_size(t);
    uint64_t u = 0;
    for (size_t b = inspect_elem_size(t); b-- > 0;)
        u = (u << 8) | p[b];
    switch (t) {
    case GGUF_TYPE_INT8: return (int8_t)u;
    case GGUF_TYPE_INT16: return (int16_t)u;
    case GGUF_TYPE_INT32: return (int32_t)u;
    case GGUF_TYPE_INT64: return (double)(int64_t)u;
    case GGUF_TYPE_FLOAT32: { uint32_t w = (uint32_t)u; float f; memcpy(&f, &w, 4); return f; }
    case GGUF_TYPE_FLOAT64: { double d; memcpy(&d, &u, 8); return d; }
    default: return (double)u;
    }
}

static void inspect_put_num(enum gguf_type t, double v)
{
    if (t == GGUF_TYPE_BOOL)
        fputs(v != 0 ? "true" : "false", stdout);
    else if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64)
        printf("%.9g", v);
    else
        printf("%.0f", v);
}

/* A short rendering of value i: scalars whole, strings cut, arrays as
 * "[type x count] first elements ...". */
static void inspect_put_value(const struct gguf *g, int64_t i)
{
    enum gguf_type t = gguf_kv_type(g, i), et;
    const char *key = gguf_kv_key(g, i);
    size_t len;
    uint64_t count;
    double v;

    if (t == GGUF_TYPE_STRING) {
        const char *s = gguf_kv_str(g, i, &len);
        inspect_put_str(s, len, INSPECT_STR_MAX);
    } else if (t == GGUF_TYPE_ARRAY && gguf_kv_arr(g, i, &et, &count) == 0) {
        printf("[%s x %" PRIu64 "]", gguf_type_name(et), count);
        uint64_t show = count < INSPECT_ARR_SHOW ? count : INSPECT_ARR_SHOW;
        if (et == GGUF_TYPE_ARRAY)
            show = 0; /* nested arrays are validated but not rendered */
        const void *data = gguf_get_arr_data(g, key);
        for (uint64_t k = 0; k < show; k++) {
            fputs(k ? ", " : " ", stdout);
            if (et == GGUF_TYPE_STRING) {
                const char *s = gguf_get_arr_str(g, key, k, &len);
                inspect_put_str(s, len, 24);
            } else {
                inspect_put_num(et, inspect_arr_num(data, et, k));
            }
        }
        if (show < count && show)
            fputs(", ...", stdout);
    } else if (gguf_kv_number(g, i, &v) == 0) {
        inspect_put_num(t, v);
    }
}

static void inspect_put_kv(const struct gguf *g, int64_t i, bool with_type)
{
    printf("  %-44s ", gguf_kv_key(g, i));
    if (with_type)
        printf("%-7s ", gguf_type_name(gguf_kv_type(g, i)));
    inspect_put_value(g, i);
    putchar('\n');
}

/* llama.cpp's llama_ftype numbering of general.file_type. */
static const char *inspect_ftype_name(uint32_t ft)
{
    static const char *const names[] = {
        [0] = "ALL_F32", [1] = "MOSTLY_F16", [2] = "MOSTLY_Q4_0", [3] = "MOSTLY_Q4_1",
        [7] = "MOSTLY_Q8_0", [8] = "MOSTLY_Q5_0", [9] = "MOSTLY_Q5_1", [10] = "MOSTLY_Q2_K",
        [11] = "MOSTLY_Q3_K_S", [12] = "MOSTLY_Q3_K_M", [13] = "MOSTLY_Q3_K_L",
        [14] = "MOSTLY_Q4_K_S", [15] = "MOSTLY_Q4_K_M", [16] = "MOSTLY_Q5_K_S",
        [17] = "MOSTLY_Q5_K_M", [18] = "MOSTLY_Q6_K", [19] = "MOSTLY_IQ2_XXS",
        [20] = "MOSTLY_IQ2_XS", [21] = "MOSTLY_Q2_K_S", [22] = "MOSTLY_IQ3_XS",
        [23] = "MOSTLY_IQ3_XXS", [24] = "MOSTLY_IQ1_S", [25] = "MOSTLY_IQ4_NL",
        [26] = "MOSTLY_IQ3_S", [27] = "MOSTLY_IQ3_M", [28] = "MOSTLY_IQ2_S",
        [29] = "MOSTLY_IQ2_M", [30] = "MOSTLY_IQ4_XS", [31] = "MOSTLY_IQ1_M",
        [32] = "MOSTLY_BF16", [36] = "MOSTLY_TQ1_0", [37] = "MOSTLY_TQ2_0", [38] = "MOSTLY_MXFP4_MOE",
    };
    return ft < sizeof names / sizeof names[0] && names[ft] ? names[ft] : "?";
}

static void inspect_header(const struct gguf *g)
{
    size_t len;
    const char *arch = gguf_get_str(g, "general.architecture", &len);
    const size_t arch_len = len;
    printf("file:          %s\n", gguf_path(g));
    printf("format:        GGUF v%u, %zu bytes, alignment %zu, data at offset %" PRIu64 "\n",
           gguf_version(g), gguf_file_size(g), gguf_alignment(g), gguf_data_offset(g));
    printf("architecture:  ");
    if (arch)
        inspect_put_str(arch, len, INSPECT_STR_MAX);
    else
        fputs("(none)", stdout);
    putchar('\n');
    const char *name = gguf_get_str(g, "general.name", &len);
    if (name) {
        printf("name:          ");
        inspect_put_str(name, len, INSPECT_STR_MAX);
        putchar('\n');
    }
    uint32_t ft;
    if (gguf_get_u32(g, "general.file_type", &ft) == 0)
        printf("file type:     %u (%s)\n", ft, inspect_ftype_name(ft));
    /* Embedding and reranking models say what they give through
     * <arch>.pooling_type (llama.cpp's values). */
    char key[160];
    uint32_t pool;
    if (arch && arch_len < 100 && !memchr(arch, 0, arch_len)) {
        snprintf(key, sizeof key, "%.*s.pooling_type", (int)arch_len, arch);
        if (gguf_get_u32(g, key, &pool) == 0) {
            static const char *const uses[] = {
                "none (per-token vectors)", "mean (embeddings)", "cls (embeddings)",
                "last (embeddings)", "rank (a cross-encoder: scores query/document pairs)",
            };
            printf("pooling:       %u, %s\n", pool, pool < 5 ? uses[pool] : "unknown");
        }
    }
}

/* Whether this build runs the file as a language model; for a mixture of
 * experts (<arch>.expert_count, 3-D *_exps tensors) the bytes a decoded token
 * reads: every other tensor but the embedding, and expert_used_count of
 * expert_count experts. */
static void inspect_support(const struct gguf *g)
{
    size_t len;
    const char *arch = gguf_get_str(g, "general.architecture", &len);
    char name[64];
    if (!arch || len >= sizeof name || memchr(arch, 0, len))
        return;
    memcpy(name, arch, len);
    name[len] = 0;
    if (llm_arch_supported(name))
        printf("omniserve:     runs it (language model)\n");
    else if (!strncmp(name, "bert", 4) || !strcmp(name, "nomic-bert") || !strcmp(name, "jina-bert-v2") ||
             !strcmp(name, "clip"))
        printf("omniserve:     %s file (see docs/models.md)\n",
               strcmp(name, "clip") ? "embedding encoder" : "vision projector");
    else
        printf("omniserve:     architecture '%s' is not one it runs\n", name);
    char key[96];
    uint32_t n_expert = 0, n_used = 0;
    snprintf(key, sizeof key, "%s.expert_count", name);
    gguf_get_u32(g, key, &n_expert);
    snprintf(key, sizeof key, "%s.expert_used_count", name);
    gguf_get_u32(g, key, &n_used);
    if (!n_expert || !n_used || n_used > n_expert)
        return;
    uint64_t experts = 0, other = 0, total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        total += t->nbytes;
        if (strstr(t->name, "_exps."))
            experts += t->nbytes;
        else if (strcmp(t->name, "token_embd.weight"))
            other += t->nbytes;
    }
    const double read = (double)other + (double)experts * n_used / n_expert;
    printf("experts:       %u, %u per token: a decoded token reads %.1f of %.1f MiB (%.0f%%)\n",
           n_expert, n_used, read / 1048576.0, total / 1048576.0, total ? 100.0 * read / total : 0.0);
}

/* Every key starting with prefix (e.g. "llama."), in file order. */
static int inspect_keys_with_prefix(const struct gguf *g, const char *title, const char *prefix)
{
    size_t plen = strlen(prefix);
    int n = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        if (strncmp(gguf_kv_key(g, i), prefix, plen) != 0)
            continue;
        if (!n++)
            printf("\n%s:\n", title);
        inspect_put_kv(g, i, false);
    }
    return n;
}

static void inspect_hparams(const struct gguf *g)
{
    size_t len;
    const char *arch = gguf_get_str(g, "general.architecture", &len);
    char prefix[128];
    if (!arch || len == 0 || len > sizeof prefix - 2 || memchr(arch, 0, len))
        return;
    snprintf(prefix, sizeof prefix, "%.*s.", (int)len, arch);
    char title[160];
    snprintf(title, sizeof title, "hyper-parameters (%s*)", prefix);
    inspect_keys_with_prefix(g, title, prefix);
}

static void inspect_special_token(const struct gguf *g, const char *label, const char *key,
                                  uint64_t n_tokens)
{
    uint32_t id;
    if (gguf_get_u32(g, key, &id) != 0)
        return;
    printf("  %-14s %u", label, id);
    size_t len;
    const char *text = id < n_tokens ? gguf_get_arr_str(g, "tokenizer.ggml.tokens", id, &len) : NULL;
    if (text) {
        putchar(' ');
        inspect_put_str(text, len, INSPECT_STR_MAX);
    } else {
        fputs(" (out of range)", stdout);
    }
    putchar('\n');
}

static void inspect_flag(const struct gguf *g, const char *label, const char *key)
{
    bool b;
    if (gguf_get_bool(g, key, &b) == 0)
        printf("  %-14s %s\n", label, b ? "true" : "false");
}

/* Counts of tokenizer.ggml.token_type values, named as llama.cpp does. */
static void inspect_token_types(const struct gguf *g)
{
    static const char *const names[] = { "undefined", "normal", "unknown", "control",
                                         "user_defined", "unused", "byte" };
    enum { N_NAMED = sizeof names / sizeof names[0] };
    enum gguf_type et;
    uint64_t count, hist[N_NAMED + 1] = { 0 };
    const void *data = gguf_get_arr_data(g, "tokenizer.ggml.token_type");
    if (!data || gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &count) != 0 ||
        et == GGUF_TYPE_FLOAT32 || et == GGUF_TYPE_FLOAT64 || et == GGUF_TYPE_BOOL)
        return;
    for (uint64_t i = 0; i < count; i++) {
        double v = inspect_arr_num(data, et, i);
        hist[v >= 0 && v < N_NAMED ? (int)v : N_NAMED]++;
    }
    printf("  %-14s", "token types");
    const char *sep = " ";
    for (int k = 0; k <= N_NAMED; k++) {
        if (!hist[k])
            continue;
        printf("%s%s %" PRIu64, sep, k < N_NAMED ? names[k] : "other", hist[k]);
        sep = ", ";
    }
    putchar('\n');
}

static void inspect_tokenizer(const struct gguf *g)
{
    size_t len;
    enum gguf_type et;
    uint64_t n_tokens = 0, n_merges;
    const char *model = gguf_get_str(g, "tokenizer.ggml.model", &len);
    bool has_tokens = gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tokens) == 0 &&
                      et == GGUF_TYPE_STRING;
    if (!model && !has_tokens)
        return;
    printf("\ntokenizer:\n");
    if (model) {
        printf("  %-14s ", "model");
        inspect_put_str(model, len, INSPECT_STR_MAX);
        putchar('\n');
    }
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre", &len);
    if (pre) {
        printf("  %-14s ", "pre");
        inspect_put_str(pre, len, INSPECT_STR_MAX);
        putchar('\n');
    }
    if (!has_tokens)
        n_tokens = 0;
    printf("  %-14s %" PRIu64 "\n", "tokens", n_tokens);
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges) == 0)
        printf("  %-14s %" PRIu64 "\n", "merges", n_merges);
    printf("  %-14s %s\n", "scores",
           gguf_find_key(g, "tokenizer.ggml.scores") >= 0 ? "present" : "absent");
    inspect_special_token(g, "bos", "tokenizer.ggml.bos_token_id", n_tokens);
    inspect_special_token(g, "eos", "tokenizer.ggml.eos_token_id", n_tokens);
    inspect_special_token(g, "eot", "tokenizer.ggml.eot_token_id", n_tokens);
    inspect_special_token(g, "unk", "tokenizer.ggml.unknown_token_id", n_tokens);
    inspect_special_token(g, "pad", "tokenizer.ggml.padding_token_id", n_tokens);
    /* "seperator" is the spelling llama.cpp writes */
    inspect_special_token(g, "sep", "tokenizer.ggml.seperator_token_id", n_tokens);
    inspect_special_token(g, "cls", "tokenizer.ggml.cls_token_id", n_tokens);
    inspect_special_token(g, "mask", "tokenizer.ggml.mask_token_id", n_tokens);
    inspect_flag(g, "add_bos", "tokenizer.ggml.add_bos_token");
    inspect_flag(g, "add_eos", "tokenizer.ggml.add_eos_token");
    inspect_flag(g, "add_space", "tokenizer.ggml.add_space_prefix");
    inspect_token_types(g);
}

static void inspect_tensors(const struct gguf *g)
{
    int64_t n = gguf_n_tensors(g);
    uint64_t type_count[GGML_TYPE_COUNT] = { 0 }, type_bytes[GGML_TYPE_COUNT] = { 0 };
    uint64_t total_bytes = 0, total_elems = 0;

    printf("\ntensors: %" PRId64 "\n", n);
    if (n > 0)
        printf("  %-40s %-8s %-26s %14s\n", "name", "type", "shape (ne)", "bytes");
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char shape[96];
        int off = 0;
        uint64_t elems = 1;
        for (int d = 0; d < t->n_dims; d++) {
            off += snprintf(shape + off, sizeof shape - (size_t)off, "%s%" PRId64, d ? ", " : "[",
                            t->ne[d]);
            elems *= (uint64_t)t->ne[d];
        }
        snprintf(shape + off, sizeof shape - (size_t)off, "]");
        printf("  %-40s %-8s %-26s %14zu\n", t->name, ggml_type_name(t->type), shape, t->nbytes);
        type_count[t->type]++;
        type_bytes[t->type] += t->nbytes;
        total_bytes += t->nbytes;
        total_elems += elems;
    }
    if (n == 0)
        return;
    printf("\ntotals: %" PRId64 " tensors, %" PRIu64 " bytes (%.2f MiB), %" PRIu64 " parameters\n",
           n, total_bytes, total_bytes / 1048576.0, total_elems);
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (type_count[t])
            printf("  %-8s %6" PRIu64 " tensors %16" PRIu64 " bytes%s\n", ggml_type_name(t),
                   type_count[t], type_bytes[t],
                   ggml_type_traits_of(t)->supported ? "" : "  (not supported by omniserve)");
}

int cli_inspect(int argc, char **argv)
{
    bool dump_kv = false, template_only = false;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kv")) {
            dump_kv = true;
        } else if (!strcmp(argv[i], "--template")) {
            template_only = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            inspect_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "inspect: unknown option '%s'\n", argv[i]);
            inspect_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "inspect: more than one file given ('%s', '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        inspect_usage(stderr);
        return 2;
    }

    char err[512];
    struct gguf *g = gguf_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }

    size_t tlen;
    const char *tmpl = gguf_get_str(g, "tokenizer.chat_template", &tlen);
    if (template_only) {
        int rc = 0;
        if (tmpl) {
            fwrite(tmpl, 1, tlen, stdout);
            if (tlen && tmpl[tlen - 1] != '\n')
                putchar('\n');
        } else {
            fprintf(stderr, "inspect: %s: no tokenizer.chat_template\n", path);
            rc = 1;
        }
        gguf_free(g);
        return rc;
    }

    inspect_header(g);
    inspect_support(g);
    inspect_keys_with_prefix(g, "general", "general.");
    inspect_hparams(g);
    inspect_tokenizer(g);
    if (tmpl)
        printf("\nchat template: present (%zu bytes; --template prints it)\n", tlen);
    else
        printf("\nchat template: absent\n");
    if (dump_kv) {
        printf("\nmetadata: %" PRId64 " keys\n", gguf_n_kv(g));
        for (int64_t i = 0; i < gguf_n_kv(g); i++)
            inspect_put_kv(g, i, true);
    }
    inspect_tensors(g);
    gguf_free(g);
    return 0;
}
