/* The block cache of a remote source: a fixed set of 1 MiB slots, found by
 * block number, evicted least recently used first; transfer threads fill
 * them from a queue (readers' blocks before read-ahead, one block a
 * request; read-ahead in runs of blocks, one request a run), and every
 * reader of a block waits for the one transfer that fills it. A sequential
 * reader's read-ahead window doubles with every block it reads on, up to
 * f.ahead_max blocks and three quarters of the slots. */
#include "cache.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tbm/log.h"

/* A sequential reader's first read-ahead window, in blocks: small, so that
 * a reader that reads on for a block or two costs little. */
#define WINDOW_FIRST 2u

enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

struct link {
    struct link *prev, *next;
};

struct slot {
    struct link link; /* in the free list, a queue, or the LRU list (READY) */
    enum slot_state state;
    uint64_t block;
    unsigned refs;       /* readers holding or waiting for it */
    bool used;           /* a reader asked for it, so the next block is a sequential read */
    bool demand;         /* queued for a reader rather than ahead of one */
    unsigned window;     /* the read-ahead window of the reader that read it, in blocks */
    int err;             /* FAILED: the fetch's status, for its waiting readers */
    uint64_t fail_until; /* failed or given up on: every read fails at once until then (ms) */
    unsigned char *data; /* TBM_CACHE_BLOCK bytes of the cache's mapping */
    size_t len;
    struct slot *hnext;
};

struct tbm_cache {
    struct tbm_cache_fetcher f;
    unsigned char *map; /* every slot's bytes, touched (so resident) only once used */
    size_t map_len;
    uint64_t size;
    size_t nslots;
    struct slot *slots;
    struct slot **buckets;
    size_t nbuckets; /* a power of two */
    struct link free, lru, demand_q, ahead_q;
    unsigned readahead;   /* the widest window, in blocks */
    unsigned request_max; /* blocks in one read-ahead request */
    unsigned ahead_busy;  /* transfer threads fetching ahead */
    size_t ahead_queued;  /* blocks in ahead_q */
    bool stale;
    pthread_mutex_t lock;
    pthread_cond_t done; /* a slot was filled, failed or let go */
    pthread_cond_t work; /* a queue has a slot, or the threads are to stop */
    unsigned slot_waiters;
    unsigned max_workers, nworkers;
    pthread_t *threads;
    bool stop;
    struct tbm_cache *all_prev, *all_next; /* every cache, for fork */
};

static void list_init(struct link *l)
{
    l->prev = l->next = l;
}

static bool list_empty(const struct link *l)
{
    return l->next == l;
}

static void list_del(struct link *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    list_init(e);
}

static void list_push(struct link *head, struct link *e) /* at the front */
{
    e->next = head->next;
    e->prev = head;
    head->next->prev = e;
    head->next = e;
}

static void list_append(struct link *head, struct link *e)
{
    list_push(head->prev, e);
}

static struct slot *slot_of(struct link *l)
{
    return (struct slot *)((char *)l - offsetof(struct slot, link));
}

/* Transfer threads do not survive fork (fuse_daemonize forks after the model
 * is opened), so every cache's threads are stopped before a fork and started
 * again by the next read that needs them, in whichever process that is. */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tbm_cache *all_caches;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void stop_workers(struct tbm_cache *c)
{
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_broadcast(&c->work);
    unsigned n = c->nworkers;
    pthread_mutex_unlock(&c->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(c->threads[i], NULL);
    pthread_mutex_lock(&c->lock);
    c->nworkers = 0;
    c->stop = false;
    pthread_mutex_unlock(&c->lock);
}

static void before_fork(void)
{
    pthread_mutex_lock(&all_lock);
    for (struct tbm_cache *c = all_caches; c; c = c->all_next)
        stop_workers(c);
}

static void after_fork(void)
{
    pthread_mutex_unlock(&all_lock);
}

static void register_atfork(void)
{
    pthread_atfork(before_fork, after_fork, after_fork);
}

static size_t bucket(const struct tbm_cache *c, uint64_t block)
{
    return (size_t)((block * 0x9E3779B97F4A7C15ull) >> 17) & (c->nbuckets - 1);
}

static struct slot *lookup(const struct tbm_cache *c, uint64_t block)
{
    for (struct slot *s = c->buckets[bucket(c, block)]; s; s = s->hnext)
        if (s->block == block)
            return s;
    return NULL;
}

static void unhash(struct tbm_cache *c, struct slot *s)
{
    struct slot **p = &c->buckets[bucket(c, s->block)];

    while (*p != s)
        p = &(*p)->hnext;
    *p = s->hnext;
    s->hnext = NULL;
}

/* Back to the free list; its memory too when the source changed, so that a
 * changed source holds none. */
static void release(struct tbm_cache *c, struct slot *s)
{
    unhash(c, s);
    list_del(&s->link);
    s->state = SLOT_FREE;
    if (c->stale)
        madvise(s->data, TBM_CACHE_BLOCK, MADV_DONTNEED);
    list_push(&c->free, &s->link);
    if (c->slot_waiters)
        pthread_cond_broadcast(&c->done);
}

/* A free slot, or the least recently used filled one nobody holds; for a
 * fetch ahead (spare), only one that a reader has read already. */
static struct slot *take_slot(struct tbm_cache *c, bool spare)
{
    if (!list_empty(&c->free)) {
        struct slot *s = slot_of(c->free.next);
        list_del(&s->link);
        return s;
    }
    for (struct link *l = c->lru.prev; l != &c->lru; l = l->prev) {
        struct slot *s = slot_of(l);
        if (s->refs == 0 && (!spare || s->used || s->state == SLOT_FAILED)) {
            unhash(c, s);
            list_del(&s->link);
            return s;
        }
    }
    return NULL;
}

static uint64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Whether a read of s fails at once with s->err: its transfer failed, or a
 * reader gave up on it, less than f.fail_memory_ms ago. */
static bool failed_lately(const struct slot *s)
{
    return s->state != SLOT_READY && s->fail_until && now_ms() < s->fail_until;
}

/* Until when a failure now is remembered (0: not at all). */
static uint64_t fail_deadline(const struct tbm_cache *c)
{
    return c->f.fail_memory_ms ? now_ms() + c->f.fail_memory_ms : 0;
}

/* A failed slot nobody holds: kept at the cold end of the LRU list (the
 * first taken) while its failure is remembered, else let go. */
static void settle_failed(struct tbm_cache *c, struct slot *s)
{
    if (c->stale || !failed_lately(s)) {
        release(c, s);
        return;
    }
    list_append(&c->lru, &s->link);
    if (c->slot_waiters)
        pthread_cond_broadcast(&c->done);
}

/* A reader waited the whole wait_limit for s: the reads that come while it
 * is remembered fail at once, and one line says so. */
static void gave_up(struct tbm_cache *c, struct slot *s)
{
    bool fresh = !failed_lately(s);

    s->err = TBM_ERR_TRANSFER;
    s->fail_until = fail_deadline(c);
    if (fresh)
        tbm_log(TBM_LOG_ERROR,
                "%s: bytes %" PRIu64 "-%" PRIu64 ": the transfer timed out: not here within "
                "%u s (%s)",
                c->f.name ? c->f.name : "source", s->block * TBM_CACHE_BLOCK,
                (s->block + 1) * TBM_CACHE_BLOCK - 1, c->f.wait_limit,
                s->state == SLOT_QUEUED ? "still queued behind other transfers" : "still arriving");
}

static void *worker_main(void *arg);

static void start_workers(struct tbm_cache *c)
{
    while (c->nworkers < c->max_workers) {
        if (pthread_create(&c->threads[c->nworkers], NULL, worker_main, c) != 0)
            break;
        c->nworkers++;
    }
}

static void enqueue(struct tbm_cache *c, struct slot *s, uint64_t block, bool demand)
{
    struct slot **b = &c->buckets[bucket(c, block)];

    s->block = block;
    s->state = SLOT_QUEUED;
    s->refs = 0;
    s->used = false;
    s->demand = demand;
    s->window = 0;
    s->fail_until = 0;
    s->hnext = *b;
    *b = s;
    list_append(demand ? &c->demand_q : &c->ahead_q, &s->link);
    c->ahead_queued += !demand;
    start_workers(c);
    pthread_cond_signal(&c->work);
}

/* Fetches the n consecutive blocks of run in one request. */
static int load(struct tbm_cache *c, void *w, struct slot **run, unsigned char **bufs, unsigned n)
{
    uint64_t off = run[0]->block * TBM_CACHE_BLOCK;
    size_t len = 0;

    for (unsigned i = 0; i < n; i++) {
        uint64_t left = c->size - run[i]->block * TBM_CACHE_BLOCK;
        run[i]->len = left < TBM_CACHE_BLOCK ? (size_t)left : TBM_CACHE_BLOCK;
        bufs[i] = run[i]->data;
        len += run[i]->len;
    }
    if (!w)
        return TBM_ERR_NOMEM;
    return c->f.fetch(c->f.ctx, w, off, bufs, len);
}

/* The transfer threads that may fetch ahead at once: read-ahead leaves a
 * thread or two to readers' blocks, so that a random reader's block never
 * waits behind a long read-ahead. */
static unsigned ahead_threads(const struct tbm_cache *c)
{
    unsigned kept = c->max_workers / 8 ? c->max_workers / 8 : 1;

    return c->max_workers <= kept ? c->max_workers : c->max_workers - kept;
}

static bool ahead_allowed(const struct tbm_cache *c)
{
    return c->ahead_busy < ahead_threads(c);
}

/* Blocks in the next read-ahead request: at most request_max, and no more
 * than this thread's share of what is queued, so that a window just
 * widened goes out over every idle connection at once instead of down one
 * (a connection's rate is capped on a far link). */
static unsigned run_limit(const struct tbm_cache *c)
{
    unsigned idle = ahead_threads(c) - c->ahead_busy; /* this thread among them */
    size_t share = (c->ahead_queued + idle - 1) / idle;

    return share < c->request_max ? (unsigned)share : c->request_max;
}

/* The next request's blocks, taken off their queue into run: a reader's
 * block alone, or queued read-ahead blocks that follow one another. */
static unsigned take_run(struct tbm_cache *c, struct slot **run)
{
    bool ahead = list_empty(&c->demand_q);
    struct slot *s = slot_of(ahead ? c->ahead_q.next : c->demand_q.next);
    unsigned n = 0, limit = ahead ? run_limit(c) : 1;

    for (;;) {
        list_del(&s->link);
        s->state = SLOT_LOADING;
        c->ahead_queued -= ahead;
        run[n++] = s;
        if (n == limit)
            break;
        s = lookup(c, s->block + 1);
        if (!s || s->state != SLOT_QUEUED || s->demand)
            break;
    }
    return n;
}

/* The fetch of a run ended with r: its blocks filled, or failed. */
static void settle_run(struct tbm_cache *c, struct slot **run, unsigned n, int r)
{
    for (unsigned i = 0; i < n; i++) {
        struct slot *s = run[i];
        if (r == 0 && !c->stale) {
            s->state = SLOT_READY;
            s->fail_until = 0;
            list_push(&c->lru, &s->link);
            continue;
        }
        s->state = SLOT_FAILED;
        s->err = r < 0 ? r : TBM_ERR_IO;
        /* a refusal is not remembered: new credentials are tried at once */
        s->fail_until = r == TBM_ERR_TRANSFER ? fail_deadline(c) : 0;
        if (s->refs == 0)
            settle_failed(c, s);
    }
}

static void *worker_main(void *arg)
{
    struct tbm_cache *c = arg;
    void *w = c->f.worker_new(c->f.ctx);
    struct slot **run = malloc(c->request_max * sizeof(*run));
    unsigned char **bufs = malloc(c->request_max * sizeof(*bufs));

    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stop && list_empty(&c->demand_q) &&
               (list_empty(&c->ahead_q) || !ahead_allowed(c)))
            pthread_cond_wait(&c->work, &c->lock);
        if (c->stop)
            break;
        bool ahead = list_empty(&c->demand_q);
        unsigned n = run && bufs ? take_run(c, run) : 0;
        if (n == 0) { /* no memory for the run: the queue's head fails */
            struct slot *s = slot_of(ahead ? c->ahead_q.next : c->demand_q.next);
            list_del(&s->link);
            c->ahead_queued -= ahead;
            s->state = SLOT_LOADING;
            settle_run(c, &s, 1, TBM_ERR_NOMEM);
            pthread_cond_broadcast(&c->done);
            continue;
        }
        c->ahead_busy += ahead;
        int r = c->stale ? TBM_ERR_IO : 0;
        if (r == 0) {
            pthread_mutex_unlock(&c->lock);
            r = load(c, w, run, bufs, n);
            pthread_mutex_lock(&c->lock);
        }
        c->ahead_busy -= ahead;
        settle_run(c, run, n, r);
        pthread_cond_broadcast(&c->done);
        if (ahead && !list_empty(&c->ahead_q))
            pthread_cond_signal(&c->work); /* a thread held back may fetch ahead now */
    }
    pthread_mutex_unlock(&c->lock);
    free(run);
    free(bufs);
    if (w)
        c->f.worker_free(c->f.ctx, w);
    return NULL;
}

/* Queues the blocks after block (in slot s) for a reader that reads on
 * sequentially: one that read the block before too. Its window is twice
 * the one it had there. Only free or idle slots are taken. */
static void read_ahead(struct tbm_cache *c, uint64_t block, struct slot *s)
{
    struct slot *prev = block > 0 ? lookup(c, block - 1) : NULL;

    if (c->readahead == 0 || (block > 0 && !(prev && prev->used)))
        return;
    unsigned window = prev && prev->window ? prev->window * 2 : WINDOW_FIRST;
    if (window > c->readahead)
        window = c->readahead;
    if (s->window < window)
        s->window = window;
    /* Refilled once a request's worth (or half the window) is missing, not
     * a block at a time: what is missing is queued as one run, which goes in
     * long requests, and the window stays nearly full. */
    uint64_t last = (c->size - 1) / TBM_CACHE_BLOCK;
    unsigned have = 0;
    while (have < s->window && block + have < last && lookup(c, block + have + 1))
        have++;
    unsigned step = c->request_max < s->window / 2 ? c->request_max : s->window / 2;
    if (have > 0 && s->window - have < step)
        return;
    for (unsigned i = have + 1; i <= s->window; i++) {
        uint64_t b = block + i;
        if (b > last)
            return;
        if (lookup(c, b))
            continue;
        struct slot *t = take_slot(c, true);
        if (!t)
            return;
        enqueue(c, t, b, false);
    }
}

/* When a reader that starts now gives up waiting (f.wait_limit seconds on). */
static struct timespec reader_deadline(const struct tbm_cache *c)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += c->f.wait_limit ? c->f.wait_limit : 365 * 86400;
    return t;
}

/* Waits for done, a second at most at a time so that a stop is seen (a
 * signal handler cannot wake a condition variable). 0, TBM_ERR_STOPPED, or
 * TBM_ERR_TRANSFER once the reader's deadline passed. */
static int wait_done(struct tbm_cache *c, const struct timespec *until)
{
    struct timespec now, t;

    if (tbm_source_stopping())
        return TBM_ERR_STOPPED;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > until->tv_sec ||
        (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))
        return TBM_ERR_TRANSFER;
    t = now;
    t.tv_sec += 1;
    if (t.tv_sec > until->tv_sec || (t.tv_sec == until->tv_sec && t.tv_nsec > until->tv_nsec))
        t = *until;
    pthread_cond_timedwait(&c->done, &c->lock, &t);
    return 0;
}

/* The slot of block, filled, with a reference held; called and returns
 * with the lock held. 1 instead of waiting for a slot unless slot_wait;
 * TBM_ERR_AGAIN instead of any wait with mode TBM_SOURCE_NOWAIT, the block
 * asked for. A reader gives up at until, or when the program stops,
 * leaving the block to its transfer. */
static int acquire(struct tbm_cache *c, uint64_t block, unsigned mode, bool slot_wait,
                   const struct timespec *until, struct slot **out)
{
    bool nowait = mode & TBM_SOURCE_NOWAIT;

    for (;;) {
        if (c->stale)
            return TBM_ERR_IO;
        struct slot *s = lookup(c, block);
        if (s && s->state == SLOT_FAILED && s->refs == 0 && !failed_lately(s)) {
            release(c, s); /* its failure is forgotten: fetched again */
            s = NULL;
        }
        if (s && failed_lately(s))
            return s->err;
        if (!s) {
            if (!(s = take_slot(c, false))) {
                if (nowait)
                    return TBM_ERR_AGAIN;
                if (!slot_wait)
                    return 1;
                c->slot_waiters++;
                int w = wait_done(c, until);
                c->slot_waiters--;
                if (w == TBM_ERR_TRANSFER)
                    tbm_log(TBM_LOG_ERROR,
                            "%s: bytes %" PRIu64 "-%" PRIu64 ": the transfer timed out: no block "
                            "of the cache came free within %u s",
                            c->f.name ? c->f.name : "source", block * TBM_CACHE_BLOCK,
                            (block + 1) * TBM_CACHE_BLOCK - 1, c->f.wait_limit);
                if (w < 0)
                    return w;
                continue;
            }
            enqueue(c, s, block, true);
        }
        if (s->state == SLOT_QUEUED && !s->demand) {
            list_del(&s->link);
            list_append(&c->demand_q, &s->link);
            c->ahead_queued--;
            s->demand = true;
        }
        /* asked for first, so that the thread that may wait finds it on
         * its way or done */
        if ((s->state == SLOT_QUEUED || s->state == SLOT_LOADING) && nowait) {
            start_workers(c);
            return TBM_ERR_AGAIN;
        }
        s->refs++;
        s->used = true;
        while (s->state == SLOT_QUEUED || s->state == SLOT_LOADING) {
            start_workers(c); /* they may have been stopped for a fork */
            int w = wait_done(c, until);
            if (w < 0) {
                /* the transfer lets the slot go when it ends unheld */
                s->refs--;
                if (w == TBM_ERR_TRANSFER)
                    gave_up(c, s);
                return w;
            }
        }
        if (s->state == SLOT_READY) {
            list_del(&s->link);
            list_push(&c->lru, &s->link);
            *out = s;
            return 0;
        }
        int err = s->state == SLOT_FAILED && !c->stale ? s->err : TBM_ERR_IO;
        if (--s->refs == 0)
            settle_failed(c, s);
        return err;
    }
}

static void put(struct tbm_cache *c, struct slot *s)
{
    if (--s->refs > 0)
        return;
    if (s->state != SLOT_READY || c->stale)
        release(c, s);
    else if (c->slot_waiters)
        pthread_cond_broadcast(&c->done);
}

int tbm_cache_read(struct tbm_cache *c, void *buf, size_t len, uint64_t off, unsigned mode,
                   size_t *got)
{
    struct timespec until = reader_deadline(c);
    size_t done = 0;
    int r = 0, cancel;

    *got = 0;
    /* libfuse cancels its workers when the session ends: not while one
     * waits here holding the lock (see tbm_cache_hold too) */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    pthread_mutex_lock(&c->lock);
    if (c->stale) {
        r = TBM_ERR_IO;
        goto out;
    }
    if (off >= c->size)
        goto out;
    if (len > c->size - off)
        len = (size_t)(c->size - off);
    while (done < len) {
        uint64_t pos = off + done, block = pos / TBM_CACHE_BLOCK;
        struct slot *s;
        if ((r = acquire(c, block, mode, true, &until, &s)) < 0)
            goto out;
        read_ahead(c, block, s);
        size_t in = (size_t)(pos - block * TBM_CACHE_BLOCK);
        size_t n = s->len - in < len - done ? s->len - in : len - done;
        /* The reference keeps the slot's bytes; the copy needs no lock. */
        pthread_mutex_unlock(&c->lock);
        memcpy((char *)buf + done, s->data + in, n);
        pthread_mutex_lock(&c->lock);
        put(c, s);
        done += n;
    }
    *got = done;
out:
    pthread_mutex_unlock(&c->lock);
    pthread_setcancelstate(cancel, NULL);
    return r;
}

int tbm_cache_hold(struct tbm_cache *c, uint64_t off, size_t len, unsigned mode,
                   struct tbm_source_piece *pieces, size_t max, size_t *n)
{
    struct timespec until = reader_deadline(c);
    size_t done = 0;
    int r = 1, cancel;

    assert(len > 0 && off < c->size && len <= c->size - off);
    *n = 0;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    pthread_mutex_lock(&c->lock);
    while (done < len) {
        uint64_t pos = off + done, block = pos / TBM_CACHE_BLOCK;
        struct slot *s;
        if (*n == max) {
            r = 0;
            break;
        }
        /* Only the first block may wait for a slot: readers that each
         * hold a block and wait for another could otherwise hold every
         * slot and wait for ever. */
        int a = acquire(c, block, mode, *n == 0, &until, &s);
        if (a != 0) {
            r = a < 0 ? a : 0;
            break;
        }
        read_ahead(c, block, s);
        size_t in = (size_t)(pos - block * TBM_CACHE_BLOCK);
        size_t k = s->len - in < len - done ? s->len - in : len - done;
        pieces[(*n)++] = (struct tbm_source_piece){s->data + in, k, s};
        done += k;
    }
    if (r != 1) {
        while (*n > 0)
            put(c, pieces[--*n].ref);
    }
    pthread_mutex_unlock(&c->lock);
    pthread_setcancelstate(cancel, NULL);
    return r;
}

void tbm_cache_release(struct tbm_cache *c, struct tbm_source_piece *pieces, size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++)
        put(c, pieces[i].ref);
    pthread_mutex_unlock(&c->lock);
}

void tbm_cache_invalidate(struct tbm_cache *c)
{
    pthread_mutex_lock(&c->lock);
    c->stale = true;
    while (!list_empty(&c->demand_q) || !list_empty(&c->ahead_q)) {
        struct link *q = list_empty(&c->demand_q) ? &c->ahead_q : &c->demand_q;
        struct slot *s = slot_of(q->next);
        s->state = SLOT_FAILED;
        s->err = TBM_ERR_IO;
        list_del(&s->link);
        if (s->refs == 0)
            release(c, s);
    }
    c->ahead_queued = 0;
    for (struct link *l = c->lru.next, *next; l != &c->lru; l = next) {
        next = l->next;
        struct slot *s = slot_of(l);
        if (s->refs == 0)
            release(c, s);
    }
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
}

/* The slots of a cache of a source of size bytes, as many as cache_bytes
 * holds (at least two), in one mapping, and room for workers threads; on
 * failure nothing is left allocated. TBM_ERR_NOMEM. */
static int make_slots(struct tbm_cache *c, uint64_t size, uint64_t cache_bytes, unsigned workers)
{
    uint64_t n = cache_bytes / TBM_CACHE_BLOCK;

    /* Never more slots than blocks: a small file's cache costs only its size. */
    if (n > size / TBM_CACHE_BLOCK + 1)
        n = size / TBM_CACHE_BLOCK + 1;
    c->nslots = n < 2 ? 2 : (size_t)n;
    c->nbuckets = 1;
    while (c->nbuckets < 2 * c->nslots)
        c->nbuckets *= 2;
    c->slots = calloc(c->nslots, sizeof(*c->slots));
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    c->threads = calloc(workers ? workers : 1, sizeof(*c->threads));
    /* One mapping for all slots: only what is filled becomes resident, and a
     * changed source's blocks go back to the system at once (MADV_DONTNEED). */
    c->map_len = c->nslots * (size_t)TBM_CACHE_BLOCK;
    void *map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    c->map = map == MAP_FAILED ? NULL : map;
    if (!c->slots || !c->buckets || !c->threads || !c->map) {
        if (c->map)
            munmap(c->map, c->map_len);
        free(c->slots);
        free(c->buckets);
        free(c->threads);
        return TBM_ERR_NOMEM;
    }
    return 0;
}

/* Every cache is on the list that a fork stops the threads of. */
static void enroll(struct tbm_cache *c)
{
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&all_lock);
    c->all_next = all_caches;
    if (all_caches)
        all_caches->all_prev = c;
    all_caches = c;
    pthread_mutex_unlock(&all_lock);
}

static void withdraw(struct tbm_cache *c)
{
    pthread_mutex_lock(&all_lock);
    if (c->all_prev)
        c->all_prev->all_next = c->all_next;
    else
        all_caches = c->all_next;
    if (c->all_next)
        c->all_next->all_prev = c->all_prev;
    pthread_mutex_unlock(&all_lock);
}

int tbm_cache_new(const struct tbm_cache_fetcher *f, uint64_t size, uint64_t cache_bytes,
                  unsigned workers, struct tbm_cache **out)
{
    struct tbm_cache *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return TBM_ERR_NOMEM;
    if (make_slots(c, size, cache_bytes, workers) < 0) {
        free(c);
        return TBM_ERR_NOMEM;
    }
    c->f = *f;
    c->size = size;
    c->max_workers = workers ? workers : 1;
    /* Read-ahead takes at most three quarters of the slots, so that readers
     * always have room (and it takes only slots already read: it never
     * pushes out what another reader is about to use). On a far link what is
     * in flight is the rate times a request's time, and half the default
     * cache held back 21 connections at 25 MB/s each. */
    size_t most = c->nslots * 3 / 4;
    c->readahead = (unsigned)(most < f->ahead_max ? most : f->ahead_max);
    c->request_max = f->request_max ? f->request_max : 1;
    list_init(&c->free);
    list_init(&c->lru);
    list_init(&c->demand_q);
    list_init(&c->ahead_q);
    for (size_t i = 0; i < c->nslots; i++) {
        c->slots[i].data = c->map + i * (size_t)TBM_CACHE_BLOCK;
        list_push(&c->free, &c->slots[i].link);
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&c->done, &monotonic);
    pthread_condattr_destroy(&monotonic);
    pthread_cond_init(&c->work, NULL);
    enroll(c);
    *out = c;
    return 0;
}

void tbm_cache_free(struct tbm_cache *c)
{
    if (!c)
        return;
    withdraw(c);
    stop_workers(c);
    munmap(c->map, c->map_len);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->work);
    free(c->slots);
    free(c->buckets);
    free(c->threads);
    free(c);
}
