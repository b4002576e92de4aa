/* The view table: every file kind of the tree is one row below, and the
 * functions that serve any row by what the row says. */
#include "internal.h"

#include <assert.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Listing order within each place is the order of the rows. */
static const struct tbm_file_kind table[] = {
    {
        .name = "index.json",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .size = tbm_index_json_size,
        .read = tbm_index_json_read,
    },
    {
        .name = "model.json",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_model_json_size,
        .render = tbm_model_json_render,
        .prepare = tbm_model_json_prepare,
        .shared = true,
    },
    {
        .name = "selftest",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_selftest_report_size,
        .render = tbm_selftest_report_render,
        /* the lock and stop flag of every self-test, the tensors' too */
        .prepare = tbm_selftests_init,
        .free = tbm_selftests_free,
        .slow = true,
        .shared = true,
    },
    {
        .name = "tensors.json",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_tensors_json_size,
        .render = tbm_tensors_json_render,
        .prepare = tbm_tensors_json_prepare,
        .shared = true,
    },
    {
        .name = "model.safetensors",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .size = tbm_safetensors_size,
        .read = tbm_safetensors_read,
        .span = tbm_safetensors_span,
        .present = tbm_safetensors_present,
        .prepare = tbm_safetensors_init,
        .free = tbm_safetensors_free,
    },
    {
        .name = "config.json",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .size = tbm_config_json_size,
        .read = tbm_config_json_read,
        .present = tbm_config_json_present,
        .prepare = tbm_config_json_prepare,
        .free = tbm_config_json_free,
    },
    {
        .name = "model.gguf",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .size = tbm_gguf_size,
        .read = tbm_gguf_read,
        .span = tbm_gguf_span,
        .present = tbm_gguf_present,
        .prepare = tbm_gguf_init,
        .free = tbm_gguf_free,
    },
    {
        .name = "model.Q8_0.gguf",
        .place = TBM_VIEW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .size = tbm_gguf_q8_0_size,
        .read = tbm_gguf_q8_0_read,
        .present = tbm_gguf_present,
    },
    {
        .name = "raw.tb",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_SOURCE,
        .region = tbm_raw_region,
    },
    {
        .name = "header.json",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .sizing = TBM_SIZE_CACHED,
        .size = tbm_header_json_size,
        .render = tbm_header_json_render,
        /* up to megabytes (a name or index entry may be that long): once
         * per mount, not per open descriptor */
        .shared = true,
        .evictable = true,
    },
    {
        .name = "weights.bin",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_SOURCE,
        .region = tbm_weights_region,
    },
    {
        .name = "mask.bin",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_SOURCE,
        .region = tbm_mask_region,
    },
    {
        .name = "dense.f32",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_SOURCE,
        .region = tbm_f32_region,
        .size = tbm_f32_size,
        .read = tbm_f32_read,
        .servable = tbm_dense_servable,
    },
    {
        .name = "dense.npy",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_SOURCE,
        .region = tbm_npy_region,
        .size = tbm_npy_size,
        .read = tbm_npy_read,
        .servable = tbm_dense_servable,
    },
    {
        .name = "selftest",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .sizing = TBM_SIZE_CACHED,
        .cache = 1,
        .size = tbm_selftest_size,
        .render = tbm_selftest_render,
        .slow = true,
        .shared = true,
    },
    {
        .name = "stats.json",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_stats_json_size,
        .render = tbm_stats_json_render,
        .servable = tbm_dense_servable,
        .slow = true,
        .shared = true,
        .evictable = true,
    },
    {
        .name = "mask.png",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_png_view_size,
        .render = tbm_mask_png_render,
        .servable = tbm_dense_servable,
        .slow = true,
        .shared = true,
        .evictable = true,
    },
    {
        .name = "weights.png",
        .place = TBM_VIEW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_png_view_size,
        .render = tbm_weights_png_render,
        .servable = tbm_dense_servable,
        .slow = true,
        .shared = true,
        .evictable = true,
    },
};

#define ROWS (sizeof(table) / sizeof(table[0]))

int tbm_views_open(const struct tbm_model *model, const struct tbm_view_options *opts,
                   struct tbm_views **out)
{
    uint32_t batch = opts && opts->selftest_batch ? opts->selftest_batch : TBM_BATCH_DEFAULT;
    struct tbm_views *v = calloc(1, sizeof(*v));
    int r = TBM_ERR_NOMEM;

    assert(batch <= TBM_BATCH_MAX);
    *out = NULL;
    if (!v)
        return r;
    v->model = model;
    v->batch = batch;
    for (int k = 0; k < 2; k++)
        v->rendered_sizes[k] = calloc(model->ntensors ? model->ntensors : 1, sizeof(uint64_t));
    if (!v->rendered_sizes[0] || !v->rendered_sizes[1] || (r = tbm_results_init(v)) < 0)
        goto out_err;
    for (size_t i = 0; i < ROWS; i++)
        if (table[i].prepare && (r = table[i].prepare(v)) < 0)
            goto out_err;
    *out = v;
    return 0;

out_err:
    tbm_views_close(v);
    return r;
}

void tbm_views_close(struct tbm_views *v)
{
    if (!v)
        return;
    tbm_results_free(v);
    for (size_t i = 0; i < ROWS; i++)
        if (table[i].free)
            table[i].free(v);
    free(v->rendered_sizes[0]);
    free(v->rendered_sizes[1]);
    free(v);
}

size_t tbm_views_tensor_count(const struct tbm_views *v)
{
    return v->model->ntensors;
}

const char *tbm_views_tensor_dir(const struct tbm_views *v, size_t t)
{
    return v->model->tensors[t].dir;
}

long tbm_views_find_tensor(const struct tbm_views *v, const char *dir, size_t len)
{
    return tbm_model_find_dir(v->model, dir, len);
}

struct timespec tbm_views_mtime(const struct tbm_views *v)
{
    return v->model->mtime;
}

size_t tbm_view_count(enum tbm_view_place place)
{
    size_t n = 0;

    for (size_t i = 0; i < ROWS; i++)
        n += table[i].place == place;
    return n;
}

const struct tbm_file_kind *tbm_view_at(enum tbm_view_place place, size_t i)
{
    for (size_t k = 0; k < ROWS; k++)
        if (table[k].place == place && i-- == 0)
            return &table[k];
    return NULL;
}

const struct tbm_file_kind *tbm_view_find(enum tbm_view_place place, const char *name)
{
    for (size_t k = 0; k < ROWS; k++)
        if (table[k].place == place && strcmp(table[k].name, name) == 0)
            return &table[k];
    return NULL;
}

const char *tbm_view_name(const struct tbm_file_kind *view)
{
    return view->name;
}

enum tbm_view_place tbm_view_place(const struct tbm_file_kind *view)
{
    return view->place;
}

void tbm_views_source_name(const struct tbm_views *v, size_t t, char *buf, size_t len)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    if (tensor->owns_src)
        snprintf(buf, len, "%s/%s", v->model->path, tensor->src->name);
    else
        snprintf(buf, len, "%s", v->model->path);
}

bool tbm_views_change_report(const struct tbm_views *v, size_t t, char *buf, size_t len)
{
    struct tbm_source *src = v->model->tensors[t].src;

    return src && tbm_source_take_report(src, buf, len);
}

int tbm_views_watch_open(const struct tbm_views *v, struct tbm_watch **out)
{
    return tbm_model_watch_open(v->model, out);
}

bool tbm_views_stats_ready(const struct tbm_views *v, size_t t)
{
    return tbm_tensor_stats_ready(v->model, t);
}

bool tbm_view_present(const struct tbm_views *v, const struct tbm_file_kind *view)
{
    return !view->present || view->present(v);
}

bool tbm_view_rendered(const struct tbm_file_kind *view)
{
    return view->bytes == TBM_BYTES_RENDERED;
}

bool tbm_view_slow(const struct tbm_file_kind *view)
{
    return view->slow;
}

bool tbm_view_ready(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t)
{
    return view->shared && tbm_results_ready(v, view, t);
}

/* The region of a source view for tensor t, or NULL when it is computed. */
static const struct tbm_region *
region_of(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t, uint64_t *skip)
{
    *skip = 0;
    return view->bytes == TBM_BYTES_SOURCE ? view->region(v, t, skip) : NULL;
}

bool tbm_view_servable(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t)
{
    uint64_t skip;

    if (view->servable)
        return view->servable(v, t);
    if (view->bytes != TBM_BYTES_SOURCE)
        return true;
    return v->model->tensors[t].header_sound && region_of(v, view, t, &skip)->ok;
}

/* The content of a rendered view for one open: the mount's one result of
 * views rendered once, else rendered for this open. */
static int open_result(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                       struct tbm_result **out)
{
    char *doc;
    size_t len;

    *out = NULL;
    if (view->shared)
        return tbm_results_get(v, view, t, out);
    int r = view->render(v, t, &doc, &len);
    if (r < 0)
        return r;
    *out = tbm_result_new(doc, len);
    free(doc);
    return *out ? 0 : TBM_ERR_NOMEM;
}

int tbm_view_render(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                    char **out, size_t *len)
{
    struct tbm_result *res;
    const char *data;

    if (!view->shared)
        return view->render(v, t, out, len);
    int r = tbm_results_get(v, view, t, &res);
    if (r < 0)
        return r;
    data = tbm_result_data(res, len);
    *out = malloc(*len ? *len : 1);
    if (*out)
        memcpy(*out, data, *len);
    tbm_result_put(res);
    return *out ? 0 : TBM_ERR_NOMEM;
}

static int cached_size(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                       uint64_t *size)
{
    _Atomic uint64_t *cache = &v->rendered_sizes[view->cache][t];
    uint64_t known = atomic_load_explicit(cache, memory_order_relaxed);

    if (known) {
        *size = known - 1;
        return 0;
    }
    int r = view->size(v, t, size);
    if (r < 0)
        return r;
    /* Two threads that race here store the same value. */
    atomic_store_explicit(cache, *size + 1, memory_order_relaxed);
    return 0;
}

int tbm_view_size(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                  uint64_t *size)
{
    const struct tbm_region *region;
    uint64_t skip;

    *size = 0;
    if (!tbm_view_servable(v, view, t))
        return 0;
    switch (view->sizing) {
    case TBM_SIZE_CACHED:
        return cached_size(v, view, t, size);
    case TBM_SIZE_FN:
        break;
    }
    if (view->size)
        return view->size(v, t, size);
    region = region_of(v, view, t, &skip);
    *size = skip + region->len;
    return 0;
}

static int read_region(const struct tbm_tensor *tensor, const struct tbm_region *region, char *buf,
                       uint64_t off, size_t len, size_t *got)
{
    if (off >= region->len)
        return 0;
    size_t n = region->len - off < len ? (size_t)(region->len - off) : len;
    int r = tbm_source_read_full(tensor->src, buf, n, region->off + off);
    if (r < 0)
        return r;
    *got = n;
    return 0;
}

/* Reads computed or source bytes of a servable view into buf. */
static int read_bytes(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                      char *buf, uint64_t off, size_t len, unsigned mode, size_t *got)
{
    uint64_t skip;
    char *doc;
    size_t doclen;
    int r;

    *got = 0;
    /* Computed and source bytes serve this reply alone: the change is
     * checked once, after all of them are read. Rendered ones may be kept
     * for the mount, so each of their reads is checked as it is made. */
    if (view->read || view->bytes == TBM_BYTES_SOURCE) {
        tbm_source_batch_begin(mode);
        r = view->read ? view->read(v, t, buf, off, len, got)
                       : read_region(&v->model->tensors[t], region_of(v, view, t, &skip), buf, off,
                                     len, got);
        r = tbm_source_batch_end(r);
        if (r < 0)
            *got = 0;
        return r;
    }
    r = tbm_view_render(v, view, t, &doc, &doclen);
    if (r < 0)
        return r;
    tbm_copy_range(buf, off, len, doc, doclen, got);
    free(doc);
    return 0;
}

int tbm_view_read(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t, char *buf,
                  uint64_t off, size_t len, size_t *got)
{
    *got = 0;
    if (!tbm_view_servable(v, view, t))
        return TBM_ERR_BROKEN;
    return read_bytes(v, view, t, buf, off, len, 0, got);
}

/* 1 while range (of src's descriptor) is still inside the source; else
 * TBM_ERR_IO, or TBM_ERR_CHANGED. */
static int still_inside(struct tbm_source *src, const struct tbm_source_range *range)
{
    /* The range was inside the source at mount; one that changed since is
     * not served, as a read would not serve it. The one fstat of the check
     * says the size too: unchanged, the range is still inside. */
    int r = tbm_source_verify(src);
    if (r < 0)
        return r;
    if (range->pos > src->id.size || range->len > src->id.size - range->pos)
        return TBM_ERR_IO;
    return 1;
}

/* Where up to len bytes at off of a servable view lie as stored in a
 * source: 1 with out (its len 0 past the end of the view), 0 for bytes that
 * are computed. */
static int span_of(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                   uint64_t off, size_t len, struct tbm_span *out)
{
    uint64_t skip;

    *out = (struct tbm_span){0};
    if (view->span)
        return view->span(v, t, off, len, out);
    const struct tbm_region *r = region_of(v, view, t, &skip);
    if (!r || off < skip)
        return 0;
    off -= skip;
    if (off >= r->len)
        return 1;
    out->src = v->model->tensors[t].src;
    out->pos = r->off + off;
    out->len = r->len - off < len ? (size_t)(r->len - off) : len;
    return 1;
}

int tbm_view_locate(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                    uint64_t off, size_t len, struct tbm_source_range *out)
{
    struct tbm_span sp;

    *out = (struct tbm_source_range){.fd = -1};
    if (!tbm_view_servable(v, view, t))
        return TBM_ERR_BROKEN;
    int r = span_of(v, view, t, off, len, &sp);
    if (r <= 0 || sp.len == 0)
        return r;
    if (sp.src->fd < 0)
        return 0;
    *out = (struct tbm_source_range){.fd = sp.src->fd, .pos = sp.pos, .len = sp.len};
    return still_inside(sp.src, out);
}

struct tbm_file {
    const struct tbm_views *v;
    const struct tbm_file_kind *view;
    size_t t;
    struct tbm_result *result; /* a rendered view's content */
};

int tbm_file_open(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                  struct tbm_file **out)
{
    struct tbm_file *f;

    *out = NULL;
    if (!tbm_view_servable(v, view, t))
        return TBM_ERR_BROKEN;
    if (!(f = calloc(1, sizeof(*f))))
        return TBM_ERR_NOMEM;
    *f = (struct tbm_file){.v = v, .view = view, .t = t};
    if (view->bytes == TBM_BYTES_RENDERED) {
        int r = open_result(v, view, t, &f->result);
        if (r < 0) {
            free(f);
            return r;
        }
    }
    *out = f;
    return 0;
}

void tbm_file_close(struct tbm_file *f)
{
    if (!f)
        return;
    tbm_result_put(f->result);
    free(f);
}

int tbm_file_read(struct tbm_file *f, uint64_t off, size_t len, char *buf, unsigned flags,
                  struct tbm_reply *out)
{
    unsigned mode = flags & TBM_READ_NOWAIT ? TBM_SOURCE_NOWAIT : 0;
    struct tbm_span sp;
    size_t got;
    int r;

    *out = (struct tbm_reply){.kind = TBM_REPLY_BYTES, .data = buf};
    if (f->result) {
        size_t n;
        const char *data = tbm_result_data(f->result, &n);
        size_t start = off < n ? (size_t)off : n;
        out->data = data + start;
        out->len = n - start < len ? n - start : len;
        return 0;
    }
    r = span_of(f->v, f->view, f->t, off, len, &sp);
    if (r < 0)
        return r;
    if (r > 0 && sp.len == 0)
        return 0;
    if (r > 0 && (flags & TBM_READ_SPLICE) && sp.src->fd >= 0) {
        out->kind = TBM_REPLY_SPLICE;
        out->range = (struct tbm_source_range){.fd = sp.src->fd, .pos = sp.pos, .len = sp.len};
        out->src = sp.src;
        return 0;
    }
    if (r > 0) {
        r = tbm_source_hold(sp.src, sp.pos, sp.len, mode, &out->held);
        if (r < 0)
            return r;
        if (r > 0) {
            out->kind = TBM_REPLY_HELD;
            return 0;
        }
    }
    r = read_bytes(f->v, f->view, f->t, buf, off, len, mode, &got);
    if (r < 0)
        return r;
    out->len = got;
    return 0;
}

int tbm_reply_check(const struct tbm_reply *reply)
{
    int r = still_inside(reply->src, &reply->range);

    return r < 0 ? r : 0;
}

void tbm_reply_done(struct tbm_reply *reply)
{
    if (reply->kind == TBM_REPLY_HELD)
        tbm_source_release(&reply->held);
}

void *tbm_thread_scratch(struct tbm_thread_scratch *ts, size_t size)
{
    if (!atomic_load_explicit(&ts->made, memory_order_acquire)) {
        pthread_mutex_lock(&ts->lock);
        if (!atomic_load(&ts->made) && pthread_key_create(&ts->key, free) == 0)
            atomic_store_explicit(&ts->made, true, memory_order_release);
        pthread_mutex_unlock(&ts->lock);
        if (!atomic_load(&ts->made))
            return NULL;
    }
    void *p = pthread_getspecific(ts->key);
    if (!p && (p = malloc(size)) && pthread_setspecific(ts->key, p) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

void tbm_copy_range(char *buf, uint64_t off, size_t len, const char *src, size_t srclen,
                    size_t *got)
{
    if (off >= srclen) {
        *got = 0;
        return;
    }
    size_t n = srclen - (size_t)off < len ? srclen - (size_t)off : len;
    memcpy(buf, src + off, n);
    *got = n;
}

int tbm_lazy_doc_size(const struct tbm_views *v, tbm_doc_fn doc, uint64_t slack, uint64_t *size)
{
    char *text;
    size_t len;
    int r = doc(v, false, &text, &len);

    if (r < 0)
        return r;
    free(text);
    *size = len + slack;
    return 0;
}

int tbm_json_dump(struct json_object *obj, char **out, size_t *len)
{
    const char *s = json_object_to_json_string_ext(
        obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!s)
        return TBM_ERR_NOMEM;
    size_t n = strlen(s);
    char *buf = malloc(n + 1);
    if (!buf)
        return TBM_ERR_NOMEM;
    memcpy(buf, s, n);
    buf[n] = '\n';
    *out = buf;
    *len = n + 1;
    return 0;
}
