/* fuzz_gguf.c - libFuzzer target for the GGUF reader (gguf_open_memory).
 * Built and run by `make fuzz` (tests/fuzz/run.sh); one input by hand:
 *   build-fuzz/fuzz_gguf CRASH_FILE
 *
 * A file that opens must be fully readable through the public API: every key,
 * every string-array element and the last byte of every tensor are touched.
 *
 * Input: a whole GGUF file. */
#include "tests/fuzz/fz_util.h"

#include "src/core/gguf.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct gguf *g = gguf_open_memory(data, size, "fuzz.gguf", err, sizeof err);
    if (!g)
        return 0;
    volatile unsigned sink = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        enum gguf_type et;
        uint64_t count;
        size_t len;
        double d;
        sink += (unsigned)strlen(key) + (gguf_find_key(g, key) == i);
        if (gguf_kv_str(g, i, &len) && len)
            sink += (unsigned char)gguf_kv_str(g, i, &len)[len - 1];
        if (gguf_kv_number(g, i, &d) == 0)
            sink += d != 0;
        if (gguf_kv_arr(g, i, &et, &count) != 0)
            continue;
        if (et == GGUF_TYPE_STRING) {
            for (uint64_t k = 0; k < count; k++) {
                const char *s = gguf_get_arr_str(g, key, k, &len);
                sink += len ? (unsigned char)s[len - 1] : 0;
            }
        } else if (count && gguf_get_arr_data(g, key)) {
            sink += *(const unsigned char *)gguf_get_arr_data(g, key);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        sink += gguf_find_tensor(g, t->name) == t;
        if (t->nbytes)
            sink += ((const unsigned char *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    gguf_free(g);
    return 0;
}
