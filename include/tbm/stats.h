/* Pure compute behind stats.json, mask.png and weights.png: streaming
 * statistics of a tensor's dense expansion, per-range kept counts, block
 * images of the self-test matrix, and an uncompressed PNG encoder. No I/O.
 *
 * Values are those of the dense expansion, float32 as tbm_expand gives them
 * (an fp64 beyond float range is an infinity there, and so here). Only kept
 * elements enter the statistics other than count.
 *
 * fp16 and bf16: one pass. An fp16 or bf16 value has one of 65536 bit
 * patterns, so tbm_stats_scan only counts the patterns of the kept elements
 * into a table, and everything stats.json shows follows from the table at
 * the end: counts, min and max, the exact histogram (the edges need min and
 * max, which a stream knows only at its end), sums and the two-pass
 * variance. The table's counts are integers, so every path gives the same
 * table whatever the chunks, and the one finishing code gives the same bits.
 * Counting is the cost of the pass: about one increment per kept element (a
 * round's repeats of its first entry are added at once), of a
 * 16-bit counter that stays in L1D (see struct tbm_stats_acc), the SIMD
 * paths taking the kept patterns 32 (VBMI2's vpcompressw) or 8 (a byte
 * shuffle) at a time; on bench_stats the pass takes about 2 (AVX-512) and
 * 2.5 (AVX2) times as long as tbm_expand of the same data.
 * Sums (tbm_stats_finish): exact, in a 384-bit integer of units 2^-149
 * (every float32 is a whole number of them), then rounded once to the
 * nearest double, so |S' - S| <= 2^-53 |S| even where +-65504 or +-3.4e38
 * cancel; mean and abs_mean are the exact sums rounded, divided by the
 * count and rounded again (within 2^-52 of the true ones, relative). The
 * variance sum c (x - mean)^2 / n over the patterns (count c, value x) has
 * positive terms each within 3 roundings (the difference, the square, the
 * product with c), added in value order to a compensated sum (TwoSum, each
 * error kept in a second double: Ogita, Rump and Oishi's Sum2) of N <= 2^17
 * terms, which adds 2^-53 + N^2 2^-106; the mean's error e adds e^2 / var
 * (the first-order terms cancel). So var is within about 2^-50 var, std
 * within half that.
 *
 * fp32 and fp64: two passes, as they have too many patterns for a table.
 * Both stream in bounded memory: tbm_stats_scan (counts, min, max, sums)
 * and then tbm_stats_hist (histogram, squared deviations from the mean).
 * Two, because an exact histogram needs min and max before the first value
 * is binned; the second pass also gives a two-pass variance, sum((x -
 * mean)^2), which unlike sum(x^2) - n mean^2 loses nothing to cancellation
 * when |mean| >> std. Bit-exact paths: the portable C path defines every
 * result, and the AVX2 and AVX-512 paths match it bit for bit. Counts, min
 * and max are integers (or orders) and cannot differ; the sums are laid out
 * so that every path does the same IEEE operations in the same order:
 * element i of the stream (i counted from the first element given to the
 * accumulator) goes to lane i % TBM_STATS_LANES, each lane adds its values
 * in order to a plain double partial sum, and after every TBM_STATS_LANES *
 * TBM_STATS_BLOCK elements of the stream each lane's partial sum is added
 * to the lane's compensated sum (hi, lo) with Knuth's TwoSum, which is
 * exact. At the end the lanes are combined in lane order, again with
 * TwoSum. An excluded element (pruned, not finite) adds +0.0 to its lane.
 * Squares x * x of float32 values are exact in double; no path uses FMA
 * (the build is ISO C, -ffp-contract=off). The results therefore do not
 * depend on how the caller cuts the stream into chunks either.
 *
 * Error bound of each of these sums S = sum x_i (n terms): the plain
 * partial sums of at most TBM_STATS_BLOCK terms contribute at most
 * (TBM_STATS_BLOCK - 1) u sum |x_i| with u = 2^-53, the compensated part u
 * |S| + O(n u^2) sum |x_i|:
 *     |S' - S| <= 2^-45 sum |x_i| + 2^-53 |S|   (to first order, n < 2^50).
 * mean and abs_mean add one rounding of the division; var = sum (x - mean)^2
 * / n is within about 2^-44 var (each squared term carries the rounding of
 * x - mean and of the square), std = sqrt(var) within half that. */
#ifndef TBM_STATS_H
#define TBM_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/kernels.h"

#define TBM_STATS_LANES 16  /* double lanes of every sum */
#define TBM_STATS_BLOCK 256 /* plain additions per lane before compensation */
#define TBM_STATS_BINS  32  /* histogram bins; TBM_STATS_BINS + 1 edges */

/* One sum in TBM_STATS_LANES lanes, as the file comment describes. */
struct tbm_stats_sum {
    double part[TBM_STATS_LANES];
    double hi[TBM_STATS_LANES];
    double lo[TBM_STATS_LANES];
};

/* Counters of the pattern table: pattern p's count is high[p] + low[p].
 * The loops increment the 16-bit low, so that the 32 KiB of the 16 Ki or so
 * patterns a tensor's weights use stay in L1D (32-bit counters, or two ways
 * of them per pattern, spill to L2 and took 1.5 times as long); when low[p]
 * wraps to 0, high[p] takes the 65536. Both have TBM_STATS_SPARES more
 * entries past the patterns', counters the SIMD loops use as spares, whose
 * counts mean nothing (high too: a spare's low wraps like any counter's). */
#define TBM_STATS_PATTERNS 65536
#define TBM_STATS_SPARES   32

/* Pass 1. min_key and max_key are order keys (see tbm_stats_key) of the
 * smallest and largest finite kept value; INT32_MAX and INT32_MIN while
 * there is none. For fp16 and bf16 only seen and the table move: the other
 * counters stay 0 and tbm_stats_finish takes them from the table. */
struct tbm_stats_acc {
    enum tbm_precision prec;
    uint64_t seen;   /* elements scanned, kept or not */
    uint64_t kept;   /* elements the mask keeps */
    uint64_t zeros;  /* kept +0.0 or -0.0 */
    uint64_t nan;    /* kept NaNs */
    uint64_t inf;    /* kept infinities */
    uint64_t finite; /* kept finite values, zeros included */
    int32_t min_key;
    int32_t max_key;
    struct tbm_stats_sum sum;     /* of the finite kept values */
    struct tbm_stats_sum abs_sum; /* of their absolute values */
    /* fp16 and bf16 (NULL otherwise): the kept elements' bit patterns */
    uint16_t *low;  /* TBM_STATS_PATTERNS + TBM_STATS_SPARES */
    uint64_t *high; /* TBM_STATS_PATTERNS + TBM_STATS_SPARES */
};

/* Pass 2, set up from a finished pass 1 by tbm_stats_hist_init. */
struct tbm_stats_hist {
    uint64_t seen;
    double min, max, mean;
    double scale; /* TBM_STATS_BINS / (max - min); 0 when min == max */
    /* lo_key[i]: the smallest order key of a float32 >= edge i (IEEE
     * compare, so -0.0 for an edge of zero); hi_key[i] = lo_key[i + 1], and
     * INT32_MAX for the last bin, which is closed */
    int32_t lo_key[TBM_STATS_BINS];
    int32_t hi_key[TBM_STATS_BINS];
    double edges[TBM_STATS_BINS + 1];
    uint64_t counts[TBM_STATS_BINS];
    struct tbm_stats_sum dev2; /* sum (x - mean)^2 of the finite kept values */
};

/* What stats.json shows, apart from the row densities. When finite is 0,
 * has_finite is false and min .. abs_mean, the edges and the counts are all
 * 0 (the JSON writes null for the five values and may omit the histogram). */
struct tbm_stats_result {
    uint64_t count, kept, zeros, nan, inf, finite;
    bool has_finite;
    double min, max, mean, std, abs_mean;
    double hist_edges[TBM_STATS_BINS + 1];
    uint64_t hist_counts[TBM_STATS_BINS];
};

/* Order key of a float32's bits: a signed integer that sorts as the values
 * do, with -0.0 (key -1) below +0.0 (key 0). So min and max follow IEEE
 * order with -0.0 < +0.0: min of {-0.0, +0.0} is -0.0 and max +0.0,
 * whichever comes first. */
static inline int32_t tbm_stats_key(uint32_t bits)
{
    return (int32_t)(bits ^ ((uint32_t)((int32_t)bits >> 31) & 0x7FFFFFFF));
}

/* Starts the statistics of a tensor of precision prec. Returns 0, or -1
 * when out of memory (then nothing needs freeing); the table of fp16 and
 * bf16 takes 640 KiB, of which only the pages of patterns counted are ever
 * touched. */
int tbm_stats_init(struct tbm_stats_acc *a, enum tbm_precision prec);
void tbm_stats_free(struct tbm_stats_acc *a);

/* Whether prec needs pass 2 (fp32 and fp64), or pass 1 gives everything. */
bool tbm_stats_two_pass(enum tbm_precision prec);

/* Pass 1 over count consecutive elements of the tensor, continuing the
 * stream of a (prec is a's). weights and mask start at a group boundary and
 * count is a multiple of m unless the range ends the tensor, as for
 * tbm_mask_count; mask NULL keeps every element (m is then ignored), else m
 * is 1..32. */
void tbm_stats_scan(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t m, uint64_t count, struct tbm_stats_acc *a);

/* Sets up pass 2 from the whole of pass 1: edges, keys, mean (fp32 and
 * fp64 only, as the two pass-2 functions). */
void tbm_stats_hist_init(struct tbm_stats_hist *h, const struct tbm_stats_acc *a);

/* Pass 2 over the same elements, in the same order and the same chunks or
 * others (same rules as tbm_stats_scan). Bins are [lo, hi) but the last,
 * which is [lo, hi]. */
void tbm_stats_hist(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t m, uint64_t count, struct tbm_stats_hist *h);

/* The results: of both passes, or of pass 1 alone (h NULL) when a's
 * precision does not need pass 2. (When min == max, -0.0 == +0.0 included,
 * every value is in the last bin, as the contract says: every edge is then
 * min.) */
void tbm_stats_finish(const struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                      struct tbm_stats_result *r);

/* Kept elements of [first, first + count), mask pointing at the word of
 * group first / m (as tbm_expand takes it, so a range may start inside a
 * group); count when mask is NULL. For row densities: row r of a rows x
 * cols matrix is first = r * cols, count = cols, and its density is the
 * result / cols. */
uint64_t tbm_mask_kept(enum tbm_isa isa, const uint8_t *mask, uint32_t m, uint64_t first,
                       uint64_t count);

/* --- block images: mask.png and weights.png --- */

#define TBM_IMAGE_MAX 1024 /* pixels per side at most */

/* Block images of a rows x cols matrix, fed its elements in row-major order.
 * Memory: three arrays of width entries for the block row being summed,
 * width * height bytes of mask.png and width * height doubles of block means
 * (weights.png needs the whole tensor's smallest and largest mean before any
 * pixel, so the means are kept; at most 8 MiB). */
struct tbm_image_acc {
    uint64_t rows, cols;
    uint64_t bh, bw;        /* block height and width, in elements */
    uint32_t width, height; /* pixels */
    uint64_t pos;           /* elements added so far */
    uint64_t *kept;         /* per block of the current block row */
    uint64_t *finite;
    double *abs_sum;
    uint8_t *mask_px; /* width * height */
    double *mean;     /* width * height: mean |dense| of the finite elements */
};

/* Image size of a rows x cols matrix per the contract. An empty matrix (rows
 * or cols 0) gives a 1 x 1 image whose one pixel is black (0). */
void tbm_image_dims(uint64_t rows, uint64_t cols, uint32_t *width, uint32_t *height);

/* Returns 0, or -1 when out of memory (then nothing needs freeing). */
int tbm_image_init(struct tbm_image_acc *a, uint64_t rows, uint64_t cols);
void tbm_image_free(struct tbm_image_acc *a);

/* Adds the next count elements (stored weights and mask as for
 * tbm_stats_scan, except that the range may start anywhere: mask points at
 * the word of group a->pos / m). Elements beyond rows * cols are ignored. */
void tbm_image_add(struct tbm_image_acc *a, enum tbm_isa isa, enum tbm_precision prec,
                   const void *weights, const uint8_t *mask, uint32_t m, uint64_t count);

/* mask.png pixel of a block with kept of elems elements kept: round(255 *
 * kept / elems), halves up, in integers. 0 for an empty block. */
uint8_t tbm_image_mask_pixel(uint64_t kept, uint64_t elems);

/* weights.png pixel of a block mean m, lo and hi the smallest and largest
 * non-zero block means of the tensor. */
uint8_t tbm_image_weight_pixel(double m, double lo, double hi);

/* Once every element is added: the width * height pixels of weights.png
 * into out. (mask.png's are a->mask_px.) */
void tbm_image_weights(const struct tbm_image_acc *a, uint8_t *out);

/* --- PNG, 8-bit greyscale, stored (uncompressed) deflate blocks --- */

/* Exact byte size of the PNG tbm_png_write writes for width x height (each
 * 1 .. TBM_IMAGE_MAX; 0 is taken as 1 x 1, the empty tensor's image). */
uint64_t tbm_png_size(uint32_t width, uint32_t height);

/* Writes tbm_png_size(width, height) bytes to out: signature, IHDR, IDAT
 * chunks of at most 65536 bytes holding the zlib stream (header, stored
 * blocks of at most 65535 bytes, Adler-32), IEND. Scanlines have filter 0.
 * pixels is row-major, width * height bytes; with width or height 0 it is not
 * read and the image is one black pixel. */
void tbm_png_write(const uint8_t *pixels, uint32_t width, uint32_t height, uint8_t *out);

#endif
