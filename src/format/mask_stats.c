/* Mask statistics of each tensor (kept, groups over N, mask conflicts) and
 * the warnings they raise, computed the first time something needs them:
 * the mount reads the index and the headers only, so that it takes the same
 * time for a 100 MB and a 100 GB model. */
#include "internal.h"

#include "base/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements counted per step: COUNT_CHUNK of the widest precision and their
 * mask words (at most one byte per element, for m = 1). */
#define COUNT_CHUNK (256u * 1024u)

/* Locks that guard the first computation of a tensor's statistics, shared
 * out by tensor index: two readers of one tensor compute once, readers of
 * two tensors rarely wait for each other. */
#define LOCKS 64

struct slot {
    atomic_bool ready;
    struct tbm_tensor_stats stats;
};

struct tbm_stats_table {
    atomic_uint_fast64_t bytes_read; /* for tbm_model_stats_progress */
    pthread_mutex_t locks[LOCKS];
    struct slot *slots;
    size_t n;
};

static int compute(const struct tbm_model *m, const struct tbm_tensor *t, struct slot *s);

bool tbm_tensor_stats_reads(const struct tbm_tensor *t)
{
    return t->header_sound && t->weights.ok && t->hdr.nm_m && t->mask_usable && t->mask.ok;
}

int tbm_stats_table_init(struct tbm_model *m)
{
    struct tbm_stats_table *st = calloc(1, sizeof(*st));

    if (!st || !(st->slots = calloc(m->ntensors ? m->ntensors : 1, sizeof(*st->slots)))) {
        free(st);
        return TBM_ERR_NOMEM;
    }
    st->n = m->ntensors;
    for (size_t i = 0; i < LOCKS; i++)
        pthread_mutex_init(&st->locks[i], NULL);
    m->stats = st;
    /* Those that need no read are known from the headers: a file that shows
     * them never waits for them (nor for the lock another tensor's holds). */
    for (size_t i = 0; i < m->ntensors; i++) {
        if (tbm_tensor_stats_reads(&m->tensors[i]))
            continue;
        compute(m, &m->tensors[i], &st->slots[i]);
        atomic_store_explicit(&st->slots[i].ready, true, memory_order_release);
    }
    return 0;
}

void tbm_stats_table_free(struct tbm_model *m)
{
    struct tbm_stats_table *st = m->stats;

    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++) {
        tbm_strlist_free(&st->slots[i].stats.warnings);
    }
    for (size_t i = 0; i < LOCKS; i++)
        pthread_mutex_destroy(&st->locks[i]);
    free(st->slots);
    free(st);
    m->stats = NULL;
}

struct count_buf {
    void *weights;
    uint8_t *mask;
};

static int count_blob(const struct tbm_model *model, const struct tbm_tensor *t,
                      struct count_buf *buf, struct tbm_mask_stats *out)
{
    enum tbm_isa isa = model->isa;
    const struct tbm_blob_header *h = &t->hdr;
    size_t es = tbm_precision_size(h->precision);
    uint32_t m = h->nm_m;
    uint64_t chunk = COUNT_CHUNK - COUNT_CHUNK % m;

    memset(out, 0, sizeof(*out));
    for (uint64_t i = 0; i < h->num_weights; i += chunk) {
        uint64_t n = h->num_weights - i < chunk ? h->num_weights - i : chunk;
        uint64_t groups = n / m + (n % m != 0);
        int r = tbm_chunk_read(t, i, n, buf->weights, buf->mask, NULL);
        if (r < 0)
            return r;
        atomic_fetch_add(&model->stats->bytes_read, n * es + groups * tbm_mask_word_bytes(m));
        tbm_mask_count(isa, h->precision, buf->weights, buf->mask, h->nm_n, m, n, out);
    }
    return 0;
}

/* Fills s for tensor t: only a sound tensor with an applied mask is read. */
static int compute(const struct tbm_model *m, const struct tbm_tensor *t, struct slot *s)
{
    struct tbm_tensor_stats *st = &s->stats;
    struct count_buf buf = {0};
    int r = 0;

    if (!tbm_tensor_stats_reads(t)) {
        /* a dense tensor keeps every element; any other is unknown for good */
        if (t->header_sound && t->weights.ok && t->hdr.nm_m == 0) {
            st->counts.kept = t->hdr.num_weights;
            st->known = true;
        }
        return 0;
    }
    /* no bigger than the tensor: a model of many small tensors would otherwise take (and,
     * under MALLOC_PERTURB_, fill) 2 MiB per tensor */
    size_t cap = t->hdr.num_weights < COUNT_CHUNK ? (size_t)t->hdr.num_weights : COUNT_CHUNK;
    buf.weights = malloc(cap * 8 + 8);
    buf.mask = malloc(cap + 8);
    if (!buf.weights || !buf.mask) {
        r = TBM_ERR_NOMEM;
        goto out;
    }
    r = count_blob(m, t, &buf, &st->counts);
    if (r == TBM_ERR_IO || r == TBM_ERR_CHANGED) {
        /* everything else was fixed at mount; these stay null, and say why */
        r = tbm_strlist_addf(&st->warnings,
                             "statistics unknown: the source could not be read when they were "
                             "first needed (it changed or shrank since the mount)");
        goto out;
    }
    if (r < 0)
        goto out;
    st->known = true;
    if (st->counts.groups_over_n)
        r = tbm_strlist_addf(&st->warnings, "%llu groups keep more than nm_n = %u elements",
                             (unsigned long long)st->counts.groups_over_n, t->hdr.nm_n);
    if (r == 0 && st->counts.mask_conflicts)
        r = tbm_strlist_addf(&st->warnings, "%llu pruned elements have a non-zero stored weight",
                             (unsigned long long)st->counts.mask_conflicts);
out:
    free(buf.weights);
    free(buf.mask);
    return r;
}

bool tbm_tensor_stats_ready(const struct tbm_model *m, size_t t)
{
    return atomic_load_explicit(&m->stats->slots[t].ready, memory_order_acquire);
}

int tbm_tensor_stats_get(const struct tbm_model *m, size_t t, const struct tbm_tensor_stats **out)
{
    struct tbm_stats_table *st = m->stats;
    struct slot *s = &st->slots[t];

    *out = NULL;
    if (atomic_load_explicit(&s->ready, memory_order_acquire)) {
        *out = &s->stats;
        return 0;
    }
    pthread_mutex_t *lock = &st->locks[t % LOCKS];
    pthread_mutex_lock(lock);
    if (!atomic_load_explicit(&s->ready, memory_order_relaxed)) {
        int r = compute(m, &m->tensors[t], s);
        if (r < 0) {
            tbm_strlist_free(&s->stats.warnings);
            memset(s, 0, sizeof(*s));
            pthread_mutex_unlock(lock);
            return r;
        }
        atomic_store_explicit(&s->ready, true, memory_order_release);
    }
    pthread_mutex_unlock(lock);
    *out = &s->stats;
    return 0;
}

const struct tbm_tensor_stats *tbm_tensor_stats(const struct tbm_model *m, size_t t)
{
    const struct tbm_tensor_stats *st;

    return tbm_tensor_stats_get(m, t, &st) < 0 ? NULL : st;
}

double tbm_tensor_density(const struct tbm_tensor *t, const struct tbm_tensor_stats *st)
{
    uint64_t nw = t->hdr.num_weights;

    return nw ? (double)st->counts.kept / (double)nw : 0;
}

static int stats_span(void *ctx, size_t begin, size_t end)
{
    const struct tbm_model *m = ctx;
    const struct tbm_tensor_stats *st;

    for (size_t i = begin; i < end; i++) {
        int r = tbm_tensor_stats_get(m, i, &st);
        if (r < 0)
            return r;
    }
    return 0;
}

int tbm_model_compute_stats(const struct tbm_model *m)
{
    /* each span computes its own tensors' statistics, each under its lock */
    return tbm_for_each_span(m->ntensors, stats_span, (void *)m);
}

void tbm_model_stats_progress(const struct tbm_model *m, uint64_t *done, uint64_t *total)
{
    *total = 0;
    for (size_t i = 0; i < m->ntensors; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        if (tbm_tensor_stats_reads(t))
            *total += t->weights.len + t->mask.len;
    }
    *done = atomic_load(&m->stats->bytes_read);
}
