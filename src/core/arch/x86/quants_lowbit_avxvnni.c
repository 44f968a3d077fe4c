/* quants_lowbit_avxvnni.c - level OMNI_CPU_AVXVNNI's low-bit dots:
 * quants_lowbit_avx2.c compiled a second time with AVX-VNNI on (its
 * #ifdef __AVXVNNI__ forms), its one exported function renamed. */
#if defined(__x86_64__)
#pragma GCC target("avxvnni")
#define omni_x86_register_lowbit_avx2 omni_x86_register_lowbit_avxvnni
#include "quants_lowbit_avx2.c"
#endif
