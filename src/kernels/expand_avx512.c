/* Dense expansion on AVX-512: 16 elements per vector, the mask applied as an
 * opmask to the conversion. */
#include <immintrin.h>

#include "internal.h"

#define INLINE static inline __attribute__((always_inline))
/* How far ahead to prefetch the input, in bytes. Streaming from memory, the
 * 2:4 expansion ran at about 3/4 of memcpy's speed without it and at par
 * with it on the AMD Zen 5 it was tuned on (bench_expand). */
#define PREFETCH 4096

/* Prefetches the lines PREFETCH bytes ahead of the bytes input at w. */
INLINE void prefetch_ahead(const uint8_t *w, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)w + PREFETCH + off, _MM_HINT_T0);
}

/* Loads that stay unmasked: GCC would fold a load into the zero-masking
 * operation after it, and masked loads streaming from memory ran at half the
 * speed of plain ones on AMD Zen 5 (bench_expand). The empty asm makes the
 * loaded value opaque, so the load cannot be folded. */
INLINE __m512i load512(const uint8_t *w)
{
    __m512i v = _mm512_loadu_si512(w);

    __asm__("" : "+v"(v));
    return v;
}

INLINE __m256i load256(const uint8_t *w)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)w);

    __asm__("" : "+v"(v));
    return v;
}

/* float32 of the 16 elements at w whose bit is set in k, +0.0 for the
 * others. */
INLINE __m512 convert16(enum tbm_precision prec, const uint8_t *w, __mmask16 k)
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
INLINE __m512 convert_short(enum tbm_precision prec, const uint8_t *w, __mmask16 k)
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

/* Expands count elements whose bits come from s, 16 at a time. */
INLINE void expand_stream(enum tbm_precision prec, const uint8_t *w, struct tbm_mask_stream *s,
                          size_t count, float *out)
{
    size_t size = tbm_element_size(prec);
    __mmask16 k;

    for (; count >= 16; count -= 16, w += 16 * size, out += 16) {
        prefetch_ahead(w, 16 * size);
        _mm512_storeu_ps(out, convert16(prec, w, (__mmask16)tbm_mask_stream_take(s, 16)));
    }
    if (count == 0)
        return;
    k = (__mmask16)tbm_mask_stream_take(s, (uint32_t)count);
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << count) - 1), convert_short(prec, w, k));
}

/* Mask bytes of the 16 elements of a vector, for m = 1, 2, 4, 8, 16 or 32. */
INLINE size_t vector_mask_bytes(uint32_t m)
{
    return m >= 8 ? 2 : 16 / m;
}

/* Opmask of the 16 elements whose bits start at byte p of the mask, for
 * m = 1, 2, 4, 8, 16 or 32 and a vector that starts a group (or, for m = 32,
 * the second half of one). Built in vector registers, which is faster than
 * moving bits from general registers into opmasks; reads only the vector's
 * own mask bytes. */
INLINE __mmask16 vector_keep(uint32_t m, const uint8_t *p)
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

/* Expands blocks of 64 elements, all kept when mask is NULL. */
INLINE void expand_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                          uint32_t m, size_t blocks, float *out)
{
    size_t size = tbm_element_size(prec);

    for (size_t b = 0; b < blocks; b++, w += 64 * size, out += 64) {
        prefetch_ahead(w, 64 * size);
        for (unsigned v = 0; v < 4; v++) {
            __mmask16 k = mask ? vector_keep(m, mask + (4 * b + v) * vector_mask_bytes(m)) : 0xFFFF;

            _mm512_storeu_ps(out + 16 * v, convert16(prec, w + 16 * v * size, k));
        }
    }
}

/* The same with m a constant in each copy. */
INLINE void expand_blocks_of(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                             uint32_t m, size_t blocks, float *out)
{
    switch (m) {
    case 1:
        expand_blocks(prec, w, mask, 1, blocks, out);
        return;
    case 2:
        expand_blocks(prec, w, mask, 2, blocks, out);
        return;
    case 4:
        expand_blocks(prec, w, mask, 4, blocks, out);
        return;
    case 8:
        expand_blocks(prec, w, mask, 8, blocks, out);
        return;
    case 16:
        expand_blocks(prec, w, mask, 16, blocks, out);
        return;
    }
    expand_blocks(prec, w, mask, 32, blocks, out);
}

INLINE void expand_dense(enum tbm_precision prec, const uint8_t *w, size_t count, float *out)
{
    size_t size = tbm_element_size(prec);
    size_t done = count / 64 * 64;
    __mmask16 tail = (__mmask16)((1u << (count % 16)) - 1);

    expand_blocks(prec, w, NULL, 0, count / 64, out);
    for (w += done * size, out += done, count -= done; count >= 16;
         count -= 16, w += 16 * size, out += 16)
        _mm512_storeu_ps(out, convert16(prec, w, 0xFFFF));
    if (count != 0)
        _mm512_mask_storeu_ps(out, tail, convert_short(prec, w, tail));
}

/* Any m goes through the bit stream; for the common m, once the range has
 * reached a group boundary, 64-element blocks take their bits straight from
 * the mask words. */
INLINE void expand_masked(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                          uint32_t m, uint64_t first, size_t count, float *out)
{
    size_t size = tbm_element_size(prec);
    uint32_t j = (uint32_t)(first % m);
    struct tbm_mask_stream s;
    size_t done = 0;

    if (count == 0)
        return; /* the stream would read a word the range does not cover */
    tbm_mask_stream_init(&s, mask, m, j);
    if (tbm_mask_blocks(m)) {
        size_t head = (m - j) % m < count ? (m - j) % m : count;
        size_t blocks = (count - head) / 64;

        expand_stream(prec, w, &s, head, out);
        expand_blocks_of(prec, w + head * size, s.next, m, blocks, out + head);
        s.next += blocks * tbm_mask_block_bytes(m);
        done = head + blocks * 64;
    }
    expand_stream(prec, w + done * size, &s, count - done, out + done);
}

INLINE void expand(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                   uint64_t first, size_t count, float *out)
{
    if (mask == NULL)
        expand_dense(prec, weights, count, out);
    else
        expand_masked(prec, weights, mask, m, first, count, out);
}

/* One copy of the loops per precision, so that none of them branches on it. */
void tbm_expand_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out)
{
    switch (prec) {
    case TBM_FP32:
        expand(TBM_FP32, weights, mask, m, first, count, out);
        return;
    case TBM_FP16:
        expand(TBM_FP16, weights, mask, m, first, count, out);
        return;
    case TBM_BF16:
        expand(TBM_BF16, weights, mask, m, first, count, out);
        return;
    case TBM_FP64:
        expand(TBM_FP64, weights, mask, m, first, count, out);
        return;
    }
}
