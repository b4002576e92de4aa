/* Q5_0 and Q5_1 on AVX-512: 16 blocks at a time, a lane each (q5_simd.h). */
#include "lanes_avx512.h"
#include "q5_simd.h"

void tbm_q5_0_avx512(const float *x, size_t blocks, uint8_t *out)
{
    q5_0_simd(x, blocks, out);
}

void tbm_q5_1_avx512(const float *x, size_t blocks, uint8_t *out)
{
    q5_1_simd(x, blocks, out);
}
