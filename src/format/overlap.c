/* The overlap sweep: in a container every blob must have bytes of its own. */
#include "internal.h"

#include <stdlib.h>

/* One byte range a blob's servable parts occupy: its header, or a region
 * that validation placed inside the data. */
struct span_of {
    uint64_t start, end;
    size_t blob;      /* index into the sound blobs */
    const char *what; /* "header", "weights", "mask" */
};

enum clash { NONE, HEADERS, INTO_HEADER, SHARED };

/* How a blob is broken, by the first clash found, for the message. */
struct judged {
    struct tbm_tensor *t;
    enum clash clash;
    const struct span_of *own; /* the blob's range that clashed */
    size_t other;              /* the blob met */
};

static int by_start(const void *a, const void *b)
{
    const struct span_of *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The furthest ends among spans passed so far, of REACH different blobs,
 * furthest first: enough to find a blob other than a few excluded ones
 * whose span reaches past a point. */
#define REACH 4
struct reach {
    uint64_t end[REACH];
    size_t blob[REACH];
    size_t n;
};

static void reach_add(struct reach *r, const struct span_of *s)
{
    size_t k = 0;

    while (k < r->n && r->blob[k] != s->blob)
        k++;
    if (k == r->n) {
        if (r->n < REACH)
            r->n++;
        else if (s->end <= r->end[REACH - 1])
            return;
        k = r->n - 1;
        r->end[k] = 0;
        r->blob[k] = s->blob;
    }
    if (s->end <= r->end[k])
        return;
    for (; k > 0 && r->end[k - 1] < s->end; k--) {
        r->end[k] = r->end[k - 1];
        r->blob[k] = r->blob[k - 1];
    }
    r->end[k] = s->end;
    r->blob[k] = s->blob;
}

/* Spans of one kind sorted by start, asked in turn, for spans x in the
 * order of their starts, about spans of other blobs that overlap x: those
 * that start before x and end past its start (the reach of those passed),
 * and those that start at or after x and before its end. */
struct sweep {
    const struct span_of *v;
    size_t n;
    size_t next; /* spans before next start before the last x asked */
    struct reach passed;
};

/* Calls fits(ctx, blob) for the blobs of spans overlapping x, other than
 * x's, up to REACH of either side; the first blob it accepts, or SIZE_MAX.
 * x's start is never below the previous x's. */
static size_t overlapping(struct sweep *s, const struct span_of *x,
                          bool (*fits)(const void *ctx, size_t blob), const void *ctx)
{
    while (s->next < s->n && s->v[s->next].start < x->start)
        reach_add(&s->passed, &s->v[s->next++]);
    for (size_t k = 0; k < s->passed.n && s->passed.end[k] > x->start; k++)
        if (s->passed.blob[k] != x->blob && fits(ctx, s->passed.blob[k]))
            return s->passed.blob[k];
    size_t tried = 0;
    for (size_t i = s->next; i < s->n && s->v[i].start < x->end && tried < REACH; i++) {
        if (s->v[i].blob == x->blob)
            continue;
        tried++;
        if (fits(ctx, s->v[i].blob))
            return s->v[i].blob;
    }
    return SIZE_MAX;
}

static bool any_blob(const void *ctx, size_t blob)
{
    (void)ctx;
    (void)blob;
    return true;
}

static bool region_meets(const struct tbm_region *r, uint64_t start, uint64_t end)
{
    return r->ok && r->len && r->off < end && start < r->off + r->len;
}

struct sharing {
    const struct judged *blobs;
    const struct tbm_tensor *t; /* the blob whose data is shared */
};

/* Whether blob's data shares bytes with t's without either reaching into
 * the other's header: t reaches into none (it is judged only then), so
 * only blob's reach into t's header is to be ruled out. */
static bool shares_only(const void *ctx, size_t blob)
{
    const struct sharing *s = ctx;
    const struct tbm_tensor *o = s->blobs[blob].t;
    uint64_t h = s->t->offset;

    return !region_meets(&o->weights, h, h + TBM_HEADER_SIZE) &&
           !region_meets(&o->mask, h, h + TBM_HEADER_SIZE);
}

/* Blobs usually lie in index order, their spans already sorted: a look
 * costs less than a sort. */
static void sort_spans(struct span_of *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (v[i].start < v[i - 1].start) {
            qsort(v, n, sizeof(*v), by_start);
            return;
        }
    }
}

static void add_span(struct span_of *v, size_t *n, const struct tbm_region *r, size_t blob,
                     const char *what)
{
    if (r->ok && r->len)
        v[(*n)++] = (struct span_of){r->off, r->off + r->len, blob, what};
}

static int mark(const struct judged *b, const struct judged *all)
{
    struct tbm_tensor *t = b->t, *o = all[b->other].t;
    unsigned long long off = t->offset, ooff = o->offset;
    unsigned long long start = b->own->start, end = b->own->end;

    t->raw.ok = t->weights.ok = t->mask.ok = false;
    switch (b->clash) {
    case HEADERS:
        return tbm_strlist_addf(&t->problems,
                                "blob at offset %llu and tensor %s's blob at offset %llu run "
                                "into each other's headers",
                                off, o->dir, ooff);
    case INTO_HEADER:
        return tbm_strlist_addf(&t->problems,
                                "blob at offset %llu: its %s [%llu, %llu) runs into the header "
                                "of tensor %s's blob at offset %llu",
                                off, b->own->what, start, end, o->dir, ooff);
    default:
        return tbm_strlist_addf(&t->problems,
                                "blob at offset %llu: its %s [%llu, %llu) shares bytes with the "
                                "weights or mask of tensor %s's blob at offset %llu",
                                off, b->own->what, start, end, o->dir, ooff);
    }
}

/* The three judgements in turn: headers that overlap (both broken), then
 * weights or masks that run into another's header (that blob broken, the
 * other not), then among the blobs neither judgement broke, weights or
 * masks that share bytes with another's (both broken, unless the other
 * reaches into this one's header: then only the other is). At most REACH
 * other blobs are asked on each side of a range; a range shared with more
 * blobs that all reach into this one's header (each of them broken) may
 * leave a further sharer unseen. */
static void judge(struct judged *blobs, struct span_of *hdr, size_t nh, struct span_of *data,
                  size_t nd)
{
    struct sweep hh = {hdr, nh, 0, {.n = 0}};
    for (size_t i = 0; i < nh; i++) {
        size_t other = overlapping(&hh, &hdr[i], any_blob, NULL);
        struct judged *b = &blobs[hdr[i].blob];
        if (other != SIZE_MAX)
            *b = (struct judged){b->t, HEADERS, &hdr[i], other};
    }
    struct sweep dh = {hdr, nh, 0, {.n = 0}};
    for (size_t i = 0; i < nd; i++) {
        struct judged *b = &blobs[data[i].blob];
        size_t other = overlapping(&dh, &data[i], any_blob, NULL);
        if (other != SIZE_MAX && b->clash == NONE)
            *b = (struct judged){b->t, INTO_HEADER, &data[i], other};
    }
    struct sweep dd = {data, nd, 0, {.n = 0}};
    for (size_t i = 0; i < nd; i++) {
        struct judged *b = &blobs[data[i].blob];
        struct sharing ctx = {blobs, b->t};
        size_t other = overlapping(&dd, &data[i], shares_only, &ctx);
        if (other != SIZE_MAX && b->clash == NONE)
            *b = (struct judged){b->t, SHARED, &data[i], other};
    }
}

/* In a container every blob must have bytes of its own, and the one that
 * overreaches is the broken one (contract v2, Bad input). Only what would
 * be served counts: a region already refused says nothing about its
 * neighbours. */
int tbm_overlaps_check(struct tbm_model *m)
{
    size_t nb = 0, nh = 0, nd = 0;
    for (size_t i = 0; i < m->ntensors; i++)
        nb += m->tensors[i].header_sound;
    struct judged *blobs = calloc(nb ? nb : 1, sizeof(*blobs));
    struct span_of *hdr = malloc((nb ? nb : 1) * sizeof(*hdr));
    struct span_of *data = malloc((nb ? 2 * nb : 1) * sizeof(*data));
    int r = TBM_ERR_NOMEM;

    if (!blobs || !hdr || !data)
        goto out;
    nb = 0;
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (!t->header_sound)
            continue;
        blobs[nb].t = t;
        hdr[nh++] = (struct span_of){t->offset, t->offset + TBM_HEADER_SIZE, nb, "header"};
        add_span(data, &nd, &t->weights, nb, "weights");
        add_span(data, &nd, &t->mask, nb, "mask");
        nb++;
    }
    sort_spans(hdr, nh);
    sort_spans(data, nd);
    judge(blobs, hdr, nh, data, nd);
    r = 0;
    for (size_t i = 0; i < nb && r == 0; i++)
        if (blobs[i].clash != NONE)
            r = mark(&blobs[i], blobs);
out:
    free(blobs);
    free(hdr);
    free(data);
    return r;
}
