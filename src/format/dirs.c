/* The name table: each tensor's directory name under tensors/ (encoded,
 * unique in the model) and the lookup from a name back to its tensor. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/names.h"

/* Open-addressed string set keyed by directory name; slots hold index + 1
 * into keys, so the table owns no strings. */
struct dirset {
    size_t *slots;
    size_t size; /* power of two, at least twice the entries */
    char *const *keys;
};

static size_t dirset_probe(const struct dirset *d, const char *key, size_t len)
{
    size_t mask = d->size - 1;
    size_t i = (size_t)tbm_fnv1a64(key, len) & mask;

    while (d->slots[i]) {
        const char *k = d->keys[d->slots[i] - 1];
        if (strlen(k) == len && memcmp(k, key, len) == 0)
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

static bool dirset_has(const struct dirset *d, const char *key, size_t len)
{
    return d->slots[dirset_probe(d, key, len)] != 0;
}

static size_t table_size(size_t n)
{
    size_t size = 16;
    while (size < 2 * n + 1)
        size *= 2;
    return size;
}

/* Per encoded base name, the next duplicate suffix to try, so that many
 * tensors with one name do not rescan every earlier suffix. */
struct dupcount {
    char **bases;
    size_t *next;
    struct dirset set;
};

static unsigned long next_suffix(struct dupcount *dc, size_t *nbases, const char *enc, size_t len)
{
    size_t slot = dirset_probe(&dc->set, enc, len);

    if (!dc->set.slots[slot]) {
        dc->bases[*nbases] = strndup(enc, len);
        if (!dc->bases[*nbases])
            return 0;
        dc->next[*nbases] = 2;
        dc->set.slots[slot] = ++*nbases;
    }
    return dc->next[dc->set.slots[slot] - 1]++;
}

/* The lookup from directory names to tensors: slots hold tensor index + 1. */
struct tbm_dir_table {
    size_t *slots;
    size_t size;
};

int tbm_dirs_assign(struct tbm_model *m)
{
    struct dupcount dc = {0};
    size_t nbases = 0;
    char enc[TBM_NAME_MAX + 1], cand[TBM_NAME_MAX + 1];
    int r = TBM_ERR_NOMEM;

    m->dirs = calloc(1, sizeof(*m->dirs));
    if (!m->dirs)
        return TBM_ERR_NOMEM;
    m->dirs->size = table_size(m->ntensors);
    m->dirs->slots = calloc(m->dirs->size, sizeof(size_t));
    dc.bases = calloc(m->ntensors ? m->ntensors : 1, sizeof(char *));
    dc.next = calloc(m->ntensors ? m->ntensors : 1, sizeof(size_t));
    dc.set.size = m->dirs->size;
    dc.set.slots = calloc(dc.set.size, sizeof(size_t));
    dc.set.keys = dc.bases;
    if (!m->dirs->slots || !dc.bases || !dc.next || !dc.set.slots)
        goto out;

    char **dirs = malloc((m->ntensors ? m->ntensors : 1) * sizeof(char *));
    if (!dirs)
        goto out;
    struct dirset taken = {m->dirs->slots, m->dirs->size, dirs};
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        size_t len = tbm_name_encode(t->name, t->name_len, enc);
        const char *pick = enc;
        while (dirset_has(&taken, pick, len)) {
            unsigned long k = next_suffix(&dc, &nbases, enc, strlen(enc));
            if (k == 0) {
                free(dirs);
                goto out;
            }
            len = tbm_name_dedup(enc, strlen(enc), k, cand);
            pick = cand;
        }
        t->dir = strndup(pick, len);
        if (!t->dir) {
            free(dirs);
            goto out;
        }
        dirs[i] = t->dir;
        m->dirs->slots[dirset_probe(&taken, pick, len)] = i + 1;
    }
    free(dirs);
    r = 0;
out:
    for (size_t i = 0; i < nbases; i++)
        free(dc.bases[i]);
    free(dc.bases);
    free(dc.next);
    free(dc.set.slots);
    return r;
}

long tbm_model_find_dir(const struct tbm_model *m, const char *dir, size_t len)
{
    const size_t *slots = m->dirs->slots;
    size_t mask = m->dirs->size - 1;
    size_t i = (size_t)tbm_fnv1a64(dir, len) & mask;

    while (slots[i]) {
        const struct tbm_tensor *t = &m->tensors[slots[i] - 1];
        if (strlen(t->dir) == len && memcmp(t->dir, dir, len) == 0)
            return (long)(slots[i] - 1);
        i = (i + 1) & mask;
    }
    return -1;
}

void tbm_dirs_free(struct tbm_model *m)
{
    if (!m->dirs)
        return;
    free(m->dirs->slots);
    free(m->dirs);
    m->dirs = NULL;
}

static int by_name(const void *a, const void *b, void *arg)
{
    const struct tbm_tensor *ts = arg, *x = &ts[*(const size_t *)a], *y = &ts[*(const size_t *)b];
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);

    if (c != 0)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    /* equal names keep index order, so that messages list them in it */
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Names the others of a run of equal names to member k: a few, then a
 * count, so that a thousand tensors of one name do not make a megabyte of
 * warnings each. */
#define DUPLICATES_NAMED 3

static int warn_run(struct tbm_model *m, const size_t *run, size_t len, size_t k)
{
    char list[3 * (TBM_NAME_MAX + 16) + 64];
    size_t used = 0, named = 0;

    list[0] = '\0';
    for (size_t j = 0; j < len && named < DUPLICATES_NAMED; j++) {
        if (j == k)
            continue;
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", named ? ", " : "",
                                 m->tensors[run[j]].dir);
        named++;
    }
    if (len - 1 > named)
        snprintf(list + used, sizeof(list) - used, " and %zu more", len - 1 - named);
    return tbm_strlist_addf(&m->tensors[run[k]].warnings,
                            "%zu other tensor%s %s the same name: %s; %s directory names tell "
                            "them apart",
                            len - 1, len == 2 ? "" : "s", len == 2 ? "has" : "have", list,
                            len == 2 ? "the" : "their");
}

int tbm_dirs_warn_duplicates(struct tbm_model *m)
{
    size_t *order = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*order));
    int r = 0;

    if (!order)
        return TBM_ERR_NOMEM;
    for (size_t i = 0; i < m->ntensors; i++)
        order[i] = i;
    qsort_r(order, m->ntensors, sizeof(*order), by_name, m->tensors);
    for (size_t i = 0, end; i < m->ntensors && r == 0; i = end) {
        const struct tbm_tensor *t = &m->tensors[order[i]];
        for (end = i + 1; end < m->ntensors; end++) {
            const struct tbm_tensor *u = &m->tensors[order[end]];
            if (u->name_len != t->name_len || memcmp(u->name, t->name, t->name_len) != 0)
                break;
        }
        for (size_t k = 0; end - i > 1 && k < end - i && r == 0; k++)
            r = warn_run(m, order + i, end - i, k);
    }
    free(order);
    return r;
}
