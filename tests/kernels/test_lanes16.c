/* The quantizer templates (kquant_simd.h, q5_simd.h) compiled with 16 lanes, as the AVX-512
 * path compiles them (two Q4_K/Q5_K super-blocks per pass and a half-empty last one, a Q6_K
 * super-block in one pass, 16 Q5_0/Q5_1 blocks at a time), on lane operations made of two AVX2
 * vectors (lanes_pair.h), against the portable path: what of the AVX-512 path a CPU without
 * AVX-512 can check (the templates are built in lanes16.c). Skipped without AVX2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lanes16.h"
#include "quant_internal.h"
#include "quant_rows.h"

static const struct {
    uint32_t type;
    void (*lanes16)(const float *x, size_t blocks, uint8_t *out);
    void (*scalar)(const float *x, size_t blocks, uint8_t *out);
} paths[] = {
    {12, lanes16_q4_k, tbm_q4_k_scalar}, {13, lanes16_q5_k, tbm_q5_k_scalar},
    {14, lanes16_q6_k, tbm_q6_k_scalar}, {6, lanes16_q5_0, tbm_q5_0_scalar},
    {7, lanes16_q5_1, tbm_q5_1_scalar},
};

/* Rows of 1 to 41 super-blocks of every kind, a NaN or an infinity now and then. */
static void test_templates(void **state)
{
    (void)state;
    if (!tbm_isa_supported(TBM_ISA_AVX2))
        skip();
    float *x = malloc(sizeof(float) * 256 * 41);
    uint8_t *got = malloc(210 * 41 * 8), *want = malloc(210 * 41 * 8);
    assert_non_null(x);
    assert_non_null(got);
    assert_non_null(want);
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        const struct tbm_quant *q = tbm_quant_find(paths[p].type);
        for (int r = 0; r < 300; r++) {
            size_t n = 1 + qrow_rnd() % (r % 6 == 0 ? 41 : 4);
            qrow_fill(x, n, r);
            size_t blocks = 256 * n / q->block_elems - (q->block_elems == 32 ? qrow_rnd() % 8 : 0);
            paths[p].scalar(x, blocks, want);
            memset(got, 0xA5, blocks * q->block_bytes);
            paths[p].lanes16(x, blocks, got);
            assert_memory_equal(got, want, blocks * q->block_bytes);
        }
    }
    free(x);
    free(got);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_templates)};

    return cmocka_run_group_tests(tests, NULL, NULL);
}
