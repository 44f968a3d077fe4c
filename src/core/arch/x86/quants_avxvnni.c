/* quants_avxvnni.c - level OMNI_CPU_AVXVNNI's dot kernels: quants_avx2.c
 * compiled a second time with AVX-VNNI on, its one exported function
 * renamed. The kernels there take VEX vpdpbusd under #ifdef __AVXVNNI__
 * (one source, no copy to drift); the integer sums are the AVX2 forms' exact
 * ones, so this level gives the AVX2 level's bits. */
#if defined(__x86_64__)
#pragma GCC target("avxvnni")
#define omni_x86_register_avx2 omni_x86_register_avxvnni
#include "quants_avx2.c"
#endif
