/* AVX2 sparse matmul over the compressed N:M form, bit for bit the portable
 * one: each output sees the same fmaf sequence, one FMA lane each. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "internal.h"
#include "spmm_internal.h"

/* Blocks that batch 1 runs side by side: a lane's sum is one dependent FMA
 * chain, so one block alone would wait on FMA latency every step. */
#define GANG 2

/* Batch 1 holds a window of x in two registers, entries 0-7 and 8-15, and a
 * block's sums in two, lanes 0-7 and 8-15. */
struct window {
    __m256 lo, hi;
};

struct accum {
    __m256 h[2];
};

/* The 8 values of lanes 8h .. 8h+7 of a step as float32. */
TBM_INLINE __m256 half_values(enum tbm_nm_kind kind, const void *values, uint64_t step, unsigned h)
{
    uint64_t first = step * TBM_NM_LANES + 8 * h;
    const __m128i *v16 = (const __m128i *)((const uint16_t *)values + first);

    switch (kind) {
    case TBM_NM_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128(v16));
    case TBM_NM_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(v16)), 16));
    case TBM_NM_F32:
        break;
    }
    return _mm256_loadu_ps((const float *)values + first);
}

TBM_INLINE __m256 canonical_nans(__m256 v)
{
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)TBM_NM_NAN)),
                            _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* Bytes 8h .. 8h+7 of v, widened to 8 dwords: zero- or sign-extended. */
TBM_INLINE __m256i half_u8(__m128i v, unsigned h)
{
    return _mm256_cvtepu8_epi32(h != 0 ? _mm_unpackhi_epi64(v, v) : v);
}

TBM_INLINE __m256i half_i8(__m128i v, unsigned h)
{
    return _mm256_cvtepi8_epi32(h != 0 ? _mm_unpackhi_epi64(v, v) : v);
}

/* Entry idx (0..15) of the window held in lo and hi, per lane: bit 3 of
 * idx, shifted into the sign bit, chooses the half. */
TBM_INLINE __m256 pick(__m256 lo, __m256 hi, __m256i idx)
{
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

TBM_INLINE void accum_zero(struct accum *acc)
{
    acc->h[0] = _mm256_setzero_ps();
    acc->h[1] = _mm256_setzero_ps();
}

/* Lane l adds its value times x[window + offset]. */
TBM_INLINE void accum_step(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, uint64_t step,
                           const struct window *xw, struct accum *acc)
{
    __m128i off = _mm_loadu_si128((const __m128i *)(w->offsets + step * TBM_NM_LANES));
    __m128i none = _mm_cmpeq_epi8(off, _mm_set1_epi8((char)TBM_NM_NONE));
    bool all_live = _mm_testz_si128(none, none);

    for (unsigned h = 0; h < 2; h++) {
        __m256 sum = _mm256_fmadd_ps(half_values(kind, w->values, step, h),
                                     pick(xw->lo, xw->hi, half_u8(off, h)), acc->h[h]);

        acc->h[h] = all_live
                        ? sum
                        : _mm256_blendv_ps(sum, acc->h[h], _mm256_castsi256_ps(half_i8(none, h)));
    }
}

TBM_INLINE void window_load(const float *x, uint64_t cols, uint64_t base, struct window *xw)
{
    float tail[TBM_NM_WINDOW] = {0};
    const float *p = x + base;

    if (cols - base < TBM_NM_WINDOW) {
        memcpy(tail, p, (cols - base) * sizeof(float));
        p = tail;
    }
    xw->lo = _mm256_loadu_ps(p);
    xw->hi = _mm256_loadu_ps(p + 8);
}

TBM_INLINE void accum_store(const struct tbm_nm_matrix *w, float *y, uint64_t row,
                            const struct accum *acc)
{
    float out[TBM_NM_LANES];

    if (w->rows - row >= TBM_NM_LANES) {
        _mm256_storeu_ps(y + row, canonical_nans(acc->h[0]));
        _mm256_storeu_ps(y + row + 8, canonical_nans(acc->h[1]));
        return;
    }
    _mm256_storeu_ps(out, canonical_nans(acc->h[0]));
    _mm256_storeu_ps(out + 8, canonical_nans(acc->h[1]));
    memcpy(y + row, out, (w->rows - row) * sizeof(float));
}

/* 8 batch columns at p; only those in jm unless full. */
TBM_INLINE __m256 load_chunk(const float *p, __m256i jm, bool full)
{
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, jm);
}

/* One step of a batch chunk: lane l (a row) adds its value v[l] times row
 * window + offset of x, over the chunk's columns. */
TBM_INLINE void step_batchn(const struct tbm_nm_matrix *w, uint64_t step, const float *v,
                            const float *xwin, uint32_t batch, __m256i jm, bool full, __m256 *acc)
{
    const uint8_t *off = w->offsets + step * TBM_NM_LANES;
    unsigned none = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)off), _mm_set1_epi8((char)TBM_NM_NONE)));

    if (none == 0) {
#pragma GCC unroll 16
        for (unsigned l = 0; l < TBM_NM_LANES; l++)
            acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(v[l]),
                                     load_chunk(xwin + (size_t)off[l] * batch, jm, full), acc[l]);
        return;
    }
#pragma GCC unroll 16
    for (unsigned l = 0; l < TBM_NM_LANES; l++) {
        if ((none >> l & 1) == 0)
            acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(v[l]),
                                     load_chunk(xwin + (size_t)off[l] * batch, jm, full), acc[l]);
    }
}

/* Batch columns j0 .. j0+7 (those in jm unless full) of one block: a
 * register per row, its lanes the batch columns. */
TBM_INLINE void batchn_block(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                             uint32_t batch, float *y, uint64_t block, uint32_t j0, __m256i jm,
                             bool full)
{
    __m256 acc[TBM_NM_LANES];
    uint64_t step = w->first_step[block];
    uint64_t row = block * TBM_NM_LANES;
    uint64_t rows = w->rows - row < TBM_NM_LANES ? w->rows - row : TBM_NM_LANES;

#pragma GCC unroll 16
    for (unsigned l = 0; l < TBM_NM_LANES; l++)
        acc[l] = _mm256_setzero_ps();
    for (uint64_t win = 0; win < w->windows; win++) {
        const float *xwin = x + win * TBM_NM_WINDOW * batch + j0;
        unsigned n = w->counts[block * w->windows + win];
        float v[TBM_NM_WINDOW * TBM_NM_LANES] __attribute__((aligned(32)));

        /* Converted apart from their use, so that each FMA takes its value
         * as a broadcast load rather than a shuffle of a register. */
        for (unsigned k = 0; k < n; k++) {
            _mm256_store_ps(v + k * TBM_NM_LANES, half_values(kind, w->values, step + k, 0));
            _mm256_store_ps(v + k * TBM_NM_LANES + 8, half_values(kind, w->values, step + k, 1));
        }
        for (unsigned k = 0; k < n; k++)
            step_batchn(w, step + k, v + k * TBM_NM_LANES, xwin, batch, jm, full, acc);
        step += n;
    }
#pragma GCC unroll 16
    for (unsigned l = 0; l < TBM_NM_LANES; l++) {
        float *out = y + (row + l) * batch + j0;

        if (l >= rows)
            break;
        if (full)
            _mm256_storeu_ps(out, canonical_nans(acc[l]));
        else
            _mm256_maskstore_ps(out, jm, canonical_nans(acc[l]));
    }
}

TBM_INLINE void batchn(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                       uint32_t batch, float *y)
{
    __m256i jm = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(batch % 8)),
                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

    for (uint64_t block = 0; block < w->blocks; block++) {
        uint32_t j0 = 0;

        for (; batch - j0 >= 8; j0 += 8)
            batchn_block(kind, w, x, batch, y, block, j0, jm, true);
        if (j0 < batch)
            batchn_block(kind, w, x, batch, y, block, j0, jm, false);
    }
}

#include "spmm_simd.h"

void tbm_spmm_avx2(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y)
{
    spmm_simd(w, x, batch, y);
}
