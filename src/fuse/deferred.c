/* Opens of the self-test files are answered by a thread of their own, one at
 * a time, so that self-tests never hold the workers that serve the rest. */
#include "fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct job {
    fuse_req_t req;
    struct fuse_file_info fi;
    enum tbm_view_kind kind;
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
        tbm_fs_open_snapshot(d->fs, j->req, &j->fi, j->kind, j->t);
        free(j);
    }
    return NULL;
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
    if (pthread_create(&d->thread, NULL, run, d) != 0) {
        pthread_cond_destroy(&d->ready);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

bool tbm_deferred_push(struct tbm_deferred *d, fuse_req_t req, const struct fuse_file_info *fi,
                       enum tbm_view_kind kind, size_t t)
{
    struct job *j = malloc(sizeof(*j));

    if (!j)
        return false;
    *j = (struct job){.req = req, .fi = *fi, .kind = kind, .t = t};
    pthread_mutex_lock(&d->lock);
    if (d->tail)
        d->tail->next = j;
    else
        d->head = j;
    d->tail = j;
    pthread_cond_signal(&d->ready);
    pthread_mutex_unlock(&d->lock);
    return true;
}

void tbm_deferred_stop(struct tbm_deferred *d)
{
    if (!d)
        return;
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
