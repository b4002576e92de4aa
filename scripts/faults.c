/* Page faults from many threads, as an inference engine's lazy loading does
 * them (scripts/bench_far.py): FILE is mapped MAP_SHARED read-only and
 * THREADS threads touch one byte of every page of its CHUNK_MIB chunks,
 * taken in a random order (SEED) from one shared counter, so that each chunk
 * is touched by one thread and all of them run at once.
 *
 * Usage: faults FILE THREADS CHUNK SEED [normal|random|sequential [COPY_TO]]
 * CHUNK is in MiB, or in KiB with a k after it (256k); the word after SEED
 * is the madvise of the mapping (default normal). Prints one line:
 * "bytes N seconds S minflt N majflt N sum N". With COPY_TO, each thread
 * copies every byte of its chunks out of the mapping (the faults then come
 * from memcpy, all threads at once) and the copy is written to COPY_TO, for
 * a test to compare (tests/integration/test_stress.py). Build: gcc -O2
 * -pthread; meson builds it for the tests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const unsigned char *map;
static unsigned char *copy; /* COPY_TO's bytes, or NULL */
static size_t size, chunk, nchunks;
static size_t *order;
static atomic_size_t next;
static atomic_uint_fast64_t total;

static void *toucher(void *arg)
{
    uint64_t sum = 0;

    (void)arg;
    for (;;) {
        size_t i = atomic_fetch_add(&next, 1);
        if (i >= nchunks)
            break;
        size_t start = order[i] * chunk, end = start + chunk < size ? start + chunk : size;
        if (copy) {
            memcpy(copy + start, map + start, end - start);
            continue;
        }
        for (size_t off = start; off < end; off += 4096)
            sum += *(volatile const unsigned char *)(map + off);
    }
    atomic_fetch_add(&total, sum);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr,
                "usage: faults FILE THREADS CHUNK SEED [normal|random|sequential [COPY_TO]]\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    chunk = (size_t)atoi(argv[3]) << (strchr(argv[3], 'k') ? 10 : 20);
    unsigned seed = (unsigned)atoi(argv[4]);
    int advice = MADV_NORMAL;
    if (argc > 5 && strcmp(argv[5], "random") == 0)
        advice = MADV_RANDOM;
    else if (argc > 5 && strcmp(argv[5], "sequential") == 0)
        advice = MADV_SEQUENTIAL;
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || threads < 1 || threads > 1024 || chunk == 0) {
        perror(argv[1]);
        return 1;
    }
    size = (size_t)st.st_size;
    nchunks = (size + chunk - 1) / chunk;
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    map = m;
    madvise(m, size, advice);
    if (argc > 6 && !(copy = malloc(size ? size : 1))) {
        perror("malloc");
        return 1;
    }
    pthread_t *t = calloc((size_t)threads, sizeof(*t));
    if (!(order = malloc(nchunks * sizeof(*order))) || !t) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < nchunks; i++)
        order[i] = i;
    srand(seed);
    for (size_t i = nchunks; i > 1; i--) {
        size_t j = (size_t)rand() % i, t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, toucher, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (copy) {
        FILE *out = fopen(argv[6], "wb");
        if (!out || fwrite(copy, 1, size, out) != size || fclose(out) != 0) {
            perror(argv[6]);
            return 1;
        }
    }
    printf("bytes %zu seconds %.6f minflt %ld majflt %ld sum %llu\n", size,
           (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9, ru.ru_minflt,
           ru.ru_majflt, (unsigned long long)atomic_load(&total));
    /* freed, so that the sanitizer builds of the tests find no leak */
    free(t);
    free(order);
    free(copy);
    munmap(m, size);
    close(fd);
    return 0;
}
