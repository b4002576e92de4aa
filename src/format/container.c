/* A .tbm container: the blobs, then the JSON index, then the index's length
 * as 4 little-endian bytes at the very end. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_index(struct tbm_opener *o)
{
    unsigned char tail[4];
    uint64_t size = o->m->src->id.size;

    if (size < 4)
        return tbm_open_fail(o, TBM_ERR_SOURCE,
                             "not a .tbm container: %llu bytes, too small for the index length",
                             (unsigned long long)size);
    if (tbm_source_read_full(o->m->src, tail, 4, size - 4, NULL) < 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "cannot read the index length");
    uint64_t len = tbm_le32(tail);
    if (len == 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "not a .tbm container: index length is 0");
    if (len > size - 4)
        return tbm_open_fail(
            o, TBM_ERR_SOURCE,
            "not a .tbm container: index length %llu exceeds the %llu bytes before it",
            (unsigned long long)len, (unsigned long long)(size - 4));
    o->data_end = size - 4 - len;
    return tbm_index_read(o, o->m->src, o->data_end, len, "index");
}

int tbm_container_open(struct tbm_opener *o)
{
    return read_index(o);
}

/* Walking the blobs back to back from the start stops after this many: a
 * cut file is found long before, and a huge index is not walked twice. */
#define WALK_MAX 65536

/* Where the valid blob header at off ends its blob: header, weights and
 * mask; false when a size overflows. */
static bool blob_end(struct tbm_reader *rd, struct tbm_source *src, uint64_t off, uint64_t *end)
{
    struct tbm_tensor t = {.src = src, .offset = off};
    const struct tbm_blob_header *h = &t.hdr;
    uint64_t wbytes, wend, mend;

    if (tbm_blob_read_header(&t, rd) != 1 || h->magic != TBM_MAGIC || h->version != TBM_VERSION)
        return false;
    size_t esize = tbm_precision_size(h->precision);
    if (__builtin_mul_overflow(h->num_weights, esize ? esize : 4, &wbytes) ||
        __builtin_add_overflow(h->weights_offset, wbytes, &wend) ||
        __builtin_add_overflow(h->masks_offset, h->num_mask_bytes, &mend))
        return false;
    uint64_t rel = TBM_HEADER_SIZE;
    rel = wbytes && wend > rel ? wend : rel;
    rel = h->num_mask_bytes && mend > rel ? mend : rel;
    return !__builtin_add_overflow(off, rel, end);
}

/* The name made it a container, but its index is unusable. A file that
 * starts with a valid blob header is either a container cut short (a
 * download that stopped: its blobs, laid back to back, run past its end, or
 * it ends inside the index that follows them) or a bare blob misnamed, and
 * the error says which. */
void tbm_container_diagnose(struct tbm_opener *o)
{
    struct tbm_source *src = o->m->src;
    struct tbm_reader rd = TBM_READER_INIT;
    uint64_t size = src->id.size, off = 0, end = 0;
    unsigned char c, tail[4];
    size_t blobs = 0;
    char *why = NULL;

    while (blobs < WALK_MAX && off < size && blob_end(&rd, src, off, &end)) {
        blobs++;
        if (end > size)
            break;
        off = end;
    }
    tbm_reader_free(&rd);
    if (blobs == 0 || (blobs == 1 && end == size))
        goto bare;
    if (end > size) {
        if (asprintf(&why,
                     "incomplete file? it ends at byte %llu, but the blob at offset %llu "
                     "runs to byte %llu",
                     (unsigned long long)size, (unsigned long long)off,
                     (unsigned long long)end) < 0)
            why = NULL;
    } else if (off < size && tbm_source_read_full(src, &c, 1, off, NULL) == 0 && c == '{' &&
               tbm_source_read_full(src, tail, 4, size - 4, NULL) == 0 &&
               (size - off < 4 || tbm_le32(tail) != size - 4 - off)) {
        if (asprintf(&why,
                     "incomplete file? it ends at byte %llu, %llu bytes into the index "
                     "that starts at byte %llu after %zu blobs (the last 4 bytes, read as "
                     "the index length, say %u)",
                     (unsigned long long)size, (unsigned long long)(size - off),
                     (unsigned long long)off, blobs, (unsigned)tbm_le32(tail)) < 0)
            why = NULL;
    }
    if (why) {
        char *reason = strdup(o->err + strnlen(o->m->path, o->errlen));
        if (reason) {
            /* reason starts with ": " */
            snprintf(o->err, o->errlen, "%s: %s; the index is unusable%s", o->m->path, why, reason);
            free(reason);
        }
        free(why);
        return;
    }
bare:
    if (blobs == 0)
        return;
    size_t n = strlen(o->err);
    snprintf(o->err + n, o->errlen - n,
             "; but the file starts with a valid blob header: is it a bare blob (name it .tb)?");
}
