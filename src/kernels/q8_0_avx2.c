/* Q8_0 quantization on AVX2: a block is four vectors of 8 floats, its 32
 * products rounded halves away from zero and packed to int8; the scales of 8
 * blocks at a time in one vector (q8_0_simd.h). */
#include <immintrin.h>

#include "internal.h"

/* roundf of each lane as int32: the product less its truncation is exact,
 * and a remainder of at least one half moves the result one away from 0. */
TBM_INLINE __m256i round_away(__m256 p)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_and_ps(p, sign), _mm256_set1_ps(1.0f));

    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}

/* The 32 q of the block at x, multiplied by id, at out. */
TBM_INLINE void store_q(const float *x, float id, uint8_t *out)
{
    __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];

    for (int k = 0; k < 4; k++)
        q[k] = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid));
    /* the packs work per 128-bit half: the permute puts the dwords back in order */
    __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)out, w);
}

/* Lane maxima of |x| over the block; *special when it holds a NaN or an
 * infinity. */
TBM_INLINE __m256 block_max(const float *x, bool *special)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    __m256i sp = _mm256_setzero_si256();
    __m256 a[4];

    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_loadu_ps(x + 8 * k);
        a[k] = _mm256_andnot_ps(sign, v);
        sp = _mm256_or_si256(
            sp, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expo), expo));
    }
    *special = !_mm256_testz_si256(sp, sp);
    return _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
}

#include "q8_0_simd.h"

void tbm_q8_0_avx2(const float *x, size_t blocks, uint8_t *out)
{
    q8_0_simd(x, blocks, out);
}
