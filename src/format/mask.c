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

int tbm_mask_read(const struct tbm_tensor *t, uint64_t g0, uint64_t n, uint8_t *buf,
                  struct tbm_request *req)
{
    uint64_t off;
    size_t len;

    tbm_mask_stored(t, g0, n, &off, &len);
    int r = tbm_source_read_full(t->src, buf, len, off, req);
    if (r < 0)
        return r;
    tbm_mask_widen(t, n, buf, len);
    return 0;
}

int tbm_chunk_read(const struct tbm_tensor *t, uint64_t first, uint64_t n, void *weights,
                   uint8_t *mask, struct tbm_request *req)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    uint32_t m = t->hdr.nm_m;
    int r = tbm_source_read_full(t->src, weights, n * es, t->weights.off + first * es, req);

    if (r < 0 || !mask || n == 0)
        return r;
    return tbm_mask_read(t, first / m, (first + n - 1) / m - first / m + 1, mask, req);
}

static uint32_t load_word(const uint8_t *p, uint32_t wb)
{
    uint32_t word = p[0];

    for (uint32_t k = 1; k < wb; k++)
        word |= (uint32_t)p[k] << (8 * k);
    return word;
}

/* Zeroes, when element i is pruned, the bytes of it that buf (weight bytes
 * [b0, b1)) holds, mask holding the words from group g0 on: for the elements
 * cut by either end of a step. Returns whether that changed a byte. */
static bool clear_cut(const struct tbm_tensor *t, const uint8_t *mask, uint64_t g0, char *buf,
                      uint64_t b0, uint64_t b1, uint64_t i)
{
    uint32_t m = t->hdr.nm_m, wb = tbm_mask_word_bytes(m);
    size_t es = tbm_precision_size(t->hdr.precision);
    uint64_t s = i * es, e = s + es;
    bool changed = false;

    if (load_word(mask + (i / m - g0) * wb, wb) >> (i % m) & 1)
        return false;
    s = s < b0 ? b0 : s;
    e = e > b1 ? b1 : e;
    for (char *p = buf + (s - b0); p < buf + (e - b0); p++) {
        changed |= *p != 0;
        *p = 0;
    }
    return changed;
}

/* Zeroes the pruned elements among weight bytes [b0, b1) of t, which buf
 * holds, mask holding the words from group g0 on: whole elements by the
 * kernel, the first and last (which the step's ends may cut) here. Returns
 * whether a byte changed. */
static bool mask_step(enum tbm_isa isa, const struct tbm_tensor *t, const uint8_t *mask,
                      uint64_t g0, char *buf, uint64_t b0, uint64_t b1)
{
    uint32_t m = t->hdr.nm_m, wb = tbm_mask_word_bytes(m);
    size_t es = tbm_precision_size(t->hdr.precision);
    uint64_t first = b0 / es, end = (b1 + es - 1) / es;
    bool changed = false;

    uint64_t lo = first + (first * es < b0), hi = end - (end * es > b1 && end - 1 >= lo);
    if (lo > first)
        changed |= clear_cut(t, mask, g0, buf, b0, b1, first);
    if (hi < end)
        changed |= clear_cut(t, mask, g0, buf, b0, b1, end - 1);
    if (lo < hi)
        changed |= tbm_mask_apply(isa, t->hdr.precision, buf + (lo * es - b0),
                                  mask + (lo / m - g0) * wb, m, lo, (size_t)(hi - lo));
    return changed;
}

int tbm_masked_read(enum tbm_isa isa, const struct tbm_tensor *t, uint64_t b0, size_t len,
                    char *buf, uint8_t *mask, const struct tbm_masked_steps *steps,
                    struct tbm_request *req)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    uint32_t m = t->hdr.nm_m;
    int r = tbm_source_read_full(t->src, buf, len, t->weights.off + b0, req);

    if (r < 0 || m == 0 || !t->mask_usable)
        return r;
    for (uint64_t w0 = b0, w1; w0 < b0 + len; w0 = w1) {
        w1 = b0 + len - w0 < TBM_MASKED_WINDOW ? b0 + len : w0 + TBM_MASKED_WINDOW;
        uint64_t g0 = w0 / es / m, g1 = ((w1 + es - 1) / es - 1) / m;
        if ((r = tbm_mask_read(t, g0, g1 - g0 + 1, mask, req)) < 0)
            return r;
        for (uint64_t b = w0, e; b < w1; b = e) {
            uint64_t at = steps ? steps->pos + (b - b0) : 0;
            e = steps ? b + (steps->grain - at % steps->grain) : w1;
            e = e < w1 ? e : w1;
            bool changed = mask_step(isa, t, mask, g0, buf + (b - b0), b, e);
            if (steps)
                steps->note(steps->ctx, at, changed);
        }
    }
    return 0;
}
