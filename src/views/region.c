/* raw.tb, weights.bin and mask.bin: byte ranges of the source, served as
 * stored once validation has found them sound. The row's arg names the
 * part of the blob. */
#include "internal.h"

const struct tbm_region *tbm_part_region(const struct tbm_views *v, const struct tbm_row *row,
                                         size_t t, uint64_t *skip)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    *skip = 0;
    switch (*(const enum tbm_blob_part *)row->arg) {
    case TBM_PART_RAW:
        return &tensor->raw;
    case TBM_PART_WEIGHTS:
        return &tensor->weights;
    case TBM_PART_MASK:
        break;
    }
    return &tensor->mask;
}
