/* Tensor statistics for stats.json: the dispatchers, the portable reference
 * that defines every result bit for bit, the set-up and finish of the two
 * passes of fp32 and fp64, and the results of fp16 and bf16 from their
 * pattern table. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats_internal.h"

/* Elements the reference converts per call of tbm_expand_scalar. */
#define SCALAR_CHUNK 256

bool tbm_stats_two_pass(enum tbm_precision prec)
{
    return prec == TBM_FP32 || prec == TBM_FP64;
}

int tbm_stats_init(struct tbm_stats_acc *a, enum tbm_precision prec)
{
    memset(a, 0, sizeof *a);
    a->prec = prec;
    a->min_key = INT32_MAX;
    a->max_key = INT32_MIN;
    if (tbm_stats_two_pass(prec))
        return 0;
    /* calloc, as most patterns are never counted: their pages stay unmapped */
    a->low = calloc(TBM_STATS_PATTERNS + TBM_STATS_SPARES, sizeof *a->low);
    a->high = calloc(TBM_STATS_PATTERNS + TBM_STATS_SPARES, sizeof *a->high);
    if (a->low && a->high)
        return 0;
    tbm_stats_free(a);
    return -1;
}

void tbm_stats_free(struct tbm_stats_acc *a)
{
    free(a->low);
    free(a->high);
    a->low = NULL;
    a->high = NULL;
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

void tbm_stats_count_scalar(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                            struct tbm_stats_acc *a)
{
    const uint8_t *w = weights;

    if (mask == NULL) {
        tbm_stats_count_all(w, count, a);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (kept_bit(mask, m, i))
            tbm_stats_count1(a->low, a->high, tbm_load16(w + 2 * i));
    }
}

const uint64_t tbm_stats_compact8[256] = {
    0x0000000000000000, 0x0000000000000000, 0x0000000000000002, 0x0000000000000200,
    0x0000000000000004, 0x0000000000000400, 0x0000000000000402, 0x0000000000040200,
    0x0000000000000006, 0x0000000000000600, 0x0000000000000602, 0x0000000000060200,
    0x0000000000000604, 0x0000000000060400, 0x0000000000060402, 0x0000000006040200,
    0x0000000000000008, 0x0000000000000800, 0x0000000000000802, 0x0000000000080200,
    0x0000000000000804, 0x0000000000080400, 0x0000000000080402, 0x0000000008040200,
    0x0000000000000806, 0x0000000000080600, 0x0000000000080602, 0x0000000008060200,
    0x0000000000080604, 0x0000000008060400, 0x0000000008060402, 0x0000000806040200,
    0x000000000000000a, 0x0000000000000a00, 0x0000000000000a02, 0x00000000000a0200,
    0x0000000000000a04, 0x00000000000a0400, 0x00000000000a0402, 0x000000000a040200,
    0x0000000000000a06, 0x00000000000a0600, 0x00000000000a0602, 0x000000000a060200,
    0x00000000000a0604, 0x000000000a060400, 0x000000000a060402, 0x0000000a06040200,
    0x0000000000000a08, 0x00000000000a0800, 0x00000000000a0802, 0x000000000a080200,
    0x00000000000a0804, 0x000000000a080400, 0x000000000a080402, 0x0000000a08040200,
    0x00000000000a0806, 0x000000000a080600, 0x000000000a080602, 0x0000000a08060200,
    0x000000000a080604, 0x0000000a08060400, 0x0000000a08060402, 0x00000a0806040200,
    0x000000000000000c, 0x0000000000000c00, 0x0000000000000c02, 0x00000000000c0200,
    0x0000000000000c04, 0x00000000000c0400, 0x00000000000c0402, 0x000000000c040200,
    0x0000000000000c06, 0x00000000000c0600, 0x00000000000c0602, 0x000000000c060200,
    0x00000000000c0604, 0x000000000c060400, 0x000000000c060402, 0x0000000c06040200,
    0x0000000000000c08, 0x00000000000c0800, 0x00000000000c0802, 0x000000000c080200,
    0x00000000000c0804, 0x000000000c080400, 0x000000000c080402, 0x0000000c08040200,
    0x00000000000c0806, 0x000000000c080600, 0x000000000c080602, 0x0000000c08060200,
    0x000000000c080604, 0x0000000c08060400, 0x0000000c08060402, 0x00000c0806040200,
    0x0000000000000c0a, 0x00000000000c0a00, 0x00000000000c0a02, 0x000000000c0a0200,
    0x00000000000c0a04, 0x000000000c0a0400, 0x000000000c0a0402, 0x0000000c0a040200,
    0x00000000000c0a06, 0x000000000c0a0600, 0x000000000c0a0602, 0x0000000c0a060200,
    0x000000000c0a0604, 0x0000000c0a060400, 0x0000000c0a060402, 0x00000c0a06040200,
    0x00000000000c0a08, 0x000000000c0a0800, 0x000000000c0a0802, 0x0000000c0a080200,
    0x000000000c0a0804, 0x0000000c0a080400, 0x0000000c0a080402, 0x00000c0a08040200,
    0x000000000c0a0806, 0x0000000c0a080600, 0x0000000c0a080602, 0x00000c0a08060200,
    0x0000000c0a080604, 0x00000c0a08060400, 0x00000c0a08060402, 0x000c0a0806040200,
    0x000000000000000e, 0x0000000000000e00, 0x0000000000000e02, 0x00000000000e0200,
    0x0000000000000e04, 0x00000000000e0400, 0x00000000000e0402, 0x000000000e040200,
    0x0000000000000e06, 0x00000000000e0600, 0x00000000000e0602, 0x000000000e060200,
    0x00000000000e0604, 0x000000000e060400, 0x000000000e060402, 0x0000000e06040200,
    0x0000000000000e08, 0x00000000000e0800, 0x00000000000e0802, 0x000000000e080200,
    0x00000000000e0804, 0x000000000e080400, 0x000000000e080402, 0x0000000e08040200,
    0x00000000000e0806, 0x000000000e080600, 0x000000000e080602, 0x0000000e08060200,
    0x000000000e080604, 0x0000000e08060400, 0x0000000e08060402, 0x00000e0806040200,
    0x0000000000000e0a, 0x00000000000e0a00, 0x00000000000e0a02, 0x000000000e0a0200,
    0x00000000000e0a04, 0x000000000e0a0400, 0x000000000e0a0402, 0x0000000e0a040200,
    0x00000000000e0a06, 0x000000000e0a0600, 0x000000000e0a0602, 0x0000000e0a060200,
    0x000000000e0a0604, 0x0000000e0a060400, 0x0000000e0a060402, 0x00000e0a06040200,
    0x00000000000e0a08, 0x000000000e0a0800, 0x000000000e0a0802, 0x0000000e0a080200,
    0x000000000e0a0804, 0x0000000e0a080400, 0x0000000e0a080402, 0x00000e0a08040200,
    0x000000000e0a0806, 0x0000000e0a080600, 0x0000000e0a080602, 0x00000e0a08060200,
    0x0000000e0a080604, 0x00000e0a08060400, 0x00000e0a08060402, 0x000e0a0806040200,
    0x0000000000000e0c, 0x00000000000e0c00, 0x00000000000e0c02, 0x000000000e0c0200,
    0x00000000000e0c04, 0x000000000e0c0400, 0x000000000e0c0402, 0x0000000e0c040200,
    0x00000000000e0c06, 0x000000000e0c0600, 0x000000000e0c0602, 0x0000000e0c060200,
    0x000000000e0c0604, 0x0000000e0c060400, 0x0000000e0c060402, 0x00000e0c06040200,
    0x00000000000e0c08, 0x000000000e0c0800, 0x000000000e0c0802, 0x0000000e0c080200,
    0x000000000e0c0804, 0x0000000e0c080400, 0x0000000e0c080402, 0x00000e0c08040200,
    0x000000000e0c0806, 0x0000000e0c080600, 0x0000000e0c080602, 0x00000e0c08060200,
    0x0000000e0c080604, 0x00000e0c08060400, 0x00000e0c08060402, 0x000e0c0806040200,
    0x00000000000e0c0a, 0x000000000e0c0a00, 0x000000000e0c0a02, 0x0000000e0c0a0200,
    0x000000000e0c0a04, 0x0000000e0c0a0400, 0x0000000e0c0a0402, 0x00000e0c0a040200,
    0x000000000e0c0a06, 0x0000000e0c0a0600, 0x0000000e0c0a0602, 0x00000e0c0a060200,
    0x0000000e0c0a0604, 0x00000e0c0a060400, 0x00000e0c0a060402, 0x000e0c0a06040200,
    0x000000000e0c0a08, 0x0000000e0c0a0800, 0x0000000e0c0a0802, 0x00000e0c0a080200,
    0x0000000e0c0a0804, 0x00000e0c0a080400, 0x00000e0c0a080402, 0x000e0c0a08040200,
    0x0000000e0c0a0806, 0x00000e0c0a080600, 0x00000e0c0a080602, 0x000e0c0a08060200,
    0x00000e0c0a080604, 0x000e0c0a08060400, 0x000e0c0a08060402, 0x0e0c0a0806040200,
};

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

/* Edges and their keys for values from min to max. */
static void set_edges(struct tbm_stats_hist *h, double min, double max)
{
    h->min = min;
    h->max = max;
    /* min == max (IEEE, so also -0.0 and +0.0) puts every value in the last
     * bin: every edge is then min, and with scale 0 the SIMD paths start at
     * that bin */
    h->scale = min == max ? 0.0 : TBM_STATS_BINS / (max - min);
    for (unsigned i = 0; i <= TBM_STATS_BINS; i++)
        h->edges[i] = min + (max - min) * (double)i / TBM_STATS_BINS;
    for (unsigned i = 0; i < TBM_STATS_BINS; i++)
        h->lo_key[i] = key_at_or_above(h->edges[i]);
    for (unsigned i = 0; i + 1 < TBM_STATS_BINS; i++)
        h->hi_key[i] = h->lo_key[i + 1];
    h->hi_key[TBM_STATS_BINS - 1] = INT32_MAX; /* above every finite key */
}

void tbm_stats_hist_init(struct tbm_stats_hist *h, const struct tbm_stats_acc *a)
{
    assert(tbm_stats_two_pass(a->prec));
    memset(h, 0, sizeof *h);
    if (a->finite == 0)
        return; /* no value will be binned */
    h->mean = tbm_stats_sum_total(&a->sum) / (double)a->finite;
    set_edges(h, key_value(a->min_key), key_value(a->max_key));
}

/* Copies what stats.json shows apart from the table's results. */
static void finish_counts(const struct tbm_stats_acc *a, struct tbm_stats_result *r)
{
    memset(r, 0, sizeof *r);
    r->count = a->seen;
    r->kept = a->kept;
    r->zeros = a->zeros;
    r->nan = a->nan;
    r->inf = a->inf;
    r->finite = a->finite;
    r->has_finite = a->finite != 0;
}

static void finish_two_pass(const struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                            struct tbm_stats_result *r)
{
    finish_counts(a, r);
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

/* --- the results of the pattern table --- */

/* An exact sum of float32 values times counts: a two's complement integer
 * in units of 2^-149, float32's smallest step. A term c m 2^(e - 150) (m the
 * significand, < 2^24) has at most 64 + 24 bits from bit e - 1; with e <=
 * 254 and 2^16 patterns the sum stays below 2^358. */
#define EXACT_LIMBS 6

struct exact_sum {
    uint64_t limb[EXACT_LIMBS]; /* least significant first */
};

/* Adds or (neg) subtracts v 2^shift. */
static void exact_add(struct exact_sum *s, unsigned __int128 v, unsigned shift, bool neg)
{
    unsigned q = shift / 64, r = shift % 64;
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
    uint64_t w[3] = {lo << r, r ? (lo >> (64 - r)) | (hi << r) : hi, r ? hi >> (64 - r) : 0};
    unsigned carry = 0;

    for (unsigned i = q; i < EXACT_LIMBS; i++) {
        uint64_t x = i - q < 3 ? w[i - q] : 0, old = s->limb[i];

        if (neg) {
            uint64_t d = old - x - carry;

            carry = old < x || (old == x && carry);
            s->limb[i] = d;
        } else {
            uint64_t t = old + x + carry;

            carry = t < old || (t == old && carry);
            s->limb[i] = t;
        }
    }
}

/* Adds c times the finite float32 of bits bits. */
static void exact_add_count(struct exact_sum *s, uint64_t c, uint32_t bits)
{
    uint32_t e = bits >> 23 & 0xFF, frac = bits & 0x7FFFFF;
    uint32_t sig = e ? frac | 0x800000 : frac;

    exact_add(s, (unsigned __int128)c * sig, e ? e - 1 : 0, bits >> 31);
}

/* The sum rounded to the nearest double, ties to even. */
static double exact_value(const struct exact_sum *s)
{
    uint64_t l[EXACT_LIMBS];
    bool neg = s->limb[EXACT_LIMBS - 1] >> 63;
    unsigned carry = 1, t = EXACT_LIMBS;
    uint64_t top, rest = 0, sig;
    int lz;

    for (unsigned i = 0; i < EXACT_LIMBS; i++) {
        l[i] = neg ? ~s->limb[i] + carry : s->limb[i];
        carry = neg && carry && l[i] == 0;
    }
    while (t > 0 && l[t - 1] == 0)
        t--;
    if (t == 0)
        return 0.0;
    t--;
    lz = __builtin_clzll(l[t]);
    top = l[t] << lz;
    if (t > 0) {
        top |= lz ? l[t - 1] >> (64 - lz) : 0;
        rest = lz ? l[t - 1] << lz : l[t - 1];
        for (unsigned i = 0; i + 1 < t; i++)
            rest |= l[i];
    }
    /* 53 bits of the 64, the rest rounded: above half, or a tie to even */
    sig = top >> 11;
    if ((top & 0x7FF) > 0x400 || ((top & 0x7FF) == 0x400 && (rest != 0 || (sig & 1))))
        sig++;
    return (neg ? -1.0 : 1.0) * ldexp((double)sig, (int)(64 * t + 63 - (unsigned)lz) - 52 - 149);
}

/* A compensated sum (Sum2): the rounded sum and the sum of its errors. */
struct sum2 {
    double hi, lo;
};

/* The pattern whose 16-bit order key is the u-th smallest (u = 0 .. 65535):
 * NaNs of sign bit 1, -inf, the negative values, -0, +0, ..., +inf, NaNs. */
static uint32_t pattern_at(uint32_t u)
{
    uint32_t key = u ^ 0x8000;

    return key & 0x8000 ? key ^ 0x7FFF : key;
}

static uint64_t pattern_count(const struct tbm_stats_acc *a, uint32_t p)
{
    return a->high[p] + a->low[p];
}

static uint32_t pattern_bits(enum tbm_precision prec, uint32_t p)
{
    return prec == TBM_FP16 ? tbm_f16_bits((uint16_t)p) : tbm_bf16_bits((uint16_t)p);
}

/* One walk over the table in value order: the counts, min and max, and the
 * exact sums of the finite values and of their absolute values. */
static void table_sums(const struct tbm_stats_acc *a, struct tbm_stats_result *r, double *sum,
                       double *abs_sum)
{
    struct exact_sum s = {{0}}, abs = {{0}};

    for (uint32_t u = 0; u < TBM_STATS_PATTERNS; u++) {
        uint32_t p = pattern_at(u);
        uint64_t c = pattern_count(a, p);
        uint32_t bits, mag;
        double x;

        if (c == 0)
            continue;
        bits = pattern_bits(a->prec, p);
        mag = bits & TBM_F32_ABS;
        r->kept += c;
        r->zeros += mag == 0 ? c : 0;
        r->nan += mag > TBM_F32_INF ? c : 0;
        r->inf += mag == TBM_F32_INF ? c : 0;
        if (mag >= TBM_F32_INF)
            continue;
        x = (double)tbm_bits_float(bits);
        r->min = r->finite == 0 ? x : r->min;
        r->max = x;
        r->finite += c;
        exact_add_count(&s, c, bits);
        exact_add_count(&abs, c, mag);
    }
    *sum = exact_value(&s);
    *abs_sum = exact_value(&abs);
}

/* A second walk over the finite patterns in value order, which meets the
 * bins in order: each pattern in the last bin whose lower edge it is at or
 * above (tbm_stats_bin), and its squared deviations from the mean. */
static void table_hist(const struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                       struct tbm_stats_result *r, double *dev2)
{
    struct sum2 s = {0};
    unsigned bin = 0;

    for (uint32_t u = 0; u < TBM_STATS_PATTERNS; u++) {
        uint32_t p = pattern_at(u);
        uint64_t c = pattern_count(a, p);
        uint32_t bits;
        double d;

        if (c == 0)
            continue;
        bits = pattern_bits(a->prec, p);
        if ((bits & TBM_F32_ABS) >= TBM_F32_INF)
            continue;
        while (bin + 1 < TBM_STATS_BINS && tbm_stats_key(bits) >= h->lo_key[bin + 1])
            bin++;
        r->hist_counts[bin] += c;
        d = (double)tbm_bits_float(bits) - h->mean;
        tbm_two_sum(&s.hi, &s.lo, (double)(uint32_t)c * (d * d));
        if (c >> 32)
            tbm_two_sum(&s.hi, &s.lo, (double)(c >> 32) * 0x1p32 * (d * d));
    }
    *dev2 = s.hi + s.lo;
}

static void finish_table(const struct tbm_stats_acc *a, struct tbm_stats_result *r)
{
    struct tbm_stats_hist h;
    double sum, abs_sum, dev2;

    finish_counts(a, r);
    table_sums(a, r, &sum, &abs_sum);
    r->has_finite = r->finite != 0;
    if (!r->has_finite)
        return;
    memset(&h, 0, sizeof h);
    h.mean = sum / (double)r->finite;
    set_edges(&h, r->min, r->max);
    table_hist(a, &h, r, &dev2);
    r->mean = h.mean;
    r->abs_mean = abs_sum / (double)r->finite;
    r->std = sqrt(dev2 / (double)r->finite);
    memcpy(r->hist_edges, h.edges, sizeof r->hist_edges);
}

void tbm_stats_finish(const struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                      struct tbm_stats_result *r)
{
    if (tbm_stats_two_pass(a->prec))
        finish_two_pass(a, h, r);
    else
        finish_table(a, r);
}

static void stats_count(enum tbm_isa isa, const void *weights, const uint8_t *mask, uint32_t m,
                        uint64_t count, struct tbm_stats_acc *a)
{
    a->seen += count;
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_stats_count_avx512(weights, mask, m, count, a);
        return;
    case TBM_ISA_AVX2:
        tbm_stats_count_avx2(weights, mask, m, count, a);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_stats_count_scalar(weights, mask, m, count, a);
}

void tbm_stats_scan(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    assert(prec == a->prec);
    if (!tbm_stats_two_pass(prec)) {
        stats_count(isa, weights, mask, m, count, a);
        return;
    }
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
    assert(tbm_stats_two_pass(prec));
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
