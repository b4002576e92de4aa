/* Opens of the self-test files are answered by a thread of their own, one at
 * a time, so that self-tests never hold the workers that serve the rest. */
#include "fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct job {
    fuse_req_t req;
    struct fuse_file_info fi;
    const struct tbm_view *view;
    size_t t;
    struct job *next;
};

struct tbm_deferred {
    const struct tbm_fs *fs;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    struct job *head, *tail; /* FIFO: self-tests run in the order they were asked */
    bool stopping;
};

static struct job *take(struct tbm_deferred *d)
{
    pthread_mutex_lock(&d->lock);
    while (!d->head && !d->stopping)
        pthread_cond_wait(&d->ready, &d->lock);
    struct job *j = d->stopping ? NULL : d->head;
    if (j) {
        d->head = j->next;
        if (!d->head)
            d->tail = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    return j;
}

static void *run(void *arg)
{
    struct tbm_deferred *d = arg;
    struct job *j;

    while ((j = take(d))) {
        if (fuse_req_interrupted(j->req))
            fuse_reply_err(j->req, EINTR);
        else
            tbm_fs_open_result(d->fs, j->req, &j->fi, j->view, j->t);
        free(j);
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
    for (struct job **p = &d->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        if ((*p)->req != req)
            continue;
        found = *p;
        *p = found->next;
        if (d->tail == found)
            d->tail = prev;
        break;
    }
    pthread_mutex_unlock(&d->lock);
    if (found) {
        fuse_reply_err(req, EINTR);
        free(found);
    }
}

int tbm_deferred_start(const struct tbm_fs *fs, struct tbm_deferred **out)
{
    struct tbm_deferred *d = calloc(1, sizeof(*d));

    *out = NULL;
    if (!d)
        return -1;
    d->fs = fs;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->ready, NULL);
    if (tbm_fs_thread(&d->thread, run, d) != 0) {
        pthread_cond_destroy(&d->ready);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

bool tbm_deferred_push(struct tbm_deferred *d, fuse_req_t req, const struct fuse_file_info *fi,
                       const struct tbm_view *view, size_t t)
{
    struct job *j = malloc(sizeof(*j));

    if (!j)
        return false;
    *j = (struct job){.req = req, .fi = *fi, .view = view, .t = t};
    fuse_req_interrupt_func(req, on_interrupt, d);
    /* An interrupt from now on finds the job queued; one that came before
     * has marked the request, and is answered here. */
    pthread_mutex_lock(&d->lock);
    bool interrupted = fuse_req_interrupted(req);
    if (!interrupted) {
        if (d->tail)
            d->tail->next = j;
        else
            d->head = j;
        d->tail = j;
        pthread_cond_signal(&d->ready);
    }
    pthread_mutex_unlock(&d->lock);
    if (interrupted) {
        fuse_reply_err(req, EINTR);
        free(j);
    }
    return true;
}

void tbm_deferred_stop(struct tbm_deferred *d)
{
    if (!d)
        return;
    tbm_views_stop(d->fs->views);
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_signal(&d->ready);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    /* The mount is going: what was never run is answered, which also frees
     * its request. */
    for (struct job *j = d->head, *next; j; j = next) {
        next = j->next;
        fuse_reply_err(j->req, ENOTCONN);
        free(j);
    }
    pthread_cond_destroy(&d->ready);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
