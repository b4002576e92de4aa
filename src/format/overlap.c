/* The overlap sweep: in a container every blob must have bytes of its own. */
#include "internal.h"

#include <stdlib.h>

/* The bytes a blob's servable parts occupy: its header and each region that
 * validation placed inside the data. */
struct extent {
    struct tbm_tensor *t;
    uint64_t start, end;
};

static uint64_t region_end(const struct tbm_region *r, uint64_t end)
{
    return r->ok && r->len && r->off + r->len > end ? r->off + r->len : end;
}

static int by_start(const void *a, const void *b)
{
    const struct extent *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int mark_broken(const struct extent *e, const char *fmt, const struct extent *other)
{
    struct tbm_tensor *t = e->t;

    t->raw.ok = t->weights.ok = t->mask.ok = false;
    return tbm_strlist_addf(&t->problems, fmt, (unsigned long long)e->start,
                            (unsigned long long)e->end, other->t->dir,
                            (unsigned long long)other->start);
}

/* In a container every blob must have bytes of its own, and the one that
 * overreaches is the broken one. Blobs sorted by offset: a blob that ends
 * past the next one's start runs into its header (every blob starts with
 * its header), so it is broken and the next stays sound; when the two start
 * within a header's length of each other, each runs into the other's header
 * and both are broken. A blob that reaches past several later starts is
 * caught at the first, so only neighbours need comparing. Only what would be
 * served counts: a region already refused says nothing about its neighbours. */
int tbm_overlaps_check(struct tbm_model *m)
{
    struct extent *v = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*v));
    size_t n = 0;
    int r = 0;

    if (!v)
        return TBM_ERR_NOMEM;
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (!t->header_sound)
            continue;
        uint64_t end = region_end(&t->mask, region_end(&t->weights, t->offset + TBM_HEADER_SIZE));
        v[n++] = (struct extent){t, t->offset, end};
    }
    qsort(v, n, sizeof(*v), by_start);
    for (size_t i = 1; i < n && r == 0; i++) {
        const struct extent *prev = &v[i - 1], *cur = &v[i];
        if (prev->end <= cur->start)
            continue;
        if (cur->start - prev->start < TBM_HEADER_SIZE) {
            r = mark_broken(prev,
                            "blob [%llu, %llu) and tensor %s's blob at offset %llu run into "
                            "each other's headers",
                            cur);
            if (r == 0)
                r = mark_broken(cur,
                                "blob [%llu, %llu) and tensor %s's blob at offset %llu run "
                                "into each other's headers",
                                prev);
        } else {
            r = mark_broken(prev,
                            "blob [%llu, %llu) runs into the header of tensor %s's blob at "
                            "offset %llu",
                            cur);
        }
    }
    free(v);
    return r;
}
