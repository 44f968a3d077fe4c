/* args.c - option-value parsing shared by the subcommands: whole-string,
 * range-checked, one clear line on stderr when a value is wrong. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in %ld..%ld, got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
               double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s expects a number in %g..%g, got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *cmd, const char *opt, const char *s, float lo, float hi, float *out)
{
    double v;
    if (cli_double(cmd, opt, s, lo, hi, &v))
        return -1;
    *out = (float)v;
    return 0;
}

int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t limit, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v >= limit) {
        fprintf(stderr, "%s: %s expects an integer in 0..%llu, got '%s'\n", cmd, opt,
                (unsigned long long)limit - 1, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_int_list(const char *s, long lo, long hi, int *out, int max)
{
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || n == max || (*end && *end != ','))
            return -1;
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n > 0 ? n : -1;
}

int cli_size(const char *cmd, const char *opt, const char *s, size_t min, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end || *s == '-' || v > (SIZE_MAX >> shift) ||
        ((size_t)v << shift) < min) {
        fprintf(stderr, "%s: %s expects a size like 512, 64K, 32M or 2G, got '%s'\n", cmd, opt, s);
        return -1;
    }
    *out = (size_t)v << shift;
    return 0;
}
