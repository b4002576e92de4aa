/* A 16-lane set of the lane operations of src/kernels/lanes_avx2.h made of two AVX2 vectors,
 * for test_lanes16: the quantizer templates compiled with LANES 16, as the AVX-512 path
 * compiles them, run on a CPU without AVX-512 (each operation is lanes_avx2.h's on each half). */
#ifndef TBM_TESTS_LANES_PAIR_H
#define TBM_TESTS_LANES_PAIR_H

#include <immintrin.h>

#include "quant_internal.h"

#define LANES 16

typedef struct {
    __m256 h[2];
} vf;
typedef struct {
    __m256i h[2];
} vi;
typedef struct {
    __m256 h[2];
} vm;

TBM_INLINE vf f_set(float a)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_set1_ps(a);
    return r;
}

TBM_INLINE vf f_load(const float *p)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_loadu_ps(p + 8 * k);
    return r;
}

TBM_INLINE void f_store(float *p, vf a)
{
    for (int k = 0; k < 2; k++)
        _mm256_storeu_ps(p + 8 * k, a.h[k]);
}

TBM_INLINE vf f_add(vf a, vf b)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_add_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vf f_sub(vf a, vf b)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_sub_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vf f_mul(vf a, vf b)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_mul_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vf f_div(vf a, vf b)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_div_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vf f_sqrt(vf a)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_sqrt_ps(a.h[k]);
    return r;
}

TBM_INLINE vf f_abs(vf a)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.h[k]);
    return r;
}

TBM_INLINE vf f_neg(vf a)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_xor_ps(_mm256_set1_ps(-0.0f), a.h[k]);
    return r;
}

TBM_INLINE vm f_lt(vf a, vf b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cmp_ps(a.h[k], b.h[k], _CMP_LT_OQ);
    return r;
}

TBM_INLINE vm f_gt(vf a, vf b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cmp_ps(a.h[k], b.h[k], _CMP_GT_OQ);
    return r;
}

TBM_INLINE vm f_eq(vf a, vf b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cmp_ps(a.h[k], b.h[k], _CMP_EQ_OQ);
    return r;
}

TBM_INLINE vm f_ne(vf a, vf b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cmp_ps(a.h[k], b.h[k], _CMP_NEQ_UQ);
    return r;
}

TBM_INLINE vm f_nonfinite(vf a)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
            _mm256_and_si256(_mm256_castps_si256(a.h[k]), _mm256_set1_epi32(0x7F800000)),
            _mm256_set1_epi32(0x7F800000)));
    return r;
}

TBM_INLINE vm m_and(vm a, vm b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_and_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vm m_or(vm a, vm b)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_or_ps(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vm m_none(void)
{
    vm r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_setzero_ps();
    return r;
}

TBM_INLINE unsigned m_bits(vm m)
{
    return (unsigned)(_mm256_movemask_ps(m.h[0]) | _mm256_movemask_ps(m.h[1]) << 8);
}

TBM_INLINE vf f_sel(vm m, vf a, vf b)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_blendv_ps(b.h[k], a.h[k], m.h[k]);
    return r;
}

TBM_INLINE vi i_sel(vm m, vi a, vi b)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_castps_si256(
            _mm256_blendv_ps(_mm256_castsi256_ps(b.h[k]), _mm256_castsi256_ps(a.h[k]), m.h[k]));
    return r;
}

TBM_INLINE vi i_set(int32_t a)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_set1_epi32(a);
    return r;
}

TBM_INLINE vi i_add(vi a, vi b)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_add_epi32(a.h[k], b.h[k]);
    return r;
}

TBM_INLINE vi i_clamp(vi a, int32_t lo, int32_t hi)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_min_epi32(_mm256_max_epi32(a.h[k], _mm256_set1_epi32(lo)),
                                  _mm256_set1_epi32(hi));
    return r;
}

TBM_INLINE vi i_min(vi a, int32_t b)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_min_epi32(a.h[k], _mm256_set1_epi32(b));
    return r;
}

TBM_INLINE vi i_int8(vi a)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_srai_epi32(_mm256_slli_epi32(a.h[k], 24), 24);
    return r;
}

TBM_INLINE void i_store(int32_t *p, vi a)
{
    for (int k = 0; k < 2; k++)
        _mm256_storeu_si256((__m256i *)(p + 8 * k), a.h[k]);
}

TBM_INLINE vf f_from_i(vi a)
{
    vf r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cvtepi32_ps(a.h[k]);
    return r;
}

TBM_INLINE vi i_nearest(vf a)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(_mm256_add_ps(
                                                       a.h[k], _mm256_set1_ps(12582912.0f))),
                                                   _mm256_set1_epi32(0x7FFFFF)),
                                  _mm256_set1_epi32(0x400000));
    return r;
}

TBM_INLINE vi i_trunc(vf a)
{
    vi r;

    for (int k = 0; k < 2; k++)
        r.h[k] = _mm256_cvttps_epi32(a.h[k]);
    return r;
}

TBM_INLINE void h_store(uint16_t *p, vf a)
{
    for (int k = 0; k < 2; k++)
        _mm_storeu_si128((__m128i *)(p + 8 * k),
                         _mm256_cvtps_ph(a.h[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#endif
