/* gemm_avxvnni.c - level OMNI_CPU_AVXVNNI's Q8_0-family GEMM: gemm_avx2.c
 * compiled a second time with AVX-VNNI on (its #ifdef __AVXVNNI__ forms:
 * VEX vpdpbusd), every function it exports renamed here. The level's own
 * entry points are the _avxvnni names declared in x86.h; the shared prep
 * gets a twin name nobody calls. A function newly exported from
 * gemm_avx2.c needs a line here (or the link sees it twice). */
#if defined(__x86_64__)
#pragma GCC target("avxvnni")
#define omni_x86_gemm_q8_0_offset_avx2 omni_x86_gemm_q8_0_offset_avxvnni
#define omni_x86_gemm_q8_0_avx2_scratch omni_x86_gemm_q8_0_avxvnni_scratch
#define omni_x86_gemm_act8_min_avx2 omni_x86_gemm_act8_min_avxvnni
#define omni_x86_gemm_q8_0_avx2 omni_x86_gemm_q8_0_avxvnni
#define omni_x86_gemm_q8_0_prep omni_x86_gemm_q8_0_prep_avxvnni_twin
#include "gemm_avx2.c"
#endif
