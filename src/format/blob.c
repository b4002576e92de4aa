/* Validation of one .tb blob: its 4096-byte header, the byte ranges of its
 * weights and mask, whether the mask can be applied, and its statistics. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads up to len bytes at off; fewer only at the end of the file. Returns
 * the count, or TBM_ERR_IO. */
static ssize_t pread_upto(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;

    while (got < len) {
        if (off + got > (uint64_t)INT64_MAX)
            return TBM_ERR_IO;
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return TBM_ERR_IO;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int tbm_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    ssize_t n = pread_upto(fd, buf, len, off);
    return n >= 0 && (size_t)n == len ? 0 : TBM_ERR_IO;
}

int tbm_reader_read(struct tbm_reader *r, int fd, void *dst, size_t len, uint64_t off)
{
    if (fd == r->fd && off >= r->start && off - r->start <= r->len &&
        len <= r->len - (off - r->start)) {
        memcpy(dst, r->buf + (off - r->start), len);
        r->hit = true;
        return 0;
    }
    if (len > TBM_READER_WINDOW / 2)
        return tbm_pread_full(fd, dst, len, off);
    if (!r->buf && !(r->buf = malloc(TBM_READER_WINDOW)))
        return TBM_ERR_NOMEM;
    /* A window that served more than the read that filled it earns a larger
     * one; one that did not starts small again, so that the headers of large
     * tensors, far apart, cost small reads. */
    r->size = r->hit ? 2 * r->size : TBM_READER_FIRST;
    r->size = r->size > TBM_READER_WINDOW ? TBM_READER_WINDOW : r->size < len ? len : r->size;
    r->hit = false;
    ssize_t n = pread_upto(fd, r->buf, r->size, off);
    if (n < 0 || (size_t)n < len) {
        /* Only the bytes asked for decide whether the read fails: an error
         * further on belongs to whatever lies there. */
        r->fd = -1;
        return tbm_pread_full(fd, dst, len, off);
    }
    r->fd = fd;
    r->start = off;
    r->len = (size_t)n;
    memcpy(dst, r->buf, len);
    return 0;
}

void tbm_reader_free(struct tbm_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->fd = -1;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void decode_header(const unsigned char *p, struct tbm_blob_header *h)
{
    h->magic = le32(p);
    h->version = le32(p + 4);
    h->nm_n = le32(p + 8);
    h->nm_m = le32(p + 12);
    h->num_weights = le64(p + 16);
    h->num_mask_bytes = le64(p + 24);
    h->weights_offset = le64(p + 32);
    h->masks_offset = le64(p + 40);
    h->precision = p[48];
}

/* The header's fields end at byte 49; the rest of its 4096 bytes is reserved
 * padding that nothing reads, so only the fields are fetched. */
#define HEADER_FIELDS 49

static int read_header(struct tbm_tensor *t, uint64_t data_end, struct tbm_reader *rd)
{
    unsigned char buf[HEADER_FIELDS];

    if (t->offset > data_end || data_end - t->offset < TBM_HEADER_SIZE)
        return tbm_strlist_addf(&t->problems,
                                "header at offset %llu runs past the end of the blob data "
                                "(%llu bytes)",
                                (unsigned long long)t->offset, (unsigned long long)data_end);
    int r = tbm_reader_read(rd, t->fd, buf, sizeof(buf), t->offset);
    if (r == TBM_ERR_NOMEM)
        return r;
    if (r < 0)
        return tbm_strlist_addf(&t->problems, "header at offset %llu cannot be read",
                                (unsigned long long)t->offset);
    decode_header(buf, &t->hdr);
    t->header_read = true;
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
    uint64_t groups = h->num_weights / h->nm_m + (h->num_weights % h->nm_m != 0);
    uint64_t want = groups * tbm_mask_word_bytes(h->nm_m);
    if (h->num_mask_bytes != want)
        return tbm_strlist_addf(&t->problems,
                                "mask unusable: num_mask_bytes is %llu, expected %llu for %llu "
                                "groups of %u",
                                (unsigned long long)h->num_mask_bytes, (unsigned long long)want,
                                (unsigned long long)groups, h->nm_m);
    t->mask_usable = true;
    return 0;
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

int tbm_count_buf_init(struct tbm_count_buf *buf)
{
    buf->weights = malloc(TBM_COUNT_CHUNK * 8);
    buf->mask = malloc(TBM_COUNT_CHUNK);
    return buf->weights && buf->mask ? 0 : TBM_ERR_NOMEM;
}

void tbm_count_buf_free(struct tbm_count_buf *buf)
{
    free(buf->weights);
    free(buf->mask);
}

int tbm_blob_count(struct tbm_tensor *t, enum tbm_isa isa, struct tbm_count_buf *buf,
                   struct tbm_reader *rd)
{
    const struct tbm_blob_header *h = &t->hdr;
    size_t es = tbm_precision_size(h->precision);
    uint32_t m = h->nm_m, wb = tbm_mask_word_bytes(m);
    uint64_t chunk = TBM_COUNT_CHUNK - TBM_COUNT_CHUNK % m;

    memset(&t->stats, 0, sizeof(t->stats));
    for (uint64_t i = 0; i < h->num_weights; i += chunk) {
        uint64_t n = h->num_weights - i < chunk ? h->num_weights - i : chunk;
        uint64_t groups = n / m + (n % m != 0);
        int r = tbm_reader_read(rd, t->fd, buf->weights, n * es, t->weights.off + i * es);
        if (r == 0)
            r = tbm_reader_read(rd, t->fd, buf->mask, groups * wb, t->mask.off + i / m * wb);
        if (r == TBM_ERR_NOMEM)
            return r;
        if (r < 0)
            return tbm_strlist_addf(&t->problems, "payload cannot be read for statistics");
        tbm_mask_count(isa, h->precision, buf->weights, buf->mask, h->nm_n, m, n, &t->stats);
    }
    t->stats_known = true;
    return 0;
}
