/* The vocabulary as kept: one arena of token texts with offsets by id, the
 * types, the scores (llama kind), the merges' texts (gpt2 kind). */
#ifndef TBM_VOCAB_IMPL_H
#define TBM_VOCAB_IMPL_H

#include "internal.h"

struct tbm_vocab {
    enum tbm_vocab_kind kind;
    const char *pre; /* static: a name of the pre-tokenizer table */
    uint32_t n_tokens;
    char *text; /* token texts in id order; a pad id has none */
    size_t text_len;
    uint32_t *off;       /* n_tokens + 1 offsets into text */
    uint8_t *type;       /* enum tbm_token_type by id */
    float *score;        /* by id, llama kind only */
    char *merges;        /* "left right" texts back to back, gpt2 kind only */
    uint32_t *merge_off; /* n_merges + 1 offsets into merges */
    uint32_t n_merges;
    int64_t bos, eos, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    char *chat_template;
    size_t chat_template_len;
};

#endif
