/* Q4_K, Q5_K and Q6_K on AVX2: 8 lanes, a Q4_K/Q5_K super-block's 8 sub-blocks per pass, a Q6_K
 * one's 16 in two (kquant_simd.h). */
#include "lanes_avx2.h"
#include "kquant_simd.h"

void tbm_q4_k_avx2(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q4_k_search, TBM_Q4_K_BYTES, false);
}

void tbm_q5_k_avx2(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q5_k_search, TBM_Q5_K_BYTES, true);
}

void tbm_q6_k_avx2(const float *x, size_t blocks, uint8_t *out)
{
    q6_simd(x, blocks, out);
}
