/* Q5_0 and Q5_1 of the SIMD paths, written once on the lane operations of lanes_avx2.h or
 * lanes_avx512.h (included first) and compiled in each path's own file: a lane per block of
 * 32, doing the reference's sequence on it (quantize_row_q5_0_ref, quantize_row_q5_1_ref):
 * the scan for the extreme values as the reference's strict comparisons in index order, so
 * that the same one of two equal values (0.0 and -0.0) is kept, then the scale and each quant.
 * The packing is the portable path's (quant_internal.h). */
#ifndef TBM_KERNELS_Q5_SIMD_H
#define TBM_KERNELS_Q5_SIMD_H

#include "lanes_simd.h"

static const float q5_zeros[TBM_Q5_0_ELEMS];

/* The blocks b.. of x in lanes (zeros past the last of blocks), and which hold a NaN or an
 * infinity; returns how many are real. */
TBM_INLINE size_t q5_put(const float *x, size_t b, size_t blocks, float *xt, unsigned *bad)
{
    size_t n = blocks - b < LANES ? blocks - b : LANES;

    for (int g = 0; g < LANES / 8; g++) {
        const float *rows[8];
        for (int j = 0; j < 8; j++) {
            size_t k = (size_t)(8 * g + j);
            rows[j] = k < n ? x + (b + k) * TBM_Q5_0_ELEMS : q5_zeros;
        }
        lanes_put8(rows, TBM_Q5_0_ELEMS, xt, 8 * g);
    }
    *bad = lanes_nonfinite(xt, TBM_Q5_0_ELEMS);
    return n;
}

/* Lane k's quants (the low byte of each of Lt's rows) packed into a block whose 4 bytes of
 * fifth bits start at qh. */
TBM_INLINE void q5_pack_lane(const int32_t *Lt, int k, uint8_t *qh)
{
    uint8_t L[32];

    for (int j = 0; j < 32; j++)
        L[j] = (uint8_t)Lt[j * LANES + k];
    tbm_q5_pack(L, qh, qh + 4);
}

TBM_INLINE void q5_0_simd(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b += LANES) {
        float xt[TBM_Q5_0_ELEMS * LANES];
        int32_t Lt[TBM_Q5_0_ELEMS * LANES];
        uint16_t d16[LANES];
        unsigned bad;
        size_t n = q5_put(x, b, blocks, xt, &bad);

        vf amax = f_set(0.0f), max = f_set(0.0f);
        for (int l = 0; l < TBM_Q5_0_ELEMS; l++) {
            vf v = f_load(xt + l * LANES), a = f_abs(v);
            vm m = f_lt(amax, a);
            amax = f_sel(m, a, amax);
            max = f_sel(m, v, max);
        }
        vf d = f_div(max, f_set(-16.0f));
        vf id = f_sel(f_ne(d, f_set(0.0f)), f_div(f_set(1.0f), d), f_set(0.0f));
        h_store(d16, d);
        for (int l = 0; l < TBM_Q5_0_ELEMS; l++) {
            vf v = f_mul(f_load(xt + l * LANES), id);
            i_store(Lt + l * LANES, i_min(i_int8(i_trunc(f_add(v, f_set(16.5f)))), 31));
        }
        for (size_t k = 0; k < n; k++) {
            uint8_t *blk = out + (b + k) * TBM_Q5_0_BYTES;
            if (bad >> k & 1) {
                tbm_quant_nonfinite(blk, TBM_Q5_0_BYTES, 0);
                continue;
            }
            tbm_quant_store16(blk, d16[k]);
            q5_pack_lane(Lt, (int)k, blk + 2);
        }
    }
}

TBM_INLINE void q5_1_simd(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b += LANES) {
        float xt[TBM_Q5_1_ELEMS * LANES];
        int32_t Lt[TBM_Q5_1_ELEMS * LANES];
        uint16_t d16[LANES], m16[LANES];
        unsigned bad;
        size_t n = q5_put(x, b, blocks, xt, &bad);

        vf min = f_set(FLT_MAX), max = f_set(-FLT_MAX);
        for (int l = 0; l < TBM_Q5_1_ELEMS; l++) {
            vf v = f_load(xt + l * LANES);
            min = f_sel(f_lt(v, min), v, min);
            max = f_sel(f_gt(v, max), v, max);
        }
        vf d = f_div(f_sub(max, min), f_set(31.0f));
        vf id = f_sel(f_ne(d, f_set(0.0f)), f_div(f_set(1.0f), d), f_set(0.0f));
        h_store(d16, d);
        h_store(m16, min);
        for (int l = 0; l < TBM_Q5_1_ELEMS; l++) {
            vf v = f_mul(f_sub(f_load(xt + l * LANES), min), id);
            i_store(Lt + l * LANES, i_trunc(f_add(v, f_set(0.5f))));
        }
        for (size_t k = 0; k < n; k++) {
            uint8_t *blk = out + (b + k) * TBM_Q5_1_BYTES;
            if (bad >> k & 1) {
                tbm_quant_nonfinite(blk, TBM_Q5_1_BYTES, 0);
                continue;
            }
            tbm_quant_store16(blk, d16[k]);
            tbm_quant_store16(blk + 2, m16[k]);
            q5_pack_lane(Lt, (int)k, blk + 4);
        }
    }
}

#endif
