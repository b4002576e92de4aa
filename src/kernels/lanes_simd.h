/* What every lane-wise quantizer template needs besides the lane operations (lanes_avx2.h or
 * lanes_avx512.h, included first): putting blocks into lanes. A lane works on one block (a
 * sub-block, for the k-quants) and does the reference's sequence of operations on it, so sums
 * keep their order and every lane's result is the portable path's; the values of LANES blocks
 * are first transposed so that element l of every block sits in row l, one vector. */
#ifndef TBM_KERNELS_LANES_SIMD_H
#define TBM_KERNELS_LANES_SIMD_H

#include <immintrin.h>

/* Rows l = 0..n-1 (n a multiple of 8) of xt, LANES floats each, get at lanes off..off+7 the
 * element l of the blocks at rows[0..7]: an 8 x 8 transpose for every 8 elements. */
TBM_INLINE void lanes_put8(const float *const rows[8], int n, float *xt, int off)
{
    for (int c = 0; c < n; c += 8) {
        __m256 r0 = _mm256_loadu_ps(rows[0] + c), r1 = _mm256_loadu_ps(rows[1] + c);
        __m256 r2 = _mm256_loadu_ps(rows[2] + c), r3 = _mm256_loadu_ps(rows[3] + c);
        __m256 r4 = _mm256_loadu_ps(rows[4] + c), r5 = _mm256_loadu_ps(rows[5] + c);
        __m256 r6 = _mm256_loadu_ps(rows[6] + c), r7 = _mm256_loadu_ps(rows[7] + c);
        /* pairs of rows interleaved, then quads, then the 128-bit halves swapped into place */
        __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1);
        __m256 a2 = _mm256_unpacklo_ps(r2, r3), a3 = _mm256_unpackhi_ps(r2, r3);
        __m256 a4 = _mm256_unpacklo_ps(r4, r5), a5 = _mm256_unpackhi_ps(r4, r5);
        __m256 a6 = _mm256_unpacklo_ps(r6, r7), a7 = _mm256_unpackhi_ps(r6, r7);
        __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
        __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
        __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
        __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
        float *o = xt + (size_t)c * LANES + off;
        _mm256_storeu_ps(o + 0 * LANES, _mm256_permute2f128_ps(b0, b4, 0x20));
        _mm256_storeu_ps(o + 1 * LANES, _mm256_permute2f128_ps(b1, b5, 0x20));
        _mm256_storeu_ps(o + 2 * LANES, _mm256_permute2f128_ps(b2, b6, 0x20));
        _mm256_storeu_ps(o + 3 * LANES, _mm256_permute2f128_ps(b3, b7, 0x20));
        _mm256_storeu_ps(o + 4 * LANES, _mm256_permute2f128_ps(b0, b4, 0x31));
        _mm256_storeu_ps(o + 5 * LANES, _mm256_permute2f128_ps(b1, b5, 0x31));
        _mm256_storeu_ps(o + 6 * LANES, _mm256_permute2f128_ps(b2, b6, 0x31));
        _mm256_storeu_ps(o + 7 * LANES, _mm256_permute2f128_ps(b3, b7, 0x31));
    }
}

/* The lanes of the n rows of xt holding a NaN or an infinity. */
TBM_INLINE unsigned lanes_nonfinite(const float *xt, int n)
{
    vm bad = m_none();

    for (int l = 0; l < n; l++)
        bad = m_or(bad, f_nonfinite(f_load(xt + (size_t)l * LANES)));
    return m_bits(bad);
}

#endif
