/* The view table: maps each file kind of the tree to its operations. */
#include "internal.h"

#include <assert.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct tbm_view_ops *const ops[TBM_VIEW_COUNT] = {
    [TBM_VIEW_INDEX_JSON] = &tbm_index_json_view,
    [TBM_VIEW_MODEL_JSON] = &tbm_model_json_view,
    [TBM_VIEW_SELFTEST_REPORT] = &tbm_selftest_report_view,
    [TBM_VIEW_RAW] = &tbm_raw_view,
    [TBM_VIEW_HEADER_JSON] = &tbm_header_json_view,
    [TBM_VIEW_WEIGHTS] = &tbm_weights_view,
    [TBM_VIEW_MASK] = &tbm_mask_view,
    [TBM_VIEW_DENSE_F32] = &tbm_dense_f32_view,
    [TBM_VIEW_DENSE_NPY] = &tbm_dense_npy_view,
    [TBM_VIEW_SELFTEST] = &tbm_selftest_view,
};

int tbm_views_open(const struct tbm_model *model, const struct tbm_view_options *opts,
                   struct tbm_views **out)
{
    uint32_t batch = opts && opts->selftest_batch ? opts->selftest_batch : TBM_BATCH_DEFAULT;

    assert(batch <= TBM_BATCH_MAX);
    struct tbm_views *v = calloc(1, sizeof(*v));
    if (!v)
        return TBM_ERR_NOMEM;
    v->model = model;
    v->batch = batch;
    int r = tbm_model_json_render(v, &v->model_json, &v->model_json_len);
    if (r < 0) {
        free(v);
        return r;
    }
    *out = v;
    return 0;
}

void tbm_views_close(struct tbm_views *v)
{
    if (!v)
        return;
    free(v->model_json);
    free(v);
}

const char *tbm_view_name(enum tbm_view_kind kind)
{
    return ops[kind]->name;
}

bool tbm_view_snapshot(enum tbm_view_kind kind)
{
    return ops[kind]->generate != NULL;
}

bool tbm_view_generated(enum tbm_view_kind kind)
{
    return ops[kind]->unsized;
}

bool tbm_view_servable(const struct tbm_views *v, enum tbm_view_kind kind, size_t t)
{
    return !ops[kind]->servable || ops[kind]->servable(v, t);
}

int tbm_view_size(const struct tbm_views *v, enum tbm_view_kind kind, size_t t, uint64_t *size)
{
    *size = 0;
    return tbm_view_servable(v, kind, t) ? ops[kind]->size(v, t, size) : 0;
}

int tbm_view_read(const struct tbm_views *v, enum tbm_view_kind kind, size_t t, char *buf,
                  uint64_t off, size_t len, size_t *got)
{
    *got = 0;
    if (!tbm_view_servable(v, kind, t))
        return TBM_ERR_BROKEN;
    if (ops[kind]->read)
        return ops[kind]->read(v, t, buf, off, len, got);

    char *doc;
    size_t doclen;
    int r = ops[kind]->generate(v, t, &doc, &doclen);
    if (r < 0)
        return r;
    tbm_copy_range(buf, off, len, doc, doclen, got);
    free(doc);
    return 0;
}

int tbm_view_locate(const struct tbm_views *v, enum tbm_view_kind kind, size_t t, uint64_t off,
                    size_t len, struct tbm_source_range *out)
{
    struct stat st;
    uint64_t skip;

    *out = (struct tbm_source_range){.fd = -1};
    if (!ops[kind]->source)
        return 0;
    if (!tbm_view_servable(v, kind, t))
        return TBM_ERR_BROKEN;
    const struct tbm_tensor *tensor = &v->model->tensors[t];
    const struct tbm_region *r = ops[kind]->source(v, t, &skip);
    if (!r || off < skip)
        return 0;
    off -= skip;
    if (off >= r->len)
        return 1;
    out->fd = tensor->fd;
    out->pos = r->off + off;
    out->len = r->len - off < len ? (size_t)(r->len - off) : len;
    /* The range was inside the file at mount; a source that has shrunk since
     * gives EIO, as a short pread does for tbm_view_read. */
    if (fstat(out->fd, &st) < 0 || (uint64_t)st.st_size < out->pos + out->len)
        return TBM_ERR_IO;
    return 1;
}

int tbm_view_generate(const struct tbm_views *v, enum tbm_view_kind kind, size_t t, char **out,
                      size_t *len)
{
    return ops[kind]->generate(v, t, out, len);
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
