/* The inspection files: stats.json (statistics of the dense expansion) and
 * the block pictures mask.png and weights.png (one function, the row's arg
 * saying which), each rendered once per mount by streaming over the tensor
 * in bounded memory with the kernels of include/tbm/stats.h. Their sizes
 * are fixed before they are rendered. */
#include "internal.h"

#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/stats.h"

void tbm_matrix_dims(const struct tbm_tensor *t, uint64_t *rows, uint64_t *cols)
{
    uint64_t nw = t->hdr.num_weights;

    *rows = t->shape_matches && t->ndim > 1 && t->shape[0] > 0 ? t->shape[0] : 1;
    *cols = nw / *rows;
}

/* Elements per step: bounds a render's buffers (2 MiB of fp64 weights and
 * their mask words) while keeping each read large. */
#define STEP (256u * 1024u)

struct stream {
    const struct tbm_tensor *t;
    void *weights;
    uint8_t *mask; /* NULL when the dense expansion keeps every element */
    uint64_t step; /* elements per chunk, whole groups */
};

static int stream_init(struct stream *s, const struct tbm_tensor *t)
{
    uint32_t m = t->hdr.nm_m;

    s->t = t;
    s->step = m ? STEP - STEP % m : STEP;
    s->weights = malloc(STEP * 8);
    s->mask = t->mask_usable ? malloc(STEP + 8) : NULL;
    return s->weights && (s->mask || !t->mask_usable) ? 0 : TBM_ERR_NOMEM;
}

static void stream_free(struct stream *s)
{
    free(s->weights);
    free(s->mask);
}

/* Reads chunk [first, first + n) of the stored weights and its mask words
 * (in the contract's layout whatever the stored one). */
static int stream_read(struct stream *s, uint64_t first, uint64_t n)
{
    return tbm_chunk_read(s->t, first, n, s->weights, s->mask, NULL);
}

/* --- stats.json --- */

struct stats_doc {
    struct tbm_stats_result r;
    bool has_rows;
    double row_min, row_max;
};

/* Kept elements of each row of the chunk's elements, folded into the row
 * densities; *row and *row_kept carry a row across chunks. */
static void add_rows(const struct tbm_views *v, const struct stream *s, uint64_t first, uint64_t n,
                     uint64_t cols, uint64_t *row_kept, struct stats_doc *d)
{
    uint32_t m = s->t->hdr.nm_m, wb = tbm_mask_word_bytes(m);
    uint64_t g0 = m ? first / m : 0;

    for (uint64_t e = first; e < first + n;) {
        uint64_t row_end = (e / cols + 1) * cols;
        uint64_t k = (row_end < first + n ? row_end : first + n) - e;
        *row_kept +=
            s->mask ? tbm_mask_kept(v->model->isa, s->mask + (e / m - g0) * wb, m, e, k) : k;
        e += k;
        if (e == row_end) {
            double density = (double)*row_kept / (double)cols;
            d->row_min = d->has_rows && d->row_min < density ? d->row_min : density;
            d->row_max = d->has_rows && d->row_max > density ? d->row_max : density;
            d->has_rows = true;
            *row_kept = 0;
        }
    }
}

/* Pass 1, with the row densities; for fp32 and fp64, pass 2 over the
 * tensor again (see include/tbm/stats.h). */
static int compute_stats(const struct tbm_views *v, const struct tbm_tensor *t, struct stats_doc *d)
{
    struct stream s;
    struct tbm_stats_acc acc;
    struct tbm_stats_hist hist;
    uint64_t nw = t->hdr.num_weights, rows, cols, row_kept = 0;
    enum tbm_precision prec = t->hdr.precision;
    bool two_pass = tbm_stats_two_pass(prec);
    uint32_t m = t->hdr.nm_m;
    int r = stream_init(&s, t);

    if (r < 0 || tbm_stats_init(&acc, prec) < 0) {
        stream_free(&s);
        return TBM_ERR_NOMEM;
    }
    tbm_matrix_dims(t, &rows, &cols);
    for (uint64_t i = 0; r == 0 && i < nw; i += s.step) {
        uint64_t n = nw - i < s.step ? nw - i : s.step;
        if ((r = stream_read(&s, i, n)) == 0) {
            tbm_stats_scan(v->model->isa, prec, s.weights, s.mask, m, n, &acc);
            if (cols > 0)
                add_rows(v, &s, i, n, cols, &row_kept, d);
        }
    }
    if (r == 0 && two_pass)
        tbm_stats_hist_init(&hist, &acc);
    for (uint64_t i = 0; r == 0 && two_pass && i < nw; i += s.step) {
        uint64_t n = nw - i < s.step ? nw - i : s.step;
        if ((r = stream_read(&s, i, n)) == 0)
            tbm_stats_hist(v->model->isa, prec, s.weights, s.mask, m, n, &hist);
    }
    if (r == 0)
        tbm_stats_finish(&acc, two_pass ? &hist : NULL, &d->r);
    tbm_stats_free(&acc);
    stream_free(&s);
    return r;
}

/* stats.json's text; widest prints every number as wide as its kind can
 * be, which counts the length every stats.json is padded to. */
struct text {
    struct tbm_buf b;
    bool widest;
};

static void put(struct text *x, const char *s)
{
    tbm_buf_adds(&x->b, s);
}

static void put_u64(struct text *x, uint64_t v)
{
    tbm_buf_printf(&x->b, "%llu", (unsigned long long)(x->widest ? UINT64_MAX : v));
}

/* %.17g gives back every double exactly, in at most 24 characters; JSON
 * has no NaN or infinity, and these are finite. */
static void put_double(struct text *x, bool known, double v)
{
    if (!known && !x->widest)
        put(x, "null");
    else
        tbm_buf_printf(&x->b, "%.17g", x->widest ? -2.2250738585072014e-308 : v);
}

static void stats_text(struct text *x, const struct stats_doc *d)
{
    const struct tbm_stats_result *r = &d->r;
    bool f = r->has_finite;

    put(x, "{\n  \"count\": ");
    put_u64(x, r->count);
    put(x, ",\n  \"kept\": ");
    put_u64(x, r->kept);
    put(x, ",\n  \"zeros\": ");
    put_u64(x, r->zeros);
    put(x, ",\n  \"nan\": ");
    put_u64(x, r->nan);
    put(x, ",\n  \"inf\": ");
    put_u64(x, r->inf);
    put(x, ",\n  \"min\": ");
    put_double(x, f, r->min);
    put(x, ",\n  \"max\": ");
    put_double(x, f, r->max);
    put(x, ",\n  \"mean\": ");
    put_double(x, f, r->mean);
    put(x, ",\n  \"std\": ");
    put_double(x, f, r->std);
    put(x, ",\n  \"abs_mean\": ");
    put_double(x, f, r->abs_mean);
    put(x, ",\n  \"hist_edges\": ");
    if (f || x->widest) {
        for (int i = 0; i <= TBM_STATS_BINS; i++) {
            put(x, i ? ", " : "[");
            put_double(x, true, r->hist_edges[i]);
        }
        put(x, "]");
    } else {
        put(x, "null");
    }
    put(x, ",\n  \"hist_counts\": ");
    for (int i = 0; i < TBM_STATS_BINS; i++) {
        put(x, i ? ", " : "[");
        put_u64(x, r->hist_counts[i]);
    }
    put(x, "],\n  \"row_density_min\": ");
    put_double(x, d->has_rows, d->row_min);
    put(x, ",\n  \"row_density_max\": ");
    put_double(x, d->has_rows, d->row_max);
    put(x, "\n}");
}

/* Every stats.json is this long: its widest rendering and a newline, the
 * text padded with spaces before that newline (JSON allows them). */
static size_t stats_len(void)
{
    struct text x = {.b = TBM_BUF_COUNT, .widest = true};
    struct stats_doc d = {0};

    stats_text(&x, &d);
    return x.b.len + 1;
}

int tbm_stats_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                        uint64_t *size)
{
    (void)v, (void)row, (void)t;
    *size = stats_len();
    return 0;
}

int tbm_stats_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          char **out, size_t *len)
{
    struct stats_doc d = {0};
    struct text x = {.b = TBM_BUF_INIT};
    int r = compute_stats(v, &v->model->tensors[t], &d);

    (void)row;
    if (r < 0)
        return r;
    stats_text(&x, &d);
    put(&x, "\n");
    return tbm_buf_take(&x.b, out, len);
}

/* --- mask.png, weights.png --- */

int tbm_picture_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size)
{
    uint64_t rows, cols;
    uint32_t w, h;

    (void)row;
    tbm_matrix_dims(&v->model->tensors[t], &rows, &cols);
    tbm_image_dims(rows, cols, &w, &h);
    *size = tbm_png_size(w, h);
    return 0;
}

int tbm_picture_render(const struct tbm_views *v, const struct tbm_row *row, size_t i, char **out,
                       size_t *len)
{
    bool weights = *(const enum tbm_picture *)row->arg == TBM_PICTURE_WEIGHTS;
    const struct tbm_tensor *t = &v->model->tensors[i];
    struct tbm_image_acc img;
    struct stream s = {0};
    uint64_t rows, cols, nw = t->hdr.num_weights;
    uint8_t *px = NULL;
    int r;

    tbm_matrix_dims(t, &rows, &cols);
    if (tbm_image_init(&img, rows, cols) < 0)
        return TBM_ERR_NOMEM;
    if ((r = stream_init(&s, t)) < 0)
        goto out;
    for (uint64_t k = 0; r == 0 && k < nw; k += s.step) {
        uint64_t n = nw - k < s.step ? nw - k : s.step;
        if ((r = stream_read(&s, k, n)) == 0)
            tbm_image_add(&img, v->model->isa, t->hdr.precision, s.weights, s.mask, t->hdr.nm_m, n);
    }
    if (r < 0)
        goto out;
    r = TBM_ERR_NOMEM;
    size_t size = (size_t)tbm_png_size(img.width, img.height);
    char *png = malloc(size);
    if (weights && !(px = malloc((size_t)img.width * img.height))) {
        free(png);
        goto out;
    }
    if (!png)
        goto out;
    if (px)
        tbm_image_weights(&img, px);
    tbm_png_write(px ? px : img.mask_px, img.width, img.height, (uint8_t *)png);
    *out = png;
    *len = size;
    r = 0;
out:
    free(px);
    stream_free(&s);
    tbm_image_free(&img);
    return r;
}
