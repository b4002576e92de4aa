/* Tests of the statistics, kept-count, block-image and PNG kernels: every
 * SIMD path bit for bit against the portable reference, the reference
 * against straightforward models (long double and exact integer sums,
 * edge-by-edge binning), and the PNG decoded back with zlib. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <float.h>
#include <math.h>
#include <zlib.h>
#include <cmocka.h>

#include "guard_buf.h"
#include "tbm/kernels.h"
#include "tbm/stats.h"

static const enum tbm_isa isas[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};
static const enum tbm_precision precs[] = {TBM_FP32, TBM_FP16, TBM_BF16, TBM_FP64};

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

/* splitmix64: a fixed seed, so every run checks the same cases. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static uint32_t float_bits(float f)
{
    uint32_t b;

    memcpy(&b, &f, sizeof b);
    return b;
}

static uint64_t double_bits(double d)
{
    uint64_t b;

    memcpy(&b, &d, sizeof b);
    return b;
}

/* A stored value: often +0/-0, often a special value (NaN, infinity,
 * subnormal, largest), often a small normal number so that min, max and the
 * histogram see ordinary data; otherwise random bits. */
static void random_element(enum tbm_precision prec, uint8_t *p)
{
    static const uint32_t f32[] = {0x7FC00000, 0x7F800001, 0xFFA00005, 0x7F800000, 0xFF800000,
                                   0x00000001, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF};
    static const uint16_t f16[] = {0x7E00, 0x7C01, 0xFD55, 0x7C00, 0xFC00,
                                   0x0001, 0x83FF, 0x3C00, 0x7BFF};
    static const uint16_t bf16[] = {0x7FC0, 0x7F81, 0xFFA5, 0x7F80, 0xFF80,
                                    0x0001, 0x807F, 0x3F80, 0x7F7F};
    static const uint64_t f64[] = {0x7FF8000000000000, 0x7FF0000000000001, 0xFFF4000012345678,
                                   0x7FF0000000000000, 0x0000000000000001, 0x3810000000000000,
                                   0x36A0000000000000, 0x47F0000000000000, 0x3FF0000010000000};
    size_t size = tbm_precision_size(prec);
    uint64_t r = rnd();
    uint64_t v;
    double d;

    if (r % 8 < 2) {
        v = r % 8 == 0 ? 0 : UINT64_C(1) << (8 * size - 1);
    } else if (r % 8 == 2) {
        r >>= 3;
        v = prec == TBM_FP32   ? f32[r % 9]
            : prec == TBM_FP16 ? f16[r % 9]
            : prec == TBM_BF16 ? bf16[r % 9]
                               : f64[r % 9];
    } else if (r % 8 < 6) {
        d = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8;
        v = prec == TBM_FP64   ? double_bits(d)
            : prec == TBM_FP32 ? float_bits((float)d)
            : prec == TBM_BF16 ? float_bits((float)d) >> 16
                               : 0x3C00 ^ (r >> 20 & 0x83FF);
    } else {
        v = rnd();
    }
    memcpy(p, &v, size); /* little-endian: the low bytes */
}

static void random_mask(uint8_t *mask, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) {
        uint64_t r = rnd();

        mask[i] = r % 16 == 0 ? 0xFF : r % 16 == 1 ? 0x00 : (uint8_t)(r >> 8);
    }
}

static size_t mask_bytes(uint32_t m, uint64_t count)
{
    return m == 0 ? 0 : (size_t)((count + m - 1) / m * tbm_mask_word_bytes(m));
}

/* Runs pass 1 and, where the precision has one, pass 2 with isa over [0,
 * count), cut into chunks of random whole groups (one chunk when whole is
 * set). m 0: no mask. The caller frees a. */
static void run_stats(enum tbm_isa isa, enum tbm_precision prec, const uint8_t *w,
                      const uint8_t *mask, uint32_t m, uint64_t count, bool whole,
                      struct tbm_stats_acc *a, struct tbm_stats_hist *h)
{
    size_t size = tbm_precision_size(prec);
    uint32_t g = m ? m : 1;

    assert_int_equal(tbm_stats_init(a, prec), 0);
    for (int pass = 0; pass < (tbm_stats_two_pass(prec) ? 2 : 1); pass++) {
        uint64_t done = 0;

        if (pass == 1)
            tbm_stats_hist_init(h, a);
        while (done < count) {
            uint64_t n = whole ? count : (1 + rnd() % 300) * g;
            const uint8_t *mk = mask ? mask + done / g * tbm_mask_word_bytes(g) : NULL;

            n = n < count - done ? n : count - done;
            if (pass == 0)
                tbm_stats_scan(isa, prec, w + done * size, mk, g, n, a);
            else
                tbm_stats_hist(isa, prec, w + done * size, mk, g, n, h);
            done += n;
        }
    }
}

/* The float32 values of the dense expansion, unmasked, by the reference. */
static float *values_of(enum tbm_precision prec, const uint8_t *w, uint64_t count)
{
    float *v = malloc((count ? count : 1) * sizeof *v);

    assert_non_null(v);
    tbm_expand(TBM_ISA_SCALAR, prec, w, NULL, 0, 0, count, v);
    return v;
}

static bool kept_model(const uint8_t *mask, uint32_t m, uint64_t i)
{
    uint32_t word = 0, bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;

    if (mask == NULL)
        return true;
    for (uint32_t b = 0; b < bytes; b++)
        word |= (uint32_t)mask[i / m * bytes + b] << (8 * b);
    return word >> (i % m) & 1;
}

/* The reference against element-by-element counts, min and max in IEEE
 * order (-0.0 below +0.0), the histogram edge by edge and the sums in long
 * double. */
static void check_model(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask, uint32_t m,
                        uint64_t count, const struct tbm_stats_result *r)
{
    float *v = values_of(prec, w, count);
    uint64_t kept = 0, zeros = 0, nan = 0, inf = 0, fin = 0, hist[TBM_STATS_BINS] = {0};
    float lo = INFINITY, hi = -INFINITY;
    long double sum = 0, abs_sum = 0, dev = 0, sum_abs = 0;

    for (uint64_t i = 0; i < count; i++) {
        float x = v[i];

        if (!kept_model(mask, m, i))
            continue;
        kept++;
        zeros += x == 0;
        nan += isnan(x) != 0;
        inf += isinf(x) != 0; /* glibc's isinf is -1 for -inf */
        if (!isfinite(x))
            continue;
        fin++;
        if (x < lo || (x == lo && signbit(x)))
            lo = x;
        if (x > hi || (x == hi && !signbit(x)))
            hi = x;
        sum += x;
        abs_sum += fabsl((long double)x);
    }
    assert_int_equal(r->count, count);
    assert_int_equal(r->kept, kept);
    assert_int_equal(r->zeros, zeros);
    assert_int_equal(r->nan, nan);
    assert_int_equal(r->inf, inf);
    assert_int_equal(r->finite, fin);
    assert_int_equal(r->has_finite, fin != 0);
    if (fin == 0) {
        free(v);
        return;
    }
    assert_int_equal(double_bits(r->min), double_bits(lo));
    assert_int_equal(double_bits(r->max), double_bits(hi));
    for (unsigned i = 0; i <= TBM_STATS_BINS; i++)
        assert_true(r->hist_edges[i] == (double)lo + ((double)hi - lo) * i / 32);
    for (uint64_t i = 0; i < count; i++) {
        float x = v[i];
        unsigned b = 0;

        if (!kept_model(mask, m, i) || !isfinite(x))
            continue;
        dev += ((long double)x - sum / fin) * ((long double)x - sum / fin);
        sum_abs += fabsl((long double)x);
        if (lo == hi) {
            b = TBM_STATS_BINS - 1;
        } else {
            while (b + 1 < TBM_STATS_BINS && x >= r->hist_edges[b + 1])
                b++;
        }
        assert_true(x >= r->hist_edges[b]);
        hist[b]++;
    }
    for (unsigned b = 0; b < TBM_STATS_BINS; b++)
        assert_int_equal(r->hist_counts[b], hist[b]);
    /* the header's bound, 2^-45 sum |x| + 2^-53 |S| per sum, with room */
    assert_true(fabsl(r->mean - sum / fin) <=
                0x1p-44L * sum_abs / fin + 0x1p-51L * fabsl(sum / fin));
    assert_true(fabsl(r->abs_mean - abs_sum / fin) <= 0x1p-43L * abs_sum / fin);
    assert_true(fabsl((long double)r->std * r->std - dev / fin) <=
                0x1p-40L * dev / fin + 0x1p-40L * (sum_abs / fin) * (sum_abs / fin) * 0x1p-20L);
    free(v);
}

static void assert_same_bytes(const void *a, const void *b, size_t n)
{
    assert_memory_equal(a, b, n);
}

static uint64_t pattern_count(const struct tbm_stats_acc *a, uint32_t p)
{
    return a->high[p] + a->low[p];
}

/* Pass 1 of two paths alike: every byte for fp32 and fp64; for fp16 and
 * bf16 the stream position and every pattern's count (not the spare
 * counters past them, which only the SIMD paths use). */
static void assert_same_acc(const struct tbm_stats_acc *a, const struct tbm_stats_acc *b)
{
    if (tbm_stats_two_pass(a->prec)) {
        assert_same_bytes(a, b, sizeof *a);
        return;
    }
    assert_int_equal(a->prec, b->prec);
    assert_int_equal(a->seen, b->seen);
    for (uint32_t p = 0; p < TBM_STATS_PATTERNS; p++)
        assert_int_equal(pattern_count(a, p), pattern_count(b, p));
}

/* The results of a finished run, and its table freed. */
static void finish(struct tbm_stats_acc *a, const struct tbm_stats_hist *h,
                   struct tbm_stats_result *r)
{
    tbm_stats_finish(a, tbm_stats_two_pass(a->prec) ? h : NULL, r);
    tbm_stats_free(a);
}

/* Every supported path, chunked at random, bit for bit against the
 * reference in one call; the reference against the model. */
static void check_paths(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask, uint32_t m,
                        uint64_t count)
{
    struct tbm_stats_acc ref_a, a;
    struct tbm_stats_hist ref_h, h;
    struct tbm_stats_result ref_r, r;

    run_stats(TBM_ISA_SCALAR, prec, w, mask, m, count, true, &ref_a, &ref_h);
    tbm_stats_finish(&ref_a, tbm_stats_two_pass(prec) ? &ref_h : NULL, &ref_r);
    check_model(prec, w, mask, m ? m : 1, count, &ref_r);
    for (size_t i = 0; i < 3; i++) {
        if (!tbm_isa_supported(isas[i]))
            continue;
        for (int whole = 0; whole < 2; whole++) {
            run_stats(isas[i], prec, w, mask, m, count, whole, &a, &h);
            assert_same_acc(&a, &ref_a);
            if (tbm_stats_two_pass(prec))
                assert_same_bytes(&h, &ref_h, sizeof h);
            finish(&a, &h, &r);
            assert_same_bytes(&r, &ref_r, sizeof r);
        }
    }
    tbm_stats_free(&ref_a);
}

static void test_stats_random(void **state)
{
    (void)state;
    for (size_t p = 0; p < 4; p++) {
        for (uint32_t m = 0; m <= 32; m++) {
            /* the last past two chunks of the SIMD table loops (16 Ki) */
            uint64_t counts[] = {1,
                                 15,
                                 17,
                                 64 * (m ? m : 1),
                                 1000 + rnd() % 5000,
                                 9000 + rnd() % 64,
                                 40000 + rnd() % 64};

            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                uint64_t count = counts[c];
                size_t size = tbm_precision_size(precs[p]);
                /* ending at a guard page: a load past either end faults */
                struct buf wb = alloc_buf(count * size, true, 0);
                struct buf mb = alloc_buf(mask_bytes(m, count), true, 0);
                uint8_t *w = wb.p, *mask = mb.p;

                for (uint64_t i = 0; i < count; i++)
                    random_element(precs[p], w + i * size);
                random_mask(mask, mask_bytes(m, count));
                check_paths(precs[p], w, m ? mask : NULL, m, count);
                if (c == 4 || c == 6) {
                    /* all kept, all pruned, then all kept NaN */
                    memset(mask, 0xFF, mask_bytes(m, count));
                    check_paths(precs[p], w, m ? mask : NULL, m, count);
                    memset(mask, 0, mask_bytes(m, count));
                    check_paths(precs[p], w, m ? mask : NULL, m, count);
                    memset(w, 0xFF, count * size);
                    check_paths(precs[p], w, NULL, 0, count);
                }
                free_buf(mb);
                free_buf(wb);
            }
        }
    }
}

/* Stores float values as fp32. */
static void check_floats(const float *x, size_t n, struct tbm_stats_result *out)
{
    uint8_t *w = malloc(n * 4);

    memcpy(w, x, n * 4);
    check_paths(TBM_FP32, w, NULL, 0, n);
    {
        struct tbm_stats_acc a;
        struct tbm_stats_hist h;

        run_stats(TBM_ISA_SCALAR, TBM_FP32, w, NULL, 0, n, true, &a, &h);
        finish(&a, &h, out);
    }
    free(w);
}

static void test_hist_edges(void **state)
{
    float x[200];
    struct tbm_stats_result r;

    (void)state;
    /* 0 .. 32: every value on an edge; 32 in the closed last bin */
    for (int i = 0; i <= 32; i++)
        x[i] = (float)i;
    check_floats(x, 33, &r);
    for (int i = 0; i < 31; i++)
        assert_int_equal(r.hist_counts[i], 1);
    assert_int_equal(r.hist_counts[31], 2);
    assert_true(r.hist_edges[32] == 32.0 && r.hist_edges[16] == 16.0);

    /* min == max: all in the last bin */
    for (int i = 0; i < 40; i++)
        x[i] = 0.1f;
    check_floats(x, 40, &r);
    assert_int_equal(r.hist_counts[31], 40);
    assert_int_equal(r.hist_counts[0], 0);
    assert_true(r.min == r.max && r.std == 0.0);

    /* -0.0 and +0.0: equal values, so min == max; min prints -0 */
    for (int i = 0; i < 40; i++)
        x[i] = i % 3 ? 0.0f : -0.0f;
    check_floats(x, 40, &r);
    assert_true(signbit(r.min) && !signbit(r.max));
    assert_int_equal(r.hist_counts[31], 40);
    assert_int_equal(r.zeros, 40);

    /* edges that are not floats, and values right at them: 0.1 steps */
    for (int i = 0; i < 200; i++)
        x[i] = (float)(i % 33) * 0.1f * ((i / 33) % 2 ? 1.0f : -1.0f);
    x[0] = -3.2f;
    x[1] = 3.2f;
    check_floats(x, 200, &r);

    /* one float spacing wide: edges inside one ulp */
    for (int i = 0; i < 100; i++)
        x[i] = i % 2 ? 1.0f : nextafterf(1.0f, 2.0f);
    check_floats(x, 100, &r);
    assert_int_equal(r.hist_counts[0], 50);
    assert_int_equal(r.hist_counts[31], 50);

    /* the whole float range: max - min overflows float, not double */
    for (int i = 0; i < 100; i++)
        x[i] = (float)((i % 2 ? 1 : -1) * ldexp(1.0, (i % 128)) * 1.5);
    x[2] = -FLT_MAX;
    x[3] = FLT_MAX;
    x[4] = 0x1p-149f;
    check_floats(x, 100, &r);
    assert_true(r.hist_edges[0] == -FLT_MAX && r.hist_edges[32] == FLT_MAX);
}

/* fp16 bits of a float (round to nearest even), by F16C's reference: the
 * hardware instruction would do, but this keeps the test on any CPU. */
static uint16_t to_half(float f)
{
    uint32_t b = float_bits(f), sign = b >> 16 & 0x8000;
    int e = (int)(b >> 23 & 0xFF) - 127 + 15;
    uint32_t mant = (b & 0x7FFFFF) | 0x800000;
    uint32_t shift, v, rest, half;

    if (e >= 31)
        return (uint16_t)(sign | 0x7C00);
    shift = e > 0 ? 13 : (uint32_t)(14 - e);
    if (shift > 24)
        return (uint16_t)sign;
    v = mant >> shift;
    rest = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    v += rest > half || (rest == half && (v & 1));
    /* v holds the implicit bit at 10 for normals: adding the exponent above
     * it carries a rounded-up mantissa into the exponent */
    return (uint16_t)(sign | (e > 0 ? ((uint32_t)(e - 1) << 10) + v : v));
}

/* 64 Mi fp16 values around 100 (so that sum x^2 - n mean^2 would cancel
 * 15 of the 16 digits), 2:4 mask: the reference's mean against the exact
 * integer sum (fp16 values are multiples of 2^-24 below 2^16), its std
 * against a long double two-pass one, within the header's bound. */
static void test_stats_large(void **state)
{
    const uint64_t count = UINT64_C(64) << 20;
    uint16_t *w = malloc(count * 2);
    uint8_t *mask = malloc(count / 4);
    struct tbm_stats_acc a;
    struct tbm_stats_result r;
    __int128 exact = 0, squares = 0;
    long double mean, dev, sum_abs = 0;
    uint64_t kept = 0;
    float *v = malloc(1024 * sizeof *v);

    (void)state;
    assert_non_null(w);
    assert_non_null(mask);
    assert_non_null(v);
    for (uint64_t i = 0; i < count; i++)
        w[i] = to_half(100.0f + (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1));
    for (uint64_t i = 0; i < count / 4; i++) {
        static const uint8_t pairs[6] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};

        mask[i] = pairs[rnd() % 6];
    }
    assert_int_equal(tbm_stats_init(&a, TBM_FP16), 0);
    tbm_stats_scan(TBM_ISA_SCALAR, TBM_FP16, w, mask, 4, count, &a);
    finish(&a, NULL, &r);

    for (uint64_t i = 0; i < count; i += 1024) {
        tbm_expand(TBM_ISA_SCALAR, TBM_FP16, w + i, NULL, 0, 0, 1024, v);
        for (unsigned k = 0; k < 1024; k++) {
            if (mask[(i + k) / 4] >> ((i + k) % 4) & 1) {
                __int128 q = (__int128)ldexp(v[k], 24);

                exact += q;
                squares += q * q;
                sum_abs += fabsl((long double)v[k]);
                kept++;
            }
        }
    }
    mean = ldexpl((long double)exact, -24) / kept;
    /* n sum (x - mean)^2 = sum x^2 - (sum x)^2 / n, exactly in integers:
     * n sum q^2 - (sum q)^2 < 2^25 2^87, with x = q 2^-24 */
    dev = ldexpl((long double)((__int128)kept * squares - exact * exact), -48) / kept;
    assert_int_equal(r.kept, kept);
    assert_int_equal(r.finite, kept);
    /* mean: 2^-45 sum |x| / n + 2^-53 |mean| + the division's 2^-53 */
    assert_true(fabsl(r.mean - mean) <= 0x1p-45L * sum_abs / kept + 0x1p-52L * fabsl(mean));
    /* var within 2^-44 var (the exact one rounded to long double) */
    assert_true(fabsl((long double)r.std * r.std - dev / kept) <= 0x1p-43L * dev / kept);
    /* and plain float or naive double sums of squares would miss this */
    assert_true(fabsl(r.std - sqrtl(dev / kept)) <= 0x1p-44L * sqrtl(dev / kept));
    free(v);
    free(mask);
    free(w);
}

/* 2^62 first, -2^62 last, ones between, fp32: every lane's compensated sum
 * holds 2^62 while 256 ones come in at each flush, a quarter of its ulp,
 * which plain sums would lose every time (mean about 0). The partial sums
 * lose only the ones next to the big values, so the mean is (n - 2) / n
 * within 2 * 255 / n. Every path gives the same bits. */
static void test_stats_compensated(void **state)
{
    const size_t n = 16 * 4096 * 4;
    float *x = malloc(n * sizeof *x);
    struct tbm_stats_result r;

    (void)state;
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f;
    x[0] = 0x1p62f;
    x[n - 16] = -0x1p62f;
    check_floats(x, n, &r);
    assert_true(fabs(r.mean - (double)(n - 2) / n) <= 510.0 / n);
    free(x);
}

/* fp16 and bf16 sums are exact before their one rounding: the largest
 * values of both signs cancel, leaving the smallest step, which a double
 * sum of the terms (or a compensated one) loses under them. */
static void test_stats_exact_sums(void **state)
{
    static const uint16_t f16[] = {0x7BFF, 0xFBFF, 0x0001, 0x7BFF, 0x0001, 0xFBFF, 0x0001};
    static const uint16_t bf16[] = {0x7F7F, 0x0001, 0xFF7F, 0x0001, 0x7F7F, 0x0001,
                                    0xFF7F, 0x0001, 0x7F7F, 0xFF7F, 0x0001};
    struct tbm_stats_acc a;
    struct tbm_stats_hist h;
    struct tbm_stats_result r;

    (void)state;
    for (size_t i = 0; i < 3; i++) {
        if (!tbm_isa_supported(isas[i]))
            continue;
        run_stats(isas[i], TBM_FP16, (const uint8_t *)f16, NULL, 0, 7, true, &a, &h);
        finish(&a, &h, &r);
        assert_true(r.mean == ldexp(3.0, -24) / 7);
        assert_true(r.abs_mean == (4 * 65504.0 + ldexp(3.0, -24)) / 7);
        run_stats(isas[i], TBM_BF16, (const uint8_t *)bf16, NULL, 0, 11, true, &a, &h);
        finish(&a, &h, &r);
        assert_true(r.mean == ldexp(5.0, -133) / 11);
    }
}

/* A table whose 16-bit counter of 1.0 is about to wrap: high takes the
 * 65536. The table is set as 2^32 + 65530 kept ones of 1.0 would leave it
 * (more than 32 bits, which the count keeps). */
static void test_stats_wrap(void **state)
{
    const uint64_t n = 3 * 4096 + 5, before = (UINT64_C(1) << 32) + 65530;
    uint16_t *w = malloc(n * 2);
    uint8_t *mask = malloc(n / 4 + 1);
    struct tbm_stats_result r;

    (void)state;
    assert_non_null(w);
    assert_non_null(mask);
    for (uint64_t i = 0; i < n; i++)
        w[i] = 0x3C00; /* 1.0 */
    memset(mask, 0x0F, n / 4 + 1);
    for (size_t i = 0; i < 3; i++) {
        struct tbm_stats_acc a;

        if (!tbm_isa_supported(isas[i]))
            continue;
        for (int masked = 0; masked < 2; masked++) {
            assert_int_equal(tbm_stats_init(&a, TBM_FP16), 0);
            a.high[0x3C00] = before - before % 65536;
            a.low[0x3C00] = (uint16_t)(before % 65536);
            tbm_stats_scan(isas[i], TBM_FP16, w, masked ? mask : NULL, 4, n, &a);
            finish(&a, NULL, &r);
            assert_int_equal(r.kept, before + n);
            assert_int_equal(r.hist_counts[TBM_STATS_BINS - 1], before + n);
            assert_true(r.mean == 1.0 && r.std == 0.0);
        }
    }
    free(mask);
    free(w);
}

/* Wraps through every way the SIMD levels count a round, with a mask and
 * without: blocks of 32 elements alternate between a round that starts
 * with a value found nowhere else in it (3.0: counted one by one) and one
 * whose first value repeats (1.0: its repeats added at once, the others
 * one by one). Each counter is set a few counts short of wrapping, so that
 * its first wrap falls in the first rounds: 2.0 one by one in a round of
 * the first kind, 1.0 added at once and 4.0 one by one in one of the
 * second, 3.0 later on. */
static void test_stats_wrap_rounds(void **state)
{
    enum { ONE = 0x3C00, TWO = 0x4000, THREE = 0x4200, FOUR = 0x4400 };
    static const uint16_t values[] = {ONE, TWO, THREE, FOUR};
    static const uint16_t start[] = {65536 - 20, 65536 - 10, 65536 - 100, 65536 - 3};
    const uint64_t n = 3 * 4096 + 5;
    uint16_t *w = malloc(n * 2);
    uint8_t *mask = malloc(n / 4 + 1);
    uint64_t want[4] = {0};
    struct tbm_stats_result r;

    (void)state;
    assert_non_null(w);
    assert_non_null(mask);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t q = i % 32;

        if (i / 32 % 2 == 0) /* 3.0, then 1.0 and 2.0 in turn */
            w[i] = q == 0 ? THREE : q % 2 ? ONE : TWO;
        else /* 1.0 at every other place, 2.0 and 4.0 between */
            w[i] = q % 2 == 0 ? ONE : q % 4 == 1 ? TWO : FOUR;
        for (size_t v = 0; v < 4; v++)
            want[v] += w[i] == values[v];
    }
    memset(mask, 0x0F, n / 4 + 1); /* m = 4, every element kept */
    for (size_t i = 0; i < 3; i++) {
        struct tbm_stats_acc a;

        if (!tbm_isa_supported(isas[i]))
            continue;
        for (int masked = 0; masked < 2; masked++) {
            assert_int_equal(tbm_stats_init(&a, TBM_FP16), 0);
            for (size_t v = 0; v < 4; v++)
                a.low[values[v]] = start[v];
            tbm_stats_scan(isas[i], TBM_FP16, w, masked ? mask : NULL, 4, n, &a);
            for (size_t v = 0; v < 4; v++)
                assert_int_equal(a.high[values[v]] + a.low[values[v]], start[v] + want[v]);
            finish(&a, NULL, &r);
            assert_int_equal(r.kept, 65536 * 4 - 133 + n);
        }
    }
    free(mask);
    free(w);
}

static void test_mask_kept(void **state)
{
    (void)state;
    for (uint32_t m = 1; m <= 32; m++) {
        uint64_t count = 5000 + rnd() % 1000;
        size_t bytes = mask_bytes(m, count);
        uint8_t *mask = malloc(bytes);

        random_mask(mask, bytes);
        for (int t = 0; t < 200; t++) {
            uint64_t first = rnd() % count;
            uint64_t n = t % 4 == 0 ? count - first : rnd() % (count - first + 1);
            const uint8_t *at = mask + first / m * tbm_mask_word_bytes(m);
            uint64_t want = 0;

            for (uint64_t i = first; i < first + n; i++)
                want += kept_model(mask, m, i);
            for (size_t i = 0; i < 3; i++) {
                if (tbm_isa_supported(isas[i]))
                    assert_int_equal(tbm_mask_kept(isas[i], at, m, first, n), want);
            }
        }
        assert_int_equal(tbm_mask_kept(TBM_ISA_SCALAR, NULL, m, 3, 77), 77);
        free(mask);
    }
}

/* --- block images --- */

static void test_image_dims(void **state)
{
    uint32_t w, h;

    (void)state;
    tbm_image_dims(1024, 1, &w, &h);
    assert_true(w == 1 && h == 1024);
    tbm_image_dims(1025, 3000, &w, &h);
    assert_true(h == 513 && w == 1000);
    tbm_image_dims(2049, 4096, &w, &h);
    assert_true(h == 683 && w == 1024);
    tbm_image_dims(0, 5, &w, &h);
    assert_true(w == 1 && h == 1);
    assert_int_equal(tbm_image_mask_pixel(1, 2), 128); /* 127.5 rounds up */
    assert_int_equal(tbm_image_mask_pixel(1, 3), 85);
    assert_int_equal(tbm_image_mask_pixel(3, 3), 255);
    assert_int_equal(tbm_image_mask_pixel(0, 0), 0);
    assert_int_equal(tbm_image_weight_pixel(0, 1, 2), 0);
    assert_int_equal(tbm_image_weight_pixel(1, 1, 2), 1);
    assert_int_equal(tbm_image_weight_pixel(2, 1, 2), 255);
    assert_int_equal(tbm_image_weight_pixel(sqrt(2), 1, 2), 128);
    assert_int_equal(tbm_image_weight_pixel(5, 5, 5), 255);
}

/* A 2050 x 1030 fp32 matrix with a 3:7 mask (groups straddle rows), fed in
 * odd pieces, against block sums computed directly; the same image on
 * every path. */
static void test_image_blocks(void **state)
{
    const uint64_t rows = 2050, cols = 1030, n = rows * cols;
    const uint32_t m = 7;
    float *x = malloc(n * sizeof *x);
    uint8_t *mask = malloc(mask_bytes(m, n));
    uint8_t *ref_w = NULL, *ref_m = NULL;

    (void)state;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rnd();

        x[i] = r % 97 == 0   ? NAN
               : r % 89 == 0 ? -INFINITY
                             : (float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-20f;
    }
    for (uint64_t i = 0; i < n / 3000; i++)
        x[rnd() % n] = 0; /* some zero blocks are unlikely; see below */
    for (uint64_t i = 0; i < 1030 * 3; i++)
        x[i] = 0.0f; /* block row 0 is all zeros: weight pixel 0 */
    random_mask(mask, mask_bytes(m, n));
    for (size_t i = 0; i < 3; i++) {
        struct tbm_image_acc a;
        uint8_t *wpx;
        uint64_t done = 0;

        if (!tbm_isa_supported(isas[i]))
            continue;
        assert_int_equal(tbm_image_init(&a, rows, cols), 0);
        assert_true(a.width == 515 && a.height == 684 && a.bw == 2 && a.bh == 3);
        while (done < n) {
            uint64_t k = 1 + rnd() % 5000;

            k = k < n - done ? k : n - done;
            tbm_image_add(&a, isas[i], TBM_FP32, x + done, mask + done / m, m, k);
            done += k;
        }
        wpx = malloc((size_t)a.width * a.height);
        tbm_image_weights(&a, wpx);
        if (ref_w == NULL) {
            double lo = INFINITY, hi = 0, *means = calloc((size_t)a.width * a.height, 8);

            for (uint32_t py = 0; py < a.height; py++) {
                for (uint32_t px = 0; px < a.width; px++) {
                    uint64_t kept = 0, fin = 0, elems = 0;
                    double s = 0;

                    for (uint64_t r = py * 3; r < py * 3 + 3 && r < rows; r++) {
                        for (uint64_t c = px * 2; c < px * 2 + 2 && c < cols; c++) {
                            uint64_t e = r * cols + c;
                            bool k = kept_model(mask, m, e);
                            float d = k ? x[e] : 0.0f;

                            elems++;
                            kept += k;
                            if (isfinite(d)) {
                                fin++;
                                s += fabs(d);
                            }
                        }
                    }
                    assert_int_equal(a.mask_px[py * a.width + px],
                                     (uint8_t)floor(255.0 * kept / elems + 0.5));
                    means[py * a.width + px] = fin ? s / fin : 0;
                }
            }
            for (size_t p = 0; p < (size_t)a.width * a.height; p++) {
                if (means[p] > 0) {
                    lo = fmin(lo, means[p]);
                    hi = fmax(hi, means[p]);
                }
            }
            for (size_t p = 0; p < (size_t)a.width * a.height; p++) {
                double mv = means[p];
                int want =
                    mv == 0 ? 0 : 1 + (int)round(254 * (log(mv) - log(lo)) / (log(hi) - log(lo)));

                /* the model sums in another order: allow a tie's flip */
                assert_true(abs(wpx[p] - want) <= 1);
            }
            assert_int_equal(wpx[0], 0);
            free(means);
            ref_w = wpx;
            ref_m = malloc((size_t)a.width * a.height);
            memcpy(ref_m, a.mask_px, (size_t)a.width * a.height);
        } else {
            assert_memory_equal(wpx, ref_w, (size_t)a.width * a.height);
            assert_memory_equal(a.mask_px, ref_m, (size_t)a.width * a.height);
            free(wpx);
        }
        tbm_image_free(&a);
    }
    free(ref_w);
    free(ref_m);
    free(mask);
    free(x);
}

/* --- PNG --- */

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decodes a PNG as a reader would: chunk by chunk with their CRCs, the
 * IDATs joined and inflated by zlib (which checks the Adler-32), scanlines
 * of filter 0. Returns the pixels; *idats counts the IDAT chunks. */
static uint8_t *decode_png(const uint8_t *png, size_t size, uint32_t *w, uint32_t *h,
                           unsigned *idats)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    uint8_t *z = malloc(size), *raw, *px;
    size_t zlen = 0, off = 8;
    uLongf rawlen;
    bool end = false;

    assert_memory_equal(png, sig, 8);
    *idats = 0;
    while (!end) {
        uint32_t len = get32(png + off);

        assert_true(off + 12 + len <= size);
        assert_int_equal(crc32(0, png + off + 4, len + 4), get32(png + off + 8 + len));
        if (memcmp(png + off + 4, "IHDR", 4) == 0) {
            assert_int_equal(len, 13);
            assert_int_equal(off, 8);
            *w = get32(png + off + 8);
            *h = get32(png + off + 12);
            assert_memory_equal(png + off + 16, ((const uint8_t[]){8, 0, 0, 0, 0}), 5);
        } else if (memcmp(png + off + 4, "IDAT", 4) == 0) {
            memcpy(z + zlen, png + off + 8, len);
            zlen += len;
            ++*idats;
        } else {
            assert_memory_equal(png + off + 4, "IEND", 4);
            assert_int_equal(len, 0);
            end = true;
        }
        off += 12 + len;
    }
    assert_int_equal(off, size);
    rawlen = (uLongf)*h * (*w + 1);
    raw = malloc(rawlen + 1);
    {
        uLongf got = rawlen + 1;

        assert_int_equal(uncompress(raw, &got, z, zlen), Z_OK);
        assert_int_equal(got, rawlen);
    }
    px = malloc((size_t)*w * *h);
    for (uint32_t y = 0; y < *h; y++) {
        assert_int_equal(raw[y * (*w + 1)], 0);
        memcpy(px + (size_t)y * *w, raw + y * (*w + 1) + 1, *w);
    }
    free(raw);
    free(z);
    return px;
}

static void check_png(uint32_t width, uint32_t height, unsigned min_idats)
{
    size_t pixels = (size_t)width * height;
    uint8_t *px = malloc(pixels ? pixels : 1);
    uint64_t size = tbm_png_size(width, height);
    uint8_t *png = malloc(size + 16), *got;
    uint32_t w = 0, h = 0;
    unsigned idats;

    for (size_t i = 0; i < pixels; i++)
        px[i] = (uint8_t)rnd();
    memset(png, 0xEE, size + 16);
    tbm_png_write(px, width, height, png);
    for (int i = 0; i < 16; i++)
        assert_int_equal(png[size + i], 0xEE); /* nothing past the size */
    got = decode_png(png, size, &w, &h, &idats);
    assert_true(idats >= min_idats);
    if (pixels == 0) {
        assert_true(w == 1 && h == 1 && got[0] == 0);
    } else {
        assert_true(w == width && h == height);
        assert_memory_equal(got, px, pixels);
    }
    free(got);
    free(png);
    free(px);
}

static void test_png(void **state)
{
    (void)state;
    check_png(0, 0, 1);
    check_png(0, 7, 1);
    check_png(1, 1, 1);
    check_png(3, 5, 1);
    check_png(255, 257, 1); /* 65792 raw bytes: two stored blocks */
    check_png(65534, 1, 1); /* one block exactly full: 65535 raw bytes */
    check_png(1024, 64, 2); /* several blocks, a block across a chunk */
    check_png(1024, 1024, 16);
    check_png(1, 1024, 1);
    check_png(777, 333, 4);
    /* the size by its parts for one case: 8 + 25 + 12 per IDAT + zlib + 12 */
    assert_int_equal(tbm_png_size(3, 5), 8 + 25 + 12 + (2 + 5 + 20 + 4) + 12);
    assert_int_equal(tbm_png_size(0, 0), tbm_png_size(1, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_random),
        cmocka_unit_test(test_hist_edges),
        cmocka_unit_test(test_stats_large),
        cmocka_unit_test(test_stats_compensated),
        cmocka_unit_test(test_stats_exact_sums),
        cmocka_unit_test(test_stats_wrap),
        cmocka_unit_test(test_stats_wrap_rounds),
        cmocka_unit_test(test_mask_kept),
        cmocka_unit_test(test_image_dims),
        cmocka_unit_test(test_image_blocks),
        cmocka_unit_test(test_png),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
