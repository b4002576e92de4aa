/* Q4_K, Q5_K and Q6_K on AVX-512: 16 lanes, two Q4_K/Q5_K super-blocks' sub-blocks per pass, a Q6_K
 * one's 16 in one (kquant_simd.h). */
#include "lanes_avx512.h"
#include "kquant_simd.h"

void tbm_q4_k_avx512(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q4_k_search, TBM_Q4_K_BYTES, false);
}

void tbm_q5_k_avx512(const float *x, size_t blocks, uint8_t *out)
{
    kq_simd(x, blocks, out, &tbm_q5_k_search, TBM_Q5_K_BYTES, true);
}

void tbm_q6_k_avx512(const float *x, size_t blocks, uint8_t *out)
{
    q6_simd(x, blocks, out);
}
