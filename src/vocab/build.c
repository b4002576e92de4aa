/* Builds the vocabulary of a tokenizer (docs/MOUNT_LAYOUT.md, "Vocabulary
 * [v4]"): which of the two kinds it is, its tokens by id padded to
 * vocab_size, their types and (llama kind) scores, the merges in rank order
 * (gpt2 kind), the special tokens, what is added to a text, and the chat
 * template; all of it kept in one string arena with offsets, the JSON freed. */
#include "vocab_impl.h"

#include "tbm/names.h"
#include "tbm/text.h"
#include "tbm/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vbuf_put(struct vbuf *b, const void *data, size_t len)
{
    if (b->failed || len == 0)
        return;
    if (b->cap - b->len < len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < len)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

/* What the walk gathers: model.vocab's entries and the merges, as read. */
struct gather {
    struct vbuf text;    /* the entries' token texts, back to back */
    struct vbuf entries; /* struct entry, in file order */
    struct vbuf merges;  /* "left right" texts, back to back */
    struct vbuf mergeat; /* struct merge_at per merge */
    uint64_t max_id;     /* the largest id seen + 1 */
    const char *bad;     /* a static reason the walk stopped for */
    bool bad_merge;      /* it is about merge bad_index */
    uint32_t bad_index;
};

struct entry {
    uint32_t id, off, len;
};

struct merge_at {
    uint32_t off, left, right; /* left and right lengths; a space between */
};

static int fail(char **why, const char *fmt, ...)
{
    va_list ap;
    char *raw;

    va_start(ap, fmt);
    int n = vasprintf(&raw, fmt, ap);
    va_end(ap);
    if (n < 0) {
        *why = NULL;
        return TBM_ERR_NOMEM;
    }
    /* token texts quoted in it come from the file: one line of UTF-8 */
    *why = malloc(1024);
    if (*why)
        tbm_text_clean(*why, 1024, raw, (size_t)n);
    free(raw);
    return *why ? TBM_ERR_SOURCE : TBM_ERR_NOMEM;
}

/* A token id of tokenizer.json: 0 to INT32_MAX (llama.cpp's ids are int32). */
static bool token_id(struct json_object *v, uint32_t *id)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x > INT32_MAX)
        return false;
    *id = (uint32_t)x;
    return true;
}

static int gather_entry(void *ctx, const char *text, size_t len, struct json_object *idv)
{
    struct gather *g = ctx;
    uint32_t id;

    if (!token_id(idv, &id)) {
        g->bad = "tokenizer.json's model.vocab has an id that is not a token id (0 to 2^31 - 1)";
        return TBM_ERR_SOURCE;
    }
    if (g->text.len > UINT32_MAX - len) {
        g->bad = "tokenizer.json's model.vocab is too large";
        return TBM_ERR_SOURCE;
    }
    struct entry e = {id, (uint32_t)g->text.len, (uint32_t)len};
    vbuf_put(&g->text, text, len);
    vbuf_put(&g->entries, &e, sizeof(e));
    if ((uint64_t)id + 1 > g->max_id)
        g->max_id = (uint64_t)id + 1;
    return g->text.failed || g->entries.failed ? TBM_ERR_NOMEM : 0;
}

static int gather_merge(void *ctx, struct json_object *m)
{
    struct gather *g = ctx;
    const char *l, *r;
    size_t ll, rl;
    uint32_t index = (uint32_t)(g->mergeat.len / sizeof(struct merge_at));

    if (json_object_is_type(m, json_type_string)) {
        /* "left right": Hugging Face splits it at its one space */
        l = json_object_get_string(m);
        const char *space = memchr(l, ' ', (size_t)json_object_get_string_len(m));
        if (!space ||
            memchr(space + 1, ' ', (size_t)(l + json_object_get_string_len(m) - space - 1))) {
            g->bad = "is not two tokens apart by one space";
            g->bad_merge = true;
            g->bad_index = index;
            return TBM_ERR_SOURCE;
        }
        ll = (size_t)(space - l);
        r = space + 1;
        rl = (size_t)json_object_get_string_len(m) - ll - 1;
    } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
               json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
               json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
        l = json_object_get_string(json_object_array_get_idx(m, 0));
        ll = (size_t)json_object_get_string_len(json_object_array_get_idx(m, 0));
        r = json_object_get_string(json_object_array_get_idx(m, 1));
        rl = (size_t)json_object_get_string_len(json_object_array_get_idx(m, 1));
    } else {
        g->bad = "is neither a \"left right\" string nor a pair of strings";
        g->bad_merge = true;
        g->bad_index = index;
        return TBM_ERR_SOURCE;
    }
    if (g->merges.len + ll + rl + 1 > UINT32_MAX || index == UINT32_MAX) {
        g->bad = "is one too many";
        g->bad_merge = true;
        g->bad_index = index;
        return TBM_ERR_SOURCE;
    }
    struct merge_at at = {(uint32_t)g->merges.len, (uint32_t)ll, (uint32_t)rl};
    vbuf_put(&g->merges, l, ll);
    vbuf_put(&g->merges, " ", 1);
    vbuf_put(&g->merges, r, rl);
    vbuf_put(&g->mergeat, &at, sizeof(at));
    return g->merges.failed || g->mergeat.failed ? TBM_ERR_NOMEM : 0;
}

static void gather_free(struct gather *g)
{
    free(g->text.p);
    free(g->entries.p);
    free(g->merges.p);
    free(g->mergeat.p);
}

/* ---- token text -> id, for the build only ---- */

struct map {
    uint32_t *slot; /* id + 1, 0 empty */
    size_t mask;
    const struct tbm_vocab *v;
};

static int map_init(struct map *m, const struct tbm_vocab *v, size_t count)
{
    size_t cap = 1024;

    while (cap < count * 2)
        cap *= 2;
    m->slot = calloc(cap, sizeof(*m->slot));
    m->mask = cap - 1;
    m->v = v;
    return m->slot ? 0 : TBM_ERR_NOMEM;
}

static const char *text_of(const struct tbm_vocab *v, uint32_t id, size_t *len)
{
    *len = v->off[id + 1] - v->off[id];
    return v->text + v->off[id];
}

/* The id of text, or -1; with add, inserts id when text is new and returns
 * the id already there otherwise. */
static int64_t map_find(struct map *m, const char *text, size_t len, bool add, uint32_t id)
{
    for (size_t i = tbm_fnv1a64(text, len) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slot[i] == 0) {
            if (add)
                m->slot[i] = id + 1;
            return -1;
        }
        size_t l;
        const char *t = text_of(m->v, m->slot[i] - 1, &l);
        if (l == len && memcmp(t, text, len) == 0)
            return m->slot[i] - 1;
    }
}

/* ---- the tokens by id ---- */

/* Places model.vocab's entries and the added tokens by id into v's arena and
 * offsets; pad ids get no text (their type says so). */
static int place_tokens(struct tbm_vocab *v, struct gather *g, struct json_object *added,
                        uint8_t *is_added, char **why)
{
    uint32_t n = v->n_tokens;
    uint32_t *where = malloc((size_t)n * sizeof(*where)); /* entry index + 1, by id */
    struct entry *e = (struct entry *)g->entries.p;
    size_t count = g->entries.len / sizeof(*e);
    int r = 0;

    if (!where)
        return TBM_ERR_NOMEM;
    memset(where, 0, (size_t)n * sizeof(*where));
    for (size_t i = 0; i < count; i++) {
        if (where[e[i].id]) {
            r = fail(why, "tokenizer.json gives id %u to two tokens", e[i].id);
            goto out;
        }
        where[e[i].id] = (uint32_t)i + 1;
    }
    /* added tokens not in model.vocab join the entries */
    for (size_t k = 0; added && k < json_object_array_length(added); k++) {
        struct json_object *a = json_object_array_get_idx(added, k), *idv, *content, *special;
        uint32_t id;
        if (!json_object_object_get_ex(a, "id", &idv) || !token_id(idv, &id) ||
            !json_object_object_get_ex(a, "content", &content) ||
            !json_object_is_type(content, json_type_string)) {
            r = fail(why, "tokenizer.json's added token %zu has no id or content", k);
            goto out;
        }
        const char *c = json_object_get_string(content);
        size_t cl = (size_t)json_object_get_string_len(content);
        bool sp =
            json_object_object_get_ex(a, "special", &special) && json_object_get_boolean(special);
        if (where[id]) {
            struct entry *x = &e[where[id] - 1];
            if (x->len != cl || memcmp(g->text.p + x->off, c, cl) != 0) {
                r = fail(why, "tokenizer.json gives id %u to two tokens", id);
                goto out;
            }
        } else {
            struct entry ne = {id, (uint32_t)g->text.len, (uint32_t)cl};
            vbuf_put(&g->text, c, cl);
            vbuf_put(&g->entries, &ne, sizeof(ne));
            if (g->text.failed || g->entries.failed) {
                r = TBM_ERR_NOMEM;
                goto out;
            }
            e = (struct entry *)g->entries.p;
            where[id] = (uint32_t)(g->entries.len / sizeof(*e));
        }
        is_added[id] = sp ? 2 : 1;
    }
    size_t total = 0;
    for (uint32_t id = 0; id < n; id++)
        total += where[id] ? e[where[id] - 1].len : 0;
    v->off = malloc(((size_t)n + 1) * sizeof(*v->off));
    struct vbuf text = {0};
    if (!v->off) {
        r = TBM_ERR_NOMEM;
        goto out;
    }
    text.p = malloc(total + 1);
    if (!text.p) {
        r = TBM_ERR_NOMEM;
        goto out;
    }
    text.cap = total + 1;
    for (uint32_t id = 0; id < n; id++) {
        v->off[id] = (uint32_t)text.len;
        if (where[id])
            vbuf_put(&text, g->text.p + e[where[id] - 1].off, e[where[id] - 1].len);
        else
            v->type[id] = TBM_TOKEN_UNUSED;
    }
    v->off[n] = (uint32_t)text.len;
    v->text = text.p;
    v->text_len = text.len;
out:
    free(where);
    return r;
}

/* Every token text names one id: llama.cpp aborts on a vocabulary where two
 * ids share one. The map stays for the lookups that follow. */
static int check_unique(struct tbm_vocab *v, struct map *m, char **why)
{
    char pad[24];

    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (v->type[id] == TBM_TOKEN_UNUSED)
            continue;
        size_t len;
        const char *t = text_of(v, id, &len);
        int64_t other = map_find(m, t, len, true, id);
        if (other >= 0)
            return fail(why, "tokenizer.json has the token \"%.*s\" twice (ids %lld and %u)",
                        (int)len, t, (long long)other, id);
    }
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (v->type[id] != TBM_TOKEN_UNUSED)
            continue;
        int len = snprintf(pad, sizeof pad, "[PAD%u]", id);
        int64_t other = map_find(m, pad, (size_t)len, false, 0);
        if (other >= 0)
            return fail(why, "tokenizer.json's token %s (id %lld) is the name of the missing id %u",
                        pad, (long long)other, id);
    }
    return 0;
}

/* ---- the rules ---- */

static const char *str_member(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static bool is_type(struct json_object *o, const char *type)
{
    const char *t = str_member(o, "type");
    return t && strcmp(t, type) == 0;
}

/* Calls f on every step of a normalizer, pre-tokenizer, processor or
 * decoder, Sequences flattened; stops at the first false. */
static bool each_step(struct json_object *o, const char *list,
                      bool (*f)(struct json_object *step, void *ctx), void *ctx)
{
    struct json_object *steps;

    if (!o || json_object_is_type(o, json_type_null))
        return true;
    if (is_type(o, "Sequence") && json_object_object_get_ex(o, list, &steps) &&
        json_object_is_type(steps, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(steps); i++)
            if (!each_step(json_object_array_get_idx(steps, i), list, f, ctx))
                return false;
        return true;
    }
    return f(o, ctx);
}

static bool has_byte_level(struct json_object *step, void *ctx)
{
    *(bool *)ctx |= is_type(step, "ByteLevel");
    return true;
}

/* What the llama kind's normalizer and pre-tokenizer do with spaces. */
struct spaces {
    bool escaped;   /* ' ' written as U+2581 */
    bool prefix;    /* a U+2581 put before the text */
    bool in_norm;   /* escaped by the normalizer (so no space is left after it) */
    const char *no; /* a step llama.cpp cannot follow */
};

#define LOWER_ONE_EIGHTH "\xe2\x96\x81" /* U+2581, SentencePiece's space */

static bool normalizer_step(struct json_object *step, void *ctx)
{
    struct spaces *s = ctx;
    struct json_object *pattern;

    if (is_type(step, "NFC"))
        return true;
    if (is_type(step, "Replace") && json_object_object_get_ex(step, "pattern", &pattern) &&
        str_member(pattern, "String") && strcmp(str_member(pattern, "String"), " ") == 0 &&
        str_member(step, "content") && strcmp(str_member(step, "content"), LOWER_ONE_EIGHTH) == 0) {
        s->escaped = s->in_norm = true;
        return true;
    }
    if (is_type(step, "Prepend") && str_member(step, "prepend") &&
        strcmp(str_member(step, "prepend"), LOWER_ONE_EIGHTH) == 0) {
        s->prefix = true;
        return true;
    }
    s->no = "tokenizer.json's normalizer does what llama.cpp does not (it may only write spaces "
            "as U+2581, put one before the text, or compose to NFC)";
    return false;
}

/* The byte-level kind: no normalizer but NFC. */
static bool nfc_step(struct json_object *step, void *ctx)
{
    if (is_type(step, "NFC"))
        return true;
    *(const char **)ctx = "tokenizer.json's normalizer does what llama.cpp does not (a byte-level "
                          "tokenizer may have none but NFC)";
    return false;
}

static bool llama_pre_step(struct json_object *step, void *ctx)
{
    struct spaces *s = ctx;
    struct json_object *v, *pattern;

    if (is_type(step, "Metaspace")) {
        const char *scheme = str_member(step, "prepend_scheme");
        if (!str_member(step, "replacement") ||
            strcmp(str_member(step, "replacement"), LOWER_ONE_EIGHTH) != 0 ||
            (json_object_object_get_ex(step, "split", &v) && json_object_get_boolean(v))) {
            s->no = "tokenizer.json's Metaspace pre-tokenizer splits words or writes spaces as "
                    "another character, which llama.cpp does not";
            return false;
        }
        s->escaped = true;
        if (scheme ? strcmp(scheme, "never") != 0
                   : json_object_object_get_ex(step, "add_prefix_space", &v) &&
                         json_object_get_boolean(v))
            s->prefix = true;
        return true;
    }
    /* a split at spaces after the normalizer wrote every space as U+2581
     * finds none (Gemma 3's) */
    if (is_type(step, "Split") && s->in_norm &&
        json_object_object_get_ex(step, "pattern", &pattern) && str_member(pattern, "String") &&
        strcmp(str_member(pattern, "String"), " ") == 0)
        return true;
    s->no = "tokenizer.json's pre_tokenizer splits the text, which llama.cpp's llama kind does not";
    return false;
}

/* A special token named by tokenizer_config.json: a string or {content}. */
static const char *config_token(struct json_object *config, const char *key, size_t *len)
{
    struct json_object *v, *content;

    if (!json_object_object_get_ex(config, key, &v))
        return NULL;
    if (json_object_is_type(v, json_type_object) &&
        json_object_object_get_ex(v, "content", &content))
        v = content;
    if (!json_object_is_type(v, json_type_string))
        return NULL;
    *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

static int64_t lookup(struct map *m, const char *text, size_t len)
{
    return text ? map_find(m, text, len, false, 0) : -1;
}

/* What a post_processor adds around a single text: a special token first
 * (BOS) or last (EOS) in a TemplateProcessing's "single". */
struct adds {
    bool bos, eos;
};

static bool template_step(struct json_object *step, void *ctx)
{
    struct adds *a = ctx;
    struct json_object *single;

    if (!is_type(step, "TemplateProcessing") ||
        !json_object_object_get_ex(step, "single", &single) ||
        !json_object_is_type(single, json_type_array) || json_object_array_length(single) == 0)
        return true;
    size_t n = json_object_array_length(single);
    a->bos |= json_object_object_get_ex(json_object_array_get_idx(single, 0), "SpecialToken", NULL);
    a->eos |= n > 1 && json_object_object_get_ex(json_object_array_get_idx(single, n - 1),
                                                 "SpecialToken", NULL);
    return true;
}

static bool config_bool(struct json_object *config, const char *key, bool def)
{
    struct json_object *v;

    if (!json_object_object_get_ex(config, key, &v) || !json_object_is_type(v, json_type_boolean))
        return def;
    return json_object_get_boolean(v);
}

/* The chat template: a string, or the entry named "default" of a list of
 * {name, template}. */
static const char *chat_template(struct json_object *config, size_t *len)
{
    struct json_object *v;

    if (!json_object_object_get_ex(config, "chat_template", &v))
        return NULL;
    if (json_object_is_type(v, json_type_array)) {
        struct json_object *found = NULL;
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            struct json_object *e = json_object_array_get_idx(v, i);
            const char *name = str_member(e, "name");
            if (name && strcmp(name, "default") == 0)
                json_object_object_get_ex(e, "template", &found);
        }
        v = found;
    }
    if (!v || !json_object_is_type(v, json_type_string))
        return NULL;
    *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

static bool is_byte_token(const char *t, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";

    return len == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && t[3] && t[4] &&
           strchr(hex, t[3]) && strchr(hex, t[4]);
}

/* ---- assembling ---- */

struct build {
    struct tbm_vocab *v;
    struct gather g;
    struct tj_parsed json;
    struct json_object *config;
    struct map map;
    uint8_t *is_added; /* by id: 0, 1 added, 2 added and special */
};

static int check_model(struct build *b, bool *byte_fallback, char **why)
{
    struct json_object *model = b->json.model, *v;
    const char *type = str_member(model, "type");

    if (!model)
        return fail(why, "tokenizer.json has no model");
    if (!type || strcmp(type, "BPE") != 0)
        return fail(why, "tokenizer.json's model is %s, not BPE", type ? type : "of no type");
    if (!b->json.has_vocab)
        return fail(why, "tokenizer.json's model has no vocab");
    if (json_object_object_get_ex(model, "dropout", &v) &&
        !json_object_is_type(v, json_type_null) && json_object_get_double(v) != 0)
        return fail(why, "tokenizer.json's BPE has dropout, which llama.cpp does not");
    if ((str_member(model, "continuing_subword_prefix") &&
         *str_member(model, "continuing_subword_prefix")) ||
        (str_member(model, "end_of_word_suffix") && *str_member(model, "end_of_word_suffix")))
        return fail(why, "tokenizer.json's BPE marks word pieces, which llama.cpp does not");
    *byte_fallback =
        json_object_object_get_ex(model, "byte_fallback", &v) && json_object_get_boolean(v);
    return 0;
}

/* The kind, and its pre-tokenizer or space rules. */
static int classify(struct build *b, char **why)
{
    struct tbm_vocab *v = b->v;
    struct json_object *root = b->json.root, *norm = NULL, *pre = NULL, *dec = NULL, *x;
    bool byte_fallback = false;
    int r = check_model(b, &byte_fallback, why);

    if (r < 0)
        return r;
    json_object_object_get_ex(root, "normalizer", &norm);
    json_object_object_get_ex(root, "pre_tokenizer", &pre);
    json_object_object_get_ex(root, "decoder", &dec);
    if (byte_fallback) {
        struct spaces s = {0};
        v->kind = TBM_VOCAB_LLAMA;
        if (!each_step(norm, "normalizers", normalizer_step, &s) ||
            !each_step(pre, "pretokenizers", llama_pre_step, &s))
            return fail(why, "%s", s.no);
        if (!s.escaped)
            return fail(why, "tokenizer.json does not write spaces as U+2581, as llama.cpp does "
                             "for a tokenizer with byte_fallback");
        v->add_space_prefix = s.prefix;
        return 0;
    }
    bool byte_level = false;
    each_step(pre, "pretokenizers", has_byte_level, &byte_level);
    each_step(dec, "decoders", has_byte_level, &byte_level);
    if (!byte_level)
        return fail(why, "tokenizer.json is BPE with neither byte_fallback nor ByteLevel, a kind "
                         "llama.cpp cannot use");
    v->kind = TBM_VOCAB_GPT2;
    const char *no = NULL;
    if (!each_step(norm, "normalizers", nfc_step, &no))
        return fail(why, "%s", no);
    bool ignore_merges =
        json_object_object_get_ex(b->json.model, "ignore_merges", &x) && json_object_get_boolean(x);
    bool clean = config_bool(b->config, "clean_up_tokenization_spaces", true);
    v->pre = pretok_name(pre, ignore_merges, clean, &no);
    return v->pre ? 0 : fail(why, "%s", no);
}

static int set_types(struct build *b)
{
    struct tbm_vocab *v = b->v;
    size_t len;
    const char *unk = str_member(b->json.model, "unk_token");
    int64_t unk_id = unk ? lookup(&b->map, unk, strlen(unk)) : -1;

    if (!unk) {
        const char *u = config_token(b->config, "unk_token", &len);
        unk_id = lookup(&b->map, u, u ? len : 0);
    }
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (v->type[id] == TBM_TOKEN_UNUSED)
            continue;
        const char *t = text_of(v, id, &len);
        if (v->kind == TBM_VOCAB_LLAMA && is_byte_token(t, len))
            v->type[id] = TBM_TOKEN_BYTE;
        else if (id == unk_id)
            v->type[id] = TBM_TOKEN_UNKNOWN;
        else if (b->is_added[id])
            v->type[id] = b->is_added[id] == 2 ? TBM_TOKEN_CONTROL : TBM_TOKEN_USER_DEFINED;
        else
            v->type[id] = TBM_TOKEN_NORMAL;
    }
    return 0;
}

/* llama kind: -r for the token merge r is the first to make, so that
 * llama.cpp, which merges the pair whose result scores highest, merges in
 * the tokenizer's rank order. */
static int set_scores(struct build *b)
{
    struct tbm_vocab *v = b->v;
    struct merge_at *at = (struct merge_at *)b->g.mergeat.p;
    size_t nm = b->g.mergeat.len / sizeof(*at);
    uint8_t *made = calloc(v->n_tokens, 1);
    struct vbuf joined = {0};

    v->score = malloc((size_t)v->n_tokens * sizeof(*v->score));
    if (!made || !v->score) {
        free(made);
        return TBM_ERR_NOMEM;
    }
    for (size_t r = 0; r < nm; r++) {
        joined.len = 0;
        vbuf_put(&joined, b->g.merges.p + at[r].off, at[r].left);
        vbuf_put(&joined, b->g.merges.p + at[r].off + at[r].left + 1, at[r].right);
        if (joined.failed) {
            free(made);
            free(joined.p);
            return TBM_ERR_NOMEM;
        }
        int64_t id = lookup(&b->map, joined.p ? joined.p : "", joined.len);
        if (id >= 0 && !made[id]) {
            made[id] = 1;
            v->score[id] = r == 0 ? 0.0f : -(float)r;
        }
    }
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (made[id])
            continue;
        size_t len;
        const char *t = text_of(v, id, &len);
        bool one_char = len > 0 && tbm_utf8_seq(t, len) == len;
        bool zero = v->type[id] != TBM_TOKEN_UNUSED &&
                    (one_char || v->type[id] == TBM_TOKEN_BYTE || b->is_added[id]);
        v->score[id] = zero ? 0.0f : -(float)nm;
    }
    free(made);
    free(joined.p);
    return 0;
}

/* llama kind: an added token that is not special is written with its U+2581
 * as spaces, as llama.cpp's converter writes it: llama.cpp finds such a
 * token in the raw text (where a space is a space) and decodes it as it is,
 * while the tokenizer writes spaces as U+2581 before looking, and decodes
 * U+2581 as a space (Gemma's runs of spaces are such tokens). The texts only
 * shrink, so the arena is rewritten in place, front to back. Returns whether
 * any text changed. */
static bool respace_user_defined(struct tbm_vocab *v)
{
    static const char space[] = LOWER_ONE_EIGHTH;
    size_t to = 0;
    bool changed = false;

    for (uint32_t id = 0; id < v->n_tokens; id++) {
        size_t from = v->off[id], end = v->off[id + 1];
        v->off[id] = (uint32_t)to;
        while (from < end) {
            if (v->type[id] == TBM_TOKEN_USER_DEFINED && end - from >= 3 &&
                memcmp(v->text + from, space, 3) == 0) {
                v->text[to++] = ' ';
                from += 3;
                changed = true;
            } else {
                v->text[to++] = v->text[from++];
            }
        }
    }
    v->off[v->n_tokens] = (uint32_t)to;
    v->text_len = to;
    return changed;
}

/* gpt2 kind: the merges as llama.cpp reads them, split at the first space
 * after the first byte. */
static int keep_merges(struct build *b, char **why)
{
    struct tbm_vocab *v = b->v;
    struct merge_at *at = (struct merge_at *)b->g.mergeat.p;
    size_t nm = b->g.mergeat.len / sizeof(*at);

    for (size_t r = 0; r < nm; r++)
        if (at[r].left == 0 || at[r].right == 0 ||
            memchr(b->g.merges.p + at[r].off, ' ', at[r].left))
            return fail(why,
                        "tokenizer.json's merge %zu has an empty token or a space in its "
                        "first token, which llama.cpp cannot read",
                        r);
    v->merge_off = malloc((nm + 1) * sizeof(*v->merge_off));
    if (!v->merge_off)
        return TBM_ERR_NOMEM;
    for (size_t r = 0; r < nm; r++)
        v->merge_off[r] = at[r].off;
    v->merge_off[nm] = (uint32_t)b->g.merges.len;
    v->n_merges = (uint32_t)nm;
    /* the gathered texts become the vocabulary's own, without the room they grew into */
    char *shrunk = realloc(b->g.merges.p, b->g.merges.len ? b->g.merges.len : 1);
    v->merges = shrunk ? shrunk : b->g.merges.p;
    b->g.merges.p = NULL;
    return 0;
}

static void set_specials(struct build *b)
{
    struct tbm_vocab *v = b->v;
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    int64_t *ids[] = {&v->bos, &v->eos, &v->unk, &v->pad};
    struct json_object *post = NULL;
    struct adds adds = {false, false};
    size_t len;

    for (int k = 0; k < 4; k++) {
        const char *t = config_token(b->config, keys[k], &len);
        *ids[k] = lookup(&b->map, t, t ? len : 0);
    }
    json_object_object_get_ex(b->json.root, "post_processor", &post);
    each_step(post, "processors", template_step, &adds);
    v->add_bos = config_bool(b->config, "add_bos_token", adds.bos);
    v->add_eos = config_bool(b->config, "add_eos_token", adds.eos);
}

static int keep_template(struct build *b)
{
    size_t len;
    const char *t = chat_template(b->config, &len);

    if (!t)
        return 0;
    b->v->chat_template = malloc(len + 1);
    if (!b->v->chat_template)
        return TBM_ERR_NOMEM;
    memcpy(b->v->chat_template, t, len);
    b->v->chat_template[len] = '\0';
    b->v->chat_template_len = len;
    return 0;
}

static int assemble(struct build *b, const struct tbm_tokenizer_files *files, uint64_t vocab_size,
                    char **why)
{
    struct tbm_vocab *v = b->v;
    struct tj_sink sink = {&b->g, gather_entry, gather_merge};
    const char *json = files->file[TBM_TOKENIZER_JSON].bytes;
    int r;

    if (vocab_size > TBM_VOCAB_SIZE_MAX)
        return fail(why, "vocab_size %llu is over %u, the most tbmfs lays out",
                    (unsigned long long)vocab_size, TBM_VOCAB_SIZE_MAX);
    if (vocab_size == 0)
        return fail(why, "vocab_size is 0");
    r = tj_walk(json ? json : "", files->file[TBM_TOKENIZER_JSON].len, &sink, &b->json, why);
    /* a sink's reason; the walk's own is in *why already */
    if (r == TBM_ERR_SOURCE && b->g.bad && b->g.bad_merge)
        return fail(why, "tokenizer.json's merge %u %s", b->g.bad_index, b->g.bad);
    if (r == TBM_ERR_SOURCE && b->g.bad)
        return fail(why, "%s", b->g.bad);
    if (r < 0)
        return r;
    if (files->file[TBM_TOKENIZER_CONFIG].present)
        b->config = tj_parse_whole(files->file[TBM_TOKENIZER_CONFIG].bytes,
                                   files->file[TBM_TOKENIZER_CONFIG].len);
    if (!b->config || !json_object_is_type(b->config, json_type_object)) {
        json_object_put(b->config);
        b->config = json_object_new_object();
        if (!b->config)
            return TBM_ERR_NOMEM;
    }
    if ((r = classify(b, why)) < 0)
        return r;
    struct json_object *added = NULL;
    json_object_object_get_ex(b->json.root, "added_tokens", &added);
    if (added && !json_object_is_type(added, json_type_array))
        return fail(why, "tokenizer.json's added_tokens is not an array");
    uint64_t count = b->g.max_id;
    for (size_t k = 0; added && k < json_object_array_length(added); k++) {
        struct json_object *idv;
        uint32_t id;
        if (json_object_object_get_ex(json_object_array_get_idx(added, k), "id", &idv) &&
            token_id(idv, &id) && (uint64_t)id + 1 > count)
            count = (uint64_t)id + 1;
    }
    if (count > vocab_size)
        return fail(why, "tokenizer.json has %llu tokens, vocab_size is %llu",
                    (unsigned long long)count, (unsigned long long)vocab_size);
    v->n_tokens = (uint32_t)vocab_size;
    v->type = calloc(v->n_tokens, 1);
    b->is_added = calloc(v->n_tokens, 1);
    if (!v->type || !b->is_added)
        return TBM_ERR_NOMEM;
    if ((r = place_tokens(v, &b->g, added, b->is_added, why)) < 0)
        return r;
    /* the gathered entries are placed: their memory goes before the map's comes */
    free(b->g.text.p);
    free(b->g.entries.p);
    memset(&b->g.text, 0, sizeof(b->g.text));
    memset(&b->g.entries, 0, sizeof(b->g.entries));
    if ((r = map_init(&b->map, v, v->n_tokens)) < 0 || (r = check_unique(v, &b->map, why)) < 0)
        return r;
    set_types(b);
    set_specials(b);
    if (v->kind == TBM_VOCAB_LLAMA) {
        if ((r = set_scores(b)) < 0)
            return r;
        if (respace_user_defined(v)) {
            /* what is written must still name each id once */
            memset(b->map.slot, 0, (b->map.mask + 1) * sizeof(*b->map.slot));
            if ((r = check_unique(v, &b->map, why)) < 0)
                return r;
        }
    } else if ((r = keep_merges(b, why)) < 0) {
        return r;
    }
    return keep_template(b);
}

int tbm_vocab_build(const struct tbm_tokenizer_files *files, uint64_t vocab_size,
                    struct tbm_vocab **out, char **why)
{
    struct build b = {0};
    int r;

    *out = NULL;
    *why = NULL;
    b.v = calloc(1, sizeof(*b.v));
    if (!b.v)
        return TBM_ERR_NOMEM;
    r = assemble(&b, files, vocab_size, why);
    gather_free(&b.g);
    json_object_put(b.json.root);
    json_object_put(b.config);
    free(b.map.slot);
    free(b.is_added);
    if (r < 0) {
        tbm_vocab_free(b.v);
        return r;
    }
    *out = b.v;
    return 0;
}

void tbm_vocab_free(struct tbm_vocab *v)
{
    if (!v)
        return;
    free(v->text);
    free(v->off);
    free(v->type);
    free(v->score);
    free(v->merges);
    free(v->merge_off);
    free(v->chat_template);
    free(v);
}
