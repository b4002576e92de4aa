/* Validation of one .tb blob: its 4096-byte header, the byte ranges of its
 * weights and mask, and whether the mask can be applied. */
#include "internal.h"

static void decode_header(const unsigned char *p, struct tbm_blob_header *h)
{
    h->magic = tbm_le32(p);
    h->version = tbm_le32(p + 4);
    h->nm_n = tbm_le32(p + 8);
    h->nm_m = tbm_le32(p + 12);
    h->num_weights = tbm_le64(p + 16);
    h->num_mask_bytes = tbm_le64(p + 24);
    h->weights_offset = tbm_le64(p + 32);
    h->masks_offset = tbm_le64(p + 40);
    h->precision = p[48];
}

/* The header's fields end at byte 49; the rest of its 4096 bytes is reserved
 * padding that nothing reads, so only the fields are fetched. */
#define HEADER_FIELDS 49

int tbm_blob_read_header(struct tbm_tensor *t, struct tbm_reader *rd)
{
    unsigned char buf[HEADER_FIELDS];
    int r = tbm_reader_read(rd, t->src, buf, sizeof(buf), t->offset);

    if (r == TBM_ERR_NOMEM)
        return r;
    if (r < 0)
        return 0;
    decode_header(buf, &t->hdr);
    t->header_read = true;
    return 1;
}

static int read_header(struct tbm_tensor *t, uint64_t data_end, struct tbm_reader *rd)
{
    if (t->offset > data_end || data_end - t->offset < TBM_HEADER_SIZE)
        return tbm_strlist_addf(&t->problems,
                                "header at offset %llu runs past the end of the blob data "
                                "(%llu bytes)",
                                (unsigned long long)t->offset, (unsigned long long)data_end);
    int r = tbm_blob_read_header(t, rd);
    if (r < 0)
        return r;
    if (r == 0)
        return tbm_strlist_addf(&t->problems, "header at offset %llu cannot be read",
                                (unsigned long long)t->offset);
    return 0;
}

static int check_identity(struct tbm_tensor *t)
{
    const struct tbm_blob_header *h = &t->hdr;
    size_t before = t->problems.count;
    int r = 0;

    if (h->magic != TBM_MAGIC)
        r = tbm_strlist_addf(&t->problems, "bad magic 0x%08x (expected 0x%08x)", h->magic,
                             TBM_MAGIC);
    if (r == 0 && h->version != TBM_VERSION)
        r = tbm_strlist_addf(&t->problems, "unsupported version %u (expected %u)", h->version,
                             TBM_VERSION);
    if (r == 0 && tbm_precision_size(h->precision) == 0)
        r = tbm_strlist_addf(&t->problems, "unknown precision code %u", h->precision);
    if (r < 0)
        return r;
    t->header_valid = h->magic == TBM_MAGIC && h->version == TBM_VERSION;
    t->header_sound = t->problems.count == before;
    return 0;
}

/* Places a region of len bytes at rel past the blob start; 0 with region->ok
 * set when it lies after the header and inside the data, else records why. */
static int place_region(struct tbm_tensor *t, const char *what, uint64_t rel, uint64_t len,
                        uint64_t data_end, struct tbm_region *region)
{
    uint64_t start, end;

    region->ok = false;
    if (__builtin_add_overflow(t->offset, rel, &start) || __builtin_add_overflow(start, len, &end))
        return tbm_strlist_addf(&t->problems, "%s region at offset %llu + %llu bytes overflows",
                                what, (unsigned long long)rel, (unsigned long long)len);
    region->off = start;
    region->len = len;
    if (len == 0) {
        region->ok = true;
        return 0;
    }
    if (rel < TBM_HEADER_SIZE)
        return tbm_strlist_addf(&t->problems, "%s region at offset %llu overlaps the header", what,
                                (unsigned long long)rel);
    if (end > data_end)
        return tbm_strlist_addf(&t->problems,
                                "%s region [%llu, %llu) runs past the end of the blob data "
                                "(%llu bytes)",
                                what, (unsigned long long)start, (unsigned long long)end,
                                (unsigned long long)data_end);
    region->ok = true;
    return 0;
}

static int place_regions(struct tbm_tensor *t, uint64_t data_end)
{
    const struct tbm_blob_header *h = &t->hdr;
    uint64_t wbytes;
    int r;

    /* Each region is judged on its own: an overflowing weights size says
     * nothing against a mask that lies well inside the file. */
    if (__builtin_mul_overflow(h->num_weights, tbm_precision_size(h->precision), &wbytes))
        r = tbm_strlist_addf(&t->problems, "num_weights %llu x %zu bytes overflows",
                             (unsigned long long)h->num_weights, tbm_precision_size(h->precision));
    else
        r = place_region(t, "weights", h->weights_offset, wbytes, data_end, &t->weights);
    if (r < 0 ||
        (r = place_region(t, "mask", h->masks_offset, h->num_mask_bytes, data_end, &t->mask)) < 0)
        return r;

    bool disjoint = t->weights.len == 0 || t->mask.len == 0 ||
                    t->weights.off + t->weights.len <= t->mask.off ||
                    t->mask.off + t->mask.len <= t->weights.off;
    if (t->weights.ok && t->mask.ok && !disjoint) {
        t->mask.ok = false;
        return tbm_strlist_addf(&t->problems, "mask region overlaps the weights region");
    }
    return 0;
}

/* The blob runs from its header to the end of its last non-empty region. */
static void place_raw(struct tbm_tensor *t)
{
    uint64_t end = t->offset + TBM_HEADER_SIZE;

    if (t->weights.len && t->weights.off + t->weights.len > end)
        end = t->weights.off + t->weights.len;
    if (t->mask.len && t->mask.off + t->mask.len > end)
        end = t->mask.off + t->mask.len;
    t->raw.off = t->offset;
    t->raw.len = end - t->offset;
    t->raw.ok = t->weights.ok && t->mask.ok;
}

/* The first stored layout whose length num_mask_bytes is, per the contract's
 * order: its own words, the tools' byte per group (9 <= M <= 32), then
 * either one group short of a partial last group. */
static bool pick_mask_layout(struct tbm_tensor *t, uint64_t groups, uint64_t full)
{
    const struct tbm_blob_header *h = &t->hdr;
    uint32_t wb = tbm_mask_word_bytes(h->nm_m);
    bool bytes = h->nm_m >= 9;
    struct {
        enum tbm_mask_layout layout;
        uint64_t groups;
        bool allowed;
    } tries[] = {
        {TBM_MASK_WORDS, groups, true},
        {TBM_MASK_BYTES, groups, bytes},
        {TBM_MASK_WORDS, full, full < groups},
        {TBM_MASK_BYTES, full, bytes && full < groups},
    };

    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        uint64_t per = tries[i].layout == TBM_MASK_BYTES ? 1 : wb, len;
        if (tries[i].allowed && !__builtin_mul_overflow(tries[i].groups, per, &len) &&
            h->num_mask_bytes == len) {
            t->mask_layout = tries[i].layout;
            t->mask_groups = tries[i].groups;
            return true;
        }
    }
    return false;
}

static int warn_mask_layout(struct tbm_tensor *t, uint64_t groups)
{
    const struct tbm_blob_header *h = &t->hdr;
    int r = 0;

    if (t->mask_layout == TBM_MASK_BYTES)
        r = tbm_strlist_addf(&t->warnings,
                             "mask has one byte per group of %u (as the Tensorbit tools write "
                             "it), not the format's %u-byte words: read with positions 8..%u of "
                             "every group pruned",
                             h->nm_m, tbm_mask_word_bytes(h->nm_m), h->nm_m - 1);
    if (r == 0 && t->mask_groups < groups)
        r = tbm_strlist_addf(&t->warnings,
                             "mask holds %llu groups for %llu weights, one short (as the "
                             "Tensorbit tools count, rounding down): the partial last group is "
                             "read as pruned",
                             (unsigned long long)t->mask_groups,
                             (unsigned long long)h->num_weights);
    return r;
}

static int check_mask_rule(struct tbm_tensor *t)
{
    const struct tbm_blob_header *h = &t->hdr;

    if (h->nm_m == 0) {
        if (h->num_mask_bytes != 0)
            return tbm_strlist_addf(&t->warnings,
                                    "nm_m is 0 (dense) but the header has %llu mask bytes",
                                    (unsigned long long)h->num_mask_bytes);
        return 0;
    }
    if (h->nm_m > 32)
        return tbm_strlist_addf(&t->problems, "mask unusable: nm_m %u exceeds 32", h->nm_m);
    if (h->nm_n > h->nm_m)
        return tbm_strlist_addf(&t->problems, "mask unusable: nm_n %u exceeds nm_m %u", h->nm_n,
                                h->nm_m);
    uint64_t full = h->num_weights / h->nm_m;
    uint64_t groups = full + (h->num_weights % h->nm_m != 0);
    if (!pick_mask_layout(t, groups, full))
        return tbm_strlist_addf(&t->problems,
                                "mask unusable: num_mask_bytes is %llu, expected %llu for %llu "
                                "groups of %u",
                                (unsigned long long)h->num_mask_bytes,
                                (unsigned long long)(groups * tbm_mask_word_bytes(h->nm_m)),
                                (unsigned long long)groups, h->nm_m);
    t->mask_usable = true;
    return warn_mask_layout(t, groups);
}

int tbm_blob_validate(struct tbm_tensor *t, uint64_t data_end, struct tbm_reader *rd)
{
    int r;

    if ((r = read_header(t, data_end, rd)) < 0 || !t->header_read)
        return r;
    if ((r = check_identity(t)) < 0 || !t->header_sound)
        return r;
    if ((r = place_regions(t, data_end)) < 0)
        return r;
    place_raw(t);
    return check_mask_rule(t);
}
