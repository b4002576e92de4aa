/* Lane operations of the AVX-512 quantizers (kquant_avx512.c, q5_avx512.c): 16 float32 lanes,
 * conditions in mask registers; the same meanings as lanes_avx2.h, which documents them. */
#ifndef TBM_KERNELS_LANES_AVX512_H
#define TBM_KERNELS_LANES_AVX512_H

#include <immintrin.h>

#include "quant_internal.h"

#define LANES 16

typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vm;

TBM_INLINE vf f_set(float a)
{
    return _mm512_set1_ps(a);
}

TBM_INLINE vf f_load(const float *p)
{
    return _mm512_loadu_ps(p);
}

TBM_INLINE void f_store(float *p, vf a)
{
    _mm512_storeu_ps(p, a);
}

TBM_INLINE vf f_add(vf a, vf b)
{
    return _mm512_add_ps(a, b);
}

TBM_INLINE vf f_sub(vf a, vf b)
{
    return _mm512_sub_ps(a, b);
}

TBM_INLINE vf f_mul(vf a, vf b)
{
    return _mm512_mul_ps(a, b);
}

TBM_INLINE vf f_div(vf a, vf b)
{
    return _mm512_div_ps(a, b);
}

TBM_INLINE vf f_sqrt(vf a)
{
    return _mm512_sqrt_ps(a);
}

TBM_INLINE vf f_abs(vf a)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
}

TBM_INLINE vf f_neg(vf a)
{
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000)));
}

TBM_INLINE vm f_lt(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ);
}

TBM_INLINE vm f_gt(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ);
}

TBM_INLINE vm f_eq(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ);
}

TBM_INLINE vm f_ne(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ);
}

TBM_INLINE vm f_nonfinite(vf a)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);

    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), expo), expo);
}

TBM_INLINE vm m_and(vm a, vm b)
{
    return (vm)(a & b);
}

TBM_INLINE vm m_or(vm a, vm b)
{
    return (vm)(a | b);
}

TBM_INLINE vm m_none(void)
{
    return 0;
}

TBM_INLINE unsigned m_bits(vm m)
{
    return m;
}

TBM_INLINE vf f_sel(vm m, vf a, vf b)
{
    return _mm512_mask_blend_ps(m, b, a);
}

TBM_INLINE vi i_sel(vm m, vi a, vi b)
{
    return _mm512_mask_blend_epi32(m, b, a);
}

TBM_INLINE vi i_set(int32_t a)
{
    return _mm512_set1_epi32(a);
}

TBM_INLINE vi i_add(vi a, vi b)
{
    return _mm512_add_epi32(a, b);
}

TBM_INLINE vi i_clamp(vi a, int32_t lo, int32_t hi)
{
    return _mm512_min_epi32(_mm512_max_epi32(a, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}

TBM_INLINE vi i_min(vi a, int32_t b)
{
    return _mm512_min_epi32(a, _mm512_set1_epi32(b));
}

TBM_INLINE vi i_int8(vi a)
{
    return _mm512_srai_epi32(_mm512_slli_epi32(a, 24), 24);
}

TBM_INLINE void i_store(int32_t *p, vi a)
{
    _mm512_storeu_si512(p, a);
}

TBM_INLINE vf f_from_i(vi a)
{
    return _mm512_cvtepi32_ps(a);
}

TBM_INLINE vi i_nearest(vf a)
{
    __m512i bits = _mm512_castps_si512(_mm512_add_ps(a, _mm512_set1_ps(12582912.0f)));

    return _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFF)),
                            _mm512_set1_epi32(0x400000));
}

/* vcvttps2dq gives INT32_MIN (the "integer indefinite") where cvttss2si does. */
TBM_INLINE vi i_trunc(vf a)
{
    return _mm512_cvttps_epi32(a);
}

TBM_INLINE void h_store(uint16_t *p, vf a)
{
    _mm256_storeu_si256((__m256i *)p,
                        _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#endif
