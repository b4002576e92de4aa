/* model.safetensors: the whole model as one safetensors file. Its layout
 * (header bytes and where each tensor's data lies) is fixed once at open; a
 * read maps its range onto the header and pieces of tensors and computes
 * only those bytes: the stored weights with pruned elements zeroed. */
#include "internal.h"

#include "base/buf.h"
#include "base/search.h"

#include "tbm/text.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Granule of the record of which bytes need no masking: each FUSE request
 * (128 KiB to 1 MiB, aligned) covers whole granules. Its bytes bound one
 * masking step. */
#define GRANULE (64u * 1024u)

/* A tensor's data in the file: [start, start + len), data in its precision. */
struct piece {
    uint64_t start;
    uint64_t len;
    size_t t;
};

struct tbm_safetensors {
    char *head; /* length prefix and padded JSON header */
    size_t head_len;
    struct piece *pieces; /* non-empty tensors, by start */
    size_t npieces;
    uint64_t size;
    bool too_big;              /* no model.safetensors: its header is over HEADER_MAX */
    unsigned long long header; /* that header's length, when too big */
    bool metadata_named;       /* a sound tensor named __metadata__ was left out */
    /* Per GRANULE of the file, set once a read that saw all its bytes found
     * that masking left them as stored (as the tools write them, pruned
     * weights zeroed), so that later reads splice them from the source.
     * Never cleared, and set before the request's change check: a source
     * that changes is refused for the rest of the mount, so a flag set from
     * bytes of a rewrite is never used (TBMFS_NO_CHANGE_CHECK, for
     * benchmarks only, gives that up). */
    atomic_bool *clean;
};

static const char *st_dtype(unsigned precision)
{
    static const char *const names[] = {"F32", "F16", "BF16", "F64"};
    return names[precision];
}

/* safetensors loaders refuse a header longer than this (the format's
 * reference implementation, MAX_HEADER_SIZE). */
#define HEADER_MAX 100000000ull

/* The key safetensors keeps for its metadata: no tensor can have it. */
#define METADATA_KEY "__metadata__"

static bool metadata_named(const struct tbm_tensor *t)
{
    return t->name_len == sizeof(METADATA_KEY) - 1 &&
           memcmp(t->name, METADATA_KEY, t->name_len) == 0;
}

/* Sound tensors are safe to serve whole in their stored precision. */
static bool sound(const struct tbm_views *v, size_t t)
{
    return v->model->tensors[t].problems.count == 0 && tbm_dense_servable(v, t);
}

static bool same_name(const struct tbm_tensor *x, const struct tbm_tensor *y)
{
    return x->name_len == y->name_len && memcmp(x->name, y->name, x->name_len) == 0;
}

/* Orders tensor indices by name, then by index. */
static int cmp_name(const void *a, const void *b, void *arg)
{
    const struct tbm_tensor *ts = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const struct tbm_tensor *x = &ts[i], *y = &ts[j];
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);

    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Marks in keep the tensors that appear: sound, and the first sound one of
 * their name. Sorting the names keeps this O(n log n) for 100,000 tensors. */
static int choose(const struct tbm_views *v, struct tbm_safetensors *st, bool *keep)
{
    const struct tbm_model *m = v->model;
    size_t *order = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*order));
    size_t n = 0;

    if (!order)
        return TBM_ERR_NOMEM;
    for (size_t t = 0; t < m->ntensors; t++) {
        if (!sound(v, t))
            continue;
        if (metadata_named(&m->tensors[t]))
            st->metadata_named = true;
        else
            order[n++] = t;
    }
    qsort_r(order, n, sizeof(*order), cmp_name, (void *)m->tensors);
    for (size_t k = 0; k < n; k++)
        keep[order[k]] = k == 0 || !same_name(&m->tensors[order[k - 1]], &m->tensors[order[k]]);
    free(order);
    return 0;
}

/* Appends the JSON string of len bytes at s (escaped by json-c). */
static int add_string(struct tbm_buf *b, const char *s, size_t len)
{
    struct json_object *o = json_object_new_string_len(s, (int)len);
    if (!o)
        return TBM_ERR_NOMEM;
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text)
        tbm_buf_adds(b, text);
    json_object_put(o);
    return text ? 0 : TBM_ERR_NOMEM;
}

static int add_entry(struct tbm_buf *b, const struct tbm_tensor *t, uint64_t start, uint64_t end)
{
    int r = add_string(b, t->name, t->name_len);

    if (r < 0)
        return r;
    const uint64_t *dims;
    size_t n = tbm_shape_dims(t, true, &dims);
    size_t len = tbm_shape_text(dims, n, ",", NULL, 0);
    char *shape = malloc(len + 1);
    if (!shape)
        return TBM_ERR_NOMEM;
    tbm_shape_text(dims, n, ",", shape, len + 1);
    tbm_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype(t->hdr.precision));
    tbm_buf_add(b, shape, len);
    free(shape);
    tbm_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)start,
                   (unsigned long long)end);
    return 0;
}

/* __metadata__: string values only, "omitted" a JSON array as a string. */
static int add_metadata(struct tbm_buf *b, const struct tbm_model *m, const bool *keep)
{
    struct json_object *meta = json_object_new_object();
    struct json_object *omitted = json_object_new_array();
    const char *base = strrchr(m->path, '/');
    char source[4096];
    int r = TBM_ERR_NOMEM;

    if (!meta || !omitted)
        goto cleanup;
    for (size_t t = 0; t < m->ntensors; t++)
        if (!keep[t])
            json_object_array_add(omitted, json_object_new_string_len(m->tensors[t].name,
                                                                      (int)m->tensors[t].name_len));
    base = base ? base + 1 : m->path;
    tbm_text_clean(source, sizeof(source), base, strlen(base));
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    if (m->architecture)
        json_object_object_add(meta, "architecture", json_object_new_string(m->architecture));
    json_object_object_add(meta, "source", json_object_new_string(source));
    json_object_object_add(meta, "omitted",
                           json_object_new_string(json_object_to_json_string_ext(
                               omitted, JSON_C_TO_STRING_NOSLASHESCAPE)));
    const char *text = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text) {
        tbm_buf_adds(b, "\"__metadata__\":");
        tbm_buf_adds(b, text);
        r = 0;
    }
cleanup:
    json_object_put(omitted);
    json_object_put(meta);
    return r;
}

/* Fixes the file's head (the header's length, then the header, padded
 * with spaces to a multiple of 8) from its JSON, and the pieces after it;
 * a header safetensors loaders would refuse makes no file. */
static int place(struct tbm_safetensors *st, const char *json, size_t len, uint64_t data)
{
    size_t padded = (len + 7) / 8 * 8;

    if (padded > HEADER_MAX) {
        st->too_big = true;
        st->header = padded;
        st->npieces = 0;
        return 0;
    }
    if (!(st->head = malloc(8 + padded)))
        return TBM_ERR_NOMEM;
    for (int k = 0; k < 8; k++)
        st->head[k] = (char)((uint64_t)padded >> (8 * k));
    memcpy(st->head + 8, json, len);
    memset(st->head + 8 + len, ' ', padded - len);
    st->head_len = 8 + padded;
    for (size_t k = 0; k < st->npieces; k++)
        st->pieces[k].start += st->head_len;
    st->size = st->head_len + data;
    return 0;
}

/* Renders the header and places every kept tensor's data after it. */
static int build(const struct tbm_views *v, struct tbm_safetensors *st, const bool *keep)
{
    const struct tbm_model *m = v->model;
    struct tbm_buf b = TBM_BUF_INIT;
    uint64_t data = 0;
    int r;

    tbm_buf_adds(&b, "{");
    r = add_metadata(&b, m, keep);
    for (size_t t = 0; t < m->ntensors && r == 0; t++) {
        const struct tbm_tensor *tensor = &m->tensors[t];
        if (!keep[t])
            continue;
        /* Servable: the weights lie inside the source, so their length fits. */
        uint64_t len = tensor->weights.len;
        tbm_buf_adds(&b, ",");
        r = add_entry(&b, tensor, data, data + len);
        if (len)
            st->pieces[st->npieces++] = (struct piece){.start = data, .len = len, .t = t};
        data += len;
    }
    tbm_buf_adds(&b, "}");
    if (r == 0)
        r = b.failed ? TBM_ERR_NOMEM : place(st, b.data, b.len, data);
    tbm_buf_free(&b);
    return r;
}

static void layout_free(struct tbm_safetensors *st)
{
    if (!st)
        return;
    free(st->pieces);
    free(st->head);
    free((void *)st->clean);
    free(st);
}

static int layout_build(const struct tbm_views *v, struct tbm_safetensors **out)
{
    size_t n = v->model->ntensors ? v->model->ntensors : 1;
    struct tbm_safetensors *st = calloc(1, sizeof(*st));
    bool *keep = calloc(n, sizeof(*keep));
    int r = TBM_ERR_NOMEM;

    if (!st || !keep || !(st->pieces = malloc(n * sizeof(*st->pieces))))
        goto cleanup;
    if ((r = choose(v, st, keep)) < 0 || (r = build(v, st, keep)) < 0)
        goto cleanup;
    r = TBM_ERR_NOMEM;
    if (!(st->clean = calloc(st->size / GRANULE + 1, sizeof(*st->clean))))
        goto cleanup;
    r = 0;
    *out = st;
    st = NULL;
cleanup:
    free(keep);
    layout_free(st);
    return r;
}

/* The row's state: the layout, built when first needed (its size, a read,
 * model.json's notes), once whatever the number of threads asking at once:
 * a mount does not wait for the header of a million tensors. */
struct lazy_layout {
    pthread_mutex_t lock;
    struct tbm_safetensors *_Atomic layout;
};

int tbm_safetensors_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state)
{
    struct lazy_layout *l = calloc(1, sizeof(*l));

    (void)v, (void)row;
    *state = l;
    if (!l)
        return TBM_ERR_NOMEM;
    pthread_mutex_init(&l->lock, NULL);
    return 0;
}

void tbm_safetensors_free(void *state)
{
    struct lazy_layout *l = state;

    layout_free(atomic_load(&l->layout));
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* The layout; NULL when out of memory. */
static const struct tbm_safetensors *layout(const struct tbm_views *v, const struct tbm_row *row)
{
    struct lazy_layout *l = tbm_row_state(v, row);
    struct tbm_safetensors *st = atomic_load_explicit(&l->layout, memory_order_acquire);

    if (st)
        return st;
    pthread_mutex_lock(&l->lock);
    st = atomic_load_explicit(&l->layout, memory_order_acquire);
    if (!st && layout_build(v, &st) == 0)
        atomic_store_explicit(&l->layout, st, memory_order_release);
    pthread_mutex_unlock(&l->lock);
    return st;
}

int tbm_safetensors_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t *size)
{
    const struct tbm_safetensors *st = layout(v, row);

    (void)t;
    if (!st)
        return TBM_ERR_NOMEM;
    *size = st->size;
    return st->too_big ? TBM_ERR_PROBLEM : 0;
}

bool tbm_safetensors_present(const struct tbm_views *v, const struct tbm_row *row)
{
    const struct tbm_safetensors *st = layout(v, row);

    return !st || !st->too_big;
}

int tbm_safetensors_notes(const struct tbm_views *v, const struct tbm_row *row,
                          struct json_object *missing, struct json_object *notes, bool *expected)
{
    const struct tbm_safetensors *st = layout(v, row);
    char line[256];

    (void)expected;
    if (!st)
        return TBM_ERR_NOMEM;
    if (st->too_big) {
        snprintf(line, sizeof(line),
                 "no model.safetensors: its header would be %llu bytes, over the %llu that "
                 "safetensors loaders accept",
                 st->header, HEADER_MAX);
        if (json_object_array_add(missing, json_object_new_string(line)) < 0)
            return TBM_ERR_NOMEM;
    }
    if (st->metadata_named &&
        json_object_array_add(
            notes, json_object_new_string("model.safetensors: tensor " METADATA_KEY
                                          " left out (safetensors keeps that key for the "
                                          "file's metadata); listed in its \"omitted\"")) < 0)
        return TBM_ERR_NOMEM;
    return 0;
}

static uint64_t piece_end(const void *piece)
{
    const struct piece *p = piece;

    return p->start + p->len;
}

/* The first piece that ends after off (npieces when none). */
static size_t piece_at(const struct tbm_safetensors *st, uint64_t off)
{
    return tbm_first_ending_after(st->pieces, st->npieces, sizeof(*st->pieces), piece_end, off);
}

/* Whether a tensor's data is its stored weights as they are. */
static bool as_stored(const struct tbm_tensor *t)
{
    return t->hdr.nm_m == 0 || !t->mask_usable;
}

/* The mask words of one masked read's window. */
struct scratch {
    uint8_t mask[TBM_MASKED_MASK_BYTES];
};

/* Each FUSE worker keeps one scratch: reads allocate nothing. */
static struct tbm_thread_scratch scratch = TBM_THREAD_SCRATCH_INIT;

static struct scratch *thread_scratch(void)
{
    return tbm_thread_scratch(&scratch, sizeof(struct scratch));
}

/* Which granules of a read it found as stored. A granule counts only when
 * the read covers all of it; the header's granules never do. */
struct sweep {
    const struct tbm_safetensors *st;
    uint64_t off, end; /* the read */
    uint64_t granule;  /* the one being swept */
    bool changed;      /* whether a byte of it so far needed masking */
};

static void sweep_finish(struct sweep *sw)
{
    uint64_t g0 = sw->granule * GRANULE, g1 = g0 + GRANULE;

    if (g1 > sw->st->size)
        g1 = sw->st->size;
    if (!sw->changed && g0 >= sw->st->head_len && sw->off <= g0 && g1 <= sw->end)
        atomic_store_explicit(&sw->st->clean[sw->granule], true, memory_order_release);
}

/* Notes the bytes at file offset pos, changed or not by masking. */
static void sweep_note(struct sweep *sw, uint64_t pos, bool changed)
{
    if (pos / GRANULE != sw->granule) {
        sweep_finish(sw);
        sw->granule = pos / GRANULE;
        sw->changed = false;
    }
    sw->changed |= changed;
}

static void note_step(void *ctx, uint64_t at, bool changed)
{
    sweep_note(ctx, at, changed);
}

/* Reads bytes [b0, b0 + len) of tensor t's data, which lie at file offset
 * pos, into buf, masked in steps that end at granule boundaries, each
 * noted in sw. */
static int tensor_bytes(enum tbm_isa isa, const struct tbm_tensor *t, char *buf, uint64_t b0,
                        size_t len, uint64_t pos, struct sweep *sw, struct tbm_request *req)
{
    const struct tbm_masked_steps steps = {
        .pos = pos, .grain = GRANULE, .note = note_step, .ctx = sw};
    struct scratch *s = NULL;

    if (!as_stored(t) && !(s = thread_scratch()))
        return TBM_ERR_NOMEM;
    return tbm_masked_read(isa, t, b0, len, buf, s ? s->mask : NULL, &steps, req);
}

int tbm_safetensors_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                         uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    const struct tbm_safetensors *st = layout(v, row);
    size_t done = 0;

    (void)t;
    *got = 0;
    if (!st)
        return TBM_ERR_NOMEM;
    if (off >= st->size)
        return 0;
    if (len > st->size - off)
        len = (size_t)(st->size - off);
    struct sweep sw = {.st = st, .off = off, .end = off + len, .granule = off / GRANULE};
    if (off < st->head_len)
        tbm_copy_range(buf, off, len, st->head, st->head_len, &done);
    for (size_t k = piece_at(st, off + done); done < len; k++) {
        const struct piece *p = &st->pieces[k];
        uint64_t pos = off + done;
        uint64_t in = pos - p->start;
        size_t n = p->len - in < len - done ? (size_t)(p->len - in) : len - done;
        int r =
            tensor_bytes(v->model->isa, &v->model->tensors[p->t], buf + done, in, n, pos, &sw, req);
        if (r < 0)
            return r;
        done += n;
    }
    sweep_finish(&sw);
    *got = len;
    return 0;
}

/* Whether masking leaves every granule [off, off + len) touches (len > 0)
 * as stored, as an earlier read found. A range not read yet is computed
 * rather than looked at first: on the machine measured, reading, masking and
 * replying took less of the daemon's time than looking at the bytes in place
 * and splicing them (scripts/bench_bridges.py, first read). */
static bool found_clean(const struct tbm_safetensors *st, uint64_t off, size_t len)
{
    for (uint64_t g = off / GRANULE; g <= (off + len - 1) / GRANULE; g++)
        if (!atomic_load_explicit(&st->clean[g], memory_order_acquire))
            return false;
    return true;
}

int tbm_safetensors_span(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t off, size_t len, struct tbm_span *out)
{
    const struct tbm_safetensors *st = layout(v, row);

    (void)t;
    *out = (struct tbm_span){0};
    if (!st)
        return TBM_ERR_NOMEM;
    if (off >= st->size)
        return 1;
    if (len > st->size - off)
        len = (size_t)(st->size - off);
    size_t k = piece_at(st, off);
    if (k == st->npieces || off < st->pieces[k].start)
        return 0;
    const struct piece *p = &st->pieces[k];
    const struct tbm_tensor *tensor = &v->model->tensors[p->t];
    uint64_t in = off - p->start;
    /* A reply short of the request reads as the end of the file: only a
     * range wholly inside one stored tensor is sent as stored. */
    if (len == 0 || len > p->len - in || (!as_stored(tensor) && !found_clean(st, off, len)))
        return 0;
    *out = (struct tbm_span){.src = tensor->src, .pos = tensor->weights.off + in, .len = len};
    return 1;
}
