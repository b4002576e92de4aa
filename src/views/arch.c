/* The architectures' table (arch.h): llama and mistral as llama.cpp's
 * llama, qwen2, qwen3. */
#include "arch.h"

#include <strings.h>

#define LLAMA_LAYER                                                                                \
    {"input_layernorm.weight", "attn_norm.weight", TBM_DIM_HIDDEN, TBM_DIM_NONE, 0},               \
        {"self_attn.q_proj.weight", "attn_q.weight", TBM_DIM_Q, TBM_DIM_HIDDEN, 'q'},              \
        {"self_attn.k_proj.weight", "attn_k.weight", TBM_DIM_KV, TBM_DIM_HIDDEN, 'k'},             \
        {"self_attn.v_proj.weight", "attn_v.weight", TBM_DIM_KV, TBM_DIM_HIDDEN, 0},               \
        {"self_attn.o_proj.weight", "attn_output.weight", TBM_DIM_HIDDEN, TBM_DIM_Q, 0},           \
        {"post_attention_layernorm.weight", "ffn_norm.weight", TBM_DIM_HIDDEN, TBM_DIM_NONE, 0},   \
        {"mlp.gate_proj.weight", "ffn_gate.weight", TBM_DIM_INTER, TBM_DIM_HIDDEN, 0},             \
        {"mlp.up_proj.weight", "ffn_up.weight", TBM_DIM_INTER, TBM_DIM_HIDDEN, 0},                 \
    {                                                                                              \
        "mlp.down_proj.weight", "ffn_down.weight", TBM_DIM_HIDDEN, TBM_DIM_INTER, 0                \
    }

static const struct tbm_arch_tensor llama_layer[] = {LLAMA_LAYER};

/* qwen2's attention projections have biases */
static const struct tbm_arch_tensor qwen2_layer[] = {
    LLAMA_LAYER,
    {"self_attn.q_proj.bias", "attn_q.bias", TBM_DIM_Q, TBM_DIM_NONE, 0},
    {"self_attn.k_proj.bias", "attn_k.bias", TBM_DIM_KV, TBM_DIM_NONE, 0},
    {"self_attn.v_proj.bias", "attn_v.bias", TBM_DIM_KV, TBM_DIM_NONE, 0},
};

/* qwen3 normalizes each query and key head */
static const struct tbm_arch_tensor qwen3_layer[] = {
    LLAMA_LAYER,
    {"self_attn.q_norm.weight", "attn_q_norm.weight", TBM_DIM_HEAD, TBM_DIM_NONE, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", TBM_DIM_HEAD, TBM_DIM_NONE, 0},
};

#define LAYER(a) a, sizeof(a) / sizeof(a[0])

/* llama.cpp applies qwen's rotary embedding to Hugging Face's layout (no
 * permutation); its model loader calls llama with 80 layers and grouped
 * heads 70B, qwen2 with 80 layers 70B, qwen3 never. */
static const struct tbm_arch table[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false, 80, true, LAYER(llama_layer)},
    {"mistral", "MistralForCausalLM", "llama", true, false, 80, true, LAYER(llama_layer)},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false, 80, false, LAYER(qwen2_layer)},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, 0, false, LAYER(qwen3_layer)},
};

const struct tbm_arch *tbm_arch_find(const char *name)
{
    for (size_t k = 0; name && k < sizeof(table) / sizeof(table[0]); k++)
        if (strcasecmp(name, table[k].name) == 0)
            return &table[k];
    return NULL;
}
