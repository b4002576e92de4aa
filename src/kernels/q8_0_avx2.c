/* Q8_0 quantization on AVX2: a block is four vectors of 8 floats; the scale
 * is worked out per block in scalar code shared with the portable path, the
 * 32 products rounded halves away from zero and packed to int8 in vectors. */
#include <immintrin.h>

#include "internal.h"

/* roundf of each lane as int32: the product less its truncation is exact,
 * and a remainder of at least one half moves the result one away from 0. */
static inline __m256i round_away(__m256 p)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_and_ps(p, sign), _mm256_set1_ps(1.0f));

    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}

static inline void quantize_block(const float *x, uint8_t *out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    __m256 v[4], a[4];
    __m256i special = _mm256_setzero_si256();
    float id;

    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        a[k] = _mm256_andnot_ps(sign, v[k]);
        special = _mm256_or_si256(
            special, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v[k]), expo), expo));
    }
    if (!_mm256_testz_si256(special, special)) {
        tbm_q8_0_nonfinite(out);
        return;
    }
    /* finite values: max is exact and its order does not matter */
    __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    tbm_q8_0_store_d(out, tbm_q8_0_scale(_mm_cvtss_f32(m4), &id));

    __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = round_away(_mm256_mul_ps(v[k], vid));
    /* the packs work per 128-bit half: the permute puts the dwords back in order */
    __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(out + 2), w);
}

void tbm_q8_0_avx2(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++)
        quantize_block(x + b * TBM_Q8_0_ELEMS, out + b * TBM_Q8_0_BYTES);
}
