/* The k-quants (Q4_K, Q5_K, Q6_K) of the SIMD paths, written once on the lane operations of
 * lanes_avx2.h or lanes_avx512.h (included first) and compiled in each path's own file. A lane
 * is a sub-block: its scale search is llama.cpp's make_qkx2_quants (Q4_K, Q5_K) or
 * make_qx_quants (Q6_K), operation for operation, with the branches of the reference turned
 * into per-lane selections; each trial's sums run over the sub-block's elements in order, one
 * row of the transposed block at a time. The few values per super-block in between (its
 * scales) and the packing of its quants are the portable path's own code (quant_internal.h).
 *
 * A search keeps, rather than the quants of its best trial, the multiplier and minimum they
 * were computed with, and computes them again only in the final step, for sub-blocks whose
 * step is 0: the same operations on the same values, the same quants. */
#ifndef TBM_KERNELS_KQUANT_SIMD_H
#define TBM_KERNELS_KQUANT_SIMD_H

#include "lanes_simd.h"

/* Super-blocks of Q4_K/Q5_K per pass (a lane per sub-block), passes per Q6_K super-block. */
#define KQ_GROUP  (LANES / TBM_KQ_SUBS)
#define Q6_PASSES (TBM_Q6_K_SUBS / LANES)

static const float kq_zeros[TBM_QK_K];

/* The best trial of a Q4_K/Q5_K search in each lane: quants clamp(nearest(iscale * (x -
 * lo))), or 0 where the sub-block is flat (its max equals its min). */
struct kq_best {
    vf iscale, lo;
    vm flat;
};

/* make_qkx2_quants on the 32 rows of xt: each lane's scale and negated minimum at scale[] and
 * min[], its best trial in *best. */
TBM_INLINE void kq_search(const float *xt, const struct tbm_kq_search *s, float *scale_out,
                          float *min_out, struct kq_best *best_out)
{
    float wt[TBM_KQ_SUB * LANES];
    vf sum_x2 = f_set(0.0f);

    for (int l = 0; l < TBM_KQ_SUB; l++) {
        vf x = f_load(xt + l * LANES);
        sum_x2 = f_add(sum_x2, f_mul(x, x));
    }
    vf av_x = f_sqrt(f_div(sum_x2, f_set(32.0f)));
    for (int l = 0; l < TBM_KQ_SUB; l++)
        f_store(wt + l * LANES, f_add(av_x, f_abs(f_load(xt + l * LANES))));

    vf lo = f_load(xt), hi = lo, sum_w = f_load(wt), sum_x = f_mul(sum_w, lo);
    for (int l = 1; l < TBM_KQ_SUB; l++) {
        vf x = f_load(xt + l * LANES), w = f_load(wt + l * LANES);
        lo = f_sel(f_lt(x, lo), x, lo);
        hi = f_sel(f_gt(x, hi), x, hi);
        sum_w = f_add(sum_w, w);
        sum_x = f_add(sum_x, f_mul(w, x));
    }
    lo = f_sel(f_gt(lo, f_set(0.0f)), f_set(0.0f), lo);
    vm flat = f_eq(hi, lo);
    vf lo_first = lo;

    vf iscale = f_div(f_set((float)s->nmax), f_sub(hi, lo));
    vf scale = f_div(f_set(1.0f), iscale), best = f_set(0.0f);
    for (int l = 0; l < TBM_KQ_SUB; l++) {
        vf x = f_load(xt + l * LANES), w = f_load(wt + l * LANES);
        vi q = i_clamp(i_nearest(f_mul(iscale, f_sub(x, lo))), 0, s->nmax);
        vf diff = f_sub(f_add(f_mul(scale, f_from_i(q)), lo), x);
        best = f_add(best, f_mul(w, f_mul(diff, diff)));
    }
    vf best_iscale = iscale, best_lo = lo;

    for (int is = 0; is <= s->nstep; is++) {
        float trial[TBM_KQ_SUB * LANES]; /* the quants, as floats for the error's pass */
        vf sum_l = f_set(0.0f), sum_l2 = f_set(0.0f), sum_xl = f_set(0.0f);

        iscale = f_div(f_set(s->rmin + s->rdelta * (float)is + (float)s->nmax), f_sub(hi, lo));
        for (int l = 0; l < TBM_KQ_SUB; l++) {
            vf x = f_load(xt + l * LANES), w = f_load(wt + l * LANES);
            vf fl = f_from_i(i_clamp(i_nearest(f_mul(iscale, f_sub(x, lo))), 0, s->nmax));
            vf wl = f_mul(w, fl);
            f_store(trial + l * LANES, fl);
            sum_l = f_add(sum_l, wl);
            sum_l2 = f_add(sum_l2, f_mul(wl, fl));
            sum_xl = f_add(sum_xl, f_mul(wl, x));
        }
        vf det = f_sub(f_mul(sum_w, sum_l2), f_mul(sum_l, sum_l));
        vm ok = f_gt(det, f_set(0.0f));
        if (!m_bits(ok))
            continue;
        vf this_scale = f_div(f_sub(f_mul(sum_w, sum_xl), f_mul(sum_x, sum_l)), det);
        vf this_min = f_div(f_sub(f_mul(sum_l2, sum_x), f_mul(sum_l, sum_xl)), det);
        vm pos = f_gt(this_min, f_set(0.0f));
        this_min = f_sel(pos, f_set(0.0f), this_min);
        this_scale = f_sel(pos, f_div(sum_xl, sum_l2), this_scale);
        vf err = f_set(0.0f);
        for (int l = 0; l < TBM_KQ_SUB; l++) {
            vf x = f_load(xt + l * LANES), w = f_load(wt + l * LANES);
            vf diff = f_sub(f_add(f_mul(this_scale, f_load(trial + l * LANES)), this_min), x);
            err = f_add(err, f_mul(w, f_mul(diff, diff)));
        }
        vm better = m_and(ok, f_lt(err, best));
        best = f_sel(better, err, best);
        scale = f_sel(better, this_scale, scale);
        best_iscale = f_sel(better, iscale, best_iscale);
        best_lo = f_sel(better, lo, best_lo);
        lo = f_sel(better, this_min, lo);
    }
    f_store(scale_out, f_sel(flat, f_set(0.0f), scale));
    f_store(min_out, f_neg(f_sel(flat, lo_first, lo)));
    best_out->iscale = best_iscale;
    best_out->lo = best_lo;
    best_out->flat = flat;
}

/* The final quants (0..nmax) of the 32 rows of xt into Lt: nearest((x + offset) / step)
 * where step is not 0, the search's best trial elsewhere. */
TBM_INLINE void kq_final(const float *xt, int nmax, const float *step, const float *offset,
                         const struct kq_best *b, int32_t *Lt)
{
    vf d = f_load(step), dm = f_load(offset);
    vm use = f_ne(d, f_set(0.0f));

    for (int l = 0; l < TBM_KQ_SUB; l++) {
        vf x = f_load(xt + l * LANES);
        vi q = i_clamp(i_nearest(f_div(f_add(x, dm), d)), 0, nmax);
        vi t = i_clamp(i_nearest(f_mul(b->iscale, f_sub(x, b->lo))), 0, nmax);
        t = i_sel(b->flat, i_set(0), t);
        i_store(Lt + l * LANES, i_sel(use, q, t));
    }
}

/* Q4_K or Q5_K: super-blocks of bytes bytes whose head is 16 bytes, their quants packed by
 * pack (Q4_K: the nibbles at 16; Q5_K: the fifth bits at 16, the nibbles at 48). */
TBM_INLINE void kq_simd(const float *x, size_t blocks, uint8_t *out, const struct tbm_kq_search *s,
                        size_t bytes, bool five)
{
    for (size_t b = 0; b < blocks; b += KQ_GROUP) {
        size_t n = blocks - b < KQ_GROUP ? blocks - b : KQ_GROUP;
        float xt[TBM_KQ_SUB * LANES], scale[LANES], min[LANES];
        float step[LANES] = {0}, offset[LANES] = {0};
        int32_t Lt[TBM_KQ_SUB * LANES];
        struct kq_best best;

        for (size_t g = 0; g < KQ_GROUP; g++) {
            /* a pass short of super-blocks fills its lanes with zeros, never written out */
            const float *sb = g < n ? x + (b + g) * TBM_QK_K : kq_zeros;
            const float *rows[8];
            for (int j = 0; j < 8; j++)
                rows[j] = sb + TBM_KQ_SUB * j;
            lanes_put8(rows, TBM_KQ_SUB, xt, 8 * (int)g);
        }
        unsigned bad = lanes_nonfinite(xt, TBM_KQ_SUB);
        kq_search(xt, s, scale, min, &best);
        for (size_t g = 0; g < n; g++)
            if (!(bad >> (8 * g) & 0xFF))
                tbm_kq_head(scale + 8 * g, min + 8 * g, out + (b + g) * bytes, step + 8 * g,
                            offset + 8 * g);
        kq_final(xt, s->nmax, step, offset, &best, Lt);
        for (size_t g = 0; g < n; g++) {
            uint8_t *blk = out + (b + g) * bytes, L[TBM_QK_K];
            if (bad >> (8 * g) & 0xFF) {
                tbm_quant_nonfinite(blk, bytes, 0);
                continue;
            }
            for (int j = 0; j < TBM_KQ_SUBS; j++)
                for (int l = 0; l < TBM_KQ_SUB; l++)
                    L[TBM_KQ_SUB * j + l] = (uint8_t)Lt[l * LANES + 8 * (int)g + j];
            if (five)
                tbm_q5_k_pack(L, blk + 16, blk + 48);
            else
                tbm_q4_k_pack(L, blk + 16);
        }
    }
}

/* The best trial of a Q6_K search in each lane: quants clamp(nearest(iscale * x)) + 32, or 0
 * where the sub-block is all but zero. */
struct q6_best {
    vf iscale;
    vm zero;
};

/* make_qx_quants (nmax 32, weights x^2) on the 16 rows of xt: each lane's scale at scale[],
 * its best trial in *best. */
TBM_INLINE void q6_search(const float *xt, float *scale_out, struct q6_best *best_out)
{
    /* each trial weighs l by w = x^2 and adds (w * x) * l and (w * l) * l: w and w * x are
     * the same in every trial */
    float wt[TBM_Q6_K_SUB * LANES], wxt[TBM_Q6_K_SUB * LANES];
    vf max = f_set(0.0f), amax = f_set(0.0f);

    for (int l = 0; l < TBM_Q6_K_SUB; l++) {
        vf x = f_load(xt + l * LANES), ax = f_abs(x), w = f_mul(x, x);
        vm m = f_gt(ax, amax);
        amax = f_sel(m, ax, amax);
        max = f_sel(m, x, max);
        f_store(wt + l * LANES, w);
        f_store(wxt + l * LANES, f_mul(w, x));
    }
    vm zero = f_lt(amax, f_set(1e-15f));
    vf best_iscale = f_set(0.0f), scale = f_set(0.0f), best = f_set(0.0f);
    for (int is = 0; is <= 18; is++) {
        /* the first trial is nmax's own (is 0 of the reference); then -9..9 but 0 */
        int step = is == 0 ? 0 : is <= 9 ? is - 10 : is - 9;
        vf iscale = f_div(f_set(step == 0 ? -32.0f : -(32.0f + 0.1f * (float)step)), max);
        vf sumlx = f_set(0.0f), suml2 = f_set(0.0f);
        for (int l = 0; l < TBM_Q6_K_SUB; l++) {
            vf x = f_load(xt + l * LANES);
            vf fl = f_from_i(i_clamp(i_nearest(f_mul(iscale, x)), -32, 31));
            sumlx = f_add(sumlx, f_mul(f_load(wxt + l * LANES), fl));
            suml2 = f_add(suml2, f_mul(f_mul(f_load(wt + l * LANES), fl), fl));
        }
        if (is == 0) {
            scale = f_sel(f_ne(suml2, f_set(0.0f)), f_div(sumlx, suml2), f_set(0.0f));
            best = f_mul(scale, sumlx);
            best_iscale = iscale;
            continue;
        }
        vm better = m_and(f_gt(suml2, f_set(0.0f)), f_gt(f_mul(sumlx, sumlx), f_mul(best, suml2)));
        scale = f_sel(better, f_div(sumlx, suml2), scale);
        best = f_sel(better, f_mul(scale, sumlx), best);
        best_iscale = f_sel(better, iscale, best_iscale);
    }
    f_store(scale_out, f_sel(zero, f_set(0.0f), scale));
    best_out->iscale = best_iscale;
    best_out->zero = zero;
}

/* The final quants (0..63) of the 16 rows of xt into Lt: nearest(x / step) + 32 where step is
 * not 0, the search's best trial elsewhere. */
TBM_INLINE void q6_final(const float *xt, const float *step, const struct q6_best *b, int32_t *Lt)
{
    vf d = f_load(step);
    vm use = f_ne(d, f_set(0.0f));

    for (int l = 0; l < TBM_Q6_K_SUB; l++) {
        vf x = f_load(xt + l * LANES);
        vi q = i_add(i_clamp(i_nearest(f_div(x, d)), -32, 31), i_set(32));
        vi t = i_add(i_clamp(i_nearest(f_mul(b->iscale, x)), -32, 31), i_set(32));
        t = i_sel(b->zero, i_set(0), t);
        i_store(Lt + l * LANES, i_sel(use, q, t));
    }
}

TBM_INLINE void q6_simd(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_QK_K, out += TBM_Q6_K_BYTES) {
        float xt[Q6_PASSES][TBM_Q6_K_SUB * LANES], scale[TBM_Q6_K_SUBS], step[TBM_Q6_K_SUBS];
        int32_t Lt[TBM_Q6_K_SUB * LANES];
        struct q6_best best[Q6_PASSES];
        unsigned bad = 0;
        uint8_t L[TBM_QK_K];

        for (int p = 0; p < Q6_PASSES; p++) {
            for (int g = 0; g < LANES / 8; g++) {
                const float *rows[8];
                for (int j = 0; j < 8; j++)
                    rows[j] = x + TBM_Q6_K_SUB * (p * LANES + 8 * g + j);
                lanes_put8(rows, TBM_Q6_K_SUB, xt[p], 8 * g);
            }
            bad |= lanes_nonfinite(xt[p], TBM_Q6_K_SUB);
        }
        if (bad) {
            tbm_quant_nonfinite(out, TBM_Q6_K_BYTES, TBM_Q6_K_D_AT);
            continue;
        }
        for (int p = 0; p < Q6_PASSES; p++)
            q6_search(xt[p], scale + p * LANES, &best[p]);
        if (!tbm_q6_k_head(scale, out, step))
            continue;
        for (int p = 0; p < Q6_PASSES; p++) {
            q6_final(xt[p], step + p * LANES, &best[p], Lt);
            for (int k = 0; k < LANES; k++)
                for (int l = 0; l < TBM_Q6_K_SUB; l++)
                    L[TBM_Q6_K_SUB * (p * LANES + k) + l] = (uint8_t)Lt[l * LANES + k];
        }
        tbm_q6_k_pack(L, out, out + 128);
    }
}

#endif
