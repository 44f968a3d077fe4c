/* omni.h - error codes and small helpers shared by every omniserve module.
 *
 * Library code never exits on bad input: it returns a negative enum omni_err
 * (or NULL) and writes one line of context into a caller-supplied buffer,
 * e.g. "gguf: model.gguf: tensor 'blk.3.attn_q.weight': offset 812 past end
 * of file (640 bytes)". Only src/api/ and src/main.c turn errors into HTTP
 * statuses or exit codes. */
#ifndef OMNI_H
#define OMNI_H

#include <stddef.h>
#include <stdint.h>

#define OMNI_VERSION "0.1.0"

enum omni_err {
    OMNI_OK = 0,
    OMNI_ERR_IO = -1,          /* open/read/mmap failed */
    OMNI_ERR_FORMAT = -2,      /* malformed or truncated file/data */
    OMNI_ERR_UNSUPPORTED = -3, /* valid but not supported (arch, type) */
    OMNI_ERR_NOMEM = -4,       /* allocation failed */
    OMNI_ERR_ARG = -5,         /* bad argument from the caller */
    OMNI_ERR_LIMIT = -6,       /* a configured limit was exceeded */
    OMNI_ERR_NOTFOUND = -7,    /* key, tensor or token not present */
};

const char *omni_strerror(int err);

/* Write a formatted message into err[errlen] (no-op if err is NULL). Returns
 * code so that `return omni_fail(err, n, OMNI_ERR_FORMAT, "...")` works. */
int omni_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int omni_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int omni_add_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* splitmix64 (Steele, Lea, Flood 2014): omni_mix64 is its finalizer, a
 * cheap full-avalanche 64-bit mix; omni_splitmix64 advances the state *s
 * and returns the next number of its seeded stream. */
static inline uint64_t omni_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t omni_splitmix64(uint64_t *s)
{
    return omni_mix64(*s += 0x9e3779b97f4a7c15ull);
}

/* Make the realloc'd buffer *buf of *cap bytes hold at least need bytes,
 * doubling from 256. Returns 0, or OMNI_ERR_NOMEM with *buf and *cap
 * unchanged (the old buffer still belongs to the caller). */
int omni_reserve(char **buf, size_t *cap, size_t need);

/* Monotonic time in seconds. */
double omni_time_s(void);
/* A line of /proc/meminfo in bytes (key "MemTotal", "MemAvailable", ...);
 * 0 when unknown. */
uint64_t omni_meminfo_bytes(const char *key);

/* Logging to stderr; level names the severity. Thread-safe. */
enum omni_log_level { OMNI_LOG_DEBUG, OMNI_LOG_INFO, OMNI_LOG_WARN, OMNI_LOG_ERROR };
void omni_log_set_level(enum omni_log_level level);
void omni_log(enum omni_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define OMNI_INFO(...) omni_log(OMNI_LOG_INFO, __VA_ARGS__)
#define OMNI_WARN(...) omni_log(OMNI_LOG_WARN, __VA_ARGS__)
#define OMNI_ERROR(...) omni_log(OMNI_LOG_ERROR, __VA_ARGS__)
#define OMNI_DEBUG(...) omni_log(OMNI_LOG_DEBUG, __VA_ARGS__)

#endif
