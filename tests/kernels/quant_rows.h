/* Rows of float32 for the quantizer tests (test_quant.c, test_quant_oracle.c): a fixed-seed
 * generator, and 256-value blocks of every kind that reaches a branch of llama.cpp's
 * reference quantizers or an edge of float arithmetic: gaussian and uniform values over 60
 * binades, 2:4-pruned ones, all +0.0 or -0.0 or both, one value, a constant, subnormals, values
 * up to FLT_MAX (whose sums overflow), grid values that scale to rounding ties, few levels,
 * one sign only, an outlier, fp16- and bf16-rounded weights, a zero sub-block among others. */
#ifndef TBM_TESTS_QUANT_ROWS_H
#define TBM_TESTS_QUANT_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define QROW_BLOCK 256
#define QROW_KINDS 20

static uint64_t qrow_state = 0x9E3779B97F4A7C15u;

/* splitmix64 */
static inline uint64_t qrow_rnd(void)
{
    uint64_t z = (qrow_state += 0x9E3779B97F4A7C15u);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static inline float qrow_bits(uint32_t b)
{
    float f;

    memcpy(&f, &b, sizeof f);
    return f;
}

/* Uniform in [0, 1). */
static inline float qrow_unit(void)
{
    return (float)(qrow_rnd() >> 40) / (float)(1 << 24);
}

/* Standard normal (Box-Muller, in double, then float). */
static inline float qrow_normal(void)
{
    double u = ((double)(qrow_rnd() >> 11) + 0.5) / 9007199254740992.0;
    double v = (double)(qrow_rnd() >> 11) / 9007199254740992.0;

    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* A power of two between 2^lo and 2^hi. */
static inline float qrow_pow2(int lo, int hi)
{
    return ldexpf(1.0f, lo + (int)(qrow_rnd() % (uint64_t)(hi - lo + 1)));
}

/* Fills the 256 values at x with a block of kind (0..QROW_KINDS-1); never a NaN or an
 * infinity. */
static inline void qrow_block(float *x, int kind)
{
    float s = qrow_pow2(-30, 30), c;
    int n = QROW_BLOCK;

    switch (kind) {
    case 0: /* gaussian */
        for (int i = 0; i < n; i++)
            x[i] = s * qrow_normal();
        return;
    case 1: /* uniform, one sign or both */
        for (int i = 0; i < n; i++)
            x[i] = s * (2.0f * qrow_unit() - 1.0f);
        return;
    case 2: /* 2:4 pruned gaussian: two of every four +0 */
        for (int i = 0; i < n; i += 4) {
            int a = (int)(qrow_rnd() % 4), b = (a + 1 + (int)(qrow_rnd() % 3)) % 4;
            for (int j = 0; j < 4; j++)
                x[i + j] = j == a || j == b ? s * qrow_normal() : 0.0f;
        }
        return;
    case 3:
        memset(x, 0, sizeof(float) * (size_t)n);
        return;
    case 4: /* +0.0 and -0.0 at random */
        for (int i = 0; i < n; i++)
            x[i] = qrow_rnd() & 1 ? -0.0f : 0.0f;
        return;
    case 5: /* one value among zeros */
        memset(x, 0, sizeof(float) * (size_t)n);
        x[qrow_rnd() % (uint64_t)n] = s * qrow_normal();
        return;
    case 6: /* a constant, per sub-block or whole */
        c = s * qrow_normal();
        for (int i = 0; i < n; i++)
            x[i] = qrow_rnd() % 8 == 0 ? s * qrow_normal() : c;
        if (qrow_rnd() & 1)
            for (int i = 0; i < n; i++)
                x[i] = c;
        return;
    case 7: /* subnormals, and some of the smallest normals */
        for (int i = 0; i < n; i++) {
            uint32_t b = (uint32_t)qrow_rnd() & 0x807FFFFF;
            if (qrow_rnd() % 4 == 0)
                b |= 0x00800000;
            x[i] = qrow_bits(b);
        }
        return;
    case 8: /* up to FLT_MAX: sums of squares overflow */
        for (int i = 0; i < n; i++)
            x[i] = (qrow_rnd() & 1 ? -1.0f : 1.0f) * qrow_unit() * 3.4028234e38f;
        return;
    case 9: /* grid values: multiples of a power of two, ties once scaled */
        for (int i = 0; i < n; i++)
            x[i] = s * (float)((int)(qrow_rnd() % 33) - 16) * 0.5f;
        return;
    case 10: /* halves: integers + 0.5 */
        for (int i = 0; i < n; i++)
            x[i] = s * ((float)((int)(qrow_rnd() % 31) - 15) + 0.5f);
        return;
    case 11: /* a few levels */
        for (int i = 0; i < n; i++)
            x[i] = s * (float)(qrow_rnd() % 3);
        return;
    case 12: /* positive only */
        for (int i = 0; i < n; i++)
            x[i] = s * (1.0f + qrow_unit());
        return;
    case 13: /* negative only */
        for (int i = 0; i < n; i++)
            x[i] = -s * (0.5f + qrow_unit());
        return;
    case 14: /* one outlier */
        for (int i = 0; i < n; i++)
            x[i] = s * qrow_normal();
        x[qrow_rnd() % (uint64_t)n] *= 1000.0f;
        return;
    case 15: /* fp16-rounded weights */
        for (int i = 0; i < n; i++) {
            float v = 0.02f * qrow_normal();
            uint32_t b;
            memcpy(&b, &v, sizeof b);
            x[i] = qrow_bits(b & 0xFFFFE000);
        }
        return;
    case 16: /* bf16 weights */
        for (int i = 0; i < n; i++) {
            float v = 0.05f * qrow_normal();
            uint32_t b;
            memcpy(&b, &v, sizeof b);
            x[i] = qrow_bits(b & 0xFFFF0000);
        }
        return;
    case 17: /* a zero sub-block (of 32, and of 16) among gaussian ones */
        for (int i = 0; i < n; i++)
            x[i] = s * qrow_normal();
        memset(x + 32 * (qrow_rnd() % 8), 0, 32 * sizeof(float));
        memset(x + 16 * (qrow_rnd() % 16), 0, 16 * sizeof(float));
        return;
    case 18: /* any finite bits */
        for (int i = 0; i < n; i++) {
            uint32_t b;
            do
                b = (uint32_t)qrow_rnd();
            while ((b & 0x7F800000) == 0x7F800000);
            x[i] = qrow_bits(b);
        }
        return;
    default: /* each sub-block of 32 its own magnitude */
        for (int j = 0; j < n; j += 32) {
            float sj = qrow_pow2(-40, 40);
            for (int i = 0; i < 32; i++)
                x[j + i] = sj * qrow_normal();
        }
        return;
    }
}

/* A row of n blocks of 256 for round r of a test: every block of one kind (r's) on even
 * rounds, of random kinds on odd ones; every fifth round a NaN or an infinity somewhere. */
static inline void qrow_fill(float *x, size_t n, int r)
{
    for (size_t b = 0; b < n; b++)
        qrow_block(x + QROW_BLOCK * b, r % 2 ? (int)(qrow_rnd() % QROW_KINDS) : r % QROW_KINDS);
    if (r % 5 == 0) {
        uint32_t bits = r % 10 ? 0x7FC00000u : 0xFF800000u;
        memcpy(&x[qrow_rnd() % (QROW_BLOCK * n)], &bits, sizeof(float));
    }
}

#endif
