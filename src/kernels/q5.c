/* The 32-element fall-backs of model.Q4_K_M.gguf (Q5_0 for Q4_K rows, Q5_1 for Q5_K ones):
 * the dispatchers and the portable reference, written from the rules of llama.cpp's
 * quantize_row_q5_0_ref and quantize_row_q5_1_ref (tested against them). */
#include "quant_internal.h"

/* Q5_0: d = -max / 16 for max the block's value of largest magnitude (the first such), and
 * each quant the truncation of x / d + 16.5, kept in an int8 and capped at 31. */
static void q5_0_block(const float *x, uint8_t *out)
{
    float amax, max = tbm_quant_absmax(x, TBM_Q5_0_ELEMS, &amax);
    uint8_t L[TBM_Q5_0_ELEMS];
    float d = max / -16.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    tbm_quant_store16(out, tbm_quant_f16(d));
    for (int j = 0; j < TBM_Q5_0_ELEMS; j++) {
        int8_t q = (int8_t)(uint8_t)tbm_quant_trunc(x[j] * id + 16.5f);
        L[j] = (uint8_t)(q < 31 ? q : 31);
    }
    tbm_q5_pack(L, out + 2, out + 6);
}

/* Q5_1: d = (max - min) / 31 and m = min (the first of each), each quant the truncation of
 * (x - min) / d + 0.5, kept in a uint8. */
static void q5_1_block(const float *x, uint8_t *out)
{
    float min = FLT_MAX, max = -FLT_MAX;
    uint8_t L[TBM_Q5_1_ELEMS];

    for (int j = 0; j < TBM_Q5_1_ELEMS; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    float d = (max - min) / 31.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    tbm_quant_store16(out, tbm_quant_f16(d));
    tbm_quant_store16(out + 2, tbm_quant_f16(min));
    for (int j = 0; j < TBM_Q5_1_ELEMS; j++)
        L[j] = (uint8_t)tbm_quant_trunc((x[j] - min) * id + 0.5f);
    tbm_q5_pack(L, out + 4, out + 8);
}

void tbm_q5_0_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_Q5_0_ELEMS, out += TBM_Q5_0_BYTES) {
        if (!tbm_quant_finite(x, TBM_Q5_0_ELEMS))
            tbm_quant_nonfinite(out, TBM_Q5_0_BYTES, 0);
        else
            q5_0_block(x, out);
    }
}

void tbm_q5_1_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_Q5_1_ELEMS, out += TBM_Q5_1_BYTES) {
        if (!tbm_quant_finite(x, TBM_Q5_1_ELEMS))
            tbm_quant_nonfinite(out, TBM_Q5_1_BYTES, 0);
        else
            q5_1_block(x, out);
    }
}

void tbm_q5_0_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q5_0_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q5_0_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q5_0_scalar(x, blocks, out);
}

void tbm_q5_1_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q5_1_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q5_1_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q5_1_scalar(x, blocks, out);
}
