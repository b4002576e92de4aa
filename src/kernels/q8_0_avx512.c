/* Q8_0 quantization on AVX-512: a block is two vectors of 16 floats, rounded
 * halves away from zero with a masked add and narrowed to int8 by vpmovdb;
 * the scale is worked out per block in scalar code shared with the portable
 * path. */
#include <immintrin.h>

#include "internal.h"

/* roundf of each lane as int32, as in q8_0_avx2.c. */
static inline __m512i round_away(__m512 p)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000);
    __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 frac = _mm512_abs_ps(_mm512_sub_ps(p, t));
    __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(p), sign),
                                                     _mm512_set1_epi32(0x3F800000)));

    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
}

static inline void quantize_block(const float *x, uint8_t *out)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float id;

    if (_mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v0), expo), expo) |
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v1), expo), expo)) {
        tbm_q8_0_nonfinite(out);
        return;
    }
    /* finite values: max is exact and its order does not matter */
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    tbm_q8_0_store_d(out, tbm_q8_0_scale(amax, &id));

    __m512 vid = _mm512_set1_ps(id);
    _mm_storeu_si128((__m128i *)(out + 2),
                     _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(v0, vid))));
    _mm_storeu_si128((__m128i *)(out + 18),
                     _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(v1, vid))));
}

void tbm_q8_0_avx512(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++)
        quantize_block(x + b * TBM_Q8_0_ELEMS, out + b * TBM_Q8_0_BYTES);
}
