/* Tests of the quantizers of model.Q4_K_M.gguf (Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, F16): blocks
 * worked out by hand (all +0.0, all -0.0, a NaN or an infinity anywhere), the portable path's
 * output dequantized within the error of its bits, and every level the CPU has against the
 * portable one on rows of every kind of quant_rows.h (ties, subnormals, values up to FLT_MAX,
 * 1 to 40 super-blocks, and one of 4099), at a guard page. That the portable path is
 * llama.cpp's, byte for byte, is test_quant_oracle's job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "guard_buf.h"
#include "quant_rows.h"
#include "quant_internal.h"

static const enum tbm_isa isas[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};
static const uint32_t types[] = {12, 13, 14, 6, 7, 1};

/* Where each type's F16 scale d sits in its block. */
static size_t d_at(uint32_t type)
{
    return type == 14 ? TBM_Q6_K_D_AT : 0;
}

static enum tbm_isa state_isa(void **state)
{
    return *(const enum tbm_isa *)*state;
}

static uint16_t load16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Quantizes blocks blocks of q with isa from a guarded input (ending at the guard page) into a
 * guarded output (ending at it too), and checks that nothing before the output changed. */
static void quantize(const struct tbm_quant *q, enum tbm_isa isa, const float *x, size_t blocks,
                     uint8_t *out)
{
    size_t in_bytes = blocks * q->block_elems * sizeof(float), out_bytes = blocks * q->block_bytes;
    struct buf in = alloc_buf(in_bytes, true, 0);
    struct buf o = alloc_buf(out_bytes + 16, true, 0);

    memcpy(in.p, x, in_bytes);
    memset(o.p, 0xA5, out_bytes + 16);
    q->quantize(isa, (const float *)(const void *)in.p, blocks, o.p + 16);
    for (int k = 0; k < 16; k++)
        assert_int_equal(o.p[k], 0xA5);
    memcpy(out, o.p + 16, out_bytes);
    free_buf(in);
    free_buf(o);
}

/* --- dequantization, from the formats' layouts --- */

static float half(const uint8_t *p)
{
    return tbm_quant_f16_float(load16(p));
}

/* Quant of element i (0..255) of a Q4_K or Q5_K super-block; its sub-block's scale and min
 * codes in *sc, *m. */
static int kq_quant(const uint8_t *blk, bool five, int i, int *sc, int *m)
{
    const uint8_t *codes = blk + 4, *qs = blk + (five ? 48 : 16), *qh = blk + 16;
    int j = i / 32, p = i / 64, l = i % 32, hi = i % 64 >= 32;
    int q = (qs[32 * p + l] >> (4 * hi)) & 0xF;

    if (j < 4) {
        *sc = codes[j] & 63;
        *m = codes[j + 4] & 63;
    } else {
        *sc = (codes[j + 4] & 0xF) | (codes[j - 4] >> 6) << 4;
        *m = (codes[j + 4] >> 4) | (codes[j] >> 6) << 4;
    }
    return five ? q | ((qh[l] >> (2 * p + hi)) & 1) << 4 : q;
}

static void dequantize(uint32_t type, const uint8_t *blk, float *y)
{
    int sc, m;

    switch (type) {
    case 12:
    case 13:
        for (int i = 0; i < 256; i++) {
            int q = kq_quant(blk, type == 13, i, &sc, &m);
            y[i] = half(blk) * (float)sc * (float)q - half(blk + 2) * (float)m;
        }
        return;
    case 14:
        for (int i = 0; i < 256; i++) {
            int h = i / 128, k = i % 128 / 32, l = i % 32;
            int lo = (blk[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
            int q = lo | ((blk[128 + 32 * h + l] >> (2 * k)) & 3) << 4;
            y[i] = half(blk + TBM_Q6_K_D_AT) * (float)(int8_t)blk[192 + i / 16] * (float)(q - 32);
        }
        return;
    case 6:
    case 7: {
        const uint8_t *qh = blk + (type == 6 ? 2 : 4), *qs = qh + 4;
        uint32_t h =
            (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        for (int j = 0; j < 32; j++) {
            int q = ((qs[j % 16] >> (4 * (j / 16))) & 0xF) | (int)((h >> j) & 1) << 4;
            y[j] = type == 6 ? half(blk) * (float)(q - 16) : half(blk) * (float)q + half(blk + 2);
        }
        return;
    }
    }
    fail();
}

/* --- tests --- */

/* The table's geometry. */
static void test_table(void **state)
{
    static const struct {
        uint32_t type, elems, bytes;
        const char *name;
    } want[] = {{1, 1, 2, "f16"},      {6, 32, 22, "q5_0"},    {7, 32, 24, "q5_1"},
                {8, 32, 34, "q8_0"},   {12, 256, 144, "q4_K"}, {13, 256, 176, "q5_K"},
                {14, 256, 210, "q6_K"}};

    (void)state;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct tbm_quant *q = tbm_quant_find(want[i].type);
        assert_non_null(q);
        assert_int_equal(q->block_elems, want[i].elems);
        assert_int_equal(q->block_bytes, want[i].bytes);
        assert_string_equal(q->name, want[i].name);
    }
    assert_null(tbm_quant_find(0));
    assert_null(tbm_quant_find(2));
    assert_null(tbm_quant_find(30));
}

/* All +0.0 and all -0.0 blocks, worked out by hand from the references: the k-quants' search
 * finds a flat block and every byte is 0. Q5_0 takes max = +0.0 (no |x| beats 0), so d = +0 /
 * -16 = -0.0 (0x8000), id = 0 and every quant (int)(0 + 16.5) = 16: nibbles 0, fifth bits 1.
 * Q5_1 takes min = max = the first value, so m is -0.0 for -0.0 and d = (max - min) / 31 = +0,
 * and every quant 0. */
static void test_zero_blocks(void **state)
{
    enum tbm_isa isa = state_isa(state);
    float x[256 * 3];
    uint8_t out[210 * 3], want[210 * 3];

    if (!tbm_isa_supported(isa))
        skip();
    for (int neg = 0; neg < 2; neg++) {
        for (int i = 0; i < 256 * 3; i++)
            x[i] = neg ? -0.0f : 0.0f;
        for (size_t t = 0; t < 5; t++) {
            const struct tbm_quant *q = tbm_quant_find(types[t]);
            size_t blocks = 3 * 256 / q->block_elems;
            quantize(q, isa, x, blocks, out);
            memset(want, 0, sizeof want);
            for (size_t b = 0; b < blocks; b++) {
                uint8_t *w = want + b * q->block_bytes;
                if (types[t] == 6) {
                    w[1] = 0x80;
                    memset(w + 2, 0xFF, 4);
                } else if (types[t] == 7 && neg) {
                    w[3] = 0x80;
                }
            }
            assert_memory_equal(out, want, blocks * q->block_bytes);
        }
    }
}

/* A NaN (quiet, signalling, with a payload, negative) or an infinity at any place of a block:
 * that block is all 0 but d = 0x7E00; the blocks either side are what they are alone. */
static void test_nonfinite(void **state)
{
    static const uint32_t specials[] = {0x7FC00000, 0xFFC00001, 0x7F800001,
                                        0x7FBFFFFF, 0x7F800000, 0xFF800000};
    enum tbm_isa isa = state_isa(state);

    if (!tbm_isa_supported(isa))
        skip();
    float *x = malloc(sizeof(float) * 256 * 3);
    uint8_t *out = malloc(210 * 3 * 8), *alone = malloc(210 * 8);
    assert_non_null(x);
    assert_non_null(out);
    assert_non_null(alone);
    for (size_t t = 0; t < 5; t++) {
        const struct tbm_quant *q = tbm_quant_find(types[t]);
        size_t n = q->block_elems;
        for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++) {
            for (size_t pos = 0; pos < n; pos += n == 256 ? 17 : 3) {
                for (size_t b = 0; b < 3; b++)
                    for (size_t i = 0; i < n; i++)
                        x[b * n + i] = (float)((int)((b * n + i) * 37 % 101) - 50) * 0.01f;
                memcpy(&x[n + pos], &specials[s], sizeof(float));
                quantize(q, isa, x, 3, out);
                const uint8_t *mid = out + q->block_bytes;
                for (size_t k = 0; k < q->block_bytes; k++) {
                    uint8_t want = k == d_at(types[t]) + 1 ? 0x7E : 0;
                    assert_int_equal(mid[k], want);
                }
                q->quantize(TBM_ISA_SCALAR, x, 1, alone);
                assert_memory_equal(out, alone, q->block_bytes);
                q->quantize(TBM_ISA_SCALAR, x + 2 * n, 1, alone);
                assert_memory_equal(out + 2 * q->block_bytes, alone, q->block_bytes);
            }
        }
    }
    free(x);
    free(out);
    free(alone);
}

/* F16: rounding to nearest even (ties both ways, the largest F16, past it to infinity, F16
 * subnormals), infinities kept, every NaN 0x7E00 with its sign. */
static void test_f16_values(void **state)
{
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3F800000, 0x3C00}, /* 1 */
        {0x3F801000, 0x3C00}, /* 1 + 2^-11: a tie, to even */
        {0x3F803000, 0x3C02}, /* 1 + 3 * 2^-11: a tie, to even (up) */
        {0x3F801001, 0x3C01}, /* just past the tie */
        {0x477FE000, 0x7BFF}, /* 65504 */
        {0x477FEFFF, 0x7BFF}, /* just below the tie with 65536 */
        {0x477FF000, 0x7C00}, /* the tie: to infinity */
        {0xC7800000, 0xFC00}, /* -65536 */
        {0x33800000, 0x0001}, /* 2^-24, the smallest subnormal */
        {0x33000000, 0x0000}, /* 2^-25: a tie, to even 0 */
        {0x33000001, 0x0001}, /* past it */
        {0xB3C00000, 0x8002}, /* -1.5 * 2^-24: a tie, to even */
        {0x7F800000, 0x7C00}, /* +inf */
        {0xFF800000, 0xFC00}, /* -inf */
        {0x7FC00000, 0x7E00}, /* quiet NaN */
        {0x7F800001, 0x7E00}, /* signalling NaN, payload dropped */
        {0xFFFFFFFF, 0xFE00}, /* negative NaN */
        {0x80000000, 0x8000}, /* -0 */
    };
    enum { N = sizeof cases / sizeof cases[0] };
    enum tbm_isa isa = state_isa(state);
    float x[3 * N];
    uint8_t out[6 * N];

    if (!tbm_isa_supported(isa))
        skip();
    /* three copies, so that every value passes through the vector loop and the tail */
    for (size_t i = 0; i < 3 * N; i++)
        memcpy(&x[i], &cases[i % N].in, sizeof(float));
    quantize(tbm_quant_find(1), isa, x, 3 * N, out);
    for (size_t i = 0; i < 3 * N; i++)
        assert_int_equal(load16(out + 2 * i), cases[i % N].out);
}

/* The portable path's output, dequantized, within the error of its bits on gaussian rows:
 * relative RMS error at most 0.10 (Q4_K), 0.05 (Q5_K), 0.025 (Q6_K), 0.06 (Q5_0), 0.055 (Q5_1),
 * about 1.4 times what it is (0.071, 0.036, 0.018, 0.043, 0.038). A quant in the
 * wrong place of its block would be far off. */
static void test_roundtrip(void **state)
{
    static const double bound[] = {0.10, 0.05, 0.025, 0.06, 0.055};
    float x[256 * 8], y[256];
    uint8_t out[210 * 8 * 8];

    (void)state;
    for (size_t t = 0; t < 5; t++) {
        const struct tbm_quant *q = tbm_quant_find(types[t]);
        double err = 0, sum = 0;
        for (int r = 0; r < 50; r++) {
            for (int i = 0; i < 256 * 8; i++)
                x[i] = qrow_normal();
            size_t blocks = 256 * 8 / q->block_elems;
            q->quantize(TBM_ISA_SCALAR, x, blocks, out);
            for (size_t b = 0; b < blocks; b++) {
                dequantize(types[t], out + b * q->block_bytes, y);
                for (uint32_t i = 0; i < q->block_elems; i++) {
                    double e = (double)y[i] - (double)x[b * q->block_elems + i];
                    err += e * e;
                    sum += (double)x[b * q->block_elems + i] * x[b * q->block_elems + i];
                }
            }
        }
        print_message("%s: relative RMS error %.4f\n", q->name, sqrt(err / sum));
        assert_true(sqrt(err / sum) <= bound[t]);
    }
}

/* Every level against the portable path on rows of 1 to 40 blocks of 256 values of every kind
 * (and in every type, rows whose kinds change per block). */
static void test_levels(void **state)
{
    enum tbm_isa isa = state_isa(state);

    if (!tbm_isa_supported(isa))
        skip();
    float *x = malloc(sizeof(float) * 256 * 40);
    uint8_t *got = malloc(210 * 40 * 8), *want = malloc(210 * 40 * 8);
    assert_non_null(x);
    assert_non_null(got);
    assert_non_null(want);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct tbm_quant *q = tbm_quant_find(types[t]);
        for (int r = 0; r < 400; r++) {
            size_t n = 1 + qrow_rnd() % (r % 8 == 0 ? 40 : 3);
            qrow_fill(x, n, r);
            /* F16: counts that are not whole vectors */
            size_t blocks = 256 * n / q->block_elems - (types[t] == 1 ? qrow_rnd() % 16 : 0);
            q->quantize(TBM_ISA_SCALAR, x, blocks, want);
            quantize(q, isa, x, blocks, got);
            assert_memory_equal(got, want, blocks * q->block_bytes);
        }
    }
    free(x);
    free(got);
    free(want);
}

/* One long row, 4099 super-blocks (an odd count: the AVX-512 path's last pass is half
 * empty), on every level against the portable path. */
static void test_long_row(void **state)
{
    enum tbm_isa isa = state_isa(state);
    size_t n = 4099;

    if (!tbm_isa_supported(isa))
        skip();
    float *x = malloc(sizeof(float) * 256 * n);
    uint8_t *got = malloc(210 * n * 8), *want = malloc(210 * n * 8);
    assert_non_null(x);
    assert_non_null(got);
    assert_non_null(want);
    for (size_t b = 0; b < n; b++)
        qrow_block(x + 256 * b, b % 7 == 0 ? (int)(qrow_rnd() % QROW_KINDS) : 0);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct tbm_quant *q = tbm_quant_find(types[t]);
        size_t blocks = 256 * n / q->block_elems;
        q->quantize(TBM_ISA_SCALAR, x, blocks, want);
        quantize(q, isa, x, blocks, got);
        assert_memory_equal(got, want, blocks * q->block_bytes);
    }
    free(x);
    free(got);
    free(want);
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
        cmocka_unit_test(test_table), PER_ISA(test_zero_blocks),        PER_ISA(test_nonfinite),
        PER_ISA(test_f16_values),     cmocka_unit_test(test_roundtrip), PER_ISA(test_levels),
        PER_ISA(test_long_row),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
