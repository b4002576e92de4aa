/* Dense expansion on AVX-512: 16 elements per vector, the mask applied as an
 * opmask to the conversion. */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

#define LANES 16

/* Bit i set when element i is kept. */
typedef __mmask16 keep_t;

/* Loads that stay unmasked: GCC would fold a load into the zero-masking
 * operation after it, and masked loads streaming from memory ran at half the
 * speed of plain ones on AMD Zen 5 (bench_expand). The empty asm makes the
 * loaded value opaque, so the load cannot be folded. */
TBM_INLINE __m512i load512(const uint8_t *w)
{
    __m512i v = _mm512_loadu_si512(w);

    __asm__("" : "+v"(v));
    return v;
}

TBM_INLINE __m256i load256(const uint8_t *w)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)w);

    __asm__("" : "+v"(v));
    return v;
}

/* float32 of the 16 elements at w whose bit is set in k, +0.0 for the
 * others. */
TBM_INLINE __m512 convert16(enum tbm_precision prec, const uint8_t *w, keep_t k)
{
    __m256 lo, hi;

    switch (prec) {
    case TBM_FP16:
        return _mm512_maskz_cvtph_ps(k, load256(w));
    case TBM_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_maskz_cvtepu16_epi32(k, load256(w)), 16));
    case TBM_FP64:
        lo = _mm512_maskz_cvtpd_ps((__mmask8)k, _mm512_castsi512_pd(load512(w)));
        hi = _mm512_maskz_cvtpd_ps((__mmask8)(k >> 8), _mm512_castsi512_pd(load512(w + 64)));
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    case TBM_FP32:
        break;
    }
    return _mm512_maskz_mov_ps(k, _mm512_castsi512_ps(load512(w)));
}

/* The same for a last vector of count (< 16) elements: masked loads read
 * only the selected ones, and zeroed lanes convert to +0.0. */
TBM_INLINE __m512 convert_short(enum tbm_precision prec, const uint8_t *w, keep_t k)
{
    __m256 lo, hi;

    switch (prec) {
    case TBM_FP16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, w));
    case TBM_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, w)), 16));
    case TBM_FP64:
        lo = _mm512_cvtpd_ps(_mm512_maskz_loadu_pd((__mmask8)k, w));
        hi = _mm512_cvtpd_ps(_mm512_maskz_loadu_pd((__mmask8)(k >> 8), w + 64));
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    case TBM_FP32:
        break;
    }
    return _mm512_maskz_loadu_ps(k, w);
}

/* Opmask of the 16 elements whose bits start at byte p of the mask, for
 * m = 1, 2, 4, 8, 16 or 32 and a vector that starts a group (or, for m = 32,
 * the second half of one). Built in vector registers, which is faster than
 * moving bits from general registers into opmasks; reads only the vector's
 * own mask bytes. */
TBM_INLINE keep_t keep_block(uint32_t m, const uint8_t *p)
{
    /* m = 2: lane l takes byte l / 2 (of the 8 repeated in each 128-bit
     * lane) and tests bit l % 2 of it */
    const __m512i byte2 =
        _mm512_setr_epi32((int)0x80808000, (int)0x80808000, (int)0x80808001, (int)0x80808001,
                          (int)0x80808002, (int)0x80808002, (int)0x80808003, (int)0x80808003,
                          (int)0x80808004, (int)0x80808004, (int)0x80808005, (int)0x80808005,
                          (int)0x80808006, (int)0x80808006, (int)0x80808007, (int)0x80808007);
    const __m512i bit2 = _mm512_setr_epi32(1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2);
    /* m = 4: lane l tests bit l % 4 of byte l / 4 */
    const __m512i bit4 =
        _mm512_setr_epi32(1, 2, 4, 8, 1 << 8, 2 << 8, 4 << 8, 8 << 8, 1 << 16, 2 << 16, 4 << 16,
                          8 << 16, 1 << 24, 2 << 24, 4 << 24, 8 << 24);
    /* m >= 8: the 2 bytes are the 16 elements' bits in order */
    const __m512i bit16 = _mm512_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128, 1 << 8, 1 << 9, 1 << 10,
                                            1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15);
    uint32_t w32;
    uint16_t w16;

    switch (m) {
    case 1:
        return _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)),
                                      _mm512_set1_epi32(1));
    case 2:
        return _mm512_test_epi32_mask(
            _mm512_shuffle_epi8(_mm512_set1_epi64((long long)tbm_load64(p)), byte2), bit2);
    case 4:
        memcpy(&w32, p, sizeof w32);
        return _mm512_test_epi32_mask(_mm512_set1_epi32((int)w32), bit4);
    }
    memcpy(&w16, p, sizeof w16);
    return _mm512_test_epi32_mask(_mm512_set1_epi16((short)w16), bit16);
}

TBM_INLINE keep_t keep_bits(uint32_t bits)
{
    return (keep_t)bits;
}

TBM_INLINE void store_kept(enum tbm_precision prec, const uint8_t *w, keep_t k, float *out)
{
    _mm512_storeu_ps(out, convert16(prec, w, k));
}

TBM_INLINE void store_all(enum tbm_precision prec, const uint8_t *w, float *out)
{
    _mm512_storeu_ps(out, convert16(prec, w, 0xFFFF));
}

TBM_INLINE void store_short(enum tbm_precision prec, const uint8_t *w, uint32_t bits, size_t count,
                            float *out)
{
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << count) - 1),
                          convert_short(prec, w, (keep_t)bits));
}

#include "expand_simd.h"

void tbm_expand_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out)
{
    expand_simd(prec, weights, mask, m, first, count, out);
}
