/* gguf.c - the validating GGUF v2/v3 reader behind gguf.h.
 *
 * gguf_open maps the file read-only and parses it in one pass: every length,
 * count, type and offset is checked against the bytes that remain before it
 * is used, so that after a successful open all getters are plain lookups.
 * Keys and tensor names get hash indexes; string arrays get an offset table
 * so that the i-th token of a 150k-entry vocabulary is an O(1) read. */
#include "gguf.h"

#include "omni.h"
#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
/* Nested arrays are legal but unused in practice; the cap keeps a hostile
 * file from recursing the validator arbitrarily deep. */
#define GGUF_MAX_ARRAY_DEPTH 8

struct gguf_kv {
    char *key;                 /* NUL-terminated copy */
    enum gguf_type type;
    const uint8_t *val;        /* scalar bytes, string bytes or array elements */
    uint64_t len;              /* string: byte length */
    enum gguf_type elem_type;  /* arrays */
    uint64_t count;            /* arrays: number of elements */
    uint64_t *str_offs;        /* string arrays: file offset of each element's length prefix */
};

/* Open-addressing table of indexes into kvs[] or tensors[]; -1 = empty. */
struct gguf_index {
    int64_t *slots;
    size_t mask;
};

struct gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped;
    uint32_t version;
    size_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    struct gguf_kv *kvs;
    struct gguf_index kv_index;
    int64_t n_tensors;
    struct gguf_tensor *tensors;
    struct gguf_index tensor_index;
};

/* Parser state: a cursor over the buffer plus the error destination. */
struct gguf_parse {
    struct gguf *g;
    size_t pos;
    char *err;
    size_t errlen;
};

static const size_t gguf_scalar_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1, [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2, [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1, [GGUF_TYPE_UINT64] = 8,
    [GGUF_TYPE_INT64] = 8, [GGUF_TYPE_FLOAT64] = 8,
};

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = "u8", [GGUF_TYPE_INT8] = "i8", [GGUF_TYPE_UINT16] = "u16",
    [GGUF_TYPE_INT16] = "i16", [GGUF_TYPE_UINT32] = "u32", [GGUF_TYPE_INT32] = "i32",
    [GGUF_TYPE_FLOAT32] = "f32", [GGUF_TYPE_BOOL] = "bool", [GGUF_TYPE_STRING] = "string",
    [GGUF_TYPE_ARRAY] = "array", [GGUF_TYPE_UINT64] = "u64", [GGUF_TYPE_INT64] = "i64",
    [GGUF_TYPE_FLOAT64] = "f64",
};

const char *gguf_type_name(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? gguf_type_names[t] : "?";
}

// ---- error reporting and little-endian reads -------------------------------

static int gguf_fail(struct gguf_parse *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int gguf_fail(struct gguf_parse *p, int code, const char *fmt, ...)
{
    if (p->err && p->errlen) {
        int n = snprintf(p->err, p->errlen, "gguf: %s: ", p->g->path);
        if (n >= 0 && (size_t)n < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

static size_t gguf_left(const struct gguf_parse *p) { return p->g->size - p->pos; }

static uint64_t gguf_le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Read an n-byte little-endian integer; false when the file ends first. */
static bool gguf_read(struct gguf_parse *p, int n, uint64_t *out)
{
    if (gguf_left(p) < (size_t)n)
        return false;
    *out = gguf_le(p->g->base + p->pos, n);
    p->pos += (size_t)n;
    return true;
}

/* A length-prefixed string: on success *s points into the file. */
static bool gguf_read_str(struct gguf_parse *p, const uint8_t **s, uint64_t *len)
{
    uint64_t n;
    size_t save = p->pos;
    if (!gguf_read(p, 8, &n) || n > gguf_left(p)) {
        p->pos = save;
        return false;
    }
    *s = p->g->base + p->pos;
    *len = n;
    p->pos += (size_t)n;
    return true;
}

/* NUL-terminated copy of a name; names with embedded NULs are rejected
 * because they could not be looked up (and would alias shorter names). */
static char *gguf_dup_name(const uint8_t *s, uint64_t len)
{
    if (memchr(s, 0, (size_t)len))
        return NULL;
    char *c = malloc((size_t)len + 1);
    if (c) {
        memcpy(c, s, (size_t)len);
        c[len] = 0;
    }
    return c;
}

// ---- hash index --------------------------------------------------------------

static uint64_t gguf_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int gguf_index_init(struct gguf_index *ix, int64_t n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap *= 2;
    ix->slots = malloc(cap * sizeof *ix->slots);
    if (!ix->slots)
        return -1;
    memset(ix->slots, 0xff, cap * sizeof *ix->slots); /* all -1 */
    ix->mask = cap - 1;
    return 0;
}

/* Slot holding name, or the empty slot where it would go. */
static size_t gguf_index_probe(const struct gguf_index *ix, const struct gguf *g, const char *name,
                               const char *(*name_of)(const struct gguf *, int64_t))
{
    size_t s = gguf_hash(name) & ix->mask;
    while (ix->slots[s] >= 0 && strcmp(name_of(g, ix->slots[s]), name) != 0)
        s = (s + 1) & ix->mask;
    return s;
}

// ---- metadata ----------------------------------------------------------------

/* Validate and skip a nested array (header and elements). */
static int gguf_skip_array(struct gguf_parse *p, const char *ctx, int depth);

static int gguf_check_elem_type(struct gguf_parse *p, const char *ctx, uint64_t et)
{
    if (et >= GGUF_TYPE_COUNT)
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: unknown array element type %" PRIu64, ctx, et);
    return 0;
}

/* Skip `count` elements of type et starting at the cursor. */
static int gguf_skip_elems(struct gguf_parse *p, const char *ctx, enum gguf_type et,
                           uint64_t count, uint64_t *str_offs, int depth)
{
    if (et == GGUF_TYPE_STRING) {
        if (count > gguf_left(p) / 8)
            return gguf_fail(p, OMNI_ERR_FORMAT,
                             "%s: string array of %" PRIu64 " elements past end of file (%zu bytes)",
                             ctx, count, p->g->size);
        for (uint64_t i = 0; i < count; i++) {
            const uint8_t *s;
            uint64_t len;
            if (str_offs)
                str_offs[i] = p->pos;
            if (!gguf_read_str(p, &s, &len))
                return gguf_fail(p, OMNI_ERR_FORMAT, "%s: string array truncated at element %" PRIu64,
                                 ctx, i);
        }
        return 0;
    }
    if (et == GGUF_TYPE_ARRAY) {
        /* each nested array takes at least its 12-byte header */
        if (count > gguf_left(p) / 12)
            return gguf_fail(p, OMNI_ERR_FORMAT,
                             "%s: array of %" PRIu64 " arrays past end of file (%zu bytes)", ctx,
                             count, p->g->size);
        for (uint64_t i = 0; i < count; i++) {
            int rc = gguf_skip_array(p, ctx, depth + 1);
            if (rc)
                return rc;
        }
        return 0;
    }
    size_t bytes;
    if (count > SIZE_MAX || omni_mul_size((size_t)count, gguf_scalar_size[et], &bytes) ||
        bytes > gguf_left(p))
        return gguf_fail(p, OMNI_ERR_FORMAT,
                         "%s: array of %" PRIu64 " %s past end of file (%zu bytes)", ctx, count,
                         gguf_type_name(et), p->g->size);
    p->pos += bytes;
    return 0;
}

static int gguf_skip_array(struct gguf_parse *p, const char *ctx, int depth)
{
    uint64_t et, count;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: arrays nested deeper than %d levels", ctx,
                         GGUF_MAX_ARRAY_DEPTH);
    if (!gguf_read(p, 4, &et) || !gguf_read(p, 8, &count))
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: nested array header truncated", ctx);
    int rc = gguf_check_elem_type(p, ctx, et);
    return rc ? rc : gguf_skip_elems(p, ctx, (enum gguf_type)et, count, NULL, depth);
}

static const char *gguf_kv_name_of(const struct gguf *g, int64_t i) { return g->kvs[i].key; }

static int gguf_parse_kv(struct gguf_parse *p, int64_t i)
{
    struct gguf *g = p->g;
    struct gguf_kv *kv = &g->kvs[i];
    const uint8_t *s;
    uint64_t len, type;
    char ctx[160];

    if (!gguf_read_str(p, &s, &len))
        return gguf_fail(p, OMNI_ERR_FORMAT, "key #%" PRId64 ": name truncated (offset %zu)", i,
                         p->pos);
    kv->key = gguf_dup_name(s, len);
    if (!kv->key)
        return memchr(s, 0, (size_t)len)
                   ? gguf_fail(p, OMNI_ERR_FORMAT, "key #%" PRId64 ": name contains a NUL byte", i)
                   : gguf_fail(p, OMNI_ERR_NOMEM, "key #%" PRId64 ": out of memory", i);
    snprintf(ctx, sizeof ctx, "key #%" PRId64 " '%.100s'", i, kv->key);

    size_t slot = gguf_index_probe(&g->kv_index, g, kv->key, gguf_kv_name_of);
    if (g->kv_index.slots[slot] >= 0)
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: duplicate key", ctx);
    g->kv_index.slots[slot] = i;

    if (!gguf_read(p, 4, &type))
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: value type truncated", ctx);
    if (type >= GGUF_TYPE_COUNT)
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: unknown value type %" PRIu64, ctx, type);
    kv->type = (enum gguf_type)type;

    if (kv->type == GGUF_TYPE_STRING) {
        if (!gguf_read_str(p, &kv->val, &kv->len))
            return gguf_fail(p, OMNI_ERR_FORMAT, "%s: string value past end of file (%zu bytes)",
                             ctx, g->size);
        return 0;
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        size_t n = gguf_scalar_size[kv->type];
        if (gguf_left(p) < n)
            return gguf_fail(p, OMNI_ERR_FORMAT, "%s: %s value truncated", ctx,
                             gguf_type_name(kv->type));
        kv->val = g->base + p->pos;
        p->pos += n;
        return 0;
    }

    uint64_t et, count;
    if (!gguf_read(p, 4, &et) || !gguf_read(p, 8, &count))
        return gguf_fail(p, OMNI_ERR_FORMAT, "%s: array header truncated", ctx);
    int rc = gguf_check_elem_type(p, ctx, et);
    if (rc)
        return rc;
    kv->elem_type = (enum gguf_type)et;
    kv->count = count;
    kv->val = g->base + p->pos;
    if (kv->elem_type == GGUF_TYPE_STRING && count > 0) {
        /* bounded by the file size before allocating (8 bytes per element) */
        if (count > gguf_left(p) / 8)
            return gguf_fail(p, OMNI_ERR_FORMAT,
                             "%s: string array of %" PRIu64 " elements past end of file (%zu bytes)",
                             ctx, count, g->size);
        kv->str_offs = malloc((size_t)count * sizeof *kv->str_offs);
        if (!kv->str_offs)
            return gguf_fail(p, OMNI_ERR_NOMEM, "%s: out of memory for %" PRIu64 " strings", ctx,
                             count);
    }
    return gguf_skip_elems(p, ctx, kv->elem_type, count, kv->str_offs, 0);
}

static bool gguf_int_value(const struct gguf_kv *kv, __int128 *out); /* accessors below */

/* general.alignment: any integer type, non-zero power of two. */
static int gguf_read_alignment(struct gguf_parse *p)
{
    struct gguf *g = p->g;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(g, "general.alignment");
    if (i < 0)
        return 0;
    const struct gguf_kv *kv = &g->kvs[i];
    __int128 a;
    if (kv->type == GGUF_TYPE_BOOL || !gguf_int_value(kv, &a))
        return gguf_fail(p, OMNI_ERR_FORMAT, "general.alignment has type %s, expected an integer",
                         gguf_type_name(kv->type));
    /* the upper bound keeps the padding arithmetic far from overflow */
    if (a <= 0 || a > (1 << 30) || (a & (a - 1)))
        return gguf_fail(p, OMNI_ERR_FORMAT, "general.alignment %lld is not a power of two%s",
                         (long long)a, a > (1 << 30) ? " up to 2^30" : "");
    g->alignment = (size_t)a;
    return 0;
}

// ---- tensors -----------------------------------------------------------------

static const char *gguf_tensor_name_of(const struct gguf *g, int64_t i)
{
    return g->tensors[i].name;
}

static int gguf_parse_tensor_info(struct gguf_parse *p, int64_t i, uint64_t *rel_offset)
{
    struct gguf *g = p->g;
    struct gguf_tensor *t = &g->tensors[i];
    const uint8_t *s;
    uint64_t len, v;

    if (!gguf_read_str(p, &s, &len))
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor #%" PRId64 ": name truncated (offset %zu)", i,
                         p->pos);
    char *name = gguf_dup_name(s, len);
    if (!name)
        return memchr(s, 0, (size_t)len)
                   ? gguf_fail(p, OMNI_ERR_FORMAT, "tensor #%" PRId64 ": name contains a NUL byte", i)
                   : gguf_fail(p, OMNI_ERR_NOMEM, "tensor #%" PRId64 ": out of memory", i);
    t->name = name;

    size_t slot = gguf_index_probe(&g->tensor_index, g, name, gguf_tensor_name_of);
    if (g->tensor_index.slots[slot] >= 0)
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': duplicate tensor name", name);
    g->tensor_index.slots[slot] = i;

    if (!gguf_read(p, 4, &v))
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': n_dims truncated", name);
    if (v < 1 || v > 4)
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': n_dims %" PRIu64 " not in 1..4", name, v);
    t->n_dims = (int)v;
    int64_t n_elems = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        if (!gguf_read(p, 8, &v))
            return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': ne[%d] truncated", name, d);
        if (v > INT64_MAX)
            return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': ne[%d] = %" PRId64 " is negative",
                             name, d, (int64_t)v);
        t->ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(n_elems, t->ne[d], &n_elems))
            return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': element count overflows", name);
    }
    if (!gguf_read(p, 4, &v))
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': type truncated", name);
    const struct ggml_type_traits *tr = ggml_type_traits_of(v > INT32_MAX ? -1 : (int)v);
    if (!tr)
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': unknown ggml type %" PRIu64, name, v);
    t->type = (int)v;
    if (t->ne[0] % tr->blck_size)
        return gguf_fail(p, OMNI_ERR_FORMAT,
                         "tensor '%s': row length %" PRId64 " is not a multiple of %s block size %d",
                         name, t->ne[0], tr->name, tr->blck_size);
    /* nbytes = (elements / block) * bytes per block; overflow-checked */
    size_t nbytes;
    if (omni_mul_size((size_t)(n_elems / tr->blck_size), tr->type_size, &nbytes))
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': byte size overflows", name);
    t->nbytes = nbytes;
    if (!gguf_read(p, 8, rel_offset))
        return gguf_fail(p, OMNI_ERR_FORMAT, "tensor '%s': offset truncated", name);
    return 0;
}

/* Once the data offset is known: alignment and bounds of each tensor. */
static int gguf_place_tensor(struct gguf_parse *p, int64_t i, uint64_t rel)
{
    struct gguf *g = p->g;
    struct gguf_tensor *t = &g->tensors[i];
    if (rel % g->alignment)
        return gguf_fail(p, OMNI_ERR_FORMAT,
                         "tensor '%s': offset %" PRIu64 " is not a multiple of alignment %zu",
                         t->name, rel, g->alignment);
    uint64_t start, end;
    if (__builtin_add_overflow(g->data_offset, rel, &start) ||
        __builtin_add_overflow(start, (uint64_t)t->nbytes, &end) || end > g->size)
        return gguf_fail(p, OMNI_ERR_FORMAT,
                         "tensor '%s': data [%" PRIu64 ", %" PRIu64 ") past end of file (%zu bytes)",
                         t->name, g->data_offset + rel, g->data_offset + rel + (uint64_t)t->nbytes,
                         g->size);
    t->offset = start;
    t->data = g->base + start;
    return 0;
}

// ---- open / free -------------------------------------------------------------

static int gguf_parse_all(struct gguf_parse *p)
{
    struct gguf *g = p->g;
    uint64_t magic, version, n_tensors, n_kv;
    int rc;

    if (!gguf_read(p, 4, &magic) || !gguf_read(p, 4, &version))
        return gguf_fail(p, OMNI_ERR_FORMAT, "file too small for a GGUF header (%zu bytes)",
                         g->size);
    if (memcmp(g->base, "GGUF", 4) != 0)
        return gguf_fail(p, OMNI_ERR_FORMAT, "bad magic 0x%08" PRIx64 " (not a GGUF file)", magic);
    if (version == 1)
        return gguf_fail(p, OMNI_ERR_UNSUPPORTED,
                         "GGUF version 1 is not supported (re-convert the file to v3)");
    if (version == 0x02000000 || version == 0x03000000)
        return gguf_fail(p, OMNI_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return gguf_fail(p, OMNI_ERR_UNSUPPORTED,
                         "GGUF version %" PRIu64 " is not supported (only 2 and 3)", version);
    g->version = (uint32_t)version;
    if (!gguf_read(p, 8, &n_tensors) || !gguf_read(p, 8, &n_kv))
        return gguf_fail(p, OMNI_ERR_FORMAT, "header truncated (%zu bytes)", g->size);

    /* A key/value takes at least 13 bytes (name length, type, 1-byte value),
     * a tensor info at least 32: bound the counts before allocating. */
    if (n_kv > gguf_left(p) / 13)
        return gguf_fail(p, OMNI_ERR_FORMAT, "n_kv %" PRIu64 " cannot fit in the file (%zu bytes)",
                         n_kv, g->size);
    if (n_tensors > gguf_left(p) / 32)
        return gguf_fail(p, OMNI_ERR_FORMAT,
                         "n_tensors %" PRIu64 " cannot fit in the file (%zu bytes)", n_tensors,
                         g->size);
    g->kvs = calloc((size_t)n_kv + 1, sizeof *g->kvs);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    uint64_t *rel = malloc(((size_t)n_tensors + 1) * sizeof *rel);
    if (!g->kvs || !g->tensors || !rel || gguf_index_init(&g->kv_index, (int64_t)n_kv) ||
        gguf_index_init(&g->tensor_index, (int64_t)n_tensors)) {
        free(rel);
        return gguf_fail(p, OMNI_ERR_NOMEM, "out of memory");
    }

    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1; /* so that gguf_free releases what was parsed */
        if ((rc = gguf_parse_kv(p, (int64_t)i)))
            goto out;
    }
    if ((rc = gguf_read_alignment(p)))
        goto out;
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int64_t)i + 1;
        if ((rc = gguf_parse_tensor_info(p, (int64_t)i, &rel[i])))
            goto out;
    }
    /* data section: header end rounded up to the alignment */
    size_t pad = (g->alignment - p->pos % g->alignment) % g->alignment;
    if (omni_add_size(p->pos, pad, &pad)) {
        rc = gguf_fail(p, OMNI_ERR_FORMAT, "data offset overflows");
        goto out;
    }
    g->data_offset = pad;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = gguf_place_tensor(p, i, rel[i])))
            goto out;
    rc = 0;
out:
    free(rel);
    return rc;
}

static struct gguf *gguf_parse_buffer(const void *buf, size_t size, const char *name, bool mapped,
                                      char *err, size_t errlen)
{
    struct gguf *g = calloc(1, sizeof *g);
    char *path = strdup(name ? name : "(memory)");
    if (!g || !path) {
        free(g);
        free(path);
        if (mapped && size)
            munmap((void *)buf, size);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "gguf: %s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    g->path = path;
    g->base = buf;
    g->size = size;
    g->mapped = mapped;
    struct gguf_parse p = { g, 0, err, errlen };
    if (gguf_parse_all(&p)) {
        gguf_free(g);
        return NULL;
    }
    return g;
}

struct gguf *gguf_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "gguf: %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        omni_fail(err, errlen, OMNI_ERR_IO, "gguf: %s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < 24) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT,
                  "gguf: %s: file too small for a GGUF header (%zu bytes)", path, size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        omni_fail(err, errlen, OMNI_ERR_IO, "gguf: %s: mmap: %s", path, strerror(map_errno));
        return NULL;
    }
    return gguf_parse_buffer(map, size, path, true, err, errlen);
}

struct gguf *gguf_open_memory(const void *buf, size_t size, const char *name, char *err,
                              size_t errlen)
{
    if (!buf && size) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "gguf: %s: NULL buffer", name ? name : "(memory)");
        return NULL;
    }
    return gguf_parse_buffer(buf ? buf : "", size, name, false, err, errlen);
}

void gguf_free(struct gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kvs[i].key);
        free(g->kvs[i].str_offs);
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

// ---- accessors ---------------------------------------------------------------

const char *gguf_path(const struct gguf *g) { return g->path; }
uint32_t gguf_version(const struct gguf *g) { return g->version; }
size_t gguf_file_size(const struct gguf *g) { return g->size; }
size_t gguf_alignment(const struct gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const struct gguf *g) { return g->data_offset; }
int64_t gguf_n_kv(const struct gguf *g) { return g->n_kv; }
int64_t gguf_n_tensors(const struct gguf *g) { return g->n_tensors; }

int64_t gguf_find_key(const struct gguf *g, const char *key)
{
    if (!key)
        return -1;
    return g->kv_index.slots[gguf_index_probe(&g->kv_index, g, key, gguf_kv_name_of)];
}

static const struct gguf_kv *gguf_kv_at(const struct gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}

static const struct gguf_kv *gguf_kv_by_key(const struct gguf *g, const char *key)
{
    return gguf_kv_at(g, gguf_find_key(g, key));
}

const char *gguf_kv_key(const struct gguf *g, int64_t i)
{
    const struct gguf_kv *kv = gguf_kv_at(g, i);
    return kv ? kv->key : NULL;
}

enum gguf_type gguf_kv_type(const struct gguf *g, int64_t i)
{
    const struct gguf_kv *kv = gguf_kv_at(g, i);
    return kv ? kv->type : GGUF_TYPE_COUNT;
}

/* Integer (or bool) scalar as a 128-bit value so that every source type and
 * every range check is exact. */
static bool gguf_int_value(const struct gguf_kv *kv, __int128 *out)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        *out = (__int128)gguf_le(kv->val, (int)gguf_scalar_size[kv->type]);
        return true;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64: {
        int bits = 8 * (int)gguf_scalar_size[kv->type];
        uint64_t u = gguf_le(kv->val, bits / 8);
        /* sign-extend from the stored width */
        int64_t v = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
        *out = v;
        return true;
    }
    case GGUF_TYPE_BOOL:
        *out = kv->val[0] != 0;
        return true;
    default:
        return false;
    }
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    __int128 v;
    if (!kv)
        return OMNI_ERR_NOTFOUND;
    if (!gguf_int_value(kv, &v) || v < 0 || v > UINT32_MAX)
        return OMNI_ERR_FORMAT;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    __int128 v;
    if (!kv)
        return OMNI_ERR_NOTFOUND;
    if (!gguf_int_value(kv, &v) || v < INT64_MIN || v > INT64_MAX)
        return OMNI_ERR_FORMAT;
    *out = (int64_t)v;
    return 0;
}

static bool gguf_float_value(const struct gguf_kv *kv, double *out)
{
    if (kv->type == GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)gguf_le(kv->val, 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        uint64_t u = gguf_le(kv->val, 8);
        memcpy(out, &u, 8);
        return true;
    }
    return false;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    double d;
    if (!kv)
        return OMNI_ERR_NOTFOUND;
    if (!gguf_float_value(kv, &d))
        return OMNI_ERR_FORMAT;
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    if (!kv)
        return OMNI_ERR_NOTFOUND;
    if (kv->type != GGUF_TYPE_BOOL)
        return OMNI_ERR_FORMAT;
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_kv_number(const struct gguf *g, int64_t i, double *out)
{
    const struct gguf_kv *kv = gguf_kv_at(g, i);
    __int128 v;
    if (!kv)
        return OMNI_ERR_NOTFOUND;
    if (gguf_float_value(kv, out))
        return 0;
    if (!gguf_int_value(kv, &v))
        return OMNI_ERR_FORMAT;
    *out = (double)v;
    return 0;
}

static const char *gguf_str_of(const struct gguf_kv *kv, size_t *len)
{
    if (!kv || kv->type != GGUF_TYPE_STRING)
        return NULL;
    if (len)
        *len = (size_t)kv->len;
    return (const char *)kv->val;
}

const char *gguf_get_str(const struct gguf *g, const char *key, size_t *len)
{
    return gguf_str_of(gguf_kv_by_key(g, key), len);
}

const char *gguf_kv_str(const struct gguf *g, int64_t i, size_t *len)
{
    return gguf_str_of(gguf_kv_at(g, i), len);
}

static int gguf_arr_of(const struct gguf_kv *kv, enum gguf_type *elem_type, uint64_t *count)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY)
        return -1;
    if (elem_type)
        *elem_type = kv->elem_type;
    if (count)
        *count = kv->count;
    return 0;
}

int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type *elem_type,
                 uint64_t *count)
{
    return gguf_arr_of(gguf_kv_by_key(g, key), elem_type, count);
}

int gguf_kv_arr(const struct gguf *g, int64_t i, enum gguf_type *elem_type, uint64_t *count)
{
    return gguf_arr_of(gguf_kv_at(g, i), elem_type, count);
}

const void *gguf_get_arr_data(const struct gguf *g, const char *key)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->elem_type == GGUF_TYPE_STRING ||
        kv->elem_type == GGUF_TYPE_ARRAY)
        return NULL;
    return kv->val;
}

const char *gguf_get_arr_str(const struct gguf *g, const char *key, uint64_t i, size_t *len)
{
    const struct gguf_kv *kv = gguf_kv_by_key(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING || i >= kv->count)
        return NULL;
    const uint8_t *p = g->base + kv->str_offs[i];
    if (len)
        *len = (size_t)gguf_le(p, 8);
    return (const char *)p + 8;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    if (!name)
        return NULL;
    return gguf_tensor_at(g, g->tensor_index.slots[gguf_index_probe(&g->tensor_index, g, name,
                                                                    gguf_tensor_name_of)]);
}
