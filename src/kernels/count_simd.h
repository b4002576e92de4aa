/* The mask statistics loops of the SIMD paths, written once and compiled in
 * each path's own file, under its -m flags.
 *
 * That file defines these, then includes this one, which defines count_simd:
 * nonzero64(prec, w)      bit i set when element i of the 64 at w is not
 *                         +-0.0
 * group_stats(mask, n, m, bytes, acc)
 *                         adds kept and groups_over_n of the whole words in
 *                         bytes (a multiple of 64) of mask */
#ifndef TBM_KERNELS_COUNT_SIMD_H
#define TBM_KERNELS_COUNT_SIMD_H

#include <immintrin.h>

#include "internal.h"

/* Groups per chunk: the vector loops run over whole chunks (64 mask words,
 * 64 * m elements, a multiple of 64) and the reference takes the rest. */
#define CHUNK_GROUPS 64

/* Pruned elements that are not +-0.0 among 64 * blocks elements starting
 * at a group boundary, for m = 1, 2, 4, 8, 16 or 32. */
TBM_INLINE uint64_t conflicts_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                                     uint32_t m, uint64_t blocks)
{
    size_t size = tbm_element_size(prec);
    uint64_t total = 0;

    for (uint64_t b = 0; b < blocks; b++, w += 64 * size, mask += tbm_mask_block_bytes(m)) {
        uint64_t kept = tbm_mask_block_bits(m, mask);

        total += (uint64_t)_mm_popcnt_u64(nonzero64(prec, w) & ~kept);
    }
    return total;
}

/* The same for any m, the bits read as a stream. */
TBM_INLINE uint64_t conflicts_stream(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                                     uint32_t m, uint64_t blocks)
{
    size_t size = tbm_element_size(prec);
    struct tbm_mask_stream s;
    uint64_t total = 0;

    tbm_mask_stream_init(&s, mask, m, 0);
    for (uint64_t b = 0; b < blocks; b++, w += 64 * size) {
        uint64_t kept = tbm_mask_stream_take(&s, 32);

        kept |= tbm_mask_stream_take(&s, 32) << 32;
        total += (uint64_t)_mm_popcnt_u64(nonzero64(prec, w) & ~kept);
    }
    return total;
}

/* conflicts_blocks with m a constant in each copy, or conflicts_stream. */
TBM_INLINE uint64_t conflicts(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                              uint32_t m, uint64_t blocks)
{
    switch (m) {
    case 1:
        return conflicts_blocks(prec, w, mask, 1, blocks);
    case 2:
        return conflicts_blocks(prec, w, mask, 2, blocks);
    case 4:
        return conflicts_blocks(prec, w, mask, 4, blocks);
    case 8:
        return conflicts_blocks(prec, w, mask, 8, blocks);
    case 16:
        return conflicts_blocks(prec, w, mask, 16, blocks);
    case 32:
        return conflicts_blocks(prec, w, mask, 32, blocks);
    }
    return conflicts_stream(prec, w, mask, m, blocks);
}

TBM_INLINE void count_chunks(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                             uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    uint64_t chunks = count / ((uint64_t)CHUNK_GROUPS * m);
    uint64_t done = chunks * CHUNK_GROUPS * m;
    uint64_t mask_done = chunks * CHUNK_GROUPS * tbm_mask_word_bytes(m);

    group_stats(mask, n, m, mask_done, acc);
    acc->mask_conflicts += conflicts(prec, weights, mask, m, done / 64);
    tbm_mask_count_scalar(prec, (const uint8_t *)weights + done * tbm_element_size(prec),
                          mask + mask_done, n, m, count - done, acc);
}

/* tbm_mask_count on the including file's level. One copy of the loops per
 * precision, so that none of them branches on it. */
TBM_INLINE void count_simd(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    switch (prec) {
    case TBM_FP32:
        count_chunks(TBM_FP32, weights, mask, n, m, count, acc);
        return;
    case TBM_FP16:
        count_chunks(TBM_FP16, weights, mask, n, m, count, acc);
        return;
    case TBM_BF16:
        count_chunks(TBM_BF16, weights, mask, n, m, count, acc);
        return;
    case TBM_FP64:
        count_chunks(TBM_FP64, weights, mask, n, m, count, acc);
        return;
    }
}

#endif
