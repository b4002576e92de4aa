/* dense.f32 and dense.npy: the tensor decoded to float32 with its mask
 * applied, computed per request by the expansion kernels, never materialized;
 * dense.npy is the same bytes after an NPY 1.0 header (the row's arg). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements expanded per step: bounds the per-thread scratch (about 1 MiB)
 * while keeping each pread large. */
#define CHUNK (64u * 1024u)

/* NPY 1.0 allows a header of up to 65535 bytes after its 10-byte preamble. */
#define NPY_MAX (10 + 65535)

struct scratch {
    unsigned char weights[CHUNK * 8];
    unsigned char mask[CHUNK + 8]; /* m = 1 needs one byte per element */
    float out[CHUNK];
    char npy[NPY_MAX]; /* the .npy header, rendered where it is needed */
};

/* FUSE serves reads from a small pool of threads; each keeps its own scratch
 * for its lifetime so that reads share nothing and allocate nothing. */
static struct tbm_thread_scratch scratch = TBM_THREAD_SCRATCH_INIT;

static struct scratch *thread_scratch(void)
{
    return tbm_thread_scratch(&scratch, sizeof(struct scratch));
}

bool tbm_dense_servable(const struct tbm_views *v, size_t i)
{
    const struct tbm_tensor *t = &v->model->tensors[i];
    return t->header_sound && t->weights.ok && (!t->mask_usable || t->mask.ok);
}

int tbm_expand_chunk(const struct tbm_views *v, const struct tbm_tensor *t, void *weights,
                     uint8_t *mask, uint64_t first, size_t count, float *out,
                     struct tbm_request *req)
{
    void *w = t->hdr.precision == TBM_FP32 ? (void *)out : weights;
    uint8_t *m = t->mask_usable ? mask : NULL;
    int r = tbm_chunk_read(t, first, count, w, m, req);

    if (r < 0)
        return r;
    if (w != out || m)
        tbm_expand(v->model->isa, t->hdr.precision, w, m, t->hdr.nm_m, first, count, out);
    return 0;
}

/* Reads bytes [off, off + len) of the float32 expansion, already clipped to
 * its size. Whole aligned elements go straight into buf; a partial element at
 * either end, or a misaligned buf, goes through scratch. */
static int dense_bytes(const struct tbm_views *v, const struct tbm_tensor *t, char *buf,
                       uint64_t off, size_t len, struct tbm_request *req)
{
    struct scratch *s = thread_scratch();
    uint64_t pos = off, end = off + len;
    int r;

    if (!s)
        return TBM_ERR_NOMEM;
    while (pos < end) {
        uint64_t first = pos / 4;
        unsigned skip = (unsigned)(pos % 4);
        uint64_t last = (end + 3) / 4;
        size_t count = last - first < CHUNK ? (size_t)(last - first) : CHUNK;
        char *dst = buf + (pos - off);
        bool direct = skip == 0 && ((uintptr_t)dst % sizeof(float)) == 0 && end - pos >= 4;

        if (direct) {
            count = (end - pos) / 4 < count ? (size_t)((end - pos) / 4) : count;
            if ((r = tbm_expand_chunk(v, t, s->weights, s->mask, first, count, (float *)(void *)dst,
                                      req)) < 0)
                return r;
            pos += count * 4;
            continue;
        }
        if ((r = tbm_expand_chunk(v, t, s->weights, s->mask, first, count, s->out, req)) < 0)
            return r;
        size_t n = count * 4 - skip;
        if (n > end - pos)
            n = (size_t)(end - pos);
        memcpy(dst, (char *)s->out + skip, n);
        pos += n;
    }
    return 0;
}

/* Servable means the weights are inside the file, so this cannot overflow. */
static uint64_t f32_size(const struct tbm_tensor *t)
{
    return t->hdr.num_weights * 4;
}

static int dense_range(const struct tbm_views *v, const struct tbm_tensor *t, char *buf,
                       uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    uint64_t size = f32_size(t);

    if (off >= size) {
        *got = 0;
        return 0;
    }
    size_t n = size - off < len ? (size_t)(size - off) : len;
    int r = dense_bytes(v, t, buf, off, n, req);
    if (r < 0)
        return r;
    *got = n;
    return 0;
}

/* Unmasked float32 weights are their own expansion, bit for bit. */
static const struct tbm_region *identity_region(const struct tbm_tensor *t)
{
    return t->hdr.precision == TBM_FP32 && !t->mask_usable ? &t->weights : NULL;
}

#define NPY_PREFIX "{'descr': '<f4', 'fortran_order': False, 'shape': ("
#define NPY_SUFFIX "), }"

/* The .npy shape: the layout's (the index's when it describes num_weights)
 * when it fits the header, else 1-D. */
static size_t npy_dims(const struct tbm_tensor *t, const uint64_t **dims)
{
    size_t room = NPY_MAX - 10 - 64 - (sizeof(NPY_PREFIX) - 1);
    size_t n = tbm_shape_dims(t, true, dims);

    if (n * 22 + 8 < room)
        return n;
    *dims = &t->hdr.num_weights;
    return 1;
}

/* The dict's text: prefix, the shape as a Python tuple ("(5,)" for one
 * dimension), suffix. Written into out when cap allows; its length. */
static size_t npy_dict(const struct tbm_tensor *t, char *out, size_t cap)
{
    const uint64_t *dims;
    size_t nd = npy_dims(t, &dims), n = sizeof(NPY_PREFIX) - 1;
    size_t shape = tbm_shape_text(dims, nd, ", ", NULL, 0) + (nd == 1);

    if (out && n + shape + sizeof(NPY_SUFFIX) - 1 <= cap) {
        memcpy(out, NPY_PREFIX, n);
        tbm_shape_text(dims, nd, ", ", out + n, cap - n);
        if (nd == 1)
            out[n + shape - 1] = ',';
        memcpy(out + n + shape, NPY_SUFFIX, sizeof(NPY_SUFFIX) - 1);
    }
    return n + shape + sizeof(NPY_SUFFIX) - 1;
}

/* The NPY 1.0 header's length, for dense.npy (the row's arg true; 0 for
 * dense.f32): magic, version, length, and the dict padded with spaces and
 * a newline to a multiple of 64 bytes. */
static size_t npy_header_len(const struct tbm_row *row, const struct tbm_tensor *t)
{
    if (!*(const bool *)row->arg)
        return 0;
    return (10 + npy_dict(t, NULL, 0) + 1 + 63) / 64 * 64;
}

/* Writes the NPY 1.0 header into out (npy_header_len bytes). */
static void npy_header(const struct tbm_tensor *t, char *out)
{
    size_t n = npy_dict(t, out + 10, NPY_MAX - 10);
    size_t padded = (10 + n + 1 + 63) / 64 * 64;

    memset(out + 10 + n, ' ', padded - 10 - n);
    out[padded - 1] = '\n';
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)((padded - 10) & 0xff);
    out[9] = (char)((padded - 10) >> 8);
}

const struct tbm_region *tbm_dense_region(const struct tbm_views *v, const struct tbm_row *row,
                                          size_t t, uint64_t *skip)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_region *region = identity_region(tensor);

    *skip = region ? npy_header_len(row, tensor) : 0;
    return region;
}

int tbm_dense_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    *size = npy_header_len(row, tensor) + f32_size(tensor);
    return 0;
}

int tbm_dense_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                   uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    size_t hlen = npy_header_len(row, tensor), head = 0;

    if (off < hlen) {
        /* The header is rendered into this thread's scratch: a 64 KiB
         * allocation per read would sit on the hottest path of the mount. */
        struct scratch *s = thread_scratch();
        if (!s)
            return TBM_ERR_NOMEM;
        npy_header(tensor, s->npy);
        tbm_copy_range(buf, off, len, s->npy, hlen, &head);
        off = hlen;
    }
    size_t body = 0;
    int r = head < len ? dense_range(v, tensor, buf + head, off - hlen, len - head, req, &body) : 0;
    if (r < 0)
        return r;
    *got = head + body;
    return 0;
}
