/* bench_prompt.c - where a prompt's time goes: the weight products of one
 * transformer layer at prompt size (omni_matmul, M activation rows, the
 * pool's threads), each timed alone and reported as G multiply-adds/s
 * against this core's measured peaks (AVX2 FMA fp32, vpmaddubsw int8),
 * with the layer's total. Times: the best of -r runs, wall clock and
 * the process's CPU time (of_fma_peak: G multiply-adds per CPU second over
 * one core's FMA peak; on a loaded machine the CPU figures hold). Not a test and not built by make:
 *   cc -O2 -pthread -I. tests/bench_prompt.c \
 *      build/src/core/{matmul,quant,quant_lowbit,cpu,tensor,omni,threadpool,compute,ops,ops_ref}.o \
 *      build/src/core/arch/x86/[a-z]*.o \
 *      $(pkg-config --libs openblas) -lm -no-pie -o /tmp/bench_prompt
 *   /tmp/bench_prompt --shape qwen2.5-0.5b --type q4_0 -t 2 -m 512 -r 3
 * One JSON line per product, then one for the layer (a whole model's
 * prompt is n_layer times that, plus attention: perf shows the rest). */
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double proc_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* one core's fp32 FMA peak: 12 independent accumulator chains, in registers */
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ASM_KEEP12(a)                                                                              \
    __asm__ volatile("" : "+x"(a##0), "+x"(a##1), "+x"(a##2), "+x"(a##3), "+x"(a##4), "+x"(a##5), \
                     "+x"(a##6), "+x"(a##7), "+x"(a##8), "+x"(a##9), "+x"(a##10), "+x"(a##11))
__attribute__((target("avx2,fma"))) static double peak_fma(void)
{
    const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
#define DECL(i) __m256 a##i = _mm256_set1_ps((float)i);
    REP12(DECL)
#undef DECL
    const long n = 50000000;
    double t = cpu_s();
    for (long k = 0; k < n; k++) {
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, b, c);
        REP12(STEP)
#undef STEP
        ASM_KEEP12(a);
    }
    t = cpu_s() - t;
    volatile float sink = a0[0] + a11[0];
    (void)sink;
    return n * 12.0 * 8 / t / 1e9;
}

/* one core's vpmaddubsw peak (32 u8 x s8 products summed in pairs) */
__attribute__((target("avx2"))) static double peak_maddubs(void)
{
    const __m256i u = _mm256_set1_epi8(3);
#define DECL(i) __m256i a##i = _mm256_set1_epi8((char)i);
    REP12(DECL)
#undef DECL
    const long n = 50000000;
    double t = cpu_s();
    for (long k = 0; k < n; k++) {
#define STEP(i) a##i = _mm256_maddubs_epi16(u, a##i);
        REP12(STEP)
#undef STEP
        ASM_KEEP12(a);
    }
    t = cpu_s() - t;
    volatile int sink = _mm256_extract_epi32(a0, 0) + _mm256_extract_epi32(a11, 0);
    (void)sink;
    return n * 12.0 * 32 / t / 1e9;
}

static uint64_t rng = 7;
static float frand(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

/* random weights [n_out][n_in] of type */
static void *make_weights(int type, int64_t n_in, int64_t n_out)
{
    const size_t row = ggml_row_size(type, n_in);
    uint8_t *w = malloc(row * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    if (!w || !f)
        exit(1);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            f[i] = frand() * 0.05f;
        void *dst = w + row * (size_t)r;
        switch (type) {
        case GGML_TYPE_F32: memcpy(dst, f, sizeof(float) * (size_t)n_in); break;
        case GGML_TYPE_F16: quantize_row_f16_ref(f, dst, n_in); break;
        case GGML_TYPE_Q4_0: quantize_row_q4_0_ref(f, dst, n_in); break;
        case GGML_TYPE_Q5_0: quantize_row_q5_0_ref(f, dst, n_in); break;
        case GGML_TYPE_Q8_0: quantize_row_q8_0_ref(f, dst, n_in); break;
        case GGML_TYPE_Q4_K: quantize_row_q4_K_ref(f, dst, n_in); break;
        case GGML_TYPE_Q6_K: quantize_row_q6_K_ref(f, dst, n_in); break;
        default: fprintf(stderr, "bench_prompt: type %d not handled\n", type); exit(2);
        }
    }
    free(f);
    return w;
}

struct shape {
    const char *name;
    int n_embd, n_ff, q_dim, kv_dim;
};

static const struct shape shapes[] = {
    { "qwen2.5-0.5b", 896, 4864, 896, 128 },
    { "llama-3.2-1b", 2048, 8192, 2048, 512 },
};

int main(int argc, char **argv)
{
    const char *shape_name = "qwen2.5-0.5b", *type_name = "q4_0";
    int threads = 2, m = 512, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--shape"))
            shape_name = argv[i + 1];
        else if (!strcmp(argv[i], "--type"))
            type_name = argv[i + 1];
        else if (!strcmp(argv[i], "-t"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m"))
            m = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            reps = atoi(argv[i + 1]);
    }
    const struct shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, shape_name))
            sh = &shapes[i];
    int type = -1;
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (ggml_type_name(t) && !strcasecmp(ggml_type_name(t), type_name))
            type = t;
    if (!sh || type < 0 || threads < 1 || m < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_prompt --shape qwen2.5-0.5b|llama-3.2-1b --type T -t N -m ROWS -r REPS\n");
        return 2;
    }
    char err[256];
    struct tpool *tp = tpool_new(threads, err, sizeof err);
    if (!tp) {
        fprintf(stderr, "bench_prompt: %s\n", err);
        return 1;
    }
    const double fma = peak_fma(), mb = peak_maddubs();
    printf("{\"peak_fma_f32_gmac_s\":%.1f,\"peak_maddubs_int8_gmac_s\":%.1f,\"threads\":%d}\n", fma, mb, threads);
    const struct { const char *name; int64_t n_in, n_out; } ops[] = {
        { "attn_q", sh->n_embd, sh->q_dim },  { "attn_k", sh->n_embd, sh->kv_dim },
        { "attn_v", sh->n_embd, sh->kv_dim }, { "attn_output", sh->q_dim, sh->n_embd },
        { "ffn_gate", sh->n_embd, sh->n_ff }, { "ffn_up", sh->n_embd, sh->n_ff },
        { "ffn_down", sh->n_ff, sh->n_embd },
    };
    double total_s = 0, total_cpu = 0, total_mac = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        const int64_t n_in = ops[k].n_in, n_out = ops[k].n_out;
        void *w = make_weights(type, n_in, n_out);
        float *x = malloc(sizeof(float) * (size_t)m * n_in), *y = malloc(sizeof(float) * (size_t)m * n_out);
        for (int64_t i = 0; i < (int64_t)m * n_in; i++)
            x[i] = frand();
        struct omni_tensor t = { .type = type, .ne = { n_in, n_out }, .data = w };
        omni_matmul(tp, &t, x, m, y); /* warm-up: scratch, pages */
        double best = 1e30, best_cpu = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s(), c0 = proc_s();
            omni_matmul(tp, &t, x, m, y);
            const double dt = now_s() - t0, dc = proc_s() - c0;
            best = dt < best ? dt : best;
            best_cpu = dc < best_cpu ? dc : best_cpu;
        }
        const double mac = (double)m * n_in * n_out;
        total_s += best;
        total_cpu += best_cpu;
        total_mac += mac;
        printf("{\"op\":\"%s\",\"type\":\"%s\",\"n_in\":%lld,\"n_out\":%lld,\"rows\":%d,\"ms\":%.3f,"
               "\"gmac_s\":%.1f,\"cpu_ms\":%.3f,\"gmac_per_cpu_s\":%.1f,\"of_fma_peak\":%.2f}\n",
               ops[k].name, type_name, (long long)n_in, (long long)n_out, m, best * 1e3, mac / best / 1e9,
               best_cpu * 1e3, mac / best_cpu / 1e9, mac / best_cpu / 1e9 / fma);
        free(w);
        free(x);
        free(y);
    }
    printf("{\"op\":\"layer\",\"ms\":%.3f,\"gmac_s\":%.1f,\"cpu_ms\":%.3f,\"gmac_per_cpu_s\":%.1f,"
           "\"of_fma_peak\":%.2f}\n",
           total_s * 1e3, total_mac / total_s / 1e9, total_cpu * 1e3, total_mac / total_cpu / 1e9,
           total_mac / total_cpu / 1e9 / fma);
    tpool_free(tp);
    return 0;
}
