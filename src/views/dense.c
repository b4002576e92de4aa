/* dense.f32 and dense.npy: the tensor decoded to float32 with its mask
 * applied, computed per request by the expansion kernels, never materialized. */
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

/* Expands elements [first, first + count), count <= CHUNK, into out.
 * float32 weights are their own expansion: they are read straight into out
 * and masked in place, one copy fewer than going through scratch. */
static int expand_chunk(const struct tbm_views *v, const struct tbm_tensor *t, struct scratch *s,
                        uint64_t first, size_t count, float *out)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    void *w = t->hdr.precision == TBM_FP32 ? (void *)out : s->weights;
    const uint8_t *mask = NULL;
    uint32_t m = t->hdr.nm_m;
    int r;

    if ((r = tbm_source_read_full(t->src, w, count * es, t->weights.off + first * es)) < 0)
        return r;
    if (t->mask_usable) {
        uint64_t g0 = first / m, g1 = (first + count - 1) / m;
        if ((r = tbm_mask_read(t, g0, g1 - g0 + 1, s->mask)) < 0)
            return r;
        mask = s->mask;
    }
    if (w != out || mask)
        tbm_expand(v->model->isa, t->hdr.precision, w, mask, m, first, count, out);
    return 0;
}

/* Reads bytes [off, off + len) of the float32 expansion, already clipped to
 * its size. Whole aligned elements go straight into buf; a partial element at
 * either end, or a misaligned buf, goes through scratch. */
static int dense_bytes(const struct tbm_views *v, const struct tbm_tensor *t, char *buf,
                       uint64_t off, size_t len)
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
            if ((r = expand_chunk(v, t, s, first, count, (float *)(void *)dst)) < 0)
                return r;
            pos += count * 4;
            continue;
        }
        if ((r = expand_chunk(v, t, s, first, count, s->out)) < 0)
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
                       uint64_t off, size_t len, size_t *got)
{
    uint64_t size = f32_size(t);

    if (off >= size) {
        *got = 0;
        return 0;
    }
    size_t n = size - off < len ? (size_t)(size - off) : len;
    int r = dense_bytes(v, t, buf, off, n);
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

const struct tbm_region *tbm_f32_region(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    *skip = 0;
    return identity_region(&v->model->tensors[t]);
}

int tbm_f32_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    *size = f32_size(&v->model->tensors[t]);
    return 0;
}

int tbm_f32_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                 size_t *got)
{
    return dense_range(v, &v->model->tensors[t], buf, off, len, got);
}

#define NPY_PREFIX "{'descr': '<f4', 'fortran_order': False, 'shape': ("
#define NPY_SUFFIX "), }"

static size_t digits(uint64_t v)
{
    size_t n = 1;

    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Whether the .npy shape is the index's (it describes num_weights and fits
 * the header), else a 1-D shape; and the length of the dict's text. */
static size_t npy_dict_len(const struct tbm_tensor *t, bool *own)
{
    size_t room = NPY_MAX - 10 - 64;
    size_t n = sizeof(NPY_PREFIX) - 1;

    *own = t->shape_matches && n + t->ndim * 22 + 8 < room;
    if (*own) {
        for (size_t k = 0; k < t->ndim; k++)
            n += digits(t->shape[k]) + 2;
        if (t->ndim > 0)
            n -= t->ndim == 1 ? 1 : 2;
    } else {
        n += digits(t->hdr.num_weights) + 1;
    }
    return n + sizeof(NPY_SUFFIX) - 1;
}

/* The NPY 1.0 header's length: magic, version, length, and the dict padded
 * with spaces and a newline to a multiple of 64 bytes. */
static size_t npy_header_len(const struct tbm_tensor *t)
{
    bool own;

    return (10 + npy_dict_len(t, &own) + 1 + 63) / 64 * 64;
}

/* Writes the NPY 1.0 header into out (npy_header_len bytes). */
static size_t npy_header(const struct tbm_tensor *t, char *out)
{
    bool own;
    size_t dict = npy_dict_len(t, &own);
    size_t padded = (10 + dict + 1 + 63) / 64 * 64;
    char *p = out + 10;
    size_t n = sizeof(NPY_PREFIX) - 1;

    memcpy(p, NPY_PREFIX, n);
    if (own) {
        for (size_t k = 0; k < t->ndim; k++)
            n += (size_t)sprintf(p + n, "%llu, ", (unsigned long long)t->shape[k]);
        if (t->ndim > 0)
            n -= t->ndim == 1 ? 1 : 2;
    } else {
        n += (size_t)sprintf(p + n, "%llu,", (unsigned long long)t->hdr.num_weights);
    }
    memcpy(p + n, NPY_SUFFIX, sizeof(NPY_SUFFIX) - 1);
    n += sizeof(NPY_SUFFIX) - 1;
    memset(p + n, ' ', padded - 10 - n);
    out[padded - 1] = '\n';
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)((padded - 10) & 0xff);
    out[9] = (char)((padded - 10) >> 8);
    return padded;
}

int tbm_npy_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    *size = npy_header_len(tensor) + f32_size(tensor);
    return 0;
}

const struct tbm_region *tbm_npy_region(const struct tbm_views *v, size_t t, uint64_t *skip)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    if (!identity_region(tensor))
        return NULL;
    *skip = npy_header_len(tensor);
    return identity_region(tensor);
}

int tbm_npy_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                 size_t *got)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    struct scratch *s = thread_scratch();
    size_t head = 0;

    /* The header is rendered into this thread's scratch: a 64 KiB allocation
     * per read would sit on the hottest path of the mount. */
    if (!s)
        return TBM_ERR_NOMEM;
    size_t hlen = npy_header(tensor, s->npy);
    if (off < hlen) {
        tbm_copy_range(buf, off, len, s->npy, hlen, &head);
        off = hlen;
    }
    size_t body = 0;
    int r = head < len ? dense_range(v, tensor, buf + head, off - hlen, len - head, &body) : 0;
    if (r < 0)
        return r;
    *got = head + body;
    return 0;
}
