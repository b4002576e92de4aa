/* An index's text (a container's index, a manifest.json): read from its
 * source within the limits, and split at the elements of its "tensors"
 * array, or parsed whole, whose failure says where the JSON is invalid. */
#include "internal.h"

#include <stdlib.h>

int tbm_index_too_many(struct tbm_opener *o)
{
    return tbm_open_fail(o, TBM_ERR_SOURCE, "%s lists more than %u tensors", o->what,
                         TBM_INDEX_ENTRIES_MAX);
}

int tbm_index_parse(struct tbm_opener *o)
{
    const char *why;
    size_t at, line, column;

    o->root = tbm_json_parse_located(o->m->index_json, o->m->index_json_len, &why, &at);
    if (o->root)
        return 0;
    if (at == SIZE_MAX)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "%s is not valid JSON: %s", o->what, why);
    tbm_json_position(o->m->index_json, at, &line, &column);
    return tbm_open_fail(o, TBM_ERR_SOURCE,
                         "%s is not valid JSON: %s at byte %zu (line %zu, column %zu)", o->what,
                         why, at, line, column);
}

/* An index that is plainly an object with a "tensors" array is split at its
 * elements, to be parsed in slices as it is loaded (index.c); any other text
 * is parsed whole. */
int tbm_index_read(struct tbm_opener *o, struct tbm_source *src, uint64_t off, uint64_t len,
                   const char *what)
{
    if (len > TBM_INDEX_MAX)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "%s is %llu bytes, over the %u MiB limit", what,
                             (unsigned long long)len, TBM_INDEX_MAX >> 20);
    char *buf = malloc(len ? len : 1);
    if (!buf)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory reading the %s", what);
    if (tbm_source_read_full(src, buf, len, off, NULL) < 0) {
        free(buf);
        return tbm_open_fail(o, TBM_ERR_SOURCE, "cannot read the %s", what);
    }
    o->m->index_json = buf;
    o->m->index_json_len = len;
    o->what = what;
    int r = tbm_json_split(buf, len, &o->split);
    if (r == TBM_ERR_SOURCE)
        return tbm_index_too_many(o);
    if (r < 0)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory reading the %s", what);
    if (r > 0 && (o->root = tbm_json_split_root(buf, len, &o->split)))
        return 0;
    tbm_json_split_free(&o->split);
    return tbm_index_parse(o);
}
