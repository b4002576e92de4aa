/* The extended attributes of a tensor's directory and files: the first
 * facts asked of a tensor, readable with getfattr without opening a file. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "user.tbm."

enum { ATTR_NAME, ATTR_SHAPE, ATTR_DTYPE, ATTR_NM, ATTR_DENSITY, NATTRS };
static const char *const names[NATTRS] = {"name", "shape", "dtype", "nm", "density"};

/* The shape shown: the index's, else the header's element count. */
static char *shape_text(const struct tbm_tensor *t)
{
    const uint64_t *dims;
    size_t n = tbm_shape_dims(t, false, &dims);
    size_t len = tbm_shape_text(dims, n, ",", NULL, 0);
    char *out = malloc(len + 1);

    if (out)
        tbm_shape_text(dims, n, ",", out, len + 1);
    return out;
}

/* Whether tensor i has attribute k: its value is known (the density needs
 * the statistics, computed here if they are not yet, unless stats_nowait:
 * absent until they are, as null in the JSON files). */
static bool present(const struct tbm_views *v, size_t i, int k)
{
    const struct tbm_tensor *t = &v->model->tensors[i];
    const struct tbm_tensor_stats *st;

    switch (k) {
    case ATTR_NAME:
        return true;
    case ATTR_SHAPE:
        return t->shape || t->header_read;
    case ATTR_DTYPE:
        return t->header_read && tbm_precision_name(t->hdr.precision);
    case ATTR_NM:
        return t->header_read;
    default:
        return tbm_views_tensor_stats(v, i, &st) >= 0 && st->known;
    }
}

/* Attribute k's value (present) in a malloc'd buffer of *len bytes. */
static char *value(const struct tbm_views *v, size_t i, int k, size_t *len)
{
    const struct tbm_tensor *t = &v->model->tensors[i];
    const struct tbm_tensor_stats *st;
    char *s = NULL;
    int n = 0;

    switch (k) {
    case ATTR_NAME:
        s = malloc(t->name_len + 1);
        if (s)
            memcpy(s, t->name, t->name_len);
        n = (int)t->name_len;
        break;
    case ATTR_SHAPE:
        s = shape_text(t);
        n = s ? (int)strlen(s) : 0;
        break;
    case ATTR_DTYPE:
        n = asprintf(&s, "%s", tbm_precision_name(t->hdr.precision));
        break;
    case ATTR_NM:
        s = malloc(32);
        if (s) {
            tbm_tensor_nm(t, s, 32);
            n = (int)strlen(s);
        }
        break;
    default:
        /* present: known, and kept for the mount */
        tbm_views_tensor_stats(v, i, &st);
        n = asprintf(&s, "%.17g", tbm_tensor_density(t, st));
        break;
    }
    if (n < 0)
        return NULL;
    *len = (size_t)n;
    return s;
}

bool tbm_xattr_asks_stats(const char *name)
{
    return name && strncmp(name, PREFIX, sizeof(PREFIX) - 1) == 0 &&
           strcmp(name + sizeof(PREFIX) - 1, names[ATTR_DENSITY]) == 0;
}

size_t tbm_xattr_list(const struct tbm_views *v, size_t t, char *buf, size_t size)
{
    size_t need = 0;

    for (int k = 0; k < NATTRS; k++) {
        if (!present(v, t, k))
            continue;
        size_t n = sizeof(PREFIX) - 1 + strlen(names[k]) + 1;
        if (buf && need + n <= size)
            snprintf(buf + need, n, PREFIX "%s", names[k]);
        need += n;
    }
    return need;
}

int tbm_xattr_get(const struct tbm_views *v, size_t t, const char *name, char *buf, size_t size,
                  size_t *len)
{
    *len = 0;
    if (strncmp(name, PREFIX, sizeof(PREFIX) - 1) != 0)
        return TBM_ERR_NOATTR;
    for (int k = 0; k < NATTRS; k++) {
        if (strcmp(name + sizeof(PREFIX) - 1, names[k]) != 0)
            continue;
        if (!present(v, t, k))
            return TBM_ERR_NOATTR;
        char *s = value(v, t, k, len);
        if (!s)
            return TBM_ERR_NOMEM;
        if (buf && *len <= size)
            memcpy(buf, s, *len);
        free(s);
        return 0;
    }
    return TBM_ERR_NOATTR;
}
