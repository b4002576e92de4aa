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
    a->ways = calloc((size_t)TBM_STATS_PATTERNS * TBM_STATS_WAYS, sizeof *a->ways);
    a->folded = calloc(TBM_STATS_PATTERNS, sizeof *a->folded);
    if (a->ways && a->folded)
        return 0;
    tbm_stats_free(a);
    return -1;
}

void tbm_stats_free(struct tbm_stats_acc *a)
{
    free(a->ways);
    free(a->folded);
    a->ways = NULL;
    a->folded = NULL;
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
    size_t way = 0;

    if (mask == NULL) {
        tbm_stats_count_all(w, count, a);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (i % TBM_STATS_COUNT_CHUNK == 0)
            tbm_stats_make_room(a, TBM_STATS_COUNT_CHUNK);
        if (!kept_bit(mask, m, i))
            continue;
        a->ways[TBM_STATS_WAYS * tbm_load16(w + 2 * i) + way]++;
        way = (way + 1) % TBM_STATS_WAYS;
        a->unfolded++;
    }
}

const uint32_t tbm_stats_compact8[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
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
    uint64_t c = a->folded[p];

    for (unsigned w = 0; w < TBM_STATS_WAYS; w++)
        c += a->ways[TBM_STATS_WAYS * p + w];
    return c;
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
