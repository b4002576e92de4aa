/* Mask statistics for header.json: the dispatcher and the portable reference
 * that the SIMD paths must match exactly. */
#include <string.h>

#include "internal.h"

/* Whether the stored element at p is anything but +0.0 or -0.0 (a NaN is). */
static bool stored_nonzero(enum tbm_precision prec, const uint8_t *p)
{
    uint16_t h;
    uint32_t s;
    uint64_t d;

    switch (prec) {
    case TBM_FP16:
    case TBM_BF16:
        memcpy(&h, p, sizeof h);
        return (h & 0x7FFF) != 0;
    case TBM_FP64:
        memcpy(&d, p, sizeof d);
        return (d & UINT64_C(0x7FFFFFFFFFFFFFFF)) != 0;
    case TBM_FP32:
        break;
    }
    memcpy(&s, p, sizeof s);
    return (s & 0x7FFFFFFF) != 0;
}

void tbm_mask_count_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    const uint8_t *w = weights;
    size_t size = tbm_precision_size(prec);
    uint32_t word_bytes = tbm_mask_word_bytes(m);

    for (uint64_t start = 0; start < count; start += m, mask += word_bytes) {
        uint32_t len = count - start < m ? (uint32_t)(count - start) : m;
        uint32_t word = 0;
        uint32_t kept;

        /* Little-endian word of the group, only the bits of its elements. */
        for (uint32_t b = 0; b < word_bytes; b++)
            word |= (uint32_t)mask[b] << (8 * b);
        word &= tbm_mask_valid_bits(len);
        kept = (uint32_t)__builtin_popcount(word);
        acc->kept += kept;
        acc->groups_over_n += kept > n;
        for (uint32_t j = 0; j < len; j++)
            acc->mask_conflicts += !(word >> j & 1) && stored_nonzero(prec, w + (start + j) * size);
    }
}

void tbm_mask_count(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t n, uint32_t m, uint64_t count,
                    struct tbm_mask_stats *acc)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_mask_count_avx512(prec, weights, mask, n, m, count, acc);
        return;
    case TBM_ISA_AVX2:
        tbm_mask_count_avx2(prec, weights, mask, n, m, count, acc);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_mask_count_scalar(prec, weights, mask, n, m, count, acc);
}
