/* The compressed N:M form of a weight matrix (packing and freeing it), the
 * sparse matmul dispatcher, and the portable matmul that defines its result. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "spmm_internal.h"

/* Element bits of a row, read a window at a time from the mask words. A
 * NULL mask keeps every element. */
struct bit_reader {
    const uint8_t *mask;
    uint64_t group;
    uint32_t pos;
    uint32_t m;
    uint32_t word_bytes;
};

static void bit_reader_init(struct bit_reader *rd, const uint8_t *mask, uint32_t m, uint64_t first)
{
    rd->mask = mask;
    rd->m = m;
    rd->word_bytes = tbm_mask_word_bytes(m);
    rd->group = mask == NULL ? 0 : first / m;
    rd->pos = mask == NULL ? 0 : (uint32_t)(first % m);
}

/* Bits of the next n (1..TBM_NM_WINDOW) elements, element k in bit k. Bits
 * at positions >= m of a word are never read. */
static uint32_t bit_reader_take(struct bit_reader *rd, uint32_t n)
{
    uint32_t out = 0;

    if (rd->mask == NULL)
        return (1u << n) - 1;
    for (uint32_t done = 0; done < n;) {
        uint32_t word = tbm_mask_word(rd->mask + rd->group * rd->word_bytes, rd->word_bytes);
        uint32_t take = rd->m - rd->pos < n - done ? rd->m - rd->pos : n - done;

        out |= (word >> rd->pos & ((1u << take) - 1)) << done;
        done += take;
        rd->pos += take;
        if (rd->pos == rd->m) {
            rd->pos = 0;
            rd->group++;
        }
    }
    return out;
}

/* Element bytes of a stored precision and how the pack keeps its values;
 * 0 for an unknown precision. fp64 is packed as float32, the precision its
 * products are computed in. */
static size_t element_bytes(enum tbm_precision prec, enum tbm_nm_kind *kind)
{
    *kind = prec == TBM_FP16 ? TBM_NM_F16 : prec == TBM_BF16 ? TBM_NM_BF16 : TBM_NM_F32;
    return tbm_precision_size(prec);
}

static size_t kind_bytes(enum tbm_nm_kind kind)
{
    return kind == TBM_NM_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* malloc of n * size bytes (at least one, so that an empty matrix is not
 * taken for a failure); NULL when the size does not fit. */
static void *alloc_array(uint64_t n, size_t size)
{
    size_t bytes;

    if (__builtin_mul_overflow(n, size, &bytes))
        return NULL;
    return malloc(bytes > 0 ? bytes : 1);
}

/* Copies stored element i into value slot slot, in the matrix's kind. */
static void store_value(struct tbm_nm_matrix *w, enum tbm_precision prec, const uint8_t *weights,
                        uint64_t i, uint64_t slot)
{
    uint32_t bits32;
    uint64_t bits64;
    double d;

    switch (prec) {
    case TBM_FP16:
    case TBM_BF16:
        ((uint16_t *)w->values)[slot] = tbm_load16(weights + i * 2);
        return;
    case TBM_FP64:
        bits64 = tbm_load64(weights + i * 8);
        memcpy(&d, &bits64, sizeof d);
        ((float *)w->values)[slot] = (float)d;
        return;
    case TBM_FP32:
        break;
    }
    bits32 = tbm_mask_word(weights + i * 4, 4);
    memcpy((float *)w->values + slot, &bits32, sizeof bits32);
}

static uint32_t window_width(const struct tbm_nm_matrix *w, uint64_t window)
{
    uint64_t left = w->cols - window * TBM_NM_WINDOW;

    return left < TBM_NM_WINDOW ? (uint32_t)left : TBM_NM_WINDOW;
}

static uint32_t block_lanes(const struct tbm_nm_matrix *w, uint64_t block)
{
    uint64_t left = w->rows - block * TBM_NM_LANES;

    return left < TBM_NM_LANES ? (uint32_t)left : TBM_NM_LANES;
}

/* Steps of each block in each window: the most elements any of its rows
 * keeps there. Fills counts, first_step and steps. */
static void count_steps(struct tbm_nm_matrix *w, const uint8_t *mask, uint32_t m)
{
    uint64_t steps = 0;

    for (uint64_t b = 0; b < w->blocks; b++) {
        uint8_t *counts = w->counts + b * w->windows;

        memset(counts, 0, w->windows);
        for (uint32_t lane = 0; lane < block_lanes(w, b); lane++) {
            struct bit_reader rd;

            bit_reader_init(&rd, mask, m, (b * TBM_NM_LANES + lane) * w->cols);
            for (uint64_t win = 0; win < w->windows; win++) {
                int kept = __builtin_popcount(bit_reader_take(&rd, window_width(w, win)));

                if (kept > counts[win])
                    counts[win] = (uint8_t)kept;
            }
        }
        w->first_step[b] = steps;
        for (uint64_t win = 0; win < w->windows; win++)
            steps += counts[win];
    }
    w->steps = steps;
}

/* Places every kept element in its lane of its step. */
static void fill_steps(struct tbm_nm_matrix *w, enum tbm_precision prec, const uint8_t *weights,
                       const uint8_t *mask, uint32_t m)
{
    for (uint64_t b = 0; b < w->blocks; b++) {
        for (uint32_t lane = 0; lane < block_lanes(w, b); lane++) {
            uint64_t first = (b * TBM_NM_LANES + lane) * w->cols;
            uint64_t step = w->first_step[b];
            struct bit_reader rd;

            bit_reader_init(&rd, mask, m, first);
            for (uint64_t win = 0; win < w->windows; win++) {
                uint32_t bits = bit_reader_take(&rd, window_width(w, win));

                for (uint64_t k = step; bits != 0; k++, bits &= bits - 1) {
                    uint32_t col = (uint32_t)__builtin_ctz(bits);
                    uint64_t slot = k * TBM_NM_LANES + lane;

                    w->offsets[slot] = (uint8_t)col;
                    store_value(w, prec, weights, first + win * TBM_NM_WINDOW + col, slot);
                }
                step += w->counts[b * w->windows + win];
            }
        }
    }
}

void tbm_nm_free(struct tbm_nm_matrix *w)
{
    if (w == NULL)
        return;
    free(w->counts);
    free(w->first_step);
    free(w->offsets);
    free(w->values);
    free(w);
}

/* Whether the stored weights and mask of a rows x cols matrix have sizes
 * that fit in memory, so that every element and word index below does. */
static bool sizes_fit(uint64_t rows, uint64_t cols, size_t elem_bytes, const uint8_t *mask,
                      uint32_t m)
{
    uint64_t count, groups;
    size_t bytes;

    if (__builtin_mul_overflow(rows, cols, &count) ||
        __builtin_mul_overflow(count, elem_bytes, &bytes))
        return false;
    if (mask == NULL)
        return true;
    if (m == 0 || m > 32)
        return false;
    groups = count / m + (count % m != 0);
    return !__builtin_mul_overflow(groups, tbm_mask_word_bytes(m), &bytes);
}

int tbm_nm_pack(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                uint64_t rows, uint64_t cols, struct tbm_nm_matrix **out)
{
    enum tbm_nm_kind kind = TBM_NM_F32;
    size_t elem_bytes = element_bytes(prec, &kind);
    struct tbm_nm_matrix *w;
    uint64_t slots;

    if (elem_bytes == 0 || !sizes_fit(rows, cols, elem_bytes, mask, m))
        return -1;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    w->rows = rows;
    w->cols = cols;
    w->kind = kind;
    w->blocks = rows / TBM_NM_LANES + (rows % TBM_NM_LANES != 0);
    w->windows = cols / TBM_NM_WINDOW + (cols % TBM_NM_WINDOW != 0);
    if (__builtin_mul_overflow(w->blocks, w->windows, &slots))
        goto fail;
    w->counts = alloc_array(slots, 1);
    w->first_step = alloc_array(w->blocks, sizeof(uint64_t));
    if (w->counts == NULL || w->first_step == NULL)
        goto fail;
    count_steps(w, mask, m);
    if (__builtin_mul_overflow(w->steps, TBM_NM_LANES, &slots))
        goto fail;
    w->offsets = alloc_array(slots, 1);
    w->values = alloc_array(slots, kind_bytes(kind));
    if (w->offsets == NULL || w->values == NULL)
        goto fail;
    memset(w->offsets, TBM_NM_NONE, slots);
    memset(w->values, 0, slots * kind_bytes(kind));
    fill_steps(w, prec, weights, mask, m);
    *out = w;
    return 0;
fail:
    tbm_nm_free(w);
    return -1;
}

static float from_bits(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, sizeof f);
    return f;
}

static float value_at(const struct tbm_nm_matrix *w, uint64_t slot)
{
    switch (w->kind) {
    case TBM_NM_F16:
        return from_bits(tbm_f16_bits(((const uint16_t *)w->values)[slot]));
    case TBM_NM_BF16:
        return from_bits(tbm_bf16_bits(((const uint16_t *)w->values)[slot]));
    case TBM_NM_F32:
        break;
    }
    return ((const float *)w->values)[slot];
}

static void add_product(float v, const float *xr, uint32_t batch, float *yr)
{
    for (uint32_t j = 0; j < batch; j++)
        yr[j] = fmaf(v, xr[j], yr[j]);
}

/* The definition of the result: y starts at +0.0 and each y[r][j] adds the
 * kept products of row r in increasing column order, each with one fmaf;
 * a NaN result is written as TBM_NM_NAN. */
static void spmm_scalar(const struct tbm_nm_matrix *w, const float *x, uint32_t batch, float *y)
{
    uint64_t count = w->rows * batch;

    for (uint64_t i = 0; i < count; i++)
        y[i] = 0.0f;
    for (uint64_t b = 0; b < w->blocks; b++) {
        uint64_t step = w->first_step[b];

        for (uint64_t win = 0; win < w->windows; win++) {
            for (uint32_t k = 0; k < w->counts[b * w->windows + win]; k++, step++) {
                for (uint32_t lane = 0; lane < TBM_NM_LANES; lane++) {
                    uint64_t slot = step * TBM_NM_LANES + lane;
                    uint8_t off = w->offsets[slot];

                    if (off != TBM_NM_NONE)
                        add_product(value_at(w, slot), x + (win * TBM_NM_WINDOW + off) * batch,
                                    batch, y + (b * TBM_NM_LANES + lane) * batch);
                }
            }
        }
    }
    for (uint64_t i = 0; i < count; i++) {
        if (isnan(y[i]))
            y[i] = from_bits(TBM_NM_NAN);
    }
}

void tbm_spmm(enum tbm_isa isa, const struct tbm_nm_matrix *w, const float *x, uint32_t batch,
              float *y)
{
    switch (isa) {
    case TBM_ISA_AVX512:
        tbm_spmm_avx512(w, x, batch, y);
        return;
    case TBM_ISA_AVX2:
        tbm_spmm_avx2(w, x, batch, y);
        return;
    case TBM_ISA_SCALAR:
        break;
    }
    spmm_scalar(w, x, batch, y);
}
