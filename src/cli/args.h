/* args.h - option-value parsing shared by the omniserve subcommands.
 *
 *   long n;
 *   if (cli_long("serve", "--port", argv[++i], 1, 65535, &n)) return 2;
 *
 * Each parser checks the whole string and the range; on failure it prints
 * one line naming the command, the option and the bad value to stderr and
 * returns -1 (the caller exits with its usage-error code). */
#ifndef OMNI_CLI_ARGS_H
#define OMNI_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

int cli_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int cli_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
               double *out);
int cli_float(const char *cmd, const char *opt, const char *s, float lo, float hi, float *out);
/* An unsigned 64-bit integer below `limit` (exclusive). */
int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t limit, uint64_t *out);
/* A comma-separated list of integers in lo..hi, at most max of them, into
 * out[]: "1,4,8". Returns how many (at least one), or -1 without a message:
 * the caller says what the list is for. */
int cli_int_list(const char *s, long lo, long hi, int *out, int max);
/* A byte size: "512", "64K", "32M", "2G" (binary units); min is the smallest
 * value accepted (0 or 1). */
int cli_size(const char *cmd, const char *opt, const char *s, size_t min, size_t *out);

#endif
