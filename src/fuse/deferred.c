/* Requests that take seconds (opens of the self-test files; opens and
 * extended attributes that need a tensor's statistics; reads that wait for a
 * remote source's transfer) are answered by threads of their own, so that
 * they never hold the workers that serve the rest; the waiting requests'
 * users are taken in turn, so that one user's many requests cannot make
 * another's wait behind them, and a queue may cap the threads one user's
 * requests hold at once. Statistics asked by a request that does not wait
 * for them (a remote mount's) are computed here too, as the asking user's
 * work, one tensor a turn. */
#include "fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum job_kind { JOB_OPEN, JOB_XATTR, JOB_READ, JOB_STATS };

struct job {
    enum job_kind kind;
    fuse_req_t req;            /* NULL for statistics */
    struct fuse_file_info fi;  /* an open's, a read's */
    const struct tbm_row *row; /* an open's */
    size_t t;                  /* an open's, an extended attribute's; the statistics' next */
    long want;                 /* the statistics': tbm_views_stats_ask's */
    char *name;                /* getxattr's name; NULL: listxattr */
    size_t size;               /* an extended attribute's, a read's */
    fuse_ino_t ino;            /* a read's */
    off_t off;
    uint64_t arrival; /* breaks ties between users never served */
    struct job *next;
};

/* A user's queued requests, in the order they were asked, and when the
 * user was last served. */
struct user {
    uid_t uid;
    uint64_t served;  /* the run that last served it; 0: never */
    unsigned running; /* of its jobs, those on a thread now */
    struct job *head, *tail;
    struct user *next;
};

/* Users with nothing queued are remembered, for their turn, up to this many;
 * past it the least recently served is forgotten, and counts as never served
 * when it comes back, as it would nearly have anyway. What is kept per user
 * is then bounded by the requests queued plus this. */
#define IDLE_USERS 64

/* Threads of one queue at most. */
#define THREADS_MAX 16

struct tbm_deferred {
    const struct tbm_fs *fs;
    pthread_t threads[THREADS_MAX];
    unsigned nthreads;
    unsigned per_user; /* jobs of one user on threads at once at most; 0: any */
    pthread_mutex_t lock;
    pthread_cond_t ready;
    struct user *users; /* those with requests queued, and the idle ones remembered */
    size_t idle;
    uint64_t arrivals, runs;
    bool stopping;
};

static void free_job(struct job *j)
{
    free(j->name);
    free(j);
}

/* Forgets the least recently served idle user while too many are kept. */
static void forget_idle(struct tbm_deferred *d)
{
    while (d->idle > IDLE_USERS) {
        struct user **oldest = NULL;
        for (struct user **p = &d->users; *p; p = &(*p)->next)
            if (!(*p)->head && !(*p)->running && (!oldest || (*p)->served < (*oldest)->served))
                oldest = p;
        struct user *u = *oldest;
        *oldest = u->next;
        free(u);
        d->idle--;
    }
}

/* Removes the first job of u's queue (which take then counts running, so
 * that u is not idle). */
static struct job *pop(struct user *u)
{
    struct job *j = u->head;

    u->head = j->next;
    if (!u->head)
        u->tail = NULL;
    return j;
}

/* The next job: that of the user least recently served, the earliest asked
 * among users never served, of the users below the cap; *user its user. */
static struct job *take(struct tbm_deferred *d, struct user **user)
{
    struct user *best;

    pthread_mutex_lock(&d->lock);
    for (;;) {
        best = NULL;
        for (struct user *u = d->users; u && !d->stopping; u = u->next) {
            if (d->per_user && u->running >= d->per_user)
                continue;
            if (u->head && (!best || u->served < best->served ||
                            (u->served == best->served && u->head->arrival < best->head->arrival)))
                best = u;
        }
        if (best || d->stopping)
            break;
        pthread_cond_wait(&d->ready, &d->lock);
    }
    struct job *j = best ? pop(best) : NULL;
    if (best) {
        best->served = ++d->runs;
        best->running++;
        forget_idle(d);
    }
    *user = best;
    pthread_mutex_unlock(&d->lock);
    return j;
}

/* Appends j to u's queue, with d's lock held. */
static void append(struct tbm_deferred *d, struct user *u, struct job *j)
{
    j->arrival = ++d->arrivals;
    j->next = NULL;
    if (u->tail) {
        u->tail->next = j;
    } else {
        u->head = j;
        d->idle -= !u->running;
    }
    u->tail = j;
    pthread_cond_signal(&d->ready);
}

/* One step of a statistics job; whether it has more, and is to go back to
 * the end of its user's queue (the other users' turns come first). */
static bool stats_step(struct tbm_deferred *d, struct job *j)
{
    size_t t = j->t;
    int r = tbm_views_stats_step(d->fs->views, j->want, &t);

    /* a failed transfer: logged as a read of the file would be */
    if (r < 0 && r != TBM_ERR_STOPPED)
        tbm_fs_failed((struct tbm_fs *)d->fs, (long)t, NULL, r);
    j->t = t;
    return r > 0;
}

static void *run(void *arg)
{
    struct tbm_deferred *d = arg;
    struct user *u;
    struct job *j;

    while ((j = take(d, &u))) {
        bool again = false;
        if (j->kind == JOB_STATS)
            again = stats_step(d, j);
        else if (fuse_req_interrupted(j->req))
            fuse_reply_err(j->req, EINTR);
        else if (j->kind == JOB_OPEN)
            tbm_fs_open_file(d->fs, j->req, &j->fi, j->row, j->t);
        else if (j->kind == JOB_XATTR)
            tbm_fs_reply_xattr(d->fs, j->req, j->t, j->name, j->size);
        else
            tbm_fs_read(d->fs, j->req, j->ino, &j->fi, j->size, j->off, true);
        pthread_mutex_lock(&d->lock);
        if (again && !d->stopping) {
            append(d, u, j); /* before u counts one running fewer: never idle */
            j = NULL;
        } else if (again) { /* never computed: a later ask starts again */
            tbm_views_stats_drop(d->fs->views, j->want);
        }
        u->running--;
        d->idle += !u->head && !u->running;
        /* a user below its cap again may have jobs waiting */
        pthread_cond_broadcast(&d->ready);
        pthread_mutex_unlock(&d->lock);
        if (j)
            free_job(j);
    }
    return NULL;
}

/* The kernel waits for the answer to an open even when its caller is
 * killed: one still queued is answered at once, not after the self-tests
 * before it. libfuse calls this with the request held, either from another
 * worker (the job is then queued, or taken, or never will be) or from
 * fuse_req_interrupt_func in tbm_deferred_push before the job is queued:
 * answering only a job found in the queue keeps away from the latter, where
 * answering would free the request under libfuse's feet. req is compared,
 * never used, unless found. */
static void on_interrupt(fuse_req_t req, void *arg)
{
    struct tbm_deferred *d = arg;
    struct job *found = NULL;

    pthread_mutex_lock(&d->lock);
    for (struct user *u = d->users; u && !found; u = u->next) {
        for (struct job **p = &u->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
            if ((*p)->req != req)
                continue;
            found = *p;
            *p = found->next;
            if (u->tail == found)
                u->tail = prev;
            d->idle += !u->head && !u->running;
            break;
        }
    }
    /* only now: it may free u */
    forget_idle(d);
    pthread_mutex_unlock(&d->lock);
    if (found) {
        fuse_reply_err(req, EINTR);
        free_job(found);
    }
}

int tbm_deferred_start(const struct tbm_fs *fs, unsigned threads, unsigned per_user,
                       struct tbm_deferred **out)
{
    struct tbm_deferred *d = calloc(1, sizeof(*d));

    *out = NULL;
    if (!d)
        return -1;
    d->fs = fs;
    d->per_user = per_user;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->ready, NULL);
    threads = threads > THREADS_MAX ? THREADS_MAX : threads;
    while (d->nthreads < threads && tbm_fs_thread(&d->threads[d->nthreads], run, d) == 0)
        d->nthreads++;
    if (d->nthreads == 0) {
        pthread_cond_destroy(&d->ready);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

/* The record of uid, made (idle) if there is none; NULL when out of memory. */
static struct user *user_of(struct tbm_deferred *d, uid_t uid)
{
    struct user *u = d->users;

    while (u && u->uid != uid)
        u = u->next;
    if (u)
        return u;
    u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->uid = uid;
    u->next = d->users;
    d->users = u;
    d->idle++;
    return u;
}

/* Queues j for its user; false when out of memory (j is then the caller's). */
static bool push(struct tbm_deferred *d, struct job *j)
{
    fuse_req_t req = j->req;
    struct user *u = NULL;

    fuse_req_interrupt_func(req, on_interrupt, d);
    /* An interrupt from now on finds the job queued; one that came before
     * has marked the request, and is answered here. */
    pthread_mutex_lock(&d->lock);
    bool interrupted = fuse_req_interrupted(req);
    if (!interrupted && (u = user_of(d, fuse_req_ctx(req)->uid)))
        append(d, u, j);
    pthread_mutex_unlock(&d->lock);
    if (interrupted) {
        fuse_reply_err(req, EINTR);
        free_job(j);
    }
    return interrupted || u;
}

bool tbm_deferred_push(struct tbm_deferred *d, fuse_req_t req, const struct fuse_file_info *fi,
                       const struct tbm_row *row, size_t t)
{
    struct job *j = malloc(sizeof(*j));

    if (!j)
        return false;
    *j = (struct job){.kind = JOB_OPEN, .req = req, .fi = *fi, .row = row, .t = t};
    if (push(d, j))
        return true;
    free_job(j);
    return false;
}

bool tbm_deferred_push_xattr(struct tbm_deferred *d, fuse_req_t req, size_t t, const char *name,
                             size_t size)
{
    struct job *j = calloc(1, sizeof(*j));

    if (!j || (name && !(j->name = strdup(name)))) {
        free(j);
        return false;
    }
    j->kind = JOB_XATTR;
    j->req = req;
    j->t = t;
    j->size = size;
    if (push(d, j))
        return true;
    free_job(j);
    return false;
}

bool tbm_deferred_push_read(struct tbm_deferred *d, fuse_req_t req, fuse_ino_t ino,
                            const struct fuse_file_info *fi, size_t size, off_t off)
{
    struct job *j = malloc(sizeof(*j));

    if (!j)
        return false;
    *j =
        (struct job){.kind = JOB_READ, .req = req, .fi = *fi, .ino = ino, .size = size, .off = off};
    if (push(d, j))
        return true;
    free_job(j);
    return false;
}

bool tbm_deferred_push_stats(struct tbm_deferred *d, uid_t uid, long want)
{
    struct job *j = calloc(1, sizeof(*j));
    struct user *u = NULL;

    if (!j)
        return false;
    *j = (struct job){.kind = JOB_STATS, .want = want};
    pthread_mutex_lock(&d->lock);
    if (!d->stopping && (u = user_of(d, uid)))
        append(d, u, j);
    pthread_mutex_unlock(&d->lock);
    if (!u)
        free_job(j);
    return u != NULL;
}

void tbm_deferred_stop(struct tbm_deferred *d)
{
    if (!d)
        return;
    tbm_views_stop(d->fs->views);
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_broadcast(&d->ready);
    pthread_mutex_unlock(&d->lock);
    for (unsigned i = 0; i < d->nthreads; i++)
        pthread_join(d->threads[i], NULL);
    /* The mount is going: what was never run is answered, which also frees
     * its request. */
    for (struct user *u = d->users, *unext; u; u = unext) {
        unext = u->next;
        for (struct job *j = u->head, *next; j; j = next) {
            next = j->next;
            if (j->req)
                fuse_reply_err(j->req, ENOTCONN);
            free_job(j);
        }
        free(u);
    }
    pthread_cond_destroy(&d->ready);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
