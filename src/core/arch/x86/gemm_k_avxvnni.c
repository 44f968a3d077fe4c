/* gemm_k_avxvnni.c - level OMNI_CPU_AVXVNNI's K-quant GEMM: gemm_k_avx2.c
 * compiled a second time with AVX-VNNI on (its #ifdef __AVXVNNI__ forms),
 * every function it exports renamed here: the level's entry point is
 * omni_x86_gemm_k_avxvnni (x86.h); the level-free helpers get twin names
 * nobody calls. A function newly exported from gemm_k_avx2.c needs a line
 * here (or the link sees it twice). */
#if defined(__x86_64__)
#pragma GCC target("avxvnni")
#define omni_x86_gemm_k_avx2 omni_x86_gemm_k_avxvnni
#define omni_x86_gemm_k_takes omni_x86_gemm_k_takes_avxvnni_twin
#define omni_x86_gemm_k_pack omni_x86_gemm_k_pack_avxvnni_twin
#define omni_x86_gemm_k_run omni_x86_gemm_k_run_avxvnni_twin
#include "gemm_k_avx2.c"
#endif
