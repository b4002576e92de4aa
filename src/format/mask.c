/* Reading a tensor's mask in the contract's layout whatever its stored
 * layout (the Tensorbit tools write one byte per group for M > 8, and one
 * group short for a partial last group), alone or with its weights. */
#include "internal.h"

#include <string.h>

void tbm_mask_stored(const struct tbm_tensor *t, uint64_t g0, uint64_t n, uint64_t *off,
                     size_t *len)
{
    uint32_t per = t->mask_layout == TBM_MASK_BYTES ? 1 : tbm_mask_word_bytes(t->hdr.nm_m);
    uint64_t end = g0 + n < t->mask_groups ? g0 + n : t->mask_groups;

    *off = t->mask.off + g0 * per;
    *len = g0 < end ? (size_t)((end - g0) * per) : 0;
}

void tbm_mask_widen(const struct tbm_tensor *t, uint64_t n, uint8_t *buf, size_t len)
{
    uint32_t wb = tbm_mask_word_bytes(t->hdr.nm_m);
    size_t groups = len;

    if (t->mask_layout == TBM_MASK_WORDS) {
        memset(buf + len, 0, (size_t)n * wb - len);
        return;
    }
    /* Backwards, so that no stored byte is overwritten before it is moved:
     * group g's byte sits at g and goes to g * wb. Bits 8 and up are 0, so
     * positions 8..M-1 read as pruned. */
    memset(buf + groups * wb, 0, (size_t)(n - groups) * wb);
    for (size_t g = groups; g-- > 0;) {
        uint8_t b = buf[g];
        memset(buf + g * wb, 0, wb);
        buf[g * wb] = b;
    }
}

int tbm_mask_read(const struct tbm_tensor *t, uint64_t g0, uint64_t n, uint8_t *buf)
{
    uint64_t off;
    size_t len;

    tbm_mask_stored(t, g0, n, &off, &len);
    int r = tbm_source_read_full(t->src, buf, len, off);
    if (r < 0)
        return r;
    tbm_mask_widen(t, n, buf, len);
    return 0;
}

int tbm_chunk_read(const struct tbm_tensor *t, uint64_t first, uint64_t n, void *weights,
                   uint8_t *mask)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    uint32_t m = t->hdr.nm_m;
    int r = tbm_source_read_full(t->src, weights, n * es, t->weights.off + first * es);

    if (r < 0 || !mask || n == 0)
        return r;
    return tbm_mask_read(t, first / m, (first + n - 1) / m - first / m + 1, mask);
}
