/* The root's whole-model JSON files: tensors.json (every tensor in one
 * array; its densities need the statistics, so it is rendered when first
 * opened, its size fixed before) and config.json (a Hugging Face config,
 * for the architectures it knows, rendered at mount). */
#include "arch.h"
#include "internal.h"

#include "base/buf.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* st NULL: the statistics are not asked for (for the size). */
static struct json_object *tensor_json(const struct tbm_tensor *t,
                                       const struct tbm_tensor_stats *st)
{
    struct json_object *o = json_object_new_object();
    bool hdr = t->header_read;
    const char *dtype = hdr ? tbm_precision_name(t->hdr.precision) : NULL;
    char nm[32];

    if (!o)
        return NULL;
    tbm_tensor_nm(t, nm, sizeof(nm));
    json_object_object_add(o, "name", json_object_new_string_len(t->name, (int)t->name_len));
    json_object_object_add(o, "dir", json_object_new_string(t->dir));
    json_object_object_add(o, "shape", tbm_shape_json(t));
    json_object_object_add(o, "dtype", dtype ? json_object_new_string(dtype) : NULL);
    json_object_object_add(o, "nm", json_object_new_string(nm));
    json_object_object_add(o, "num_weights",
                           hdr ? json_object_new_uint64(t->hdr.num_weights) : NULL);
    /* header.json's density, once statistics are known */
    bool known = st && st->known;
    json_object_object_add(o, "density",
                           known ? json_object_new_double(tbm_tensor_density(t, st)) : NULL);
    json_object_object_add(o, "problems", json_object_new_uint64(t->problems.count));
    json_object_object_add(
        o, "warnings", json_object_new_uint64(t->warnings.count + (st ? st->warnings.count : 0)));
    return o;
}

/* Appends s, each line after the first indented by two spaces (an element
 * of the top array). */
static void add_indented(struct tbm_buf *b, const char *s)
{
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        tbm_buf_add(b, p, n);
        if (nl && nl[1])
            tbm_buf_add(b, "  ", 2);
        p += n;
    }
}

/* tensors.json one tensor at a time: no tree of a million objects. A
 * counting b only counts the bytes. 1 when some statistics were not known
 * yet. */
static int tensors_text(const struct tbm_views *v, bool with_stats, struct tbm_buf *b)
{
    const int flags =
        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE;
    size_t n = v->model->ntensors;
    int r = 0, pending = 0;

    tbm_buf_adds(b, n ? "[\n" : "[");
    for (size_t t = 0; t < n && r == 0; t++) {
        const struct tbm_tensor_stats *st = NULL;
        r = with_stats ? tbm_views_tensor_stats(v, t, &st) : 0;
        pending |= r > 0;
        r = r > 0 ? 0 : r;
        struct json_object *o = r < 0 ? NULL : tensor_json(&v->model->tensors[t], st);
        const char *text = o ? json_object_to_json_string_ext(o, flags) : NULL;
        if (r == 0)
            r = text ? 0 : TBM_ERR_NOMEM;
        if (r == 0) {
            tbm_buf_add(b, "  ", 2);
            add_indented(b, text);
            tbm_buf_adds(b, t + 1 < n ? ",\n" : "\n");
        }
        json_object_put(o);
    }
    tbm_buf_adds(b, "]\n");
    return r < 0 ? r : pending;
}

static int tensors_doc(const struct tbm_views *v, bool with_stats, char **out, size_t *len)
{
    struct tbm_buf b = TBM_BUF_INIT;
    int pending = tensors_text(v, with_stats, &b);

    if (pending < 0) {
        tbm_buf_free(&b);
        return pending;
    }
    int r = tbm_buf_take(&b, out, len);
    return r < 0 ? r : pending;
}

/* What the statistics can add per tensor: a density of at most 24
 * characters for a null, and a warnings count grown by a digit or two. */
#define TENSOR_SLACK 32

/* Counted when first asked rather than at mount, without rendering it (a
 * million tensors take a while). */
int tbm_tensors_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          uint64_t *size)
{
    struct tbm_buf count = TBM_BUF_COUNT;
    int r = tensors_text(v, false, &count);

    (void)row, (void)t;
    if (r < 0)
        return r;
    *size = count.len + TENSOR_SLACK * (uint64_t)v->model->ntensors + 64;
    return 0;
}

int tbm_tensors_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                            char **out, size_t *len)
{
    (void)row, (void)t;
    return tbm_lazy_doc_render(v, tensors_doc, out, len);
}

/* The architecture's row when config.json knows it: named exactly as the
 * row (the contract's config.json is not "any case", unlike the GGUF
 * files'). */
static const struct tbm_arch *hf_arch(const char *architecture)
{
    const struct tbm_arch *a = tbm_arch_find(architecture);

    return a && strcmp(a->name, architecture) == 0 ? a : NULL;
}

/* Whether the model has an output layer of its own: a sound
 * lm_head.weight. */
static bool has_lm_head(const struct tbm_model *m)
{
    static const char name[] = "lm_head.weight";

    for (size_t i = 0; i < m->ntensors; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        if (t->name_len == sizeof(name) - 1 && memcmp(t->name, name, sizeof(name) - 1) == 0 &&
            t->problems.count == 0)
            return true;
    }
    return false;
}

/* torch's name of the precision holding most weights (by count) among the
 * tensors whose header is sound. A model with none (every tensor quantized,
 * or broken) has no stored precision to name: "float32", what transformers
 * loads in when torch_dtype says nothing and what the dense views give. */
static const char *torch_dtype(const struct tbm_model *m)
{
    static const char *const names[] = {"float32", "float16", "bfloat16", "float64"};
    uint64_t count[4] = {0};
    int best = -1;

    for (size_t i = 0; i < m->ntensors; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        /* a sound header has a known precision; the sum of sizes inside one
         * source cannot overflow */
        if (t->header_sound)
            count[t->hdr.precision] += t->hdr.num_weights;
    }
    for (int p = 0; p < 4; p++)
        if (count[p] && (best < 0 || count[p] > count[best]))
            best = p;
    return best < 0 ? "float32" : names[best];
}

static int config_json_render(const struct tbm_views *v, char **out, size_t *len)
{
    static const char *const keys[][2] = {
        {"hidden_size", "hidden_size"},
        {"intermediate_size", "intermediate_size"},
        {"num_attention_heads", "num_heads"},
        {"num_key_value_heads", "num_kv_heads"},
        {"num_hidden_layers", "num_layers"},
        {"vocab_size", "vocab_size"},
        {"max_position_embeddings", "max_seq_len"},
        {"rms_norm_eps", "norm_eps"},
        {"rope_theta", "rope_theta"},
    };
    const struct tbm_model *m = v->model;
    const struct tbm_arch *arch = hf_arch(m->architecture);
    const char *dtype = torch_dtype(m);
    struct json_object *o = json_object_new_object(), *arr = json_object_new_array(), *val;

    if (!o || !arr) {
        json_object_put(o);
        json_object_put(arr);
        return TBM_ERR_NOMEM;
    }
    json_object_array_add(arr, json_object_new_string(arch->hf_class));
    json_object_object_add(o, "architectures", arr);
    json_object_object_add(o, "model_type", json_object_new_string(arch->name));
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (m->config && json_object_object_get_ex(m->config, keys[k][1], &val))
            json_object_object_add(o, keys[k][0], json_object_get(val));
    if (arch->head_dim && m->config && json_object_object_get_ex(m->config, "head_dim", &val))
        json_object_object_add(o, "head_dim", json_object_get(val));
    /* without it a loader would start the output layer from random values */
    json_object_object_add(o, "tie_word_embeddings", json_object_new_boolean(!has_lm_head(m)));
    json_object_object_add(o, "torch_dtype", json_object_new_string(dtype));
    int r = tbm_json_dump(o, out, len);
    json_object_put(o);
    return r;
}

bool tbm_config_json_present(const struct tbm_views *v, const struct tbm_row *row)
{
    (void)row;
    return hf_arch(v->model->architecture) != NULL;
}

/* Rendered once, at mount: a few hundred bytes that never change. */
int tbm_config_json_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state)
{
    char *doc;
    size_t len;

    if (!tbm_config_json_present(v, row))
        return 0;
    int r = config_json_render(v, &doc, &len);
    return r < 0 ? r : tbm_buffer_new(doc, len, doc, state);
}
