/* The loops of tbm_mask_apply's SIMD paths, written once and compiled in each
 * path's own file, under its -m flags.
 *
 * That file defines clear64(es, w, bits): zeroes, among the 64 elements of
 * size es at w, those whose bit in bits is clear and whose bytes are not all
 * zero, writes nothing else, and returns whether there was one. Then it
 * includes this file, which defines mask_apply_simd. */
#ifndef TBM_KERNELS_MASK_APPLY_SIMD_H
#define TBM_KERNELS_MASK_APPLY_SIMD_H

#include <assert.h>

#include "internal.h"

/* Up to 64 elements' bits from the stream, which takes 32 at a time. */
TBM_INLINE uint64_t take_bits(struct tbm_mask_stream *s, size_t n)
{
    uint64_t bits = tbm_mask_stream_take(s, (uint32_t)(n < 32 ? n : 32));

    if (n > 32)
        bits |= tbm_mask_stream_take(s, (uint32_t)(n - 32)) << 32;
    return bits;
}

/* count elements whose bits come from s, 64 at a time. */
TBM_INLINE bool apply_stream(size_t es, uint8_t *w, struct tbm_mask_stream *s, size_t count)
{
    bool changed = false;

    for (; count >= 64; count -= 64, w += 64 * es)
        changed |= clear64(es, w, take_bits(s, 64));
    if (count != 0)
        changed |= tbm_clear_pruned_bits(w, es, take_bits(s, count), count);
    return changed;
}

/* blocks 64-element blocks at w, their bits straight from the mask words. */
TBM_INLINE bool apply_blocks(size_t es, uint8_t *w, const uint8_t *mask, uint32_t m, size_t blocks)
{
    bool changed = false;

    for (size_t b = 0; b < blocks; b++)
        changed |= clear64(es, w + 64 * es * b,
                           tbm_mask_block_bits(m, mask + b * tbm_mask_block_bytes(m)));
    return changed;
}

/* The same with m a constant in each copy: with m a variable, the loop
 * chose its way to the bits every block and kept its answer on the stack
 * (AVX-512, 2:4 bf16 in a hot buffer, Zen 5: 8.4 cycles per block against
 * 7.8). */
TBM_INLINE bool apply_blocks_of(size_t es, uint8_t *w, const uint8_t *mask, uint32_t m,
                                size_t blocks)
{
    switch (m) {
    case 1:
        return apply_blocks(es, w, mask, 1, blocks);
    case 2:
        return apply_blocks(es, w, mask, 2, blocks);
    case 4:
        return apply_blocks(es, w, mask, 4, blocks);
    }
    /* 8, 16 and 32 read a block alike: its 8 mask bytes are its 64 bits */
    assert(m == 8 || m == 16 || m == 32);
    return apply_blocks(es, w, mask, 32, blocks);
}

/* Any m goes through the bit stream; for the common m, once the range has
 * reached a group boundary, 64-element blocks take their bits straight from
 * the mask words, as in expand_simd.h. */
TBM_INLINE bool apply(size_t es, uint8_t *w, const uint8_t *mask, uint32_t m, uint64_t first,
                      size_t count)
{
    uint32_t j = (uint32_t)(first % m);
    struct tbm_mask_stream s;
    bool changed = false;
    size_t done = 0;

    if (count == 0)
        return false; /* the stream would read a word the range does not cover */
    tbm_mask_stream_init(&s, mask, m, j);
    if (tbm_mask_blocks(m)) {
        size_t head = (m - j) % m < count ? (m - j) % m : count;
        size_t blocks = (count - head) / 64;

        changed |= apply_stream(es, w, &s, head);
        changed |= apply_blocks_of(es, w + head * es, s.next, m, blocks);
        s.next += blocks * tbm_mask_block_bytes(m);
        done = head + blocks * 64;
    }
    return apply_stream(es, w + done * es, &s, count - done) | changed;
}

/* tbm_mask_apply on the including file's level: one copy of the loops per
 * element size, which is all the precision decides. */
TBM_INLINE bool mask_apply_simd(enum tbm_precision prec, void *weights, const uint8_t *mask,
                                uint32_t m, uint64_t first, size_t count)
{
    switch (tbm_element_size(prec)) {
    case 2:
        return apply(2, weights, mask, m, first, count);
    case 4:
        return apply(4, weights, mask, m, first, count);
    }
    return apply(8, weights, mask, m, first, count);
}

#endif
