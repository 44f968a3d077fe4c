/* q8_stream.c - where a q8_0 matrix-vector product streaming from memory
 * loses time on an AVX-512 VNNI host (issue [9] item 2, the Intel host's
 * Q8_0 decode): the same weights in several memory backings and layouts,
 * read by several loop shapes, 2 pinned threads, GB/s of weights.
 *
 * Backings: anon (4 KiB pages, MADV_NOHUGEPAGE), huge (anonymous, 2 MiB
 * aligned, MADV_HUGEPAGE), file (written to a file and mapped read-only,
 * as a GGUF model is). Kernels (dot math as quants_avx512.c's VNNI
 * vec_dot_prep; the repacked ones on a row layout of all quants, 64-byte
 * aligned, then the row's F16 scales: the same bytes):
 *   cur:D       one row at a time, 34-byte blocks, stream prefetch D bytes
 *               ahead into L1 (D 0: none)   (the production kernel)
 *   ms<S>:D     the thread's rows as S contiguous sub-ranges walked in
 *               lockstep (S streams), each prefetched D ahead
 *   rp:D        repacked rows, 512-bit loads (two blocks each)
 *   rpms<S>:D   repacked, S streams
 *   read<S>:D   plain 512-bit loads (S streams), no arithmetic: the ceiling
 * Not built by make (AVX-512 VNNI only):
 *   cc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma -pthread \
 *      tools/q8_stream.c -o /tmp/q8_stream
 *   /tmp/q8_stream -s 2048x8192 -c 14,15 -g 1024 -r 3 -k "cur:4096 ms2:4096 rp:4096" -b "anon huge file"
 * One JSON line per (backing, kernel, round): best and median GB/s. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define QK 32
#define BLK 34 /* F16 scale + 32 int8 */

static int64_t n_in = 2048, n_out = 8192, n_mat;
static size_t row_bytes;
static int cores[2] = { 14, 15 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// ---- kernels -------------------------------------------------------------

struct act {
    const int8_t *qy; /* n_in int8 */
    const float *dy;  /* n_in / 32 */
};

static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* one 34-byte block row dot of S rows in lockstep (S = 1: the production
 * loop); pf: prefetch distance in bytes (0: none) */
static inline __attribute__((always_inline)) void dot_blocks(const uint8_t *const *w, int S, const struct act *a,
                                                            float *out, int pf)
{
    const int64_t nb = n_in / QK;
    __m256 acc[4][4];
    for (int s = 0; s < S; s++)
        for (int k = 0; k < 4; k++)
            acc[s][k] = _mm256_setzero_ps();
    for (int64_t i = 0; i + 4 <= nb; i += 4) {
        for (int s = 0; s < S; s++) {
            const uint8_t *xb = w[s] + i * BLK;
            if (pf) {
                _mm_prefetch((const char *)xb + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)xb + pf + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)xb + pf + 128, _MM_HINT_T0);
            }
            const __m128i h = _mm_set_epi16(0, 0, 0, 0, *(const int16_t *)(xb + 3 * BLK), *(const int16_t *)(xb + 2 * BLK),
                                            *(const int16_t *)(xb + BLK), *(const int16_t *)xb);
            const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(a->dy + i));
            const __m256 d8 = _mm256_set_m128(d4, d4);
            __m256 d[4] = { _mm256_permute_ps(d8, 0x00), _mm256_permute_ps(d8, 0x55), _mm256_permute_ps(d8, 0xaa),
                            _mm256_permute_ps(d8, 0xff) };
            for (int k = 0; k < 4; k++) {
                const __m256i qx = _mm256_loadu_si256((const __m256i *)(xb + k * BLK + 2));
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(a->qy + (i + k) * QK));
                const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qx), _mm256_sign_epi8(qy, qx));
                acc[s][k] = _mm256_fmadd_ps(d[k], _mm256_cvtepi32_ps(dot), acc[s][k]);
            }
        }
    }
    for (int s = 0; s < S; s++)
        out[s] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[s][0], acc[s][1]), _mm256_add_ps(acc[s][2], acc[s][3])));
}

/* repacked row: n_in int8 quants (64-byte aligned when the row is), then
 * nb F16 scales; two blocks per 512-bit load */
static inline __attribute__((always_inline)) void dot_rp(const uint8_t *const *w, int S, const struct act *a, float *out,
                                                        int pf)
{
    const int64_t nb = n_in / QK;
    __m512 acc[4][2];
    for (int s = 0; s < S; s++)
        acc[s][0] = acc[s][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i + 8 <= nb; i += 8) { /* 8 blocks: 256 bytes, 4 loads */
        for (int s = 0; s < S; s++) {
            const uint8_t *q = w[s] + i * QK;
            const uint16_t *sc = (const uint16_t *)(w[s] + n_in) + i;
            if (pf) {
                for (int l = 0; l < 4; l++)
                    _mm_prefetch((const char *)q + pf + 64 * l, _MM_HINT_T0);
                if ((i & 31) == 0)
                    _mm_prefetch((const char *)sc + pf / 16, _MM_HINT_T0);
            }
            const __m256 d8 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sc)), _mm256_loadu_ps(a->dy + i));
            const __m512 d16 = _mm512_castps256_ps512(d8);
            for (int l = 0; l < 4; l++) {
                const __m512i qx = _mm512_load_si512((const void *)(q + 64 * l));
                const __m512i qy = _mm512_loadu_si512((const void *)(a->qy + (i + 2 * l) * QK));
                const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qx),
                                                        _mm512_mask_sub_epi8(qy, _mm512_movepi8_mask(qx), _mm512_setzero_si512(), qy));
                /* lanes 0-7: block 2l, 8-15: block 2l+1 */
                const __m512i idx = _mm512_set_epi32(2 * l + 1, 2 * l + 1, 2 * l + 1, 2 * l + 1, 2 * l + 1, 2 * l + 1, 2 * l + 1,
                                                     2 * l + 1, 2 * l, 2 * l, 2 * l, 2 * l, 2 * l, 2 * l, 2 * l, 2 * l);
                acc[s][l & 1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, d16), _mm512_cvtepi32_ps(dot), acc[s][l & 1]);
            }
        }
    }
    for (int s = 0; s < S; s++)
        out[s] = _mm512_reduce_add_ps(_mm512_add_ps(acc[s][0], acc[s][1]));
}

static inline __attribute__((always_inline)) void read_rows(const uint8_t *const *w, int S, float *out, int pf)
{
    __m512i acc[4];
    for (int s = 0; s < S; s++)
        acc[s] = _mm512_setzero_si512();
    for (size_t o = 0; o + 64 <= row_bytes; o += 64)
        for (int s = 0; s < S; s++) {
            if (pf)
                _mm_prefetch((const char *)w[s] + o + pf, _MM_HINT_T0);
            acc[s] = _mm512_xor_si512(acc[s], _mm512_loadu_si512((const void *)(w[s] + o)));
        }
    for (int s = 0; s < S; s++)
        out[s] = (float)_mm512_reduce_add_epi32(acc[s]);
}

enum kind { K_CUR, K_RP, K_READ };
struct variant {
    char name[32];
    enum kind kind;
    int streams, pf;
};

/* rows [r0, r1) of one matrix as S lockstep sub-ranges */
static void run_rows(const struct variant *v, const uint8_t *m, int64_t r0, int64_t r1, const struct act *a, float *y)
{
    const int S = v->streams;
    const int64_t len = r1 - r0, per = len / S;
    int64_t i = 0;
    for (; i < per; i++) {
        const uint8_t *w[4];
        float o[4];
        for (int s = 0; s < S; s++)
            w[s] = m + (size_t)(r0 + s * per + i) * row_bytes;
#define CALL(n)                                                                     \
    switch (v->kind) {                                                              \
    case K_CUR: dot_blocks(w, n, a, o, v->pf); break;                               \
    case K_RP: dot_rp(w, n, a, o, v->pf); break;                                    \
    default: read_rows(w, n, o, v->pf); break;                                             \
    }
        switch (S) {
        case 1: CALL(1); break;
        case 2: CALL(2); break;
        default: CALL(4); break;
        }
        for (int s = 0; s < S; s++)
            y[r0 + s * per + i] = o[s];
    }
    for (int64_t r = r0 + S * per; r < r1; r++) { /* the remainder one at a time */
        const uint8_t *w[1] = { m + (size_t)r * row_bytes };
        float o[1];
        switch (v->kind) {
        case K_CUR: dot_blocks(w, 1, a, o, v->pf); break;
        case K_RP: dot_rp(w, 1, a, o, v->pf); break;
        default: read_rows(w, 1, o, v->pf); break;
        }
        y[r] = o[0];
    }
}

// ---- two pinned threads over all matrices, a spin barrier between ---------

struct shared {
    const struct variant *v;
    const uint8_t *mem;
    const struct act *a;
    float *y;
    _Atomic int gen, count, go, stop;
};

static void barrier(struct shared *sh, int *local_gen)
{
    const int g = *local_gen;
    if (atomic_fetch_add(&sh->count, 1) == 1) {
        atomic_store(&sh->count, 0);
        atomic_store(&sh->gen, g + 1);
    } else
        while (atomic_load(&sh->gen) == g)
            _mm_pause();
    *local_gen = g + 1;
}

static void pass(struct shared *sh, int ith, int *lg)
{
    for (int64_t k = 0; k < n_mat; k++) {
        const uint8_t *m = sh->mem + (size_t)k * n_out * row_bytes;
        const int64_t r0 = n_out * ith / 2, r1 = n_out * (ith + 1) / 2;
        run_rows(sh->v, m, r0, r1, sh->a, sh->y);
        barrier(sh, lg);
    }
}

static struct shared g_sh;
static int g_lg[2];

static void pin(int c)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(c, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void *worker(void *arg)
{
    (void)arg;
    pin(cores[1]);
    int seen = 0;
    for (;;) {
        while (atomic_load(&g_sh.go) == seen && !atomic_load(&g_sh.stop))
            _mm_pause();
        if (atomic_load(&g_sh.stop))
            return NULL;
        seen = atomic_load(&g_sh.go);
        pass(&g_sh, 1, &g_lg[1]);
    }
}

static double timed_pass(void)
{
    double t = now_s();
    atomic_fetch_add(&g_sh.go, 1);
    pass(&g_sh, 0, &g_lg[0]);
    return now_s() - t;
}

// ---- memory ----------------------------------------------------------------

static uint8_t *alloc_backing(const char *b, size_t bytes, const uint8_t *src)
{
    const size_t huge = 2u << 20, sz = (bytes + huge - 1) / huge * huge;
    uint8_t *p;
    if (!strcmp(b, "file")) {
        char path[] = "/tmp/q8_stream_XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0)
            return NULL;
        unlink(path);
        for (size_t o = 0; o < bytes;) {
            ssize_t w = write(fd, src + o, bytes - o > (64u << 20) ? (64u << 20) : bytes - o);
            if (w <= 0) {
                close(fd);
                return NULL;
            }
            o += (size_t)w;
        }
        p = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            return NULL;
        volatile uint8_t s = 0; /* fault it in, as a model's first token would */
        for (size_t o = 0; o < bytes; o += 4096)
            s ^= p[o];
        (void)s;
        return p;
    }
    uint8_t *raw = mmap(NULL, sz + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(p, sz, !strcmp(b, "huge") ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memcpy(p, src, bytes);
    return p;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *kinds = "read1 read2 cur:0 cur:4096 ms2:4096 ms4:4096 rp:4096 rpms2:4096";
    const char *backs = "anon huge file";
    int reps = 3, rounds = 2;
    double gib = 1.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s"))
            sscanf(argv[i + 1], "%ldx%ld", &n_in, &n_out);
        else if (!strcmp(argv[i], "-c"))
            sscanf(argv[i + 1], "%d,%d", &cores[0], &cores[1]);
        else if (!strcmp(argv[i], "-g"))
            gib = atof(argv[i + 1]) / 1024.0;
        else if (!strcmp(argv[i], "-r"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-k"))
            kinds = argv[i + 1];
        else if (!strcmp(argv[i], "-b"))
            backs = argv[i + 1];
    }
    if (n_in % 256 || n_out < 8) {
        fprintf(stderr, "q8_stream: n_in must be a multiple of 256\n");
        return 1;
    }
    row_bytes = (size_t)n_in / QK * BLK;
    const size_t mat = (size_t)n_out * row_bytes;
    n_mat = (int64_t)(gib * (1u << 30) / mat);
    if (n_mat < 1)
        n_mat = 1;
    const size_t bytes = (size_t)n_mat * mat;
    /* the two layouts of the same random matrices */
    uint8_t *blocks = malloc(bytes), *packed = malloc(bytes);
    if (!blocks || !packed)
        return 1;
    const int64_t nb = n_in / QK;
    for (size_t r = 0; r < bytes / row_bytes; r++) {
        uint8_t *b = blocks + r * row_bytes, *p = packed + r * row_bytes;
        for (int64_t i = 0; i < nb; i++) {
            const uint16_t d = 0x2000 | (uint16_t)(next_u64() & 0x3ff); /* a small positive half */
            memcpy(b + i * BLK, &d, 2);
            memcpy(p + n_in + 2 * i, &d, 2);
            for (int k = 0; k < QK; k += 8) {
                uint64_t q = next_u64();
                memcpy(b + i * BLK + 2 + k, &q, 8);
                memcpy(p + i * QK + k, &q, 8);
            }
        }
    }
    int8_t *qy = aligned_alloc(64, n_in);
    float *dy = aligned_alloc(64, sizeof(float) * nb), *y = aligned_alloc(64, sizeof(float) * n_out);
    for (int64_t i = 0; i < n_in; i++)
        qy[i] = (int8_t)((int)(next_u64() % 255) - 127);
    for (int64_t i = 0; i < nb; i++)
        dy[i] = 0.01f;
    struct act a = { qy, dy };
    pin(cores[0]);
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);

    char bl[256];
    snprintf(bl, sizeof bl, "%s", backs);
    for (char *bs = strtok(bl, " "); bs; bs = strtok(NULL, " ")) {
        char bname[16];
        snprintf(bname, sizeof bname, "%s", bs);
        const double ta = now_s();
        uint8_t *mb = alloc_backing(bname, bytes, blocks), *mp = alloc_backing(bname, bytes, packed);
        if (!mb || !mp) {
            printf("{\"backing\":\"%s\",\"error\":\"alloc\"}\n", bname);
            continue;
        }
        fprintf(stderr, "backing %s: %.1f s to set up\n", bname, now_s() - ta);
        for (int round = 0; round < rounds; round++) {
            char kl[512];
            snprintf(kl, sizeof kl, "%s", kinds);
            char *save = NULL;
            for (char *ks = strtok_r(kl, " ", &save); ks; ks = strtok_r(NULL, " ", &save)) {
                struct variant v = { .streams = 1 };
                snprintf(v.name, sizeof v.name, "%s", ks);
                const char *c = strchr(ks, ':');
                v.pf = c ? atoi(c + 1) : 0;
                if (!strncmp(ks, "read", 4)) {
                    v.kind = K_READ;
                    v.streams = atoi(ks + 4);
                } else if (!strncmp(ks, "rpms", 4)) {
                    v.kind = K_RP;
                    v.streams = atoi(ks + 4);
                } else if (!strncmp(ks, "rp", 2)) {
                    v.kind = K_RP;
                } else if (!strncmp(ks, "ms", 2)) {
                    v.kind = K_CUR;
                    v.streams = atoi(ks + 2);
                } else
                    v.kind = K_CUR;
                if (v.streams != 1 && v.streams != 2 && v.streams != 4)
                    v.streams = 1;
                g_sh.v = &v;
                g_sh.mem = v.kind == K_RP ? mp : mb;
                g_sh.a = &a;
                g_sh.y = y;
                double t[16];
                const int nr = reps < 16 ? reps : 16;
                timed_pass(); /* warm: TLB, the worker awake */
                for (int r = 0; r < nr; r++)
                    t[r] = timed_pass();
                qsort(t, nr, sizeof t[0], cmp_d);
                printf("{\"backing\":\"%s\",\"kernel\":\"%s\",\"round\":%d,\"shape\":\"%ldx%ld\",\"gib\":%.3f,"
                       "\"gb_s_best\":%.2f,\"gb_s_median\":%.2f,\"y0\":%g}\n",
                       bname, v.name, round, n_in, n_out, bytes / (double)(1u << 30), bytes / t[0] * 1e-9,
                       bytes / t[nr / 2] * 1e-9, y[0]);
                fflush(stdout);
            }
        }
        munmap(mb, bytes);
        munmap(mp, bytes);
    }
    atomic_store(&g_sh.stop, 1);
    pthread_join(th, NULL);
    return 0;
}
