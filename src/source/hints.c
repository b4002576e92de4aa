/* The hinted ranges of a remote source: hints gathered under a lock, sorted
 * and merged into ranges at the next read, fetched several at once over a
 * curl multi handle whose connections serve the next fetch too, and looked
 * up by offset. */
#include "hints.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/search.h"
#include "tbm/status.h"

/* Hinted ranges are fetched this many at once, neighbours less than
 * MERGE_GAP apart in one request of at most MERGE_MAX; at most HINTS_MAX
 * bytes of them are held at a time. */
#define TRANSFERS 8
#define MERGE_GAP (64u << 10)
#define MERGE_MAX (1u << 20)
#define HINTS_MAX (8u << 20)

struct range {
    uint64_t off;
    size_t len;
    unsigned char *data; /* NULL: not fetched, or not whole */
};

struct tbm_hints {
    struct tbm_hints_fetcher f;
    pthread_mutex_t lock;
    /* Ranges hinted since the last fetch, and what the last fetch brought
     * (sorted, apart). */
    struct range *hints, *store;
    size_t nhints, hints_cap, nstore;
    uint64_t hinted_bytes;
    CURLM *multi;
    CURL *easy[TRANSFERS];
};

int tbm_hints_new(const struct tbm_hints_fetcher *f, struct tbm_hints **out)
{
    struct tbm_hints *s = calloc(1, sizeof(*s));

    *out = s;
    if (!s)
        return TBM_ERR_NOMEM;
    s->f = *f;
    pthread_mutex_init(&s->lock, NULL);
    return 0;
}

static void store_clear(struct tbm_hints *s)
{
    for (size_t i = 0; i < s->nstore; i++)
        free(s->store[i].data);
    s->nstore = 0;
}

void tbm_hints_free(struct tbm_hints *s)
{
    if (!s)
        return;
    for (int k = 0; k < TRANSFERS; k++)
        curl_easy_cleanup(s->easy[k]);
    curl_multi_cleanup(s->multi);
    store_clear(s);
    free(s->store);
    free(s->hints);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void tbm_hints_add(struct tbm_hints *s, uint64_t off, size_t len)
{
    pthread_mutex_lock(&s->lock);
    if (s->hinted_bytes + len <= HINTS_MAX) {
        if (s->nhints == s->hints_cap) {
            size_t cap = s->hints_cap ? 2 * s->hints_cap : 64;
            struct range *more = realloc(s->hints, cap * sizeof(*more));
            if (!more)
                goto out;
            s->hints = more;
            s->hints_cap = cap;
        }
        s->hints[s->nhints++] = (struct range){off, len, NULL};
        s->hinted_bytes += len;
    }
out:
    pthread_mutex_unlock(&s->lock);
}

static int by_offset(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The hints, sorted and merged, become the store's ranges (their data not
 * fetched yet); the hint list starts again. */
static void hints_merge(struct tbm_hints *s)
{
    qsort(s->hints, s->nhints, sizeof(*s->hints), by_offset);
    store_clear(s);
    free(s->store);
    s->store = s->hints;
    size_t n = 0;
    for (size_t i = 0; i < s->nhints; i++) {
        struct range r = s->hints[i];
        struct range *last = n ? &s->store[n - 1] : NULL;
        uint64_t end = last ? last->off + last->len : 0;
        if (last && r.off <= end + MERGE_GAP && r.off + r.len - last->off <= MERGE_MAX) {
            if (r.off + r.len > end)
                last->len = (size_t)(r.off + r.len - last->off);
            continue;
        }
        s->store[n++] = r;
    }
    s->nstore = n;
    s->hints = NULL;
    s->nhints = s->hints_cap = 0;
    s->hinted_bytes = 0;
}

/* One of the TRANSFERS a fetch runs at once. */
struct transfer {
    struct range *range; /* NULL: free */
    void *req;           /* the fetcher's */
};

static int transfer_start(struct tbm_hints *s, CURL *easy, struct transfer *t, struct range *range)
{
    if (!(range->data = malloc(range->len)))
        return TBM_ERR_NOMEM;
    if (s->f.start(s->f.ctx, easy, range->off, range->len, range->data, &t->req) < 0) {
        free(range->data);
        range->data = NULL;
        return TBM_ERR_NOMEM;
    }
    if (curl_easy_setopt(easy, CURLOPT_PRIVATE, t) != CURLE_OK ||
        curl_multi_add_handle(s->multi, easy) != CURLM_OK) {
        /* not started: ended as a failed transfer, the range dropped */
        s->f.end(s->f.ctx, t->req, CURLE_FAILED_INIT);
        free(range->data);
        range->data = NULL;
        return TBM_ERR_NOMEM;
    }
    t->range = range;
    return 0;
}

/* A range that did not arrive whole is dropped from the store: reading it
 * goes through the cache, with its retries. */
static void transfer_end(struct tbm_hints *s, CURL *easy, struct transfer *t, CURLcode code)
{
    curl_multi_remove_handle(s->multi, easy);
    if (!s->f.end(s->f.ctx, t->req, code)) {
        free(t->range->data);
        t->range->data = NULL;
    }
    *t = (struct transfer){0};
}

/* Fetches the hinted ranges, TRANSFERS at a time over the multi handle's
 * connections. Called with the lock held. */
static void hints_fetch(struct tbm_hints *s)
{
    struct transfer t[TRANSFERS] = {0};
    size_t next = 0;
    int active = 0;

    hints_merge(s);
    if (!s->multi && !(s->multi = curl_multi_init()))
        return;
    for (;;) {
        for (int k = 0; k < TRANSFERS && next < s->nstore; k++) {
            if (t[k].range)
                continue;
            if (!s->easy[k] && !(s->easy[k] = s->f.easy_new(s->f.ctx)))
                break;
            if (transfer_start(s, s->easy[k], &t[k], &s->store[next++]) == 0)
                active++;
        }
        if (active == 0)
            break;
        int running, left;
        if (curl_multi_perform(s->multi, &running) != CURLM_OK)
            break;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(s->multi, &left))) {
            struct transfer *done = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&done);
            transfer_end(s, msg->easy_handle, done, msg->data.result);
            active--;
        }
        if (active > 0)
            curl_multi_poll(s->multi, NULL, 0, 1000, NULL);
    }
    for (int k = 0; k < TRANSFERS; k++) /* after a multi failure */
        if (t[k].range)
            transfer_end(s, s->easy[k], &t[k], CURLE_RECV_ERROR);
}

static uint64_t range_end(const void *record)
{
    const struct range *r = record;

    return r->off + r->len;
}

/* The index of the first range of the store that ends past off (nstore
 * when none does). */
static size_t store_after(const struct tbm_hints *s, uint64_t off)
{
    return tbm_first_ending_after(s->store, s->nstore, sizeof(*s->store), range_end, off);
}

size_t tbm_hints_read(struct tbm_hints *s, void *buf, size_t len, uint64_t off, uint64_t *next)
{
    size_t n = 0;

    *next = UINT64_MAX;
    pthread_mutex_lock(&s->lock);
    if (s->nhints)
        hints_fetch(s);
    size_t lo = store_after(s, off);
    struct range *r = lo < s->nstore ? &s->store[lo] : NULL;
    if (r && r->data && off >= r->off) {
        n = r->len - (size_t)(off - r->off) < len ? r->len - (size_t)(off - r->off) : len;
        memcpy(buf, r->data + (off - r->off), n);
    } else {
        for (size_t i = lo; i < s->nstore; i++)
            if (s->store[i].off > off && s->store[i].data) {
                *next = s->store[i].off;
                break;
            }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

bool tbm_hints_cover(struct tbm_hints *s, uint64_t off, size_t len)
{
    bool in;

    pthread_mutex_lock(&s->lock);
    in = s->nhints > 0;
    for (size_t i = store_after(s, off); i < s->nstore && !in && s->store[i].off < off + len; i++)
        in = s->store[i].data != NULL;
    pthread_mutex_unlock(&s->lock);
    return in;
}
