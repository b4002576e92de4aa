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

static int mark_overlap(const struct extent *e, const struct extent *other)
{
    struct tbm_tensor *t = e->t;

    t->raw.ok = t->weights.ok = t->mask.ok = false;
    return tbm_strlist_addf(&t->problems, "blob [%llu, %llu) overlaps tensor \"%s\"'s blob",
                            (unsigned long long)e->start, (unsigned long long)e->end,
                            other->t->dir);
}

/* In a container every blob must have bytes of its own: a sweep in offset
 * order finds each blob that starts before an earlier one has ended. Only
 * what would be served counts: a region already refused says nothing about
 * its neighbours. */
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
    const struct extent *reach = NULL; /* the earlier blob ending furthest */
    for (size_t i = 0; i < n && r == 0; i++) {
        if (reach && v[i].start < reach->end) {
            r = mark_overlap(&v[i], reach);
            if (r == 0)
                r = mark_overlap(reach, &v[i]);
        }
        if (!reach || v[i].end > reach->end)
            reach = &v[i];
    }
    free(v);
    return r;
}
