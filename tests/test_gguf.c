/* test_gguf.c - the GGUF reader: valid files of every value type, getters and
 * their conversions, a list of hand-broken files that must each fail with a
 * specific message, every truncation of a small file, random byte flips, and
 * the real llama.cpp vocabularies in ../shared/vocab. Files are built in
 * memory with the small writer below. */
#include "test.h"

#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ---- a tiny in-memory GGUF writer -------------------------------------------

struct gb {
    uint8_t *p;
    size_t n, cap;
};

static void gb_bytes(struct gb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            abort(); /* test-only helper: out of memory is not survivable here */
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void gb_le(struct gb *b, uint64_t v, int n)
{
    uint8_t tmp[8];
    for (int i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, tmp, (size_t)n);
}
static void gb_u8(struct gb *b, uint8_t v) { gb_le(b, v, 1); }
static void gb_u16(struct gb *b, uint16_t v) { gb_le(b, v, 2); }
static void gb_u32(struct gb *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(struct gb *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_f32(struct gb *b, float f) { uint32_t u; memcpy(&u, &f, 4); gb_u32(b, u); }
static void gb_f64(struct gb *b, double f) { uint64_t u; memcpy(&u, &f, 8); gb_u64(b, u); }
static void gb_str(struct gb *b, const char *s) { gb_u64(b, strlen(s)); gb_bytes(b, s, strlen(s)); }
static void gb_zeros(struct gb *b, size_t n) { while (n--) gb_u8(b, 0); }
static void gb_pad(struct gb *b, size_t align) { gb_zeros(b, (align - b->n % align) % align); }
static void gb_free(struct gb *b) { free(b->p); *b = (struct gb){ 0 }; }

static void gb_header(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* key name + value type; the caller writes the value */
static void gb_key(struct gb *b, const char *key, enum gguf_type t) { gb_str(b, key); gb_u32(b, t); }
static void gb_kv_u32(struct gb *b, const char *key, uint32_t v) { gb_key(b, key, GGUF_TYPE_UINT32); gb_u32(b, v); }
static void gb_kv_str(struct gb *b, const char *key, const char *v) { gb_key(b, key, GGUF_TYPE_STRING); gb_str(b, v); }
static void gb_arr_head(struct gb *b, const char *key, enum gguf_type et, uint64_t count)
{
    gb_key(b, key, GGUF_TYPE_ARRAY);
    gb_u32(b, et);
    gb_u64(b, count);
}
static void gb_tensor(struct gb *b, const char *name, int n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

static char err[512];

/* Open a copy of exactly the built bytes, so that ASan sees any over-read. */
static struct gguf *gb_open(const struct gb *b, void **copy)
{
    *copy = malloc(b->n ? b->n : 1);
    if (b->n)
        memcpy(*copy, b->p, b->n);
    err[0] = 0;
    return gguf_open_memory(*copy, b->n, "t.gguf", err, sizeof err);
}

// ---- a rich valid file ------------------------------------------------------

#define RICH_ALIGN 64

/* Every scalar type, arrays of each type (nested included), alignment 64 and
 * tensors of several types; tensor data bytes are i & 0xff of the offset in
 * the data section, so data pointers can be checked. */
static void build_rich(struct gb *b, uint32_t version)
{
    gb_header(b, version, 5, 30);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "general.alignment", RICH_ALIGN);
    gb_key(b, "s.u8", GGUF_TYPE_UINT8); gb_u8(b, 200);
    gb_key(b, "s.i8", GGUF_TYPE_INT8); gb_u8(b, (uint8_t)-5);
    gb_key(b, "s.u16", GGUF_TYPE_UINT16); gb_u16(b, 60000);
    gb_key(b, "s.i16", GGUF_TYPE_INT16); gb_u16(b, (uint16_t)-30000);
    gb_kv_u32(b, "s.u32", 4000000000u);
    gb_key(b, "s.i32", GGUF_TYPE_INT32); gb_u32(b, (uint32_t)-2000000000);
    gb_key(b, "s.f32", GGUF_TYPE_FLOAT32); gb_f32(b, 1.5f);
    gb_key(b, "s.bool", GGUF_TYPE_BOOL); gb_u8(b, 1);
    gb_key(b, "s.u64", GGUF_TYPE_UINT64); gb_u64(b, 1ull << 40);
    gb_key(b, "s.u64max", GGUF_TYPE_UINT64); gb_u64(b, UINT64_MAX);
    gb_key(b, "s.i64", GGUF_TYPE_INT64); gb_u64(b, (uint64_t)-(1ll << 40));
    gb_key(b, "s.f64", GGUF_TYPE_FLOAT64); gb_f64(b, 2.25);
    gb_kv_str(b, "s.str", "h\xc3\xa9llo");
    gb_kv_str(b, "s.empty", "");
    gb_arr_head(b, "a.u8", GGUF_TYPE_UINT8, 3); gb_u8(b, 1); gb_u8(b, 2); gb_u8(b, 255);
    gb_arr_head(b, "a.i8", GGUF_TYPE_INT8, 2); gb_u8(b, (uint8_t)-1); gb_u8(b, 7);
    gb_arr_head(b, "a.u16", GGUF_TYPE_UINT16, 2); gb_u16(b, 65535); gb_u16(b, 3);
    gb_arr_head(b, "a.i16", GGUF_TYPE_INT16, 1); gb_u16(b, (uint16_t)-2);
    gb_arr_head(b, "a.u32", GGUF_TYPE_UINT32, 0);
    gb_arr_head(b, "a.i32", GGUF_TYPE_INT32, 3); gb_u32(b, 1); gb_u32(b, 3); gb_u32(b, (uint32_t)-6);
    gb_arr_head(b, "a.f32", GGUF_TYPE_FLOAT32, 2); gb_f32(b, -0.25f); gb_f32(b, 8.0f);
    gb_arr_head(b, "a.bool", GGUF_TYPE_BOOL, 2); gb_u8(b, 0); gb_u8(b, 1);
    gb_arr_head(b, "a.u64", GGUF_TYPE_UINT64, 1); gb_u64(b, 1ull << 63);
    gb_arr_head(b, "a.i64", GGUF_TYPE_INT64, 1); gb_u64(b, (uint64_t)-9);
    gb_arr_head(b, "a.f64", GGUF_TYPE_FLOAT64, 1); gb_f64(b, 1e300);
    gb_arr_head(b, "a.str", GGUF_TYPE_STRING, 3); gb_str(b, "a"); gb_str(b, ""); gb_str(b, "xyz");
    /* [[1, 2], ["p", "q"], [[]]]: arrays of arrays of different element types */
    gb_arr_head(b, "a.nested", GGUF_TYPE_ARRAY, 3);
    gb_u32(b, GGUF_TYPE_UINT32); gb_u64(b, 2); gb_u32(b, 1); gb_u32(b, 2);
    gb_u32(b, GGUF_TYPE_STRING); gb_u64(b, 2); gb_str(b, "p"); gb_str(b, "q");
    gb_u32(b, GGUF_TYPE_ARRAY); gb_u64(b, 1); gb_u32(b, GGUF_TYPE_INT8); gb_u64(b, 0);
    gb_kv_u32(b, "z.last", 42);

    /* tensors: f32 [8,2], q8_0 [64,3], q4_K [256,1,1,2], q2_K (unsupported
     * but legal) [256], and an empty f16 [0,5] */
    uint64_t ne_a[] = { 8, 2 }, ne_b[] = { 64, 3 }, ne_c[] = { 256, 1, 1, 2 }, ne_d[] = { 256 },
             ne_e[] = { 0, 5 };
    gb_tensor(b, "a.weight", 2, ne_a, GGML_TYPE_F32, 0);           /* 64 bytes */
    gb_tensor(b, "b.weight", 2, ne_b, GGML_TYPE_Q8_0, 64);         /* 204 bytes */
    gb_tensor(b, "c.weight", 4, ne_c, GGML_TYPE_Q4_K, 320);        /* 288 bytes */
    gb_tensor(b, "d.weight", 1, ne_d, GGML_TYPE_Q2_K, 640);        /* 84 bytes */
    gb_tensor(b, "e.weight", 2, ne_e, GGML_TYPE_F16, 768);         /* 0 bytes */
    gb_pad(b, RICH_ALIGN);
    for (int i = 0; i < 768; i++)
        gb_u8(b, (uint8_t)i);
}

static void check_rich(struct gguf *g, uint32_t version)
{
    CHECK(g != NULL);
    CHECK_EQ(gguf_version(g), version);
    CHECK_EQ(gguf_alignment(g), RICH_ALIGN);
    CHECK_EQ(gguf_data_offset(g) % RICH_ALIGN, 0);
    CHECK_EQ(gguf_file_size(g), gguf_data_offset(g) + 768);
    CHECK_STR_EQ(gguf_path(g), "t.gguf");
    CHECK_EQ(gguf_n_kv(g), 30);
    CHECK_EQ(gguf_n_tensors(g), 5);

    /* keys by index and by name */
    CHECK_EQ(gguf_find_key(g, "general.architecture"), 0);
    CHECK_EQ(gguf_find_key(g, "z.last"), 29);
    CHECK_EQ(gguf_find_key(g, "missing"), -1);
    CHECK_EQ(gguf_find_key(g, "s.u"), -1);
    CHECK_STR_EQ(gguf_kv_key(g, 2), "s.u8");
    CHECK(gguf_kv_key(g, 30) == NULL && gguf_kv_key(g, -1) == NULL);
    CHECK_EQ(gguf_kv_type(g, 2), GGUF_TYPE_UINT8);
    CHECK_EQ(gguf_kv_type(g, 27), GGUF_TYPE_ARRAY);
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        CHECK_EQ(gguf_find_key(g, gguf_kv_key(g, i)), i);

    /* integer getters: any integer type or bool whose value fits */
    uint32_t u = 77;
    int64_t v = 77;
    CHECK_EQ(gguf_get_u32(g, "s.u8", &u), 0); CHECK_EQ(u, 200);
    CHECK_EQ(gguf_get_u32(g, "s.u16", &u), 0); CHECK_EQ(u, 60000);
    CHECK_EQ(gguf_get_u32(g, "s.u32", &u), 0); CHECK_EQ(u, 4000000000u);
    CHECK_EQ(gguf_get_u32(g, "s.bool", &u), 0); CHECK_EQ(u, 1);
    CHECK_EQ(gguf_get_u32(g, "general.alignment", &u), 0); CHECK_EQ(u, 64);
    u = 77;
    CHECK_EQ(gguf_get_u32(g, "s.i8", &u), OMNI_ERR_FORMAT);    /* negative */
    CHECK_EQ(gguf_get_u32(g, "s.i32", &u), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_u32(g, "s.u64", &u), OMNI_ERR_FORMAT);   /* 2^40 too big */
    CHECK_EQ(gguf_get_u32(g, "s.f32", &u), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_u32(g, "s.str", &u), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_u32(g, "a.u8", &u), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_u32(g, "nope", &u), OMNI_ERR_NOTFOUND);
    CHECK_EQ(u, 77); /* untouched on failure */
    CHECK_EQ(gguf_get_i64(g, "s.i8", &v), 0); CHECK_EQ(v, -5);
    CHECK_EQ(gguf_get_i64(g, "s.i16", &v), 0); CHECK_EQ(v, -30000);
    CHECK_EQ(gguf_get_i64(g, "s.i32", &v), 0); CHECK_EQ(v, -2000000000);
    CHECK_EQ(gguf_get_i64(g, "s.u64", &v), 0); CHECK_EQ(v, 1ll << 40);
    CHECK_EQ(gguf_get_i64(g, "s.i64", &v), 0); CHECK_EQ(v, -(1ll << 40));
    CHECK_EQ(gguf_get_i64(g, "s.u32", &v), 0); CHECK_EQ(v, 4000000000ll);
    v = 77;
    CHECK_EQ(gguf_get_i64(g, "s.u64max", &v), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_i64(g, "s.f64", &v), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_i64(g, "nope", &v), OMNI_ERR_NOTFOUND);
    CHECK_EQ(v, 77);

    /* float and bool getters */
    float f = 0;
    bool bo = false;
    CHECK_EQ(gguf_get_f32(g, "s.f32", &f), 0); CHECK_NEAR(f, 1.5, 0);
    CHECK_EQ(gguf_get_f32(g, "s.f64", &f), 0); CHECK_NEAR(f, 2.25, 0);
    CHECK_EQ(gguf_get_f32(g, "s.u32", &f), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_f32(g, "nope", &f), OMNI_ERR_NOTFOUND);
    CHECK_EQ(gguf_get_bool(g, "s.bool", &bo), 0); CHECK(bo);
    CHECK_EQ(gguf_get_bool(g, "s.u8", &bo), OMNI_ERR_FORMAT);
    CHECK_EQ(gguf_get_bool(g, "nope", &bo), OMNI_ERR_NOTFOUND);

    /* strings: pointer + length, not NUL-terminated */
    size_t len = 0;
    const char *s = gguf_get_str(g, "s.str", &len);
    CHECK(s && len == 6 && memcmp(s, "h\xc3\xa9llo", 6) == 0);
    s = gguf_get_str(g, "s.empty", &len);
    CHECK(s && len == 0);
    CHECK(gguf_get_str(g, "s.u8", &len) == NULL);
    CHECK(gguf_get_str(g, "nope", &len) == NULL);
    CHECK(gguf_get_str(g, "general.architecture", NULL) != NULL);
    s = gguf_kv_str(g, 0, &len);
    CHECK(s && len == 5 && memcmp(s, "llama", 5) == 0);
    CHECK(gguf_kv_str(g, 1, &len) == NULL);

    /* numbers by index */
    double d = 0;
    CHECK_EQ(gguf_kv_number(g, gguf_find_key(g, "s.i64"), &d), 0); CHECK_NEAR(d, -(double)(1ll << 40), 0);
    CHECK_EQ(gguf_kv_number(g, gguf_find_key(g, "s.u64max"), &d), 0); CHECK_NEAR(d, 18446744073709551615.0, 0);
    CHECK_EQ(gguf_kv_number(g, gguf_find_key(g, "s.f32"), &d), 0); CHECK_NEAR(d, 1.5, 0);
    CHECK_EQ(gguf_kv_number(g, gguf_find_key(g, "s.bool"), &d), 0); CHECK_NEAR(d, 1, 0);
    CHECK(gguf_kv_number(g, gguf_find_key(g, "s.str"), &d) != 0);
    CHECK(gguf_kv_number(g, gguf_find_key(g, "a.u8"), &d) != 0);
    CHECK(gguf_kv_number(g, 99, &d) != 0);

    /* arrays */
    enum gguf_type et = GGUF_TYPE_COUNT;
    uint64_t count = 99;
    static const struct { const char *key; enum gguf_type et; uint64_t count; } arrs[] = {
        { "a.u8", GGUF_TYPE_UINT8, 3 }, { "a.i8", GGUF_TYPE_INT8, 2 },
        { "a.u16", GGUF_TYPE_UINT16, 2 }, { "a.i16", GGUF_TYPE_INT16, 1 },
        { "a.u32", GGUF_TYPE_UINT32, 0 }, { "a.i32", GGUF_TYPE_INT32, 3 },
        { "a.f32", GGUF_TYPE_FLOAT32, 2 }, { "a.bool", GGUF_TYPE_BOOL, 2 },
        { "a.u64", GGUF_TYPE_UINT64, 1 }, { "a.i64", GGUF_TYPE_INT64, 1 },
        { "a.f64", GGUF_TYPE_FLOAT64, 1 }, { "a.str", GGUF_TYPE_STRING, 3 },
        { "a.nested", GGUF_TYPE_ARRAY, 3 },
    };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        CHECK_EQ(gguf_get_arr(g, arrs[i].key, &et, &count), 0);
        CHECK_EQ(et, arrs[i].et);
        CHECK_EQ(count, arrs[i].count);
        bool numeric = et != GGUF_TYPE_STRING && et != GGUF_TYPE_ARRAY;
        CHECK((gguf_get_arr_data(g, arrs[i].key) != NULL) == numeric);
        CHECK_EQ(gguf_kv_arr(g, gguf_find_key(g, arrs[i].key), &et, &count), 0);
        CHECK_EQ(et, arrs[i].et);
    }
    CHECK(gguf_get_arr(g, "s.u8", &et, &count) < 0);
    CHECK(gguf_get_arr(g, "nope", &et, &count) < 0);
    CHECK(gguf_kv_arr(g, 2, &et, &count) < 0);
    CHECK(gguf_get_arr_data(g, "s.u8") == NULL);
    const uint8_t *a8 = gguf_get_arr_data(g, "a.u8");
    CHECK(a8[0] == 1 && a8[1] == 2 && a8[2] == 255);
    int32_t i32[3];
    memcpy(i32, gguf_get_arr_data(g, "a.i32"), sizeof i32);
    CHECK(i32[0] == 1 && i32[1] == 3 && i32[2] == -6);
    float f32[2];
    memcpy(f32, gguf_get_arr_data(g, "a.f32"), sizeof f32);
    CHECK(f32[0] == -0.25f && f32[1] == 8.0f);
    double f64;
    memcpy(&f64, gguf_get_arr_data(g, "a.f64"), sizeof f64);
    CHECK(f64 == 1e300);
    s = gguf_get_arr_str(g, "a.str", 0, &len);
    CHECK(s && len == 1 && s[0] == 'a');
    s = gguf_get_arr_str(g, "a.str", 1, &len);
    CHECK(s && len == 0);
    s = gguf_get_arr_str(g, "a.str", 2, &len);
    CHECK(s && len == 3 && memcmp(s, "xyz", 3) == 0);
    CHECK(gguf_get_arr_str(g, "a.str", 3, &len) == NULL);
    CHECK(gguf_get_arr_str(g, "a.u8", 0, &len) == NULL);
    CHECK(gguf_get_arr_str(g, "a.nested", 0, &len) == NULL);
    CHECK(gguf_get_arr_str(g, "s.str", 0, &len) == NULL);
    /* the key after the nested array was parsed at the right place */
    CHECK_EQ(gguf_get_u32(g, "z.last", &u), 0); CHECK_EQ(u, 42);

    /* tensors */
    static const struct { const char *name; int type, n_dims; int64_t ne[4]; size_t nbytes; uint64_t rel; } ts[] = {
        { "a.weight", GGML_TYPE_F32, 2, { 8, 2, 1, 1 }, 64, 0 },
        { "b.weight", GGML_TYPE_Q8_0, 2, { 64, 3, 1, 1 }, 204, 64 },
        { "c.weight", GGML_TYPE_Q4_K, 4, { 256, 1, 1, 2 }, 288, 320 },
        { "d.weight", GGML_TYPE_Q2_K, 1, { 256, 1, 1, 1 }, 84, 640 },
        { "e.weight", GGML_TYPE_F16, 2, { 0, 5, 1, 1 }, 0, 768 },
    };
    const uint8_t *data0 = NULL;
    for (int i = 0; i < 5; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        CHECK(t != NULL);
        CHECK(gguf_find_tensor(g, ts[i].name) == t);
        CHECK_STR_EQ(t->name, ts[i].name);
        CHECK_EQ(t->type, ts[i].type);
        CHECK_EQ(t->n_dims, ts[i].n_dims);
        for (int k = 0; k < 4; k++)
            CHECK_EQ(t->ne[k], ts[i].ne[k]);
        CHECK_EQ(t->nbytes, ts[i].nbytes);
        CHECK_EQ(t->offset, gguf_data_offset(g) + ts[i].rel);
        if (i == 0)
            data0 = t->data;
        CHECK((const uint8_t *)t->data == data0 + ts[i].rel);
        if (t->nbytes)
            CHECK_EQ(((const uint8_t *)t->data)[1], (ts[i].rel + 1) & 0xff);
    }
    CHECK(gguf_tensor_at(g, 5) == NULL && gguf_tensor_at(g, -1) == NULL);
    CHECK(gguf_find_tensor(g, "x.weight") == NULL);
    CHECK(gguf_find_tensor(g, "a.weigh") == NULL);
}

TEST(gguf_rich_v3_and_v2)
{
    for (uint32_t version = 2; version <= 3; version++) {
        struct gb b = { 0 };
        void *copy;
        build_rich(&b, version);
        struct gguf *g = gb_open(&b, &copy);
        CHECK_MSG(g != NULL, "v%u: %s", version, err);
        check_rich(g, version);
        gguf_free(g);
        free(copy);
        gb_free(&b);
        if (test_failed_now())
            return;
    }
}

TEST(gguf_type_names)
{
    CHECK_STR_EQ(gguf_type_name(GGUF_TYPE_UINT8), "u8");
    CHECK_STR_EQ(gguf_type_name(GGUF_TYPE_STRING), "string");
    CHECK_STR_EQ(gguf_type_name(GGUF_TYPE_FLOAT64), "f64");
    CHECK_STR_EQ(gguf_type_name(GGUF_TYPE_COUNT), "?");
}

/* gguf_open maps a real file: same results as from memory. */
TEST(gguf_open_file)
{
    struct gb b = { 0 };
    build_rich(&b, 3);
    char path[1024];
    snprintf(path, sizeof path, "%s/rich.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    gb_free(&b);

    struct gguf *g = gguf_open(path, err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    CHECK_STR_EQ(gguf_path(g), path);
    const struct gguf_tensor *t = gguf_find_tensor(g, "b.weight");
    CHECK(t && ((const uint8_t *)t->data)[0] == 64);
    gguf_free(g);
    gguf_free(NULL);

    snprintf(path, sizeof path, "%s/does-not-exist.gguf", test_tmpdir());
    CHECK(gguf_open(path, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "does-not-exist.gguf");
    CHECK_STR_CONTAINS(err, "No such file");
    CHECK(gguf_open(test_tmpdir(), err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "not a regular file");
    snprintf(path, sizeof path, "%s/empty.gguf", test_tmpdir());
    f = fopen(path, "wb");
    CHECK(f != NULL);
    fclose(f);
    CHECK(gguf_open(path, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "too small");
}

// ---- hand-broken files -------------------------------------------------------

/* Header + one kv with the given value written by the caller. */
static void one_kv(struct gb *b, const char *key, enum gguf_type t)
{
    gb_header(b, 3, 0, 1);
    gb_key(b, key, t);
}

/* A file with one tensor info and enough data for `data_bytes`. */
static void one_tensor(struct gb *b, const char *name, int n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes)
{
    gb_header(b, 3, 1, 0);
    gb_tensor(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}

/* Builds broken case i into b; returns the expected message fragment, or
 * NULL past the last case. */
static const char *build_broken(int i, struct gb *b)
{
    static const uint64_t ne_row[] = { 32, 2 };
    switch (i) {
    case 0: gb_bytes(b, "GGUX", 4); gb_u32(b, 3); gb_u64(b, 0); gb_u64(b, 0); return "bad magic";
    case 1: gb_header(b, 1, 0, 0); return "version 1";
    case 2: gb_header(b, 4, 0, 0); return "version 4";
    case 3: gb_header(b, 0x03000000, 0, 0); return "big-endian";
    case 4: gb_header(b, 3, 0, 1ull << 60); gb_zeros(b, 64); return "n_kv 1152921504606846976";
    case 5: gb_header(b, 3, 1ull << 40, 0); gb_zeros(b, 64); return "n_tensors 1099511627776";
    case 6: /* key name length far past the end */
        gb_header(b, 3, 0, 1); gb_u64(b, 1ull << 62); gb_zeros(b, 16); return "key #0: name truncated";
    case 7: one_kv(b, "k", GGUF_TYPE_STRING); gb_u64(b, UINT64_MAX); gb_zeros(b, 8);
        return "key #0 'k': string value past end of file";
    case 8: one_kv(b, "k", GGUF_TYPE_ARRAY); gb_u32(b, GGUF_TYPE_UINT32); gb_u64(b, 1ull << 62); gb_zeros(b, 8);
        return "key #0 'k': array of 4611686018427387904 u32 past end of file";
    case 9: /* count x 8 overflows 64 bits */
        one_kv(b, "k", GGUF_TYPE_ARRAY); gb_u32(b, GGUF_TYPE_UINT64); gb_u64(b, UINT64_MAX / 4); gb_zeros(b, 8);
        return "array of 4611686018427387903 u64 past end of file";
    case 10: one_kv(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY); gb_u32(b, GGUF_TYPE_STRING); gb_u64(b, 1ull << 61);
        gb_zeros(b, 16); return "string array of 2305843009213693952 elements past end of file";
    case 11: /* third string's length runs past the end */
        one_kv(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY); gb_u32(b, GGUF_TYPE_STRING); gb_u64(b, 4);
        gb_str(b, "a"); gb_str(b, "b"); gb_u64(b, 100); gb_zeros(b, 20);
        return "key #0 'tokenizer.ggml.tokens': string array truncated at element 2";
    case 12: one_kv(b, "k", (enum gguf_type)13); gb_u32(b, 0); return "key #0 'k': unknown value type 13";
    case 13: one_kv(b, "k", GGUF_TYPE_ARRAY); gb_u32(b, 77); gb_u64(b, 1); gb_u32(b, 0);
        return "unknown array element type 77";
    case 14: /* 10 levels of [[[...]]] */
        one_kv(b, "k", GGUF_TYPE_ARRAY);
        for (int d = 0; d < 10; d++) { gb_u32(b, GGUF_TYPE_ARRAY); gb_u64(b, 1); }
        gb_u32(b, GGUF_TYPE_UINT8); gb_u64(b, 0);
        return "nested deeper than 8";
    case 15: gb_header(b, 3, 0, 2); gb_kv_u32(b, "dup", 1); gb_kv_u32(b, "dup", 2); return "key #1 'dup': duplicate key";
    case 16: gb_header(b, 3, 0, 1); gb_u64(b, 3); gb_bytes(b, "a\0b", 3); gb_u32(b, GGUF_TYPE_UINT8); gb_u8(b, 0);
        return "key #0: name contains a NUL byte";
    case 17: gb_header(b, 3, 0, 1); gb_kv_u32(b, "general.alignment", 0); return "general.alignment 0 is not a power of two";
    case 18: gb_header(b, 3, 0, 1); gb_kv_u32(b, "general.alignment", 48); return "general.alignment 48 is not a power of two";
    case 19: gb_header(b, 3, 0, 1); gb_kv_str(b, "general.alignment", "32"); return "general.alignment has type string";
    case 20: { uint64_t ne[1] = { 32 }; one_tensor(b, "t0", 0, ne, GGML_TYPE_F32, 0, 128); return "tensor 't0': n_dims 0 not in 1..4"; }
    case 21: { uint64_t ne[5] = { 32, 1, 1, 1, 1 }; one_tensor(b, "t0", 5, ne, GGML_TYPE_F32, 0, 128); return "tensor 't0': n_dims 5 not in 1..4"; }
    case 22: { uint64_t ne[2] = { 32, UINT64_MAX }; one_tensor(b, "t0", 2, ne, GGML_TYPE_F32, 0, 128); return "tensor 't0': ne[1] = -1 is negative"; }
    case 23: { uint64_t ne[3] = { 1ull << 32, 1ull << 32, 4 }; one_tensor(b, "t0", 3, ne, GGML_TYPE_F32, 0, 128); return "tensor 't0': element count overflows"; }
    case 24: { uint64_t ne[1] = { 1ull << 62 }; one_tensor(b, "t0", 1, ne, GGML_TYPE_F32, 0, 128); return "tensor 't0': byte size overflows"; }
    case 25: one_tensor(b, "t0", 2, ne_row, 99, 0, 256); return "tensor 't0': unknown ggml type 99";
    case 26: one_tensor(b, "t0", 2, ne_row, 4, 0, 256); return "unknown ggml type 4"; /* removed Q4_2 */
    case 27: one_tensor(b, "t0", 2, ne_row, 0x80000000u, 0, 256); return "unknown ggml type 2147483648";
    case 28: { uint64_t ne[2] = { 33, 2 }; one_tensor(b, "t0", 2, ne, GGML_TYPE_Q8_0, 0, 256);
        return "tensor 't0': row length 33 is not a multiple of q8_0 block size 32"; }
    case 29: one_tensor(b, "t0", 2, ne_row, GGML_TYPE_F32, 16, 512); return "tensor 't0': offset 16 is not a multiple of alignment 32";
    case 30: one_tensor(b, "blk.3.attn_q.weight", 2, ne_row, GGML_TYPE_F32, 0, 255);
        return "tensor 'blk.3.attn_q.weight': data [96, 352) past end of file (351 bytes)";
    case 31: /* offset so large that offset + nbytes wraps around */
        one_tensor(b, "t0", 2, ne_row, GGML_TYPE_F32, UINT64_MAX - 31, 256); return "tensor 't0': data [";
    case 32: gb_header(b, 3, 2, 0); gb_tensor(b, "t0", 2, ne_row, GGML_TYPE_F32, 0);
        gb_tensor(b, "t0", 2, ne_row, GGML_TYPE_F32, 256); gb_pad(b, 32); gb_zeros(b, 512);
        return "tensor 't0': duplicate tensor name";
    case 33: /* truncated inside the tensor infos */
        gb_header(b, 3, 1, 0); gb_str(b, "t0"); gb_u32(b, 2); gb_u64(b, 32); gb_zeros(b, 10);
        return "tensor 't0': type truncated";
    case 34: gb_bytes(b, "GGUF", 4); gb_u32(b, 3); gb_u32(b, 0); return "header truncated";
    case 35: gb_bytes(b, "GG", 2); return "too small";
    case 36: one_kv(b, "k", GGUF_TYPE_UINT64); gb_u32(b, 1); return "key #0 'k': u64 value truncated";
    case 37: /* nested array whose inner string list is cut */
        one_kv(b, "k", GGUF_TYPE_ARRAY); gb_u32(b, GGUF_TYPE_ARRAY); gb_u64(b, 1);
        gb_u32(b, GGUF_TYPE_STRING); gb_u64(b, 2); gb_str(b, "x"); gb_u64(b, 100); gb_zeros(b, 12);
        return "key #0 'k': string array truncated at element 1";
    default: return NULL;
    }
}

TEST(gguf_rejects_broken_files)
{
    for (int i = 0;; i++) {
        struct gb b = { 0 };
        void *copy;
        const char *expect = build_broken(i, &b);
        if (!expect) {
            gb_free(&b);
            break;
        }
        struct gguf *g = gb_open(&b, &copy);
        CHECK_MSG(g == NULL, "broken case %d opened (expected '%s')", i, expect);
        CHECK_MSG(strstr(err, expect) != NULL, "case %d: \"%s\" does not contain \"%s\"", i, err, expect);
        CHECK_MSG(strncmp(err, "gguf: t.gguf: ", 14) == 0, "case %d: \"%s\" does not name the file", i, err);
        free(copy);
        gb_free(&b);
    }
}

/* A small file whose last tensor ends exactly at EOF: every strict prefix
 * must fail cleanly (ASan checks that nothing reads past the prefix). */
static void build_small(struct gb *b)
{
    uint64_t ne[2] = { 32, 2 };
    gb_header(b, 3, 2, 5);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.block_count", 2);
    gb_arr_head(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 3);
    gb_str(b, "<s>"); gb_str(b, "a"); gb_str(b, "bc");
    gb_arr_head(b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, 3);
    gb_f32(b, 0); gb_f32(b, -1); gb_f32(b, -2);
    gb_arr_head(b, "n", GGUF_TYPE_ARRAY, 1); gb_u32(b, GGUF_TYPE_INT16); gb_u64(b, 2); gb_u32(b, 0);
    gb_tensor(b, "a", 2, ne, GGML_TYPE_F32, 0);
    gb_tensor(b, "b", 2, ne, GGML_TYPE_Q8_0, 256);
    gb_pad(b, 32);
    gb_zeros(b, 256 + 68);
}

TEST(gguf_every_truncation_fails)
{
    struct gb b = { 0 };
    void *copy;
    build_small(&b);
    struct gguf *g = gb_open(&b, &copy);
    CHECK_MSG(g != NULL, "%s", err);
    gguf_free(g);
    free(copy);
    size_t full = b.n;
    for (size_t n = 0; n < full; n++) {
        b.n = n;
        g = gb_open(&b, &copy);
        free(copy);
        if (g)
            gguf_free(g);
        CHECK_MSG(g == NULL, "prefix of %zu/%zu bytes opened", n, full);
        CHECK_MSG(strncmp(err, "gguf: t.gguf: ", 14) == 0, "prefix %zu: bad message \"%s\"", n, err);
    }
    gb_free(&b);
}

/* Random byte corruption must never crash; whatever opens must be readable. */
TEST(gguf_random_corruption_is_safe)
{
    struct gb b = { 0 };
    build_small(&b);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *buf = malloc(b.n);
        memcpy(buf, b.p, b.n);
        for (int k = 0; k < 1 + iter % 4; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            buf[(rng >> 8) % b.n] = (uint8_t)(rng >> 40);
        }
        struct gguf *g = gguf_open_memory(buf, b.n, "t.gguf", err, sizeof err);
        if (g) {
            /* touch everything the reader hands out */
            unsigned sum = 0;
            for (int64_t i = 0; i < gguf_n_kv(g); i++) {
                const char *key = gguf_kv_key(g, i);
                enum gguf_type et;
                uint64_t count;
                size_t len;
                double d;
                sum += (unsigned)strlen(key);
                if (gguf_kv_arr(g, i, &et, &count) == 0 && et == GGUF_TYPE_STRING)
                    for (uint64_t k = 0; k < count; k++) {
                        const char *s = gguf_get_arr_str(g, key, k, &len);
                        sum += len ? (unsigned char)s[len - 1] : 0;
                    }
                if (gguf_kv_number(g, i, &d) == 0)
                    sum += (unsigned)(d != 0);
            }
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const struct gguf_tensor *t = gguf_tensor_at(g, i);
                if (t->nbytes)
                    sum += ((const uint8_t *)t->data)[t->nbytes - 1];
            }
            (void)sum;
            gguf_free(g);
        } else {
            CHECK_MSG(strncmp(err, "gguf: t.gguf: ", 14) == 0, "iter %d: bad message \"%s\"", iter, err);
        }
        free(buf);
    }
    gb_free(&b);
}

// ---- the real vocabularies -----------------------------------------------------

TEST(gguf_shared_vocabs)
{
    SKIP_IF_NO_SHARED();
    /* facts from ../shared/vocab/README.md; -1 = key absent */
    static const struct {
        const char *file, *model, *pre;
        uint64_t tokens;
        int64_t merges, bos, eos;
        int has_template;
    } facts[] = {
        { "llama-spm", "llama", "default", 32000, -1, 1, 2, 0 },
        { "phi-3", "llama", "default", 32064, -1, 1, 32000, 1 },
        { "llama-bpe", "gpt2", "llama-bpe", 128256, 280147, 128000, 128001, 0 },
        { "qwen2", "gpt2", "qwen2", 151936, 151387, 151643, 151643, 1 },
        { "gpt-2", "gpt2", "gpt-2", 50257, 50000, 50256, 50256, 0 },
        { "bert-bge", "bert", "bert-bge", 30522, -1, -1, -1, 0 },
        { "deepseek-coder", "gpt2", "deepseek-coder", 32256, 31757, 32013, 32014, 0 },
        { "deepseek-llm", "gpt2", "deepseek-llm", 102400, 99757, 100000, 100001, 0 },
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", facts[i].file);
        struct gguf *g = gguf_open(test_shared(rel), err, sizeof err);
        CHECK_MSG(g != NULL, "%s", err);
        CHECK_EQ(gguf_version(g), 3);
        CHECK_EQ(gguf_n_tensors(g), 0);
        size_t len;
        const char *s = gguf_get_str(g, "tokenizer.ggml.model", &len);
        CHECK(s && len == strlen(facts[i].model) && !memcmp(s, facts[i].model, len));
        s = gguf_get_str(g, "tokenizer.ggml.pre", &len);
        CHECK(s && len == strlen(facts[i].pre) && !memcmp(s, facts[i].pre, len));
        enum gguf_type et;
        uint64_t count;
        CHECK_EQ(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &count), 0);
        CHECK_EQ(et, GGUF_TYPE_STRING);
        CHECK_EQ(count, facts[i].tokens);
        CHECK(gguf_get_arr_str(g, "tokenizer.ggml.tokens", count - 1, &len) != NULL);
        CHECK_EQ(gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &count), 0);
        CHECK_EQ(et, GGUF_TYPE_INT32);
        CHECK_EQ(count, facts[i].tokens);
        if (facts[i].merges < 0) {
            CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &count) < 0);
        } else {
            CHECK_EQ(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &count), 0);
            CHECK_EQ(count, facts[i].merges);
        }
        uint32_t id;
        if (facts[i].bos < 0) {
            CHECK_EQ(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id), OMNI_ERR_NOTFOUND);
        } else {
            CHECK_EQ(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id), 0);
            CHECK_EQ(id, facts[i].bos);
            CHECK_EQ(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id), 0);
            CHECK_EQ(id, facts[i].eos);
        }
        CHECK_EQ(gguf_get_str(g, "tokenizer.chat_template", &len) != NULL, facts[i].has_template);
        gguf_free(g);
    }

    /* a few token strings */
    struct gguf *g = gguf_open(test_shared("vocab/ggml-vocab-llama-bpe.gguf"), err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    size_t len;
    const char *s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 128000, &len);
    CHECK(s && len == 17 && !memcmp(s, "<|begin_of_text|>", 17));
    s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 220, &len); /* " " as GPT-2 bytes: "Ġ" */
    CHECK(s && len == 2 && !memcmp(s, "\xc4\xa0", 2));
    gguf_free(g);
    g = gguf_open(test_shared("vocab/ggml-vocab-llama-spm.gguf"), err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &len);
    CHECK(s && len == 3 && !memcmp(s, "<s>", 3));
    CHECK(gguf_get_arr_data(g, "tokenizer.ggml.scores") != NULL);
    bool add_bos = false;
    CHECK_EQ(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), 0);
    CHECK(add_bos);
    gguf_free(g);
}
