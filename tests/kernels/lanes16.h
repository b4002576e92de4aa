/* lanes16.c: the quantizers of the templates at 16 lanes (AVX2 needed), same contracts as the
 * per-level bodies of quant_internal.h. */
#ifndef TBM_TESTS_LANES16_H
#define TBM_TESTS_LANES16_H

#include <stddef.h>
#include <stdint.h>

void lanes16_q4_k(const float *x, size_t blocks, uint8_t *out);
void lanes16_q5_k(const float *x, size_t blocks, uint8_t *out);
void lanes16_q6_k(const float *x, size_t blocks, uint8_t *out);
void lanes16_q5_0(const float *x, size_t blocks, uint8_t *out);
void lanes16_q5_1(const float *x, size_t blocks, uint8_t *out);

#endif
