/* Block images of the self-test matrix for mask.png and weights.png: the
 * streaming block sums and the pixel mappings of the contract. Plain C over
 * values that tbm_expand converts, so every level gives the same image. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tbm/stats.h"

/* Elements converted per call of tbm_expand. */
#define IMAGE_CHUNK 1024

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

void tbm_image_dims(uint64_t rows, uint64_t cols, uint32_t *width, uint32_t *height)
{
    if (rows == 0 || cols == 0) {
        *width = *height = 1;
        return;
    }
    *height = (uint32_t)ceil_div(rows, ceil_div(rows, TBM_IMAGE_MAX));
    *width = (uint32_t)ceil_div(cols, ceil_div(cols, TBM_IMAGE_MAX));
}

int tbm_image_init(struct tbm_image_acc *a, uint64_t rows, uint64_t cols)
{
    size_t pixels;

    memset(a, 0, sizeof *a);
    a->rows = rows;
    a->cols = cols;
    tbm_image_dims(rows, cols, &a->width, &a->height);
    if (rows != 0 && cols != 0) {
        a->bh = ceil_div(rows, TBM_IMAGE_MAX);
        a->bw = ceil_div(cols, TBM_IMAGE_MAX);
    }
    pixels = (size_t)a->width * a->height;
    a->kept = calloc(a->width, sizeof *a->kept);
    a->finite = calloc(a->width, sizeof *a->finite);
    a->abs_sum = calloc(a->width, sizeof *a->abs_sum);
    a->mask_px = calloc(pixels, 1);
    a->mean = calloc(pixels, sizeof *a->mean);
    if (!a->kept || !a->finite || !a->abs_sum || !a->mask_px || !a->mean) {
        tbm_image_free(a);
        return -1;
    }
    return 0;
}

void tbm_image_free(struct tbm_image_acc *a)
{
    free(a->kept);
    free(a->finite);
    free(a->abs_sum);
    free(a->mask_px);
    free(a->mean);
    memset(a, 0, sizeof *a);
}

uint8_t tbm_image_mask_pixel(uint64_t kept, uint64_t elems)
{
    if (elems == 0)
        return 0;
    /* floor(255 kept / elems + 1/2); kept <= elems < 2^54 in any tensor */
    return (uint8_t)((510 * kept + elems) / (2 * elems));
}

uint8_t tbm_image_weight_pixel(double m, double lo, double hi)
{
    double v;

    if (!(m > 0))
        return 0;
    if (lo == hi)
        return 255;
    v = 1 + round(254 * (log(m) - log(lo)) / (log(hi) - log(lo)));
    /* a mean outside [lo, hi] is not the contract's; keep it in range */
    return v < 1 ? 1 : v > 255 ? 255 : (uint8_t)v;
}

/* The pixels of the block row that the sums hold, row br; the sums are
 * cleared for the next one. */
static void end_block_row(struct tbm_image_acc *a, uint64_t br)
{
    uint64_t h = a->rows - br * a->bh < a->bh ? a->rows - br * a->bh : a->bh;

    for (uint32_t bc = 0; bc < a->width; bc++) {
        uint64_t w = a->cols - bc * a->bw < a->bw ? a->cols - bc * a->bw : a->bw;
        size_t px = (size_t)br * a->width + bc;

        a->mask_px[px] = tbm_image_mask_pixel(a->kept[bc], h * w);
        a->mean[px] = a->finite[bc] ? a->abs_sum[bc] / (double)a->finite[bc] : 0.0;
        a->kept[bc] = a->finite[bc] = 0;
        a->abs_sum[bc] = 0.0;
    }
}

void tbm_image_add(struct tbm_image_acc *a, enum tbm_isa isa, enum tbm_precision prec,
                   const void *weights, const uint8_t *mask, uint32_t m, uint64_t count)
{
    const uint8_t *w = weights;
    size_t size = tbm_element_size(prec);
    uint64_t total = a->rows * a->cols;
    struct tbm_mask_stream s = {0}; /* not read without a mask */
    float buf[IMAGE_CHUNK];
    uint64_t row, col, bc, in_block;

    if (a->pos >= total)
        return;
    count = count < total - a->pos ? count : total - a->pos;
    if (count == 0)
        return;
    if (mask)
        tbm_mask_stream_init(&s, mask, m, (uint32_t)(a->pos % m));
    row = a->pos / a->cols;
    col = a->pos % a->cols;
    bc = col / a->bw;
    in_block = col % a->bw;
    while (count > 0) {
        size_t n = count < IMAGE_CHUNK ? (size_t)count : IMAGE_CHUNK;

        tbm_expand(isa, prec, w, NULL, 0, 0, n, buf);
        for (size_t k = 0; k < n; k++) {
            uint32_t keep = mask ? (uint32_t)tbm_mask_stream_take(&s, 1) : 1;
            float f = buf[k];

            a->kept[bc] += keep;
            /* the dense value: a pruned element is +0.0, which is finite */
            if (!keep || isfinite(f)) {
                a->finite[bc]++;
                a->abs_sum[bc] += keep ? fabs((double)f) : 0.0;
            }
            if (++in_block == a->bw) {
                in_block = 0;
                bc++;
            }
            if (++col == a->cols) {
                col = in_block = bc = 0;
                if (++row % a->bh == 0 || row == a->rows)
                    end_block_row(a, (row - 1) / a->bh);
            }
        }
        w += n * size;
        count -= n;
        a->pos += n;
    }
}

void tbm_image_weights(const struct tbm_image_acc *a, uint8_t *out)
{
    size_t pixels = (size_t)a->width * a->height;
    double lo = INFINITY, hi = 0.0;

    for (size_t i = 0; i < pixels; i++) {
        if (a->mean[i] > 0) {
            lo = a->mean[i] < lo ? a->mean[i] : lo;
            hi = a->mean[i] > hi ? a->mean[i] : hi;
        }
    }
    for (size_t i = 0; i < pixels; i++)
        out[i] = tbm_image_weight_pixel(a->mean[i], lo, hi);
}
