/* A tensor's shape as the views show it, in one place: the index's shape
 * as JSON (header.json, tensors.json), and the dimensions a file lays the
 * elements out in as text (dense.npy, model.safetensors, user.tbm.shape). */
#include "internal.h"

#include <json-c/json.h>
#include <stdio.h>

struct json_object *tbm_shape_json(const struct tbm_tensor *t)
{
    if (!t->shape)
        return NULL;
    struct json_object *arr = json_object_new_array();
    for (size_t k = 0; arr && k < t->ndim; k++)
        json_object_array_add(arr, json_object_new_uint64(t->shape[k]));
    return arr;
}

size_t tbm_shape_dims(const struct tbm_tensor *t, bool layout, const uint64_t **dims)
{
    if (t->shape && (!layout || t->shape_matches)) {
        *dims = t->shape;
        return t->ndim;
    }
    *dims = &t->hdr.num_weights;
    return 1;
}

size_t tbm_shape_text(const uint64_t *dims, size_t n, const char *sep, char *out, size_t cap)
{
    size_t len = 0;

    if (cap > 0)
        out[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        size_t room = len < cap ? cap - len : 0;
        int w = snprintf(room ? out + len : NULL, room, "%s%llu", k ? sep : "",
                         (unsigned long long)dims[k]);
        len += w > 0 ? (size_t)w : 0;
    }
    return len;
}
