/* omni.c - error strings, error formatting, monotonic clock and logging. */
#include "omni.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *omni_strerror(int err)
{
    switch (err) {
    case OMNI_OK: return "ok";
    case OMNI_ERR_IO: return "I/O error";
    case OMNI_ERR_FORMAT: return "malformed data";
    case OMNI_ERR_UNSUPPORTED: return "unsupported";
    case OMNI_ERR_NOMEM: return "out of memory";
    case OMNI_ERR_ARG: return "invalid argument";
    case OMNI_ERR_LIMIT: return "limit exceeded";
    case OMNI_ERR_NOTFOUND: return "not found";
    default: return "unknown error";
    }
}

int omni_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int omni_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return OMNI_ERR_NOMEM;
        n *= 2;
    }
    char *nb = realloc(*buf, n);
    if (!nb)
        return OMNI_ERR_NOMEM;
    *buf = nb;
    *cap = n;
    return 0;
}

double omni_time_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static enum omni_log_level log_level = OMNI_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void omni_log_set_level(enum omni_log_level level) { log_level = level; }

void omni_log(enum omni_log_level level, const char *fmt, ...)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    if (level < log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "omniserve: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}

uint64_t omni_meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    const size_t n = strlen(key);
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}
