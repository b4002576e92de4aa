/* model.Q4_K_M.gguf's rule: the type llama_model_quantize (llama.cpp v0.4.0,
 * LLAMA_FTYPE_MOSTLY_Q4_K_M, default parameters) gives each tensor of
 * model.gguf, as src/llama-quant.cpp decides it (docs/MOUNT_LAYOUT.md,
 * "model.Q4_K_M.gguf [v4]"). */
#include "gguf.h"

#include <string.h>

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and
 * every third one between, get more bits. */
static bool more_bits(uint64_t i, uint64_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* A type's fall-back when a row is not a whole number of its blocks
 * (tensor_type_fallback): the k-quants to the 32-element type of as many
 * bits, then F16. */
static uint32_t fit(uint32_t type, uint64_t row)
{
    static const uint32_t fallback[][2] = {
        {TBM_GGUF_Q4_K, TBM_GGUF_Q5_0},
        {TBM_GGUF_Q5_K, TBM_GGUF_Q5_1},
        {TBM_GGUF_Q6_K, TBM_GGUF_Q8_0},
    };

    if (row % tbm_quant_find(type)->block_elems == 0)
        return type;
    for (size_t k = 0; k < sizeof(fallback) / sizeof(fallback[0]); k++)
        if (fallback[k][0] == type && row % tbm_quant_find(fallback[k][1])->block_elems == 0)
            return fallback[k][1];
    return TBM_GGUF_F16;
}

static bool ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), e = strlen(end);

    return n >= e && strcmp(s + n - e, end) == 0;
}

/* The counters llama.cpp keeps of attn_v and ffn_down in its tensor order
 * are the layer number: every layer has one of each (gguf_layout.c requires
 * them). Its 70B rule (attn_v Q5_K) is the architecture's (arch.h). */
static uint32_t q4_k_m_type(const struct tbm_gguf_model *m, const struct tbm_gguf_tensor *gt,
                            unsigned precision)
{
    const char *name = gt->name;
    uint32_t type = TBM_GGUF_Q4_K;

    /* ggml counts a matrix of one row as 1-D; norms are kept */
    if (!gt->matrix || gt->rows == 1 || !ends_with(name, "weight") || strstr(name, "_norm.weight"))
        return tbm_gguf_stored_type(gt, precision);
    if (strcmp(name, "output.weight") == 0 ||
        (!m->output && strcmp(name, "token_embd.weight") == 0)) {
        type = gt->cols % TBM_QK_K ? TBM_GGUF_Q8_0 : TBM_GGUF_Q6_K;
    } else if (strstr(name, "attn_v.weight")) {
        if (more_bits((uint64_t)gt->layer, m->layers))
            type = TBM_GGUF_Q6_K;
        else if (m->type_70b)
            type = TBM_GGUF_Q5_K;
    } else if (strstr(name, "ffn_down") && more_bits((uint64_t)gt->layer, m->layers)) {
        type = TBM_GGUF_Q6_K;
    }
    return fit(type, gt->cols);
}

/* llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M */
const struct tbm_gguf_variant tbm_gguf_q4_k_m = {q4_k_m_type, 15, true, true};
