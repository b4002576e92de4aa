/* F16 rows of model.Q4_K_M.gguf (llama.cpp's fall-back for rows that no block fits): the
 * dispatcher and the portable reference of llama.cpp's ggml_fp32_to_fp16_row, whose software
 * conversion rounds to nearest even as x86 does but turns every NaN into 0x7E00 with its sign
 * (tested against it). */
#include "quant_internal.h"

void tbm_f16_scalar(const float *x, size_t count, uint8_t *out)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t bits;

        memcpy(&bits, &x[i], sizeof bits);
        if ((bits & 0x7FFFFFFF) > 0x7F800000)
            tbm_quant_store16(out + 2 * i, (uint16_t)(bits >> 16 & 0x8000) | 0x7E00);
        else
            tbm_quant_store16(out + 2 * i, tbm_f16_from_bits(bits));
    }
}

void tbm_f16_quantize(enum tbm_isa isa, const float *x, size_t count, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_f16_avx512(x, count, out);
        return;
    case TBM_ISA_AVX2:
        tbm_f16_avx2(x, count, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_f16_scalar(x, count, out);
}
