/* The progress line of long jobs (opening a large model, --check reading
 * every weight): on a terminal only, never a message of the log. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

struct tbm_progress {
    void (*line)(const void *arg, double secs, char *buf, size_t len);
    const void *arg;
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done;
    pthread_t thread;
    bool started;
};

static void *show_progress(void *arg)
{
    struct tbm_progress *p = arg;
    struct timespec start, now, until;
    bool shown = false;
    char text[256];

    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_mutex_lock(&p->lock);
    for (int tick = 1; !p->done; tick++) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&p->done_cond, &p->lock, &until);
        if (p->done || tick < 2)
            continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        p->line(p->arg,
                (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9,
                text, sizeof(text));
        fprintf(stderr, "\rtbmfs: %s\033[K", text);
        shown = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (shown)
        fprintf(stderr, "\r\033[K");
    return NULL;
}

struct tbm_progress *tbm_progress_start(void (*line)(const void *arg, double secs, char *buf,
                                                     size_t len),
                                        const void *arg)
{
    struct tbm_progress *p = calloc(1, sizeof(*p));

    /* without one, the job runs all the same, unseen */
    if (!p)
        return NULL;
    p->line = line;
    p->arg = arg;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->done_cond, NULL);
    if (isatty(STDERR_FILENO))
        p->started = pthread_create(&p->thread, NULL, show_progress, p) == 0;
    return p;
}

void tbm_progress_stop(struct tbm_progress *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->done = true;
    pthread_cond_signal(&p->done_cond);
    pthread_mutex_unlock(&p->lock);
    if (p->started)
        pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->done_cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* An open reads the index, then every tensor's header: a million-entry
 * index, a manifest of many files or a far server take seconds. */
static void open_line(const void *arg, double secs, char *buf, size_t len)
{
    const struct tbm_open_progress *op = arg;
    size_t n = atomic_load(&op->tensors), done = atomic_load(&op->loaded);

    (void)secs;
    if (n == 0)
        snprintf(buf, len, "opening: reading the index");
    else
        snprintf(buf, len, "opening: %zu of %zu tensors", done < n ? done : n, n);
}

int tbm_open_with_progress(const char *source, struct tbm_open_options *opts,
                           struct tbm_model **out, char *err, size_t errlen)
{
    struct tbm_open_progress op = {0};

    opts->progress = &op;
    struct tbm_progress *p = tbm_progress_start(open_line, &op);
    int r = tbm_model_open(source, opts, out, err, errlen);
    tbm_progress_stop(p);
    opts->progress = NULL;
    return r;
}
