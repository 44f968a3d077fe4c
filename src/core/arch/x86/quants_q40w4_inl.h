/* quants_q40w4_inl.h - the VNNI level's q4_0/q5_0 decode rows, four blocks
 * a 512-bit register (quants_avx512.c includes it twice: Q40W4_VBMI 0 for
 * every AVX-512 VNNI CPU, Q40W4_VBMI 1 under VBMI and BITALG's target for
 * those that have them: Ice Lake, Sapphire Rapids, Zen 4 and later, not
 * Cascade Lake). Defines the level's vec_dot_prep of q4_0 and q5_0:
 * vec_dot_prep_q4_0_vnni / _q5_0_vnni, or _vbmi (and their q40w4_rows,
 * q40w4_prep). No include guard, on purpose. */
#if Q40W4_VBMI
#define Q40W4_ROWS_FN q40w4_rows_vbmi
#define Q40W4_PREP_FN q40w4_prep_vbmi
#define Q40W4_DOT_FN q40w4_dot_vbmi
#define Q40W4_Q4_0_FN vec_dot_prep_q4_0_vbmi
#define Q40W4_Q5_0_FN vec_dot_prep_q5_0_vbmi
#else
#define Q40W4_ROWS_FN q40w4_rows
#define Q40W4_PREP_FN q40w4_prep
#define Q40W4_DOT_FN q40w4_dot
#define Q40W4_Q4_0_FN vec_dot_prep_q4_0_vnni
#define Q40W4_Q5_0_FN vec_dot_prep_q5_0_vnni
#endif

/* y[s] = the dot of q4_0 (five 0) or q5_0 (five 1) row w[s] with the
 * activation, s < S. q5_0's blocks are 22 bytes (scale, 32 bits of 5th
 * bits, quants): its scales and bit words come from two 64-byte loads by two
 * vpermw into one register, the bits of each block's low and high quants
 * go through a mask register into the quants (a masked byte add of 16).
 * Q40W4_VBMI (AVX-512 VBMI and BITALG): the four blocks' quant bytes come
 * from two loads by one two-table byte permute instead of four loads and
 * three inserts, q5_0's scales and bit words by two-table word permutes of
 * the same loads, and each half's 5th bits straight into a mask register
 * by one bit shuffle (no trip through general registers): the same
 * integers and float steps, so the same bits. */
static inline __attribute__((always_inline)) void Q40W4_ROWS_FN(int64_t n, const uint8_t *const *w,
                                                                const struct q40w4_act *g, const void *a,
                                                                const float *prep, const int five, const int S,
                                                                float *out)
{
    const int64_t nb = n / QK8_0, ng = nb / 4;
    const size_t bx = five ? sizeof(block_q5_0) : sizeof(block_q4_0), qo = five ? 6 : 2;
    const block_q8_0 *y = a;
    const __m512i m0f = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
    /* q4_0: the scales of the four blocks at bytes 0, 18, 36, 54: words 0,
     * 9, 18, 27. q5_0: at bytes 0, 22, 44 of the first load (words 0, 11,
     * 22) and 66 (word 21 of the second, at byte 24), the bit words after
     * each (words 1-2, 12-13, 23-24; 22-23 of the second) into words 16-23 */
    const __m512i sidx = five ? _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 23, 22, 24, 23, 13, 12, 2, 1, 21, 21,
                                                 21, 21, 22, 22, 22, 22, 11, 11, 11, 11, 0, 0, 0, 0)
                              : _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27,
                                                 18, 18, 18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
#if !Q40W4_VBMI
    /* the words the second load gives (q5_0's fourth block) */
    const __mmask32 second = (__mmask32)0x00c0f000u;
    /* the four bit words' low halves into bytes 0-7, high halves 8-15 */
    const __m128i hsplit = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
#else
    /* two tables: the group's 64 bytes from its start and the 64 after
     * them, byte k bx + qo + j the quant j of lane k. A row's last group
     * loads only its own bytes past 64 (masked: 8 or 24), so the last row
     * never reads past the tensor; the others load the 64 whole (masked
     * loads that miss the cache cut q4_0's stream on Zen 5 from 65 to 55
     * GB/s at 2 threads, and a second table of the group's last 64 bytes
     * instead, nothing past the group, q5_0's from 63 to 31). q5_0's
     * scales (words 0, 11, 22, 33) into words 0-15 as sidx puts them, and
     * block k's bit words (11k + 1, 11k + 2) into both quad words of lane
     * k, which the bit shuffle reads for the lane's bytes: bits 0-15 for
     * the low quants, 16-31 for the high ones */
    const __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const int b0 = 0x01010101 * (int)qo, b1 = 0x01010101 * (int)(bx + qo), b2 = 0x01010101 * (int)(2 * bx + qo),
              b3 = 0x01010101 * (int)(3 * bx + qo);
    const __m512i qbyte = _mm512_add_epi8(_mm512_broadcast_i32x4(iota), _mm512_set_epi32(b3, b3, b3, b3, b2, b2, b2, b2,
                                                                                      b1, b1, b1, b1, b0, b0, b0, b0));
    const __m512i sidx2 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 33, 33, 33, 33, 22, 22,
                                           22, 22, 11, 11, 11, 11, 0, 0, 0, 0);
    const __m512i bidx = _mm512_set_epi16(0, 0, 35, 34, 0, 0, 35, 34, 0, 0, 24, 23, 0, 0, 24, 23, 0, 0, 13, 12, 0, 0,
                                          13, 12, 0, 0, 2, 1, 0, 0, 2, 1);
    const __mmask64 past64 = _cvtu64_mask64((1ull << (4 * bx - 64)) - 1);
    const __m512i blo = _mm512_broadcast_i32x4(iota), bhi = _mm512_add_epi8(blo, b16);
#endif
    __m512 acc[K_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < ng; i++) {
        const struct q40w4_act *ga = &g[i];
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const uint8_t *p = w[s] + 4 * bx * i;
            stream_prefetch(p, 2);
#if Q40W4_VBMI
            const __m512i t0 = _mm512_loadu_si512((const void *)p);
            const __m512i t1 = i + 1 < ng ? _mm512_loadu_si512((const void *)(p + 64))
                                          : _mm512_maskz_loadu_epi8(past64, (const void *)(p + 64));
            const __m512i q = _mm512_permutex2var_epi8(t0, qbyte, t1);
            __m512i lo = _mm512_and_si512(q, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m0f);
            const __m512i sw = five ? _mm512_permutex2var_epi16(t0, sidx2, t1) : _mm512_permutexvar_epi16(sidx, t0);
            if (five) {
                const __m512i bw = _mm512_permutex2var_epi16(t0, bidx, t1);
                lo = _mm512_mask_add_epi8(lo, _mm512_bitshuffle_epi64_mask(bw, blo), lo, b16);
                hi = _mm512_mask_add_epi8(hi, _mm512_bitshuffle_epi64_mask(bw, bhi), hi, b16);
            }
#else
            __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + qo)));
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + qo + bx)), 1);
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + qo + 2 * bx)), 2);
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + qo + 3 * bx)), 3);
            __m512i sw = _mm512_permutexvar_epi16(sidx, _mm512_loadu_si512((const void *)p));
            __m512i lo = _mm512_and_si512(q, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m0f);
            if (five) {
                sw = _mm512_mask_permutexvar_epi16(sw, second, sidx, _mm512_loadu_si512((const void *)(p + 24)));
                const __m128i h = _mm_shuffle_epi8(_mm512_extracti32x4_epi32(sw, 2), hsplit);
                lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(h)), lo, b16);
                hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64((uint64_t)_mm_extract_epi64(h, 1)), hi, b16);
            }
#endif
            const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(sw));
            __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)ga->off), lo,
                                              _mm512_load_si512((const void *)ga->lo));
            dot = _mm512_dpbusd_epi32(dot, hi, _mm512_load_si512((const void *)ga->hi));
            acc[s] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_load_ps(ga->dy)), _mm512_cvtepi32_ps(dot), acc[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        float t = _mm512_reduce_add_ps(acc[s]);
        for (int64_t i = 4 * ng; i < nb; i++) { /* the last 1-3 blocks one at a time */
            const uint8_t *x = w[s] + i * bx;
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
            const __m256i dot = _mm256_sub_epi32(block_prep_vnni(x, qy, five ? 2 : 1, 1),
                                                 _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(five ? 16 : 8), qy));
            ggml_half hd;
            memcpy(&hd, x, sizeof hd);
            t += h2f(hd) * prep[i] * (float)hsum_epi32_256(dot);
        }
        out[s] = t;
    }
}

static inline __attribute__((always_inline)) void Q40W4_PREP_FN(int64_t n, const void *w, size_t w_row,
                                                                int64_t n_rows, const void *a, const float *prep,
                                                                const int five, float *y)
{
    const struct q40w4_act *g = prep_layout(prep, n);
#define Q40W4_ROWS(ws, S, o) Q40W4_ROWS_FN(n, ws, g, a, prep, five, S, o)
    K_STREAM_ROWS_512(Q40W4_ROWS)
#undef Q40W4_ROWS
}

/* vec_dot_prep: the form from four blocks on (never with its switch,
 * OMNI_X86_Q40_W4 / _Q50_W4, off), dot_prep_vnni a block at a time below */
static inline __attribute__((always_inline)) void Q40W4_DOT_FN(int64_t n, const void *w, size_t w_row,
                                                               int64_t n_rows, const void *a, const float *prep,
                                                               const int five, float *y)
{
    if ((five ? OMNI_X86_Q50_W4 : OMNI_X86_Q40_W4) && n >= 4 * QK8_0) {
        Q40W4_PREP_FN(n, w, w_row, n_rows, a, prep, five, y);
        return;
    }
    DOT_PREP_ROWS_PF(dot_prep_vnni, five ? 2 : 1)
}

static void Q40W4_Q4_0_FN(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a, const float *prep,
                          float *y)
{
    Q40W4_DOT_FN(n, w, w_row, n_rows, a, prep, 0, y);
}

static void Q40W4_Q5_0_FN(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a, const float *prep,
                          float *y)
{
    Q40W4_DOT_FN(n, w, w_row, n_rows, a, prep, 1, y);
}

#undef Q40W4_ROWS_FN
#undef Q40W4_PREP_FN
#undef Q40W4_DOT_FN
#undef Q40W4_Q4_0_FN
#undef Q40W4_Q5_0_FN
