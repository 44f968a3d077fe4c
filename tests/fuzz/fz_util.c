/* fz_util.c - the fuzz targets' shared helpers (see fz_util.h): GGUF
 * metadata writer, tiny vocabularies, memfd paths, input splitting and the
 * JSON check applied to everything the server answers. */
#define _GNU_SOURCE
#include "tests/fuzz/fz_util.h"

#include "src/core/gguf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// ---- GGUF writer -------------------------------------------------------------

#define FZ_GGUF_HEADER 24   /* magic, version, n_tensors, n_kv */

static void fz_raw(struct fz_gguf *w, const void *p, size_t n)
{
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *b = realloc(w->buf, cap);
        if (!b)
            abort();   /* the harness itself ran out: not a finding to chase */
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void fz_u32v(struct fz_gguf *w, uint32_t v) { fz_raw(w, &v, 4); }
static void fz_u64v(struct fz_gguf *w, uint64_t v) { fz_raw(w, &v, 8); }

static void fz_strv(struct fz_gguf *w, const char *s)
{
    fz_u64v(w, strlen(s));
    fz_raw(w, s, strlen(s));
}

static void fz_key(struct fz_gguf *w, const char *key, enum gguf_type type)
{
    fz_strv(w, key);
    fz_u32v(w, type);
    w->n_kv++;
}

void fz_gguf_init(struct fz_gguf *w)
{
    memset(w, 0, sizeof *w);
    uint8_t header[FZ_GGUF_HEADER] = { 0 };
    fz_raw(w, header, sizeof header);
}

void fz_gguf_free(struct fz_gguf *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void fz_gguf_str(struct fz_gguf *w, const char *key, const char *value)
{
    fz_key(w, key, GGUF_TYPE_STRING);
    fz_strv(w, value);
}

void fz_gguf_u32(struct fz_gguf *w, const char *key, uint32_t value)
{
    fz_key(w, key, GGUF_TYPE_UINT32);
    fz_u32v(w, value);
}

void fz_gguf_bool(struct fz_gguf *w, const char *key, bool value)
{
    fz_key(w, key, GGUF_TYPE_BOOL);
    uint8_t b = value;
    fz_raw(w, &b, 1);
}

static void fz_arr(struct fz_gguf *w, const char *key, enum gguf_type elem, int n)
{
    fz_key(w, key, GGUF_TYPE_ARRAY);
    fz_u32v(w, elem);
    fz_u64v(w, (uint64_t)n);
}

void fz_gguf_arr_str(struct fz_gguf *w, const char *key, const char *const *v, int n)
{
    fz_arr(w, key, GGUF_TYPE_STRING, n);
    for (int i = 0; i < n; i++)
        fz_strv(w, v[i]);
}

void fz_gguf_arr_f32(struct fz_gguf *w, const char *key, const float *v, int n)
{
    fz_arr(w, key, GGUF_TYPE_FLOAT32, n);
    fz_raw(w, v, (size_t)n * sizeof *v);
}

void fz_gguf_arr_i32(struct fz_gguf *w, const char *key, const int32_t *v, int n)
{
    fz_arr(w, key, GGUF_TYPE_INT32, n);
    fz_raw(w, v, (size_t)n * sizeof *v);
}

struct gguf *fz_gguf_open(struct fz_gguf *w, char *err, size_t errlen)
{
    uint32_t version = 3;
    uint64_t n_tensors = 0;
    memcpy(w->buf, "GGUF", 4);
    memcpy(w->buf + 4, &version, 4);
    memcpy(w->buf + 8, &n_tensors, 8);
    memcpy(w->buf + 16, &w->n_kv, 8);
    return gguf_open_memory(w->buf, w->len, "fuzz-vocab.gguf", err, errlen);
}

// ---- vocabularies ------------------------------------------------------------

enum { FZ_NORMAL = 1, FZ_UNKNOWN = 2, FZ_CONTROL = 3, FZ_BYTE = 6 };  /* tokenizer.ggml.token_type */

/* UTF-8 of GPT-2's byte-to-character map: printable Latin-1 bytes stand
 * for themselves, the other 68 take the code points from U+0100 on. */
static void fz_byte_char(int b, char out[4])
{
    int cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff)))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

static void fz_vocab_bpe(struct fz_gguf *w)
{
    /* merges over GPT-2 characters ("Ġ" is the space) and the tokens they make */
    static const char *const merges[] = {
        "\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 a", "e r", "\" :", "{ \"",
    };
    static const char *const merged[] = {
        "\xc4\xa0t", "he", "\xc4\xa0the", "in", "\xc4\xa0\x61", "er", "\":", "{\"",
    };
    static const char *const specials[] = {
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
        "</tool_call>",
    };
    enum { N_MERGE = sizeof merges / sizeof *merges, N_SPECIAL = sizeof specials / sizeof *specials,
           N = 256 + N_MERGE + N_SPECIAL };
    static char bytes[256][4];
    const char *tokens[N];
    int32_t types[N];
    int n = 0;
    for (int b = 0; b < 256; b++, n++) {
        fz_byte_char(b, bytes[b]);
        tokens[n] = bytes[b];
        types[n] = FZ_NORMAL;
    }
    for (int i = 0; i < N_MERGE; i++, n++) {
        tokens[n] = merged[i];
        types[n] = FZ_NORMAL;
    }
    const int first_special = n;
    for (int i = 0; i < N_SPECIAL; i++, n++) {
        tokens[n] = specials[i];
        types[n] = FZ_CONTROL;
    }
    fz_gguf_str(w, "tokenizer.ggml.model", "gpt2");
    fz_gguf_str(w, "tokenizer.ggml.pre", "qwen2");
    fz_gguf_arr_str(w, "tokenizer.ggml.tokens", tokens, N);
    fz_gguf_arr_i32(w, "tokenizer.ggml.token_type", types, N);
    fz_gguf_arr_str(w, "tokenizer.ggml.merges", merges, N_MERGE);
    fz_gguf_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)first_special);
    fz_gguf_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)first_special + 2);
    fz_gguf_bool(w, "tokenizer.ggml.add_bos_token", false);
}

static void fz_vocab_spm(struct fz_gguf *w)
{
    static const struct {
        const char *text;
        float score;
    } pieces[] = {
        { "\xe2\x96\x81", -5 }, { "a", -5 }, { "b", -5 }, { "e", -5 }, { "h", -5 }, { "t", -5 },
        { "\xe2\x96\x81t", -2 }, { "he", -2 }, { "\xe2\x96\x81the", -1 }, { "ab", -3 },
        { "[INST]", 0 }, { "[/INST]", 0 },
    };
    enum { N_PIECE = sizeof pieces / sizeof *pieces, N = 3 + 256 + N_PIECE };
    static char names[256][8];
    const char *tokens[N] = { "<unk>", "<s>", "</s>" };
    float scores[N] = { 0 };
    int32_t types[N] = { FZ_UNKNOWN, FZ_CONTROL, FZ_CONTROL };
    int n = 3;
    for (int b = 0; b < 256; b++, n++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tokens[n] = names[b];
        types[n] = FZ_BYTE;
    }
    for (int i = 0; i < N_PIECE; i++, n++) {
        tokens[n] = pieces[i].text;
        scores[n] = pieces[i].score;
        types[n] = pieces[i].text[0] == '[' ? FZ_CONTROL : FZ_NORMAL;
    }
    fz_gguf_str(w, "tokenizer.ggml.model", "llama");
    fz_gguf_arr_str(w, "tokenizer.ggml.tokens", tokens, N);
    fz_gguf_arr_f32(w, "tokenizer.ggml.scores", scores, N);
    fz_gguf_arr_i32(w, "tokenizer.ggml.token_type", types, N);
    fz_gguf_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    fz_gguf_u32(w, "tokenizer.ggml.bos_token_id", 1);
    fz_gguf_u32(w, "tokenizer.ggml.eos_token_id", 2);
    fz_gguf_bool(w, "tokenizer.ggml.add_bos_token", true);
}

void fz_vocab_gguf(struct fz_gguf *w, enum fz_vocab v)
{
    if (v == FZ_VOCAB_SPM)
        fz_vocab_spm(w);
    else
        fz_vocab_bpe(w);
}

const char *fz_shared(const char *rel)
{
    static char path[4096];
    const char *root = getenv("OMNI_SHARED");
    snprintf(path, sizeof path, "%s/%s", root && *root ? root : "../shared", rel);
    return access(path, R_OK) == 0 ? path : NULL;
}

uint8_t *fz_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *b = realloc(buf, cap);
            if (!b)
                abort();
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (!got)
            break;
        n += got;
    }
    fclose(f);
    *len = n;
    return buf;
}

// ---- inputs and outputs ------------------------------------------------------

static int fz_fd = -1;

const char *fz_path_open(const uint8_t *data, size_t size)
{
    static char path[64];
    fz_path_close();
    if ((fz_fd = memfd_create("fuzz-input", MFD_CLOEXEC)) < 0) {
        perror("fuzz: memfd_create");
        abort();
    }
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fz_fd, data + off, size - off);
        if (n <= 0) {
            perror("fuzz: memfd write");
            abort();
        }
        off += (size_t)n;
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fz_fd);
    return path;
}

void fz_path_close(void)
{
    if (fz_fd >= 0)
        close(fz_fd);
    fz_fd = -1;
}

static size_t fz_guard_span(size_t n, size_t *page)
{
    *page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + *page - 1) / *page * *page + *page;
}

uint8_t *fz_guarded_copy(const void *data, size_t n)
{
    size_t page, span = fz_guard_span(n, &page);
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + span - page, page, PROT_NONE) != 0)
        abort();
    uint8_t *p = m + span - page - n;
    memcpy(p, data, n);
    return p;
}

void fz_guarded_free(uint8_t *p, size_t n)
{
    size_t page, span = fz_guard_span(n, &page);
    munmap(p + n + page - span, span);
}

int fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int max)
{
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i < size && n < max - 1; i++) {
        if (data[i])
            continue;
        part[n] = data + start;
        len[n++] = i - start;
        start = i + 1;
    }
    part[n] = data + start;
    len[n++] = size - start;
    return n;
}

char *fz_strndup(const uint8_t *data, size_t len)
{
    char *s = malloc(len + 1);
    if (!s)
        abort();
    memcpy(s, data, len);
    s[len] = 0;
    return s;
}

size_t fz_utf8_len(const uint8_t *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (!len || len > n || s[0] > 0xf4)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool fz_utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = fz_utf8_len(s + i, n - i)))
            return false;
    return true;
}

void fz_check_json(const char *text, size_t len, const char *what)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    bool ok = j != NULL;
    for (const char *p = end; ok && p < text + len; p++)
        ok = *p == ' ' || *p == '\n' || *p == '\r' || *p == '\t';
    cJSON_Delete(j);
    if (!ok) {
        fprintf(stderr, "fuzz: %s is not one JSON value (%zu bytes): %.*s\n", what, len,
                len > 2000 ? 2000 : (int)len, text);
        abort();
    }
}
