/* The index of a container or a manifest loaded: every entry of its parsed
 * "tensors" array (index_text.c) made a tensor record, in parallel spans;
 * the records' one allocation and their release. */
#include "internal.h"

#include "base/parallel.h"

#include <stdlib.h>
#include <string.h>

static struct json_object *tensors_array(struct tbm_opener *o)
{
    struct json_object *v;

    if (!json_object_is_type(o->root, json_type_object) ||
        !json_object_object_get_ex(o->root, "tensors", &v) ||
        !json_object_is_type(v, json_type_array))
        return NULL;
    return v;
}

static int take_metadata(struct tbm_opener *o)
{
    struct json_object *v;

    if (json_object_object_get_ex(o->root, "architecture", &v) &&
        json_object_is_type(v, json_type_string)) {
        o->m->architecture = strdup(json_object_get_string(v));
        if (!o->m->architecture)
            return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    }
    if (json_object_object_get_ex(o->root, "config", &v))
        o->m->config = json_object_get(v);
    return 0;
}

static int check_shape(struct tbm_tensor *t)
{
    uint64_t product = 1;

    if (!t->shape || !t->header_valid)
        return 0;
    for (size_t k = 0; k < t->ndim; k++)
        if (__builtin_mul_overflow(product, t->shape[k], &product))
            return tbm_strlist_addf(&t->warnings, "the shape's product overflows 64 bits");
    t->shape_matches = product == t->hdr.num_weights;
    if (!t->shape_matches)
        return tbm_strlist_addf(&t->warnings, "the shape's product %llu is not num_weights %llu",
                                (unsigned long long)product,
                                (unsigned long long)t->hdr.num_weights);
    return 0;
}

static int locate(struct tbm_opener *o, struct tbm_tensor *t, const struct tbm_entry *e,
                  uint64_t *data_end)
{
    const char *why;

    if (o->m->kind == TBM_SOURCE_CONTAINER) {
        if (!e->has_offset)
            return e->bad_offset ? 0
                                 : tbm_strlist_addf(&t->problems, "index entry has no \"offset\"");
        t->src = o->m->src;
        t->offset = e->offset;
        *data_end = o->data_end;
        return 1;
    }
    if (!e->file)
        return tbm_strlist_addf(&t->problems, "manifest entry has no string \"file\"");
    int fd = tbm_manifest_open_file(o->m->dirfd, o->m->path, e->file, e->file_len, &why);
    if (fd < 0)
        return tbm_strlist_addf(&t->problems, "manifest file \"%s\" refused: %s", e->file, why);
    int r = tbm_source_from_fd(fd, e->file, &t->src, &why);
    if (r == TBM_ERR_NOMEM)
        return r;
    if (r < 0)
        return tbm_strlist_addf(&t->problems, "manifest file \"%s\" cannot be read", e->file);
    t->owns_src = true;
    *data_end = t->src->id.size;
    return 1;
}

int tbm_tensor_validate(struct tbm_tensor *t, struct json_object *entry, uint64_t data_end,
                        struct tbm_reader *rd)
{
    int r;

    t->entry_problems = t->problems.count;
    t->entry_warnings = t->warnings.count;
    if ((r = tbm_blob_validate(t, data_end, rd)) < 0 || (r = tbm_entry_check_header(entry, t)) < 0)
        return r;
    return check_shape(t);
}

/* tensorbit-run's loader knows these index dtypes (scales stored after the
 * weights); the format does not define them. */
static const char *quantized_dtype(struct json_object *entry)
{
    static const char *const names[] = {"int8", "int4"};
    struct json_object *v;

    if (!json_object_object_get_ex(entry, "dtype", &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (strcmp(json_object_get_string(v), names[k]) == 0)
            return names[k];
    return NULL;
}

static bool json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Element i's text in a split index, without the whitespace around it. */
static const char *element_text(const struct tbm_opener *o, size_t i, size_t *len)
{
    const char *buf = o->m->index_json;
    size_t a = o->split.sep[i] + 1, b = o->split.sep[i + 1];

    while (a < b && json_space(buf[a]))
        a++;
    while (b > a && json_space(buf[b - 1]))
        b--;
    *len = b - a;
    return buf + a;
}

static int add_tensor(struct tbm_opener *o, struct json_object *entry, size_t i,
                      struct tbm_reader *rd)
{
    struct tbm_tensor *t = &o->m->tensors[i];
    struct tbm_entry e;
    uint64_t data_end = 0;
    const char *q;
    int r;

    if (o->opts->progress)
        atomic_fetch_add_explicit(&o->opts->progress->loaded, 1, memory_order_relaxed);
    size_t text_len = 0;
    const char *text = o->split.sep ? element_text(o, i, &text_len) : NULL;

    if ((r = tbm_entry_parse(entry, i, t, &e, text, text_len)) < 0)
        return r;
    if (!json_object_is_type(entry, json_type_object))
        return 0;
    /* One problem and nothing else: the blob is never located, so its
     * regions neither break a neighbour nor are blamed by one. */
    if ((q = quantized_dtype(entry))) {
        /* header.json's offset is the entry's, though nothing is read there */
        if (o->m->kind == TBM_SOURCE_CONTAINER && e.has_offset)
            t->offset = e.offset;
        tbm_strlist_truncate(&t->problems, 0);
        tbm_strlist_truncate(&t->warnings, 0);
        return tbm_strlist_addf(&t->problems,
                                "quantized dtype %s is not supported (a tensorbit-run extension "
                                "that the format does not define): no view of it is served",
                                q);
    }
    if ((r = locate(o, t, &e, &data_end)) <= 0)
        return r;
    r = tbm_tensor_validate(t, entry, data_end, rd);
    /* A manifest of more files than the process may keep open mounts all
     * the same: the files past the budget are opened when read. */
    if (t->owns_src && atomic_fetch_add(&o->kept_fds, 1) >= o->fd_budget)
        tbm_source_detach(t->src, tbm_manifest_reopen, o->m);
    return r;
}

/* A remote container fetches the headers of entries [first, end) of arr at
 * once, and neighbouring ones in one request, before they are read one by
 * one. A local file does nothing. */
static void prefetch_headers(struct tbm_opener *o, struct json_object *arr, size_t first,
                             size_t end)
{
    struct tbm_source *src = o->m->src;
    uint64_t off;

    if (o->m->kind != TBM_SOURCE_CONTAINER || !src->ops->prefetch)
        return;
    for (size_t i = first; i < end; i++)
        if (tbm_json_get_u64(json_object_array_get_idx(arr, i), "offset", &off) == 1)
            tbm_source_prefetch(src, off, TBM_READER_FIRST);
}

/* Loads entries [begin, end) of the parsed array: a span of the runner. The
 * parsed index is only read, and each tensor is one span's. */
static int add_tensors(void *ctx, size_t begin, size_t end)
{
    struct tbm_opener *o = ctx;
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    prefetch_headers(o, o->entries, begin, end);
    for (size_t i = begin; i < end && r == 0; i++)
        r = add_tensor(o, json_object_array_get_idx(o->entries, i), i, &rd);
    tbm_reader_free(&rd);
    return r;
}

/* A span's status when a slice of the array is not valid JSON: negative like
 * every failure, and apart from the TBM_ERR_ codes. */
#define SLICE_INVALID (-100)

/* At most this many elements, or bytes of their text, are parsed at once:
 * the tree of one slice is all the memory the index takes while it loads. */
#define SLICE_ELEMENTS 256
#define SLICE_BYTES    (1u << 20)

static size_t slice_end(const struct tbm_json_split *split, size_t first, size_t end)
{
    size_t last = first + 1;

    while (last < end && last - first < SLICE_ELEMENTS &&
           split->sep[last + 1] - split->sep[first] <= SLICE_BYTES)
        last++;
    return last;
}

/* Loads entries [begin, end) from their text, a slice at a time: a span of
 * the runner. */
static int add_sliced(void *ctx, size_t begin, size_t end)
{
    struct tbm_opener *o = ctx;
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t first = begin; first < end && r == 0;) {
        size_t last = slice_end(&o->split, first, end);
        struct json_object *arr = tbm_json_split_elements(o->m->index_json, &o->split, first, last);

        if (!arr) {
            r = SLICE_INVALID;
            break;
        }
        prefetch_headers(o, arr, 0, last - first);
        for (size_t i = first; i < last && r == 0; i++)
            r = add_tensor(o, json_object_array_get_idx(arr, i - first), i, &rd);
        json_object_put(arr);
        first = last;
    }
    tbm_reader_free(&rd);
    return r;
}

static int load_entries(struct tbm_opener *o)
{
    struct json_object *arr = tensors_array(o);

    if (!arr)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "%s has no \"tensors\" array", o->what);
    bool sliced = o->split.sep != NULL;
    size_t n = sliced ? o->split.count : json_object_array_length(arr);
    if (n > TBM_INDEX_ENTRIES_MAX)
        return tbm_index_too_many(o);
    /* Zeroed records own nothing, so a failure part way can close them all. */
    o->m->tensors = calloc(n ? n : 1, sizeof(*o->m->tensors));
    if (!o->m->tensors)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory for %zu tensors", n);
    o->m->ntensors = n;
    o->entries = arr;
    if (o->opts->progress) {
        atomic_store(&o->opts->progress->loaded, 0);
        atomic_store(&o->opts->progress->tensors, n);
    }
    int r = tbm_for_each_span(n, sliced ? add_sliced : add_tensors, o);
    if (r == SLICE_INVALID) {
        /* The whole text is invalid too, and parsing it says why. */
        tbm_tensors_free(o->m);
        json_object_put(o->root);
        tbm_json_split_free(&o->split);
        return (r = tbm_index_parse(o)) < 0 ? r : load_entries(o);
    }
    return r < 0 ? tbm_open_fail(o, r, "out of memory loading %zu tensors", n) : 0;
}

int tbm_index_load(struct tbm_opener *o)
{
    int r = load_entries(o);

    return r < 0 ? r : take_metadata(o);
}

void tbm_tensors_free(struct tbm_model *m)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (t->owns_src)
            tbm_source_close(t->src);
        free(t->name);
        free(t->dir);
        free(t->shape);
        if (t->entry_json_owned)
            free((char *)t->entry_json);
        tbm_strlist_free(&t->problems);
        tbm_strlist_free(&t->warnings);
    }
    free(m->tensors);
    m->tensors = NULL;
    m->ntensors = 0;
}
