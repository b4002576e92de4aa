/* AVX2 sparse matmul over the compressed N:M form, bit for bit the portable
 * one: each output sees the same fmaf sequence, one FMA lane each. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "spmm_internal.h"

#define INLINE static inline __attribute__((always_inline))

/* Blocks that batch 1 runs side by side: a lane's sum is one dependent FMA
 * chain, so one block alone would wait on FMA latency every step. */
#define GANG 2

/* The 8 values of lanes 8h .. 8h+7 of a step as float32. */
INLINE __m256 half_values(enum tbm_nm_kind kind, const void *values, uint64_t step, unsigned h)
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

INLINE __m256 canonical_nans(__m256 v)
{
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)TBM_NM_NAN)),
                            _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* Bytes 8h .. 8h+7 of v, widened to 8 dwords: zero- or sign-extended. */
INLINE __m256i half_u8(__m128i v, unsigned h)
{
    return _mm256_cvtepu8_epi32(h != 0 ? _mm_unpackhi_epi64(v, v) : v);
}

INLINE __m256i half_i8(__m128i v, unsigned h)
{
    return _mm256_cvtepi8_epi32(h != 0 ? _mm_unpackhi_epi64(v, v) : v);
}

/* Entry idx (0..15) of the window held in lo and hi, per lane: bit 3 of
 * idx, shifted into the sign bit, chooses the half. */
INLINE __m256 pick(__m256 lo, __m256 hi, __m256i idx)
{
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* One step of batch 1: lane l adds its value times x[window + offset];
 * acc[h] holds lanes 8h .. 8h+7. */
INLINE void step_batch1(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, uint64_t step,
                        __m256 lo, __m256 hi, __m256 *acc)
{
    __m128i off = _mm_loadu_si128((const __m128i *)(w->offsets + step * TBM_NM_LANES));
    __m128i none = _mm_cmpeq_epi8(off, _mm_set1_epi8((char)TBM_NM_NONE));
    bool all_live = _mm_testz_si128(none, none);

    for (unsigned h = 0; h < 2; h++) {
        __m256 sum = _mm256_fmadd_ps(half_values(kind, w->values, step, h),
                                     pick(lo, hi, half_u8(off, h)), acc[h]);

        acc[h] =
            all_live ? sum : _mm256_blendv_ps(sum, acc[h], _mm256_castsi256_ps(half_i8(none, h)));
    }
}

/* The window of x at base, zero past the last column. */
INLINE void load_window(const float *x, uint64_t cols, uint64_t base, __m256 *lo, __m256 *hi)
{
    float tail[TBM_NM_WINDOW] = {0};
    const float *p = x + base;

    if (cols - base < TBM_NM_WINDOW) {
        memcpy(tail, p, (cols - base) * sizeof(float));
        p = tail;
    }
    *lo = _mm256_loadu_ps(p);
    *hi = _mm256_loadu_ps(p + 8);
}

/* Rows row .. row+15 of a batch-1 y, those that exist. */
INLINE void store_rows(const struct tbm_nm_matrix *w, float *y, uint64_t row, const __m256 *acc)
{
    float out[TBM_NM_LANES];

    if (w->rows - row >= TBM_NM_LANES) {
        _mm256_storeu_ps(y + row, canonical_nans(acc[0]));
        _mm256_storeu_ps(y + row + 8, canonical_nans(acc[1]));
        return;
    }
    _mm256_storeu_ps(out, canonical_nans(acc[0]));
    _mm256_storeu_ps(out + 8, canonical_nans(acc[1]));
    memcpy(y + row, out, (w->rows - row) * sizeof(float));
}

/* Batch 1 for blocks block .. block+gang-1, two registers per block. The
 * windows' steps run in lockstep as far as all blocks have them. */
INLINE void batch1_blocks(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                          float *y, uint64_t block, unsigned gang)
{
    __m256 acc[GANG][2];
    uint64_t step[GANG];

#pragma GCC unroll 2
    for (unsigned g = 0; g < gang; g++) {
        acc[g][0] = _mm256_setzero_ps();
        acc[g][1] = _mm256_setzero_ps();
        step[g] = w->first_step[block + g];
    }
    for (uint64_t win = 0; win < w->windows; win++) {
        unsigned n[GANG], common = TBM_NM_WINDOW;
        __m256 lo, hi;

        load_window(x, w->cols, win * TBM_NM_WINDOW, &lo, &hi);
#pragma GCC unroll 2
        for (unsigned g = 0; g < gang; g++) {
            n[g] = w->counts[(block + g) * w->windows + win];
            common = n[g] < common ? n[g] : common;
        }
        for (unsigned k = 0; k < common; k++) {
#pragma GCC unroll 2
            for (unsigned g = 0; g < gang; g++)
                step_batch1(kind, w, step[g] + k, lo, hi, acc[g]);
        }
#pragma GCC unroll 2
        for (unsigned g = 0; g < gang; g++) {
            for (unsigned k = common; k < n[g]; k++)
                step_batch1(kind, w, step[g] + k, lo, hi, acc[g]);
            step[g] += n[g];
        }
    }
#pragma GCC unroll 2
    for (unsigned g = 0; g < gang; g++)
        store_rows(w, y, (block + g) * TBM_NM_LANES, acc[g]);
}

INLINE void batch1(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x, float *y)
{
    uint64_t block = 0;

    for (; block + GANG <= w->blocks; block += GANG)
        batch1_blocks(kind, w, x, y, block, GANG);
    for (; block < w->blocks; block++)
        batch1_blocks(kind, w, x, y, block, 1);
}

/* 8 batch columns at p; only those in jm unless full. */
INLINE __m256 load_chunk(const float *p, __m256i jm, bool full)
{
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, jm);
}

/* One step of a batch chunk: lane l (a row) adds its value v[l] times row
 * window + offset of x, over the chunk's columns. */
INLINE void step_batchn(const struct tbm_nm_matrix *w, uint64_t step, const float *v,
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
INLINE void batchn_block(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
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

INLINE void batchn(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
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

INLINE void run(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                uint32_t batch, float *y)
{
    if (batch == 1)
        batch1(kind, w, x, y);
    else
        batchn(kind, w, x, batch, y);
}

/* A call of run per value kind, so that each conversion is fixed outside
 * the loops. */
void tbm_spmm_avx2(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y)
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
