/* bench_util.h - statistics and decode timing shared by the bench subcommands.
 *
 *   double med = bench_median(samples, n);          // sorts samples
 *   int32_t tok = bench_argmax_finite(logits, n_vocab);
 *   double t = bench_decode("bench", ctx, kv, &seq, tok, n_prompt, n_gen, logits, n_vocab, zeros);
 *   double gb_s = bench_read_bandwidth(tp, 1 << 30, 5) / 1e9;   // streaming read, all of tp's threads
 *
 * No shared state: safe from any thread on distinct arguments. */
#ifndef OMNI_CLI_BENCH_UTIL_H
#define OMNI_CLI_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

struct llm_ctx;
struct llm_model;
struct tpool;
struct llm_kv;
struct llm_seq_view;

/* Sorts v[0..n-1] ascending. */
void bench_sort(double *v, int n);
/* Median of v[0..n-1] (n > 0); sorts v. */
double bench_median(double *v, int n);
/* Argmax of one logit row; -1 if any value is NaN or infinite. */
int32_t bench_argmax_finite(const float *row, int n);
/* n_gen single-token decode steps of sequence seq, the first fed tok at
 * position pos0, each next one the argmax of the previous logits; seq_id
 * holds one sequence id (0). Returns the seconds spent in llm_forward, or -1
 * with a message prefixed by cmd on a failed step or non-finite logits. */
double bench_decode(const char *cmd, struct llm_ctx *ctx, struct llm_kv *kv,
                    const struct llm_seq_view *seq, int32_t tok, int pos0, int n_gen,
                    float *logits, int n_vocab, const int32_t *seq_id);

/* The machine's streaming read bandwidth in bytes/s as the threads of tp
 * (NULL: one thread) see it: a buffer of bytes (>= 1 GiB to defeat every
 * cache) is filled once, then summed passes times in even slices per
 * thread, alternately without and with software prefetches 8 KB ahead;
 * the best pass counts. 0 when the buffer cannot be allocated. */
double bench_read_bandwidth(struct tpool *tp, size_t bytes, int passes);
/* The same, also giving the best plain pass (no software prefetches: what
 * the probe measured before, for comparisons) in *plain. */
double bench_read_bandwidth2(struct tpool *tp, size_t bytes, int passes, double *plain);
/* rounds of the three reads (membw.h: vec, vec_pf, scalar) in turn: the
 * best vec / vec_pf pass is returned (bench_read_bandwidth's figure, from
 * at least as many passes), the best vec pass goes to *plain and the best
 * scalar one (the simple sum loop: the reference the probe must not
 * out-read by much) to *scalar. */
double bench_read_bandwidth3(struct tpool *tp, size_t bytes, int rounds, double *plain, double *scalar);
/* Bytes of weights one decode step of one sequence reads: every matrix but
 * the token embedding (one row of it is read), plus the embedding again
 * when the output projection reuses it (tied); of a mixture of experts only
 * the experts a token uses (llm_model_decode_bytes). */
size_t bench_decode_bytes(const struct llm_model *m);

#endif
