/* The statistics loops of the SIMD paths, written once and compiled in each
 * path's own file, under its -m flags.
 *
 * That file defines these, then includes this one, which defines
 * stats_scan_simd, stats_hist_simd and mask_kept_simd:
 * expand_level(...)       its tbm_expand, which converts the stored values
 * struct scan_regs        pass 1's vector accumulators
 * scan_load(r, a), scan_store(r, a)
 *                         from and back to the accumulator (scan_store
 *                         leaves r's sums at zero, so that a flush is a
 *                         store, tbm_stats_sum_flush and a load)
 * scan16(r, v, bits)      pass 1 on the 16 float32 at v, element k kept
 *                         when bit k of bits is; element k is lane k
 * struct hist_regs, hist_load(r, h), hist_store(r, h), hist16(r, v, bits)
 *                         the same for pass 2
 * hist_flush(r, h)        its flush: the sums alone, as the bin counts are
 *                         4 KiB to add up
 * (Pass 1 of fp16 and bf16, the pattern table, is each file's own loop.) */
#ifndef TBM_KERNELS_STATS_SIMD_H
#define TBM_KERNELS_STATS_SIMD_H

#include <immintrin.h>

#include "stats_internal.h"

/* Elements converted per call of expand_level, into a buffer that stays in
 * L1: a multiple of 64, so that whole mask blocks fit. */
#define STATS_CHUNK 1024

enum stats_pass { SCAN, HIST };

/* The stream position of the accumulator of either pass. */
TBM_INLINE uint64_t *seen_of(enum stats_pass pass, void *acc)
{
    return pass == SCAN ? &((struct tbm_stats_acc *)acc)->seen
                        : &((struct tbm_stats_hist *)acc)->seen;
}

/* The reference step on n elements at v, bits from bit 0 of bits. */
TBM_INLINE void one_by_one(enum stats_pass pass, void *acc, const float *v, size_t n, uint64_t bits)
{
    for (size_t k = 0; k < n; k++) {
        uint32_t b;

        memcpy(&b, v + k, sizeof b);
        if (pass == SCAN)
            tbm_stats_scan_one(acc, b, (uint32_t)(bits >> k & 1));
        else
            tbm_stats_hist_one(acc, b, (uint32_t)(bits >> k & 1));
    }
}

/* Kept bits of the next n (<= 32) elements. */
TBM_INLINE uint64_t take_bits(const uint8_t *mask, struct tbm_mask_stream *s, uint32_t n)
{
    return mask ? tbm_mask_stream_take(s, n) : (UINT64_C(1) << n) - 1;
}

/* Moves the lanes' partial sums into their compensated sums, in memory with
 * the reference's own code. */
TBM_INLINE void flush(enum stats_pass pass, void *regs, void *acc)
{
    if (pass == SCAN) {
        scan_store(regs, acc);
        tbm_stats_sum_flush(&((struct tbm_stats_acc *)acc)->sum);
        tbm_stats_sum_flush(&((struct tbm_stats_acc *)acc)->abs_sum);
        scan_load(regs, acc);
    } else {
        hist_flush(regs, acc);
    }
}

TBM_INLINE void run16(enum stats_pass pass, void *regs, const float *v, uint32_t bits)
{
    if (pass == SCAN)
        scan16(regs, v, bits);
    else
        hist16(regs, v, bits);
}

/* Whole vectors of a chunk whose first element is lane 0: n a multiple of
 * 16. With group-aligned bits of a common m, 64 elements' bits come from
 * the mask words at once. Flushes where the reference would. */
TBM_INLINE void run_vectors(enum stats_pass pass, void *regs, void *acc, const float *v, size_t n,
                            const uint8_t *mask, struct tbm_mask_stream *s, bool blocks,
                            uint64_t *seen)
{
    size_t k = 0;

    while (k < n) {
        uint64_t bits;
        unsigned vectors;

        if (blocks && s->pending == 0 && n - k >= 64) {
            bits = tbm_mask_block_bits(s->m, s->next);
            s->next += tbm_mask_block_bytes(s->m);
            vectors = 4;
        } else {
            bits = take_bits(mask, s, 16);
            vectors = 1;
        }
        for (unsigned i = 0; i < vectors; i++, k += 16) {
            run16(pass, regs, v + k, (uint32_t)(bits >> (16 * i) & 0xFFFF));
            *seen += 16;
            if (*seen % TBM_STATS_FLUSH == 0)
                flush(pass, regs, acc);
        }
    }
}

/* Either pass: single elements up to lane 0, whole vectors, single
 * elements of the tail. The single steps run on the accumulator itself,
 * outside the span where regs hold its sums. */
TBM_INLINE void run(enum stats_pass pass, enum tbm_precision prec, const uint8_t *w,
                    const uint8_t *mask, uint32_t m, uint64_t count, void *acc)
{
    size_t size = tbm_element_size(prec);
    uint64_t *seen = seen_of(pass, acc);
    bool blocks = mask && tbm_mask_blocks(m);
    struct tbm_mask_stream s = {0}; /* not read without a mask */
    float buf[STATS_CHUNK];
    size_t head;

    if (count == 0)
        return; /* the stream would read a word the range does not cover */
    if (mask)
        tbm_mask_stream_init(&s, mask, m, 0);
    head = (TBM_STATS_LANES - *seen % TBM_STATS_LANES) % TBM_STATS_LANES;
    head = head < count ? head : (size_t)count;
    if (head != 0) {
        expand_level(prec, w, NULL, 0, 0, head, buf);
        one_by_one(pass, acc, buf, head, take_bits(mask, &s, (uint32_t)head));
        w += head * size;
        count -= head;
    }
    if (count >= 16) {
        /* both, not a union: GCC keeps a union's vectors in memory */
        struct {
            struct scan_regs scan;
            struct hist_regs hist;
        } regs;
        uint64_t vectors = count / 16 * 16;

        if (pass == SCAN)
            scan_load(&regs.scan, acc);
        else
            hist_load(&regs.hist, acc);
        for (uint64_t done = 0; done < vectors;) {
            size_t n = vectors - done < STATS_CHUNK ? (size_t)(vectors - done) : STATS_CHUNK;

            expand_level(prec, w, NULL, 0, 0, n, buf);
            run_vectors(pass, pass == SCAN ? (void *)&regs.scan : (void *)&regs.hist, acc, buf, n,
                        mask, &s, blocks, seen);
            w += n * size;
            done += n;
        }
        if (pass == SCAN)
            scan_store(&regs.scan, acc);
        else
            hist_store(&regs.hist, acc);
        count -= vectors;
    }
    if (count != 0) {
        expand_level(prec, w, NULL, 0, 0, (size_t)count, buf);
        one_by_one(pass, acc, buf, (size_t)count, take_bits(mask, &s, (uint32_t)count));
    }
}

/* One copy of the loops per precision and pass. */
TBM_INLINE void run_prec(enum stats_pass pass, enum tbm_precision prec, const void *weights,
                         const uint8_t *mask, uint32_t m, uint64_t count, void *acc)
{
    switch (prec) {
    case TBM_FP32:
        run(pass, TBM_FP32, weights, mask, m, count, acc);
        return;
    case TBM_FP16:
        run(pass, TBM_FP16, weights, mask, m, count, acc);
        return;
    case TBM_BF16:
        run(pass, TBM_BF16, weights, mask, m, count, acc);
        return;
    case TBM_FP64:
        run(pass, TBM_FP64, weights, mask, m, count, acc);
        return;
    }
}

TBM_INLINE void stats_scan_simd(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                                uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    run_prec(SCAN, prec, weights, mask, m, count, a);
}

TBM_INLINE void stats_hist_simd(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                                uint32_t m, uint64_t count, struct tbm_stats_hist *h)
{
    run_prec(HIST, prec, weights, mask, m, count, h);
}

/* The reference's code with popcnt instructions and whole mask blocks. */
TBM_INLINE uint64_t mask_kept_simd(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count)
{
    return tbm_mask_kept_range(mask, m, first, count, true);
}

#endif
