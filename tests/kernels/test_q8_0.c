/* Tests of the Q8_0 quantizer: the portable reference against blocks worked
 * out by hand (rounding ties, all-zero, NaN and infinity blocks, scales too
 * small or too large for fp16) and against a model written from llama.cpp's
 * quantize_row_q8_0_ref with the hardware's fp16 conversion; every level the
 * CPU has against the portable one on random data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>
#include <cmocka.h>

#include "guard_buf.h"
#include "internal.h"

static const enum tbm_isa isas[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};

static uint64_t rng_state = 0xD1B54A32D192ED03u;

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

static float from_bits(uint32_t b)
{
    float f;

    memcpy(&f, &b, sizeof f);
    return f;
}

static uint16_t block_d(const uint8_t *blk)
{
    return (uint16_t)(blk[0] | blk[1] << 8);
}

/* Quantizes blocks with isa into a guarded buffer (output ending at the
 * guard page, input too) and checks nothing before the output changed. */
static void quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    struct buf in = alloc_buf(blocks * TBM_Q8_0_ELEMS * sizeof(float), true, 0);
    struct buf o = alloc_buf(blocks * TBM_Q8_0_BYTES + 16, true, 0);

    memcpy(in.p, x, blocks * TBM_Q8_0_ELEMS * sizeof(float));
    memset(o.p, 0xA5, 16);
    tbm_q8_0_quantize(isa, (const float *)(const void *)in.p, blocks, o.p + 16);
    for (int k = 0; k < 16; k++)
        assert_int_equal(o.p[k], 0xA5);
    memcpy(out, o.p + 16, blocks * TBM_Q8_0_BYTES);
    free_buf(in);
    free_buf(o);
}

/* --- the model: llama.cpp's reference quantizer, line by line --- */

/* F16C's conversion; called only where the AVX2 level (which has F16C) is. */
__attribute__((target("f16c"), noinline)) static uint16_t hw_half(float f)
{
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* quantize_row_q8_0_ref for one block, with x86's float-to-int8 conversion
 * (cvttss2si, whose "integer indefinite" has a low byte of 0) and the
 * contract's NaN/infinity rule. */
static void model_block(const float *x, uint8_t *out)
{
    float amax = 0.0f;

    for (int j = 0; j < 32; j++) {
        if (isnan(x[j]) || isinf(x[j])) {
            out[0] = 0x00, out[1] = 0x7E;
            memset(out + 2, 0, 32);
            return;
        }
        amax = fmaxf(amax, fabsf(x[j]));
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    uint16_t h = hw_half(d);
    out[0] = (uint8_t)h, out[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < 32; j++) {
        const float x0 = x[j] * id;
        float r = roundf(x0);
        int32_t i = r >= -2147483648.0f && r < 2147483648.0f ? (int32_t)r : INT32_MIN;
        out[2 + j] = (uint8_t)i;
    }
}

/* A float from a mix that reaches every branch: zeros, ties, ranges of
 * magnitudes, subnormals, and now and then a NaN or an infinity. */
static float random_value(int special)
{
    uint64_t r = rnd();
    int e;

    switch (r % 16) {
    case 0:
        return r & 16 ? -0.0f : 0.0f;
    case 1:
        /* a tie once scaled when the block's amax is 127 */
        return (float)((int)(r >> 8) % 255 - 127) + 0.5f;
    case 2:
        return from_bits((uint32_t)(r >> 32) & 0x807FFFFF); /* subnormal */
    case 3:
        if (special)
            return from_bits(r & 32 ? 0x7FC00000u | (uint32_t)(r >> 40)
                                    : (r & 64 ? 0xFF800000u : 0x7F800000u));
        break;
    }
    e = (int)((r >> 4) % 60) - 30;
    return ldexpf((float)((int64_t)(r >> 40) - (1 << 23)) / (float)(1 << 23), e);
}

/* --- tests --- */

/* The portable fp16 rounding against F16C on every fp16 boundary region
 * and random bits. */
static void test_f16_from_bits(void **state)
{
    (void)state;
    if (!tbm_isa_supported(TBM_ISA_AVX2))
        skip();
    for (uint32_t h = 0; h < 0x10000; h++) {
        /* each fp16 value, the halfway points around it, and one ulp either side */
        uint32_t b = tbm_f16_bits((uint16_t)h);
        for (int64_t dlt = -4097; dlt <= 4097; dlt += 1) {
            if (dlt != 0 && dlt != 1 && dlt != -1 && dlt != 4096 && dlt != -4096 && dlt != 4095 &&
                dlt != 4097 && dlt != -4095 && dlt != -4097)
                continue;
            uint32_t f = (uint32_t)((int64_t)b + dlt);
            assert_int_equal(tbm_f16_from_bits(f), hw_half(from_bits(f)));
        }
    }
    for (int k = 0; k < 1 << 22; k++) {
        uint32_t f = (uint32_t)rnd();
        assert_int_equal(tbm_f16_from_bits(f), hw_half(from_bits(f)));
    }
}

/* amax 127: d = 1, every value quantized to itself rounded, ties away. */
static void test_by_hand(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const float x[32] = {127.0f, 0.5f,    -0.5f,       1.5f,         -1.5f,   2.5f,   -2.5f,
                                126.5f, -126.5f, 0.49999997f, -0.49999997f, 3.0f,    -0.0f,  0.0f,
                                99.4f,  -99.6f,  1.0f,        2.0f,         63.5f,   -63.5f, 0.25f,
                                -0.75f, 10.5f,   -10.5f,      100.5f,       -100.5f, 64.5f,  -64.5f,
                                7.0f,   -7.0f,   0.0f,        -127.0f};
    static const int8_t q[32] = {127, 1,   -1,  2,    -2,   3,   -3, 127, -127, 0,   0,
                                 3,   0,   0,   99,   -100, 1,   2,  64,  -64,  0,   -1,
                                 11,  -11, 101, -101, 65,   -65, 7,  -7,  0,    -127};
    uint8_t out[34];

    if (!tbm_isa_supported(isa))
        skip();
    quantize(isa, x, 1, out);
    assert_int_equal(block_d(out), 0x3C00);
    for (int j = 0; j < 32; j++)
        assert_int_equal((int8_t)out[2 + j], q[j]);
}

/* All-zero (and all -0.0) blocks: d 0, q 0; NaN and infinity anywhere in
 * a block: d the F16 quiet NaN, q 0, the blocks around it as usual. */
static void test_zero_and_special_blocks(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const uint32_t specials[] = {0x7FC00000, 0xFFC00001, 0x7F800001,
                                        0x7F800000, 0xFF800000, 0x7FBFFFFF};
    float x[5 * 32];
    uint8_t out[5 * 34], want[34];

    if (!tbm_isa_supported(isa))
        skip();
    for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++) {
        for (int pos = 0; pos < 32; pos++) {
            for (int j = 0; j < 32; j++) {
                x[j] = 0.0f;
                x[32 + j] = -0.0f;
                x[64 + j] = (float)(j - 16) * 0.01f;
                x[96 + j] = (float)(j - 16) * 0.01f;
                x[128 + j] = (float)j;
            }
            x[64 + pos] = from_bits(specials[s]);
            quantize(isa, x, 5, out);
            for (int b = 0; b < 2; b++) {
                assert_int_equal(block_d(out + 34 * b), 0);
                for (int j = 0; j < 32; j++)
                    assert_int_equal(out[34 * b + 2 + j], 0);
            }
            assert_int_equal(block_d(out + 68), 0x7E00);
            for (int j = 0; j < 32; j++)
                assert_int_equal(out[68 + 2 + j], 0);
            model_block(x + 96, want);
            assert_memory_equal(out + 102, want, 34);
            assert_int_equal(block_d(out + 136), hw_half(31.0f / 127.0f));
        }
    }
}

/* Scales at the ends of fp16: an amax so small that 1 / d overflows (q 0),
 * a subnormal d, and a d too large for fp16 (infinity); one block at a time
 * and all in one run (the SIMD paths work out 8 blocks' scales together). */
static void test_extreme_scales(void **state)
{
    enum tbm_isa isa = state_isa(state);
    static const float amaxes[] = {1e-37f, 1.2e-38f,   1e-40f,     1.4e-45f, 3e-6f,
                                   6e-8f,  8318000.0f, 8318400.0f, 1e30f,    3.4028235e38f};
    enum { N = sizeof amaxes / sizeof amaxes[0] };
    float x[N * 32];
    uint8_t out[N * 34], want[N * 34];

    if (!tbm_isa_supported(isa) || !tbm_isa_supported(TBM_ISA_AVX2))
        skip();
    for (size_t a = 0; a < N; a++) {
        for (int j = 0; j < 32; j++)
            x[32 * a + j] = amaxes[a] * (float)(j - 15) / 16.0f;
        x[32 * a + 7] = -amaxes[a];
        model_block(x + 32 * a, want + 34 * a);
        quantize(isa, x + 32 * a, 1, out + 34 * a);
    }
    assert_memory_equal(out, want, sizeof want);
    quantize(isa, x, N, out);
    assert_memory_equal(out, want, sizeof want);
}

/* The portable path against the model, and every level against the portable
 * path, on random blocks of every kind, in runs of 1 to 300 blocks. */
static void test_random(void **state)
{
    enum tbm_isa isa = state_isa(state);
    size_t max = 300;

    if (!tbm_isa_supported(isa))
        skip();
    float *x = malloc(max * 32 * sizeof(float));
    uint8_t *got = malloc(max * 34), *want = malloc(max * 34);
    assert_non_null(x);
    assert_non_null(got);
    assert_non_null(want);
    for (int round = 0; round < 400; round++) {
        size_t blocks = 1 + rnd() % max;
        int special = round % 4 == 0;
        for (size_t b = 0; b < blocks; b++) {
            /* blocks of one magnitude, so that most values quantize to non-zero */
            float scale = ldexpf(1.0f, (int)(rnd() % 80) - 40);
            int kind = (int)(rnd() % 8);
            for (int j = 0; j < 32; j++) {
                float v = random_value(special && rnd() % 64 == 0);
                x[b * 32 + j] = kind == 0 ? v : kind == 1 ? 0.0f : scale * v;
            }
            if (kind == 2)
                x[b * 32 + rnd() % 32] = 127.0f * scale; /* ties when the scale is exact */
        }
        if (isa == TBM_ISA_SCALAR) {
            if (!tbm_isa_supported(TBM_ISA_AVX2))
                skip();
            for (size_t b = 0; b < blocks; b++)
                model_block(x + 32 * b, want + 34 * b);
        } else {
            tbm_q8_0_scalar(x, blocks, want);
        }
        quantize(isa, x, blocks, got);
        assert_memory_equal(got, want, blocks * 34);
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
        cmocka_unit_test(test_f16_from_bits),
        PER_ISA(test_by_hand),
        PER_ISA(test_zero_and_special_blocks),
        PER_ISA(test_extreme_scales),
        PER_ISA(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
