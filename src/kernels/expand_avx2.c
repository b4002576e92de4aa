/* Dense expansion on AVX2 + F16C: 8 elements per vector, the mask applied by
 * ANDing each converted vector with per-lane masks built from the bits. */
#include <immintrin.h>
#include <string.h>

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

/* float32 of the 8 elements at w. */
INLINE __m256 convert8(enum tbm_precision prec, const uint8_t *w)
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
INLINE __m256 lanes8(uint32_t bits)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);

    return _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), sel), sel));
}

/* The last count (< 8) elements: through a zeroed copy, as AVX2 has no
 * masked 16-bit loads. */
INLINE void expand_short(enum tbm_precision prec, const uint8_t *w, uint32_t bits, size_t count,
                         float *out)
{
    uint8_t in[64] = {0};
    float res[8];

    memcpy(in, w, count * tbm_element_size(prec));
    _mm256_storeu_ps(res, _mm256_and_ps(convert8(prec, in), lanes8(bits)));
    memcpy(out, res, count * sizeof *out);
}

/* Expands count elements whose bits come from s, 8 at a time. */
INLINE void expand_stream(enum tbm_precision prec, const uint8_t *w, struct tbm_mask_stream *s,
                          size_t count, float *out)
{
    size_t size = tbm_element_size(prec);

    for (; count >= 8; count -= 8, w += 8 * size, out += 8) {
        uint32_t bits = (uint32_t)tbm_mask_stream_take(s, 8);

        prefetch_ahead(w, 8 * size);
        _mm256_storeu_ps(out, _mm256_and_ps(convert8(prec, w), lanes8(bits)));
    }
    if (count != 0)
        expand_short(prec, w, (uint32_t)tbm_mask_stream_take(s, (uint32_t)count), count, out);
}

/* Mask bytes of the 8 elements of a vector, for m = 1, 2, 4, 8, 16 or 32. */
INLINE size_t vector_mask_bytes(uint32_t m)
{
    return m >= 8 ? 1 : 8 / m;
}

/* Lane masks of the 8 elements whose bits start at byte p of the mask, for
 * m = 1, 2, 4, 8, 16 or 32 and a vector that starts a group (or a later
 * byte of one). Reads only the vector's own mask bytes. */
INLINE __m256 vector_keep(uint32_t m, const uint8_t *p)
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

/* Expands blocks of 64 elements, all kept when mask is NULL. */
INLINE void expand_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                          uint32_t m, size_t blocks, float *out)
{
    size_t size = tbm_element_size(prec);

    for (size_t b = 0; b < blocks; b++, w += 64 * size, out += 64) {
        prefetch_ahead(w, 64 * size);
        for (unsigned v = 0; v < 8; v++) {
            __m256 x = convert8(prec, w + 8 * v * size);

            if (mask)
                x = _mm256_and_ps(x, vector_keep(m, mask + (8 * b + v) * vector_mask_bytes(m)));
            _mm256_storeu_ps(out + 8 * v, x);
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

    expand_blocks(prec, w, NULL, 0, count / 64, out);
    for (w += done * size, out += done, count -= done; count >= 8;
         count -= 8, w += 8 * size, out += 8)
        _mm256_storeu_ps(out, convert8(prec, w));
    if (count != 0)
        expand_short(prec, w, 0xFF, count, out);
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
void tbm_expand_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                     uint64_t first, size_t count, float *out)
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
