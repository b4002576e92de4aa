/* The k-quants of model.Q4_K_M.gguf (Q4_K, Q5_K, Q6_K): the dispatchers and the portable
 * reference, which defines the output bit for bit (the SIMD paths are tested against it, and
 * it against llama.cpp's own quantize_row_q4_K_ref, quantize_row_q5_K_ref and
 * quantize_row_q6_K_ref), written from the rules of those functions: a scale search per
 * sub-block, then the super-block's scales, then each value's final quant. */
#include "quant_internal.h"

/* llama.cpp's make_qkx2_quants for one Q4_K/Q5_K sub-block of 32 values x with weights w: the
 * scale it returns, in *min the negated minimum, in L the quants (0..s->nmax) of the best
 * trial. Sums run in index order, as the reference's. */
static float search_scale_min(const float *x, const float *w, const struct tbm_kq_search *s,
                              uint8_t *L, float *min_out)
{
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = sum_w * x[0];

    for (int i = 1; i < TBM_KQ_SUB; i++) {
        if (x[i] < lo)
            lo = x[i];
        if (x[i] > hi)
            hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0)
        lo = 0;
    if (hi == lo) {
        memset(L, 0, TBM_KQ_SUB);
        *min_out = -lo;
        return 0.0f;
    }
    float iscale = (float)s->nmax / (hi - lo);
    float scale = 1 / iscale, best = 0;
    for (int i = 0; i < TBM_KQ_SUB; i++) {
        int32_t l = tbm_quant_nearest(iscale * (x[i] - lo));
        L[i] = (uint8_t)(l < 0 ? 0 : l > s->nmax ? s->nmax : l);
        float diff = scale * L[i] + lo - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= s->nstep; is++) {
        uint8_t trial[TBM_KQ_SUB];
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;

        iscale = (s->rmin + s->rdelta * (float)is + (float)s->nmax) / (hi - lo);
        for (int i = 0; i < TBM_KQ_SUB; i++) {
            int32_t l = tbm_quant_nearest(iscale * (x[i] - lo));
            l = l < 0 ? 0 : l > s->nmax ? s->nmax : l;
            trial[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0))
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < TBM_KQ_SUB; i++) {
            float diff = this_scale * trial[i] + this_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, trial, TBM_KQ_SUB);
            best = err;
            scale = this_scale;
            lo = this_min;
        }
    }
    *min_out = -lo;
    return scale;
}

/* One Q4_K (nmax 15) or Q5_K (nmax 31) super-block of finite values: its quants in L and its
 * head (d, dmin, scale codes) at blk. */
static void kq_block(const float *x, const struct tbm_kq_search *s, uint8_t L[TBM_QK_K],
                     uint8_t *blk)
{
    float scale[TBM_KQ_SUBS], min[TBM_KQ_SUBS], step[TBM_KQ_SUBS], offset[TBM_KQ_SUBS];

    for (int j = 0; j < TBM_KQ_SUBS; j++) {
        const float *xs = x + TBM_KQ_SUB * j;
        float w[TBM_KQ_SUB], sum_x2 = 0;

        for (int l = 0; l < TBM_KQ_SUB; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < TBM_KQ_SUB; l++)
            w[l] = av_x + fabsf(xs[l]);
        scale[j] = search_scale_min(xs, w, s, L + TBM_KQ_SUB * j, &min[j]);
    }
    tbm_kq_head(scale, min, blk, step, offset);
    for (int j = 0; j < TBM_KQ_SUBS; j++) {
        /* a step of 0 (or -0) keeps the search's quants, as the reference's `if (!d)` */
        if (step[j] == 0)
            continue;
        for (int l = 0; l < TBM_KQ_SUB; l++) {
            int32_t q = tbm_quant_nearest((x[TBM_KQ_SUB * j + l] + offset[j]) / step[j]);
            L[TBM_KQ_SUB * j + l] = (uint8_t)(q < 0 ? 0 : q > s->nmax ? s->nmax : q);
        }
    }
}

void tbm_q4_k_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_QK_K, out += TBM_Q4_K_BYTES) {
        uint8_t L[TBM_QK_K];

        if (!tbm_quant_finite(x, TBM_QK_K)) {
            tbm_quant_nonfinite(out, TBM_Q4_K_BYTES, 0);
            continue;
        }
        kq_block(x, &tbm_q4_k_search, L, out);
        tbm_q4_k_pack(L, out + 16);
    }
}

void tbm_q5_k_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_QK_K, out += TBM_Q5_K_BYTES) {
        uint8_t L[TBM_QK_K];

        if (!tbm_quant_finite(x, TBM_QK_K)) {
            tbm_quant_nonfinite(out, TBM_Q5_K_BYTES, 0);
            continue;
        }
        kq_block(x, &tbm_q5_k_search, L, out);
        tbm_q5_k_pack(L, out + 16, out + 48);
    }
}

/* llama.cpp's make_qx_quants for one Q6_K sub-block of 16 values (nmax 32, weights x^2): the
 * scale, and in L the quants (0..63) of the best of 19 trial scales. */
static float search_scale(const float *x, uint8_t *L)
{
    const int nmax = 32;
    float amax, max = tbm_quant_absmax(x, TBM_Q6_K_SUB, &amax);

    if (amax < 1e-15f) {
        memset(L, 0, TBM_Q6_K_SUB);
        return 0.0f;
    }
    float iscale = (float)-nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < TBM_Q6_K_SUB; i++) {
        int32_t l = tbm_quant_nearest(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (uint8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < TBM_Q6_K_SUB; i++) {
            int32_t l = tbm_quant_nearest(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            /* the better trial's quants, computed again (rarely) */
            for (int i = 0; i < TBM_Q6_K_SUB; i++) {
                int32_t l = tbm_quant_nearest(iscale * x[i]);
                L[i] = (uint8_t)((l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l) + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void tbm_q6_k_scalar(const float *x, size_t blocks, uint8_t *out)
{
    for (size_t b = 0; b < blocks; b++, x += TBM_QK_K, out += TBM_Q6_K_BYTES) {
        float scale[TBM_Q6_K_SUBS], step[TBM_Q6_K_SUBS];
        uint8_t L[TBM_QK_K];

        if (!tbm_quant_finite(x, TBM_QK_K)) {
            tbm_quant_nonfinite(out, TBM_Q6_K_BYTES, TBM_Q6_K_D_AT);
            continue;
        }
        for (int j = 0; j < TBM_Q6_K_SUBS; j++)
            scale[j] = search_scale(x + TBM_Q6_K_SUB * j, L + TBM_Q6_K_SUB * j);
        if (!tbm_q6_k_head(scale, out, step))
            continue;
        for (int j = 0; j < TBM_Q6_K_SUBS; j++) {
            if (step[j] == 0)
                continue;
            for (int l = 0; l < TBM_Q6_K_SUB; l++) {
                int32_t q = tbm_quant_nearest(x[TBM_Q6_K_SUB * j + l] / step[j]);
                L[TBM_Q6_K_SUB * j + l] = (uint8_t)((q < -32 ? -32 : q > 31 ? 31 : q) + 32);
            }
        }
        tbm_q6_k_pack(L, out, out + 128);
    }
}

void tbm_q4_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q4_k_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q4_k_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q4_k_scalar(x, blocks, out);
}

void tbm_q5_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q5_k_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q5_k_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q5_k_scalar(x, blocks, out);
}

void tbm_q6_k_quantize(enum tbm_isa isa, const float *x, size_t blocks, uint8_t *out)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_q6_k_avx512(x, blocks, out);
        return;
    case TBM_ISA_AVX2:
        tbm_q6_k_avx2(x, blocks, out);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    tbm_q6_k_scalar(x, blocks, out);
}
