/* The quantizer templates compiled with 16 lanes of paired AVX2 vectors (lanes_pair.h), in a
 * file of their own built with the AVX2 flags, for test_lanes16. */
#include "lanes_pair.h"
#include "kquant_simd.h"
#include "q5_simd.h"
#include "lanes16.h"

void lanes16_q4_k(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q4_k_search, TBM_Q4_K_BYTES, false);
}

void lanes16_q5_k(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q5_k_search, TBM_Q5_K_BYTES, true);
}

void lanes16_q6_k(const float *x, size_t blocks, uint8_t *out)
{
    q6_simd(x, blocks, out);
}

void lanes16_q5_0(const float *x, size_t blocks, uint8_t *out)
{
    q5_0_simd(x, blocks, out);
}

void lanes16_q5_1(const float *x, size_t blocks, uint8_t *out)
{
    q5_1_simd(x, blocks, out);
}
