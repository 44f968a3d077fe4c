/* cpu.h - x86 feature detection and the kernel level in use.
 *
 * Features come from CPUID and from XGETBV (the OS must save YMM/ZMM/opmask
 * state, and for AMX the XTILECFG/XTILEDATA state after an arch_prctl
 * permission request). The level picks the kernel tables in quant.c and the
 * matmul paths and the compute layer's ops (ops.h); the environment variable
 * OMNI_CPU=scalar|avx2|avxvnni|avx512|avx512vnni|amx caps it (tests and
 * benchmarks use it to exercise every path on one machine).
 *
 *   char line[128];
 *   omni_cpu_describe(line, sizeof line);   // "AVX2 FMA F16C AVX-VNNI AVX512 VNNI BF16 VBMI+BITALG AMX"
 *   if (omni_cpu_level() >= OMNI_CPU_AVX512) ...
 *
 * Thread safety: detection runs once (pthread_once); omni_cpu_set_level must
 * not race with running kernels. */
#ifndef OMNI_CPU_H
#define OMNI_CPU_H

#include <stdbool.h>
#include <stddef.h>

/* Ordered: each level includes the ones below it, except AVXVNNI: the
 * AVX-512 levels build on AVX2, not on it (Skylake-X and Zen 4 have AVX-512
 * but no AVX-VNNI), so their kernel tables never hold VEX-VNNI code, and a
 * CPU without AVX-VNNI capped at avxvnni runs the AVX2 level
 * (omni_cpu_usable_level). The binary's floor is SSE4.2 (x86-64-v2, the
 * default build's -march); "scalar" is that floor with the plain-C kernels. */
enum omni_cpu_level {
    OMNI_CPU_SCALAR = 0,
    OMNI_CPU_AVX2 = 1,       /* AVX2 + FMA + F16C */
    OMNI_CPU_AVXVNNI = 2,    /* AVX2 level + AVX-VNNI (VEX vpdpbusd: Alder Lake and later clients) */
    OMNI_CPU_AVX512 = 3,     /* AVX2 level + AVX-512 F/BW/VL/DQ (Skylake-X without VNNI) */
    OMNI_CPU_AVX512VNNI = 4, /* AVX512 level + AVX-512 VNNI (the int8 kernels' vpdpbusd) */
    OMNI_CPU_AMX = 5,        /* AVX512VNNI level + AMX tile/int8, OS state and permission */
    OMNI_CPU_LEVELS = 6,
};

/* Plain-C hot loops whose per-element results do not depend on the ISA
 * (dequantizers under fp-contract=off, conversions): compiled twice, for the
 * binary's x86-64-v2 floor and for x86-64-v3 (AVX2, FMA, F16C), the copy
 * picked once at load time from CPUID (an ifunc; OMNI_CPU does not cap it,
 * as both copies give the same bits). Put it before the definition. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define OMNI_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define OMNI_CLONES
#endif

struct omni_cpu_features {
    /* CPUID bits */
    bool avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16;
    bool avx512_vbmi, avx512_bitalg; /* no level of their own: the VNNI level's
                                      * q4_0/q5_0 decode takes byte permutes
                                      * where they exist (the same bits) */
    bool avx_vnni, amx_tile, amx_int8, amx_bf16;
    /* XGETBV / arch_prctl: what the OS lets us use */
    bool os_ymm, os_zmm, os_amx, amx_permitted;
    int max_level; /* best level this CPU + OS support (omni_cpu_max_level_of) */
};

const struct omni_cpu_features *omni_cpu(void);
/* Level in use: max_level capped by OMNI_CPU (read at first use). */
int omni_cpu_level(void);
/* Cap the level (omni_cpu_usable_level of this CPU); returns the level now
 * in use. */
int omni_cpu_set_level(int level);
/* The rules on a feature set (pure; tests feed made-up CPUs): the best level
 * f supports, and the level that runs when capped at `level`: at most
 * max_level, and AVX2 for AVXVNNI without AVX-VNNI. Whether f supports the
 * level itself: omni_cpu_usable_level(f, level) == level. */
int omni_cpu_max_level_of(const struct omni_cpu_features *f);
int omni_cpu_usable_level(const struct omni_cpu_features *f, int level);
/* "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "amx"; "?" otherwise. */
const char *omni_cpu_level_name(int level);
/* Parse a level name; -1 when unknown. */
int omni_cpu_level_from_name(const char *name);
/* One line for logs listing the usable features, e.g. "AVX2 FMA F16C
 * AVX-VNNI AVX512 VNNI BF16 AMX (level amx)". */
void omni_cpu_describe(char *buf, size_t len);

#endif
