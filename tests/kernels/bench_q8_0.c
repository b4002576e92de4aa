/* Microbenchmark of tbm_q8_0_quantize as model.Q8_0.gguf reads use it: 64 Ki
 * float32 inputs per call (the view's step) into one reused output, from an
 * in-cache input and streamed over 256 MiB; GB/s of float32 input per level,
 * beside memcpy of the same input in the same run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tbm/kernels.h"

#define STEP         (64 * 1024) /* inputs per call */
#define STREAM_ELEMS ((size_t)64 * 1024 * 1024)
#define CACHED_CALLS 256
#define REPS         9

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

/* Seconds of one repetition over elems inputs in calls of STEP; isa < 0 is
 * memcpy of the input. In cache: the same STEP inputs again and again. */
static double one_rep(int isa, const float *in, size_t elems, int cached, uint8_t *out)
{
    double t0 = now();
    size_t calls = cached ? CACHED_CALLS : elems / STEP;

    for (size_t c = 0; c < calls; c++) {
        const float *x = cached ? in : in + c * STEP;
        if (isa < 0)
            memcpy(out, x, STEP * sizeof(float));
        else
            tbm_q8_0_quantize((enum tbm_isa)isa, x, STEP / TBM_Q8_0_ELEMS, out);
    }
    return now() - t0;
}

int main(void)
{
    static const char *const regimes[] = {"in cache", "streamed"};
    float *in = malloc(STREAM_ELEMS * sizeof(float));
    uint8_t *out = malloc(STEP * sizeof(float));
    uint64_t s = 0x243F6A8885A308D3u;

    if (!in || !out)
        return 1;
    for (size_t i = 0; i < STREAM_ELEMS; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        in[i] = (float)((int32_t)(s >> 32)) * 1e-10f;
    }
    printf("tbm_q8_0_quantize, GB/s of float32 input (median of %d)\n", REPS);
    for (int cached = 1; cached >= 0; cached--) {
        size_t bytes = (cached ? (size_t)CACHED_CALLS * STEP : STREAM_ELEMS) * sizeof(float);
        for (int isa = -1; isa <= TBM_ISA_AVX512; isa++) {
            double t[REPS];
            if (isa >= 0 && !tbm_isa_supported((enum tbm_isa)isa))
                continue;
            for (int r = 0; r < REPS; r++)
                t[r] = one_rep(isa, in, STREAM_ELEMS, cached, out);
            qsort(t, REPS, sizeof t[0], cmp_double);
            printf("  %-8s %-7s %6.2f GB/s\n", regimes[!cached],
                   isa < 0 ? "memcpy" : tbm_isa_name((enum tbm_isa)isa),
                   (double)bytes / t[REPS / 2] / 1e9);
        }
    }
    free(in);
    free(out);
    return 0;
}
