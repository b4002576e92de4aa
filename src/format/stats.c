/* Mask statistics of every tensor (kept, groups over N, mask conflicts),
 * read in chunks through the source, and the warnings they raise. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Elements counted per step: TBM_COUNT_CHUNK of the widest precision and
 * their mask words (at most one byte per element, for m = 1). */
#define COUNT_CHUNK (256u * 1024u)

struct count_buf {
    void *weights;
    uint8_t *mask;
};

static int count_buf_init(struct count_buf *buf)
{
    buf->weights = malloc(COUNT_CHUNK * 8);
    buf->mask = malloc(COUNT_CHUNK);
    return buf->weights && buf->mask ? 0 : TBM_ERR_NOMEM;
}

static void count_buf_free(struct count_buf *buf)
{
    free(buf->weights);
    free(buf->mask);
}

static int count_blob(struct tbm_tensor *t, enum tbm_isa isa, struct count_buf *buf,
                      struct tbm_reader *rd)
{
    const struct tbm_blob_header *h = &t->hdr;
    size_t es = tbm_precision_size(h->precision);
    uint32_t m = h->nm_m;
    uint64_t chunk = COUNT_CHUNK - COUNT_CHUNK % m;

    memset(&t->stats, 0, sizeof(t->stats));
    for (uint64_t i = 0; i < h->num_weights; i += chunk) {
        uint64_t n = h->num_weights - i < chunk ? h->num_weights - i : chunk;
        uint64_t groups = n / m + (n % m != 0);
        uint64_t moff;
        size_t mlen;
        tbm_mask_stored(t, i / m, groups, &moff, &mlen);
        int r = tbm_reader_read(rd, t->src, buf->weights, n * es, t->weights.off + i * es);
        if (r == 0)
            r = tbm_reader_read(rd, t->src, buf->mask, mlen, moff);
        if (r == 0)
            tbm_mask_widen(t, groups, buf->mask, mlen);
        if (r == TBM_ERR_NOMEM)
            return r;
        if (r < 0)
            return tbm_strlist_addf(&t->problems, "payload cannot be read for statistics");
        tbm_mask_count(isa, h->precision, buf->weights, buf->mask, h->nm_n, m, n, &t->stats);
    }
    t->stats_known = true;
    return 0;
}

static int warn_stats(struct tbm_tensor *t)
{
    int r = 0;

    if (!t->stats_known)
        return 0;
    if (t->stats.groups_over_n)
        r = tbm_strlist_addf(&t->warnings, "%llu groups keep more than nm_n = %u elements",
                             (unsigned long long)t->stats.groups_over_n, t->hdr.nm_n);
    if (r == 0 && t->stats.mask_conflicts)
        r = tbm_strlist_addf(&t->warnings, "%llu pruned elements have a non-zero stored weight",
                             (unsigned long long)t->stats.mask_conflicts);
    return r;
}

static int count_span(struct tbm_opener *o, size_t begin, size_t end)
{
    struct tbm_model *m = o->m;
    struct count_buf buf = {0};
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t i = begin; i < end && r == 0; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (!t->header_sound || !t->weights.ok)
            continue;
        if (t->hdr.nm_m == 0) {
            t->stats.kept = t->hdr.num_weights;
            t->stats_known = true;
        } else if (t->mask_usable && t->mask.ok) {
            if (!buf.weights && (r = count_buf_init(&buf)) < 0)
                break;
            r = count_blob(t, m->isa, &buf, &rd);
        }
        if (r == 0)
            r = warn_stats(t);
    }
    count_buf_free(&buf);
    tbm_reader_free(&rd);
    return r;
}

int tbm_stats_count(struct tbm_opener *o)
{
    return tbm_for_each_span(o, o->m->ntensors, count_span);
}
