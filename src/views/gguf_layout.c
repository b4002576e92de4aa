/* The GGUF files (model.gguf, model.Q8_0.gguf, model.Q4_K_M.gguf), at mount: whether the model
 * can be a GGUF (llama or mistral, the config's keys, every tensor llama.cpp
 * needs, sound and of the shape the config implies), which tensors go in
 * under which GGUF name, and a file's header bytes and data layout, fixed
 * once, by the rule of its variant (the row's arg) for each tensor's type. */
#include "gguf.h"

#include "base/buf.h"

#include "tbm/names.h"
#include "tbm/text.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 32u

/* The whole-model tensors: slots 0, 1, 2 (output optional); slot 3 on, the
 * architecture's layer tensors, layer after layer. */
static const struct tbm_arch_tensor top_kinds[] = {
    {"model.embed_tokens.weight", "token_embd.weight", TBM_DIM_VOCAB, TBM_DIM_HIDDEN, 0},
    {"model.norm.weight", "output_norm.weight", TBM_DIM_HIDDEN, TBM_DIM_NONE, 0},
    {"lm_head.weight", "output.weight", TBM_DIM_VOCAB, TBM_DIM_HIDDEN, 0},
};
#define TOP_KINDS   3
#define OUTPUT_SLOT 2

/* The config's numbers the files need. */
struct llama_config {
    const struct tbm_arch *arch;
    uint32_t hidden, heads, kv_heads, layers, inter, vocab, context;
    uint32_t head; /* a head's size */
    float rope_theta, norm_eps;
};

static const struct tbm_arch_tensor *slot_kind(const struct llama_config *c, size_t slot)
{
    return slot < TOP_KINDS ? &top_kinds[slot]
                            : &c->arch->layer[(slot - TOP_KINDS) % c->arch->nlayer];
}

static uint64_t dim_value(const struct llama_config *c, enum tbm_arch_dim d)
{
    switch (d) {
    case TBM_DIM_HIDDEN:
        return c->hidden;
    case TBM_DIM_Q:
        return (uint64_t)c->heads * c->head;
    case TBM_DIM_KV:
        return (uint64_t)c->kv_heads * c->head;
    case TBM_DIM_HEAD:
        return c->head;
    case TBM_DIM_INTER:
        return c->inter;
    case TBM_DIM_VOCAB:
        return c->vocab;
    case TBM_DIM_NONE:
        break;
    }
    return 0;
}

/* Sets why (once: the first reason is the one given). */
static void say(char **why, const char *fmt, ...)
{
    va_list ap;
    char *line;

    if (*why)
        return;
    va_start(ap, fmt);
    if (vasprintf(&line, fmt, ap) >= 0)
        *why = line;
    va_end(ap);
}

/* --- the config --- */

/* A whole number from 1 to 2^32 - 1 under key, or def when absent (def 0:
 * required). */
static bool config_u32(const struct json_object *config, const char *key, uint32_t def,
                       uint32_t *out, char **why)
{
    struct json_object *o;

    if (!config || !json_object_object_get_ex(config, key, &o)) {
        if (def == 0)
            say(why, "no model.gguf: the config has no %s", key);
        *out = def;
        return def != 0;
    }
    if (!json_object_is_type(o, json_type_int) || json_object_get_int64(o) < 1 ||
        json_object_get_uint64(o) > UINT32_MAX) {
        say(why, "no model.gguf: the config's %s is not a whole number from 1 to 4294967295", key);
        return false;
    }
    *out = (uint32_t)json_object_get_uint64(o);
    return true;
}

/* A positive finite number under key, as float32, or def when absent. */
static bool config_f32(const struct json_object *config, const char *key, float def, float *out,
                       char **why)
{
    struct json_object *o;

    *out = def;
    if (!config || !json_object_object_get_ex(config, key, &o))
        return true;
    double d = json_object_get_double(o);
    if ((!json_object_is_type(o, json_type_double) && !json_object_is_type(o, json_type_int)) ||
        !(d > 0) || (float)d > 3.40282347e38f || (float)d == 0.0f) {
        say(why, "no model.gguf: the config's %s is not a positive number a float32 holds", key);
        return false;
    }
    *out = (float)d;
    return true;
}

/* The head size: the config's head_dim where the architecture takes it
 * (then even, and hidden_size need not be a multiple of num_heads), else
 * hidden_size / num_heads, which must then be whole and even. */
static bool read_head(const struct json_object *config, struct llama_config *c, char **why)
{
    struct json_object *o;

    if (c->arch->head_dim && json_object_object_get_ex(config, "head_dim", &o)) {
        if (!config_u32(config, "head_dim", 0, &c->head, why))
            return false;
        if (c->head % 2 != 0) {
            say(why, "no model.gguf: head_dim %u is not even", c->head);
            return false;
        }
        return true;
    }
    if (c->hidden % c->heads != 0 || (c->hidden / c->heads) % 2 != 0) {
        say(why,
            "no model.gguf: hidden_size %u is not a multiple of num_heads %u with an even "
            "number per head",
            c->hidden, c->heads);
        return false;
    }
    c->head = c->hidden / c->heads;
    return true;
}

static bool read_config(const struct json_object *config, struct llama_config *c, char **why)
{
    if (!config_u32(config, "hidden_size", 0, &c->hidden, why) ||
        !config_u32(config, "num_heads", 0, &c->heads, why) ||
        !config_u32(config, "num_layers", 0, &c->layers, why) ||
        !config_u32(config, "intermediate_size", 0, &c->inter, why) ||
        !config_u32(config, "vocab_size", 0, &c->vocab, why) ||
        !config_u32(config, "num_kv_heads", c->heads, &c->kv_heads, why) ||
        !config_u32(config, "max_seq_len", 2048, &c->context, why) ||
        !config_f32(config, "rope_theta", 10000.0f, &c->rope_theta, why) ||
        !config_f32(config, "norm_eps", 1e-5f, &c->norm_eps, why) || !read_head(config, c, why))
        return false;
    /* llama.cpp shares each key/value head among num_heads / num_kv_heads
     * query heads: a remainder has no meaning to it */
    if (c->kv_heads > c->heads || c->heads % c->kv_heads != 0) {
        say(why, "no model.gguf: num_heads %u is not a multiple of num_kv_heads %u", c->heads,
            c->kv_heads);
        return false;
    }
    return true;
}

/* --- tensor names --- */

/* Parses a layer number, decimal without leading zeros, ending at '.';
 * *end points past the dot. */
static bool layer_number(const char *s, const char *limit, uint64_t *n, const char **end)
{
    const char *p = s;

    *n = 0;
    if (p == limit || *p < '0' || *p > '9' || (*p == '0' && p + 1 < limit && p[1] != '.'))
        return false;
    for (; p < limit && *p >= '0' && *p <= '9'; p++) {
        if (*n > UINT32_MAX)
            return false;
        *n = *n * 10 + (uint64_t)(*p - '0');
    }
    if (p == limit || *p != '.')
        return false;
    *end = p + 1;
    return true;
}

/* The slot of a tensor name (len bytes) in a model of layers layers, and
 * whether it is a Hugging Face name (so that q and k are permuted); -1 for
 * a name llama.cpp does not expect. */
static long name_slot(const char *name, size_t len, const struct llama_config *c, bool *hf)
{
    size_t nkinds = c->arch->nlayer;

    static const char *const prefix[2] = {"blk.", "model.layers."};

    for (size_t k = 0; k < TOP_KINDS; k++) {
        for (int h = 0; h < 2; h++) {
            const char *want = h ? top_kinds[k].hf : top_kinds[k].gguf;
            if (len == strlen(want) && memcmp(name, want, len) == 0) {
                *hf = h;
                return (long)k;
            }
        }
    }
    for (int h = 0; h < 2; h++) {
        size_t pl = strlen(prefix[h]);
        const char *rest;
        uint64_t n;

        if (len <= pl || memcmp(name, prefix[h], pl) != 0 ||
            !layer_number(name + pl, name + len, &n, &rest) || n >= c->layers)
            continue;
        for (size_t k = 0; k < nkinds; k++) {
            const char *want = h ? c->arch->layer[k].hf : c->arch->layer[k].gguf;
            if ((size_t)(name + len - rest) == strlen(want) &&
                memcmp(rest, want, strlen(want)) == 0) {
                *hf = h;
                return (long)(TOP_KINDS + n * nkinds + k);
            }
        }
    }
    return -1;
}

/* The Hugging Face name of a slot, for messages. */
static void slot_name(const struct llama_config *c, size_t slot, char *out, size_t size)
{
    if (slot < TOP_KINDS)
        snprintf(out, size, "%s", top_kinds[slot].hf);
    else
        snprintf(out, size, "model.layers.%zu.%s", (slot - TOP_KINDS) / c->arch->nlayer,
                 slot_kind(c, slot)->hf);
}

static void gguf_name(const struct llama_config *c, size_t slot, char *out, size_t size)
{
    if (slot < TOP_KINDS)
        snprintf(out, size, "%s", top_kinds[slot].gguf);
    else
        snprintf(out, size, "blk.%zu.%s", (slot - TOP_KINDS) / c->arch->nlayer,
                 slot_kind(c, slot)->gguf);
}

/* Whether tensor t has the shape its slot needs; says why not. */
static bool shape_ok(const struct tbm_tensor *t, const struct tbm_arch_tensor *kind,
                     const struct llama_config *c, char **why)
{
    char name[TBM_NAME_MAX * 4 + 8];
    uint64_t rows = dim_value(c, kind->rows), cols = dim_value(c, kind->cols);
    size_t ndim = kind->cols == TBM_DIM_NONE ? 1 : 2;

    if (t->shape && t->shape_matches && t->ndim == ndim && t->shape[0] == rows &&
        (ndim == 1 || t->shape[1] == cols))
        return true;
    tbm_text_clean(name, sizeof(name), t->name, t->name_len);
    if (ndim == 1)
        say(why, "no model.gguf: %s does not have the shape [%llu]", name,
            (unsigned long long)rows);
    else
        say(why, "no model.gguf: %s does not have the shape [%llu, %llu]", name,
            (unsigned long long)rows, (unsigned long long)cols);
    return false;
}

/* Fills slots[] (tensor index + 1 per slot, 0 when absent) from the index;
 * false with why when a needed tensor is there twice or unsound. */
static bool fill_slots(const struct tbm_views *v, const struct llama_config *c, size_t *slots,
                       bool *hf_names, char **why)
{
    const struct tbm_model *m = v->model;
    char name[TBM_NAME_MAX * 4 + 8];

    for (size_t t = 0; t < m->ntensors; t++) {
        const struct tbm_tensor *tensor = &m->tensors[t];
        bool hf;
        long slot = name_slot(tensor->name, tensor->name_len, c, &hf);

        if (slot < 0)
            continue;
        tbm_text_clean(name, sizeof(name), tensor->name, tensor->name_len);
        if (slots[slot]) {
            say(why, "no model.gguf: %s is there twice", name);
            return false;
        }
        if (tensor->problems.count != 0 || !tbm_dense_servable(v, t)) {
            say(why, "no model.gguf: %s has problems", name);
            return false;
        }
        if (!shape_ok(tensor, slot_kind(c, (size_t)slot), c, why))
            return false;
        slots[slot] = t + 1;
        hf_names[slot] = hf;
    }
    for (size_t s = 0; s < TOP_KINDS + (size_t)c->layers * c->arch->nlayer; s++) {
        if (s != OUTPUT_SLOT && !slots[s]) {
            slot_name(c, s, name, sizeof(name));
            say(why, "no model.gguf: %s is missing", name);
            return false;
        }
    }
    return true;
}

/* --- the header bytes --- */

/* Little-endian like the host (x86-64) and the format. */
static void put_u32(struct tbm_buf *b, uint32_t v)
{
    tbm_buf_add(b, &v, sizeof v);
}

static void put_u64(struct tbm_buf *b, uint64_t v)
{
    tbm_buf_add(b, &v, sizeof v);
}

static void put_str(struct tbm_buf *b, const char *s, size_t len)
{
    put_u64(b, len);
    tbm_buf_add(b, s, len);
}

enum { KV_UINT32 = 4, KV_FLOAT32 = 6, KV_STRING = 8, KV_ARRAY = 9 };

static void kv_key(struct tbm_buf *b, const char *key, uint32_t type)
{
    put_str(b, key, strlen(key));
    put_u32(b, type);
}

static void kv_u32(struct tbm_buf *b, const char *key, uint32_t v)
{
    kv_key(b, key, KV_UINT32);
    put_u32(b, v);
}

static void kv_f32(struct tbm_buf *b, const char *key, float v)
{
    kv_key(b, key, KV_FLOAT32);
    tbm_buf_add(b, &v, sizeof v);
}

static void kv_str(struct tbm_buf *b, const char *key, const char *v)
{
    kv_key(b, key, KV_STRING);
    put_str(b, v, strlen(v));
}

/* general.name: the source's file name without its extension (a URL's
 * query and fragment left out), as clean text. */
static void model_name(const char *path, char *out, size_t size)
{
    size_t end = strcspn(path, "?#");
    size_t start = end;

    if (!tbm_source_is_url(path))
        end = strlen(path), start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    for (size_t k = end; k > start + 1; k--) {
        if (path[k - 1] == '.') {
            end = k - 1;
            break;
        }
    }
    tbm_text_clean(out, size, path + start, end - start);
}

/* Bytes of n elements of a type (rows are whole blocks). */
static uint64_t type_bytes(uint32_t type, uint64_t n)
{
    const struct tbm_quant *q = tbm_quant_find(type);

    if (q)
        return n / q->block_elems * q->block_bytes;
    return type == TBM_GGUF_BF16 ? n * 2 : n * 4;
}

uint32_t tbm_gguf_stored_type(const struct tbm_gguf_tensor *gt, unsigned precision)
{
    static const uint32_t native[] = {TBM_GGUF_F32, TBM_GGUF_F16, TBM_GGUF_BF16, TBM_GGUF_F32};

    return gt->matrix ? native[precision] : TBM_GGUF_F32;
}

static uint32_t stored_type(const struct tbm_gguf_model *m, const struct tbm_gguf_tensor *gt,
                            unsigned precision)
{
    (void)m;
    return tbm_gguf_stored_type(gt, precision);
}

/* model.Q8_0.gguf: every matrix whose rows are whole blocks in Q8_0, the
 * rest F32. */
static uint32_t q8_0_type(const struct tbm_gguf_model *m, const struct tbm_gguf_tensor *gt,
                          unsigned precision)
{
    (void)m;
    (void)precision;
    return gt->matrix && gt->cols % TBM_Q8_0_ELEMS == 0 ? TBM_GGUF_Q8_0 : TBM_GGUF_F32;
}

const struct tbm_gguf_variant tbm_gguf_stored = {stored_type, TBM_GGUF_FILE_TYPE_MOST, false,
                                                 false};
/* llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0 */
const struct tbm_gguf_variant tbm_gguf_q8_0 = {q8_0_type, 7, true, false};

/* The type a tensor has in the file. */
static uint32_t type_of(const struct tbm_views *v, const struct tbm_gguf_variant *var,
                        const struct tbm_gguf_model *gm, const struct tbm_gguf_tensor *gt)
{
    return var->type(gm, gt, v->model->tensors[gt->t].hdr.precision);
}

/* general.file_type: the variant's, or the type most matrix elements have,
 * the lower number on a tie (llama.cpp's 0 F32, 1 F16, 32 BF16). */
static uint32_t file_type(const struct tbm_views *v, const struct tbm_gguf_variant *var,
                          const struct tbm_gguf_model *gm, const struct tbm_gguf *g)
{
    uint64_t count[3] = {0, 0, 0};

    if (var->file_type != TBM_GGUF_FILE_TYPE_MOST)
        return var->file_type;
    for (size_t k = 0; k < g->ntensors; k++) {
        const struct tbm_gguf_tensor *gt = &g->tensors[k];
        if (!gt->matrix)
            continue;
        uint32_t type = type_of(v, var, gm, gt);
        count[type == TBM_GGUF_F32 ? 0 : type == TBM_GGUF_F16 ? 1 : 2] += gt->rows * gt->cols;
    }
    return count[0] >= count[1] && count[0] >= count[2] ? 0 : count[1] >= count[2] ? 1 : 32;
}

/* An architecture's key: its GGUF name, a dot, then key. */
static void kv_arch_u32(struct tbm_buf *b, const struct llama_config *c, const char *key,
                        uint32_t v)
{
    char name[64];

    snprintf(name, sizeof(name), "%s.%s", c->arch->gguf, key);
    kv_u32(b, name, v);
}

static void kv_arch_f32(struct tbm_buf *b, const struct llama_config *c, const char *key, float v)
{
    char name[64];

    snprintf(name, sizeof(name), "%s.%s", c->arch->gguf, key);
    kv_f32(b, name, v);
}

/* How many key-values put_kvs writes. */
static uint64_t kv_count(const struct tbm_views *v, const struct llama_config *c,
                         const struct tbm_gguf_variant *var)
{
    uint64_t n = 16 + (var->quantized ? 1 : 0) + (c->arch->head_dim ? 2 : 0);

    return v->vocab && v->vocab->kv ? n - 1 + v->vocab->count : n;
}

/* The key-values, in the contract's order. The vocabulary's (shared by the
 * files, rendered once) are not copied in: *vocab_at is where they go. */
static void put_kvs(struct tbm_buf *b, const struct tbm_views *v, const struct tbm_gguf *g,
                    const struct llama_config *c, const struct tbm_gguf_variant *var,
                    const struct tbm_gguf_model *gm, size_t *vocab_at)
{
    const struct tbm_model *m = v->model;
    char name[4096];

    model_name(m->path, name, sizeof(name));
    kv_str(b, "general.architecture", c->arch->gguf);
    kv_str(b, "general.name", name);
    kv_u32(b, "general.alignment", ALIGN);
    if (!var->requantized) {
        kv_u32(b, "general.file_type", file_type(v, var, gm, g));
        if (var->quantized)
            kv_u32(b, "general.quantization_version", 2);
    }
    kv_arch_u32(b, c, "context_length", c->context);
    kv_arch_u32(b, c, "embedding_length", c->hidden);
    kv_arch_u32(b, c, "block_count", c->layers);
    kv_arch_u32(b, c, "feed_forward_length", c->inter);
    kv_arch_u32(b, c, "attention.head_count", c->heads);
    kv_arch_u32(b, c, "attention.head_count_kv", c->kv_heads);
    kv_arch_u32(b, c, "rope.dimension_count", c->head);
    if (c->arch->head_dim) {
        kv_arch_u32(b, c, "attention.key_length", c->head);
        kv_arch_u32(b, c, "attention.value_length", c->head);
    }
    kv_arch_u32(b, c, "vocab_size", c->vocab);
    kv_arch_f32(b, c, "rope.freq_base", c->rope_theta);
    kv_arch_f32(b, c, "attention.layer_norm_rms_epsilon", c->norm_eps);
    *vocab_at = b->len;
    if (!v->vocab || !v->vocab->kv)
        kv_str(b, "tokenizer.ggml.model", "none");
    kv_key(b, "tbmfs.omitted", KV_ARRAY);
    put_u32(b, KV_STRING);
    put_u64(b, m->ntensors - g->ntensors);
    for (size_t t = 0, k = 0; t < m->ntensors; t++) {
        if (k < g->ntensors && g->tensors[k].t == t) {
            k++;
            continue;
        }
        put_str(b, m->tensors[t].name, m->tensors[t].name_len);
    }
    if (var->requantized) {
        kv_u32(b, "general.quantization_version", 2);
        kv_u32(b, "general.file_type", file_type(v, var, gm, g));
    }
}

/* llama_model_quantize's tensor order: by layer (none first), then name. */
static int llama_order(const void *a, const void *b)
{
    const struct tbm_gguf_tensor *x = a, *y = b;

    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Renders the file's header and places each tensor's data after it. */
static int build_file(const struct tbm_views *v, struct tbm_gguf *g, const struct llama_config *c,
                      const struct tbm_gguf_variant *var)
{
    struct tbm_gguf_file *f = &g->file;
    struct tbm_buf b = TBM_BUF_INIT;
    uint64_t data = 0;
    struct tbm_gguf_model gm = {
        .layers = c->layers,
        .type_70b =
            c->layers == c->arch->layers_70b && (!c->arch->gqa_70b || c->heads != c->kv_heads),
    };

    for (size_t k = 0; k < g->ntensors; k++)
        gm.output |= strcmp(g->tensors[k].name, "output.weight") == 0;
    tbm_buf_add(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, g->ntensors);
    put_u64(&b, kv_count(v, c, var));
    put_kvs(&b, v, g, c, var, &gm, &f->vocab_at); /* while the tensors are in index order */
    if (var->requantized)
        qsort(g->tensors, g->ntensors, sizeof(*g->tensors), llama_order);
    for (size_t k = 0; k < g->ntensors; k++) {
        const struct tbm_gguf_tensor *gt = &g->tensors[k];
        uint32_t type = type_of(v, var, &gm, gt);
        uint64_t len = type_bytes(type, gt->rows * gt->cols);
        bool two = gt->matrix && (gt->rows != 1 || !var->requantized);

        put_str(&b, gt->name, strlen(gt->name));
        put_u32(&b, two ? 2 : 1);
        put_u64(&b, gt->cols);
        if (two)
            put_u64(&b, gt->rows);
        put_u32(&b, type);
        put_u64(&b, data);
        f->pieces[k] = (struct tbm_gguf_piece){.start = data, .len = len, .k = k, .type = type};
        data += (len + ALIGN - 1) / ALIGN * ALIGN;
    }
    if (v->vocab && v->vocab->kv) {
        f->vocab = v->vocab->kv;
        f->vocab_len = v->vocab->len;
    }
    static const uint8_t zeros[ALIGN];
    tbm_buf_add(&b, zeros, (ALIGN - (b.len + f->vocab_len) % ALIGN) % ALIGN);
    int r = tbm_buf_take(&b, &f->head, &f->head_len);
    if (r < 0)
        return r;
    f->head_len += f->vocab_len;
    f->npieces = g->ntensors;
    for (size_t k = 0; k < f->npieces; k++)
        f->pieces[k].start += f->head_len;
    f->size = f->head_len + data;
    return 0;
}

/* The tensors that go in, in index order, with their GGUF names. */
static int take_tensors(const struct tbm_views *v, const struct llama_config *c,
                        const size_t *slots, const bool *hf_names, size_t nslots,
                        struct tbm_gguf *g)
{
    const struct tbm_model *m = v->model;
    size_t *slot_of = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*slot_of));
    char name[64];

    if (!slot_of)
        return TBM_ERR_NOMEM;
    for (size_t t = 0; t < m->ntensors; t++)
        slot_of[t] = SIZE_MAX;
    for (size_t s = 0; s < nslots; s++)
        if (slots[s])
            slot_of[slots[s] - 1] = s;
    for (size_t t = 0; t < m->ntensors; t++) {
        size_t s = slot_of[t];
        if (s == SIZE_MAX)
            continue;
        const struct tbm_arch_tensor *kind = slot_kind(c, s);
        struct tbm_gguf_tensor *gt = &g->tensors[g->ntensors++];
        gguf_name(c, s, name, sizeof(name));
        gt->t = t;
        gt->layer = s < TOP_KINDS ? -1 : (long)((s - TOP_KINDS) / c->arch->nlayer);
        gt->matrix = kind->cols != TBM_DIM_NONE;
        gt->rows = gt->matrix ? m->tensors[t].shape[0] : 1;
        gt->cols = gt->matrix ? m->tensors[t].shape[1] : m->tensors[t].shape[0];
        gt->heads = !hf_names[s] || !c->arch->permute ? 0
                    : kind->permute == 'q'            ? c->heads
                    : kind->permute == 'k'            ? c->kv_heads
                                                      : 0;
        if (!(gt->name = strdup(name))) {
            free(slot_of);
            return TBM_ERR_NOMEM;
        }
    }
    free(slot_of);
    return 0;
}

/* Lays out the file of a model that can be a GGUF, or says why it cannot. */
static int lay_out(const struct tbm_views *v, const struct tbm_gguf_variant *var,
                   struct tbm_gguf *g)
{
    const struct tbm_model *m = v->model;
    struct llama_config c = {.arch = g->arch};
    size_t nslots;
    size_t *slots = NULL;
    bool *hf = NULL;
    int r = TBM_ERR_NOMEM;

    if (!read_config(m->config, &c, &g->missing))
        return g->missing ? 0 : TBM_ERR_NOMEM;
    /* each layer names nlayer tensors of its own: a count past the
     * model's tensors is a config no file can follow, said before the slots
     * it would size are allocated (4294967295 layers would be 300 GiB) */
    if ((uint64_t)c.layers * c.arch->nlayer > m->ntensors) {
        say(&g->missing, "no model.gguf: num_layers %u needs more tensors than the model's %zu",
            c.layers, m->ntensors);
        return g->missing ? 0 : TBM_ERR_NOMEM;
    }
    nslots = TOP_KINDS + (size_t)c.layers * c.arch->nlayer;
    if (!(slots = calloc(nslots, sizeof(*slots))) || !(hf = calloc(nslots, sizeof(*hf))))
        goto cleanup;
    if (!fill_slots(v, &c, slots, hf, &g->missing)) {
        r = g->missing ? 0 : TBM_ERR_NOMEM;
        goto cleanup;
    }
    if (!(g->tensors = calloc(nslots, sizeof(*g->tensors))) ||
        !(g->file.pieces = calloc(nslots, sizeof(*g->file.pieces))))
        goto cleanup;
    if ((r = take_tensors(v, &c, slots, hf, nslots, g)) < 0 || (r = build_file(v, g, &c, var)) < 0)
        goto cleanup;
    g->ok = true;
cleanup:
    free(slots);
    free(hf);
    return r;
}

void tbm_gguf_free(void *state)
{
    struct tbm_gguf *g = state;

    for (size_t k = 0; g->tensors && k < g->ntensors; k++)
        free(g->tensors[k].name);
    free(g->tensors);
    free(g->file.head);
    free(g->file.pieces);
    free(g->missing);
    free(g);
}

int tbm_gguf_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state)
{
    const char *arch = v->model->architecture;
    struct tbm_gguf *g = calloc(1, sizeof(*g));

    *state = g;
    if (!g)
        return TBM_ERR_NOMEM;
    g->arch = tbm_arch_find(arch);
    return g->arch ? lay_out(v, row->arg, g) : 0;
}

bool tbm_gguf_present(const struct tbm_views *v, const struct tbm_row *row)
{
    const struct tbm_gguf *g = tbm_row_state(v, row);

    return g->ok;
}

/* Every GGUF file is missing for the same reason, which names model.gguf:
 * model.json says it once. */
int tbm_gguf_notes(const struct tbm_views *v, const struct tbm_row *row,
                   struct json_object *missing, struct json_object *notes, bool *expected)
{
    const struct tbm_gguf *g = tbm_row_state(v, row);

    (void)notes;
    *expected |= g->arch != NULL;
    if (g->missing)
        return tbm_json_add_once(missing, g->missing);
    return g->ok && v->vocab && v->vocab->missing ? tbm_json_add_once(missing, v->vocab->missing)
                                                  : 0;
}
