/* Tests of the dense-expansion and mask-statistics kernels: the portable
 * reference against hand-computed values, hardware conversions and an
 * independent index-arithmetic model; every SIMD path against the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>
#include <immintrin.h>
#include <cmocka.h>

#include "guard_buf.h"
#include "tbm/kernels.h"

static const enum tbm_isa isas[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};
static const enum tbm_precision precs[] = {TBM_FP32, TBM_FP16, TBM_BF16, TBM_FP64};

/* Fills the output around the range, to catch writes outside it. */
#define CANARY 0xA5A5A5A5u
#define GUARD  16

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

/* splitmix64: a fixed seed, so every run checks the same cases. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static enum tbm_isa state_isa(void **state)
{
    return *(const enum tbm_isa *)*state;
}

static void skip_unless_supported(enum tbm_isa isa)
{
    if (!tbm_isa_supported(isa))
        skip();
}

static uint32_t float_bits(float f)
{
    uint32_t b;

    memcpy(&b, &f, sizeof b);
    return b;
}

/* A guarded buffer at the guard, or at a random odd address. */
static struct buf guarded(size_t size, bool at_guard)
{
    return alloc_buf(size, at_guard, 1 + 2 * (rnd() % 31));
}

/* A stored value: often +0/-0 (so that the conflict counter sees both
 * kinds), often a special value, otherwise random bits. */
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
    uint16_t h;
    uint32_t s;

    if (r % 8 < 2) {
        v = r % 8 == 0 ? 0 : UINT64_C(1) << (8 * size - 1);
    } else if (r % 8 == 2) {
        r >>= 3;
        v = prec == TBM_FP32   ? f32[r % 9]
            : prec == TBM_FP16 ? f16[r % 9]
            : prec == TBM_BF16 ? bf16[r % 9]
                               : f64[r % 9];
    } else {
        v = rnd();
    }
    switch (size) {
    case 2:
        h = (uint16_t)v;
        memcpy(p, &h, 2);
        return;
    case 4:
        s = (uint32_t)v;
        memcpy(p, &s, 4);
        return;
    }
    memcpy(p, &v, 8);
}

static void random_weights(enum tbm_precision prec, uint8_t *w, size_t count)
{
    for (size_t i = 0; i < count; i++)
        random_element(prec, w + i * tbm_precision_size(prec));
}

/* Random words, junk bits above m included; some all-kept, some all-pruned. */
static void random_mask(uint8_t *mask, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) {
        uint64_t r = rnd();

        mask[i] = r % 16 == 0 ? 0xFF : r % 16 == 1 ? 0x00 : (uint8_t)(r >> 8);
    }
}

/* --- the model: element i of a tensor by index arithmetic alone --- */

/* fp16 value by its definition, (-1)^s * 2^(e-15) * 1.f or 2^-14 * 0.f;
 * a NaN keeps its payload and is quiet. */
static uint32_t model_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    int e = h >> 10 & 0x1F;
    int f = h & 0x3FF;

    if (e == 0x1F)
        return sign | 0x7F800000 | (f ? 0x400000 | (uint32_t)f << 13 : 0);
    return sign | float_bits(ldexpf((float)(e ? 1024 + f : f), (e ? e : 1) - 25));
}

static uint32_t model_word(const uint8_t *mask, uint32_t m, uint64_t g)
{
    uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    uint32_t w = 0;

    for (uint32_t b = 0; b < bytes; b++)
        w |= (uint32_t)mask[g * bytes + b] << (8 * b);
    return w;
}

static uint32_t model_element(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                              uint32_t m, uint64_t i)
{
    uint16_t h;
    uint32_t s;
    double d;

    if (mask && !(model_word(mask, m, i / m) >> (i % m) & 1))
        return 0;
    switch (prec) {
    case TBM_FP16:
        memcpy(&h, w + 2 * i, 2);
        return model_half(h);
    case TBM_BF16:
        memcpy(&h, w + 2 * i, 2);
        return (uint32_t)h << 16;
    case TBM_FP64:
        memcpy(&d, w + 8 * i, 8);
        return float_bits((float)d);
    case TBM_FP32:
        break;
    }
    memcpy(&s, w + 4 * i, 4);
    return s;
}

/* --- helpers running a kernel on a range of a tensor --- */

/* Expands [first, first+count) of the tensor (w, mask at element 0) with isa
 * into out + GUARD and checks that the guard floats around it are intact. */
static void expand_range(enum tbm_isa isa, enum tbm_precision prec, const uint8_t *w,
                         const uint8_t *mask, uint32_t m, uint64_t first, size_t count,
                         uint32_t *out)
{
    uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    const uint8_t *mask_at = mask ? mask + first / m * bytes : NULL;

    for (size_t i = 0; i < count + 2 * GUARD; i++)
        out[i] = CANARY;
    tbm_expand(isa, prec, w + first * tbm_precision_size(prec), mask_at, m, first, count,
               (float *)(out + GUARD));
    for (size_t i = 0; i < GUARD; i++) {
        assert_int_equal(out[i], CANARY);
        assert_int_equal(out[GUARD + count + i], CANARY);
    }
}

/* --- tests --- */

static void test_precision_size(void **state)
{
    (void)state;
    assert_int_equal(tbm_precision_size(TBM_FP32), 4);
    assert_int_equal(tbm_precision_size(TBM_FP16), 2);
    assert_int_equal(tbm_precision_size(TBM_BF16), 2);
    assert_int_equal(tbm_precision_size(TBM_FP64), 8);
    assert_int_equal(tbm_precision_size(4), 0);
    assert_int_equal(tbm_precision_size(255), 0);
    assert_int_equal(tbm_mask_word_bytes(1), 1);
    assert_int_equal(tbm_mask_word_bytes(8), 1);
    assert_int_equal(tbm_mask_word_bytes(9), 2);
    assert_int_equal(tbm_mask_word_bytes(16), 2);
    assert_int_equal(tbm_mask_word_bytes(17), 4);
    assert_int_equal(tbm_mask_word_bytes(32), 4);
}

static void test_isa_select(void **state)
{
    enum tbm_isa best, isa = TBM_ISA_SCALAR;
    enum tbm_isa expect_best = tbm_isa_supported(TBM_ISA_AVX512) ? TBM_ISA_AVX512
                               : tbm_isa_supported(TBM_ISA_AVX2) ? TBM_ISA_AVX2
                                                                 : TBM_ISA_SCALAR;

    (void)state;
    assert_string_equal(tbm_isa_name(TBM_ISA_SCALAR), "scalar");
    assert_string_equal(tbm_isa_name(TBM_ISA_AVX2), "avx2");
    assert_string_equal(tbm_isa_name(TBM_ISA_AVX512), "avx512");
    assert_true(tbm_isa_supported(TBM_ISA_SCALAR));
    /* the levels nest, and need at least what the CPU flags say */
    assert_true(!tbm_isa_supported(TBM_ISA_AVX512) || tbm_isa_supported(TBM_ISA_AVX2));
    assert_true(!tbm_isa_supported(TBM_ISA_AVX2) || __builtin_cpu_supports("avx2"));
    assert_true(!tbm_isa_supported(TBM_ISA_AVX512) || __builtin_cpu_supports("avx512bw"));

    assert_int_equal(tbm_isa_select(NULL, &best), 0);
    assert_int_equal(best, expect_best);
    assert_int_equal(tbm_isa_select("", &isa), 0);
    assert_int_equal(isa, expect_best);
    for (size_t i = 0; i < 3; i++) {
        isa = (enum tbm_isa)99;
        if (tbm_isa_supported(isas[i])) {
            assert_int_equal(tbm_isa_select(tbm_isa_name(isas[i]), &isa), 0);
            assert_int_equal(isa, isas[i]);
        } else {
            assert_int_equal(tbm_isa_select(tbm_isa_name(isas[i]), &isa), -1);
            assert_int_equal(isa, 99);
        }
    }
    assert_int_equal(tbm_isa_select("AVX2", &isa), -1);
    assert_int_equal(tbm_isa_select("avx2 ", &isa), -1);
    assert_int_equal(tbm_isa_select("sse2", &isa), -1);
    assert_int_equal(tbm_isa_select("avx", &isa), -1);
}

__attribute__((target("f16c"))) static uint32_t hardware_half(uint16_t h)
{
    return float_bits(_cvtsh_ss(h));
}

/* Every 16-bit pattern in order, at an odd address. */
static struct buf all_halves(void)
{
    struct buf w = guarded(65536 * 2, true);

    for (uint32_t h = 0; h < 65536; h++)
        memcpy(w.p + 2 * h, &(uint16_t){(uint16_t)h}, 2);
    return w;
}

/* Every fp16 value, dense and through two masks, against F16C itself. */
static void test_fp16_exhaustive(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const uint8_t patterns[] = {0xFF, 0x5A};
    uint8_t mask[65536 / 8];
    struct buf w;
    uint32_t *out;

    skip_unless_supported(isa);
    if (!tbm_isa_supported(TBM_ISA_AVX2)) /* the AVX2 level includes F16C */
        skip();
    w = all_halves();
    out = malloc((65536 + 2 * GUARD) * sizeof *out);
    assert_non_null(out);
    expand_range(isa, TBM_FP16, w.p, NULL, 0, 0, 65536, out);
    for (uint32_t h = 0; h < 65536; h++)
        assert_int_equal(out[GUARD + h], hardware_half((uint16_t)h));
    for (size_t p = 0; p < sizeof patterns; p++) {
        memset(mask, patterns[p], sizeof mask);
        expand_range(isa, TBM_FP16, w.p, mask, 8, 0, 65536, out);
        for (uint32_t h = 0; h < 65536; h++)
            assert_int_equal(out[GUARD + h],
                             patterns[p] >> (h % 8) & 1 ? hardware_half((uint16_t)h) : 0);
    }
    free(out);
    free_buf(w);
}

/* The definition-based model of fp16 agrees with the reference everywhere,
 * so the random tests' model is sound without F16C too. */
static void test_fp16_model(void **state)
{
    struct buf w = all_halves();
    uint32_t *out = malloc((65536 + 2 * GUARD) * sizeof *out);

    (void)state;
    assert_non_null(out);
    expand_range(TBM_ISA_SCALAR, TBM_FP16, w.p, NULL, 0, 0, 65536, out);
    for (uint32_t h = 0; h < 65536; h++)
        assert_int_equal(out[GUARD + h], model_half((uint16_t)h));
    free(out);
    free_buf(w);
}

static void test_bf16_exhaustive(void **state)
{
    enum tbm_isa isa = state_isa(state);
    struct buf w;
    uint32_t *out;

    skip_unless_supported(isa);
    w = all_halves();
    out = malloc((65536 + 2 * GUARD) * sizeof *out);
    assert_non_null(out);
    expand_range(isa, TBM_BF16, w.p, NULL, 0, 0, 65536, out);
    for (uint32_t h = 0; h < 65536; h++)
        assert_int_equal(out[GUARD + h], h << 16);
    free(out);
    free_buf(w);
}

/* Hand-computed conversions of special values, per precision. */
static void test_special_values(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const uint16_t f16_in[] = {0x3C00, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00,
                                      0x8000, 0x7E00, 0x7D00, 0xFC01, 0x8001, 0xC000, 0x0000};
    static const uint32_t f16_out[] = {0x3F800000, 0x33800000, 0x387FC000, 0x38800000, 0x477FE000,
                                       0x7F800000, 0xFF800000, 0x80000000, 0x7FC00000, 0x7FE00000,
                                       0xFFC02000, 0xB3800000, 0xC0000000, 0x00000000};
    static const uint64_t f64_in[] = {
        0x3FF0000000000000, /* 1.0 */
        0x3FF0000010000000, /* 1 + 2^-24: a tie, to even 1.0 */
        0x3FF0000030000000, /* 1 + 3 * 2^-24: a tie, to even 1 + 2^-22 */
        0x3FF0000010000001, /* just above the tie: up */
        0x3730000000000000, /* 2^-140: float32 subnormal 0x200 */
        0x36A0000000000000, /* 2^-149: the smallest subnormal */
        0x3690000000000000, /* 2^-150: a tie with 0, to even 0 */
        0x47F0000000000000, /* 2^128: overflows to inf */
        0xC7EFFFFFF0000000, /* -(2^128 - 2^103): a tie, rounds to -inf */
        0x8000000000000000, /* -0.0 */
        0x7FF0000000000000, /* inf */
        0x7FF0000000000001, /* sNaN, payload below float32's: quiet NaN */
        0x7FF4000000000000, /* sNaN, payload bit 50: kept, quieted */
        0xFFF8000020000000, /* -qNaN, payload kept */
        0xFFF0000000000000, /* -inf */
    };
    static const uint32_t f64_out[] = {0x3F800000, 0x3F800000, 0x3F800002, 0x3F800001, 0x00000200,
                                       0x00000001, 0x00000000, 0x7F800000, 0xFF800000, 0x80000000,
                                       0x7F800000, 0x7FC00000, 0x7FE00000, 0xFFC00001, 0xFF800000};
    static const uint32_t f32_in[] = {0x7F800001, 0xFFC12345, 0x80000000, 0x00000001, 0x7F800000};
    size_t n16 = sizeof f16_in / sizeof f16_in[0];
    size_t n64 = sizeof f64_in / sizeof f64_in[0];
    size_t n32 = sizeof f32_in / sizeof f32_in[0];
    uint32_t out[64 + 2 * GUARD];

    skip_unless_supported(isa);
    expand_range(isa, TBM_FP16, (const uint8_t *)f16_in, NULL, 0, 0, n16, out);
    assert_memory_equal(out + GUARD, f16_out, sizeof f16_out);
    expand_range(isa, TBM_FP64, (const uint8_t *)f64_in, NULL, 0, 0, n64, out);
    assert_memory_equal(out + GUARD, f64_out, sizeof f64_out);
    /* fp32 is copied: even an sNaN stays signalling */
    expand_range(isa, TBM_FP32, (const uint8_t *)f32_in, NULL, 0, 0, n32, out);
    assert_memory_equal(out + GUARD, f32_in, sizeof f32_in);
}

/* The 2:4 example of TBM_FORMAT.md, and a 3-element group read from its
 * middle with junk bits above m. */
static void test_expand_by_hand(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const float w[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static const uint8_t mask24[] = {0x05, 0x0A, 0xF6};
    static const float want24[] = {1, 0, 3, 0, 0, 6, 0, 8, 0, 10, 11, 0};
    static const uint8_t mask3[] = {0xFE, 0x05, 0xFA, 0x03};
    static const float want3[] = {2, 3, 4, 0, 6, 0, 8, 0, 10, 11};
    uint32_t out[12 + 2 * GUARD];
    struct buf nothing;

    skip_unless_supported(isa);
    expand_range(isa, TBM_FP32, (const uint8_t *)w, mask24, 4, 0, 12, out);
    assert_memory_equal(out + GUARD, want24, sizeof want24);
    expand_range(isa, TBM_FP32, (const uint8_t *)w, mask3, 3, 1, 10, out);
    assert_memory_equal(out + GUARD, want3, sizeof want3);
    /* an empty range reads nothing, not even the word of its group */
    nothing = guarded(0, true);
    expand_range(isa, TBM_FP32, nothing.p, nothing.p, 3, 1, 0, out);
    free_buf(nothing);
    /* pruned -0.0 and NaN become +0.0 */
    expand_range(isa, TBM_FP32, (const uint8_t *)(const uint32_t[]){0x80000000, 0x7FC00001},
                 (const uint8_t[]){0x00}, 2, 0, 2, out);
    assert_int_equal(out[GUARD], 0);
    assert_int_equal(out[GUARD + 1], 0);
}

/* Random tensors of every precision, every m, several sizes and random
 * ranges: the reference against the model, every other path against the
 * reference. */
static void check_random_tensor(enum tbm_isa isa, enum tbm_precision prec, uint32_t m, size_t n,
                                unsigned ranges)
{
    uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    struct buf wb = guarded(n * tbm_precision_size(prec), rnd() % 2);
    struct buf mb = guarded((n + m - 1) / m * bytes, rnd() % 2);
    const uint8_t *w = wb.p, *mask = mb.p;
    uint32_t *got = malloc((n + 2 * GUARD) * sizeof *got);
    uint32_t *want = malloc((n + 2 * GUARD) * sizeof *want);

    assert_non_null(got);
    assert_non_null(want);
    random_weights(prec, wb.p, n);
    random_mask(mb.p, (n + m - 1) / m * bytes);
    for (unsigned r = 0; r < ranges; r++) {
        /* the whole tensor, its end (partial last group), then random */
        uint64_t first = r == 0 ? 0 : rnd() % n;
        size_t count = r <= 1 ? n - first : rnd() % (n - first + 1);
        const uint8_t *mk = r % 5 == 4 ? NULL : mask;

        expand_range(TBM_ISA_SCALAR, prec, w, mk, m, first, count, want);
        if (isa == TBM_ISA_SCALAR) {
            for (size_t i = 0; i < count; i++)
                assert_int_equal(want[GUARD + i], model_element(prec, w, mk, m, first + i));
            continue;
        }
        expand_range(isa, prec, w, mk, m, first, count, got);
        assert_memory_equal(got + GUARD, want + GUARD, count * sizeof *got);
    }
    free(want);
    free(got);
    free_buf(mb);
    free_buf(wb);
}

static void test_expand_random(void **state)
{
    enum tbm_isa isa = state_isa(state);

    skip_unless_supported(isa);
    for (size_t p = 0; p < 4; p++) {
        for (uint32_t m = 1; m <= 32; m++) {
            size_t sizes[] = {1, m, 3 * m + 1, 257, 1031 + rnd() % 64};

            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                check_random_tensor(isa, precs[p], m, sizes[s], 10);
        }
        /* past several pages, for the block loops of the common m */
        check_random_tensor(isa, precs[p], 4, 300007, 6);
        check_random_tensor(isa, precs[p], 7, 200003, 6);
    }
}

/* float32 weights may be expanded in place, as dense.f32 does to save a copy. */
static void test_expand_fp32_in_place(void **state)
{
    enum tbm_isa isa = state_isa(state);

    skip_unless_supported(isa);
    size_t n = 70001;
    uint8_t *w = malloc(n * 4);
    uint8_t *mask = malloc(n);
    uint32_t *want = malloc((n + 2 * GUARD) * sizeof *want);
    float *inplace = malloc(n * sizeof *inplace);

    assert_non_null(w);
    assert_non_null(mask);
    assert_non_null(want);
    assert_non_null(inplace);
    random_weights(TBM_FP32, w, n);
    random_mask(mask, n);
    for (uint32_t m = 1; m <= 32; m++) {
        uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
        for (unsigned r = 0; r < 6; r++) {
            uint64_t first = r == 0 ? 0 : rnd() % n;
            size_t count = r == 0 ? n : rnd() % (n - first + 1);
            const uint8_t *mk = r == 5 ? NULL : mask;

            expand_range(TBM_ISA_SCALAR, TBM_FP32, w, mk, m, first, count, want);
            memcpy(inplace, w + first * 4, count * 4);
            tbm_expand(isa, TBM_FP32, inplace, mk ? mk + first / m * bytes : NULL, m, first, count,
                       inplace);
            assert_memory_equal(inplace, want + GUARD, count * 4);
        }
    }
    free(inplace);
    free(want);
    free(mask);
    free(w);
}

/* --- mask statistics --- */

static struct tbm_mask_stats model_count(enum tbm_precision prec, const uint8_t *w,
                                         const uint8_t *mask, uint32_t n, uint32_t m,
                                         uint64_t count)
{
    struct tbm_mask_stats s = {0, 0, 0};
    size_t size = tbm_precision_size(prec);

    for (uint64_t g = 0; g * m < count; g++) {
        uint32_t kept = 0;

        for (uint64_t i = g * m; i < count && i < (g + 1) * m; i++) {
            uint64_t v = 0;

            memcpy(&v, w + i * size, size);
            v &= ~(UINT64_C(1) << (8 * size - 1)); /* the sign bit */
            if (model_word(mask, m, g) >> (i % m) & 1)
                kept++;
            else
                s.mask_conflicts += v != 0;
        }
        s.kept += kept;
        s.groups_over_n += kept > n;
    }
    return s;
}

static void assert_stats(struct tbm_mask_stats got, uint64_t kept, uint64_t over,
                         uint64_t conflicts)
{
    assert_int_equal(got.kept, kept);
    assert_int_equal(got.groups_over_n, over);
    assert_int_equal(got.mask_conflicts, conflicts);
}

static void test_count_by_hand(void **state)
{
    enum tbm_isa isa = state_isa(state);
    /* groups: {1, 0, -0.0, NaN} {5, 6, 7, 0} {1, 2} (partial) */
    static const uint32_t w[] = {0x3F800000, 0,          0x80000000, 0x7FC00000, 0x40A00000,
                                 0x40C00000, 0x40E00000, 0,          0x3F800000, 0x40000000};
    /* kept {0, 1}; {0, 1, 2} (3 > n, junk bits above m); {1} (bit 2 is past the end) */
    static const uint8_t mask[] = {0x03, 0xF7, 0x06};
    struct tbm_mask_stats s = {100, 10, 1};
    size_t big = 64 * 4 * 40 + 2; /* many chunks, then a partial group */
    float *zeros, *ones;
    uint8_t *all;

    skip_unless_supported(isa);
    zeros = calloc(big, sizeof *zeros);
    ones = malloc(big * sizeof *ones);
    all = malloc(big / 4 + 1);
    assert_non_null(zeros);
    assert_non_null(ones);
    assert_non_null(all);
    tbm_mask_count(isa, TBM_FP32, w, mask, 2, 4, 10, &s);
    assert_stats(s, 100 + 6, 10 + 1, 1 + 2);

    for (size_t i = 0; i < big; i++)
        ones[i] = 1.0f;
    memset(all, 0xFF, big / 4 + 1);
    s = (struct tbm_mask_stats){0, 0, 0};
    tbm_mask_count(isa, TBM_FP32, zeros, all, 2, 4, big, &s);
    assert_stats(s, big, big / 4, 0);
    memset(all, 0x00, big / 4 + 1);
    s = (struct tbm_mask_stats){0, 0, 0};
    tbm_mask_count(isa, TBM_FP32, ones, all, 2, 4, big, &s);
    assert_stats(s, 0, 0, big);
    /* 0xFD keeps 3 of 4 (bit 1 pruned): over when n = 2, not when n = 3 */
    memset(all, 0xFD, big / 4 + 1);
    s = (struct tbm_mask_stats){0, 0, 0};
    tbm_mask_count(isa, TBM_FP32, ones, all, 2, 4, big, &s);
    assert_stats(s, big / 4 * 3 + 1, big / 4, big / 4 + 1);
    s = (struct tbm_mask_stats){0, 0, 0};
    tbm_mask_count(isa, TBM_FP32, ones, all, 3, 4, big, &s);
    assert_stats(s, big / 4 * 3 + 1, 0, big / 4 + 1);
    free(all);
    free(ones);
    free(zeros);
}

static void check_random_count(enum tbm_isa isa, enum tbm_precision prec, uint32_t m,
                               uint64_t count)
{
    uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    struct buf wb = guarded(count * tbm_precision_size(prec), rnd() % 2);
    struct buf mb = guarded((count + m - 1) / m * bytes, rnd() % 2);
    const uint8_t *w = wb.p, *mask = mb.p;
    uint32_t ns[] = {0, (uint32_t)(rnd() % (m + 2)), m / 2, UINT32_MAX};

    random_weights(prec, wb.p, count);
    random_mask(mb.p, (count + m - 1) / m * bytes);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        struct tbm_mask_stats want = model_count(prec, w, mask, ns[k], m, count);
        struct tbm_mask_stats got = {7, 8, 9};

        tbm_mask_count(isa, prec, w, mask, ns[k], m, count, &got);
        assert_stats(got, want.kept + 7, want.groups_over_n + 8, want.mask_conflicts + 9);
    }
    free_buf(mb);
    free_buf(wb);
}

static void test_count_random(void **state)
{
    enum tbm_isa isa = state_isa(state);

    skip_unless_supported(isa);
    for (size_t p = 0; p < 4; p++) {
        for (uint32_t m = 1; m <= 32; m++) {
            uint64_t groups[] = {1, 63, 64, 65, 130, 200 + rnd() % 64};

            for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
                check_random_count(isa, precs[p], m, groups[g] * m);
                check_random_count(isa, precs[p], m, groups[g] * m - rnd() % m);
            }
        }
    }
}

/* --- masking in place --- */

/* Element i of [first, first + count) masked in place with isa, in a copy of
 * the range at the buffer's end (so that touching past it faults), checked
 * against the model: pruned elements all-zero bytes, kept ones as stored;
 * and the answer, whether any byte changed. */
static void check_apply_range(enum tbm_isa isa, enum tbm_precision prec, const uint8_t *w,
                              const uint8_t *mask, uint32_t m, uint64_t first, size_t count)
{
    uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    size_t es = tbm_precision_size(prec);
    struct buf out = guarded(count * es, true);
    bool changed = false;

    memcpy(out.p, w + first * es, count * es);
    bool got = tbm_mask_apply(isa, prec, out.p, mask + first / m * bytes, m, first, count);
    for (size_t k = 0; k < count; k++) {
        const uint8_t *in = w + (first + k) * es, *o = out.p + k * es;
        static const uint8_t zero[8];

        if (model_word(mask, m, (first + k) / m) >> ((first + k) % m) & 1) {
            assert_memory_equal(o, in, es);
            continue;
        }
        assert_memory_equal(o, zero, es);
        changed |= memcmp(in, zero, es) != 0;
    }
    assert_int_equal(got, changed);
    free_buf(out);
}

static void test_apply_random(void **state)
{
    enum tbm_isa isa = state_isa(state);

    skip_unless_supported(isa);
    for (size_t p = 0; p < 4; p++) {
        for (uint32_t m = 1; m <= 32; m++) {
            size_t n = 64 * m + 300 + rnd() % 200;
            uint32_t bytes = m <= 8 ? 1 : m <= 16 ? 2 : 4;
            size_t es = tbm_precision_size(precs[p]);
            uint8_t *w = malloc(n * es), *mask = malloc((n + m - 1) / m * bytes);

            assert_non_null(w);
            assert_non_null(mask);
            random_weights(precs[p], w, n);
            random_mask(mask, (n + m - 1) / m * bytes);
            for (unsigned r = 0; r < 12; r++) {
                uint64_t first = r == 0 ? 0 : rnd() % n;
                size_t count = r <= 1 ? n - first : rnd() % (n - first + 1);

                check_apply_range(isa, precs[p], w, mask, m, first, count);
            }
            /* pruned elements already zero (as the tools write them): no change */
            for (size_t i = 0; i < n; i++)
                if (!(model_word(mask, m, i / m) >> (i % m) & 1))
                    memset(w + i * es, 0, es);
            check_apply_range(isa, precs[p], w, mask, m, 0, n);
            check_apply_range(isa, precs[p], w, mask, m, 1, n - 1);
            free(mask);
            free(w);
        }
    }
}

/* One set bit, anywhere in any pruned element, is found and cleared, and -0.0
 * is not taken for zero: every position of a block of each size. */
static void test_apply_single_bit(void **state)
{
    enum tbm_isa isa = state_isa(state);

    skip_unless_supported(isa);
    for (size_t p = 0; p < 4; p++) {
        size_t es = tbm_precision_size(precs[p]), n = 256;
        uint8_t w[256 * 8], mask[65];

        memset(mask, 0x5, sizeof mask); /* m = 4: elements 0 and 2 of each group kept */
        for (uint64_t first = 0; first < 4; first++) {
            for (size_t bit = 0; bit < n * es * 8; bit += 7) {
                memset(w, 0, sizeof w);
                w[bit / 8] = (uint8_t)(1u << (bit % 8));
                bool pruned = (first + bit / 8 / es) % 2 == 1;
                assert_int_equal(tbm_mask_apply(isa, precs[p], w, mask, 4, first, n), pruned);
                assert_int_equal(w[bit / 8], pruned ? 0 : 1u << (bit % 8));
            }
        }
    }
}

#define PER_ISA(f)                                                                                 \
    {#f "/scalar", f, NULL, NULL, (void *)&isas[0]},                                               \
        {#f "/avx2", f, NULL, NULL, (void *)&isas[1]},                                             \
    {                                                                                              \
#f "/avx512", f, NULL, NULL, (void *)&isas[2]                                              \
    }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precision_size),
        cmocka_unit_test(test_isa_select),
        cmocka_unit_test(test_fp16_model),
        PER_ISA(test_fp16_exhaustive),
        PER_ISA(test_bf16_exhaustive),
        PER_ISA(test_special_values),
        PER_ISA(test_expand_by_hand),
        PER_ISA(test_expand_random),
        PER_ISA(test_expand_fp32_in_place),
        PER_ISA(test_count_by_hand),
        PER_ISA(test_count_random),
        PER_ISA(test_apply_random),
        PER_ISA(test_apply_single_bit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
