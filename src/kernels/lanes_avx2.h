/* Lane operations of the AVX2 quantizers (kquant_avx2.c, q5_avx2.c): 8 float32 lanes, each
 * one block of the reference's loops. Every operation is the single IEEE operation the
 * reference does (no fused multiply-add: the kernels build with -ffp-contract=off), and each
 * comparison has C's meaning: ordered, except != (true for a NaN, as `if (d)` is). The
 * templates (lanes_simd.h and those that include it) are written on these alone. */
#ifndef TBM_KERNELS_LANES_AVX2_H
#define TBM_KERNELS_LANES_AVX2_H

#include <immintrin.h>

#include "quant_internal.h"

#define LANES 8

typedef __m256 vf;  /* LANES floats */
typedef __m256i vi; /* LANES int32 */
typedef __m256 vm;  /* LANES conditions, all bits of a lane set or clear */

TBM_INLINE vf f_set(float a)
{
    return _mm256_set1_ps(a);
}

TBM_INLINE vf f_load(const float *p)
{
    return _mm256_loadu_ps(p);
}

TBM_INLINE void f_store(float *p, vf a)
{
    _mm256_storeu_ps(p, a);
}

TBM_INLINE vf f_add(vf a, vf b)
{
    return _mm256_add_ps(a, b);
}

TBM_INLINE vf f_sub(vf a, vf b)
{
    return _mm256_sub_ps(a, b);
}

TBM_INLINE vf f_mul(vf a, vf b)
{
    return _mm256_mul_ps(a, b);
}

TBM_INLINE vf f_div(vf a, vf b)
{
    return _mm256_div_ps(a, b);
}

TBM_INLINE vf f_sqrt(vf a)
{
    return _mm256_sqrt_ps(a);
}

TBM_INLINE vf f_abs(vf a)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}

TBM_INLINE vf f_neg(vf a)
{
    return _mm256_xor_ps(_mm256_set1_ps(-0.0f), a);
}

TBM_INLINE vm f_lt(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_LT_OQ);
}

TBM_INLINE vm f_gt(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_GT_OQ);
}

TBM_INLINE vm f_eq(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_EQ_OQ);
}

TBM_INLINE vm f_ne(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ);
}

/* Lanes holding a NaN or an infinity. */
TBM_INLINE vm f_nonfinite(vf a)
{
    const __m256i expo = _mm256_set1_epi32(0x7F800000);

    return _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a), expo), expo));
}

TBM_INLINE vm m_and(vm a, vm b)
{
    return _mm256_and_ps(a, b);
}

TBM_INLINE vm m_or(vm a, vm b)
{
    return _mm256_or_ps(a, b);
}

TBM_INLINE vm m_none(void)
{
    return _mm256_setzero_ps();
}

/* Bit k set when lane k's condition is. */
TBM_INLINE unsigned m_bits(vm m)
{
    return (unsigned)_mm256_movemask_ps(m);
}

/* Lanes of a where m holds, of b elsewhere. */
TBM_INLINE vf f_sel(vm m, vf a, vf b)
{
    return _mm256_blendv_ps(b, a, m);
}

TBM_INLINE vi i_sel(vm m, vi a, vi b)
{
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), m));
}

TBM_INLINE vi i_set(int32_t a)
{
    return _mm256_set1_epi32(a);
}

TBM_INLINE vi i_add(vi a, vi b)
{
    return _mm256_add_epi32(a, b);
}

TBM_INLINE vi i_clamp(vi a, int32_t lo, int32_t hi)
{
    return _mm256_min_epi32(_mm256_max_epi32(a, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

TBM_INLINE vi i_min(vi a, int32_t b)
{
    return _mm256_min_epi32(a, _mm256_set1_epi32(b));
}

/* The low byte of each lane, sign-extended (an int8_t of it). */
TBM_INLINE vi i_int8(vi a)
{
    return _mm256_srai_epi32(_mm256_slli_epi32(a, 24), 24);
}

TBM_INLINE void i_store(int32_t *p, vi a)
{
    _mm256_storeu_si256((__m256i *)p, a);
}

/* Exact for the small integers it is given. */
TBM_INLINE vf f_from_i(vi a)
{
    return _mm256_cvtepi32_ps(a);
}

/* tbm_quant_nearest of each lane. */
TBM_INLINE vi i_nearest(vf a)
{
    __m256i bits = _mm256_castps_si256(_mm256_add_ps(a, _mm256_set1_ps(12582912.0f)));

    return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFF)),
                            _mm256_set1_epi32(0x400000));
}

/* tbm_quant_trunc of each lane: cvttps2dq gives INT32_MIN where cvttss2si does. */
TBM_INLINE vi i_trunc(vf a)
{
    return _mm256_cvttps_epi32(a);
}

/* The F16 bits of each lane, rounded to nearest even, at p. */
TBM_INLINE void h_store(uint16_t *p, vf a)
{
    _mm_storeu_si128((__m128i *)p,
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#endif
