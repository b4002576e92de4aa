/* Benchmark of the N:M sparse matmul against OpenBLAS on the dense float32
 * expansion: 4096 x 4096 fp16 at 2:4 and 1:4, batch 1 (sgemv) and 8 (sgemm).
 * Usage: bench_spmm [runs]; each time printed is the median of runs. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spmm_internal.h"
#include "tbm/kernels.h"

#define ROWS 4096
#define COLS 4096
#define M    4

struct tensor {
    uint32_t n;
    uint16_t *weights;
    uint8_t *mask;
    float *dense;
    struct tbm_nm_matrix *packed;
    double pack_seconds;
};

static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);

    z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9u;
    z = (z ^ z >> 27) * 0x94D049BB133111EBu;
    return z ^ z >> 31;
}

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, compare_doubles);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* An n:4 fp16 tensor with normal values in (-2, 2); pruned weights are
 * stored as 0 like a pruning tool writes them. */
static int make_tensor(struct tensor *t, uint32_t n, uint64_t seed)
{
    uint64_t count = (uint64_t)ROWS * COLS;
    double t0;

    memset(t, 0, sizeof *t);
    t->n = n;
    t->weights = malloc(count * sizeof *t->weights);
    t->mask = malloc(count / M);
    t->dense = malloc(count * sizeof *t->dense);
    if (t->weights == NULL || t->mask == NULL || t->dense == NULL)
        return -1;
    for (uint64_t g = 0; g < count / M; g++) {
        uint8_t word = 0;

        while ((uint32_t)__builtin_popcount(word) < n)
            word |= (uint8_t)(1u << (next_random(&seed) % M));
        t->mask[g] = word;
        for (uint32_t j = 0; j < M; j++) {
            uint64_t r = next_random(&seed);
            uint16_t h = (uint16_t)((r & 1) << 15 | (10 + (r >> 1) % 6) << 10 | (r >> 8 & 0x3FF));
            float v = (float)ldexp(0x400 | (h & 0x3FF), (h >> 10 & 0x1F) - 25) * (r & 1 ? -1 : 1);
            int kept = word >> j & 1;

            t->weights[g * M + j] = kept ? h : 0;
            t->dense[g * M + j] = kept ? v : 0.0f;
        }
    }
    t0 = now();
    if (tbm_nm_pack(TBM_FP16, t->weights, t->mask, M, ROWS, COLS, &t->packed) != 0)
        return -1;
    t->pack_seconds = now() - t0;
    return 0;
}

static void free_tensor(struct tensor *t)
{
    free(t->weights);
    free(t->mask);
    free(t->dense);
    tbm_nm_free(t->packed);
}

/* Bytes the sparse product streams from the compressed form. */
static double sparse_bytes(const struct tbm_nm_matrix *w)
{
    double lanes = (double)w->steps * TBM_NM_LANES;

    return lanes * (1 + (w->kind == TBM_NM_F32 ? 4 : 2)) + (double)w->blocks * w->windows +
           (double)w->blocks * sizeof(uint64_t);
}

static void dense_product(const struct tensor *t, const float *x, uint32_t batch, float *y,
                          int threads)
{
    openblas_set_num_threads(threads);
    if (batch == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, ROWS, COLS, 1.0f, t->dense, COLS, x, 1, 0.0f, y,
                    1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, (int)batch, COLS, 1.0f,
                    t->dense, COLS, x, (int)batch, 0.0f, y, (int)batch);
}

/* Median seconds of each contender, runs interleaved so that all see the
 * same machine state. Column 0..2: scalar, avx2, avx512 (0 when the CPU
 * lacks it); 3, 4: OpenBLAS on 1 and 2 threads. */
#define CONTENDERS 5

static void time_all(const struct tensor *t, const float *x, uint32_t batch, float *y, int runs,
                     double *out)
{
    double *samples = malloc(sizeof(double) * CONTENDERS * (size_t)runs);

    if (samples == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int r = -1; r < runs; r++) {
        for (int c = 0; c < CONTENDERS; c++) {
            double t0;

            if (c <= TBM_ISA_AVX512 && !tbm_isa_supported((enum tbm_isa)c))
                continue;
            t0 = now();
            if (c <= TBM_ISA_AVX512)
                tbm_spmm((enum tbm_isa)c, t->packed, x, batch, y);
            else
                dense_product(t, x, batch, y, c - TBM_ISA_AVX512);
            if (r >= 0)
                samples[c * runs + r] = now() - t0;
        }
    }
    for (int c = 0; c < CONTENDERS; c++) {
        out[c] = c <= TBM_ISA_AVX512 && !tbm_isa_supported((enum tbm_isa)c)
                     ? 0
                     : median(samples + c * runs, runs);
    }
    free(samples);
}

/* Largest |sparse - dense| over y, relative to the largest |dense|. */
static double relative_error(const struct tensor *t, const float *x, uint32_t batch,
                             enum tbm_isa isa)
{
    size_t count = (size_t)ROWS * batch;
    float *ys = malloc(count * sizeof *ys), *yd = malloc(count * sizeof *yd);
    double err = 0, scale = 0;

    if (ys == NULL || yd == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tbm_spmm(isa, t->packed, x, batch, ys);
    dense_product(t, x, batch, yd, 1);
    for (size_t i = 0; i < count; i++) {
        err = fmax(err, fabs((double)ys[i] - yd[i]));
        scale = fmax(scale, fabs((double)yd[i]));
    }
    free(ys);
    free(yd);
    return err / scale;
}

static void report(const struct tensor *t, uint32_t batch, int runs)
{
    static const char *names[CONTENDERS] = {"scalar", "avx2", "avx512"};
    uint64_t kept = (uint64_t)ROWS * COLS / M * t->n;
    float *x = malloc((size_t)COLS * batch * sizeof *x);
    float *y = malloc((size_t)ROWS * batch * sizeof *y);
    double seconds[CONTENDERS];
    uint64_t seed = 7 + batch;

    if (x == NULL || y == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)COLS * batch; i++)
        x[i] = (float)(ldexp((double)(next_random(&seed) >> 40), -23) - 1.0);
    time_all(t, x, batch, y, runs, seconds);
    for (int c = 0; c <= TBM_ISA_AVX512; c++) {
        if (seconds[c] == 0)
            continue;
        printf("%u:%u  %5u  %-6s  %9.3f  %9.3f  %9.3f  %7.2fx  %7.2fx  %6.2f  %6.2f  %.1e\n", t->n,
               M, batch, names[c], seconds[c] * 1e3, seconds[3] * 1e3, seconds[4] * 1e3,
               seconds[3] / seconds[c], seconds[4] / seconds[c],
               (double)ROWS * COLS * sizeof(float) / sparse_bytes(t->packed),
               (double)ROWS * COLS / (double)kept, relative_error(t, x, batch, (enum tbm_isa)c));
    }
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 15;
    static const uint32_t kept_per_group[] = {2, 1};
    static const uint32_t batches[] = {1, 8};

    if (runs < 1) {
        fprintf(stderr, "usage: bench_spmm [runs]\n");
        return 2;
    }
    printf("%dx%d fp16, OpenBLAS core %s, median of %d runs, times in ms\n", ROWS, COLS,
           openblas_get_corename(), runs);
    printf("N:M  batch  sparse  sparse_ms  blas1t_ms  blas2t_ms  vs_blas1  vs_blas2  bytes   "
           "flops   rel_err\n");
    for (size_t i = 0; i < sizeof kept_per_group / sizeof kept_per_group[0]; i++) {
        struct tensor t;

        if (make_tensor(&t, kept_per_group[i], 1 + i) != 0) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            report(&t, batches[b], runs);
        printf("%u:%u  pack %.1f ms, %.1f MiB packed vs %.1f MiB dense fp32\n", t.n, M,
               t.pack_seconds * 1e3, sparse_bytes(t.packed) / 1048576.0,
               (double)ROWS * COLS * sizeof(float) / 1048576.0);
        free_tensor(&t);
    }
    return 0;
}
