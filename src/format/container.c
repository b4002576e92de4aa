/* A .tbm container: the blobs, then the JSON index, then the index's length
 * as 4 little-endian bytes at the very end. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static int read_index(struct tbm_opener *o)
{
    unsigned char tail[4];
    uint64_t size = o->m->src->id.size;

    if (size < 4)
        return tbm_open_fail(o, TBM_ERR_SOURCE,
                             "not a .tbm container: %llu bytes, too small for the index length",
                             (unsigned long long)size);
    if (tbm_source_read_full(o->m->src, tail, 4, size - 4) < 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "cannot read the index length");
    uint64_t len = tbm_le32(tail);
    if (len == 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "not a .tbm container: index length is 0");
    if (len > size - 4)
        return tbm_open_fail(
            o, TBM_ERR_SOURCE,
            "not a .tbm container: index length %llu exceeds the %llu bytes before it",
            (unsigned long long)len, (unsigned long long)(size - 4));
    o->data_end = size - 4 - len;
    return tbm_index_read(o, o->m->src, o->data_end, len, "index");
}

/* The name made it a container; a file whose index is unusable but that
 * starts like a blob is more likely a bare .tb, and the error says so. */
int tbm_container_open(struct tbm_opener *o)
{
    unsigned char head[8];
    int r = read_index(o);

    if (r != TBM_ERR_SOURCE || tbm_source_read_full(o->m->src, head, sizeof(head), 0) < 0 ||
        tbm_le32(head) != TBM_MAGIC || tbm_le32(head + 4) != TBM_VERSION)
        return r;
    size_t n = strlen(o->err);
    snprintf(o->err + n, o->errlen - n,
             "; but the file starts with a valid blob header: is it a bare blob (name it .tb)?");
    return r;
}
