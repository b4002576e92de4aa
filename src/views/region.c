/* raw.tb, weights.bin and mask.bin: byte ranges of the source, served as
 * stored once validation has found them sound. */
#include "internal.h"

const struct tbm_region *tbm_raw_region(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].raw;
}

const struct tbm_region *tbm_weights_region(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].weights;
}

const struct tbm_region *tbm_mask_region(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return &v->model->tensors[t].mask;
}
