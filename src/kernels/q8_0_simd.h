/* The Q8_0 loop of the SIMD paths, written once and compiled in each path's
 * own file, under its -m flags: blocks in groups of 8 whose scales are worked
 * out together in one 8-lane vector (a division, a reciprocal and an fp16
 * conversion for 8 blocks, in place of 8 horizontal maxima and 16 scalar
 * divisions), the rest one at a time.
 *
 * That file defines these, then includes this one, which defines q8_0_simd:
 * block_max(x, special)   the lanes' maxima of |x| over the 32 values at x, as
 *                         8 floats whose maximum is the block's; *special set
 *                         when one of the values is a NaN or an infinity
 * store_q(x, id, out)     the 32 q of the block at x with multiplier id at out */
#ifndef TBM_KERNELS_Q8_0_SIMD_H
#define TBM_KERNELS_Q8_0_SIMD_H

#include <immintrin.h>

#include "internal.h"

#define GROUP 8

/* One block, scale and all. */
TBM_INLINE void quantize_one(const float *x, uint8_t *out)
{
    bool special;
    __m256 m8 = block_max(x, &special);
    float id;

    if (special) {
        tbm_q8_0_nonfinite(out);
        return;
    }
    /* finite values: max is exact and its order does not matter */
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    tbm_q8_0_store_d(out, tbm_q8_0_scale(_mm_cvtss_f32(m4), &id));
    store_q(x, id, out + 2);
}

/* Lane b: the largest lane of m[b]. */
TBM_INLINE __m256 max8(const __m256 m[GROUP])
{
    __m256 a01 = _mm256_max_ps(_mm256_unpacklo_ps(m[0], m[1]), _mm256_unpackhi_ps(m[0], m[1]));
    __m256 a23 = _mm256_max_ps(_mm256_unpacklo_ps(m[2], m[3]), _mm256_unpackhi_ps(m[2], m[3]));
    __m256 a45 = _mm256_max_ps(_mm256_unpacklo_ps(m[4], m[5]), _mm256_unpackhi_ps(m[4], m[5]));
    __m256 a67 = _mm256_max_ps(_mm256_unpacklo_ps(m[6], m[7]), _mm256_unpackhi_ps(m[6], m[7]));
    /* per 128-bit half: blocks 0-3 (4-7), each the maximum of its half */
    __m256 lo = _mm256_max_ps(_mm256_shuffle_ps(a01, a23, 0x44), _mm256_shuffle_ps(a01, a23, 0xEE));
    __m256 hi = _mm256_max_ps(_mm256_shuffle_ps(a45, a67, 0x44), _mm256_shuffle_ps(a45, a67, 0xEE));
    return _mm256_max_ps(_mm256_permute2f128_ps(lo, hi, 0x20),
                         _mm256_permute2f128_ps(lo, hi, 0x31));
}

/* tbm_q8_0_scale on 8 blocks: F16C rounds to nearest even as
 * tbm_f16_from_bits does (tests/kernels/test_q8_0 checks them against each
 * other), and an infinite 1 / d, or the one of d = 0, becomes 0. */
TBM_INLINE void scales8(__m256 amax, uint16_t d16[GROUP], float id[GROUP])
{
    __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
    __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), d);

    inv = _mm256_and_ps(inv, _mm256_cmp_ps(inv, _mm256_set1_ps(3.40282347e38f), _CMP_LE_OQ));
    _mm256_storeu_ps(id, inv);
    _mm_storeu_si128((__m128i *)d16,
                     _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

TBM_INLINE void q8_0_simd(const float *x, size_t blocks, uint8_t *out)
{
    size_t b = 0;

    for (; b + GROUP <= blocks; b += GROUP) {
        const float *xg = x + b * TBM_Q8_0_ELEMS;
        uint8_t *og = out + b * TBM_Q8_0_BYTES;
        __m256 m[GROUP];
        bool special[GROUP];
        uint16_t d16[GROUP];
        float id[GROUP];

        for (int k = 0; k < GROUP; k++) {
            special[k] = false;
            m[k] = block_max(xg + k * TBM_Q8_0_ELEMS, &special[k]);
        }
        /* a special block's lanes may hold a NaN: its scale is not used */
        scales8(max8(m), d16, id);
        for (int k = 0; k < GROUP; k++) {
            uint8_t *o = og + k * TBM_Q8_0_BYTES;
            if (special[k]) {
                tbm_q8_0_nonfinite(o);
                continue;
            }
            tbm_q8_0_store_d(o, d16[k]);
            store_q(xg + k * TBM_Q8_0_ELEMS, id[k], o + 2);
        }
    }
    for (; b < blocks; b++)
        quantize_one(x + b * TBM_Q8_0_ELEMS, out + b * TBM_Q8_0_BYTES);
}

#endif
