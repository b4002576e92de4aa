/* Internals of the statistics kernels: the per-level entry points and the
 * per-element steps that define the results, shared by the portable
 * reference and the SIMD paths' heads and tails so that both do the same
 * operations on each lane. */
#ifndef TBM_KERNELS_STATS_INTERNAL_H
#define TBM_KERNELS_STATS_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "tbm/stats.h"

/* Elements between two compensation steps of every lane. */
#define TBM_STATS_FLUSH ((uint64_t)TBM_STATS_LANES * TBM_STATS_BLOCK)

#define TBM_F32_ABS 0x7FFFFFFFu
#define TBM_F32_INF 0x7F800000u

void tbm_stats_scan_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_acc *a);
void tbm_stats_scan_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t m, uint64_t count, struct tbm_stats_acc *a);
void tbm_stats_scan_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_acc *a);

void tbm_stats_hist_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_hist *h);
void tbm_stats_hist_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t m, uint64_t count, struct tbm_stats_hist *h);
void tbm_stats_hist_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_hist *h);

/* Pass 1 of fp16 and bf16: the kept elements' patterns into a's table. */
void tbm_stats_count_scalar(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                            struct tbm_stats_acc *a);
void tbm_stats_count_avx2(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                          struct tbm_stats_acc *a);
void tbm_stats_count_avx512(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                            struct tbm_stats_acc *a);

uint64_t tbm_mask_kept_scalar(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count);
uint64_t tbm_mask_kept_avx2(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count);
uint64_t tbm_mask_kept_avx512(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count);

/* tbm_stats_compact8[b]: byte t is 2 i for the t-th set bit i of b, the
 * offset of that element among 8 16-bit ones, so that a byte shuffle built
 * from it moves the elements whose bits are set to the front. */
extern const uint64_t tbm_stats_compact8[256];

/* Counts pattern p once more. */
static inline void tbm_stats_count1(uint16_t *low, uint64_t *high, uint32_t p)
{
    if (__builtin_expect(++low[p] == 0, 0))
        high[p] += 65536;
}

/* Counts the n patterns at at. */
static inline void tbm_stats_count_patterns(uint16_t *low, uint64_t *high, const uint16_t *at,
                                            size_t n)
{
    for (size_t j = 0; j < n; j++)
        tbm_stats_count1(low, high, at[j]);
}

/* Bytes of weights ahead of those being compacted that the SIMD loops of
 * the table prefetch, with the mask of the block there. The increments fill
 * the out-of-order window, so that without it the loads of the weights wait
 * on memory a few at a time (bench_stats, AVX2 loop: 26 ms without, 16 with
 * 2 KiB and TBM_STATS_LAG). 4 KiB took 12.5 ms on AVX-512 where 2 KiB took
 * 13.3, and 8 KiB no less than 4. */
#define TBM_STATS_PREFETCH 4096

/* Compacted patterns left between the newest and those a round counts: a
 * round right behind the stores of the compaction took 23 ms rather than 17
 * on bench_stats (AVX2 loop, with the prefetch), its 16-bit loads waiting on
 * those stores. */
#define TBM_STATS_LAG 128

/* Prefetches the byte ahead bytes past p, which may be past the end of p's
 * array: its address is made as an integer, as a pointer there would be
 * undefined, and a prefetch never faults. */
TBM_INLINE void tbm_stats_prefetch_at(const void *p, size_t ahead)
{
    __builtin_prefetch((const void *)((uintptr_t)p + ahead));
}

/* Prefetches the weights TBM_STATS_PREFETCH bytes ahead of the 64-element
 * block at w, whose mask is at mask, and the mask of the block there, with
 * block_bytes the mask bytes of a block. The caller works that out once:
 * made here from m, it was a division per block. */
TBM_INLINE void tbm_stats_prefetch(const uint8_t *w, const uint8_t *mask, uint32_t block_bytes)
{
    tbm_stats_prefetch_at(w, TBM_STATS_PREFETCH);
    tbm_stats_prefetch_at(w, TBM_STATS_PREFETCH + 64);
    tbm_stats_prefetch_at(mask, TBM_STATS_PREFETCH / 128 * block_bytes);
}

/* Patterns the SIMD loops count per round: its increments are unrolled,
 * and a round starts once the compaction is TBM_STATS_LAG entries past its
 * end, so that they overlap the loads and compaction of the next elements. */
#define TBM_STATS_ROUND 32

_Static_assert(TBM_STATS_SPARES == TBM_STATS_ROUND, "a spare counter per entry of a round");

TBM_INLINE void tbm_stats_count_round(uint16_t *low, uint64_t *high, const uint8_t *at)
{
#pragma GCC unroll 32
    for (unsigned q = 0; q < TBM_STATS_ROUND; q++)
        tbm_stats_count1(low, high, tbm_load16(at + 2 * q));
}

/* Counts pattern p c (<= TBM_STATS_ROUND) times at once. */
static inline void tbm_stats_add(uint16_t *low, uint64_t *high, uint32_t p, uint32_t c)
{
    low[p] = (uint16_t)(low[p] + c);
    if (low[p] < c)
        high[p] += 65536;
}

/* The two kinds of round that need no spreading, by repeats, how many of
 * its entries equal the first (the first included): 1, counted one by one
 * (the usual case), or all of them, added at once. Returns whether the round
 * at at was one of them; the levels spread the rest. */
TBM_INLINE bool tbm_stats_count_unspread(uint16_t *low, uint64_t *high, const uint8_t *at,
                                         uint32_t first, uint32_t repeats)
{
    if (repeats == 1)
        tbm_stats_count_round(low, high, at);
    else if (repeats == TBM_STATS_ROUND)
        tbm_stats_add(low, high, first, TBM_STATS_ROUND);
    else
        return false;
    return true;
}

/* A round in which some entries after the first repeat it: the first and
 * its repeats are counted at once, and their increments go to spare
 * counters past the patterns', one per position, whose counts mean nothing.
 * So a value that fills much of the stream (zeros, say) does not make its
 * every increment wait on the one before: 64 Mi fp16 elements, 9 in 10 of
 * them zero, no mask, took 33 ms, against 105 one by one (and 56 with the
 * two ways per pattern this table replaced). spread holds the round's
 * entries, those equal to the first replaced by TBM_STATS_PATTERNS + their
 * position; repeats is how many entries equal the first, the first
 * included. */
TBM_INLINE void tbm_stats_count_spread(uint16_t *low, uint64_t *high, uint32_t first,
                                       uint32_t repeats, const uint32_t *spread)
{
    tbm_stats_add(low, high, first, repeats);
#pragma GCC unroll 32
    for (unsigned q = 0; q < TBM_STATS_ROUND; q++)
        tbm_stats_count1(low, high, spread[q]);
}

/* The table without a mask, where every element is kept. */
static inline void tbm_stats_count_all(const uint8_t *w, uint64_t count, struct tbm_stats_acc *a)
{
    uint16_t *low = a->low;
    uint64_t *high = a->high;

    for (uint64_t i = 0; i < count; i++)
        tbm_stats_count1(low, high, tbm_load16(w + 2 * i));
}

/* Elements per chunk of the masked SIMD loops of the table, which keep a
 * chunk's kept patterns in a buffer on the stack (32 KiB) and move the few
 * not yet counted to its front at the end of each. bench_stats, medians of
 * 5 runs side by side on Zen 5, as times the expansion's: 16 Ki took 1.98
 * (AVX-512) and 2.45 (AVX2), 4 Ki 2.00 and 2.51. */
#define TBM_STATS_CHUNK 16384

/* The table without a mask on a SIMD level, where every element is kept:
 * the level's round (inlined, as this is) reads the patterns from the
 * weights themselves; the tail, shorter than a round, is counted one by
 * one. */
TBM_INLINE void tbm_stats_count_rounds(const uint8_t *w, uint64_t count, struct tbm_stats_acc *a,
                                       void (*round)(uint16_t *low, uint64_t *high,
                                                     const uint8_t *at))
{
    uint64_t i = 0;

    for (; count - i >= TBM_STATS_ROUND; i += TBM_STATS_ROUND) {
        tbm_stats_prefetch_at(w + 2 * i, TBM_STATS_PREFETCH);
        round(a->low, a->high, w + 2 * i);
    }
    tbm_stats_count_all(w + 2 * i, count - i, a);
}

/* One chunk of the masked table on a SIMD level (n <= TBM_STATS_CHUNK
 * elements from w, their mask bits from s): its kept patterns into idx after
 * the k there, counted a round at a time as they come; returns how many it
 * leaves at the front of idx for the next chunk. */
typedef size_t tbm_stats_chunk_fn(const uint8_t *w, size_t n, bool blocks,
                                  struct tbm_mask_stream *s, uint16_t *idx, size_t k,
                                  struct tbm_stats_acc *a);

/* The table with a mask on a SIMD level: the level's chunk (inlined, as this
 * is) over each TBM_STATS_CHUNK elements in turn, with idx (room for the
 * entries a chunk leaves, a chunk's, and what the level's compaction may
 * write past them); what the last leaves is counted one by one. */
TBM_INLINE void tbm_stats_count_chunks(const uint8_t *w, const uint8_t *mask, uint32_t m,
                                       uint64_t count, struct tbm_stats_acc *a, uint16_t *idx,
                                       tbm_stats_chunk_fn *chunk)
{
    struct tbm_mask_stream s;
    size_t k = 0;

    tbm_mask_stream_init(&s, mask, m, 0);
    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < TBM_STATS_CHUNK ? (size_t)(count - done) : TBM_STATS_CHUNK;

        k = chunk(w + 2 * done, n, tbm_mask_blocks(m), &s, idx, k, a);
        done += n;
    }
    tbm_stats_count_patterns(a->low, a->high, idx, k);
}

/* Knuth's TwoSum: s + x exactly as the new s plus an error added to c.
 * Branch-free (unlike Neumaier's), so vector lanes do the same six
 * operations; the SIMD paths call this very code for their flushes. */
static inline void tbm_two_sum(double *s, double *c, double x)
{
    double t = *s + x;
    double bp = t - *s;

    *c += (*s - (t - bp)) + (x - bp);
    *s = t;
}

/* Moves every lane's partial sum into its compensated sum. */
static inline void tbm_stats_sum_flush(struct tbm_stats_sum *s)
{
    for (unsigned l = 0; l < TBM_STATS_LANES; l++) {
        tbm_two_sum(&s->hi[l], &s->lo[l], s->part[l]);
        s->part[l] = 0.0;
    }
}

/* The lanes combined in lane order: the sum's one value. */
static inline double tbm_stats_sum_total(const struct tbm_stats_sum *sum)
{
    struct tbm_stats_sum s = *sum;
    double hi = 0.0, lo = 0.0;

    tbm_stats_sum_flush(&s);
    for (unsigned l = 0; l < TBM_STATS_LANES; l++) {
        tbm_two_sum(&hi, &lo, s.hi[l]);
        lo += s.lo[l];
    }
    return hi + lo;
}

static inline float tbm_bits_float(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Pass 1 on one element of float32 bits bits, keep 0 or 1. An excluded
 * element adds +0.0 to its lane, as a vector lane does. */
static inline void tbm_stats_scan_one(struct tbm_stats_acc *a, uint32_t bits, uint32_t keep)
{
    uint32_t abs = bits & TBM_F32_ABS;
    bool fin = keep && abs < TBM_F32_INF;
    unsigned lane = (unsigned)(a->seen % TBM_STATS_LANES);
    double x = fin ? (double)tbm_bits_float(bits) : 0.0;

    a->kept += keep;
    a->zeros += keep && abs == 0;
    a->nan += keep && abs > TBM_F32_INF;
    a->inf += keep && abs == TBM_F32_INF;
    a->finite += fin;
    if (fin) {
        int32_t key = tbm_stats_key(bits);

        a->min_key = key < a->min_key ? key : a->min_key;
        a->max_key = key > a->max_key ? key : a->max_key;
    }
    a->sum.part[lane] += x;
    a->abs_sum.part[lane] += fabs(x);
    if (++a->seen % TBM_STATS_FLUSH == 0) {
        tbm_stats_sum_flush(&a->sum);
        tbm_stats_sum_flush(&a->abs_sum);
    }
}

/* The bin of a finite value by its definition: the last edge it is at or
 * above (a value below the first, which a scan of other data could give,
 * goes to bin 0). The SIMD paths compute it another way. */
static inline unsigned tbm_stats_bin(const struct tbm_stats_hist *h, int32_t key)
{
    unsigned bin = TBM_STATS_BINS - 1;

    while (bin > 0 && key < h->lo_key[bin])
        bin--;
    return bin;
}

/* Pass 2 on one element. */
static inline void tbm_stats_hist_one(struct tbm_stats_hist *h, uint32_t bits, uint32_t keep)
{
    uint32_t abs = bits & TBM_F32_ABS;
    bool fin = keep && abs < TBM_F32_INF;
    unsigned lane = (unsigned)(h->seen % TBM_STATS_LANES);
    double d = (double)tbm_bits_float(bits) - h->mean;

    if (fin)
        h->counts[tbm_stats_bin(h, tbm_stats_key(bits))]++;
    h->dev2.part[lane] += fin ? d * d : 0.0;
    if (++h->seen % TBM_STATS_FLUSH == 0)
        tbm_stats_sum_flush(&h->dev2);
}

/* tbm_mask_kept (mask not NULL). With blocks, the common m take their
 * 64-element blocks' bits straight from the mask words. */
static inline uint64_t tbm_mask_kept_range(const uint8_t *mask, uint32_t m, uint64_t first,
                                           uint64_t count, bool blocks)
{
    uint32_t word_bytes = tbm_mask_word_bytes(m);
    uint32_t valid = tbm_mask_valid_bits(m);
    uint32_t j = (uint32_t)(first % m);
    uint64_t total = 0;

    if (j != 0 && count != 0) {
        uint32_t len = count < m - j ? (uint32_t)count : m - j;

        total += (uint64_t)__builtin_popcount((tbm_mask_word(mask, word_bytes) & valid) >> j &
                                              tbm_mask_valid_bits(len));
        mask += word_bytes;
        count -= len;
    }
    if (blocks && tbm_mask_blocks(m)) {
        for (; count >= 64; count -= 64, mask += tbm_mask_block_bytes(m))
            total += (uint64_t)__builtin_popcountll(tbm_mask_block_bits(m, mask));
    }
    for (; count >= m; count -= m, mask += word_bytes)
        total += (uint64_t)__builtin_popcount(tbm_mask_word(mask, word_bytes) & valid);
    if (count != 0)
        total += (uint64_t)__builtin_popcount(tbm_mask_word(mask, word_bytes) &
                                              tbm_mask_valid_bits((uint32_t)count));
    return total;
}

#endif
