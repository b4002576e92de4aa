/* The batch-1 block walk and the dispatch of the SIMD sparse matmuls,
 * written once and compiled in each path's own file, under its -m flags.
 *
 * That file defines these, then includes this one, which defines spmm_simd:
 * GANG                    blocks that batch 1 runs side by side (at most 4)
 * struct window           a window of x, in registers
 * struct accum            the sums of a block's 16 rows, in registers
 * window_load(x, cols, base, xw)
 *                         the window of x that starts at column base, zero
 *                         past the last column (cols)
 * accum_zero(acc)         sums of nothing
 * accum_step(kind, w, step, xw, acc)
 *                         adds a step of the block: each live lane's value
 *                         times its entry of the window
 * accum_store(w, y, row, acc)
 *                         the sums to those of rows row .. row+15 of y that
 *                         exist, each NaN as TBM_NM_NAN
 * batchn(kind, w, x, batch, y)
 *                         tbm_spmm for batch > 1 */
#ifndef TBM_KERNELS_SPMM_SIMD_H
#define TBM_KERNELS_SPMM_SIMD_H

#include "internal.h"
#include "spmm_internal.h"

_Static_assert(GANG <= 4, "the loops over a gang below unroll 4 times");

/* Batch 1 for blocks block .. block+gang-1 (gang <= GANG). A row's sum is
 * one dependent chain of FMAs, so the blocks' steps of a window run in
 * lockstep, as far as all of them have steps, for the chains to overlap. */
TBM_INLINE void batch1_blocks(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                              float *y, uint64_t block, unsigned gang)
{
    struct accum acc[GANG];
    uint64_t step[GANG];

#pragma GCC unroll 4
    for (unsigned g = 0; g < gang; g++) {
        accum_zero(&acc[g]);
        step[g] = w->first_step[block + g];
    }
    for (uint64_t win = 0; win < w->windows; win++) {
        unsigned n[GANG], common = TBM_NM_WINDOW;
        struct window xw;

        window_load(x, w->cols, win * TBM_NM_WINDOW, &xw);
#pragma GCC unroll 4
        for (unsigned g = 0; g < gang; g++) {
            n[g] = w->counts[(block + g) * w->windows + win];
            common = n[g] < common ? n[g] : common;
        }
        for (unsigned k = 0; k < common; k++) {
#pragma GCC unroll 4
            for (unsigned g = 0; g < gang; g++)
                accum_step(kind, w, step[g] + k, &xw, &acc[g]);
        }
#pragma GCC unroll 4
        for (unsigned g = 0; g < gang; g++) {
            for (unsigned k = common; k < n[g]; k++)
                accum_step(kind, w, step[g] + k, &xw, &acc[g]);
            step[g] += n[g];
        }
    }
#pragma GCC unroll 4
    for (unsigned g = 0; g < gang; g++)
        accum_store(w, y, (block + g) * TBM_NM_LANES, &acc[g]);
}

TBM_INLINE void batch1(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                       float *y)
{
    uint64_t block = 0;

    for (; block + GANG <= w->blocks; block += GANG)
        batch1_blocks(kind, w, x, y, block, GANG);
    for (; block < w->blocks; block++)
        batch1_blocks(kind, w, x, y, block, 1);
}

TBM_INLINE void run(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                    uint32_t batch, float *y)
{
    if (batch == 1)
        batch1(kind, w, x, y);
    else
        batchn(kind, w, x, batch, y);
}

/* tbm_spmm on the including file's level: a call of run per value kind, so
 * that each conversion is fixed outside the loops. */
TBM_INLINE void spmm_simd(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y)
{
    if (batch == 0)
        return;
    switch (w->kind) {
    case TBM_NM_F16:
        run(TBM_NM_F16, w, x, batch, y);
        return;
    case TBM_NM_BF16:
        run(TBM_NM_BF16, w, x, batch, y);
        return;
    case TBM_NM_F32:
        break;
    }
    run(TBM_NM_F32, w, x, batch, y);
}

#endif
