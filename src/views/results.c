/* Rendered content shared by every open: a rendered row's file (the JSON
 * documents, the self-tests, the statistics, the pictures) is rendered once
 * per mount, when first opened, and every later open, and every open that
 * waited for that run, reads the same immutable bytes, held once however
 * many descriptors are open. A reader can thus neither make the daemon
 * compute a result twice nor multiply the memory it holds. (A rendering
 * that shows statistics not known yet is shared the same way until some
 * of them are known, and rendered again then.) */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct tbm_result {
    atomic_size_t refs;
    size_t len;
    char data[];
};

/* One cached result: its key, whether it is being rendered, and its place
 * in the eviction order of the results that may be rendered again. */
struct entry {
    const struct tbm_row *row;
    size_t t;
    bool running;
    struct tbm_result *result; /* NULL while running */
    /* showing statistics not known yet (stats_nowait): rendered again once
     * tbm_views_stats_gen differs from gen, as it was before the render */
    bool provisional;
    uint64_t gen;
    struct entry *next; /* hash chain */
    struct entry *older, *newer;
};

#define BUCKETS 4096

struct tbm_results {
    pthread_mutex_t lock;
    pthread_cond_t done;
    struct entry *buckets[BUCKETS];
    struct entry *oldest, *newest; /* evictable results, least recently opened first */
    size_t evictable_bytes;
    size_t budget;
};

/* Results that can be rendered again with the same bytes (statistics and
 * pictures, not the self-tests, whose timings would differ) are kept up to
 * this many bytes; past it the least recently opened that no open holds
 * go, and are rendered again when next opened. 100,000 tensors' stats.json
 * fit several times. TBMFS_RESULTS_BUDGET (bytes) sets another, for tests
 * that fill it with a small model. */
#define EVICTABLE_BUDGET (256u << 20)

static size_t budget(void)
{
    const char *env = getenv("TBMFS_RESULTS_BUDGET");
    char *end;
    unsigned long long n = env ? strtoull(env, &end, 10) : 0;

    return env && *env && !*end && n > 0 && n <= SIZE_MAX ? (size_t)n : EVICTABLE_BUDGET;
}

struct tbm_result *tbm_result_new(const char *data, size_t len)
{
    struct tbm_result *r = malloc(sizeof(*r) + (len ? len : 1));

    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    r->len = len;
    memcpy(r->data, data, len);
    return r;
}

const char *tbm_result_data(const struct tbm_result *r, size_t *len)
{
    *len = r->len;
    return r->data;
}

void tbm_result_put(struct tbm_result *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        free(r);
}

struct tbm_result *tbm_result_take(struct tbm_result *r)
{
    atomic_fetch_add(&r->refs, 1);
    return r;
}

int tbm_results_init(struct tbm_views *v)
{
    v->results = calloc(1, sizeof(*v->results));
    if (!v->results)
        return TBM_ERR_NOMEM;
    v->results->budget = budget();
    pthread_mutex_init(&v->results->lock, NULL);
    pthread_cond_init(&v->results->done, NULL);
    return 0;
}

void tbm_results_free(struct tbm_views *v)
{
    struct tbm_results *c = v->results;

    if (!c)
        return;
    for (size_t b = 0; b < BUCKETS; b++) {
        for (struct entry *e = c->buckets[b], *next; e; e = next) {
            next = e->next;
            tbm_result_put(e->result);
            free(e);
        }
    }
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static size_t bucket(const struct tbm_row *row, size_t t)
{
    return ((uintptr_t)row / sizeof(void *) * 31 + t * 0x9E3779B97F4A7C15ull) % BUCKETS;
}

static struct entry **find(struct tbm_results *c, const struct tbm_row *row, size_t t)
{
    struct entry **p = &c->buckets[bucket(row, t)];

    while (*p && ((*p)->row != row || (*p)->t != t))
        p = &(*p)->next;
    return p;
}

static void unlink_lru(struct tbm_results *c, struct entry *e)
{
    if (e->older)
        e->older->newer = e->newer;
    else if (c->oldest == e)
        c->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else if (c->newest == e)
        c->newest = e->older;
    e->older = e->newer = NULL;
}

static void push_lru(struct tbm_results *c, struct entry *e)
{
    e->older = c->newest;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

/* Removes e, rendered, from the cache (its hash chain, and the eviction
 * order when it is there), dropping the cache's reference. */
static void drop(struct tbm_results *c, struct entry *e)
{
    if (e->row->evictable) {
        unlink_lru(c, e);
        c->evictable_bytes -= e->result->len;
    }
    *find(c, e->row, e->t) = e->next;
    tbm_result_put(e->result);
    free(e);
}

/* Drops the cache's hold on the least recently opened results until the
 * evictable ones fit the budget. A result an open still reads is never
 * dropped: dropping it would free nothing, and the next open would render
 * a second copy beside it (contract v2: one copy of each result, whatever
 * the number of open descriptors). It stays cached, counted against the
 * budget, so that the unheld results go first; the newest is kept. */
static void evict(struct tbm_results *c)
{
    struct entry *e = c->oldest;

    while (c->evictable_bytes > c->budget && e && e != c->newest) {
        struct entry *next = e->newer;
        if (atomic_load(&e->result->refs) == 1)
            drop(c, e);
        e = next;
    }
}

bool tbm_results_ready(const struct tbm_views *v, const struct tbm_row *row, size_t t)
{
    struct tbm_results *c = v->results;

    pthread_mutex_lock(&c->lock);
    const struct entry *e = *find(c, row, t);
    bool ready = e && !e->running;
    pthread_mutex_unlock(&c->lock);
    return ready;
}

/* The cached result of row for tensor t (*out, a reference taken), once
 * any render of it under way is done: 1. Else an entry marked running,
 * which the caller is to render and publish: 0 (TBM_ERR_NOMEM). A result
 * that showed statistics not known yet is not handed out once some it
 * shows are known: every open until then shares it, and the next renders
 * what is known then (the opens that hold it keep it). */
static int claim(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                 struct entry **claimed, struct tbm_result **out)
{
    struct tbm_results *c = v->results;
    struct entry *e;

    pthread_mutex_lock(&c->lock);
    while ((e = *find(c, row, t)) && e->running)
        pthread_cond_wait(&c->done, &c->lock);
    if (e && e->provisional && tbm_views_stats_gen(v, row, t) != e->gen) {
        drop(c, e);
        e = NULL;
    }
    if (e) {
        *out = tbm_result_take(e->result);
        if (row->evictable) {
            unlink_lru(c, e);
            push_lru(c, e);
        }
    } else if ((e = calloc(1, sizeof(*e)))) {
        *e = (struct entry){.row = row, .t = t, .running = true};
        *find(c, row, t) = e;
        *claimed = e;
    }
    pthread_mutex_unlock(&c->lock);
    return !e ? TBM_ERR_NOMEM : *claimed ? 0 : 1;
}

/* Ends a claimed entry's render: res cached (one reference into *out;
 * provisional, of generation gen, when it showed statistics not known yet,
 * r 1), or the entry dropped when the render failed (r < 0), so that a
 * later open tries again (a source read may succeed then, a stopping
 * daemon's report is not the report); whoever waited is woken either way. */
static void publish(struct tbm_results *c, struct entry *e, int r, uint64_t gen,
                    struct tbm_result *res, struct tbm_result **out)
{
    pthread_mutex_lock(&c->lock);
    if (r < 0) {
        *find(c, e->row, e->t) = e->next;
        free(e);
    } else {
        e->running = false;
        e->result = res;
        e->provisional = r > 0;
        e->gen = gen;
        *out = tbm_result_take(res);
        if (e->row->evictable) {
            push_lru(c, e);
            c->evictable_bytes += res->len;
            evict(c);
        }
    }
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
}

int tbm_results_get(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                    struct tbm_result **out)
{
    struct entry *e = NULL;
    struct tbm_result *res = NULL;
    char *doc;
    size_t len;
    int r = claim(v, row, t, &e, out);

    if (r != 0)
        return r < 0 ? r : 0;
    /* before: statistics known while it renders make it stale, not lost */
    uint64_t gen = tbm_views_stats_gen(v, row, t);
    r = tbm_row_render(v, row, t, &doc, &len);
    if (r >= 0) {
        res = tbm_result_new(doc, len);
        free(doc);
        r = res ? r : TBM_ERR_NOMEM;
    }
    publish(v->results, e, r, gen, res, out);
    return r < 0 ? r : 0;
}
