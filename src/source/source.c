/* What every source shares, built on its three operations. */
#include "tbm/source.h"

int tbm_source_read_full(struct tbm_source *src, void *buf, size_t len, uint64_t off)
{
    size_t got;
    int r = src->ops->read(src, buf, len, off, &got);

    return r < 0 ? r : got == len ? 0 : TBM_ERR_IO;
}

int tbm_source_size_now(struct tbm_source *src, uint64_t *size)
{
    struct tbm_source_id id;
    int r = src->ops->identify(src, &id);

    *size = r < 0 ? 0 : id.size;
    return r;
}

void tbm_source_close(struct tbm_source *src)
{
    if (src)
        src->ops->close(src);
}
