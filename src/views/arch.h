/* The architectures the whole-model files know (docs/MOUNT_LAYOUT.md,
 * "Whole-model views" and "Architectures [v4]"), as data: what config.json
 * calls each, and what its GGUF files name, need and write. The next
 * architecture is a row of arch.c. */
#ifndef TBM_VIEWS_ARCH_H
#define TBM_VIEWS_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A tensor's dimension, in units of the config: hidden_size, the query
 * heads' rows (num_heads * head size), the key/value heads' rows, one head,
 * intermediate_size, vocab_size; NONE for the columns of a 1-D tensor. */
enum tbm_arch_dim {
    TBM_DIM_NONE,
    TBM_DIM_HIDDEN,
    TBM_DIM_Q,
    TBM_DIM_KV,
    TBM_DIM_HEAD,
    TBM_DIM_INTER,
    TBM_DIM_VOCAB
};

/* A tensor of each layer: its Hugging Face name after "model.layers.N.",
 * its GGUF name after "blk.N.", its shape, and whether its rows are permuted
 * as llama.cpp's converter does for the query (q) or key (k) heads. */
struct tbm_arch_tensor {
    const char *hf, *gguf;
    enum tbm_arch_dim rows, cols;
    char permute; /* 'q', 'k' or 0 */
};

struct tbm_arch {
    const char *name;                    /* the index's architecture, any case */
    const char *hf_class;                /* config.json's architectures[0] */
    const char *gguf;                    /* general.architecture, the prefix of its keys */
    bool permute;                        /* q and k rows permuted (llama's rotary layout) */
    bool head_dim;                       /* the config's head_dim is the head size, and the
                                          * GGUF files say it as key_length/value_length */
    uint32_t layers_70b;                 /* llama.cpp's LLM_TYPE_70B (its Q4_K_M attn_v
                                          * rule) at this many layers; 0: never */
    bool gqa_70b;                        /* ... only with grouped key/value heads */
    const struct tbm_arch_tensor *layer; /* every tensor a layer needs */
    size_t nlayer;
};

/* The row of architecture name (any case), or NULL. */
const struct tbm_arch *tbm_arch_find(const char *name);

#endif
