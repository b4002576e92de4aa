/* One entry of an index's or manifest's "tensors" array: its name, shape and
 * location, and how it agrees with the blob header it describes. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_name(struct json_object *entry, size_t i, struct tbm_tensor *t)
{
    struct json_object *v;
    const char *s = "";
    size_t len = 0;

    if (json_object_object_get_ex(entry, "name", &v) && json_object_is_type(v, json_type_string)) {
        s = json_object_get_string(v);
        len = (size_t)json_object_get_string_len(v);
    } else if (tbm_strlist_addf(&t->problems, "index entry %zu has no string \"name\"", i) < 0) {
        return TBM_ERR_NOMEM;
    }
    t->name = malloc(len + 1);
    if (!t->name)
        return TBM_ERR_NOMEM;
    memcpy(t->name, s, len);
    t->name[len] = '\0';
    t->name_len = len;
    return 0;
}

static int parse_shape(struct json_object *entry, struct tbm_tensor *t)
{
    struct json_object *v;

    if (!json_object_object_get_ex(entry, "shape", &v))
        return tbm_strlist_addf(&t->warnings, "index entry has no \"shape\"");
    if (!json_object_is_type(v, json_type_array))
        return tbm_strlist_addf(&t->warnings, "index \"shape\" is not an array");
    size_t n = json_object_array_length(v);
    uint64_t *shape = calloc(n ? n : 1, sizeof(*shape));
    if (!shape)
        return TBM_ERR_NOMEM;
    for (size_t k = 0; k < n; k++) {
        struct json_object *d = json_object_array_get_idx(v, k);
        if (!json_object_is_type(d, json_type_int) || json_object_get_int64(d) < 0 ||
            json_object_get_uint64(d) == UINT64_MAX) {
            free(shape);
            return tbm_strlist_addf(&t->warnings, "index \"shape\" has an element that is not a "
                                                  "non-negative integer");
        }
        shape[k] = json_object_get_uint64(d);
    }
    t->shape = shape;
    /* [n, 0] is how the Tensorbit tools write a 1-D tensor */
    t->ndim = n == 2 && shape[1] == 0 ? 1 : n;
    return 0;
}

static void parse_nm(struct json_object *entry, struct tbm_tensor *t)
{
    uint64_t n, m;

    if (tbm_json_get_u64(entry, "nm_n", &n) == 1 && tbm_json_get_u64(entry, "nm_m", &m) == 1 &&
        n <= UINT32_MAX && m <= UINT32_MAX) {
        t->index_nm_known = true;
        t->index_nm_n = (uint32_t)n;
        t->index_nm_m = (uint32_t)m;
    }
}

static int parse_location(struct json_object *entry, struct tbm_tensor *t, struct tbm_entry *e)
{
    struct json_object *v;
    int r = tbm_json_get_u64(entry, "offset", &e->offset);

    if (r < 0 &&
        tbm_strlist_addf(&t->problems, "index \"offset\" is not a non-negative integer") < 0)
        return TBM_ERR_NOMEM;
    e->has_offset = r > 0;
    e->bad_offset = r < 0;
    if (json_object_object_get_ex(entry, "file", &v) && json_object_is_type(v, json_type_string)) {
        e->file = json_object_get_string(v);
        e->file_len = (size_t)json_object_get_string_len(v);
    }
    return 0;
}

int tbm_entry_parse(struct json_object *entry, size_t i, struct tbm_tensor *t, struct tbm_entry *e,
                    const char *text, size_t text_len)
{
    int r;

    memset(e, 0, sizeof(*e));
    if (!json_object_is_type(entry, json_type_object)) {
        if ((r = parse_name(NULL, i, t)) < 0)
            return r;
        return tbm_strlist_addf(&t->problems, "index entry %zu is not an object", i);
    }
    if ((r = parse_name(entry, i, t)) < 0 || (r = parse_shape(entry, t)) < 0 ||
        (r = parse_location(entry, t, e)) < 0)
        return r;
    parse_nm(entry, t);
    if (text) {
        /* the stored text: held by the model for the mount, and no copy of
         * a million entries */
        t->entry_json = text;
        t->entry_json_len = text_len;
        return 0;
    }
    const char *s = json_object_to_json_string_ext(entry, JSON_C_TO_STRING_PLAIN);
    char *copy = strdup(s ? s : "null");
    if (!copy)
        return TBM_ERR_NOMEM;
    t->entry_json = copy;
    t->entry_json_len = strlen(copy);
    t->entry_json_owned = true;
    return 0;
}

static int check_u64(struct json_object *entry, struct tbm_tensor *t, const char *key,
                     uint64_t header_value)
{
    uint64_t v;
    int r = tbm_json_get_u64(entry, key, &v);

    if (r < 0)
        return tbm_strlist_addf(&t->warnings,
                                "index \"%s\" is not a non-negative integer; the header's %llu "
                                "is used",
                                key, (unsigned long long)header_value);
    if (r > 0 && v != header_value)
        return tbm_strlist_addf(&t->warnings, "index \"%s\" is %llu but the header says %llu", key,
                                (unsigned long long)v, (unsigned long long)header_value);
    return 0;
}

static int check_dtype(struct json_object *entry, struct tbm_tensor *t)
{
    struct json_object *v;
    const char *want = tbm_precision_name(t->hdr.precision);

    if (!json_object_object_get_ex(entry, "dtype", &v) || !want)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return tbm_strlist_addf(&t->warnings, "index \"dtype\" is not a string");
    if (strcmp(json_object_get_string(v), want) != 0)
        return tbm_strlist_addf(&t->warnings, "index \"dtype\" is \"%s\" but the header says %s",
                                json_object_get_string(v), want);
    return 0;
}

/* The header wins over the index; a disagreement is only a warning. */
int tbm_entry_check_header(struct json_object *entry, struct tbm_tensor *t)
{
    int r;

    /* the fields of a header without the format's magic and version mean
     * nothing, so disagreeing with them says nothing either */
    if (!json_object_is_type(entry, json_type_object) || !t->header_valid)
        return 0;
    if ((r = check_dtype(entry, t)) < 0 ||
        (r = check_u64(entry, t, "num_weights", t->hdr.num_weights)) < 0 ||
        (r = check_u64(entry, t, "num_mask_bytes", t->hdr.num_mask_bytes)) < 0 ||
        (r = check_u64(entry, t, "nm_n", t->hdr.nm_n)) < 0 ||
        (r = check_u64(entry, t, "nm_m", t->hdr.nm_m)) < 0)
        return r;
    return 0;
}
