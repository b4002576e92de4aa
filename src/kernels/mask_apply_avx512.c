/* Masking in place on AVX-512: the pruned lanes that hold a set bit found
 * with one masked test per vector, and only those lanes stored. */
#include <immintrin.h>

#include "internal.h"

TBM_INLINE bool clear64(size_t es, uint8_t *w, uint64_t bits)
{
    const __m512i zero = _mm512_setzero_si512();
    uint64_t hit = 0;

    switch (es) {
    case 2:
        for (unsigned v = 0; v < 2; v++) {
            __m512i x = _mm512_loadu_si512(w + 64 * v);
            __mmask32 z = _mm512_mask_test_epi16_mask((__mmask32) ~(bits >> (32 * v)), x, x);

            _mm512_mask_storeu_epi16(w + 64 * v, z, zero);
            hit |= z;
        }
        return hit != 0;
    case 4:
        for (unsigned v = 0; v < 4; v++) {
            __m512i x = _mm512_loadu_si512(w + 64 * v);
            __mmask16 z = _mm512_mask_test_epi32_mask((__mmask16) ~(bits >> (16 * v)), x, x);

            _mm512_mask_storeu_epi32(w + 64 * v, z, zero);
            hit |= z;
        }
        return hit != 0;
    }
    for (unsigned v = 0; v < 8; v++) {
        __m512i x = _mm512_loadu_si512(w + 64 * v);
        __mmask8 z = _mm512_mask_test_epi64_mask((__mmask8) ~(bits >> (8 * v)), x, x);

        _mm512_mask_storeu_epi64(w + 64 * v, z, zero);
        hit |= z;
    }
    return hit != 0;
}

#include "mask_apply_simd.h"

bool tbm_mask_apply_avx512(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                           uint64_t first, size_t count)
{
    return mask_apply_simd(prec, weights, mask, m, first, count);
}
