/* The quantizers against llama.cpp itself: the reference functions of the libggml-base that
 * npm's node-llama-cpp ships (quantize_row_q4_K_ref, ..., the functions llama_model_quantize
 * calls without an importance matrix) loaded with dlopen, and our quantizers on every level
 * the CPU has, byte for byte on rows of every kind of quant_rows.h (no NaN or infinity, which
 * llama.cpp refuses), rows of 1 to 40 super-blocks; ggml's float32 to F16 conversion on 2^26
 * float32 bit patterns (every rounding case), and its F16 and BF16 to float32 on every 16-bit one
 * against our expansion. Exit 77 (skipped) when node-llama-cpp is not installed (TBMFS_LLAMA_DIR
 * moves it, as for the integration tests). */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_base.h"
#include "quant_rows.h"
#include "tbm/kernels.h"

#define MAX_BLOCKS 40 /* super-blocks of 256 per row */
#define ROWS       2500

typedef void (*ref_fn)(const float *x, void *y, int64_t k);
typedef void (*row_fn)(const void *x, void *y, int64_t n);

static const enum tbm_isa isas[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};
static int failures;

static void *must_sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);

    if (p == NULL) {
        fprintf(stderr, "libggml-base.so has no %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

/* Reports the first differing byte of a row: its block and place in it. */
static void report(const char *what, const char *level, long row, const uint8_t *got,
                   const uint8_t *want, uint32_t block_bytes)
{
    size_t i = 0;

    while (got[i] == want[i])
        i++;
    fprintf(stderr,
            "FAIL %s on %s: row %ld differs from llama.cpp at byte %zu (block %zu, byte %zu"
            " of it): 0x%02x, want 0x%02x\n",
            what, level, row, i, i / block_bytes, i % block_bytes, got[i], want[i]);
    failures++;
}

/* One type: ROWS rows of random kinds, each quantized by llama.cpp and by every level. */
static void check_type(void *lib, uint32_t type, const char *ref_name)
{
    const struct tbm_quant *q = tbm_quant_find(type);
    ref_fn ref = (ref_fn)must_sym(lib, ref_name);
    float *x = malloc(sizeof(float) * QROW_BLOCK * MAX_BLOCKS);
    size_t max_bytes = (size_t)QROW_BLOCK * MAX_BLOCKS / q->block_elems * q->block_bytes;
    uint8_t *want = malloc(max_bytes), *got = malloc(max_bytes);
    long blocks_done = 0, rows_done = 0;
    int before = failures;

    if (!x || !want || !got)
        exit(1);
    for (long r = 0; r < ROWS; r++) {
        size_t n = 1 + qrow_rnd() % (r % 10 == 0 ? MAX_BLOCKS : 4), elems = n * QROW_BLOCK;
        int kind = (int)(r % QROW_KINDS);
        /* a row of one kind, or of a kind per super-block */
        for (size_t b = 0; b < n; b++)
            qrow_block(x + b * QROW_BLOCK, r % 3 == 0 ? (int)(qrow_rnd() % QROW_KINDS) : kind);
        size_t blocks = elems / q->block_elems, bytes = blocks * q->block_bytes;
        ref(x, want, (int64_t)elems);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            if (!tbm_isa_supported(isas[i]))
                continue;
            memset(got, 0xA5, bytes);
            q->quantize(isas[i], x, blocks, got);
            if (memcmp(got, want, bytes) != 0)
                report(q->name, tbm_isa_name(isas[i]), r, got, want, q->block_bytes);
        }
        blocks_done += (long)blocks;
        rows_done++;
    }
    printf("%-5s %ld rows, %ld blocks (%ld float32): each level equal to %s: %s\n", q->name,
           rows_done, blocks_done, blocks_done * (long)q->block_elems, ref_name,
           failures == before ? "yes" : "NO");
    free(x);
    free(want);
    free(got);
}

/* ggml_fp32_to_fp16_row against tbm_f16_quantize on 2^26 float32 bit patterns: every value
 * of the top 24 bits (sign, exponent, and the mantissa down to below every rounding position
 * of an F16 result, subnormal ones included) with each of 4 low bytes (0x00, 0x01, 0x80, 0xFF,
 * so that the bits below the rounding position are nothing, a tie or more). */
static void check_f16(void *lib)
{
    static const uint32_t low[] = {0x00, 0x01, 0x80, 0xFF};
    row_fn ref = (row_fn)must_sym(lib, "ggml_fp32_to_fp16_row");
    enum { CHUNK = 1 << 20 };
    uint32_t *in = malloc(sizeof(uint32_t) * CHUNK);
    uint8_t *want = malloc(2 * CHUNK), *got = malloc(2 * CHUNK);
    int before = failures;

    if (!in || !want || !got)
        exit(1);
    for (uint32_t base = 0; base < 4u << 24 && failures == before; base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++)
            in[i] = (base + i) >> 2 << 8 | low[i & 3];
        ref(in, want, CHUNK);
        for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
            if (!tbm_isa_supported(isas[k]))
                continue;
            tbm_f16_quantize(isas[k], (const float *)(const void *)in, CHUNK, got);
            if (memcmp(got, want, 2 * CHUNK) != 0) {
                size_t i = 0;
                while (got[i] == want[i])
                    i++;
                fprintf(stderr,
                        "FAIL f16 on %s: float32 bits 0x%08" PRIx32 " give 0x%02x%02x, "
                        "llama.cpp 0x%02x%02x\n",
                        tbm_isa_name(isas[k]), in[i / 2], got[i | 1], got[i & ~(size_t)1],
                        want[i | 1], want[i & ~(size_t)1]);
                failures++;
            }
        }
    }
    printf("f16   2^26 float32 bit patterns: each level equal to ggml_fp32_to_fp16_row: %s\n",
           failures == before ? "yes" : "NO");
    free(in);
    free(want);
    free(got);
}

/* ggml's F16 and BF16 to float32 (how llama_model_quantize reads an F16 or BF16 tensor)
 * against the mount's expansion, on every 16-bit pattern but NaNs (which it refuses). */
static void check_expand(void *lib)
{
    static const struct {
        const char *name;
        enum tbm_precision prec;
        uint16_t nan_exp;
    } kinds[] = {{"ggml_fp16_to_fp32_row", TBM_FP16, 0x7C00},
                 {"ggml_bf16_to_fp32_row", TBM_BF16, 0x7F80}};
    uint16_t h[65536];
    uint32_t want[65536], got[65536];

    for (size_t k = 0; k < 2; k++) {
        row_fn ref = (row_fn)must_sym(lib, kinds[k].name);
        int before = failures;
        for (uint32_t i = 0; i < 65536; i++)
            h[i] = (uint16_t)i;
        ref(h, want, 65536);
        tbm_expand(TBM_ISA_SCALAR, kinds[k].prec, h, NULL, 0, 0, 65536, (float *)(void *)got);
        for (uint32_t i = 0; i < 65536; i++) {
            bool nan = (i & kinds[k].nan_exp) == kinds[k].nan_exp &&
                       (i & ~(uint32_t)kinds[k].nan_exp & 0x7FFF) != 0;
            if (!nan && got[i] != want[i]) {
                fprintf(stderr,
                        "FAIL %s of 0x%04" PRIx32 ": 0x%08" PRIx32 ", ours 0x%08" PRIx32 "\n",
                        kinds[k].name, i, want[i], got[i]);
                failures++;
                break;
            }
        }
        printf("%s: every non-NaN value equal to our expansion: %s\n", kinds[k].name,
               failures == before ? "yes" : "NO");
    }
}

int main(void)
{
    void *lib = ggml_base_open();

    if (lib == NULL) {
        printf("SKIP quant-oracle: no libggml-base.so of node-llama-cpp (%s); "
               "scripts/install-deps.sh installs it\n",
               dlerror());
        return 77;
    }
    check_type(lib, 12, "quantize_row_q4_K_ref");
    check_type(lib, 13, "quantize_row_q5_K_ref");
    check_type(lib, 14, "quantize_row_q6_K_ref");
    check_type(lib, 6, "quantize_row_q5_0_ref");
    check_type(lib, 7, "quantize_row_q5_1_ref");
    check_type(lib, 8, "quantize_row_q8_0_ref");
    check_expand(lib);
    check_f16(lib);
    dlclose(lib);
    return failures ? 1 : 0;
}
