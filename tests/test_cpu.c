/* test_cpu.c - the level rules of cpu.c on made-up feature sets: the best
 * level of each CPU family and what a cap gives, above all that a CPU with
 * AVX-512 but no AVX-VNNI (Skylake-X, Zen 4) never reaches level avxvnni. */
#include "src/core/cpu.h"
#include "tests/test.h"

#include <string.h>

static struct omni_cpu_features cpu_avx2(void) /* Haswell .. Comet Lake, Zen 1-3 */
{
    struct omni_cpu_features f;
    memset(&f, 0, sizeof f);
    f.avx = f.avx2 = f.fma = f.f16c = f.os_ymm = true;
    return f;
}

static struct omni_cpu_features cpu_avx512(struct omni_cpu_features f) /* + Skylake-X's AVX-512 */
{
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.os_zmm = true;
    return f;
}

TEST(cpu_levels_of_feature_sets)
{
    struct omni_cpu_features f = cpu_avx2();
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVX2);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_AVX2);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AMX), OMNI_CPU_AVX2);
    CHECK_EQ(omni_cpu_usable_level(&f, -3), OMNI_CPU_SCALAR);

    f = cpu_avx2(); /* Alder Lake and later clients: AVX-VNNI, no AVX-512 */
    f.avx_vnni = true;
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVXVNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_AVXVNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVX512VNNI), OMNI_CPU_AVXVNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVX2), OMNI_CPU_AVX2);
    f.os_ymm = false; /* an OS that does not save YMM: nothing wide */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_SCALAR);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_SCALAR);

    f = cpu_avx512(cpu_avx2()); /* Skylake-X: never VEX VNNI */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVX512);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_AVX2);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVX512), OMNI_CPU_AVX512);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AMX), OMNI_CPU_AVX512);

    f.avx512_vnni = f.avx512_bf16 = true; /* Zen 4, Cascade Lake, Ice Lake */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVX512VNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_AVX2);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVX512VNNI), OMNI_CPU_AVX512VNNI);

    f.avx_vnni = true; /* Zen 5 */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVX512VNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVXVNNI), OMNI_CPU_AVXVNNI);
    f.os_zmm = false; /* AVX-512 state off (a VM, a kernel option): AVX-VNNI left */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVXVNNI);
    CHECK_EQ(omni_cpu_usable_level(&f, OMNI_CPU_AVX512), OMNI_CPU_AVXVNNI);

    f = cpu_avx512(cpu_avx2()); /* Sapphire Rapids: everything */
    f.avx512_vnni = f.avx512_bf16 = f.avx_vnni = true;
    f.amx_tile = f.amx_int8 = f.amx_bf16 = f.os_amx = f.amx_permitted = true;
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AMX);
    for (int lvl = OMNI_CPU_SCALAR; lvl < OMNI_CPU_LEVELS; lvl++)
        CHECK_EQ(omni_cpu_usable_level(&f, lvl), lvl);
    f.amx_permitted = false; /* the kernel refused the tile state */
    CHECK_EQ(omni_cpu_max_level_of(&f), OMNI_CPU_AVX512VNNI);

    /* this CPU: the level in use is one its rules allow */
    const struct omni_cpu_features *me = omni_cpu();
    CHECK_EQ(me->max_level, omni_cpu_max_level_of(me));
    CHECK_EQ(omni_cpu_usable_level(me, omni_cpu_level()), omni_cpu_level());
}

TEST(cpu_level_names)
{
    for (int lvl = OMNI_CPU_SCALAR; lvl < OMNI_CPU_LEVELS; lvl++)
        CHECK_EQ(omni_cpu_level_from_name(omni_cpu_level_name(lvl)), lvl);
    CHECK_EQ(omni_cpu_level_from_name("AVXVNNI"), OMNI_CPU_AVXVNNI);
    CHECK_STR_EQ(omni_cpu_level_name(OMNI_CPU_LEVELS), "?");
    CHECK_EQ(omni_cpu_level_from_name("avx-vnni"), -1);
}
