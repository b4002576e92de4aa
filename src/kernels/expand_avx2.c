/* Dense expansion on AVX2 + F16C: 8 elements per vector, the mask applied by
 * ANDing each converted vector with per-lane masks built from the bits. */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

#define LANES 8

/* All-ones in the lanes of kept elements. */
typedef __m256 keep_t;

/* float32 of the 8 elements at w. */
TBM_INLINE __m256 convert8(enum tbm_precision prec, const uint8_t *w)
{
    __m128 lo, hi;

    switch (prec) {
    case TBM_FP16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
    case TBM_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w)), 16));
    case TBM_FP64:
        lo = _mm256_cvtpd_ps(_mm256_loadu_pd((const double *)w));
        hi = _mm256_cvtpd_ps(_mm256_loadu_pd((const double *)(w + 32)));
        return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    case TBM_FP32:
        break;
    }
    return _mm256_loadu_ps((const float *)w);
}

/* All-ones in lane i when bit i of bits is set (bits above 7 are ignored). */
TBM_INLINE keep_t keep_bits(uint32_t bits)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);

    return _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), sel), sel));
}

/* Lane masks of the 8 elements whose bits start at byte p of the mask, for
 * m = 1, 2, 4, 8, 16 or 32 and a vector that starts a group (or a later
 * byte of one). Reads only the vector's own mask bytes. */
TBM_INLINE keep_t keep_block(uint32_t m, const uint8_t *p)
{
    /* lane l tests bit l % m of byte l / m, or bit l for m >= 8 */
    const __m256i bit2 =
        _mm256_setr_epi32(1, 2, 1 << 8, 2 << 8, 1 << 16, 2 << 16, 1 << 24, 2 << 24);
    const __m256i bit4 = _mm256_setr_epi32(1, 2, 4, 8, 1 << 8, 2 << 8, 4 << 8, 8 << 8);
    const __m256i bit8 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i v, sel;
    uint32_t w32;
    uint16_t w16;

    switch (m) {
    case 1:
        v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        sel = _mm256_set1_epi32(1);
        break;
    case 2:
        memcpy(&w32, p, sizeof w32);
        v = _mm256_set1_epi32((int)w32);
        sel = bit2;
        break;
    case 4:
        memcpy(&w16, p, sizeof w16);
        v = _mm256_set1_epi16((short)w16);
        sel = bit4;
        break;
    default:
        v = _mm256_set1_epi8((char)p[0]);
        sel = bit8;
        break;
    }
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(v, sel), sel));
}

TBM_INLINE void store_kept(enum tbm_precision prec, const uint8_t *w, keep_t k, float *out)
{
    _mm256_storeu_ps(out, _mm256_and_ps(convert8(prec, w), k));
}

TBM_INLINE void store_all(enum tbm_precision prec, const uint8_t *w, float *out)
{
    _mm256_storeu_ps(out, convert8(prec, w));
}

/* Through a zeroed copy, as AVX2 has no masked 16-bit loads. */
TBM_INLINE void store_short(enum tbm_precision prec, const uint8_t *w, uint32_t bits, size_t count,
                            float *out)
{
    uint8_t in[64] = {0};
    float res[8];

    memcpy(in, w, count * tbm_element_size(prec));
    store_kept(prec, in, keep_bits(bits), res);
    memcpy(out, res, count * sizeof *out);
}

#include "expand_simd.h"

void tbm_expand_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                     uint64_t first, size_t count, float *out)
{
    expand_simd(prec, weights, mask, m, first, count, out);
}
