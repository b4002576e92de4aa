/* Tensor statistics for stats.json: the dispatchers, the portable reference
 * that defines every result bit for bit, and the set-up and finish of the
 * two passes. */
#include <math.h>
#include <string.h>

#include "stats_internal.h"

/* Elements the reference converts per call of tbm_expand_scalar. */
#define SCALAR_CHUNK 256

void tbm_stats_init(struct tbm_stats_acc *a)
{
    memset(a, 0, sizeof *a);
    a->min_key = INT32_MAX;
    a->max_key = INT32_MIN;
}

/* Whether element i of a range starting at a group boundary is kept, read
 * plainly from its group's word (as tbm_expand_scalar does). */
static uint32_t kept_bit(const uint8_t *mask, uint32_t m, uint64_t i)
{
    if (mask == NULL)
        return 1;
    uint32_t j = (uint32_t)(i % m);
    return mask[i / m * tbm_mask_word_bytes(m) + j / 8] >> (j % 8) & 1;
}

/* The values are those of the dense expansion: the reference expansion
 * converts them, unmasked, so that kept zeros stay apart from pruned ones. */
void tbm_stats_scan_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    const uint8_t *w = weights;
    size_t size = tbm_element_size(prec);
    float buf[SCALAR_CHUNK];

    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < SCALAR_CHUNK ? (size_t)(count - done) : SCALAR_CHUNK;

        tbm_expand_scalar(prec, w + done * size, NULL, 0, 0, n, buf);
        for (size_t k = 0; k < n; k++, done++) {
            uint32_t bits;

            memcpy(&bits, buf + k, sizeof bits);
            tbm_stats_scan_one(a, bits, kept_bit(mask, m, done));
        }
    }
}

void tbm_stats_hist_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_hist *h)
{
    const uint8_t *w = weights;
    size_t size = tbm_element_size(prec);
    float buf[SCALAR_CHUNK];

    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < SCALAR_CHUNK ? (size_t)(count - done) : SCALAR_CHUNK;

        tbm_expand_scalar(prec, w + done * size, NULL, 0, 0, n, buf);
        for (size_t k = 0; k < n; k++, done++) {
            uint32_t bits;

            memcpy(&bits, buf + k, sizeof bits);
            tbm_stats_hist_one(h, bits, kept_bit(mask, m, done));
        }
    }
}

uint64_t tbm_mask_kept_scalar(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count)
{
    return tbm_mask_kept_range(mask, m, first, count, false);
}

static uint32_t float_bits(float f)
{
    uint32_t bits;

    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* The smallest order key of a float32 f with f >= e in IEEE terms, e a double
 * within the float32 range: the nearest float, or the next one up when that
 * is below e (nothing smaller than the nearest can be >= e); for a zero,
 * -0.0, which compares equal to +0.0. */
static int32_t key_at_or_above(double e)
{
    float f = (float)e;

    if ((double)f < e)
        f = nextafterf(f, INFINITY);
    if (f == 0.0f)
        f = -0.0f;
    return tbm_stats_key(float_bits(f));
}

static double key_value(int32_t key)
{
    /* the key is its own inverse: it flips the low 31 bits of negatives */
    return (double)tbm_bits_float((uint32_t)tbm_stats_key((uint32_t)key));
}

void tbm_stats_hist_init(struct tbm_stats_hist *h, const struct tbm_stats_acc *a)
{
    memset(h, 0, sizeof *h);
    if (a->finite == 0)
        return; /* no value will be binned */
    h->min = key_value(a->min_key);
    h->max = key_value(a->max_key);
    h->mean = tbm_stats_sum_total(&a->sum) / (double)a->finite;
    /* min == max (IEEE, so also -0.0 and +0.0) puts every value in the last
     * bin: every edge is then min, and with scale 0 the SIMD paths start at
     * that bin */
    h->scale = h->min == h->max ? 0.0 : TBM_STATS_BINS / (h->max - h->min);
    for (unsigned i = 0; i <= TBM_STATS_BINS; i++)
        h->edges[i] = h->min + (h->max - h->min) * (double)i / TBM_STATS_BINS;
    for (unsigned i = 0; i < TBM_STATS_BINS; i++)
        h->lo_key[i] = key_at_or_above(h->edges[i]);
    for (unsigned i = 0; i + 1 < TBM_STATS_BINS; i++)
        h->hi_key[i] = h->lo_key[i + 1];
    h->hi_key[TBM_STATS_BINS - 1] = INT32_MAX; /* above every finite key */
}

void tbm_stats_finish(const struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                      struct tbm_stats_result *r)
{
    memset(r, 0, sizeof *r);
    r->count = a->seen;
    r->kept = a->kept;
    r->zeros = a->zeros;
    r->nan = a->nan;
    r->inf = a->inf;
    r->finite = a->finite;
    r->has_finite = a->finite != 0;
    if (!r->has_finite)
        return;
    r->min = h->min;
    r->max = h->max;
    r->mean = h->mean;
    r->abs_mean = tbm_stats_sum_total(&a->abs_sum) / (double)a->finite;
    r->std = sqrt(tbm_stats_sum_total(&h->dev2) / (double)a->finite);
    memcpy(r->hist_edges, h->edges, sizeof r->hist_edges);
    memcpy(r->hist_counts, h->counts, sizeof r->hist_counts);
}

void tbm_stats_scan(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_stats_scan_avx512(prec, weights, mask, m, count, a);
        return;
    case TBM_ISA_AVX2:
        tbm_stats_scan_avx2(prec, weights, mask, m, count, a);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_stats_scan_scalar(prec, weights, mask, m, count, a);
}

void tbm_stats_hist(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t m, uint64_t count, struct tbm_stats_hist *h)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_stats_hist_avx512(prec, weights, mask, m, count, h);
        return;
    case TBM_ISA_AVX2:
        tbm_stats_hist_avx2(prec, weights, mask, m, count, h);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_stats_hist_scalar(prec, weights, mask, m, count, h);
}

uint64_t tbm_mask_kept(enum tbm_isa isa, const uint8_t *mask, uint32_t m, uint64_t first,
                       uint64_t count)
{
    if (mask == NULL)
        return count;
    switch (isa) {
    case TBM_ISA_AVX512:
        return tbm_mask_kept_avx512(mask, m, first, count);
    case TBM_ISA_AVX2:
        return tbm_mask_kept_avx2(mask, m, first, count);
    case TBM_ISA_SCALAR:
        break;
    }
    return tbm_mask_kept_scalar(mask, m, first, count);
}
