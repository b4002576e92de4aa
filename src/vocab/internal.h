/* Shared inside src/vocab: the walk over tokenizer.json, the growable
 * buffers the vocabulary is built in, and the pre-tokenizer table. */
#ifndef TBM_VOCAB_INTERNAL_H
#define TBM_VOCAB_INTERNAL_H

#include "tbm/vocab.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable byte string. */
struct vbuf {
    char *p;
    size_t len, cap;
    bool failed; /* out of memory: what follows is dropped */
};
void vbuf_put(struct vbuf *b, const void *data, size_t len);

/* tokenizer.json read without ever holding its whole tree: model.vocab's
 * entries and model.merges' elements are handed over one at a time, every
 * other value as a json-c value (the small ones: added_tokens, normalizer,
 * pre_tokenizer, post_processor, decoder, model's other keys). */
struct tj_sink {
    void *ctx;
    /* a "token": id entry of model.vocab; text is len bytes */
    int (*vocab_entry)(void *ctx, const char *text, size_t len, struct json_object *id);
    /* an element of model.merges: a "left right" string or a [left, right] pair */
    int (*merge)(void *ctx, struct json_object *merge);
};

struct tj_parsed {
    struct json_object *root;  /* the root object, model.vocab and model.merges left out */
    struct json_object *model; /* root's "model" (owned by root), or NULL */
    bool has_vocab, has_merges;
};

/* Walks len bytes of tokenizer.json (strict JSON, UTF-8). Returns 0, a
 * sink's negative return, or TBM_ERR_SOURCE with *why a malloc'd reason
 * ("tokenizer.json is not valid JSON: ... at byte N, line L, column C"). */
int tj_walk(const char *buf, size_t len, const struct tj_sink *sink, struct tj_parsed *out,
            char **why);

/* Parses a small JSON file whole (strict, UTF-8): NULL when it is not JSON. */
struct json_object *tj_parse_whole(const char *buf, size_t len);

/* The llama.cpp pre-tokenizer whose splitting rules are those of
 * tokenizer.json's pre_tokenizer, told apart by ignore_merges (the model's)
 * and clean_spaces (tokenizer_config.json's clean_up_tokenization_spaces):
 * its name, or NULL with *why set to a static reason. */
const char *pretok_name(struct json_object *pre_tokenizer, bool ignore_merges, bool clean_spaces,
                        const char **why);

#endif
