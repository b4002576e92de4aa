/* The parallel runner (parallel.h): a span per CPU, each on a thread of its
 * own but the first, which the caller runs. */
#include "parallel.h"

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

/* Below this many items one thread does the work sooner than several. */
#define PARALLEL_MIN 4096
#define PARALLEL_MAX 8

struct span {
    int (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    size_t begin, end;
    int status;
};

static void *run_span(void *arg)
{
    struct span *s = arg;
    s->status = s->fn(s->ctx, s->begin, s->end);
    return NULL;
}

int tbm_for_each_span(size_t n, int (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    long cpus = n < PARALLEL_MIN ? 1 : sysconf(_SC_NPROCESSORS_ONLN);
    size_t k = cpus < 1 ? 1 : cpus > PARALLEL_MAX ? PARALLEL_MAX : (size_t)cpus;
    struct span spans[PARALLEL_MAX];
    pthread_t threads[PARALLEL_MAX];
    bool started[PARALLEL_MAX] = {false};
    int r = 0;

    for (size_t i = 0; i < k; i++)
        spans[i] = (struct span){fn, ctx, n * i / k, n * (i + 1) / k, 0};
    /* a thread that cannot be started has its span run here */
    for (size_t i = 1; i < k; i++)
        started[i] = pthread_create(&threads[i], NULL, run_span, &spans[i]) == 0;
    run_span(&spans[0]);
    for (size_t i = 1; i < k; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            run_span(&spans[i]);
    }
    for (size_t i = 0; i < k && r == 0; i++)
        r = spans[i].status;
    return r;
}
