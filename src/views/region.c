/* raw.tb, weights.bin and mask.bin: byte ranges of the source, served as
 * stored once validation has found them sound. */
#include "internal.h"

/* The view op that names a view's region; these views have nothing before it. */
typedef const struct tbm_region *(*region_fn)(const struct tbm_views *v, size_t t, uint64_t *skip);

static const struct tbm_region *region_of(const struct tbm_views *v, size_t t, region_fn source)
{
    uint64_t skip;
    return source(v, t, &skip);
}

static bool region_servable(const struct tbm_views *v, size_t t, region_fn source)
{
    return v->model->tensors[t].header_sound && region_of(v, t, source)->ok;
}

static int region_size(const struct tbm_views *v, size_t t, region_fn source, uint64_t *size)
{
    *size = region_of(v, t, source)->len;
    return 0;
}

static int region_read(const struct tbm_views *v, size_t t, region_fn source, char *buf,
                       uint64_t off, size_t len, size_t *got)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_region *r = region_of(v, t, source);

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

static const struct tbm_region *raw_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].raw;
}

static const struct tbm_region *weights_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].weights;
}

static const struct tbm_region *mask_source(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].mask;
}

static int raw_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, raw_source, size);
}

static int raw_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                    size_t *got)
{
    return region_read(v, t, raw_source, buf, off, len, got);
}

static bool raw_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, raw_source);
}

static int weights_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, weights_source, size);
}

static int weights_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                        size_t *got)
{
    return region_read(v, t, weights_source, buf, off, len, got);
}

static bool weights_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, weights_source);
}

static int mask_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    return region_size(v, t, mask_source, size);
}

static int mask_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                     size_t *got)
{
    return region_read(v, t, mask_source, buf, off, len, got);
}

static bool mask_servable(const struct tbm_views *v, size_t t)
{
    return region_servable(v, t, mask_source);
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
