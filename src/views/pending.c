/* Statistics on a mount that never waits for them (stats_nowait, a remote
 * source): what the files that show them are given while a tensor's are not
 * known, and the asks and steps by which they get computed apart, on the
 * caller's threads, never in the request that shows them. */
#include "internal.h"

#include <stdlib.h>

/* The one warning of statistics not known yet. At most 120 bytes, as
 * header.json's size allows for each warning of the statistics. */
static char pending_text[] = "statistics not known yet: they need a transfer from the server, "
                             "under way; read this file again later";
static char *pending_items[] = {pending_text};
static const struct tbm_tensor_stats pending = {
    .known = false,
    .warnings = {.items = pending_items, .count = 1},
};

_Static_assert(sizeof(pending_text) <= 121, "header.json has room for 120 bytes a warning");

int tbm_views_pending_init(struct tbm_views *v)
{
    size_t n = v->model->ntensors ? v->model->ntensors : 1;

    if (!v->opts.stats_nowait)
        return 0;
    v->asked = calloc(n, sizeof(*v->asked));
    return v->asked ? 0 : TBM_ERR_NOMEM;
}

void tbm_views_pending_free(struct tbm_views *v)
{
    free(v->asked);
}

int tbm_views_tensor_stats(const struct tbm_views *v, size_t t, const struct tbm_tensor_stats **out)
{
    if (!v->opts.stats_nowait || tbm_tensor_stats_ready(v->model, t))
        return tbm_tensor_stats_get(v->model, t, out);
    *out = &pending;
    return 1;
}

uint64_t tbm_views_stats_gen(const struct tbm_views *v, const struct tbm_row *row, size_t t)
{
    if (row->stats == TBM_ROW_STATS_TENSOR)
        return tbm_tensor_stats_ready(v->model, t);
    return atomic_load(&v->stats_done);
}

bool tbm_views_stats_nowait(const struct tbm_views *v)
{
    return v->opts.stats_nowait;
}

/* Whether some statistics that want names are not known. */
static bool unknown(const struct tbm_views *v, long want)
{
    if (want >= 0)
        return !tbm_tensor_stats_ready(v->model, (size_t)want);
    for (size_t t = 0; t < v->model->ntensors; t++)
        if (!tbm_tensor_stats_ready(v->model, t))
            return true;
    return false;
}

static atomic_bool *flag_of(const struct tbm_views *v, long want)
{
    return want >= 0 ? &v->asked[want] : &((struct tbm_views *)v)->asked_all;
}

bool tbm_views_stats_ask(const struct tbm_views *v, long want)
{
    if (!v->opts.stats_nowait || !unknown(v, want))
        return false;
    return !atomic_exchange(flag_of(v, want), true);
}

void tbm_views_stats_drop(const struct tbm_views *v, long want)
{
    atomic_store(flag_of(v, want), false);
}

int tbm_views_stats_step(const struct tbm_views *v, long want, size_t *t)
{
    const struct tbm_tensor_stats *st;
    size_t n = v->model->ntensors;
    int r;

    if (want >= 0) {
        *t = (size_t)want;
        r = tbm_tensor_stats_get(v->model, *t, &st);
        atomic_fetch_add(&((struct tbm_views *)v)->stats_done, r == 0);
        tbm_views_stats_drop(v, want);
        return r < 0 ? r : 0;
    }
    while (*t < n && tbm_tensor_stats_ready(v->model, *t))
        ++*t;
    if (*t == n) {
        tbm_views_stats_drop(v, want);
        return 0;
    }
    r = tbm_tensor_stats_get(v->model, *t, &st);
    if (r < 0) {
        tbm_views_stats_drop(v, want);
        return r;
    }
    atomic_fetch_add(&((struct tbm_views *)v)->stats_done, 1);
    ++*t;
    return 1;
}
