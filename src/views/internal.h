/* Cross-file pieces of the views (not installed): each view kind's
 * operations and the shared context. */
#ifndef TBM_VIEWS_INTERNAL_H
#define TBM_VIEWS_INTERNAL_H

#include "tbm/view.h"

struct tbm_views {
    const struct tbm_model *model;
    uint32_t batch;   /* self-test batch */
    char *model_json; /* rendered once: it summarizes every tensor */
    size_t model_json_len;
};

struct tbm_view_ops {
    const char *name;
    int (*size)(const struct tbm_views *v, size_t t, uint64_t *size);
    int (*read)(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                size_t *got);
    int (*generate)(const struct tbm_views *v, size_t t, char **out, size_t *len);
    /* NULL unless the view can be bytes of the source as stored: then the
     * region holding the view's bytes from *skip on (what comes before, such
     * as an .npy header, is computed), or NULL for a tensor whose view must
     * be computed */
    const struct tbm_region *(*source)(const struct tbm_views *v, size_t t, uint64_t *skip);
    /* NULL when every tensor's view can be served */
    bool (*servable)(const struct tbm_views *v, size_t t);
    bool unsized; /* produced at open; stat reports size 0 */
};

extern const struct tbm_view_ops tbm_index_json_view, tbm_model_json_view, tbm_selftest_report_view,
    tbm_raw_view, tbm_header_json_view, tbm_weights_view, tbm_mask_view, tbm_dense_f32_view,
    tbm_dense_npy_view, tbm_selftest_view;

/* Copies the part of [src, src + srclen) at off into buf. */
void tbm_copy_range(char *buf, uint64_t off, size_t len, const char *src, size_t srclen,
                    size_t *got);

/* Renders model.json for tbm_views_open. */
int tbm_model_json_render(const struct tbm_views *v, char **out, size_t *len);

/* Serializes obj pretty-printed with a final newline into a malloc'd buffer. */
int tbm_json_dump(struct json_object *obj, char **out, size_t *len);

#endif
