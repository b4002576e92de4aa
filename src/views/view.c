/* The view table: every file of the tree is one row below, and the
 * functions that serve any row by what the row says. */
#include "gguf.h"
#include "internal.h"

#include "tbm/vocab.h"

#include <assert.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kinds served by several rows: each row one variant, its arg. */
#define BLOB_PART_ROW(file, part)                                                                  \
    {                                                                                              \
        .name = file, .place = TBM_ROW_TENSOR, .bytes = TBM_BYTES_SOURCE,                          \
        .arg = &(const enum tbm_blob_part){part}, .region = tbm_part_region,                       \
    }
#define DENSE_ROW(file, npy)                                                                       \
    {                                                                                              \
        .name = file, .place = TBM_ROW_TENSOR, .bytes = TBM_BYTES_SOURCE,                          \
        .arg = &(const bool){npy}, .servable = tbm_dense_servable, .region = tbm_dense_region,     \
        .size = tbm_dense_size, .read = tbm_dense_read,                                            \
    }
#define PICTURE_ROW(file, what)                                                                    \
    {                                                                                              \
        .name = file, .place = TBM_ROW_TENSOR, .bytes = TBM_BYTES_RENDERED,                        \
        .arg = &(const enum tbm_picture){what}, .servable = tbm_dense_servable,                    \
        .size = tbm_picture_size, .render = tbm_picture_render, .slow = true, .evictable = true,   \
    }
#define GGUF_ROW(file, variant)                                                                    \
    {                                                                                              \
        .name = file, .place = TBM_ROW_ROOT, .bytes = TBM_BYTES_COMPUTED, .arg = &variant,         \
        .prepare = tbm_gguf_prepare, .free = tbm_gguf_free, .present = tbm_gguf_present,           \
        .size = tbm_gguf_size, .read = tbm_gguf_read, .span = tbm_gguf_span,                       \
        .notes = tbm_gguf_notes,                                                                   \
    }

#define TOKENIZER_ROW(file, which)                                                                 \
    {                                                                                              \
        .name = file, .place = TBM_ROW_ROOT, .bytes = TBM_BYTES_BUFFER,                            \
        .arg = &(const enum tbm_tokenizer_file){which}, .prepare = tbm_tokenizer_prepare,          \
        .free = tbm_buffer_free, .present = tbm_tokenizer_present, .notes = tbm_tokenizer_notes,   \
    }

/* Listing order within each place is the order of the rows. */
static const struct tbm_row table[] = {
    {
        .name = "index.json",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_BUFFER,
        .prepare = tbm_index_json_prepare,
        .free = tbm_buffer_free,
    },
    {
        .name = "model.json",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_model_json_size,
        .render = tbm_model_json_render,
        .padded = true,
        .stats = TBM_ROW_STATS_ALL,
    },
    {
        .name = "selftest",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_selftest_report_size,
        .render = tbm_selftest_report_render,
        .padded = true,
        .slow = true,
    },
    {
        .name = "tensors.json",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_tensors_json_size,
        .render = tbm_tensors_json_render,
        .padded = true,
        .stats = TBM_ROW_STATS_ALL,
    },
    {
        .name = "model.safetensors",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_COMPUTED,
        .prepare = tbm_safetensors_prepare,
        .free = tbm_safetensors_free,
        .present = tbm_safetensors_present,
        .size = tbm_safetensors_size,
        .read = tbm_safetensors_read,
        .span = tbm_safetensors_span,
        .notes = tbm_safetensors_notes,
    },
    {
        .name = "config.json",
        .place = TBM_ROW_ROOT,
        .bytes = TBM_BYTES_BUFFER,
        .prepare = tbm_config_json_prepare,
        .free = tbm_buffer_free,
        .present = tbm_config_json_present,
    },
    GGUF_ROW("model.gguf", tbm_gguf_stored),
    GGUF_ROW("model.Q8_0.gguf", tbm_gguf_q8_0),
    GGUF_ROW("model.Q4_K_M.gguf", tbm_gguf_q4_k_m),
    TOKENIZER_ROW("tokenizer.json", TBM_TOKENIZER_JSON),
    TOKENIZER_ROW("tokenizer_config.json", TBM_TOKENIZER_CONFIG),
    TOKENIZER_ROW("special_tokens_map.json", TBM_TOKENIZER_SPECIAL_MAP),
    TOKENIZER_ROW("generation_config.json", TBM_TOKENIZER_GENERATION),
    TOKENIZER_ROW("tokenizer.model", TBM_TOKENIZER_MODEL),
    BLOB_PART_ROW("raw.tb", TBM_PART_RAW),
    {
        .name = "header.json",
        .place = TBM_ROW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_header_json_size,
        .render = tbm_header_json_render,
        .padded = true,
        .stats = TBM_ROW_STATS_TENSOR,
        /* up to megabytes (a name or index entry may be that long): once
         * per mount, not per open descriptor, and dropped when the cache
         * is full */
        .evictable = true,
    },
    BLOB_PART_ROW("weights.bin", TBM_PART_WEIGHTS),
    BLOB_PART_ROW("mask.bin", TBM_PART_MASK),
    DENSE_ROW("dense.f32", false),
    DENSE_ROW("dense.npy", true), /* the same bytes after an NPY header */
    {
        .name = "selftest",
        .place = TBM_ROW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .size = tbm_selftest_size,
        .render = tbm_selftest_render,
        .padded = true,
        .slow = true,
    },
    {
        .name = "stats.json",
        .place = TBM_ROW_TENSOR,
        .bytes = TBM_BYTES_RENDERED,
        .servable = tbm_dense_servable,
        .size = tbm_stats_json_size,
        .render = tbm_stats_json_render,
        .padded = true,
        .slow = true,
        .evictable = true,
    },
    PICTURE_ROW("mask.png", TBM_PICTURE_MASK),
    PICTURE_ROW("weights.png", TBM_PICTURE_WEIGHTS),
};

#define ROWS (sizeof(table) / sizeof(table[0]))

/* What the table keeps for a row while the views are open. */
struct tbm_row_slot {
    void *state; /* made by the row's prepare */
    /* a padded row's size per tensor (one for a root row) plus one, once
     * known (0: not yet): stat must not render it every time */
    _Atomic uint64_t *sizes;
};

static size_t row_index(const struct tbm_row *row)
{
    assert(row >= table && row < table + ROWS);
    return (size_t)(row - table);
}

/* The files open and not yet closed. A session can end (SIGTERM, an
 * unmount) before the kernel's release of a file closed just before it
 * reaches the daemon, which never closes that file then: the views do. */
struct tbm_open_files {
    pthread_mutex_t lock;
    struct tbm_file *head;
};

void *tbm_row_state(const struct tbm_views *v, const struct tbm_row *row)
{
    return v->slots[row_index(row)].state;
}

int tbm_views_open(const struct tbm_model *model, const struct tbm_views_options *opts,
                   struct tbm_views **out)
{
    struct tbm_views *v = calloc(1, sizeof(*v));
    int r = TBM_ERR_NOMEM;

    *out = NULL;
    if (!v)
        return r;
    v->model = model;
    if (opts)
        v->opts = *opts;
    if (!v->opts.selftest_batch)
        v->opts.selftest_batch = TBM_BATCH_DEFAULT;
    assert(v->opts.selftest_batch <= TBM_BATCH_MAX);
    v->opts.tokenizer_note = NULL;
    if (opts && opts->tokenizer_note && !(v->tokenizer_note = strdup(opts->tokenizer_note)))
        goto out_err;
    if (!(v->open = calloc(1, sizeof(*v->open))))
        goto out_err;
    pthread_mutex_init(&v->open->lock, NULL);
    /* before the rows: every GGUF file's layout holds the vocabulary */
    if (!(v->slots = calloc(ROWS, sizeof(*v->slots))) || (r = tbm_results_init(v)) < 0 ||
        (r = tbm_selftests_init(v)) < 0 || (r = tbm_views_pending_init(v)) < 0 ||
        (r = tbm_gguf_vocab_open(v->opts.tokenizer, model->config, &v->vocab)) < 0)
        goto out_err;
    for (size_t i = 0; i < ROWS; i++) {
        size_t n = table[i].place == TBM_ROW_TENSOR && model->ntensors ? model->ntensors : 1;
        r = TBM_ERR_NOMEM;
        if (table[i].padded && !(v->slots[i].sizes = calloc(n, sizeof(uint64_t))))
            goto out_err;
        if (table[i].prepare && (r = table[i].prepare(v, &table[i], &v->slots[i].state)) < 0)
            goto out_err;
    }
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
    if (v->open) {
        /* before the results: a file holds a reference to its result */
        while (v->open->head)
            tbm_file_close(v->open->head);
        pthread_mutex_destroy(&v->open->lock);
        free(v->open);
    }
    tbm_results_free(v);
    tbm_selftests_free(v);
    tbm_views_pending_free(v);
    for (size_t i = 0; v->slots && i < ROWS; i++) {
        if (table[i].free && v->slots[i].state)
            table[i].free(v->slots[i].state);
        free(v->slots[i].sizes);
    }
    free(v->slots);
    tbm_gguf_vocab_free(v->vocab);
    free(v->tokenizer_note);
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

size_t tbm_row_count(enum tbm_row_place place)
{
    size_t n = 0;

    for (size_t i = 0; i < ROWS; i++)
        n += table[i].place == place;
    return n;
}

const struct tbm_row *tbm_row_at(enum tbm_row_place place, size_t i)
{
    for (size_t k = 0; k < ROWS; k++)
        if (table[k].place == place && i-- == 0)
            return &table[k];
    return NULL;
}

const struct tbm_row *tbm_row_find(enum tbm_row_place place, const char *name)
{
    for (size_t k = 0; k < ROWS; k++)
        if (table[k].place == place && strcmp(table[k].name, name) == 0)
            return &table[k];
    return NULL;
}

const char *tbm_row_name(const struct tbm_row *row)
{
    return row->name;
}

enum tbm_row_place tbm_row_place(const struct tbm_row *row)
{
    return row->place;
}

void tbm_views_source_name(const struct tbm_views *v, size_t t, char *buf, size_t len)
{
    const struct tbm_tensor *tensor = &v->model->tensors[t];

    if (tensor->owns_src)
        snprintf(buf, len, "%s/%s", v->model->path, tensor->src->name);
    else
        snprintf(buf, len, "%s", v->model->path);
}

bool tbm_views_tensor_changed(const struct tbm_views *v, size_t t)
{
    const struct tbm_source *src = v->model->tensors[t].src;

    return src && atomic_load(&src->changed);
}

bool tbm_views_change_report(const struct tbm_views *v, size_t t, char *buf, size_t len)
{
    struct tbm_source *src = v->model->tensors[t].src;

    return src && tbm_source_take_report(src, buf, len);
}

struct tbm_views_watch {
    struct tbm_watch *watch;
};

int tbm_views_watch_open(const struct tbm_views *v, struct tbm_views_watch **out)
{
    struct tbm_views_watch *w = calloc(1, sizeof(*w));

    *out = NULL;
    if (!w)
        return TBM_ERR_NOMEM;
    int r = tbm_model_watch_open(v->model, &w->watch);
    if (r < 0) {
        free(w);
        return r;
    }
    *out = w;
    return 0;
}

int tbm_views_watch_fd(const struct tbm_views_watch *w)
{
    return tbm_watch_fd(w->watch);
}

size_t tbm_views_watch_read(struct tbm_views_watch *w)
{
    return tbm_watch_read(w->watch);
}

void tbm_views_watch_close(struct tbm_views_watch *w)
{
    if (!w)
        return;
    tbm_watch_close(w->watch);
    free(w);
}

bool tbm_views_stats_ready(const struct tbm_views *v, size_t t)
{
    return tbm_tensor_stats_ready(v->model, t);
}

bool tbm_row_present(const struct tbm_views *v, const struct tbm_row *row)
{
    return !row->present || row->present(v, row);
}

bool tbm_row_rendered(const struct tbm_row *row)
{
    return row->bytes == TBM_BYTES_RENDERED;
}

enum tbm_row_stats tbm_row_stats(const struct tbm_row *row)
{
    return row->stats;
}

bool tbm_row_slow(const struct tbm_row *row)
{
    return row->slow;
}

bool tbm_row_ready(const struct tbm_views *v, const struct tbm_row *row, size_t t)
{
    return row->bytes == TBM_BYTES_RENDERED && tbm_results_ready(v, row, t);
}

int tbm_views_notes(const struct tbm_views *v, struct json_object *missing,
                    struct json_object *notes, bool *expected)
{
    *expected = false;
    for (size_t i = 0; i < ROWS; i++) {
        int r = table[i].notes ? table[i].notes(v, &table[i], missing, notes, expected) : 0;
        if (r < 0)
            return r;
    }
    return 0;
}

int tbm_json_add_once(struct json_object *arr, const char *line)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), line) == 0)
            return 0;
    return json_object_array_add(arr, json_object_new_string(line)) < 0 ? TBM_ERR_NOMEM : 0;
}

/* The region of a source row for tensor t, or NULL when it is computed. */
static const struct tbm_region *region_of(const struct tbm_views *v, const struct tbm_row *row,
                                          size_t t, uint64_t *skip)
{
    *skip = 0;
    return row->bytes == TBM_BYTES_SOURCE ? row->region(v, row, t, skip) : NULL;
}

/* Whether row's file of tensor t can be served: not those of a broken
 * tensor that validation found unsafe. */
static bool servable(const struct tbm_views *v, const struct tbm_row *row, size_t t)
{
    uint64_t skip;

    if (row->servable)
        return row->servable(v, t);
    if (row->bytes != TBM_BYTES_SOURCE)
        return true;
    return v->model->tensors[t].header_sound && region_of(v, row, t, &skip)->ok;
}

/* The size of a servable file, as its row knows it. */
static int row_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size)
{
    const struct tbm_buffer *b;
    const struct tbm_region *region;
    uint64_t skip;

    if (row->size)
        return row->size(v, row, t, size);
    if (row->bytes == TBM_BYTES_BUFFER) {
        b = tbm_row_state(v, row);
        *size = b->len;
        return 0;
    }
    region = region_of(v, row, t, &skip);
    *size = skip + region->len;
    return 0;
}

/* A padded row's size: known once, then remembered. */
static int padded_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                       uint64_t *size)
{
    _Atomic uint64_t *known = &v->slots[row_index(row)].sizes[row->place == TBM_ROW_TENSOR ? t : 0];
    uint64_t k = atomic_load_explicit(known, memory_order_relaxed);

    if (k) {
        *size = k - 1;
        return 0;
    }
    int r = row_size(v, row, t, size);
    if (r < 0)
        return r;
    /* Two threads that race here store the same value. */
    atomic_store_explicit(known, *size + 1, memory_order_relaxed);
    return 0;
}

int tbm_row_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size)
{
    *size = 0;
    if (!servable(v, row, t))
        return 0;
    return row->padded ? padded_size(v, row, t, size) : row_size(v, row, t, size);
}

int tbm_row_render(const struct tbm_views *v, const struct tbm_row *row, size_t t, char **out,
                   size_t *len)
{
    uint64_t size;
    int pending = row->render(v, row, t, out, len);
    int r = pending;

    if (r < 0 || !row->padded)
        return r;
    if ((r = padded_size(v, row, t, &size)) < 0) {
        free(*out);
        return r;
    }
    r = tbm_pad_lines(out, len, size);
    return r < 0 ? r : pending;
}

static int read_region(const struct tbm_tensor *tensor, const struct tbm_region *region, char *buf,
                       uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    if (off >= region->len)
        return 0;
    size_t n = region->len - off < len ? (size_t)(region->len - off) : len;
    int r = tbm_source_read_full(tensor->src, buf, n, region->off + off, req);
    if (r < 0)
        return r;
    *got = n;
    return 0;
}

/* Reads computed, source or buffer bytes of a servable file into buf, as
 * part of req, which it ends. Computed and source bytes serve this reply
 * alone: the change is checked once, after all of them are read. */
static int read_bytes(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                      uint64_t off, size_t len, struct tbm_request *req, size_t *got)
{
    const struct tbm_buffer *b;
    uint64_t skip;

    *got = 0;
    if (row->bytes == TBM_BYTES_BUFFER) {
        b = tbm_row_state(v, row);
        tbm_copy_range(buf, off, len, b->data, b->len, got);
        return 0;
    }
    int r = row->read ? row->read(v, row, t, buf, off, len, req, got)
                      : read_region(&v->model->tensors[t], region_of(v, row, t, &skip), buf, off,
                                    len, req, got);
    r = tbm_request_end(req, r);
    if (r < 0)
        *got = 0;
    return r;
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

/* Where up to len bytes at off of a servable file lie as stored in a
 * source: 1 with out (its len 0 past the end of the file), 0 for bytes that
 * are computed. */
static int span_of(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t off,
                   size_t len, struct tbm_span *out)
{
    uint64_t skip;

    *out = (struct tbm_span){0};
    if (row->span)
        return row->span(v, row, t, off, len, out);
    const struct tbm_region *r = region_of(v, row, t, &skip);
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

struct tbm_file {
    const struct tbm_views *v;
    const struct tbm_row *row;
    size_t t;
    struct tbm_result *result;    /* a rendered row's content */
    struct tbm_file *prev, *next; /* in v->open */
};

int tbm_file_open(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                  struct tbm_file **out)
{
    struct tbm_file *f;

    *out = NULL;
    if (!servable(v, row, t))
        return TBM_ERR_BROKEN;
    if (!(f = calloc(1, sizeof(*f))))
        return TBM_ERR_NOMEM;
    *f = (struct tbm_file){.v = v, .row = row, .t = t};
    if (row->bytes == TBM_BYTES_RENDERED) {
        int r = tbm_results_get(v, row, t, &f->result);
        if (r < 0) {
            free(f);
            return r;
        }
    }
    pthread_mutex_lock(&v->open->lock);
    f->next = v->open->head;
    if (f->next)
        f->next->prev = f;
    v->open->head = f;
    pthread_mutex_unlock(&v->open->lock);
    *out = f;
    return 0;
}

void tbm_file_close(struct tbm_file *f)
{
    if (!f)
        return;
    struct tbm_open_files *open = f->v->open;
    pthread_mutex_lock(&open->lock);
    if (f->prev)
        f->prev->next = f->next;
    else
        open->head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    pthread_mutex_unlock(&open->lock);
    tbm_result_put(f->result);
    free(f);
}

int tbm_file_read(struct tbm_file *f, uint64_t off, size_t len, char *buf, unsigned flags,
                  struct tbm_reply *out)
{
    struct tbm_request req = {.mode = flags & TBM_READ_NOWAIT ? TBM_SOURCE_NOWAIT : 0};
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
        out->result = tbm_result_take(f->result);
        return 0;
    }
    r = span_of(f->v, f->row, f->t, off, len, &sp);
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
        r = tbm_source_hold(sp.src, sp.pos, sp.len, &req, &out->held);
        if (r < 0)
            return r;
        if (r > 0) {
            out->kind = TBM_REPLY_HELD;
            return 0;
        }
    }
    r = read_bytes(f->v, f->row, f->t, buf, off, len, &req, &got);
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

int tbm_reply_copy(struct tbm_reply *reply, char *buf)
{
    assert(reply->kind == TBM_REPLY_SPLICE);
    int r = tbm_source_read_full(reply->src, buf, reply->range.len, reply->range.pos, NULL);
    if (r < 0)
        return r;
    *reply = (struct tbm_reply){.kind = TBM_REPLY_BYTES, .data = buf, .len = reply->range.len};
    return 0;
}

void tbm_reply_done(struct tbm_reply *reply)
{
    if (reply->kind == TBM_REPLY_HELD)
        tbm_source_release(&reply->held);
    tbm_result_put(reply->result);
    reply->result = NULL;
}

int tbm_buffer_new(const char *data, size_t len, char *owned, void **state)
{
    struct tbm_buffer *b = malloc(sizeof(*b));

    *state = b;
    if (!b) {
        free(owned);
        return TBM_ERR_NOMEM;
    }
    *b = (struct tbm_buffer){.data = data, .len = len, .owned = owned};
    return 0;
}

void tbm_buffer_free(void *state)
{
    struct tbm_buffer *b = state;

    free(b->owned);
    free(b);
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
