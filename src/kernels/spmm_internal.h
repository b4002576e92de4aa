/* The compressed N:M matrix behind struct tbm_nm_matrix, shared by the
 * portable sparse matmul and its SIMD paths. */
#ifndef TBM_SPMM_INTERNAL_H
#define TBM_SPMM_INTERNAL_H

#include <stdint.h>

#include "tbm/kernels.h"

/* Rows are taken TBM_NM_LANES at a time (a block) and columns
 * TBM_NM_WINDOW at a time (a window). Inside a window, a block is a run of
 * steps; step k gives lane l (row 16 * block + l) its k-th kept element of
 * the window, or nothing. A lane's elements thus come in increasing column
 * order, the summation order every path follows, while one step touches 16
 * independent rows and at most 16 consecutive x entries: a SIMD register
 * holds the window of x and a permute picks each lane's entry. */
#define TBM_NM_LANES  16
#define TBM_NM_WINDOW 16

/* A step's offset byte of a lane that has no element in that step. */
#define TBM_NM_NONE 0xFF

/* Float32 bits every path writes for a NaN result: which NaN operand an FMA
 * passes on differs between libm's fmaf and the FMA forms a compiler picks,
 * so a NaN's payload could not be the same on every path. */
#define TBM_NM_NAN 0x7FC00000u

/* How kept values are stored: fp16 and bf16 stay 2 bytes; fp64 is converted
 * to float32 when packing, as the dense expansion converts it. */
enum tbm_nm_kind {
    TBM_NM_F32,
    TBM_NM_F16,
    TBM_NM_BF16,
};

struct tbm_nm_matrix {
    uint64_t rows;
    uint64_t cols;
    uint64_t blocks;  /* ceil(rows / TBM_NM_LANES) */
    uint64_t windows; /* ceil(cols / TBM_NM_WINDOW) */
    uint64_t steps;   /* steps of all blocks and windows */
    enum tbm_nm_kind kind;
    uint8_t *counts; /* blocks * windows: the steps of block b in window w at [b * windows + w] */
    uint64_t *first_step; /* blocks: the first step of each block; its windows follow in order */
    uint8_t *offsets;     /* TBM_NM_LANES per step: column - window start, or TBM_NM_NONE */
    void *values;         /* TBM_NM_LANES per step, as kind (uint16_t or float), 0 where NONE */
};

/* tbm_spmm on one level; w, x and y as for tbm_spmm. */
void tbm_spmm_avx2(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y);
void tbm_spmm_avx512(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y);

#endif
