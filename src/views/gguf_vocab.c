/* The GGUF files' vocabulary block: the tokenizer's key-values, built from
 * tokenizer.json once at mount, rendered once and shared by every GGUF file
 * (docs/MOUNT_LAYOUT.md, "Vocabulary [v4]"); the parse and the built form
 * are freed, the bytes being all a read needs. */
#include "gguf.h"

#include "tbm/vocab.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

/* The config's vocab_size, 0 when it is not one the GGUF files take (then
 * they do not exist, and model.json says why). */
static uint64_t vocab_size(const struct json_object *config)
{
    struct json_object *o;

    if (!config || !json_object_object_get_ex(config, "vocab_size", &o) ||
        !json_object_is_type(o, json_type_int) || json_object_get_int64(o) < 1 ||
        json_object_get_uint64(o) > UINT32_MAX)
        return 0;
    return json_object_get_uint64(o);
}

static int render(struct tbm_gguf_vocab *g, const struct tbm_vocab *vocab)
{
    uint64_t size = tbm_vocab_kv_size(vocab);

    if (size > SIZE_MAX || !(g->kv = malloc(size ? (size_t)size : 1)))
        return TBM_ERR_NOMEM;
    tbm_vocab_kv_write(vocab, (uint8_t *)g->kv);
    g->len = (size_t)size;
    g->count = tbm_vocab_kv_count(vocab);
    return 0;
}

int tbm_gguf_vocab_open(const struct tbm_tokenizer_files *files, const struct json_object *config,
                        struct tbm_gguf_vocab **out)
{
    struct tbm_gguf_vocab *g;
    struct tbm_vocab *vocab = NULL;
    uint64_t n = vocab_size(config);
    char *why = NULL;
    int r;

    *out = NULL;
    if (!files || !files->file[TBM_TOKENIZER_JSON].present || n == 0)
        return 0;
    if (!(g = calloc(1, sizeof(*g))))
        return TBM_ERR_NOMEM;
    r = tbm_vocab_build(files, n, &vocab, &why);
    if (r == TBM_ERR_SOURCE) {
        r = why && asprintf(&g->missing, "no vocabulary in model.gguf: %s", why) >= 0
                ? 0
                : TBM_ERR_NOMEM;
        if (r == TBM_ERR_NOMEM)
            g->missing = NULL;
    } else if (r == 0) {
        r = render(g, vocab);
    }
    free(why);
    tbm_vocab_free(vocab);
    if (r < 0) {
        tbm_gguf_vocab_free(g);
        return r;
    }
    *out = g;
    return 0;
}

void tbm_gguf_vocab_free(struct tbm_gguf_vocab *g)
{
    if (!g)
        return;
    free(g->kv);
    free(g->missing);
    free(g);
}
