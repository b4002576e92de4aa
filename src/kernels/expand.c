/* Dense expansion: the dispatcher and the portable reference, which defines
 * the output bit for bit (the SIMD paths are tested against it). */
#include <string.h>

#include "internal.h"

/* float32 bits of the stored element at p. Stored values are little-endian
 * like the host (x86-64). */
static uint32_t element_bits(enum tbm_precision prec, const uint8_t *p)
{
    uint16_t h;
    uint32_t bits;
    double d;
    float f;

    switch (prec) {
    case TBM_FP16:
        memcpy(&h, p, sizeof h);
        return tbm_f16_bits(h);
    case TBM_BF16:
        memcpy(&h, p, sizeof h);
        return tbm_bf16_bits(h);
    case TBM_FP64:
        /* On x86-64 this cast is cvtsd2ss, the scalar form of cvtpd2ps:
         * MXCSR rounding (nearest even by default), subnormal results kept,
         * an sNaN quieted, the payload's top 23 bits kept. */
        memcpy(&d, p, sizeof d);
        f = (float)d;
        memcpy(&bits, &f, sizeof bits);
        return bits;
    case TBM_FP32:
        break;
    }
    memcpy(&bits, p, sizeof bits);
    return bits;
}

void tbm_expand_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out)
{
    const uint8_t *w = weights;
    size_t size = tbm_precision_size(prec);
    uint32_t word_bytes = mask ? tbm_mask_word_bytes(m) : 0;
    uint32_t j = mask ? (uint32_t)(first % m) : 0; /* position in the current group */

    for (size_t k = 0; k < count; k++) {
        /* all ones when kept: no branch on a bit that a pruned mask makes
         * unpredictable */
        uint32_t keep = mask ? -(uint32_t)(mask[j / 8] >> (j % 8) & 1) : UINT32_MAX;
        uint32_t bits = element_bits(prec, w + k * size) & keep;

        memcpy(out + k, &bits, sizeof bits);
        if (mask && ++j == m) {
            j = 0;
            mask += word_bytes;
        }
    }
}

void tbm_expand(enum tbm_isa isa, enum tbm_precision prec, const void *weights, const uint8_t *mask,
                uint32_t m, uint64_t first, size_t count, float *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_expand_avx512(prec, weights, mask, m, first, count, out);
        return;
    case TBM_ISA_AVX2:
        tbm_expand_avx2(prec, weights, mask, m, first, count, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_expand_scalar(prec, weights, mask, m, first, count, out);
}
