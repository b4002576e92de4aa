/* F16 rows on AVX-512: vcvtps2ph on 16 lanes, and NaN lanes replaced by 0x7E00 with their sign
 * under a mask (see f16_row_avx2.c). */
#include <immintrin.h>

#include "quant_internal.h"

void tbm_f16_avx512(const float *x, size_t count, uint8_t *out)
{
    size_t i = 0;

    for (; i + 16 <= count; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16),
                                        _mm512_set1_epi32(0x8000));
        __m256i fix = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7E00)));
        __mmask16 isnan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        _mm256_storeu_si256((__m256i *)(out + 2 * i), _mm256_mask_blend_epi16(isnan, h, fix));
    }
    tbm_f16_scalar(x + i, count - i, out + 2 * i);
}
