/* Masking in place (the stored precision with the mask applied, as
 * model.safetensors serves it): the dispatcher and the portable reference,
 * which the SIMD paths must match bit for bit. */
#include "internal.h"

bool tbm_mask_apply_scalar(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                           uint64_t first, size_t count)
{
    uint8_t *w = weights;
    size_t es = tbm_precision_size(prec);
    uint32_t word_bytes = tbm_mask_word_bytes(m);
    uint32_t j = (uint32_t)(first % m); /* position in the current group */
    bool changed = false;

    for (size_t k = 0; k < count; k++, w += es) {
        changed |= tbm_clear_pruned_bits(w, es, mask[j / 8] >> (j % 8) & 1, 1);
        if (++j == m) {
            j = 0;
            mask += word_bytes;
        }
    }
    return changed;
}

bool tbm_mask_apply(enum tbm_isa isa, enum tbm_precision prec, void *weights, const uint8_t *mask,
                    uint32_t m, uint64_t first, size_t count)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        return tbm_mask_apply_avx512(prec, weights, mask, m, first, count);
    case TBM_ISA_AVX2:
        return tbm_mask_apply_avx2(prec, weights, mask, m, first, count);
    case TBM_ISA_SCALAR:
        break;
    }
    return tbm_mask_apply_scalar(prec, weights, mask, m, first, count);
}
