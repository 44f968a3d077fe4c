/* cpu.c - x86 feature detection (CPUID + XGETBV + AMX permission) and the
 * kernel level in use. A CPUID bit alone is not enough: the OS has to save
 * the register state (XCR0) or the first wide instruction faults, and Linux
 * hands out AMX tile state only after ARCH_REQ_XCOMP_PERM. */
#include "cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define OMNI_X86 1
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static struct omni_cpu_features features;
static atomic_int level_in_use;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

static const char *level_names[OMNI_CPU_LEVELS] = { "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "amx" };

#ifdef OMNI_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect_x86(struct omni_cpu_features *f)
{
    unsigned a, b, c, d, max_leaf;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d))
        return;
    __cpuid_count(1, 0, a, b, c, d);
    bool osxsave = c & (1u << 27);
    f->fma = c & (1u << 12);
    f->avx = c & (1u << 28);
    f->f16c = c & (1u << 29);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        unsigned max_sub = a;
        f->avx2 = b & (1u << 5);
        f->avx512f = b & (1u << 16);
        f->avx512dq = b & (1u << 17);
        f->avx512bw = b & (1u << 30);
        f->avx512vl = b & (1u << 31);
        f->avx512_vnni = c & (1u << 11);
        f->avx512_vbmi = c & (1u << 1);
        f->avx512_bitalg = c & (1u << 12);
        f->amx_bf16 = d & (1u << 22);
        f->amx_tile = d & (1u << 24);
        f->amx_int8 = d & (1u << 25);
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f->avx_vnni = a & (1u << 4);
            f->avx512_bf16 = a & (1u << 5);
        }
    }
    if (osxsave) {
        uint64_t xcr0 = xgetbv0();
        f->os_ymm = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
        f->os_zmm = f->os_ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
        f->os_amx = (xcr0 & 0x60000) == 0x60000;    /* XTILECFG (17), XTILEDATA (18) */
    }
    if (f->amx_tile && f->amx_int8 && f->os_amx)
        f->amx_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    f->max_level = omni_cpu_max_level_of(f);
}
#endif

/* Whether f runs every instruction of level lvl's kernels. */
static bool supports(const struct omni_cpu_features *f, int lvl)
{
    const bool avx2 = f->avx && f->avx2 && f->fma && f->f16c && f->os_ymm;
    const bool avx512 = avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->os_zmm;
    switch (lvl) {
    case OMNI_CPU_SCALAR: return true;
    case OMNI_CPU_AVX2: return avx2;
    case OMNI_CPU_AVXVNNI: return avx2 && f->avx_vnni;
    case OMNI_CPU_AVX512: return avx512;
    case OMNI_CPU_AVX512VNNI: return avx512 && f->avx512_vnni;
    case OMNI_CPU_AMX:
        return avx512 && f->avx512_vnni && f->amx_tile && f->amx_int8 && f->os_amx && f->amx_permitted;
    default: return false;
    }
}

int omni_cpu_max_level_of(const struct omni_cpu_features *f)
{
    /* every level above AVXVNNI implies AVX2, not AVX-VNNI: the best one
     * supported is the max even where AVXVNNI below it is not */
    for (int lvl = OMNI_CPU_LEVELS - 1; lvl > OMNI_CPU_SCALAR; lvl--)
        if (supports(f, lvl))
            return lvl;
    return OMNI_CPU_SCALAR;
}

int omni_cpu_usable_level(const struct omni_cpu_features *f, int level)
{
    const int max_level = omni_cpu_max_level_of(f);
    if (level < OMNI_CPU_SCALAR)
        level = OMNI_CPU_SCALAR;
    if (level > max_level)
        level = max_level;
    /* the only level the ones above it do not include: AVX-512 without
     * AVX-VNNI (Skylake-X, Zen 4) capped at avxvnni runs AVX2 */
    while (level > OMNI_CPU_SCALAR && !supports(f, level))
        level--;
    return level;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__SSE4_2__)
/* The binary's floor: the generic code is compiled for x86-64-v2 (or more),
 * so on an older CPU say so instead of dying on the first SSE4.2 or POPCNT
 * instruction. This function itself is plain x86-64 and runs before main. */
__attribute__((constructor(101), target("arch=x86-64"))) static void check_floor(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2") || !__builtin_cpu_supports("popcnt")) {
        static const char msg[] = "omniserve: this CPU lacks SSE4.2/POPCNT (x86-64-v2), the floor of this "
                                  "build; build with `make NATIVE=1` on it\n";
        ssize_t n = write(2, msg, sizeof msg - 1);
        (void)n;
        _exit(1);
    }
}
#endif

static void detect(void)
{
#ifdef OMNI_X86
    detect_x86(&features);
#endif
    int lvl = features.max_level;
    const char *env = getenv("OMNI_CPU");
    if (env && *env) {
        int cap = omni_cpu_level_from_name(env);
        if (cap < 0)
            fprintf(stderr,
                    "omniserve: OMNI_CPU=%s unknown (scalar|avx2|avxvnni|avx512|avx512vnni|amx); ignored\n",
                    env);
        else
            lvl = omni_cpu_usable_level(&features, cap);
    }
    atomic_store(&level_in_use, lvl);
}

const struct omni_cpu_features *omni_cpu(void)
{
    pthread_once(&detect_once, detect);
    return &features;
}

int omni_cpu_level(void)
{
    pthread_once(&detect_once, detect);
    return atomic_load_explicit(&level_in_use, memory_order_relaxed);
}

int omni_cpu_set_level(int level)
{
    pthread_once(&detect_once, detect);
    level = omni_cpu_usable_level(&features, level);
    atomic_store(&level_in_use, level);
    return level;
}

const char *omni_cpu_level_name(int level)
{
    return level >= 0 && level < OMNI_CPU_LEVELS ? level_names[level] : "?";
}

int omni_cpu_level_from_name(const char *name)
{
    for (int i = 0; i < OMNI_CPU_LEVELS; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void omni_cpu_describe(char *buf, size_t len)
{
    const struct omni_cpu_features *f = omni_cpu();
    struct { bool on; const char *name; } items[] = {
        { f->avx2 && f->os_ymm, "AVX2" },
        { f->fma && f->os_ymm, "FMA" },
        { f->f16c && f->os_ymm, "F16C" },
        { f->avx_vnni && f->os_ymm, "AVX-VNNI" },
        { f->avx512f && f->os_zmm, "AVX512" },
        { f->avx512_vnni && f->os_zmm, "VNNI" },
        { f->avx512_bf16 && f->os_zmm, "BF16" },
        { f->avx512_vbmi && f->avx512_bitalg && f->os_zmm, "VBMI+BITALG" },
        { f->amx_tile && f->amx_int8 && f->os_amx && f->amx_permitted, "AMX" },
    };
    size_t pos = 0;
    if (!buf || !len)
        return;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (!items[i].on)
            continue;
        int n = snprintf(buf + pos, len - pos, "%s%s", pos ? " " : "", items[i].name);
        if (n < 0 || (size_t)n >= len - pos)
            return;
        pos += (size_t)n;
    }
    snprintf(buf + pos, len - pos, "%s(level %s)", pos ? " " : "",
             omni_cpu_level_name(omni_cpu_level()));
}
