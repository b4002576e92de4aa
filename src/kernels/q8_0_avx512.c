/* Q8_0 quantization on AVX-512: a block is two vectors of 16 floats, rounded
 * halves away from zero with a masked add and narrowed to int8 by vpmovdb;
 * the scales of 8 blocks at a time in one vector (q8_0_simd.h). */
#include <immintrin.h>

#include "internal.h"

/* roundf of each lane as int32, as in q8_0_avx2.c. */
TBM_INLINE __m512i round_away(__m512 p)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000);
    __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 frac = _mm512_abs_ps(_mm512_sub_ps(p, t));
    __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(p), sign),
                                                     _mm512_set1_epi32(0x3F800000)));

    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
}

/* The 32 q of the block at x, multiplied by id, at out. */
TBM_INLINE void store_q(const float *x, float id, uint8_t *out)
{
    __m512 vid = _mm512_set1_ps(id);

    _mm_storeu_si128((__m128i *)out,
                     _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(_mm512_loadu_ps(x), vid))));
    _mm_storeu_si128((__m128i *)(out + 16),
                     _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(_mm512_loadu_ps(x + 16), vid))));
}

/* Lane maxima of |x| over the block, in 8 lanes; *special when it holds a
 * NaN or an infinity. */
TBM_INLINE __m256 block_max(const float *x, bool *special)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);

    *special =
        (_mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v0), expo), expo) |
         _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v1), expo), expo)) != 0;
    __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    return _mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1));
}

#include "q8_0_simd.h"

void tbm_q8_0_avx512(const float *x, size_t blocks, uint8_t *out)
{
    q8_0_simd(x, blocks, out);
}
