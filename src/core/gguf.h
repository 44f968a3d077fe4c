/* gguf.h - read-only, validating reader for GGUF v2/v3 files (mmap).
 *
 * On-disk layout (little-endian):
 *   1. magic "GGUF", uint32 version (2 or 3), uint64 n_tensors, uint64 n_kv
 *   2. n_kv key/value pairs: key (uint64 len + bytes), uint32 value type, value
 *      (strings: uint64 len + bytes; arrays: uint32 elem type, uint64 count,
 *      elements)
 *   3. n_tensors tensor infos: name (string), uint32 n_dims (<= 4),
 *      n_dims x uint64 ne (ne[0] = row length), uint32 ggml_type, uint64 offset
 *      relative to the data section
 *   4. padding to general.alignment (default 32), then the data section
 *
 * Usage:
 *   char err[256];
 *   struct gguf *g = gguf_open("model.gguf", err, sizeof err);
 *   if (!g) { fprintf(stderr, "%s\n", err); return 1; }
 *   uint32_t n_layer = 0; gguf_get_u32(g, "llama.block_count", &n_layer);
 *   const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
 *   gguf_free(g);
 *
 * Every count, length, dimension, type and offset is validated against the
 * file size at open time; a bad file gives NULL and a message naming the file
 * and the field. After a successful open nothing can read out of bounds.
 * Thread safety: a struct gguf is immutable after gguf_open and may be read
 * from any number of threads. Pointers it returns live until gguf_free. */
#ifndef OMNI_GGUF_H
#define OMNI_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

struct gguf;

struct gguf_tensor {
    const char *name;   /* NUL-terminated copy */
    int type;           /* enum ggml_type */
    int n_dims;         /* 1..4 */
    int64_t ne[4];      /* ne[0] = elements per row; unused dims are 1 */
    uint64_t offset;    /* from the start of the file */
    size_t nbytes;
    const void *data;   /* into the mapping */
};

struct gguf *gguf_open(const char *path, char *err, size_t errlen);
/* Parse from a caller-owned buffer (not copied; must outlive the result). */
struct gguf *gguf_open_memory(const void *buf, size_t size, const char *name,
                              char *err, size_t errlen);
void gguf_free(struct gguf *g);

const char *gguf_path(const struct gguf *g);
uint32_t gguf_version(const struct gguf *g);
size_t gguf_file_size(const struct gguf *g);
size_t gguf_alignment(const struct gguf *g);
uint64_t gguf_data_offset(const struct gguf *g);

/* ---- metadata ---- */
int64_t gguf_n_kv(const struct gguf *g);
int64_t gguf_find_key(const struct gguf *g, const char *key); /* -1 if absent */
const char *gguf_kv_key(const struct gguf *g, int64_t i);
enum gguf_type gguf_kv_type(const struct gguf *g, int64_t i);

/* Typed getters by key. Integer getters accept any integer type (and bool)
 * whose value fits the requested type; float getters accept f32/f64. They
 * return 0 and set *out on success, OMNI_ERR_NOTFOUND if the key is absent,
 * OMNI_ERR_FORMAT if its type or value does not fit (out untouched). */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out);
/* String value (not NUL-terminated in the file: use *len), or NULL. */
const char *gguf_get_str(const struct gguf *g, const char *key, size_t *len);

/* Arrays: element type and count; NULL/-1 when the key is no array. */
int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type *elem_type,
                 uint64_t *count);
/* Pointer to the packed elements of a numeric array (little-endian, may be
 * unaligned: memcpy from it), or NULL for string arrays / non-arrays. */
const void *gguf_get_arr_data(const struct gguf *g, const char *key);
/* i-th string of a string array (length in *len), or NULL. O(1). */
const char *gguf_get_arr_str(const struct gguf *g, const char *key, uint64_t i,
                             size_t *len);
/* The same by kv index (for inspect/dumpers). */
const char *gguf_kv_str(const struct gguf *g, int64_t i, size_t *len);
int gguf_kv_arr(const struct gguf *g, int64_t i, enum gguf_type *elem_type,
                uint64_t *count);
/* Numeric scalar value of kv i as double (ints, floats, bool); 0 on success. */
int gguf_kv_number(const struct gguf *g, int64_t i, double *out);

const char *gguf_type_name(enum gguf_type t);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

#endif
