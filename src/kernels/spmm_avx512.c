/* AVX-512 sparse matmul over the compressed N:M form, bit for bit the
 * portable one: each output sees the same fmaf sequence, one FMA lane each. */
#include <immintrin.h>
#include <stddef.h>

#include "internal.h"
#include "spmm_internal.h"

/* Blocks that batch 1 runs side by side: a lane's sum is one dependent FMA
 * chain, so one block alone would wait on FMA latency every step. */
#define GANG 4

/* Batch 1 holds a window of x in one register, entry j in lane j, and a
 * block's sums in one, row l in lane l. */
struct window {
    __m512 x;
};

struct accum {
    __m512 sum;
};

/* The 16 values of a step as float32. */
TBM_INLINE __m512 step_values(enum tbm_nm_kind kind, const void *values, uint64_t step)
{
    const uint16_t *v16 = (const uint16_t *)values + step * TBM_NM_LANES;

    switch (kind) {
    case TBM_NM_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v16));
    case TBM_NM_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)v16)), 16));
    case TBM_NM_F32:
        break;
    }
    return _mm512_loadu_ps((const float *)values + step * TBM_NM_LANES);
}

TBM_INLINE __m512 canonical_nans(__m512 v)
{
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);

    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32((int)TBM_NM_NAN)));
}

/* Lanes 0 .. n-1 (n <= 16). */
TBM_INLINE __mmask16 first_lanes(uint64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

TBM_INLINE __mmask16 live_lanes(const uint8_t *offsets)
{
    return _mm_cmpneq_epi8_mask(_mm_loadu_si128((const __m128i *)offsets),
                                _mm_set1_epi8((char)TBM_NM_NONE));
}

TBM_INLINE void accum_zero(struct accum *acc)
{
    acc->sum = _mm512_setzero_ps();
}

/* Lane l adds its value times x[window + offset]. */
TBM_INLINE void accum_step(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, uint64_t step,
                           const struct window *xw, struct accum *acc)
{
    const uint8_t *off = w->offsets + step * TBM_NM_LANES;
    __m512 xv =
        _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)off)), xw->x);

    acc->sum =
        _mm512_mask3_fmadd_ps(step_values(kind, w->values, step), xv, acc->sum, live_lanes(off));
}

TBM_INLINE void window_load(const float *x, uint64_t cols, uint64_t base, struct window *xw)
{
    xw->x = _mm512_maskz_loadu_ps(first_lanes(cols - base), x + base);
}

TBM_INLINE void accum_store(const struct tbm_nm_matrix *w, float *y, uint64_t row,
                            const struct accum *acc)
{
    _mm512_mask_storeu_ps(y + row, first_lanes(w->rows - row), canonical_nans(acc->sum));
}

/* Batch > 1 runs batch columns CHUNK at a time, GANG_CHUNK blocks side by
 * side: lane l of acc[g][b] is row l of block g, batch column b. Each window
 * of x is transposed once into xt[b] (lane j: x row base + j), so that a
 * step costs a permute and an FMA per batch column, as batch 1 does. */
#define CHUNK      8
#define GANG_CHUNK 2

/* Row j of a window of x: batch columns jm, zero past the last column. */
TBM_INLINE __m256 window_row(const float *xwin, uint32_t batch, uint32_t width, __mmask8 jm,
                             unsigned j)
{
    return j < width ? _mm256_maskz_loadu_ps(jm, xwin + (size_t)j * batch) : _mm256_setzero_ps();
}

/* xt[b] lane j = x row window + j, column b: rows j and j + 8 share a
 * register, each 256-bit half gets the usual 8 x 8 transpose (unpack, then
 * shuffle), and a two-source permute gathers each column's quarters. */
TBM_INLINE void transpose_window(const float *xwin, uint32_t batch, uint32_t width, __mmask8 jm,
                                 __m512 *xt)
{
    const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(4));
    __m512 z[8], t[8], s[8];

#pragma GCC unroll 8
    for (unsigned j = 0; j < 8; j++)
        z[j] = _mm512_insertf32x8(_mm512_castps256_ps512(window_row(xwin, batch, width, jm, j)),
                                  window_row(xwin, batch, width, jm, j + 8), 1);
#pragma GCC unroll 4
    for (unsigned j = 0; j < 8; j += 2) {
        t[j] = _mm512_unpacklo_ps(z[j], z[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(z[j], z[j + 1]);
    }
#pragma GCC unroll 2
    for (unsigned j = 0; j < 8; j += 4) {
        s[j] = _mm512_shuffle_ps(t[j], t[j + 2], 0x44);
        s[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], 0xEE);
        s[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        s[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (unsigned b = 0; b < 4; b++) {
        xt[b] = _mm512_permutex2var_ps(s[b], low, s[b + 4]);
        xt[b + 4] = _mm512_permutex2var_ps(s[b], high, s[b + 4]);
    }
}

/* One step of a chunk: lane l adds its value times x[window + offset][b]
 * into acc[b]. */
TBM_INLINE void step_chunk(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, uint64_t step,
                           const __m512 *xt, __m512 *acc)
{
    const uint8_t *off = w->offsets + step * TBM_NM_LANES;
    __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)off));
    __mmask16 live = live_lanes(off);
    __m512 v = step_values(kind, w->values, step);

#pragma GCC unroll 8
    for (unsigned b = 0; b < CHUNK; b++)
        acc[b] = _mm512_mask3_fmadd_ps(v, _mm512_permutexvar_ps(idx, xt[b]), acc[b], live);
}

/* Writes acc[b] lane l to y[row + l][j0 + b] for the rows and the batch
 * columns (nb of them) that exist. */
TBM_INLINE void store_chunk(const struct tbm_nm_matrix *w, uint32_t batch, float *y, uint64_t row,
                            uint32_t j0, uint32_t nb, const __m512 *acc)
{
    float out[CHUNK][TBM_NM_LANES] __attribute__((aligned(64)));
    uint64_t rows = w->rows - row < TBM_NM_LANES ? w->rows - row : TBM_NM_LANES;

#pragma GCC unroll 8
    for (unsigned b = 0; b < CHUNK; b++)
        _mm512_store_ps(out[b], canonical_nans(acc[b]));
    for (uint64_t l = 0; l < rows; l++) {
        for (uint32_t b = 0; b < nb; b++)
            y[(row + l) * batch + j0 + b] = out[b][l];
    }
}

/* Batch columns j0 .. j0+nb-1 of blocks block .. block+gang-1, in the
 * lockstep of batch1_blocks (spmm_simd.h) but not through it: with both
 * walks from that one function, GCC 12 left batch 1's inner loops reloading
 * pointers from the stack every step, and batch 1 ran 2-4% slower. */
TBM_INLINE void chunk_blocks(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                             uint32_t batch, float *y, uint64_t block, unsigned gang, uint32_t j0,
                             uint32_t nb)
{
    __mmask8 jm = (__mmask8)((1u << nb) - 1);
    __m512 acc[GANG_CHUNK][CHUNK];
    uint64_t step[GANG_CHUNK];

#pragma GCC unroll 2
    for (unsigned g = 0; g < gang; g++) {
#pragma GCC unroll 8
        for (unsigned b = 0; b < CHUNK; b++)
            acc[g][b] = _mm512_setzero_ps();
        step[g] = w->first_step[block + g];
    }
    for (uint64_t win = 0; win < w->windows; win++) {
        uint64_t base = win * TBM_NM_WINDOW;
        unsigned n[GANG_CHUNK], common = TBM_NM_WINDOW;
        __m512 xt[CHUNK];

        transpose_window(
            x + base * batch + j0, batch,
            w->cols - base < TBM_NM_WINDOW ? (uint32_t)(w->cols - base) : TBM_NM_WINDOW, jm, xt);
#pragma GCC unroll 2
        for (unsigned g = 0; g < gang; g++) {
            n[g] = w->counts[(block + g) * w->windows + win];
            common = n[g] < common ? n[g] : common;
        }
        for (unsigned k = 0; k < common; k++) {
#pragma GCC unroll 2
            for (unsigned g = 0; g < gang; g++)
                step_chunk(kind, w, step[g] + k, xt, acc[g]);
        }
#pragma GCC unroll 2
        for (unsigned g = 0; g < gang; g++) {
            for (unsigned k = common; k < n[g]; k++)
                step_chunk(kind, w, step[g] + k, xt, acc[g]);
            step[g] += n[g];
        }
    }
#pragma GCC unroll 2
    for (unsigned g = 0; g < gang; g++)
        store_chunk(w, batch, y, (block + g) * TBM_NM_LANES, j0, nb, acc[g]);
}

TBM_INLINE void batchn(enum tbm_nm_kind kind, const struct tbm_nm_matrix *w, const float *x,
                       uint32_t batch, float *y)
{
    for (uint32_t j0 = 0; j0 < batch; j0 += CHUNK) {
        uint32_t nb = batch - j0 < CHUNK ? batch - j0 : CHUNK;
        uint64_t block = 0;

        for (; block + GANG_CHUNK <= w->blocks; block += GANG_CHUNK)
            chunk_blocks(kind, w, x, batch, y, block, GANG_CHUNK, j0, nb);
        for (; block < w->blocks; block++)
            chunk_blocks(kind, w, x, batch, y, block, 1, j0, nb);
    }
}

#include "spmm_simd.h"

void tbm_spmm_avx512(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y)
{
    spmm_simd(w, x, batch, y);
}
