/* Microbenchmark of tbm_expand as dense.f32 reads use it: 1 MiB output chunks
 * into one reused buffer, like a FUSE reply, from in-cache and streamed input;
 * output GB/s per path beside memcpy of the same output in the same run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tbm/kernels.h"

#define MIB          (1024 * 1024)
#define CHUNK_ELEMS  (MIB / 4) /* float32 outputs per call */
#define STREAM_BYTES (256 * (size_t)MIB)
#define CACHED_CALLS 64 /* calls per in-cache repetition */
#define CACHED_REPS  15
#define STREAM_REPS  7

enum regime { IN_CACHE, STREAMED };

struct run {
    enum regime regime;
    enum tbm_precision prec;
    const uint8_t *weights;
    const uint8_t *mask; /* NULL: dense */
    float *out;
};

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

/* Elements of input a regime walks through: one chunk again and again, or
 * STREAM_BYTES of input once. */
static size_t regime_elems(enum regime regime, enum tbm_precision prec)
{
    return regime == IN_CACHE ? CHUNK_ELEMS : STREAM_BYTES / tbm_precision_size(prec);
}

/* Seconds of one repetition and the output bytes it wrote; isa < 0 means
 * memcpy of the same output size from the same input bytes. */
static double one_rep(const struct run *r, int isa, size_t *bytes)
{
    size_t elems = regime_elems(r->regime, r->prec);
    size_t size = tbm_precision_size(r->prec);
    int calls = r->regime == IN_CACHE ? CACHED_CALLS : (int)(elems / CHUNK_ELEMS);
    double t0 = now();

    for (int c = 0; c < calls; c++) {
        uint64_t first = r->regime == IN_CACHE ? 0 : (uint64_t)c * CHUNK_ELEMS;

        if (isa < 0)
            memcpy(r->out, r->weights + first * 4 % STREAM_BYTES, (size_t)MIB);
        else
            tbm_expand((enum tbm_isa)isa, r->prec, r->weights + first * size,
                       r->mask ? r->mask + first / 4 : NULL, 4, first, CHUNK_ELEMS, r->out);
    }
    *bytes = (size_t)calls * MIB;
    return now() - t0;
}

struct row {
    double memcpy_gbps;
    double path[3]; /* by enum tbm_isa; 0 when unsupported */
};

/* Median output GB/s of memcpy and of every supported path. Repetitions go
 * round-robin over them, so that each ratio compares the same moments of a
 * machine that other work may share. */
static void measure(const struct run *r, struct row *w)
{
    int reps = r->regime == IN_CACHE ? CACHED_REPS : STREAM_REPS;
    double rate[4][CACHED_REPS];
    int ways[4], n = 0; /* -1 for memcpy, else the isa */
    size_t bytes;

    ways[n++] = -1;
    for (int isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++)
        if (tbm_isa_supported((enum tbm_isa)isa))
            ways[n++] = isa;
    for (int i = 0; i < n; i++)
        one_rep(r, ways[i], &bytes); /* warm-up: caches, page tables, predictors */
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < n; i++) {
            double s = one_rep(r, ways[i], &bytes);

            rate[i][rep] = (double)bytes / s / 1e9;
        }
    }
    *w = (struct row){0, {0, 0, 0}};
    w->memcpy_gbps = median(rate[0], reps);
    for (int i = 1; i < n; i++)
        w->path[ways[i]] = median(rate[i], reps);
}

static const char *const prec_names[] = {"fp32", "fp16", "bf16", "fp64"};

static void print_row(enum regime regime, enum tbm_precision prec, bool masked, const struct row *w)
{
    printf("%-12s %-4s %-5s %7.1f %7.1f", regime == IN_CACHE ? "in-cache" : "out-of-cache",
           prec_names[prec], masked ? "2:4" : "dense", w->memcpy_gbps, w->path[TBM_ISA_SCALAR]);
    for (int isa = TBM_ISA_AVX2; isa <= TBM_ISA_AVX512; isa++) {
        if (w->path[isa] > 0)
            printf(" %7.1f", w->path[isa]);
        else
            printf(" %7s", "-");
    }
    for (int isa = TBM_ISA_AVX2; isa <= TBM_ISA_AVX512; isa++)
        printf(" %7.2f", w->path[isa] / w->path[TBM_ISA_SCALAR]);
    for (int isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++)
        printf(" %7.2f", w->path[isa] / w->memcpy_gbps);
    printf("\n");
}

/* The goals, as ratios of a row; prints one verdict per goal. */
static int check_goals(enum regime regime, enum tbm_precision prec, bool masked,
                       const struct row *w)
{
    const char *name = regime == IN_CACHE ? "in-cache" : "out-of-cache";
    double target = prec == TBM_FP32 ? 0.85 : prec == TBM_FP64 ? 0.3 : 1.3;
    int missed = 0;

    if (masked && w->path[TBM_ISA_AVX512] > 0) {
        double ratio = w->path[TBM_ISA_AVX512] / w->memcpy_gbps;

        printf("goal %-12s %s 2:4 avx512/memcpy >= %.2f: %.2f %s\n", name, prec_names[prec], target,
               ratio, ratio >= target ? "met" : "MISSED");
        missed += ratio < target;
    }
    for (int isa = TBM_ISA_AVX2; isa <= TBM_ISA_AVX512; isa++) {
        double ratio = w->path[isa] / w->path[TBM_ISA_SCALAR];

        if (w->path[isa] == 0 || ratio >= 2.5)
            continue;
        printf("goal %-12s %s %s %s/scalar >= 2.5: %.2f MISSED\n", name, prec_names[prec],
               masked ? "2:4" : "dense", tbm_isa_name((enum tbm_isa)isa), ratio);
        missed++;
    }
    return missed;
}

/* Random 2:4 mask bytes (with junk in the high nibble, which means nothing). */
static void fill_mask_24(uint8_t *mask, size_t bytes)
{
    static const uint8_t pairs[6] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
    uint64_t x = 88172645463325252u;

    for (size_t i = 0; i < bytes; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        mask[i] = (uint8_t)(pairs[x % 6] | (x >> 8 & 0xF0));
    }
}

/* Values like trained weights, normal numbers of magnitude 2^-10 .. 2^-2 with
 * random signs and mantissas, in the stored precision. Random bits instead
 * would be mostly NaNs, infinities and fp64 overflows, which some CPUs
 * convert at other speeds. */
static void fill_weights(enum tbm_precision prec, uint8_t *w, size_t bytes)
{
    size_t size = tbm_precision_size(prec);
    uint64_t x = 0x2545F4914F6CDD1Du;

    for (size_t i = 0; i < bytes; i += size) {
        uint64_t sign, exp, v;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sign = x >> 63;
        exp = x >> 60 & 7; /* exponent -3 .. -10 */
        switch (prec) {
        case TBM_FP16:
            v = sign << 15 | (12 - exp) << 10 | (x & 0x3FF);
            break;
        case TBM_BF16:
            v = sign << 15 | (124 - exp) << 7 | (x & 0x7F);
            break;
        case TBM_FP64:
            v = sign << 63 | (1020 - exp) << 52 | (x & 0xFFFFFFFFFFFFF);
            break;
        default:
            v = sign << 31 | (124 - exp) << 23 | (x & 0x7FFFFF);
            break;
        }
        memcpy(w + i, &v, size); /* little-endian: the low bytes */
    }
}

int main(void)
{
    size_t mask_bytes = STREAM_BYTES / 2 / 4; /* fp16 has the most elements */
    uint8_t *weights = malloc(STREAM_BYTES);
    uint8_t *mask = malloc(mask_bytes);
    float *out = malloc(MIB);
    int missed = 0;

    if (!weights || !mask || !out) {
        fprintf(stderr, "bench_expand: out of memory\n");
        return 1;
    }
    fill_mask_24(mask, mask_bytes);
    memset(out, 0, MIB);

    printf("tbm_expand: 1 MiB float32 output chunks into one reused buffer; GB/s of output,\n"
           "medians of %d (in-cache) / %d (out-of-cache) repetitions.\n"
           "in-cache: the same chunk's input each call (fp32 1 MiB, fp16/bf16 512 KiB, fp64 "
           "2 MiB);\nout-of-cache: %zu MiB of input streamed. memcpy: 1 MiB copies from the "
           "same input.\n\n",
           CACHED_REPS, STREAM_REPS, STREAM_BYTES / MIB);
    printf("%-12s %-4s %-5s %7s %7s %7s %7s %7s %7s %7s %7s %7s\n", "regime", "prec", "mask",
           "memcpy", "scalar", "avx2", "avx512", "a2/sc", "a512/sc", "sc/mc", "a2/mc", "a512/mc");
    for (int prec = TBM_FP32; prec <= TBM_FP64; prec++) {
        fill_weights((enum tbm_precision)prec, weights, STREAM_BYTES);
        for (int regime = IN_CACHE; regime <= STREAMED; regime++) {
            for (int masked = 1; masked >= 0; masked--) {
                struct run r = {(enum regime)regime, (enum tbm_precision)prec, weights,
                                masked ? mask : NULL, out};
                struct row w;

                measure(&r, &w);
                print_row(r.regime, r.prec, masked, &w);
                fflush(stdout);
                missed += check_goals(r.regime, r.prec, masked, &w);
            }
        }
    }
    printf("\n%d goal%s missed\n", missed, missed == 1 ? "" : "s");
    free(out);
    free(mask);
    free(weights);
    return 0;
}
