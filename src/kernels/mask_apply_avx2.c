/* Masking in place on AVX2: per-lane masks built from the bits, one test per
 * vector for a pruned lane with a set bit, and a store only when there is. */
#include <immintrin.h>

#include "internal.h"

/* ANDs the vector at p with keep when some lane outside keep has a bit
 * set; returns whether one has. */
TBM_INLINE bool clear_vector(uint8_t *p, __m256i keep)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)p);

    if (_mm256_testc_si256(keep, x))
        return false;
    _mm256_storeu_si256((__m256i *)p, _mm256_and_si256(x, keep));
    return true;
}

TBM_INLINE bool clear64(size_t es, uint8_t *w, uint64_t bits)
{
    const __m256i sel16 = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 1 << 8, 1 << 9, 1 << 10,
                                            1 << 11, 1 << 12, 1 << 13, 1 << 14, (short)(1 << 15));
    const __m256i sel32 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i sel64 = _mm256_setr_epi64x(1, 2, 4, 8);
    bool changed = false;
    __m256i k;

    switch (es) {
    case 2:
        for (unsigned v = 0; v < 4; v++) {
            k = _mm256_and_si256(_mm256_set1_epi16((short)(bits >> (16 * v))), sel16);
            changed |= clear_vector(w + 32 * v, _mm256_cmpeq_epi16(k, sel16));
        }
        return changed;
    case 4:
        for (unsigned v = 0; v < 8; v++) {
            k = _mm256_and_si256(_mm256_set1_epi32((int)(bits >> (8 * v))), sel32);
            changed |= clear_vector(w + 32 * v, _mm256_cmpeq_epi32(k, sel32));
        }
        return changed;
    }
    for (unsigned v = 0; v < 16; v++) {
        k = _mm256_and_si256(_mm256_set1_epi64x((long long)(bits >> (4 * v))), sel64);
        changed |= clear_vector(w + 32 * v, _mm256_cmpeq_epi64(k, sel64));
    }
    return changed;
}

#include "mask_apply_simd.h"

bool tbm_mask_apply_avx2(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                         uint64_t first, size_t count)
{
    return mask_apply_simd(prec, weights, mask, m, first, count);
}
