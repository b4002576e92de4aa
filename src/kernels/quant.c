/* The table of the GGUF tensor types computed from float32 rows, by ggml type code. */
#include "tbm/kernels.h"

static const struct tbm_quant quants[] = {
    {1, "f16", 1, 2, tbm_f16_quantize},
    {6, "q5_0", TBM_Q5_0_ELEMS, TBM_Q5_0_BYTES, tbm_q5_0_quantize},
    {7, "q5_1", TBM_Q5_1_ELEMS, TBM_Q5_1_BYTES, tbm_q5_1_quantize},
    {8, "q8_0", TBM_Q8_0_ELEMS, TBM_Q8_0_BYTES, tbm_q8_0_quantize},
    {12, "q4_K", TBM_QK_K, TBM_Q4_K_BYTES, tbm_q4_k_quantize},
    {13, "q5_K", TBM_QK_K, TBM_Q5_K_BYTES, tbm_q5_k_quantize},
    {14, "q6_K", TBM_QK_K, TBM_Q6_K_BYTES, tbm_q6_k_quantize},
};

const struct tbm_quant *tbm_quant_find(uint32_t ggml_type)
{
    for (size_t i = 0; i < sizeof quants / sizeof quants[0]; i++)
        if (quants[i].ggml_type == ggml_type)
            return &quants[i];
    return NULL;
}
