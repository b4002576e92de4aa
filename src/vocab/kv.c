/* The vocabulary's GGUF key-values (the GGUF format of ggml's docs/gguf.md,
 * little-endian like the host, as src/views/gguf_layout.c writes the
 * others), in the contract's order, each only where it applies; one walk
 * both counts their bytes and writes them, so the two always agree. And the
 * read-only accessors of a built vocabulary. */
#include "vocab_impl.h"

#include <stdio.h>
#include <string.h>

enum { KV_UINT32 = 4, KV_INT32 = 5, KV_FLOAT32 = 6, KV_BOOL = 7, KV_STRING = 8, KV_ARRAY = 9 };

/* Writes to p when it is not NULL; counts the bytes and the keys either way. */
struct out {
    uint8_t *p;
    uint64_t size, keys;
};

static void put(struct out *o, const void *data, size_t len)
{
    if (o->p) {
        memcpy(o->p, data, len);
        o->p += len;
    }
    o->size += len;
}

static void put_u32(struct out *o, uint32_t v)
{
    put(o, &v, sizeof v);
}

static void put_u64(struct out *o, uint64_t v)
{
    put(o, &v, sizeof v);
}

static void put_str(struct out *o, const char *s, size_t len)
{
    put_u64(o, len);
    put(o, s, len);
}

static void key(struct out *o, const char *name, uint32_t type)
{
    put_str(o, name, strlen(name));
    put_u32(o, type);
    o->keys++;
}

static void array(struct out *o, const char *name, uint32_t type, uint64_t n)
{
    key(o, name, KV_ARRAY);
    put_u32(o, type);
    put_u64(o, n);
}

static void kv_string(struct out *o, const char *name, const char *s, size_t len)
{
    key(o, name, KV_STRING);
    put_str(o, s, len);
}

static void kv_id(struct out *o, const char *name, int64_t id)
{
    if (id < 0)
        return;
    key(o, name, KV_UINT32);
    put_u32(o, (uint32_t)id);
}

static void kv_bool(struct out *o, const char *name, bool v)
{
    uint8_t b = v;

    key(o, name, KV_BOOL);
    put(o, &b, 1);
}

static void walk(const struct tbm_vocab *v, struct out *o)
{
    bool gpt2 = v->kind == TBM_VOCAB_GPT2;
    char pad[24];

    kv_string(o, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama", gpt2 ? 4 : 5);
    if (gpt2)
        kv_string(o, "tokenizer.ggml.pre", v->pre, strlen(v->pre));
    array(o, "tokenizer.ggml.tokens", KV_STRING, v->n_tokens);
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        size_t len;
        const char *t = tbm_vocab_token(v, id, pad, &len);
        put_str(o, t, len);
    }
    if (!gpt2) {
        array(o, "tokenizer.ggml.scores", KV_FLOAT32, v->n_tokens);
        put(o, v->score, (size_t)v->n_tokens * sizeof(float));
    }
    array(o, "tokenizer.ggml.token_type", KV_INT32, v->n_tokens);
    for (uint32_t id = 0; id < v->n_tokens; id++)
        put_u32(o, v->type[id]);
    if (gpt2) {
        array(o, "tokenizer.ggml.merges", KV_STRING, v->n_merges);
        for (uint32_t r = 0; r < v->n_merges; r++) {
            size_t len;
            const char *m = tbm_vocab_merge(v, r, &len);
            put_str(o, m, len);
        }
    }
    kv_id(o, "tokenizer.ggml.bos_token_id", v->bos);
    kv_id(o, "tokenizer.ggml.eos_token_id", v->eos);
    kv_id(o, "tokenizer.ggml.unknown_token_id", v->unk);
    kv_id(o, "tokenizer.ggml.padding_token_id", v->pad);
    kv_bool(o, "tokenizer.ggml.add_bos_token", v->add_bos);
    kv_bool(o, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (!gpt2)
        kv_bool(o, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    if (v->chat_template)
        kv_string(o, "tokenizer.chat_template", v->chat_template, v->chat_template_len);
}

uint64_t tbm_vocab_kv_count(const struct tbm_vocab *v)
{
    struct out o = {0};

    walk(v, &o);
    return o.keys;
}

uint64_t tbm_vocab_kv_size(const struct tbm_vocab *v)
{
    struct out o = {0};

    walk(v, &o);
    return o.size;
}

void tbm_vocab_kv_write(const struct tbm_vocab *v, uint8_t *dst)
{
    struct out o = {.p = dst};

    walk(v, &o);
}

void tbm_vocab_get_info(const struct tbm_vocab *v, struct tbm_vocab_info *info)
{
    *info = (struct tbm_vocab_info){
        .kind = v->kind,
        .pre = v->pre,
        .n_tokens = v->n_tokens,
        .n_merges = v->n_merges,
        .bos = v->bos,
        .eos = v->eos,
        .unk = v->unk,
        .pad = v->pad,
        .add_bos = v->add_bos,
        .add_eos = v->add_eos,
        .add_space_prefix = v->add_space_prefix,
        .chat_template = v->chat_template,
        .chat_template_len = v->chat_template_len,
    };
    info->kept_bytes = sizeof(*v) + v->text_len + ((size_t)v->n_tokens + 1) * sizeof(*v->off) +
                       v->n_tokens + (v->score ? (size_t)v->n_tokens * sizeof(float) : 0) +
                       (v->merge_off ? v->merge_off[v->n_merges] +
                                           ((size_t)v->n_merges + 1) * sizeof(*v->merge_off)
                                     : 0) +
                       v->chat_template_len;
}

const char *tbm_vocab_token(const struct tbm_vocab *v, uint32_t id, char pad[24], size_t *len)
{
    if (v->type[id] == TBM_TOKEN_UNUSED) {
        *len = (size_t)snprintf(pad, 24, "[PAD%u]", id);
        return pad;
    }
    *len = v->off[id + 1] - v->off[id];
    return v->text + v->off[id];
}

enum tbm_token_type tbm_vocab_token_type(const struct tbm_vocab *v, uint32_t id)
{
    return (enum tbm_token_type)v->type[id];
}

float tbm_vocab_score(const struct tbm_vocab *v, uint32_t id)
{
    return v->score ? v->score[id] : 0.0f;
}

const char *tbm_vocab_merge(const struct tbm_vocab *v, uint32_t r, size_t *len)
{
    *len = v->merge_off[r + 1] - v->merge_off[r];
    return v->merges + v->merge_off[r];
}
