/* Unit tests of the N:M sparse matmul: the portable path against a naive
 * double-precision product, every SIMD path against the portable one bit
 * for bit, exact conversions, the compressed layout and hostile sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spmm_internal.h"
#include "tbm/kernels.h"

/* How a test matrix's mask is made. */
enum mask_mode {
    MASK_EXACT,  /* every group keeps exactly n elements */
    MASK_RANDOM, /* every bit a coin toss: groups over- and under-full */
    MASK_NONE,   /* no mask: every element kept */
};

struct spec {
    enum tbm_precision prec;
    enum mask_mode mode;
    uint32_t m;
    uint32_t n;
    uint64_t rows;
    uint64_t cols;
    uint64_t seed;
};

/* A generated matrix: stored weights, a clean mask (no bits at positions
 * >= m or past the last element), the same mask with those bits random,
 * and the weights as float32, pruned ones 0. */
struct matrix {
    struct spec spec;
    uint8_t *weights;
    uint8_t *mask;
    uint8_t *junk_mask;
    float *dense;
    uint64_t *kept; /* per row */
};

static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);

    z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9u;
    z = (z ^ z >> 27) * 0x94D049BB133111EBu;
    return z ^ z >> 31;
}

static float bits_to_float(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t float_bits(float f)
{
    uint32_t bits;

    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static size_t precision_bytes(enum tbm_precision prec)
{
    return prec == TBM_FP64 ? 8 : prec == TBM_FP32 ? 4 : 2;
}

/* A finite random weight in its stored bits, and its float32 value computed
 * independently of the kernels' conversion code. Some fp16 values are
 * subnormal. */
static uint64_t random_weight(enum tbm_precision prec, uint64_t *rng, float *value)
{
    uint64_t r = next_random(rng);
    uint32_t sign = (uint32_t)(r & 1);
    uint16_t h;
    double d;

    switch (prec) {
    case TBM_FP16:
        h = (uint16_t)(sign << 15 | (r >> 8 & 7) << 10 | (r >> 16 & 0x3FF));
        if ((r >> 4 & 7) != 0)
            h = (uint16_t)(h + (10u << 10));
        *value = (float)(((h & 0x7C00) == 0 ? ldexp(h & 0x3FF, -24)
                                            : ldexp(0x400 | (h & 0x3FF), (h >> 10 & 0x1F) - 25)) *
                         (sign ? -1 : 1));
        return h;
    case TBM_BF16:
        h = (uint16_t)(sign << 15 | (120 + (r >> 8 & 15)) << 7 | (r >> 16 & 0x7F));
        *value = bits_to_float((uint32_t)h << 16);
        return h;
    case TBM_FP64:
        d = ldexp((double)(r >> 11), -51) - 2.0;
        *value = (float)d;
        memcpy(&r, &d, sizeof r);
        return r;
    case TBM_FP32:
        break;
    }
    *value = (float)(ldexp((double)(r >> 40), -22) - 2.0);
    return float_bits(*value);
}

static void store_le(uint8_t *p, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Group word bits: n of the m positions chosen at random, or coin tosses. */
static uint32_t random_group(const struct spec *s, uint64_t *rng)
{
    uint32_t word = 0;

    if (s->mode == MASK_RANDOM)
        return (uint32_t)next_random(rng) & (uint32_t)((UINT64_C(1) << s->m) - 1);
    for (uint32_t kept = 0; kept < s->n;) {
        uint32_t bit = 1u << (next_random(rng) % s->m);

        if ((word & bit) == 0) {
            word |= bit;
            kept++;
        }
    }
    return word;
}

static void make_masks(struct matrix *mx, uint64_t *rng)
{
    const struct spec *s = &mx->spec;
    uint64_t count = s->rows * s->cols;
    uint64_t groups = (count + s->m - 1) / s->m;
    uint32_t bytes = tbm_mask_word_bytes(s->m);

    mx->mask = calloc(groups * bytes + 1, 1);
    mx->junk_mask = calloc(groups * bytes + 1, 1);
    assert_non_null(mx->mask);
    assert_non_null(mx->junk_mask);
    for (uint64_t g = 0; g < groups; g++) {
        uint32_t word = random_group(s, rng);
        uint64_t in_group = count - g * s->m < s->m ? count - g * s->m : s->m;
        uint32_t valid = (uint32_t)((UINT64_C(1) << in_group) - 1);

        store_le(mx->mask + g * bytes, word & valid, bytes);
        store_le(mx->junk_mask + g * bytes, (word & valid) | ((uint32_t)next_random(rng) & ~valid),
                 bytes);
    }
}

static int mask_bit(const struct matrix *mx, uint64_t i)
{
    uint32_t bytes = tbm_mask_word_bytes(mx->spec.m);
    uint64_t g = i / mx->spec.m;
    uint32_t word = 0;

    if (mx->spec.mode == MASK_NONE)
        return 1;
    for (uint32_t b = 0; b < bytes; b++)
        word |= (uint32_t)mx->mask[g * bytes + b] << (8 * b);
    return (int)(word >> (i % mx->spec.m) & 1);
}

static void make_matrix(struct matrix *mx, const struct spec *s)
{
    uint64_t rng = s->seed;
    uint64_t count = s->rows * s->cols;
    size_t eb = precision_bytes(s->prec);

    memset(mx, 0, sizeof *mx);
    mx->spec = *s;
    mx->weights = malloc(count * eb + 1);
    mx->dense = malloc(count * sizeof(float) + 1);
    mx->kept = calloc(s->rows + 1, sizeof(uint64_t));
    assert_non_null(mx->weights);
    assert_non_null(mx->dense);
    assert_non_null(mx->kept);
    if (s->mode != MASK_NONE)
        make_masks(mx, &rng);
    for (uint64_t i = 0; i < count; i++) {
        float v;

        store_le(mx->weights + i * eb, random_weight(s->prec, &rng, &v), eb);
        mx->dense[i] = mask_bit(mx, i) ? v : 0.0f;
        mx->kept[i / s->cols] += (uint64_t)mask_bit(mx, i);
    }
}

static void free_matrix(struct matrix *mx)
{
    free(mx->weights);
    free(mx->mask);
    free(mx->junk_mask);
    free(mx->dense);
    free(mx->kept);
}

static float *random_x(uint64_t cols, uint32_t batch, uint64_t seed)
{
    float *x = malloc(cols * batch * sizeof(float) + 1);

    assert_non_null(x);
    for (uint64_t i = 0; i < cols * batch; i++)
        x[i] = (float)(ldexp((double)(next_random(&seed) >> 40), -23) - 1.0);
    return x;
}

/* y filled with a NaN pattern the kernels never write, so that an output
 * left unwritten shows. */
static float *poisoned_y(uint64_t rows, uint32_t batch)
{
    float *y = malloc(rows * batch * sizeof(float) + 1);

    assert_non_null(y);
    memset(y, 0xFF, rows * batch * sizeof(float));
    return y;
}

static struct tbm_nm_matrix *pack(const struct matrix *mx, const uint8_t *mask)
{
    struct tbm_nm_matrix *w = NULL;

    assert_int_equal(
        tbm_nm_pack(mx->spec.prec, mx->weights, mask, mx->spec.m, mx->spec.rows, mx->spec.cols, &w),
        0);
    assert_non_null(w);
    return w;
}

/* The specs every comparison runs on: each m from 1 to 32 with cols not a
 * multiple of m, exact and random masks, every precision; then larger
 * regular matrices (several gangs of blocks, full windows) and masks
 * left out. */
static size_t make_specs(struct spec *out)
{
    static const struct spec fixed[] = {
        {TBM_FP16, MASK_EXACT, 4, 2, 149, 512, 1},   {TBM_FP16, MASK_EXACT, 4, 1, 83, 300, 2},
        {TBM_BF16, MASK_EXACT, 32, 16, 70, 1000, 3}, {TBM_FP32, MASK_EXACT, 8, 3, 64, 64, 4},
        {TBM_FP64, MASK_EXACT, 3, 1, 33, 100, 5},    {TBM_FP32, MASK_NONE, 1, 1, 37, 45, 6},
        {TBM_FP16, MASK_NONE, 1, 1, 5, 3, 7},        {TBM_BF16, MASK_RANDOM, 16, 0, 17, 1, 8},
        {TBM_FP16, MASK_RANDOM, 7, 0, 1, 129, 9},    {TBM_FP32, MASK_EXACT, 4, 4, 16, 16, 10},
    };
    uint64_t rng = 42;
    size_t n = 0;

    for (uint32_t m = 1; m <= 32; m++) {
        for (unsigned prec = TBM_FP32; prec <= TBM_FP64; prec++) {
            for (unsigned mode = MASK_EXACT; mode <= MASK_RANDOM; mode++) {
                struct spec *s = &out[n++];

                s->prec = (enum tbm_precision)prec;
                s->mode = (enum mask_mode)mode;
                s->m = m;
                s->n = (uint32_t)(next_random(&rng) % (m + 1));
                s->rows = 1 + next_random(&rng) % 40;
                s->cols =
                    m * (1 + next_random(&rng) % 5) + (m > 1 ? 1 + next_random(&rng) % (m - 1) : 0);
                s->seed = next_random(&rng);
            }
        }
    }
    memcpy(out + n, fixed, sizeof fixed);
    return n + sizeof fixed / sizeof fixed[0];
}

#define MAX_SPECS (32 * 4 * 2 + 10)
#define MAX_BATCH 17

static void describe(const struct spec *s, uint32_t batch, char *buf, size_t size)
{
    snprintf(buf, size, "prec %d mode %d %u:%u rows %llu cols %llu batch %u", (int)s->prec,
             (int)s->mode, s->n, s->m, (unsigned long long)s->rows, (unsigned long long)s->cols,
             batch);
}

/* The portable product against a double-precision one: a chain of n fmaf
 * is within about n units of roundoff of the sum of |products|. */
static void check_against_naive(const struct matrix *mx, const float *x, uint32_t batch,
                                const float *y)
{
    const struct spec *s = &mx->spec;
    char what[128];

    for (uint64_t r = 0; r < s->rows; r++) {
        for (uint32_t j = 0; j < batch; j++) {
            double sum = 0, magnitude = 0, tol;

            for (uint64_t c = 0; c < s->cols; c++) {
                double p = (double)mx->dense[r * s->cols + c] * x[c * batch + j];

                sum += p;
                magnitude += fabs(p);
            }
            tol = (double)(mx->kept[r] + 1) * ldexp(magnitude, -24) + 0x1p-140;
            if (fabs(y[r * batch + j] - sum) > tol) {
                describe(s, batch, what, sizeof what);
                fail_msg("%s: y[%llu][%u] = %.9g, naive %.9g", what, (unsigned long long)r, j,
                         (double)y[r * batch + j], sum);
            }
        }
    }
}

static void test_scalar_matches_naive(void **state)
{
    struct spec specs[MAX_SPECS];
    size_t count = make_specs(specs);

    (void)state;
    for (size_t i = 0; i < count; i++) {
        struct matrix mx;
        struct tbm_nm_matrix *w;

        make_matrix(&mx, &specs[i]);
        w = pack(&mx, mx.mask);
        for (uint32_t batch = 1; batch <= MAX_BATCH; batch++) {
            float *x = random_x(specs[i].cols, batch, specs[i].seed + batch);
            float *y = poisoned_y(specs[i].rows, batch);

            tbm_spmm(TBM_ISA_SCALAR, w, x, batch, y);
            check_against_naive(&mx, x, batch, y);
            free(x);
            free(y);
        }
        tbm_nm_free(w);
        free_matrix(&mx);
    }
}

/* Mask bits at positions >= m, and past the last element, change nothing. */
static void test_junk_mask_bits_ignored(void **state)
{
    struct spec specs[MAX_SPECS];
    size_t count = make_specs(specs);

    (void)state;
    for (size_t i = 0; i < count; i++) {
        struct matrix mx;
        struct tbm_nm_matrix *clean, *junk;
        uint32_t batch = 1 + (uint32_t)(i % MAX_BATCH);
        float *x, *y_clean, *y_junk;

        if (specs[i].mode == MASK_NONE)
            continue;
        make_matrix(&mx, &specs[i]);
        clean = pack(&mx, mx.mask);
        junk = pack(&mx, mx.junk_mask);
        x = random_x(specs[i].cols, batch, specs[i].seed);
        y_clean = poisoned_y(specs[i].rows, batch);
        y_junk = poisoned_y(specs[i].rows, batch);
        tbm_spmm(TBM_ISA_SCALAR, clean, x, batch, y_clean);
        tbm_spmm(TBM_ISA_SCALAR, junk, x, batch, y_junk);
        assert_memory_equal(y_clean, y_junk, specs[i].rows * batch * sizeof(float));
        free(x);
        free(y_clean);
        free(y_junk);
        tbm_nm_free(clean);
        tbm_nm_free(junk);
        free_matrix(&mx);
    }
}

static void check_level_matches_scalar(enum tbm_isa isa)
{
    struct spec specs[MAX_SPECS];
    size_t count = make_specs(specs);
    char what[128];

    if (!tbm_isa_supported(isa))
        skip();
    for (size_t i = 0; i < count; i++) {
        struct matrix mx;
        struct tbm_nm_matrix *w;

        make_matrix(&mx, &specs[i]);
        w = pack(&mx, specs[i].mode == MASK_NONE ? NULL : mx.junk_mask);
        for (uint32_t batch = 1; batch <= MAX_BATCH; batch++) {
            size_t bytes = specs[i].rows * batch * sizeof(float);
            float *x = random_x(specs[i].cols, batch, specs[i].seed + batch);
            float *want = poisoned_y(specs[i].rows, batch);
            float *got = poisoned_y(specs[i].rows, batch);

            tbm_spmm(TBM_ISA_SCALAR, w, x, batch, want);
            tbm_spmm(isa, w, x, batch, got);
            if (memcmp(want, got, bytes) != 0) {
                describe(&specs[i], batch, what, sizeof what);
                fail_msg("%s: %s differs from scalar", tbm_isa_name(isa), what);
            }
            free(x);
            free(want);
            free(got);
        }
        tbm_nm_free(w);
        free_matrix(&mx);
    }
}

static void test_avx2_matches_scalar(void **state)
{
    (void)state;
    check_level_matches_scalar(TBM_ISA_AVX2);
}

static void test_avx512_matches_scalar(void **state)
{
    (void)state;
    check_level_matches_scalar(TBM_ISA_AVX512);
}

/* Stored bits of one element and the float32 bits a product by 1.0 gives:
 * the value itself, except that -0 + +0 is +0 and a NaN is TBM_NM_NAN. */
struct conversion {
    uint64_t stored;
    uint32_t want;
};

static const struct conversion fp16_cases[] = {
    {0x3C00, 0x3F800000}, /* 1 */
    {0xFBFF, 0xC77FE000}, /* -65504 */
    {0x0001, 0x33800000}, /* smallest subnormal */
    {0x03FF, 0x387FC000}, /* largest subnormal */
    {0x0400, 0x38800000}, /* smallest normal */
    {0x8000, 0x00000000}, /* -0 */
    {0x7C00, 0x7F800000}, /* inf */
    {0xFC00, 0xFF800000}, /* -inf */
    {0x7E00, TBM_NM_NAN}, /* quiet NaN */
    {0xFC01, TBM_NM_NAN}, /* signalling NaN */
};

static const struct conversion bf16_cases[] = {
    {0x3F80, 0x3F800000}, {0x0001, 0x00010000}, {0x807F, 0x807F0000},
    {0xFF80, 0xFF800000}, {0x7FC1, TBM_NM_NAN}, {0xFF81, TBM_NM_NAN},
};

static const struct conversion fp32_cases[] = {
    {0x00000001, 0x00000001}, {0x80000001, 0x80000001}, {0x7F7FFFFF, 0x7F7FFFFF},
    {0x80000000, 0x00000000}, {0xFF800000, 0xFF800000}, {0x7F800001, TBM_NM_NAN},
};

static const struct conversion fp64_cases[] = {
    {0x3FD5555555555555, 0x3EAAAAAB}, /* 1/3 rounds up */
    {0x36A0000000000000, 0x00000001}, /* 2^-149 */
    {0x3690000000000000, 0x00000000}, /* 2^-150: a tie, to even */
    {0x3690000000000001, 0x00000001}, /* just above the tie */
    {0x47EFFFFFE0000000, 0x7F7FFFFF}, /* FLT_MAX */
    {0x47EFFFFFEFFFFFFF, 0x7F7FFFFF}, /* just below the tie with 2^128 */
    {0x47EFFFFFF0000000, 0x7F800000}, /* the tie: to even, inf */
    {0xC7F0000000000000, 0xFF800000}, /* -2^128 */
    {0x3FF0000010000000, 0x3F800000}, /* 1 + 2^-24: a tie, to even */
    {0x3FF0000030000000, 0x3F800002}, /* 1 + 3 * 2^-24: a tie, to even */
    {0x7FF0000000000001, TBM_NM_NAN},
};

/* Each case a row that keeps one element, multiplied by x = 1.0 there; the
 * other columns of x are NaN, to show that no pruned weight is read. */
static void check_conversions(enum tbm_precision prec, const struct conversion *cases, size_t count)
{
    const uint32_t m = 3, cols = 5;
    size_t eb = precision_bytes(prec);
    uint8_t weights[16 * 5 * 8] = {0};
    uint8_t mask[16 * 5 / 3 + 1];
    float x[5], y[16];
    struct tbm_nm_matrix *w;

    assert_true(count <= 16);
    memset(mask, 0, sizeof mask);
    for (uint32_t c = 0; c < cols; c++)
        x[c] = bits_to_float(0x7FC00001);
    x[2] = 1.0f;
    for (size_t r = 0; r < count; r++) {
        uint64_t i = r * cols + 2;

        for (uint32_t c = 0; c < cols; c++)
            store_le(weights + (r * cols + c) * eb, cases[(r + 1) % count].stored, eb);
        store_le(weights + i * eb, cases[r].stored, eb);
        mask[i / m] |= (uint8_t)(1u << (i % m));
    }
    assert_int_equal(tbm_nm_pack(prec, weights, mask, m, count, cols, &w), 0);
    for (enum tbm_isa isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++) {
        if (!tbm_isa_supported(isa))
            continue;
        memset(y, 0xFF, sizeof y);
        tbm_spmm(isa, w, x, 1, y);
        for (size_t r = 0; r < count; r++) {
            if (float_bits(y[r]) != cases[r].want)
                fail_msg("%s prec %d stored 0x%llx: got 0x%08x, want 0x%08x", tbm_isa_name(isa),
                         (int)prec, (unsigned long long)cases[r].stored, float_bits(y[r]),
                         cases[r].want);
        }
    }
    tbm_nm_free(w);
}

static void test_conversions_exact(void **state)
{
    (void)state;
    check_conversions(TBM_FP16, fp16_cases, sizeof fp16_cases / sizeof fp16_cases[0]);
    check_conversions(TBM_BF16, bf16_cases, sizeof bf16_cases / sizeof bf16_cases[0]);
    check_conversions(TBM_FP32, fp32_cases, sizeof fp32_cases / sizeof fp32_cases[0]);
    check_conversions(TBM_FP64, fp64_cases, sizeof fp64_cases / sizeof fp64_cases[0]);
}

/* One 4-element group per row. Row 0: 1 * inf + -1 * inf; row 1: 0 * inf;
 * row 2: -1 * +0, a -0 product onto +0; row 3: 2 times a signalling NaN. */
static void test_special_results(void **state)
{
    static const float weights[4][4] = {
        {1.0f, -1.0f, 5.0f, 5.0f},
        {0.0f, 3.0f, 0.0f, 0.0f},
        {0.0f, 0.0f, 0.0f, -1.0f},
        {0.0f, 0.0f, 2.0f, 3.0f},
    };
    static const uint8_t mask[4] = {0x3, 0x1, 0x8, 0x4};
    static const uint32_t want[4] = {TBM_NM_NAN, TBM_NM_NAN, 0x00000000, TBM_NM_NAN};
    float x[4] = {INFINITY, INFINITY, bits_to_float(0x7F800001), 0.0f};
    struct tbm_nm_matrix *w;
    float y[4];

    (void)state;
    assert_int_equal(tbm_nm_pack(TBM_FP32, weights, mask, 4, 4, 4, &w), 0);
    for (enum tbm_isa isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++) {
        if (!tbm_isa_supported(isa))
            continue;
        memset(y, 0x11, sizeof y);
        tbm_spmm(isa, w, x, 1, y);
        for (unsigned r = 0; r < 4; r++) {
            if (float_bits(y[r]) != want[r])
                fail_msg("%s row %u: got 0x%08x, want 0x%08x", tbm_isa_name(isa), r,
                         float_bits(y[r]), want[r]);
        }
    }
    tbm_nm_free(w);
}

/* No rows, no columns, nothing kept: y is all +0 where it exists, and a
 * batch of 0 writes nothing. */
static void test_empty_shapes(void **state)
{
    static const uint8_t none[4] = {0xF0, 0xF0, 0xF0, 0xF0};
    static const uint16_t weights[12] = {0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00,
                                         0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00};
    float x[3 * 2] = {1, 2, 3, 4, 5, 6};
    float y[4 * 2];
    struct tbm_nm_matrix *w;

    (void)state;
    for (enum tbm_isa isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++) {
        static const float zeros[8] = {0};

        if (!tbm_isa_supported(isa))
            continue;
        assert_int_equal(tbm_nm_pack(TBM_FP16, weights, none, 4, 4, 3, &w), 0);
        memset(y, 0xFF, sizeof y);
        tbm_spmm(isa, w, x, 2, y);
        assert_memory_equal(y, zeros, sizeof y);
        memset(y, 0xFF, sizeof y);
        tbm_spmm(isa, w, x, 0, y);
        assert_int_equal(float_bits(y[0]), 0xFFFFFFFF);
        tbm_nm_free(w);

        assert_int_equal(tbm_nm_pack(TBM_FP16, weights, NULL, 4, 4, 0, &w), 0);
        memset(y, 0xFF, sizeof y);
        tbm_spmm(isa, w, x, 2, y);
        assert_memory_equal(y, zeros, sizeof y);
        tbm_nm_free(w);

        assert_int_equal(tbm_nm_pack(TBM_FP16, weights, none, 4, 0, 3, &w), 0);
        memset(y, 0xFF, sizeof y);
        tbm_spmm(isa, w, x, 2, y);
        assert_int_equal(float_bits(y[0]), 0xFFFFFFFF);
        tbm_nm_free(w);
    }
}

/* Exact 2:4 and 1:4 masks over whole windows need no padding: the pack
 * holds the kept values only, fp16 still 2 bytes each, plus one position
 * byte. */
static void test_regular_pack_is_compact(void **state)
{
    static const struct spec specs[] = {
        {TBM_FP16, MASK_EXACT, 4, 2, 40, 96, 11},
        {TBM_FP16, MASK_EXACT, 4, 1, 40, 96, 12},
    };

    (void)state;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        struct matrix mx;
        struct tbm_nm_matrix *w;

        make_matrix(&mx, &specs[i]);
        w = pack(&mx, mx.mask);
        assert_int_equal(w->kind, TBM_NM_F16);
        assert_int_equal(w->blocks, 3);
        assert_int_equal(w->windows, 6);
        /* the last block has 8 rows: its other 8 lanes are empty */
        assert_int_equal(w->steps * TBM_NM_LANES, 48 * 96 / 4 * specs[i].n);
        for (uint64_t s = 0; s < w->first_step[2] * TBM_NM_LANES; s++)
            assert_int_not_equal(w->offsets[s], TBM_NM_NONE);
        tbm_nm_free(w);
        free_matrix(&mx);
    }
}

/* Sizes whose byte counts do not fit, bad m or precision: -1, out untouched. */
static void test_hostile_sizes_refused(void **state)
{
    static const uint8_t mask[1] = {0};
    static const uint16_t weights[1] = {0};
    struct tbm_nm_matrix *w = NULL;

    (void)state;
    assert_int_equal(
        tbm_nm_pack(TBM_FP16, weights, mask, 4, UINT64_C(1) << 33, UINT64_C(1) << 33, &w), -1);
    assert_int_equal(
        tbm_nm_pack(TBM_FP64, weights, mask, 4, UINT64_C(1) << 31, UINT64_C(1) << 31, &w), -1);
    assert_int_equal(tbm_nm_pack(TBM_FP16, weights, mask, 4, UINT64_MAX, 1, &w), -1);
    assert_int_equal(tbm_nm_pack(TBM_FP32, weights, NULL, 4, 1, UINT64_C(1) << 62, &w), -1);
    assert_int_equal(tbm_nm_pack(TBM_FP16, weights, mask, 0, 1, 1, &w), -1);
    assert_int_equal(tbm_nm_pack(TBM_FP16, weights, mask, 33, 1, 1, &w), -1);
    assert_int_equal(tbm_nm_pack((enum tbm_precision)4, weights, mask, 4, 1, 1, &w), -1);
    assert_null(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_matches_naive),
        cmocka_unit_test(test_junk_mask_bits_ignored),
        cmocka_unit_test(test_avx2_matches_scalar),
        cmocka_unit_test(test_avx512_matches_scalar),
        cmocka_unit_test(test_conversions_exact),
        cmocka_unit_test(test_special_results),
        cmocka_unit_test(test_empty_shapes),
        cmocka_unit_test(test_regular_pack_is_compact),
        cmocka_unit_test(test_hostile_sizes_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
