/* F16 rows on AVX2 + F16C: vcvtps2ph rounds to nearest even as the portable path does, and a
 * NaN lane, whose payload it would keep, is replaced by 0x7E00 with its sign. */
#include <immintrin.h>

#include "quant_internal.h"

void tbm_f16_avx2(const float *x, size_t count, uint8_t *out)
{
    size_t i = 0;

    for (; i + 8 <= count; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16),
                                        _mm256_set1_epi32(0x8000));
        __m256i nan32 = _mm256_or_si256(sign, _mm256_set1_epi32(0x7E00));
        __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        /* both to 16-bit lanes: the values fit unsigned, the conditions are 0 or -1 */
        __m128i fix =
            _mm_packus_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
        __m128i m16 =
            _mm_packs_epi32(_mm256_castsi256_si128(isnan), _mm256_extracti128_si256(isnan, 1));
        _mm_storeu_si128((__m128i *)(out + 2 * i), _mm_blendv_epi8(h, fix, m16));
    }
    tbm_f16_scalar(x + i, count - i, out + 2 * i);
}
