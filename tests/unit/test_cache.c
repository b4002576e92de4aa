/* Unit tests of the block cache of remote sources (src/source/cache.c) over a
 * fake fetcher: blocks filled with a pattern of their offset, fetches
 * counted per block, made to fail, or held at a gate the test opens. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cache.h"

#define MIB         ((uint64_t)TBM_CACHE_BLOCK)
#define NBLOCKS     17
#define SOURCE_SIZE (16 * MIB + 12345) /* the last block is short */
#define NO_BLOCK    UINT64_MAX

struct fake {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned calls;    /* fetches started */
    unsigned finished; /* fetches returned */
    unsigned per_block[NBLOCKS];
    unsigned waiting;            /* fetches held at the gate */
    bool gate_closed;            /* fetches wait until the test opens it, */
    uint64_t gate_from, gate_to; /* those of a block from gate_from, before gate_to */
    uint64_t fail_block;         /* a fetch of it fails, NO_BLOCK: none */
    int fail_status;             /* with this status */
    struct tbm_cache *changes;   /* a fetch invalidates it, as a changed source does */
    unsigned bad_calls;          /* fetches not of whole blocks inside the source */
    size_t longest;              /* the longest fetch's bytes */
    unsigned workers_new, workers_freed;
    unsigned readers_started; /* reader threads about to read */
};

static unsigned char pattern(uint64_t off)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull;
    return (unsigned char)(x >> 56 ^ off >> 20);
}

static bool is_pattern(const unsigned char *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(off + i))
            return false;
    return true;
}

static void *fake_worker_new(void *ctx)
{
    struct fake *f = ctx;
    int *w = malloc(sizeof(*w)); /* a real allocation, so that a leak or double free shows */

    pthread_mutex_lock(&f->lock);
    f->workers_new++;
    pthread_mutex_unlock(&f->lock);
    return w;
}

static void fake_worker_free(void *ctx, void *worker)
{
    struct fake *f = ctx;

    pthread_mutex_lock(&f->lock);
    f->workers_freed++;
    pthread_mutex_unlock(&f->lock);
    free(worker);
}

/* A fetch of whole blocks from off (one or several: a read-ahead run). */
static int fake_fetch(void *ctx, void *worker, uint64_t off, unsigned char *const *bufs, size_t len)
{
    struct fake *f = ctx;
    uint64_t block = off / MIB, end = off + len;
    int r = 0;

    (void)worker;
    pthread_mutex_lock(&f->lock);
    f->calls++;
    if (len > f->longest)
        f->longest = len;
    if (off % MIB != 0 || len == 0 || end > SOURCE_SIZE || (end % MIB != 0 && end != SOURCE_SIZE))
        f->bad_calls++;
    else
        for (uint64_t b = block; b * MIB < end; b++)
            f->per_block[b]++;
    f->waiting++;
    pthread_cond_broadcast(&f->cond);
    while (f->gate_closed && (end - 1) / MIB >= f->gate_from && block < f->gate_to)
        pthread_cond_wait(&f->cond, &f->lock);
    f->waiting--;
    if (f->fail_block >= block && f->fail_block * MIB < end)
        r = f->fail_status;
    struct tbm_cache *changes = f->changes;
    pthread_mutex_unlock(&f->lock);
    if (changes) {
        tbm_cache_invalidate(changes);
        r = TBM_ERR_IO;
    }
    for (size_t i = 0; i < len; i++)
        /* after a failure, what a failed transfer left behind */
        bufs[i / MIB][i % MIB] = r == 0 ? pattern(off + i) : 0xee;
    pthread_mutex_lock(&f->lock);
    f->finished++;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return r;
}

static struct fake *fake_new(void)
{
    struct fake *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->fail_block = NO_BLOCK;
    f->fail_status = TBM_ERR_IO;
    f->gate_to = NO_BLOCK;
    return f;
}

/* A cache of slots blocks fetched by workers threads, reading ahead at
 * most ahead blocks in requests of request blocks at most; its readers give
 * up after wait_limit s, and its failed blocks fail every read for
 * memory_ms. */
struct shape {
    unsigned slots, workers, ahead, request, wait_limit, memory_ms;
};

static struct tbm_cache *cache_shaped(struct fake *f, struct shape sh)
{
    struct tbm_cache_fetcher fetcher = {.ctx = f,
                                        .worker_new = fake_worker_new,
                                        .worker_free = fake_worker_free,
                                        .fetch = fake_fetch,
                                        .wait_limit = sh.wait_limit,
                                        .fail_memory_ms = sh.memory_ms,
                                        .name = "fake://source",
                                        .ahead_max = sh.ahead,
                                        .request_max = sh.request};
    struct tbm_cache *c;

    assert_int_equal(tbm_cache_new(&fetcher, SOURCE_SIZE, sh.slots * MIB, sh.workers, &c), 0);
    return c;
}

/* Read-ahead of a quarter of the slots, a block a request. */
static struct tbm_cache *cache_new(struct fake *f, unsigned slots, unsigned workers)
{
    return cache_shaped(f, (struct shape){slots, workers, slots / 4, 1, 0, 0});
}

static double secs_since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Frees the cache (its threads must stop) and checks what the fake saw. */
static void done(struct fake *f, struct tbm_cache *c)
{
    tbm_cache_free(c);
    assert_int_equal(f->bad_calls, 0);
    assert_int_equal(f->workers_new, f->workers_freed);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f);
}

static void set_gate(struct fake *f, bool closed)
{
    pthread_mutex_lock(&f->lock);
    f->gate_closed = closed;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static void set_fail(struct fake *f, uint64_t block)
{
    pthread_mutex_lock(&f->lock);
    f->fail_block = block;
    pthread_mutex_unlock(&f->lock);
}

static unsigned fetches_of(struct fake *f, uint64_t block)
{
    pthread_mutex_lock(&f->lock);
    unsigned n = f->per_block[block];
    pthread_mutex_unlock(&f->lock);
    return n;
}

static unsigned calls_of(struct fake *f)
{
    pthread_mutex_lock(&f->lock);
    unsigned n = f->calls;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Waits until *counter (a field of f) reaches n; fails the test after 10 s, as
 * a cache that never fetches would otherwise hang it. */
static void wait_for(struct fake *f, const unsigned *counter, unsigned n)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&f->lock);
    while (*counter < n) {
        if (pthread_cond_timedwait(&f->cond, &f->lock, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&f->lock);
            fail_msg("waited 10 s for a count of %u (it is %u)", n, *counter);
        }
    }
    pthread_mutex_unlock(&f->lock);
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

/* Reads len bytes at off through the cache and checks them. */
static void read_ok(struct tbm_cache *c, uint64_t off, size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    size_t got;

    assert_non_null(buf);
    assert_int_equal(tbm_cache_read(c, buf, len, off, 0, &got), 0);
    size_t want = off >= SOURCE_SIZE ? 0 : SOURCE_SIZE - off < len ? SOURCE_SIZE - off : len;
    assert_int_equal(got, want);
    assert_true(is_pattern(buf, off, got));
    free(buf);
}

static void read_block(struct tbm_cache *c, uint64_t block)
{
    read_ok(c, block * MIB + 1000, 5000);
}

static void test_reads_bytes(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 2);

    read_ok(c, 0, 100);
    read_ok(c, MIB - 10, 20);            /* across a block boundary */
    read_ok(c, 5 * MIB + 7, 3 * MIB);    /* across three, through a cache of four */
    read_ok(c, SOURCE_SIZE - 100, 1000); /* short at the end */
    read_ok(c, SOURCE_SIZE, 10);         /* nothing past it */
    read_ok(c, SOURCE_SIZE + 5 * MIB, 10);
    read_ok(c, 0, (size_t)SOURCE_SIZE + 1); /* the whole source, more blocks than slots */
    done(f, c);
}

/* Blocks 2, 4, 6, 8 fill four slots (no two consecutive, so no read-ahead);
 * 2 is read again, so block 10 must push out 4, the least recently used. */
static void test_evicts_least_recently_used(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 1);

    for (uint64_t b = 2; b <= 8; b += 2)
        read_block(c, b);
    read_block(c, 2);
    read_block(c, 10);
    assert_int_equal(calls_of(f), 5);
    read_block(c, 2);
    read_block(c, 6);
    read_block(c, 8);
    read_block(c, 10);
    assert_int_equal(calls_of(f), 5);
    assert_int_equal(fetches_of(f, 4), 1);
    read_block(c, 4); /* gone: fetched again, and pushes out 2, now the oldest */
    assert_int_equal(fetches_of(f, 4), 2);
    read_block(c, 6);
    assert_int_equal(calls_of(f), 6);
    read_block(c, 2);
    assert_int_equal(fetches_of(f, 2), 2);
    done(f, c);
}

/* A reader that reads on from where it left off gets the next blocks
 * fetched ahead of it, at most a quarter of the slots; one that jumps does not. */
static void test_reads_ahead_of_sequential_reader(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 8, 1); /* read-ahead of 2 */

    read_block(c, 5); /* block 4 was never read: no read-ahead */
    read_block(c, 9);
    wait_for(f, &f->finished, 2);
    sleep_ms(50);
    assert_int_equal(calls_of(f), 2);
    read_block(c, 10); /* after 9: 11 and 12 ahead */
    wait_for(f, &f->finished, 5);
    assert_int_equal(fetches_of(f, 11), 1);
    assert_int_equal(fetches_of(f, 12), 1);
    sleep_ms(50);
    assert_int_equal(calls_of(f), 5);
    read_block(c, 11);
    read_block(c, 12);
    assert_int_equal(fetches_of(f, 11), 1);
    assert_int_equal(fetches_of(f, 12), 1);
    done(f, c);
}

/* Every slot full, the least recently used a block fetched ahead that no
 * reader has read yet: the next read-ahead must take a block that was read,
 * not that one, which a reader is about to use. */
static void test_read_ahead_keeps_unread_blocks(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 1); /* read-ahead of 1 */

    read_block(c, 0); /* block 0 starts a sequential read: 1 is fetched ahead */
    wait_for(f, &f->calls, 2);
    /* One transfer thread, busy with 1: it is in the cache before 8 is fetched. */
    read_block(c, 8);
    read_block(c, 7);
    read_block(c, 0);
    /* Least recently used first: 1 (never read), 8, 7, 0. Reading 8 after 7
     * fetches 9 ahead, into 7's slot, 8 being held by the read. */
    read_block(c, 8);
    wait_for(f, &f->finished, 5);
    assert_int_equal(fetches_of(f, 9), 1);
    read_block(c, 1);
    assert_int_equal(fetches_of(f, 1), 1);
    read_block(c, 7);
    assert_int_equal(fetches_of(f, 7), 2);
    done(f, c);
}

/* Two slots: a held block stays, its bytes unchanged, however many other
 * blocks pass through the other slot; released, it can go. */
static void test_held_block_not_evicted(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 2, 1);
    struct tbm_source_piece p[2];
    size_t n;

    assert_int_equal(tbm_cache_hold(c, 3 * MIB + 10, 1000, 0, p, 2, &n), 1);
    assert_int_equal(n, 1);
    for (uint64_t b = 5; b < 15; b += 2)
        read_block(c, b);
    assert_true(is_pattern(p[0].data, 3 * MIB + 10, 1000));
    read_block(c, 3);
    assert_int_equal(fetches_of(f, 3), 1);
    tbm_cache_release(c, p, n);
    read_block(c, 5);
    read_block(c, 7);
    read_block(c, 3);
    assert_int_equal(fetches_of(f, 3), 2);
    done(f, c);
}

struct reader {
    pthread_t thread;
    struct fake *f;
    struct tbm_cache *c;
    uint64_t off;
    size_t len;
    bool nowait; /* reads with mode TBM_SOURCE_NOWAIT */
    int r;
    size_t got;
    bool right;
};

static void *reader_main(void *arg)
{
    struct reader *rd = arg;
    unsigned char *buf = malloc(rd->len);

    pthread_mutex_lock(&rd->f->lock);
    rd->f->readers_started++;
    pthread_cond_broadcast(&rd->f->cond);
    pthread_mutex_unlock(&rd->f->lock);
    rd->r = buf ? tbm_cache_read(rd->c, buf, rd->len, rd->off, rd->nowait ? TBM_SOURCE_NOWAIT : 0,
                                 &rd->got)
                : TBM_ERR_NOMEM;
    rd->right = rd->r == 0 && rd->got == rd->len && is_pattern(buf, rd->off, rd->len);
    free(buf);
    return NULL;
}

/* Joins a reader; fails the test when it is still waiting after 10 s. */
static void join(struct reader *rd)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    if (pthread_timedjoin_np(rd->thread, NULL, &until) != 0)
        fail_msg("a reader at %llu still waits after 10 s", (unsigned long long)rd->off);
}

static void start_reader(struct reader *rd, struct fake *f, struct tbm_cache *c, uint64_t off,
                         size_t len)
{
    *rd = (struct reader){.f = f, .c = c, .off = off, .len = len, .r = 1};
    assert_int_equal(pthread_create(&rd->thread, NULL, reader_main, rd), 0);
}

/* Reads with TBM_SOURCE_NOWAIT, to the end. */
static void read_nowait(struct reader *rd, struct fake *f, struct tbm_cache *c, uint64_t off,
                        size_t len)
{
    *rd = (struct reader){.f = f, .c = c, .off = off, .len = len, .nowait = true, .r = 1};
    assert_int_equal(pthread_create(&rd->thread, NULL, reader_main, rd), 0);
    join(rd);
}

/* A read or a hold with TBM_SOURCE_NOWAIT is told TBM_ERR_AGAIN while its
 * block is on its way, the transfer asked for once, and gets the bytes once
 * they are in; when every slot is held it is not kept waiting for one
 * either. */
static void test_nowait_never_waits(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 2, 1);
    struct tbm_source_piece p[2], q[2];
    struct reader rd;
    size_t n, m, k;

    set_gate(f, true);
    read_nowait(&rd, f, c, 3 * MIB + 10, 100);
    assert_int_equal(rd.r, TBM_ERR_AGAIN);
    wait_for(f, &f->waiting, 1); /* asked for */
    read_nowait(&rd, f, c, 3 * MIB + 10, 100);
    assert_int_equal(rd.r, TBM_ERR_AGAIN);
    assert_int_equal(tbm_cache_hold(c, 3 * MIB, 10, TBM_SOURCE_NOWAIT, p, 2, &n), TBM_ERR_AGAIN);
    assert_int_equal(calls_of(f), 1);
    set_gate(f, false);
    read_ok(c, 3 * MIB + 10, 100); /* a reader that may wait, for the fetch to be done */
    read_nowait(&rd, f, c, 3 * MIB + 10, 100);
    assert_true(rd.right);
    assert_int_equal(fetches_of(f, 3), 1);
    assert_int_equal(tbm_cache_hold(c, 3 * MIB, 10, TBM_SOURCE_NOWAIT, p, 2, &n), 1);
    assert_int_equal(tbm_cache_hold(c, 5 * MIB, 10, 0, q, 2, &m), 1);
    read_nowait(&rd, f, c, 7 * MIB, 100);
    assert_int_equal(rd.r, TBM_ERR_AGAIN);
    assert_int_equal(tbm_cache_hold(c, 7 * MIB, 10, TBM_SOURCE_NOWAIT, p + 1, 1, &k),
                     TBM_ERR_AGAIN);
    assert_int_equal(fetches_of(f, 7), 0);
    tbm_cache_release(c, p, n);
    tbm_cache_release(c, q, m);
    done(f, c);
}

/* Both slots held: a read of a third block waits for one, and gets it when
 * a hold is let go. A hold whose second block would wait holds nothing. */
static void test_read_waits_for_held_slot(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 2, 1);
    struct tbm_source_piece p[2], q[2];
    size_t n, m;
    struct reader rd;

    assert_int_equal(tbm_cache_hold(c, 4 * MIB, 10, 0, p, 2, &n), 1);
    assert_int_equal(tbm_cache_hold(c, 7 * MIB - 5, 10, 0, q, 2, &m), 0); /* 6 then 7: no slot */
    assert_int_equal(m, 0);
    assert_int_equal(tbm_cache_hold(c, 9 * MIB, 10, 0, q, 2, &m), 1);
    start_reader(&rd, f, c, 11 * MIB, 100);
    wait_for(f, &f->readers_started, 1);
    sleep_ms(100); /* for the reader to reach the wait */
    assert_int_equal(fetches_of(f, 11), 0);
    tbm_cache_release(c, q, m);
    join(&rd);
    assert_true(rd.right);
    assert_true(is_pattern(p[0].data, 4 * MIB, 10));
    tbm_cache_release(c, p, n);
    done(f, c);
}

/* Eight readers of one block while its fetch is held at the gate: one
 * fetch, and every reader gets its bytes once it is done. */
static void test_concurrent_readers_one_fetch(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 4);
    struct reader rd[8];

    set_gate(f, true);
    for (unsigned i = 0; i < 8; i++)
        start_reader(&rd[i], f, c, 6 * MIB + i * 100000, 50000 + i);
    wait_for(f, &f->readers_started, 8);
    wait_for(f, &f->waiting, 1);
    sleep_ms(100); /* for every reader to reach the wait */
    assert_int_equal(calls_of(f), 1);
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(rd[i].r, 1); /* none returned */
    set_gate(f, false);
    for (unsigned i = 0; i < 8; i++) {
        join(&rd[i]);
        assert_true(rd[i].right);
    }
    assert_int_equal(calls_of(f), 1);
    assert_int_equal(fetches_of(f, 6), 1);
    done(f, c);
}

/* A fetch that fails: every reader waiting for it gets the error, and a
 * later read fetches the block again. */
static void test_failed_fetch_reaches_every_waiter(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 1);
    struct reader rd[4];
    unsigned char buf[100];
    size_t got;

    set_gate(f, true);
    set_fail(f, 3);
    for (unsigned i = 0; i < 4; i++)
        start_reader(&rd[i], f, c, 3 * MIB + i * 1000, 100);
    wait_for(f, &f->readers_started, 4);
    wait_for(f, &f->waiting, 1);
    sleep_ms(100); /* for every reader to reach the wait */
    set_gate(f, false);
    for (unsigned i = 0; i < 4; i++) {
        join(&rd[i]);
        assert_int_equal(rd[i].r, TBM_ERR_IO);
    }
    assert_int_equal(fetches_of(f, 3), 1);
    /* The failure is not remembered: the next read tries again. */
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 3 * MIB, 0, &got), TBM_ERR_IO);
    assert_int_equal(fetches_of(f, 3), 2);
    set_fail(f, NO_BLOCK);
    read_ok(c, 3 * MIB, 100);
    assert_int_equal(fetches_of(f, 3), 3);
    /* A read-ahead fetch that fails, with nobody waiting: fetched again. */
    set_fail(f, 5);
    read_block(c, 4); /* after 3: 5 is fetched ahead */
    wait_for(f, &f->finished, 5);
    set_fail(f, NO_BLOCK);
    read_block(c, 10); /* the one transfer thread is done with 5 before it fetches 10 */
    read_block(c, 5);
    assert_int_equal(fetches_of(f, 5), 2);
    done(f, c);
}

/* A reader that waits the whole wait_limit gets TBM_ERR_TRANSFER (a
 * transfer that timed out, not a change); the block's failure is then
 * remembered for memory_ms, so the reads that follow (the kernel's retries
 * page by page) fail at once, and a read after that tries again. */
static void test_failure_remembered_briefly(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_shaped(f, (struct shape){8, 1, 2, 1, 1, 1500});
    unsigned char buf[100];
    struct timespec t0;
    size_t got;

    set_gate(f, true);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 2 * MIB, 0, &got), TBM_ERR_TRANSFER);
    assert_true(secs_since(&t0) >= 0.9);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 2 * MIB + 4096 * (size_t)i, 0, &got),
                         TBM_ERR_TRANSFER);
    assert_true(secs_since(&t0) < 0.5); /* none waited the second's wait_limit */
    assert_int_equal(calls_of(f), 1);
    set_gate(f, false);
    wait_for(f, &f->finished, 1);
    sleep_ms(100);            /* for the transfer thread to file the block */
    read_ok(c, 2 * MIB, 100); /* the transfer given up on ended well: its bytes are served */
    assert_int_equal(fetches_of(f, 2), 1);

    /* A transfer that fails: remembered, then forgotten. */
    f->fail_status = TBM_ERR_TRANSFER;
    set_fail(f, 5);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 5 * MIB, 0, &got), TBM_ERR_TRANSFER);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 5 * MIB + 8192, 0, &got),
                     TBM_ERR_TRANSFER);
    assert_int_equal(fetches_of(f, 5), 1);
    set_fail(f, NO_BLOCK);
    sleep_ms(1600);
    read_ok(c, 5 * MIB, 100);
    assert_int_equal(fetches_of(f, 5), 2);
    done(f, c);
}

/* A sequential reader's window doubles and its read-ahead comes in
 * requests of several blocks: every byte right, every block fetched once. */
static void test_read_ahead_widens(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_shaped(f, (struct shape){64, 4, 16, 4, 0, 0});

    for (uint64_t off = 0; off < SOURCE_SIZE; off += 128 << 10)
        read_ok(c, off, 128 << 10);
    for (unsigned b = 0; b < NBLOCKS; b++)
        assert_int_equal(fetches_of(f, b), 1);
    assert_true(f->longest > MIB); /* a request of several blocks */
    assert_true(calls_of(f) < NBLOCKS);
    done(f, c);
}

/* However wide a window is asked for, read-ahead takes at most three
 * quarters of the slots: nothing is fetched that the cache cannot hold. */
static void test_read_ahead_bounded_by_cache(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_shaped(f, (struct shape){8, 8, 64, 8, 0, 0});

    for (uint64_t b = 0; b < 6; b++)
        read_block(c, b);
    sleep_ms(100); /* for every read-ahead to end */
    unsigned ahead = 0;
    for (unsigned b = 6; b < NBLOCKS; b++)
        ahead += fetches_of(f, b);
    assert_true(ahead <= 6);
    assert_true(ahead >= 1);
    done(f, c);
}

/* A window just widened goes out over the idle threads at once, not as one
 * long request down one connection (a far link caps each connection). */
static void test_widened_window_split_over_threads(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_shaped(f, (struct shape){16, 8, 8, 8, 0, 0});

    pthread_mutex_lock(&f->lock);
    f->gate_from = 1; /* every read-ahead waits */
    pthread_mutex_unlock(&f->lock);
    set_gate(f, true);
    read_block(c, 0); /* blocks 1 and 2 queued ahead */
    wait_for(f, &f->waiting, 2);
    assert_int_equal(f->longest, MIB);
    set_gate(f, false);
    read_block(c, 1);
    read_block(c, 2);
    done(f, c);
}

/* Read-ahead stuck on a slow server holds every transfer thread but one: a
 * random reader's block is fetched by that one, at once. */
static void test_random_reader_not_behind_read_ahead(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_shaped(f, (struct shape){16, 4, 8, 1, 0, 0});
    struct reader rd;

    pthread_mutex_lock(&f->lock);
    f->gate_from = 2; /* blocks 2 to 9 wait */
    f->gate_to = 10;
    pthread_mutex_unlock(&f->lock);
    set_gate(f, true);
    read_block(c, 0);
    read_block(c, 1); /* 2 to 5 queued ahead */
    wait_for(f, &f->waiting, 3);
    sleep_ms(100);
    assert_int_equal(f->waiting, 3); /* the fourth thread is kept for readers */
    start_reader(&rd, f, c, 12 * MIB + 100, 5000);
    join(&rd);
    assert_true(rd.right);
    set_gate(f, false);
    done(f, c);
}

/* A range across a block boundary is held as two pieces, each the bytes of
 * its block; one piece allowed is not enough, and holds nothing. */
static void test_hold_spanning_two_blocks(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 2);
    struct tbm_source_piece p[2];
    size_t n;

    assert_int_equal(tbm_cache_hold(c, 3 * MIB - 100, 1000, 0, p, 1, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(tbm_cache_hold(c, 3 * MIB - 100, 1000, 0, p, 2, &n), 1);
    assert_int_equal(n, 2);
    assert_int_equal(p[0].len, 100);
    assert_int_equal(p[1].len, 900);
    assert_true(is_pattern(p[0].data, 3 * MIB - 100, 100));
    assert_true(is_pattern(p[1].data, 3 * MIB, 900));
    tbm_cache_release(c, p, n);
    /* The short last block, and one whole block at its start. */
    /* The short last block. */
    assert_int_equal(tbm_cache_hold(c, SOURCE_SIZE - MIB, MIB, 0, p, 2, &n), 1);
    assert_int_equal(n, 2);
    assert_int_equal(p[0].len, MIB - 12345);
    assert_int_equal(p[1].len, 12345);
    assert_true(is_pattern(p[0].data, SOURCE_SIZE - MIB, p[0].len));
    assert_true(is_pattern(p[1].data, 16 * MIB, p[1].len));
    tbm_cache_release(c, p, n);
    /* Nothing stays held: four other blocks push every one out. */
    for (uint64_t b = 5; b < 12; b += 2)
        read_block(c, b);
    read_block(c, 2);
    assert_int_equal(fetches_of(f, 2), 2);
    done(f, c);
}

/* The source changed: every read and hold fails from then on, including one
 * waiting for a fetch; a held block's bytes stay until it is released. */
static void test_invalidate(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 2);
    struct tbm_source_piece p[2];
    struct reader rd;
    unsigned char buf[10];
    size_t n, got;

    read_block(c, 2);
    assert_int_equal(tbm_cache_hold(c, 4 * MIB, 100, 0, p, 2, &n), 1);
    set_gate(f, true);
    start_reader(&rd, f, c, 8 * MIB, 100);
    wait_for(f, &f->waiting, 1);
    tbm_cache_invalidate(c);
    set_gate(f, false);
    join(&rd);
    assert_int_equal(rd.r, TBM_ERR_IO);
    assert_true(is_pattern(p[0].data, 4 * MIB, 100));
    tbm_cache_release(c, p, n);
    unsigned calls = calls_of(f);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 2 * MIB, 0, &got), TBM_ERR_IO);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 11 * MIB, 0, &got), TBM_ERR_IO);
    assert_int_equal(tbm_cache_hold(c, 2 * MIB, 10, 0, p, 2, &n), TBM_ERR_IO);
    assert_int_equal(n, 0);
    assert_int_equal(calls_of(f), calls);
    done(f, c);
}

/* A fetch that finds the source changed invalidates the cache from inside
 * the callback (as the HTTP source does): no deadlock, and the read fails. */
static void test_invalidate_from_fetch(void **state)
{
    (void)state;
    struct fake *f = fake_new();
    struct tbm_cache *c = cache_new(f, 4, 2);
    unsigned char buf[10];
    size_t got;

    read_block(c, 1);
    pthread_mutex_lock(&f->lock);
    f->changes = c;
    pthread_mutex_unlock(&f->lock);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), 9 * MIB, 0, &got), TBM_ERR_IO);
    assert_int_equal(tbm_cache_read(c, buf, sizeof(buf), MIB, 0, &got), TBM_ERR_IO);
    done(f, c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_bytes),
        cmocka_unit_test(test_evicts_least_recently_used),
        cmocka_unit_test(test_reads_ahead_of_sequential_reader),
        cmocka_unit_test(test_read_ahead_keeps_unread_blocks),
        cmocka_unit_test(test_held_block_not_evicted),
        cmocka_unit_test(test_read_waits_for_held_slot),
        cmocka_unit_test(test_nowait_never_waits),
        cmocka_unit_test(test_concurrent_readers_one_fetch),
        cmocka_unit_test(test_failed_fetch_reaches_every_waiter),
        cmocka_unit_test(test_failure_remembered_briefly),
        cmocka_unit_test(test_read_ahead_widens),
        cmocka_unit_test(test_read_ahead_bounded_by_cache),
        cmocka_unit_test(test_widened_window_split_over_threads),
        cmocka_unit_test(test_random_reader_not_behind_read_ahead),
        cmocka_unit_test(test_hold_spanning_two_blocks),
        cmocka_unit_test(test_invalidate),
        cmocka_unit_test(test_invalidate_from_fetch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
