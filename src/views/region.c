/* raw.tb, weights.bin and mask.bin: byte ranges of the source, served as
 * stored once validation has found them sound. */
#include "internal.h"

static const struct tbm_region *region_of(const struct tbm_tensor *t, int which)
{
    return which == 0 ? &t->raw : which == 1 ? &t->weights : &t->mask;
}

static bool region_servable(const struct tbm_views *v, size_t t, int which)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    return tensor->header_sound && region_of(tensor, which)->ok;
}

static int region_size(const struct tbm_views *v, size_t t, int which, uint64_t *size)
{
    *size = region_of(&v->model->tensors[t], which)->len;
    return 0;
}

static int region_read(const struct tbm_views *v, size_t t, int which, char *buf, uint64_t off,
                       size_t len, size_t *got)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_region *r = region_of(tensor, which);

    if (off >= r->len) {
        *got = 0;
        return 0;
    }
    size_t n = r->len - off < len ? (size_t)(r->len - off) : len;
    int status = tbm_pread_full(tensor->fd, buf, n, r->off + off);
    if (status < 0)
        return status;
    *got = n;
    return 0;
}

static int raw_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, 0, size);
}

static int raw_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                    size_t *got)
{
    return region_read(v, t, 0, buf, off, len, got);
}

static int weights_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, 1, size);
}

static int weights_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                        size_t *got)
{
    return region_read(v, t, 1, buf, off, len, got);
}

static int mask_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, 2, size);
}

static int mask_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                     size_t *got)
{
    return region_read(v, t, 2, buf, off, len, got);
}

static bool raw_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, 0);
}

static bool weights_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, 1);
}

static bool mask_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, 2);
}

const struct tbm_view_ops tbm_raw_view = {
    .name = "raw.tb",
    .size = raw_size,
    .read = raw_read,
    .servable = raw_servable,
};
const struct tbm_view_ops tbm_weights_view = {
    .name = "weights.bin",
    .size = weights_size,
    .read = weights_read,
    .servable = weights_servable,
};
const struct tbm_view_ops tbm_mask_view = {
    .name = "mask.bin",
    .size = mask_size,
    .read = mask_read,
    .servable = mask_servable,
};
