/* The GGUF files (model.gguf, model.Q8_0.gguf, model.Q4_K_M.gguf), per read:
 * a range maps onto the header (fixed at mount, gguf_layout.c), zero padding
 * and pieces of tensors, and only the bytes it covers are computed: stored
 * elements masked in place, F32 expansions, or the blocks of a computed type
 * (Q8_0, Q4_K, F16, ...) it touches, quantized from the expansion, the rows
 * of attn_q and attn_k taken in the converter's order. */
#include "gguf.h"

#include "base/search.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Elements per step: bounds the per-thread scratch (about 1 MiB) while
 * keeping each pread large. A multiple of every block (the k-quants' 256). */
#define CHUNK (64u * 1024u)
/* Bytes per element a computed type may take at most (F16's 2). */
#define QUANT_MAX 2u

struct scratch {
    uint8_t weights[CHUNK * 8]; /* the stored weights; a masked read's mask words */
    uint8_t mask[CHUNK + 8];    /* m = 1 needs one byte per element */
    float f32[CHUNK];
    uint8_t quant[CHUNK * QUANT_MAX];
};

_Static_assert(CHUNK * 8 >= TBM_MASKED_MASK_BYTES, "a masked read's mask words fit");

/* Each FUSE worker keeps one scratch: reads allocate nothing. */
static struct tbm_thread_scratch scratch = TBM_THREAD_SCRATCH_INIT;

static struct scratch *thread_scratch(void)
{
    return tbm_thread_scratch(&scratch, sizeof(struct scratch));
}

/* The stored row of the tensor that GGUF row g is: llama.cpp's converter
 * interleaves the two halves of each head, as its rotary embedding pairs
 * neighbouring elements where Hugging Face's pairs the halves. */
static uint64_t source_row(const struct tbm_gguf_tensor *gt, uint64_t g)
{
    if (gt->heads == 0)
        return g;
    uint64_t d = gt->rows / gt->heads, h0 = g / d, w = g % d;
    return h0 * d + (w % 2) * (d / 2) + w / 2;
}

/* The flat stored index of element e (GGUF order) of the tensor. */
static uint64_t source_element(const struct tbm_gguf_tensor *gt, uint64_t e)
{
    return source_row(gt, e / gt->cols) * gt->cols + e % gt->cols;
}

/* Elements from e on that are stored back to back, at most max: the rest of
 * e's row when rows are permuted, else the rest of the tensor (one pread for
 * many rows). */
static size_t row_run(const struct tbm_gguf_tensor *gt, uint64_t e, size_t max)
{
    uint64_t left = gt->heads ? gt->cols - e % gt->cols : gt->rows * gt->cols - e;
    return left < max ? (size_t)left : max;
}

/* What a GGUF file holds of a tensor: its stored bytes (masked), or the
 * expansion as F32 (q NULL) or quantized to q. */
struct made {
    bool stored;
    const struct tbm_quant *q;
};

/* A GGUF row's bytes in what m makes. */
static uint64_t made_row(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct made m)
{
    if (m.stored)
        return gt->cols * tbm_precision_size(v->model->tensors[gt->t].hdr.precision);
    return m.q ? gt->cols / m.q->block_elems * m.q->block_bytes : gt->cols * 4;
}

/* The most rows the scratch makes at once. */
static uint64_t made_fit(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct made m)
{
    return m.stored ? sizeof(((struct scratch *)0)->f32) / made_row(v, gt, m) : CHUNK / gt->cols;
}

/* Makes count stored rows from stored row r0 on (back to back) into the
 * scratch: where they are. */
static int make_rows(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct made m,
                     struct scratch *s, uint64_t r0, uint64_t count, const char **rows,
                     struct tbm_request *req)
{
    const struct tbm_tensor *t = &v->model->tensors[gt->t];

    assert(count <= made_fit(v, gt, m));
    *rows = (const char *)s->f32;
    if (m.stored) {
        uint64_t row = made_row(v, gt, m);
        return tbm_masked_read(v->model->isa, t, r0 * row, (size_t)(count * row), (char *)s->f32,
                               s->weights, NULL, req);
    }
    int r = tbm_expand_chunk(v, t, s->weights, s->mask, r0 * gt->cols, (size_t)(count * gt->cols),
                             s->f32, req);
    if (r < 0 || !m.q)
        return r;
    m.q->quantize(v->model->isa, s->f32, (size_t)(count * gt->cols / m.q->block_elems), s->quant);
    *rows = (const char *)s->quant;
    return 0;
}

/* Whole GGUF rows [g, g + n) of a permuted tensor, as m makes them, into
 * out, n rows inside g's head and at most twice what the scratch makes at
 * once: the rows of even place in the head lie back to back in the first
 * half of its stored rows, those of odd place in the second, so each half
 * is made at once, its rows then put in place. Made a row at a time (a
 * weights' pread and a mask's each), faulting in a 2 GiB model.gguf took
 * 105,785 preads where this takes 12,825, and made interleaved small reads
 * of a cold source. */
static int permuted_rows(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct made m,
                         struct scratch *s, char *out, uint64_t g, uint64_t n,
                         struct tbm_request *req)
{
    uint64_t d = gt->rows / gt->heads, row = made_row(v, gt, m);

    for (uint64_t odd = 0; odd < 2; odd++) {
        uint64_t first = g + (g % d % 2 != odd);
        if (first >= g + n)
            continue;
        uint64_t count = (g + n - first + 1) / 2;
        const char *rows;
        int r = make_rows(v, gt, m, s, source_row(gt, first), count, &rows, req);
        if (r < 0)
            return r;
        for (uint64_t i = 0; i < count; i++)
            memcpy(out + (first - g + 2 * i) * row, rows + i * row, (size_t)row);
    }
    return 0;
}

/* At byte *pos of a tensor's data as m makes it (buf holding its bytes from
 * b0 on, up to end): makes whole permuted rows at once, *pos then past
 * them. Returns 1 when it did, 0 when *pos is not at a row's start, fewer
 * than two whole rows remain or the rows are not permuted, or the failure. */
static int permuted_step(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct made m,
                         struct scratch *s, char *buf, uint64_t b0, uint64_t *pos, uint64_t end,
                         struct tbm_request *req)
{
    uint64_t row = made_row(v, gt, m), fit = made_fit(v, gt, m), whole = (end - *pos) / row;

    if (!gt->heads || *pos % row != 0 || whole < 2 || fit == 0)
        return 0;
    uint64_t g = *pos / row, d = gt->rows / gt->heads, n = d - g % d;
    n = n < whole ? n : whole;
    n = n < 2 * fit ? n : 2 * fit;
    int r = permuted_rows(v, gt, m, s, buf + (*pos - b0), g, n, req);
    if (r < 0)
        return r;
    *pos += n * row;
    return 1;
}

/* Bytes [b0, b0 + len) of a tensor's F32 data: the expansion, rows in GGUF
 * order. */
static int f32_bytes(const struct tbm_views *v, const struct tbm_gguf_tensor *gt, struct scratch *s,
                     char *buf, uint64_t b0, size_t len, struct tbm_request *req)
{
    const struct tbm_tensor *t = &v->model->tensors[gt->t];
    const struct made m = {.stored = false, .q = NULL};

    for (uint64_t pos = b0, end = b0 + len; pos < end;) {
        int r = permuted_step(v, gt, m, s, buf, b0, &pos, end, req);
        if (r < 0)
            return r;
        if (r)
            continue;
        uint64_t e = pos / 4, want = (end - e * 4 + 3) / 4;
        size_t count = row_run(gt, e, want < CHUNK ? (size_t)want : CHUNK);
        r = tbm_expand_chunk(v, t, s->weights, s->mask, source_element(gt, e), count, s->f32, req);
        if (r < 0)
            return r;
        size_t n = count * 4 - pos % 4;
        n = n < end - pos ? n : (size_t)(end - pos);
        memcpy(buf + (pos - b0), (char *)s->f32 + pos % 4, n);
        pos += n;
    }
    return 0;
}

/* Bytes [b0, b0 + len) of a tensor's data in computed type q: the blocks
 * they touch (rows are whole blocks), quantized from the expansion. */
static int quant_bytes(const struct tbm_views *v, const struct tbm_gguf_tensor *gt,
                       const struct tbm_quant *q, struct scratch *s, char *buf, uint64_t b0,
                       size_t len, struct tbm_request *req)
{
    const struct tbm_tensor *t = &v->model->tensors[gt->t];
    uint64_t bb = q->block_bytes, be = q->block_elems;
    const struct made m = {.stored = false, .q = q};

    assert(bb <= be * QUANT_MAX && CHUNK % be == 0);
    for (uint64_t pos = b0, end = b0 + len; pos < end;) {
        int r = permuted_step(v, gt, m, s, buf, b0, &pos, end, req);
        if (r < 0)
            return r;
        if (r)
            continue;
        uint64_t blk = pos / bb, e = blk * be;
        uint64_t want = (end - blk * bb + bb - 1) / bb;
        size_t count = row_run(gt, e, want < CHUNK / be ? (size_t)(want * be) : CHUNK);
        r = tbm_expand_chunk(v, t, s->weights, s->mask, source_element(gt, e), count, s->f32, req);
        if (r < 0)
            return r;
        q->quantize(v->model->isa, s->f32, count / be, s->quant);
        size_t skip = (size_t)(pos - blk * bb);
        size_t n = (size_t)(count / be * bb) - skip;
        n = n < end - pos ? n : (size_t)(end - pos);
        memcpy(buf + (pos - b0), s->quant + skip, n);
        pos += n;
    }
    return 0;
}

/* Bytes [b0, b0 + len) of a tensor's data in its stored type: its rows in
 * GGUF order, each a run of the stored bytes, masked. */
static int stored_bytes(const struct tbm_views *v, const struct tbm_gguf_tensor *gt,
                        struct scratch *s, char *buf, uint64_t b0, size_t len,
                        struct tbm_request *req)
{
    const struct tbm_tensor *t = &v->model->tensors[gt->t];
    /* rows in place are one run */
    uint64_t row =
        (gt->heads ? gt->cols : gt->rows * gt->cols) * tbm_precision_size(t->hdr.precision);
    const struct made m = {.stored = true, .q = NULL};

    for (uint64_t pos = b0, end = b0 + len; pos < end;) {
        int r = permuted_step(v, gt, m, s, buf, b0, &pos, end, req);
        if (r < 0)
            return r;
        if (r)
            continue;
        uint64_t g = pos / row, in = pos % row;
        uint64_t n = row - in < end - pos ? row - in : end - pos;
        uint64_t s0 = source_row(gt, g) * row + in;
        r = tbm_masked_read(v->model->isa, t, s0, (size_t)n, buf + (pos - b0), s->weights, NULL,
                            req);
        if (r < 0)
            return r;
        pos += n;
    }
    return 0;
}

/* Whether a piece's data is its tensor's stored bytes (masked). */
static bool is_stored(const struct tbm_tensor *t, uint32_t type)
{
    static const uint32_t native[] = {TBM_GGUF_F32, TBM_GGUF_F16, TBM_GGUF_BF16, UINT32_MAX};

    return native[t->hdr.precision] == type;
}

static int piece_bytes(const struct tbm_views *v, const struct tbm_gguf *g,
                       const struct tbm_gguf_piece *p, char *buf, uint64_t b0, size_t len,
                       struct tbm_request *req)
{
    const struct tbm_gguf_tensor *gt = &g->tensors[p->k];
    const struct tbm_quant *q = tbm_quant_find(p->type);
    struct scratch *s = thread_scratch();

    if (!s)
        return TBM_ERR_NOMEM;
    /* an F16 tensor stored in fp16 is its stored bytes */
    if (is_stored(&v->model->tensors[gt->t], p->type))
        return stored_bytes(v, gt, s, buf, b0, len, req);
    if (q)
        return quant_bytes(v, gt, q, s, buf, b0, len, req);
    return f32_bytes(v, gt, s, buf, b0, len, req);
}

static uint64_t piece_end(const void *piece)
{
    const struct tbm_gguf_piece *p = piece;

    return p->start + p->len;
}

/* The first piece that ends after off (npieces when none). */
static size_t piece_at(const struct tbm_gguf_file *f, uint64_t off)
{
    return tbm_first_ending_after(f->pieces, f->npieces, sizeof(*f->pieces), piece_end, off);
}

int tbm_gguf_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size)
{
    const struct tbm_gguf *g = tbm_row_state(v, row);

    (void)t;
    *size = g->file.size;
    return 0;
}

/* The part of the header at off: head's first vocab_at bytes, the shared
 * vocabulary, then the rest of head. */
static void head_copy(const struct tbm_gguf_file *f, char *buf, uint64_t off, size_t len,
                      size_t *done)
{
    const struct {
        const char *bytes;
        size_t len;
    } parts[3] = {
        {f->head, f->vocab_at},
        {f->vocab, f->vocab_len},
        {f->head + f->vocab_at, f->head_len - f->vocab_len - f->vocab_at},
    };
    uint64_t at = 0;

    *done = 0;
    for (size_t k = 0; k < 3 && *done < len; at += parts[k].len, k++) {
        size_t got = 0;
        if (off + *done >= at + parts[k].len)
            continue;
        tbm_copy_range(buf + *done, off + *done - at, len - *done, parts[k].bytes, parts[k].len,
                       &got);
        *done += got;
    }
}

int tbm_gguf_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                  uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    const struct tbm_gguf *g = tbm_row_state(v, row);
    const struct tbm_gguf_file *f = &g->file;
    size_t done = 0;

    (void)t;
    *got = 0;
    if (off >= f->size)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if (off < f->head_len)
        head_copy(f, buf, off, len, &done);
    for (size_t k = piece_at(f, off + done); done < len;) {
        uint64_t pos = off + done;
        const struct tbm_gguf_piece *p = k < f->npieces ? &f->pieces[k] : NULL;
        if (!p || pos < p->start) { /* padding after a tensor */
            uint64_t gap = (p ? p->start : f->size) - pos;
            size_t n = gap < len - done ? (size_t)gap : len - done;
            memset(buf + done, 0, n);
            done += n;
            continue;
        }
        uint64_t in = pos - p->start;
        size_t n = p->len - in < len - done ? (size_t)(p->len - in) : len - done;
        int r = piece_bytes(v, g, p, buf + done, in, n, req);
        if (r < 0)
            return r;
        done += n;
        k++;
    }
    *got = len;
    return 0;
}

/* A GGUF file's bytes that are a tensor's stored bytes as they are (stored
 * type, rows in place, no mask applied) are sent as stored, as
 * model.safetensors' are: only a range wholly inside one such tensor, as a
 * reply short of the request reads as the end of the file. */
int tbm_gguf_span(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t off,
                  size_t len, struct tbm_span *out)
{
    const struct tbm_gguf *g = tbm_row_state(v, row);
    const struct tbm_gguf_file *f = &g->file;

    (void)t;
    *out = (struct tbm_span){0};
    if (off >= f->size)
        return 1;
    size_t k = piece_at(f, off);
    if (k == f->npieces || off < f->pieces[k].start)
        return 0;
    const struct tbm_gguf_piece *p = &f->pieces[k];
    const struct tbm_gguf_tensor *gt = &g->tensors[p->k];
    const struct tbm_tensor *tensor = &v->model->tensors[gt->t];
    uint64_t in = off - p->start;
    if (len == 0 || len > p->len - in || gt->heads != 0 || !is_stored(tensor, p->type) ||
        (tensor->hdr.nm_m != 0 && tensor->mask_usable))
        return 0;
    *out = (struct tbm_span){.src = tensor->src, .pos = tensor->weights.off + in, .len = len};
    return 1;
}
