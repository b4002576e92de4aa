/* Benchmark of the statistics kernels as stats.json uses them: the one pass
 * of fp16 over 64 Mi elements with a 2:4 mask, beside tbm_expand of the same
 * data in 1 MiB output chunks; GB/s of input (weights and mask) per path.
 * With a directory argument it also writes the data there (weights.f16,
 * mask.u8) and the results (stats.txt), for scripts/bench_stats_numpy.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tbm/kernels.h"
#include "tbm/stats.h"

#define ELEMS       (UINT64_C(64) << 20)
#define CHUNK_ELEMS (256 * 1024) /* 1 MiB of float32 per tbm_expand call */
#define REPS        7

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Normal fp16 values of magnitude 2^-10 .. 2^-2 with random signs, like
 * trained weights (as bench_expand), and random 2:4 mask bytes. */
static void fill(uint16_t *w, uint8_t *mask)
{
    static const uint8_t pairs[6] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
    uint64_t x = 0x2545F4914F6CDD1Du;

    for (uint64_t i = 0; i < ELEMS; i++) {
        uint64_t r = xorshift(&x);

        w[i] = (uint16_t)((r >> 63) << 15 | (12 - (r >> 60 & 7)) << 10 | (r & 0x3FF));
    }
    for (uint64_t i = 0; i < ELEMS / 4; i++)
        mask[i] = pairs[xorshift(&x) % 6];
}

/* Everything stats.json needs of the weights, the table's set-up and
 * release included. */
static double run_stats(enum tbm_isa isa, const uint16_t *w, const uint8_t *mask,
                        struct tbm_stats_result *r)
{
    struct tbm_stats_acc a;
    double t0 = now();

    if (tbm_stats_init(&a, TBM_FP16) < 0) {
        fprintf(stderr, "bench_stats: out of memory\n");
        exit(1);
    }
    tbm_stats_scan(isa, TBM_FP16, w, mask, 4, ELEMS, &a);
    tbm_stats_finish(&a, NULL, r);
    tbm_stats_free(&a);
    return now() - t0;
}

static double run_expand(enum tbm_isa isa, const uint16_t *w, const uint8_t *mask, float *out)
{
    double t0 = now();

    for (uint64_t first = 0; first < ELEMS; first += CHUNK_ELEMS)
        tbm_expand(isa, TBM_FP16, w + first, mask + first / 4, 4, first, CHUNK_ELEMS, out);
    return now() - t0;
}

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "bench_stats: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint16_t *w = malloc(ELEMS * 2);
    uint8_t *mask = malloc(ELEMS / 4);
    float *out = malloc(CHUNK_ELEMS * sizeof *out);
    double in_gb = (double)(ELEMS * 2 + ELEMS / 4) / 1e9;
    struct tbm_stats_result r;

    if (!w || !mask || !out) {
        fprintf(stderr, "bench_stats: out of memory\n");
        return 1;
    }
    fill(w, mask);
    printf("64 Mi fp16 elements, 2:4 mask (%.0f MB of input); medians of %d runs\n", in_gb * 1e3,
           REPS);
    printf("%-7s %10s %8s %10s %8s %12s\n", "path", "stats ms", "GB/s", "expand ms", "GB/s",
           "stats/expand");
    for (int isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++) {
        double ts[REPS], te[REPS], s, e;

        if (!tbm_isa_supported((enum tbm_isa)isa))
            continue;
        run_stats((enum tbm_isa)isa, w, mask, &r); /* warm-up */
        run_expand((enum tbm_isa)isa, w, mask, out);
        /* round-robin, so that both see the same moments of the machine */
        for (int k = 0; k < REPS; k++) {
            ts[k] = run_stats((enum tbm_isa)isa, w, mask, &r);
            te[k] = run_expand((enum tbm_isa)isa, w, mask, out);
        }
        s = median(ts, REPS);
        e = median(te, REPS);
        printf("%-7s %10.1f %8.2f %10.1f %8.2f %12.2f\n", tbm_isa_name((enum tbm_isa)isa), s * 1e3,
               in_gb / s, e * 1e3, in_gb / e, s / e);
        fflush(stdout);
    }
    printf("kept %llu mean %.17g std %.17g abs_mean %.17g min %.9g max %.9g\n",
           (unsigned long long)r.kept, r.mean, r.std, r.abs_mean, r.min, r.max);
    if (argc > 1) {
        char text[8192];
        int n = snprintf(text, sizeof text,
                         "kept %llu\nmean %.17g\nstd %.17g\nabs_mean %.17g\nmin %.17g\nmax "
                         "%.17g\ncounts",
                         (unsigned long long)r.kept, r.mean, r.std, r.abs_mean, r.min, r.max);

        for (int b = 0; b < TBM_STATS_BINS; b++)
            n += snprintf(text + n, sizeof text - (size_t)n, " %llu",
                          (unsigned long long)r.hist_counts[b]);
        n += snprintf(text + n, sizeof text - (size_t)n, "\n");
        write_file(argv[1], "weights.f16", w, ELEMS * 2);
        write_file(argv[1], "mask.u8", mask, ELEMS / 4);
        write_file(argv[1], "stats.txt", text, (size_t)n);
    }
    free(out);
    free(mask);
    free(w);
    return 0;
}
