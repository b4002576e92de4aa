/* The dense expansion loops of the SIMD paths, written once and compiled in
 * each path's own file, under its -m flags.
 *
 * That file defines these, then includes this one, which defines expand_simd:
 * LANES                   elements per vector: 8 or 16
 * keep_t                  which lanes of a vector are kept
 * keep_bits(bits)         lane i kept when bit i of bits is set
 * keep_block(m, p)        the lanes of a vector whose bits start at mask
 *                         byte p (m = 1, 2, 4, 8, 16 or 32): at a group's
 *                         word, or inside it for m > 8
 * store_kept(prec, w, k, out)
 *                         the LANES elements at w as float32 to out, +0.0
 *                         where k does not keep them
 * store_all(prec, w, out) the same, all kept
 * store_short(prec, w, bits, count, out)
 *                         the last count (< LANES) elements, those in bits
 *                         kept; bits has no bit at or above count, and
 *                         nothing past the count elements is read or written */
#ifndef TBM_KERNELS_EXPAND_SIMD_H
#define TBM_KERNELS_EXPAND_SIMD_H

#include <immintrin.h>

#include "internal.h"

/* How far ahead to prefetch the input, in bytes. Streaming from memory, the
 * 2:4 expansion ran at about 3/4 of memcpy's speed without it and at par
 * with it on the AMD Zen 5 it was tuned on (bench_expand). */
#define PREFETCH 4096

/* Prefetches the lines PREFETCH bytes ahead of the bytes input at w. */
TBM_INLINE void prefetch_ahead(const uint8_t *w, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)w + PREFETCH + off, _MM_HINT_T0);
}

/* Expands count elements whose bits come from s, LANES at a time. */
TBM_INLINE void expand_stream(enum tbm_precision prec, const uint8_t *w, struct tbm_mask_stream *s,
                              size_t count, float *out)
{
    size_t size = tbm_element_size(prec);

    for (; count >= LANES; count -= LANES, w += LANES * size, out += LANES) {
        uint32_t bits = (uint32_t)tbm_mask_stream_take(s, LANES);

        prefetch_ahead(w, LANES * size);
        store_kept(prec, w, keep_bits(bits), out);
    }
    if (count != 0)
        store_short(prec, w, (uint32_t)tbm_mask_stream_take(s, (uint32_t)count), count, out);
}

/* Mask bytes of the LANES elements of a vector, for m = 1, 2, 4, 8, 16 or
 * 32: a byte holds the bits of 8 elements, or of one group of m < 8. */
TBM_INLINE size_t vector_mask_bytes(uint32_t m)
{
    return m >= 8 ? LANES / 8 : LANES / m;
}

/* Expands blocks of 64 elements, all kept when mask is NULL. */
TBM_INLINE void expand_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                              uint32_t m, size_t blocks, float *out)
{
    size_t size = tbm_element_size(prec);

    for (size_t b = 0; b < blocks; b++, w += 64 * size, out += 64) {
        prefetch_ahead(w, 64 * size);
        for (unsigned v = 0; v < 64 / LANES; v++) {
            const uint8_t *in = w + LANES * v * size;

            if (mask)
                store_kept(prec, in,
                           keep_block(m, mask + (64 / LANES * b + v) * vector_mask_bytes(m)),
                           out + LANES * v);
            else
                store_all(prec, in, out + LANES * v);
        }
    }
}

/* The same with m a constant in each copy. */
TBM_INLINE void expand_blocks_of(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
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

TBM_INLINE void expand_dense(enum tbm_precision prec, const uint8_t *w, size_t count, float *out)
{
    size_t size = tbm_element_size(prec);
    size_t done = count / 64 * 64;

    expand_blocks(prec, w, NULL, 0, count / 64, out);
    for (w += done * size, out += done, count -= done; count >= LANES;
         count -= LANES, w += LANES * size, out += LANES)
        store_all(prec, w, out);
    if (count != 0)
        store_short(prec, w, (uint32_t)((1u << count) - 1), count, out);
}

/* Any m goes through the bit stream; for the common m, once the range has
 * reached a group boundary, 64-element blocks take their bits straight from
 * the mask words. */
TBM_INLINE void expand_masked(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
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

TBM_INLINE void expand(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out)
{
    if (mask == NULL)
        expand_dense(prec, weights, count, out);
    else
        expand_masked(prec, weights, mask, m, first, count, out);
}

/* tbm_expand on the including file's level. One copy of the loops per
 * precision, so that none of them branches on it. */
TBM_INLINE void expand_simd(enum tbm_precision prec, const void *weights, const uint8_t *mask,
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

#endif
