/* membw.h - the machine's streaming read bandwidth as decode sees it: a
 * buffer too big for every cache read once, in one contiguous slice per
 * thread of a pool (decode's row split), by one of five loops.
 *
 *   void *buf = omni_membw_alloc(1 << 30);             // filled, real pages
 *   double b = omni_membw_pass(tp, buf, 1 << 30, OMNI_MEMBW_VEC);   // bytes/s
 *   omni_membw_free(buf);
 *
 * The modes: VEC sums 32-byte vectors into 8 accumulators (the hardware
 * prefetchers alone); VEC_PF adds a software prefetch 8 KB ahead (as the
 * decode kernels prefetch rows ahead); STREAMS reads a thread's slice as
 * four streams side by side, each prefetched 2 KB ahead (as the AVX-512
 * decode dots do); STREAMS_512 the same in 64-byte loads at the AVX512
 * levels (STREAMS below them); SCALAR is the plainest loop, 64-bit words
 * into 4 accumulators, not vectorized: the reference the others must not
 * out-read by much. The vector loops run in 32-byte loads from level AVX2
 * (omni_cpu_level), in 16-byte ones below. Thread safety: one pass at a
 * time per pool. */
#ifndef OMNI_CORE_MEMBW_H
#define OMNI_CORE_MEMBW_H

#include <stddef.h>

struct tpool;

enum omni_membw_mode {
    OMNI_MEMBW_VEC,
    OMNI_MEMBW_VEC_PF,
    OMNI_MEMBW_STREAMS,
    OMNI_MEMBW_SCALAR,
    OMNI_MEMBW_STREAMS_512,
    OMNI_MEMBW_MODES
};

/* A 64-byte-aligned buffer of bytes, every page written (not the shared zero
 * page); NULL when out of memory. */
void *omni_membw_alloc(size_t bytes);
void omni_membw_free(void *buf);
/* One read of buf[0..bytes) on every thread of tp (NULL: the caller alone),
 * in even slices; bytes/s of the bytes actually read (slices are whole
 * 256-byte steps), 0 on bad arguments. */
double omni_membw_pass(struct tpool *tp, const void *buf, size_t bytes, enum omni_membw_mode mode);
/* Name of a mode ("vec", "vec_pf", "vec_4s", "scalar", "vec_4s_512"). */
const char *omni_membw_mode_name(enum omni_membw_mode mode);

#endif
