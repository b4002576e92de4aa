/* The JSON files: index.json (the stored index), model.json (the summary)
 * and each tensor's header.json (rendered from the table). */
#include "internal.h"

#include "tbm/text.h"

#include <json-c/json.h>
#include <json-c/printbuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_name(const struct tbm_tensor *t)
{
    return t->header_read ? tbm_precision_name(t->hdr.precision) : NULL;
}

static struct json_object *strlist_json(const struct tbm_strlist *list)
{
    struct json_object *arr = json_object_new_array();

    for (size_t i = 0; arr && i < list->count; i++)
        json_object_array_add(arr, json_object_new_string(list->items[i]));
    return arr;
}

static void add_header_fields(struct json_object *o, const struct tbm_tensor *t)
{
    const struct tbm_blob_header *h = &t->hdr;
    bool ok = t->header_read;
    char magic[16];

    snprintf(magic, sizeof(magic), "0x%08x", h->magic);
    json_object_object_add(o, "magic", ok ? json_object_new_string(magic) : NULL);
    json_object_object_add(o, "version", ok ? json_object_new_uint64(h->version) : NULL);
    json_object_object_add(o, "nm_n", ok ? json_object_new_uint64(h->nm_n) : NULL);
    json_object_object_add(o, "nm_m", ok ? json_object_new_uint64(h->nm_m) : NULL);
    json_object_object_add(o, "num_weights", ok ? json_object_new_uint64(h->num_weights) : NULL);
    json_object_object_add(o, "num_mask_bytes",
                           ok ? json_object_new_uint64(h->num_mask_bytes) : NULL);
    json_object_object_add(o, "weights_offset",
                           ok ? json_object_new_uint64(h->weights_offset) : NULL);
    json_object_object_add(o, "masks_offset", ok ? json_object_new_uint64(h->masks_offset) : NULL);
    json_object_object_add(o, "precision", ok ? json_object_new_uint64(h->precision) : NULL);
}

/* st is NULL while the statistics are not computed: their fields are null. */
static void add_stats(struct json_object *o, const struct tbm_tensor *t,
                      const struct tbm_tensor_stats *st)
{
    bool ok = st && st->known;
    const struct tbm_mask_stats *c = ok ? &st->counts : NULL;

    json_object_object_add(o, "kept", ok ? json_object_new_uint64(c->kept) : NULL);
    json_object_object_add(o, "density",
                           ok ? json_object_new_double(tbm_tensor_density(t, st)) : NULL);
    json_object_object_add(o, "groups_over_n",
                           ok ? json_object_new_uint64(c->groups_over_n) : NULL);
    json_object_object_add(o, "mask_conflicts",
                           ok ? json_object_new_uint64(c->mask_conflicts) : NULL);
}

static struct json_object *warnings_json(const struct tbm_tensor *t,
                                         const struct tbm_tensor_stats *st)
{
    struct json_object *arr = strlist_json(&t->warnings);

    for (size_t i = 0; arr && st && i < st->warnings.count; i++)
        json_object_array_add(arr, json_object_new_string(st->warnings.items[i]));
    return arr;
}

/* What the statistics can add to a header.json beyond its rendering without
 * them: four numbers for four nulls (at most 20 digits, or 24 characters
 * of a double, each) and at most two warnings of at most 120 bytes each
 * with their quoting, indentation and commas. */
#define HEADER_SLACK 512

static int print_stored(struct json_object *obj, struct printbuf *pb, int level, int flags)
{
    const struct tbm_tensor *t = json_object_get_userdata(obj);
    (void)level, (void)flags;
    return printbuf_memappend(pb, t->entry_json, (int)t->entry_json_len);
}

/* The index entry was validated and serialized at open; it is written out
 * as it is rather than parsed again for every render. */
static struct json_object *stored_json(const struct tbm_tensor *t)
{
    if (!t->entry_json)
        return NULL;
    struct json_object *obj = json_object_new_object();
    if (obj)
        json_object_set_serializer(obj, print_stored, (void *)t, NULL);
    return obj;
}

/* 1 when the statistics were not known yet. */
static int header_doc(const struct tbm_views *v, size_t t, bool with_stats, char **out, size_t *len)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_tensor_stats *st = NULL;
    int pending = with_stats ? tbm_views_tensor_stats(v, t, &st) : 0;
    int r;
    if (pending < 0)
        return pending;
    struct json_object *o = json_object_new_object();
    const char *dtype = dtype_name(tensor);

    if (!o)
        return TBM_ERR_NOMEM;
    json_object_object_add(o, "name",
                           json_object_new_string_len(tensor->name, (int)tensor->name_len));
    json_object_object_add(o, "dir", json_object_new_string(tensor->dir));
    json_object_object_add(o, "shape", tbm_shape_json(tensor));
    json_object_object_add(o, "dtype", dtype ? json_object_new_string(dtype) : NULL);
    add_header_fields(o, tensor);
    json_object_object_add(o, "offset", json_object_new_uint64(tensor->offset));
    add_stats(o, tensor, st);
    json_object_object_add(o, "mask_applied",
                           json_object_new_boolean(tensor->mask_usable && tensor->mask.ok));
    json_object_object_add(o, "problems", strlist_json(&tensor->problems));
    json_object_object_add(o, "warnings", warnings_json(tensor, st));
    json_object_object_add(o, "index", stored_json(tensor));
    r = tbm_json_dump(o, out, len);
    json_object_put(o);
    return r < 0 ? r : pending;
}

/* Its size is fixed before the statistics are known: the rendering
 * without them, and room for what they can add (their warnings, or the one
 * saying they are not known yet). */
int tbm_header_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t *size)
{
    char *doc;
    size_t len;
    int r = header_doc(v, t, false, &doc, &len);

    (void)row;
    if (r < 0)
        return r;
    free(doc);
    *size = len + HEADER_SLACK;
    return 0;
}

int tbm_header_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                           char **out, size_t *len)
{
    (void)row;
    return header_doc(v, t, true, out, len);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    uint64_t s;
    return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

static struct json_object *problems_json(const struct tbm_model *m)
{
    struct json_object *arr = json_object_new_array();

    for (size_t i = 0; arr && i < m->ntensors; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        for (size_t k = 0; k < t->problems.count; k++) {
            char *line;
            if (asprintf(&line, "tensor %s: %s", t->dir, t->problems.items[k]) < 0)
                continue;
            json_object_array_add(arr, json_object_new_string(line));
            free(line);
        }
    }
    return arr;
}

/* The model's sums over its tensors: weights, and with the statistics
 * kept elements and warnings; pending counts tensors whose statistics
 * were not known yet (stats_nowait). */
struct sums {
    uint64_t total, kept, warnings, warned, pending;
};

static int sum_tensors(const struct tbm_views *v, bool with_stats, struct sums *s)
{
    const struct tbm_model *m = v->model;

    *s = (struct sums){0};
    for (size_t i = 0; i < m->ntensors; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        const struct tbm_tensor_stats *st = NULL;
        int r = with_stats ? tbm_views_tensor_stats(v, i, &st) : 0;
        if (r < 0)
            return r; /* a total short of a tensor is not served as the total */
        s->pending += r;
        if (t->header_sound)
            s->total = add_sat(s->total, t->hdr.num_weights);
        size_t n = t->warnings.count + (st ? st->warnings.count : 0);
        if (st && st->known)
            s->kept = add_sat(s->kept, st->counts.kept);
        s->warnings += n;
        s->warned += n > 0;
    }
    return 0;
}

/* views_missing and views_notes, as the rows say: missing is [] for a
 * model of a kind that has every file (the llama family's). */
static int add_views_notes(const struct tbm_views *v, struct json_object *o)
{
    struct json_object *missing = json_object_new_array(), *notes = json_object_new_array();
    bool expected;
    int r = missing && notes ? tbm_views_notes(v, missing, notes, &expected) : TBM_ERR_NOMEM;

    if (r == 0 && (expected || json_object_array_length(missing)))
        json_object_object_add(o, "views_missing", json_object_get(missing));
    if (r == 0 && json_object_array_length(notes))
        json_object_object_add(o, "views_notes", json_object_get(notes));
    json_object_put(missing);
    json_object_put(notes);
    return r;
}

static int model_doc(const struct tbm_views *v, bool with_stats, char **out, size_t *len)
{
    static const char *const formats[] = {"tbm", "manifest", "tb"};
    const struct tbm_model *m = v->model;
    struct json_object *o = json_object_new_object();
    char source[4096];
    struct sums s;
    int r = o ? sum_tensors(v, with_stats, &s) : TBM_ERR_NOMEM;

    if (r < 0) {
        json_object_put(o);
        return r;
    }
    tbm_text_clean(source, sizeof(source), m->path, strlen(m->path));
    json_object_object_add(o, "format", json_object_new_string(formats[m->kind]));
    json_object_object_add(o, "source", json_object_new_string(source));
    json_object_object_add(o, "architecture",
                           m->architecture ? json_object_new_string(m->architecture) : NULL);
    json_object_object_add(o, "config", json_object_get(m->config));
    json_object_object_add(o, "tensor_count", json_object_new_uint64(m->ntensors));
    json_object_object_add(o, "total_weights", json_object_new_uint64(s.total));
    /* null while a tensor's kept elements are not known yet: its
     * header.json's warnings say why, and the count below has them */
    json_object_object_add(o, "total_kept",
                           s.pending ? NULL : json_object_new_uint64(with_stats ? s.kept : 0));
    json_object_object_add(o, "tensors_with_problems", json_object_new_uint64(m->nproblem_tensors));
    json_object_object_add(o, "problems", problems_json(m));
    json_object_object_add(o, "warnings", json_object_new_uint64(s.warnings));
    json_object_object_add(o, "tensors_with_warnings", json_object_new_uint64(s.warned));
    json_object_object_add(o, "kernels", json_object_new_string(tbm_isa_name(m->isa)));
    if ((r = add_views_notes(v, o)) == 0)
        r = tbm_json_dump(o, out, len);
    json_object_put(o);
    return r < 0 ? r : s.pending > 0;
}

/* What the statistics can add to model.json beyond its rendering without
 * them: total_kept (or null), warnings and tensors_with_warnings grow from
 * 0 to at most 20 digits each. */
#define MODEL_SLACK 64

/* Counted when first asked rather than at mount (it says why
 * model.safetensors leaves tensors out, which needs that file's layout);
 * threads that ask at once count the same bytes. */
int tbm_model_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                        uint64_t *size)
{
    (void)row, (void)t;
    return tbm_lazy_doc_size(v, model_doc, MODEL_SLACK, size);
}

int tbm_model_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          char **out, size_t *len)
{
    (void)row, (void)t;
    return tbm_lazy_doc_render(v, model_doc, out, len);
}

/* The index as stored: the model's own bytes. */
int tbm_index_json_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state)
{
    (void)row;
    return tbm_buffer_new(v->model->index_json, v->model->index_json_len, NULL, state);
}
