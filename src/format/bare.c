/* A bare .tb file: one tensor named after the file, its index entry and
 * index.json synthesized from the header. */
#include "internal.h"

#include "tbm/text.h"

#include <stdlib.h>
#include <string.h>

/* A bare .tb has no index: its one tensor is named after the file, and its
 * index entry and index.json are synthesized from the header. */
static int synthesize_index(struct tbm_opener *o)
{
    struct tbm_tensor *t = &o->m->tensors[0];
    const struct tbm_blob_header *h = &t->hdr;
    struct json_object *root = json_object_new_object();
    struct json_object *arr = json_object_new_array();
    struct json_object *e = json_object_new_object();
    int r = TBM_ERR_NOMEM;

    if (!root || !arr || !e) {
        json_object_put(arr);
        json_object_put(e);
        goto out;
    }
    json_object_object_add(root, "architecture", NULL);
    json_object_object_add(root, "config", json_object_new_object());
    json_object_object_add(root, "tensors", arr);
    json_object_array_add(arr, e);
    json_object_object_add(e, "name", json_object_new_string_len(t->name, (int)t->name_len));
    json_object_object_add(e, "offset", json_object_new_uint64(0));
    if (t->header_read) {
        struct json_object *shape = json_object_new_array();
        json_object_array_add(shape, json_object_new_uint64(h->num_weights));
        json_object_object_add(e, "shape", shape);
        json_object_object_add(e, "nm_n", json_object_new_uint64(h->nm_n));
        json_object_object_add(e, "nm_m", json_object_new_uint64(h->nm_m));
        json_object_object_add(e, "dtype",
                               tbm_precision_name(h->precision)
                                   ? json_object_new_string(tbm_precision_name(h->precision))
                                   : NULL);
        json_object_object_add(e, "num_weights", json_object_new_uint64(h->num_weights));
        json_object_object_add(e, "num_mask_bytes", json_object_new_uint64(h->num_mask_bytes));
    }
    char *entry_text = strdup(json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN));
    t->entry_json = entry_text;
    t->entry_json_len = entry_text ? strlen(entry_text) : 0;
    t->entry_json_owned = true;
    const char *s =
        json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    o->m->index_json = s ? malloc(strlen(s) + 1) : NULL;
    if (!t->entry_json || !o->m->index_json)
        goto out;
    o->m->index_json_len = strlen(s) + 1;
    memcpy(o->m->index_json, s, o->m->index_json_len - 1);
    o->m->index_json[o->m->index_json_len - 1] = '\n';
    o->m->config = json_object_get(json_object_object_get(root, "config"));
    r = 0;
out:
    json_object_put(root);
    return r;
}

int tbm_bare_open(struct tbm_opener *o)
{
    struct tbm_reader rd = TBM_READER_INIT;
    struct tbm_tensor *t;
    const char *base = strrchr(o->given, '/');
    base = base ? base + 1 : o->given;

    o->m->tensors = calloc(1, sizeof(*o->m->tensors));
    if (!o->m->tensors)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    o->m->ntensors = 1;
    t = &o->m->tensors[0];
    t->src = o->m->src;
    /* The name is the file's, whose bytes need not be UTF-8: it is shown
     * in JSON, so what is not UTF-8 is %XX-escaped. */
    size_t blen = strlen(base) - 3;
    t->name = malloc(blen * 3 + 4);
    if (t->name)
        t->name_len = tbm_text_clean(t->name, blen * 3 + 4, base, blen);
    uint64_t size = o->m->src->id.size;
    int r = t->name ? tbm_blob_validate(t, size, &rd) : TBM_ERR_NOMEM;
    tbm_reader_free(&rd);
    /* The name made it a bare blob; bytes past the blob say it may not be */
    if (r == 0 && t->raw.ok && t->raw.off + t->raw.len < size)
        r = tbm_strlist_addf(&t->warnings, "%llu bytes after the blob: is this a .tbm container?",
                             (unsigned long long)(size - t->raw.off - t->raw.len));
    if (r < 0)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    if (t->header_read) {
        t->shape = malloc(sizeof(*t->shape));
        if (!t->shape)
            return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
        t->shape[0] = t->hdr.num_weights;
        t->ndim = 1;
        t->shape_matches = true;
    }
    if (synthesize_index(o) < 0)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    return 0;
}
