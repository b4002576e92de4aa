/* Blobs that the Tensorbit merge script misplaced: it computes every offset
 * as if the blobs before were fp32, so after the first blob that is not,
 * each blob sits right after its predecessor instead of where the index
 * says. The contract's condition, exactly: no valid header at the index's
 * offset, and at the end of the previous tensor's blob (in index order, as
 * found) a valid header whose num_weights, nm_n and nm_m are the entry's. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Where t's blob ends, from its header's fields; false when they overflow. */
static bool blob_end(const struct tbm_tensor *t, uint64_t *end)
{
    const struct tbm_blob_header *h = &t->hdr;
    uint64_t wbytes, wend, mend;

    if (__builtin_mul_overflow(h->num_weights, tbm_precision_size(h->precision), &wbytes) ||
        __builtin_add_overflow(h->weights_offset, wbytes, &wend) ||
        __builtin_add_overflow(h->masks_offset, h->num_mask_bytes, &mend))
        return false;
    uint64_t len = TBM_HEADER_SIZE;
    if (wbytes && wend > len)
        len = wend;
    if (h->num_mask_bytes && mend > len)
        len = mend;
    return !__builtin_add_overflow(t->offset, len, end);
}

/* Whether the header at off (whose fields are read) is valid and agrees
 * with the entry on num_weights, nm_n and nm_m. */
static int header_matches(struct tbm_tensor *t, struct json_object *entry, uint64_t off,
                          uint64_t data_end, struct tbm_reader *rd)
{
    struct tbm_tensor probe = {.src = t->src, .offset = off};
    uint64_t nw, n, m;

    if (off > data_end || data_end - off < TBM_HEADER_SIZE)
        return 0;
    int r = tbm_blob_read_header(&probe, rd);
    if (r < 0)
        return r;
    const struct tbm_blob_header *h = &probe.hdr;
    return r > 0 && h->magic == TBM_MAGIC && h->version == TBM_VERSION &&
           tbm_json_get_u64(entry, "num_weights", &nw) > 0 && nw == h->num_weights &&
           tbm_json_get_u64(entry, "nm_n", &n) > 0 && n == h->nm_n &&
           tbm_json_get_u64(entry, "nm_m", &m) > 0 && m == h->nm_m;
}

/* Forgets what validating t at its index offset found, keeping what its
 * entry alone said. */
static void reset_blob(struct tbm_tensor *t)
{
    tbm_strlist_truncate(&t->problems, t->entry_problems);
    tbm_strlist_truncate(&t->warnings, t->entry_warnings);
    t->header_read = t->header_valid = t->header_sound = false;
    memset(&t->hdr, 0, sizeof(t->hdr));
    t->raw = t->weights = t->mask = (struct tbm_region){0};
    t->mask_usable = false;
    t->mask_layout = TBM_MASK_WORDS;
    t->mask_groups = 0;
    t->shape_matches = false;
}

static int relocate(struct tbm_opener *o, struct tbm_tensor *t, uint64_t found,
                    struct json_object *entry, struct tbm_reader *rd)
{
    uint64_t stored = t->offset;
    int r;

    reset_blob(t);
    t->offset = found;
    if ((r = tbm_tensor_validate(t, entry, o->data_end, rd)) < 0)
        return r;
    return tbm_strlist_addf(&t->warnings,
                            "blob found at offset %llu, where the previous tensor's blob ends, "
                            "not at the index's offset %llu (the Tensorbit merge script places "
                            "blobs as if all before were fp32)",
                            (unsigned long long)found, (unsigned long long)stored);
}

int tbm_misplaced_find(struct tbm_opener *o)
{
    struct tbm_model *m = o->m;
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t i = 1; i < m->ntensors && r >= 0; i++) {
        struct tbm_tensor *t = &m->tensors[i], *prev = &m->tensors[i - 1];
        uint64_t end;
        /* located (a valid offset, not quantized) but no valid header there */
        if (!t->src || t->header_valid || !prev->header_valid || !blob_end(prev, &end) ||
            end == t->offset)
            continue;
        const char *why;
        struct json_object *entry = tbm_json_parse_strict(t->entry_json, t->entry_json_len, &why);
        if (!entry) {
            r = TBM_ERR_NOMEM;
            break;
        }
        r = header_matches(t, entry, end, o->data_end, &rd);
        if (r > 0)
            r = relocate(o, t, end, entry, &rd);
        json_object_put(entry);
    }
    tbm_reader_free(&rd);
    return r < 0 ? r : 0;
}
