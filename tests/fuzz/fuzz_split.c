/* Differential libFuzzer target of parsing an index in slices: for any bytes,
 * the split and its slices must say exactly what one whole parse says. */
#include "fuzz_target.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>

#include "internal.h"

/* Rebuilds the whole array from the slices, to compare with the whole parse. */
static void append(struct json_object *all, struct json_object *arr)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        json_object_array_add(all, json_object_get(json_object_array_get_idx(arr, i)));
}

/* Parses the split text's elements in slices of step; NULL if one fails. */
static struct json_object *sliced(const char *buf, const struct tbm_json_split *s, size_t step)
{
    struct json_object *all = json_object_new_array();

    for (size_t first = 0; first < s->count;) {
        size_t last = s->count - first < step ? s->count : first + step;
        struct json_object *arr = tbm_json_split_elements(buf, s, first, last);
        if (!arr) {
            json_object_put(all);
            return NULL;
        }
        append(all, arr);
        json_object_put(arr);
        first = last;
    }
    return all;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    const char *why;
    struct tbm_json_split s;
    struct json_object *whole = tbm_json_parse_strict(buf, size, &why);
    int r = tbm_json_split(buf, size, &s);

    if (r < 0) { /* out of memory, or too many entries: no verdict to compare */
        json_object_put(whole);
        return 0;
    }
    if (r == 0) {
        json_object_put(whole);
        return 0;
    }
    struct json_object *root = tbm_json_split_root(buf, size, &s);
    struct json_object *all = root ? sliced(buf, &s, 1 + size % 5) : NULL;
    if ((all != NULL) != (whole != NULL))
        abort(); /* one says valid, the other invalid */
    if (all) {
        struct json_object *arr;
        if (!json_object_object_get_ex(whole, "tensors", &arr) || !json_object_equal(arr, all))
            abort();
        json_object_object_add(whole, "tensors", json_object_new_array());
        if (!json_object_equal(whole, root))
            abort();
    }
    json_object_put(all);
    json_object_put(root);
    json_object_put(whole);
    tbm_json_split_free(&s);
    return 0;
}
