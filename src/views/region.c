/* raw.tb, weights.bin and mask.bin: byte ranges of the source, served as
 * stored once validation has found them sound. */
#include "internal.h"

typedef const struct tbm_region *(*region_fn)(const struct tbm_tensor *t);

static bool region_servable(const struct tbm_views *v, size_t t, region_fn region)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    return tensor->header_sound && region(tensor)->ok;
}

static int region_size(const struct tbm_views *v, size_t t, region_fn region, uint64_t *size)
{
    *size = region(&v->model->tensors[t])->len;
    return 0;
}

static int region_read(const struct tbm_views *v, size_t t, region_fn region, char *buf,
                       uint64_t off, size_t len, size_t *got)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_region *r = region(tensor);

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

static const struct tbm_region *raw_region(const struct tbm_tensor *t)
{
    return &t->raw;
}

static const struct tbm_region *weights_region(const struct tbm_tensor *t)
{
    return &t->weights;
}

static const struct tbm_region *mask_region(const struct tbm_tensor *t)
{
    return &t->mask;
}

static const struct tbm_region *raw_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return raw_region(&v->model->tensors[t]);
}

static const struct tbm_region *weights_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return weights_region(&v->model->tensors[t]);
}

static const struct tbm_region *mask_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return mask_region(&v->model->tensors[t]);
}

static int raw_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, raw_region, size);
}

static int raw_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                    size_t *got)
{
    return region_read(v, t, raw_region, buf, off, len, got);
}

static bool raw_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, raw_region);
}

static int weights_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, weights_region, size);
}

static int weights_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                        size_t *got)
{
    return region_read(v, t, weights_region, buf, off, len, got);
}

static bool weights_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, weights_region);
}

static int mask_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, mask_region, size);
}

static int mask_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                     size_t *got)
{
    return region_read(v, t, mask_region, buf, off, len, got);
}

static bool mask_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, mask_region);
}

const struct tbm_view_ops tbm_raw_view = {
    .name = "raw.tb",
    .size = raw_size,
    .read = raw_read,
    .source = raw_source,
    .servable = raw_servable,
};
const struct tbm_view_ops tbm_weights_view = {
    .name = "weights.bin",
    .size = weights_size,
    .read = weights_read,
    .source = weights_source,
    .servable = weights_servable,
};
const struct tbm_view_ops tbm_mask_view = {
    .name = "mask.bin",
    .size = mask_size,
    .read = mask_read,
    .source = mask_source,
    .servable = mask_servable,
};
