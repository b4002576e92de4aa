/* Reads of the source while it is validated, through a window: the small
 * tensors of a large index lie side by side, and one read per window rather
 * than per header or region saved a third of a 100,000-tensor mount. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int tbm_reader_read(struct tbm_reader *r, struct tbm_source *src, void *dst, size_t len,
                    uint64_t off)
{
    size_t got;

    if (src == r->src && off >= r->start && off - r->start <= r->len &&
        len <= r->len - (off - r->start)) {
        memcpy(dst, r->buf + (off - r->start), len);
        r->hit = true;
        return 0;
    }
    if (len > TBM_READER_WINDOW / 2)
        return tbm_source_read_full(src, dst, len, off, NULL);
    if (!r->buf && !(r->buf = malloc(TBM_READER_WINDOW)))
        return TBM_ERR_NOMEM;
    /* A window that served more than the read that filled it earns a larger
     * one, and on a local file so does one whose next read lies less than
     * its size past its end: a header is a whole page, so the next tensor's
     * never lies inside a first window however small the tensor between
     * (a pread per header: a 20,000-tensor mount took 130 ms, not 106). A remote
     * source has its headers fetched ahead as hints, which a wider window
     * would overrun. One that did neither starts small again, so that the
     * headers of large tensors, far apart, cost small reads. */
    uint64_t end = r->start + r->len;
    bool near = src == r->src && !src->ops->prefetch && off >= end && off - end < r->size;
    r->size = r->hit || near ? 2 * r->size : TBM_READER_FIRST;
    r->size = r->size > TBM_READER_WINDOW ? TBM_READER_WINDOW : r->size < len ? len : r->size;
    r->hit = false;
    int status = tbm_source_read(src, r->buf, r->size, off, NULL, &got);
    if (status == TBM_ERR_NOMEM)
        return status;
    if (status < 0 || got < len) {
        /* Only the bytes asked for decide whether the read fails: an error
         * further on belongs to whatever lies there. */
        r->src = NULL;
        return tbm_source_read_full(src, dst, len, off, NULL);
    }
    r->src = src;
    r->start = off;
    r->len = got;
    memcpy(dst, r->buf, len);
    return 0;
}

void tbm_reader_free(struct tbm_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->src = NULL;
}
