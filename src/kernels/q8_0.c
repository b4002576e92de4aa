/* Q8_0 quantization (model.Q8_0.gguf): the dispatcher and the portable
 * reference, which defines the output bit for bit (the SIMD paths are tested
 * against it), written from the rules of llama.cpp's quantize_row_q8_0_ref. */
#include <math.h>

#include "internal.h"

static void quantize_block(const float *x, uint8_t *out)
{
    float amax = 0.0f, id;
    bool finite = true;

    for (unsigned j = 0; j < TBM_Q8_0_ELEMS; j++) {
        uint32_t bits;
        float a = fabsf(x[j]);

        memcpy(&bits, &x[j], sizeof bits);
        finite &= (bits & 0x7F800000) != 0x7F800000;
        amax = a > amax ? a : amax;
    }
    if (!finite) {
        tbm_q8_0_nonfinite(out);
        return;
    }
    tbm_q8_0_store_d(out, tbm_q8_0_scale(amax, &id));
    /* |x * id| stays below 127.5, so the conversion is exact */
    for (unsigned j = 0; j < TBM_Q8_0_ELEMS; j++)
        out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

void tbm_q8_0_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++)
        quantize_block(x + b * TBM_Q8_0_ELEMS, out + b * TBM_Q8_0_BYTES);
}

void tbm_q8_0_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q8_0_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q8_0_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q8_0_scalar(x, blocks, out);
}
