/* Compute kernels over memory ranges: dense expansion, masking in place, mask
 * statistics, N:M sparse matmul and the quantizations of the GGUF files. Pure functions (no I/O);
 * each has a portable C reference and AVX2/AVX-512 paths that must match it bit for bit. */
#ifndef TBM_KERNELS_H
#define TBM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stored weight precision, as coded in the blob header's precision byte. */
enum tbm_precision {
    TBM_FP32 = 0,
    TBM_FP16 = 1,
    TBM_BF16 = 2,
    TBM_FP64 = 3,
};

/* Bytes per stored element of a precision; 0 for an unknown code. */
size_t tbm_precision_size(unsigned code);

/* The precision's name in an index ("fp32", "fp16", "bf16", "fp64"), or
 * NULL for an unknown code. */
const char *tbm_precision_name(unsigned code);

/* Instruction-set level a kernel runs on. */
enum tbm_isa {
    TBM_ISA_SCALAR = 0,
    TBM_ISA_AVX2 = 1,   /* AVX2 + F16C + FMA */
    TBM_ISA_AVX512 = 2, /* AVX-512 F, BW, VL, DQ */
};

/* "scalar", "avx2" or "avx512". */
const char *tbm_isa_name(enum tbm_isa isa);

/* Whether this CPU (and OS) can run kernels of level isa. */
bool tbm_isa_supported(enum tbm_isa isa);

/* The level to use: the best supported one, or the one named by env (the value
 * of TBMFS_KERNELS, may be NULL). Returns 0, or -1 when env names an unknown
 * level or one the CPU lacks. */
int tbm_isa_select(const char *env, enum tbm_isa *out);

/* Bytes of one group's mask word for group size m (1..32): 1, 2 or 4. */
static inline uint32_t tbm_mask_word_bytes(uint32_t m)
{
    return m <= 8 ? 1 : m <= 16 ? 2 : 4;
}

/* Expands count elements, starting at flat element index first, to float32.
 *
 * weights points at element first's stored value (any alignment). With mask
 * NULL every element is kept; otherwise m is 1..32 and mask points at the mask
 * word of group first / m, and element i is kept when bit (i % m) of its
 * group's little-endian word is set. Pruned elements become +0.0. For
 * TBM_FP32 out may be weights itself: the expansion is then done in place. */
void tbm_expand(enum tbm_isa isa, enum tbm_precision prec, const void *weights, const uint8_t *mask,
                uint32_t m, uint64_t first, size_t count, float *out);

/* Zeroes, in place, the pruned elements of count elements starting at flat
 * element index first (all their bytes: -0.0 and NaN become +0.0), leaving
 * kept ones as they are: the stored precision with the mask applied. weights,
 * mask and m are as for tbm_expand (mask not NULL). Returns whether any pruned
 * element had a bit set, that is whether the bytes changed; a vector of
 * elements none of which needs a change is not written. */
bool tbm_mask_apply(enum tbm_isa isa, enum tbm_precision prec, void *weights, const uint8_t *mask,
                    uint32_t m, uint64_t first, size_t count);

/* Counters that header.json reports. */
struct tbm_mask_stats {
    uint64_t kept;           /* elements whose mask bit is set */
    uint64_t groups_over_n;  /* groups with more than n bits set */
    uint64_t mask_conflicts; /* pruned elements whose stored value is not +-0.0 */
};

/* Adds the counters of count elements to acc. weights and mask start at a
 * group boundary; count is a multiple of m unless the range ends the tensor
 * (a partial last group). m is 1..32; bits at positions >= m or past the last
 * element are ignored. */
void tbm_mask_count(enum tbm_isa isa, enum tbm_precision prec, const void *weights,
                    const uint8_t *mask, uint32_t n, uint32_t m, uint64_t count,
                    struct tbm_mask_stats *acc);

/* A rows x cols matrix in compressed N:M form: the kept values of each group
 * and their positions inside it. Groups follow the flat element index, so a
 * group may straddle two rows. */
struct tbm_nm_matrix;

/* Builds the compressed form from stored weights and mask (both starting at
 * element 0; m 1..32; mask NULL keeps every element). It follows the mask
 * whatever it holds: a group may keep any number of elements. Returns 0, or
 * -1 for an unknown precision, an m out of range, sizes that overflow, or
 * when out of memory. */
int tbm_nm_pack(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                uint64_t rows, uint64_t cols, struct tbm_nm_matrix **out);

void tbm_nm_free(struct tbm_nm_matrix *w);

/* y = W x, where x is cols x batch and y rows x batch, both row-major float32.
 * Reads only the kept values. Each output adds its row's kept products in
 * increasing column order, one fused multiply-add each; a NaN result is
 * written as the canonical quiet NaN, so every path is bit-identical. */
void tbm_spmm(enum tbm_isa isa, const struct tbm_nm_matrix *w, const float *x, uint32_t batch,
              float *y);

/* Elements of a Q8_0 block and its bytes: an F16 scale d, then 32 int8 q. */
#define TBM_Q8_0_ELEMS 32
#define TBM_Q8_0_BYTES 34

/* Quantizes blocks * 32 float32 values at x to blocks Q8_0 blocks at out, as
 * llama.cpp's quantize_row_q8_0_ref writes them (docs/MOUNT_LAYOUT.md,
 * "llama.cpp views"): per block amax = max |x|, d = amax / 127, id = 1 / d (0
 * when d is 0), q = roundf(x * id) (halves away from zero), d as F16 rounded
 * to nearest even. A block holding a NaN or an infinity gets d = 0x7E00 (the
 * F16 quiet NaN) and every q 0. Any alignment; x and out do not overlap. */
void tbm_q8_0_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);

/* The types of llama.cpp's Q4_K_M mixture and its fall-backs (model.Q4_K_M.gguf), each as
 * llama.cpp's reference quantizer of the type writes it (quantize_row_<type>_ref of its
 * ggml-quants.c, release v0.4.0): the same float operations in the same order, so the same
 * bytes. x holds blocks whole blocks of float32 (a k-quant's block is a 256-element
 * super-block, a row's elements in order) and out receives blocks * <TYPE>_BYTES bytes; any
 * alignment, no overlap. A block (super-block) holding a NaN or an infinity, which llama.cpp
 * refuses, has every byte 0 but its F16 scale d, the quiet NaN 0x7E00 (docs/MOUNT_LAYOUT.md,
 * "model.Q4_K_M.gguf"). Every level writes the same bytes. */
#define TBM_QK_K       256 /* elements of a k-quant super-block */
#define TBM_Q4_K_BYTES 144 /* d, dmin (F16), 12 bytes of 6-bit scales and mins, 128 of nibbles */
#define TBM_Q5_K_BYTES 176 /* d, dmin, 12 of scales and mins, 32 of fifth bits, 128 of nibbles */
#define TBM_Q6_K_BYTES 210 /* 128 of low nibbles, 64 of high bit pairs, 16 int8 scales, d */
#define TBM_Q5_0_ELEMS 32
#define TBM_Q5_0_BYTES 22 /* d, 4 bytes of fifth bits, 16 of nibbles */
#define TBM_Q5_1_ELEMS 32
#define TBM_Q5_1_BYTES 24 /* d, m (the block's minimum), 4 of fifth bits, 16 of nibbles */

void tbm_q4_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);
void tbm_q5_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);
void tbm_q6_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);
void tbm_q5_0_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);
void tbm_q5_1_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);

/* count float32 values at x as F16 at out (2 bytes each, little-endian), as llama.cpp's
 * ggml_fp32_to_fp16_row writes them (its F16 fall-back): rounded to nearest even, too large
 * for F16 becomes infinity, and a NaN becomes the quiet NaN 0x7E00 with its sign. */
void tbm_f16_quantize(enum tbm_isa isa, const float *x, size_t count, uint8_t *out);

/* A GGUF tensor type computed from float32 rows: its ggml type code, llama.cpp's name for it,
 * the elements and bytes of one block (F16: 1 and 2), and its quantizer, called with a count
 * of whole blocks. */
struct tbm_quant {
    uint32_t ggml_type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
    void (*quantize)(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out);
};

/* The type of ggml type code ggml_type: F16 (1), Q5_0 (6), Q5_1 (7), Q8_0 (8), Q4_K (12),
 * Q5_K (13) or Q6_K (14); NULL for any other. */
const struct tbm_quant *tbm_quant_find(uint32_t ggml_type);

#endif
