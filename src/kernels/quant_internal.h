/* What the quantizers of model.Q4_K_M.gguf (Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, F16) share
 * between the portable path and the SIMD ones: the per-level entry points, llama.cpp's
 * rounding and conversions as x86 does them, and the steps of a block that work on a few
 * values (a super-block's scales, the packing of its quants) and so stay scalar on every level,
 * one copy of the code for all. Written from the rules of llama.cpp's ggml-quants.c (release
 * v0.4.0); every float operation here is one that the reference does, in its order. */
#ifndef TBM_KERNELS_QUANT_INTERNAL_H
#define TBM_KERNELS_QUANT_INTERNAL_H

#include <float.h>
#include <math.h>

#include "internal.h"

/* Per-level bodies of the quantizers in tbm/kernels.h, same contracts. */
void tbm_q4_k_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q4_k_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q4_k_avx512(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_k_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_k_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_k_avx512(const float *x, size_t blocks, uint8_t *out);
void tbm_q6_k_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q6_k_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q6_k_avx512(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_0_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_0_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_0_avx512(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_1_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_1_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q5_1_avx512(const float *x, size_t blocks, uint8_t *out);
void tbm_f16_scalar(const float *x, size_t count, uint8_t *out);
void tbm_f16_avx2(const float *x, size_t count, uint8_t *out);
void tbm_f16_avx512(const float *x, size_t count, uint8_t *out);

/* Sub-blocks of a k-quant super-block: Q4_K and Q5_K have 8 of 32 elements, Q6_K 16 of 16. */
#define TBM_KQ_SUBS   8
#define TBM_KQ_SUB    32
#define TBM_Q6_K_SUBS 16
#define TBM_Q6_K_SUB  16

/* The scale search of Q4_K and Q5_K (llama.cpp's make_qkx2_quants as its reference quantizers
 * call it): quants 0..nmax, and nstep + 1 trial scales of (rmin + rdelta * is + nmax) /
 * (max - min). */
struct tbm_kq_search {
    int nmax;
    float rmin, rdelta;
    int nstep;
};

static const struct tbm_kq_search tbm_q4_k_search = {15, -1.0f, 0.1f, 20};
static const struct tbm_kq_search tbm_q5_k_search = {31, -0.5f, 0.1f, 15};

/* Where a block's F16 scale d sits: first in every type but Q6_K, which ends with it. */
#define TBM_Q6_K_D_AT 208

/* llama.cpp's nearest_int: f rounded to nearest even through the bits of f + 1.5 * 2^23.
 * Meant for |f| < 2^22; for any other f (an infinity, a NaN of a degenerate block) the same
 * bits give the same garbage as the reference, which the callers clamp. */
static inline int32_t tbm_quant_nearest(float f)
{
    float v = f + 12582912.0f;
    uint32_t bits;

    memcpy(&bits, &v, sizeof bits);
    return (int32_t)(bits & 0x7FFFFF) - 0x400000;
}

/* A float converted to an integer type as x86 does (cvttss2si): truncated, and INT32_MIN
 * (whose low byte is 0) for a NaN or a value out of range, where C leaves it undefined. */
static inline int32_t tbm_quant_trunc(float f)
{
    return f >= -2147483648.0f && f < 2147483648.0f ? (int32_t)f : INT32_MIN;
}

/* An F16 value as float32, exactly. */
static inline float tbm_quant_f16_float(uint16_t h)
{
    uint32_t bits = tbm_f16_bits(h);
    float f;

    memcpy(&f, &bits, sizeof f);
    return f;
}

/* F16 bits of f, rounded to nearest even (equal to llama.cpp's software conversion for every
 * value that is not a NaN, and no NaN reaches a scale). */
static inline uint16_t tbm_quant_f16(float f)
{
    uint32_t bits;

    memcpy(&bits, &f, sizeof bits);
    return tbm_f16_from_bits(bits);
}

static inline void tbm_quant_store16(uint8_t *out, uint16_t v)
{
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
}

/* The first of the n values at x of the largest magnitude, as the references find it (a strict
 * comparison, in index order), and that magnitude in *amax; +0.0 and 0 when all are zeros. */
static inline float tbm_quant_absmax(const float *x, int n, float *amax)
{
    float max = 0.0f, a = 0.0f;

    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > a) {
            a = fabsf(x[i]);
            max = x[i];
        }
    }
    *amax = a;
    return max;
}

/* Whether every one of the n values at x is finite. */
static inline bool tbm_quant_finite(const float *x, size_t n)
{
    uint32_t any = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        any |= (bits & 0x7F800000) == 0x7F800000;
    }
    return !any;
}

/* What a block (super-block) holding a NaN or an infinity gets: every byte 0 but its F16
 * scale d, at d_at, the quiet NaN 0x7E00. */
static inline void tbm_quant_nonfinite(uint8_t *out, size_t bytes, size_t d_at)
{
    memset(out, 0, bytes);
    tbm_quant_store16(out + d_at, 0x7E00);
}

/* The head of a Q4_K or Q5_K super-block (d, dmin, 12 bytes of 6-bit scales and mins) from
 * the searches of its 8 sub-blocks (scale[j], and min[j], the negated minimum the search
 * returns), and for each sub-block the step and offset its final quants are computed with:
 * step[j] = d * scale code, offset[j] = dmin * min code (step 0 keeps the search's quants). */
static inline void tbm_kq_head(const float scale[TBM_KQ_SUBS], const float min[TBM_KQ_SUBS],
                               uint8_t *head, float step[TBM_KQ_SUBS], float offset[TBM_KQ_SUBS])
{
    float max_scale = 0.0f, max_min = 0.0f;
    uint8_t *codes = head + 4;

    for (int j = 0; j < TBM_KQ_SUBS; j++) {
        if (scale[j] > max_scale)
            max_scale = scale[j];
        if (min[j] > max_min)
            max_min = min[j];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[TBM_KQ_SUBS], lm[TBM_KQ_SUBS];
    for (int j = 0; j < TBM_KQ_SUBS; j++) {
        /* the reference keeps the low byte of the rounded value, then caps it at 63 */
        uint8_t s = (uint8_t)tbm_quant_nearest(inv_scale * scale[j]);
        uint8_t m = (uint8_t)tbm_quant_nearest(inv_min * min[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    /* sub-blocks 0-3: 6 bits each in bytes 0-3 (scales) and 4-7 (mins); 4-7: low nibbles in
     * bytes 8-11, the high 2 bits in the top of bytes 0-7 */
    for (int j = 0; j < 4; j++) {
        codes[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
        codes[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
        codes[j + 8] = (uint8_t)((ls[j + 4] & 0xF) | (lm[j + 4] & 0xF) << 4);
    }
    uint16_t d = tbm_quant_f16(max_scale / 63.0f), dmin = tbm_quant_f16(max_min / 63.0f);
    tbm_quant_store16(head, d);
    tbm_quant_store16(head + 2, dmin);
    for (int j = 0; j < TBM_KQ_SUBS; j++) {
        step[j] = tbm_quant_f16_float(d) * ls[j];
        offset[j] = tbm_quant_f16_float(dmin) * lm[j];
    }
}

/* The scales of a Q6_K super-block from the searches of its 16 sub-blocks: the int8 scale
 * codes and d in the block, and each sub-block's step (0 keeps the search's quants). Returns
 * false, having zeroed the block, when every scale is below llama.cpp's GROUP_MAX_EPS. */
static inline bool tbm_q6_k_head(const float scale[TBM_Q6_K_SUBS], uint8_t *blk,
                                 float step[TBM_Q6_K_SUBS])
{
    float max_abs, max_scale = tbm_quant_absmax(scale, TBM_Q6_K_SUBS, &max_abs);

    if (max_abs < 1e-15f) {
        memset(blk, 0, TBM_Q6_K_BYTES);
        return false;
    }
    float iscale = -128.0f / max_scale;
    uint16_t d = tbm_quant_f16(1 / iscale);
    tbm_quant_store16(blk + TBM_Q6_K_D_AT, d);
    for (int j = 0; j < TBM_Q6_K_SUBS; j++) {
        int32_t q = tbm_quant_nearest(iscale * scale[j]);
        /* capped at 127, then stored in an int8 as the reference does: its low byte */
        int8_t code = (int8_t)(uint8_t)(q < 127 ? q : 127);
        blk[192 + j] = (uint8_t)code;
        step[j] = tbm_quant_f16_float(d) * code;
    }
    return true;
}

/* Q4_K quants (0..15) of a super-block into its 128 bytes of nibbles: byte 32 * p + l holds
 * element 64 * p + l in its low nibble and element 64 * p + 32 + l in its high one. */
static inline void tbm_q4_k_pack(const uint8_t L[TBM_QK_K], uint8_t *qs)
{
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++)
            qs[32 * p + l] = (uint8_t)(L[64 * p + l] | L[64 * p + 32 + l] << 4);
}

/* Q5_K quants (0..31): the low nibbles as Q4_K's, and bit 2p (2p + 1) of qh[l] the fifth bit
 * of element 64 * p + l (64 * p + 32 + l). */
static inline void tbm_q5_k_pack(const uint8_t L[TBM_QK_K], uint8_t *qh, uint8_t *qs)
{
    for (int l = 0; l < 32; l++) {
        uint8_t h = 0;
        for (int p = 0; p < 4; p++)
            h |= (uint8_t)((L[64 * p + l] >> 4) << (2 * p) | (L[64 * p + 32 + l] >> 4)
                                                                 << (2 * p + 1));
        qh[l] = h;
    }
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++)
            qs[32 * p + l] = (uint8_t)((L[64 * p + l] & 0xF) | (L[64 * p + 32 + l] & 0xF) << 4);
}

/* Q6_K quants (0..63) into 128 bytes of low nibbles and 64 of high bit pairs: for each half
 * h of the super-block and l < 32, elements 128h + l + 32k (k = 0..3) give ql[64h + l] (k 0,
 * 2), ql[64h + 32 + l] (k 1, 3) and bits 2k of qh[32h + l]. */
static inline void tbm_q6_k_pack(const uint8_t L[TBM_QK_K], uint8_t *ql, uint8_t *qh)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *e = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[64 * h + l] = (uint8_t)((e[l] & 0xF) | (e[l + 64] & 0xF) << 4);
            ql[64 * h + 32 + l] = (uint8_t)((e[l + 32] & 0xF) | (e[l + 96] & 0xF) << 4);
            qh[32 * h + l] = (uint8_t)(e[l] >> 4 | (e[l + 32] >> 4) << 2 | (e[l + 64] >> 4) << 4 |
                                       (e[l + 96] >> 4) << 6);
        }
    }
}

/* Q5_0 or Q5_1 quants (0..31) of a block: nibbles of elements j and 16 + j in qs[j], the fifth
 * bit of element j in bit j of the little-endian word qh. */
static inline void tbm_q5_pack(const uint8_t L[32], uint8_t *qh, uint8_t *qs)
{
    uint32_t h = 0;

    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0xF) | (L[j + 16] & 0xF) << 4);
        h |= (uint32_t)(L[j] >> 4 & 1) << j | (uint32_t)(L[j + 16] >> 4 & 1) << (j + 16);
    }
    qh[0] = (uint8_t)h;
    qh[1] = (uint8_t)(h >> 8);
    qh[2] = (uint8_t)(h >> 16);
    qh[3] = (uint8_t)(h >> 24);
}

#endif
