/* Microbenchmark of the quantizers of model.Q4_K_M.gguf (Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, F16,
 * and Q8_0 beside them): GB/s of float32 input per level, 64 Ki values per call (a view's
 * step) over 32 MiB of gaussian weights, medians of REPS runs side by side; and, when
 * node-llama-cpp is installed, llama.cpp's own reference function on the same input in the
 * same run (what llama_model_quantize calls, one thread). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml_base.h"
#include "quant_rows.h"
#include "tbm/kernels.h"

#define STEP  (64 * 1024)
#define ELEMS ((size_t)8 * 1024 * 1024)
#define REPS  5

typedef void (*ref_fn)(const float *x, void *y, int64_t k);

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

/* Seconds for elems inputs in calls of STEP: level isa of q, or ref when it is not NULL. */
static double one_rep(const struct tbm_quant *q, int isa, ref_fn ref, const float *in, size_t elems,
                      uint8_t *out)
{
    double t0 = now();

    for (size_t c = 0; c < elems / STEP; c++) {
        if (ref)
            ref(in + c * STEP, out, STEP);
        else
            q->quantize((enum tbm_isa)isa, in + c * STEP, STEP / q->block_elems, out);
    }
    return now() - t0;
}

/* Median GB/s of REPS runs over elems inputs. */
static double rate(const struct tbm_quant *q, int isa, ref_fn ref, const float *in, size_t elems,
                   uint8_t *out)
{
    double t[REPS];

    for (int r = 0; r < REPS; r++)
        t[r] = one_rep(q, isa, ref, in, elems, out);
    qsort(t, REPS, sizeof t[0], cmp_double);
    return (double)elems * sizeof(float) / t[REPS / 2] / 1e9;
}

int main(void)
{
    static const struct {
        uint32_t type;
        const char *ref;
    } types[] = {{12, "quantize_row_q4_K_ref"}, {13, "quantize_row_q5_K_ref"},
                 {14, "quantize_row_q6_K_ref"}, {6, "quantize_row_q5_0_ref"},
                 {7, "quantize_row_q5_1_ref"},  {8, "quantize_row_q8_0_ref"},
                 {1, "ggml_fp32_to_fp16_row"}};
    void *lib = ggml_base_open();
    float *in = malloc(ELEMS * sizeof(float));
    uint8_t *out = malloc(STEP * sizeof(float));

    if (!in || !out)
        return 1;
    for (size_t i = 0; i < ELEMS; i++)
        in[i] = 0.02f * qrow_normal();
    printf("GB/s of float32 input, %zu MiB in calls of %d values, median of %d%s\n",
           ELEMS * sizeof(float) >> 20, STEP, REPS,
           lib ? "" : " (no libggml-base.so: llama.cpp's column left out)");
    printf("  %-5s %9s %9s %9s %9s %9s\n", "type", "llama.cpp", "scalar", "avx2", "avx512",
           "best/llama");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct tbm_quant *q = tbm_quant_find(types[t].type);
        /* the slow ones on a quarter of the input, so that a run stays short */
        size_t elems = types[t].type >= 12 ? ELEMS / 4 : ELEMS;
        ref_fn ref = lib ? (ref_fn)dlsym(lib, types[t].ref) : NULL;
        double r_ref = ref ? rate(q, 0, ref, in, elems, out) : 0, best = 0;
        printf("  %-5s ", q->name);
        if (ref)
            printf("%9.3f ", r_ref);
        else
            printf("%9s ", "-");
        for (int isa = TBM_ISA_SCALAR; isa <= TBM_ISA_AVX512; isa++) {
            if (!tbm_isa_supported((enum tbm_isa)isa)) {
                printf("%9s ", "-");
                continue;
            }
            double r = rate(q, isa, NULL, in, elems, out);
            best = r > best ? r : best;
            printf("%9.3f ", r);
        }
        if (ref)
            printf("%9.1fx", best / r_ref);
        printf("\n");
        fflush(stdout);
    }
    free(in);
    free(out);
    return 0;
}
