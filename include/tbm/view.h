/* Views: the virtual files of a mounted model. Each file kind of the tree is
 * one view with a size known up front and a read of any byte range that
 * computes only that range. */
#ifndef TBM_VIEW_H
#define TBM_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/model.h"

enum tbm_view_kind {
    /* files of the mount's root */
    TBM_VIEW_INDEX_JSON,
    TBM_VIEW_MODEL_JSON,
    TBM_VIEW_SELFTEST_REPORT,
    /* files of each tensors/<name>/ directory */
    TBM_VIEW_RAW,
    TBM_VIEW_HEADER_JSON,
    TBM_VIEW_WEIGHTS,
    TBM_VIEW_MASK,
    TBM_VIEW_DENSE_F32,
    TBM_VIEW_DENSE_NPY,
    TBM_VIEW_SELFTEST,
    TBM_VIEW_COUNT
};

#define TBM_VIEW_FIRST_TENSOR TBM_VIEW_RAW

/* A model's views: the model and what is rendered once for it. */
struct tbm_views;

/* How the views behave; zeroed fields take their defaults. */
struct tbm_view_options {
    uint32_t selftest_batch; /* columns of the self-test's X, 1..TBM_BATCH_MAX; 0: 8 */
};

#define TBM_BATCH_DEFAULT 8
#define TBM_BATCH_MAX     1024

/* Prepares the views of an opened model (which must outlive them); opts may
 * be NULL for the defaults. */
int tbm_views_open(const struct tbm_model *model, const struct tbm_view_options *opts,
                   struct tbm_views **out);
void tbm_views_close(struct tbm_views *views);

/* The file name of a view kind, e.g. "dense.f32". */
const char *tbm_view_name(enum tbm_view_kind kind);

/* True for views best read through one snapshot per open: a reader should
 * take the content once with tbm_view_generate (tbm_view_read renders it
 * again on every call). */
bool tbm_view_snapshot(enum tbm_view_kind kind);

/* True for snapshot views whose content is only produced when they are
 * opened: their size is reported as 0. */
bool tbm_view_generated(enum tbm_view_kind kind);

/* Whether view kind of tensor t can be served: false for the views of a
 * broken tensor that validation found unsafe. Such a view has size 0 and its
 * reads fail with TBM_ERR_BROKEN. */
bool tbm_view_servable(const struct tbm_views *views, enum tbm_view_kind kind, size_t t);

/* The size in bytes of view kind of tensor t (t is ignored for root files). */
int tbm_view_size(const struct tbm_views *views, enum tbm_view_kind kind, size_t t, uint64_t *size);

/* Reads up to len bytes at off into buf; *got is short only at the end of
 * the file. Fails with TBM_ERR_BROKEN for a view of a broken tensor that
 * cannot be served, TBM_ERR_IO when the source cannot be read. */
int tbm_view_read(const struct tbm_views *views, enum tbm_view_kind kind, size_t t, char *buf,
                  uint64_t off, size_t len, size_t *got);

/* Where bytes of a view lie in the source, for views that can be bytes of it
 * as stored: raw.tb, weights.bin, mask.bin, and the dense views of unmasked
 * float32 tensors past the .npy header. */
struct tbm_source_range {
    int fd;       /* -1 when the range is empty: off is at or past the end */
    uint64_t pos; /* offset in fd */
    size_t len;   /* short only at the end of the view */
};

/* Locates up to len bytes at off of view kind of tensor t in the source, so
 * that they can be handed to the kernel without a copy (splice). Returns 1
 * and fills out for such bytes; 0 for bytes that are computed (read them
 * with tbm_view_read); TBM_ERR_BROKEN as tbm_view_read; TBM_ERR_IO when the
 * source no longer holds the range (it has shrunk since the mount). */
int tbm_view_locate(const struct tbm_views *views, enum tbm_view_kind kind, size_t t, uint64_t off,
                    size_t len, struct tbm_source_range *out);

/* Makes self-tests give up with TBM_ERR_STOPPED from now on, the root report
 * between two tensors: for a daemon that is exiting and should not wait for
 * a report over a large model. Affects every set of views of the process. */
void tbm_selftests_stop(void);

/* Produces the whole content of a snapshot view into a malloc'd buffer. */
int tbm_view_generate(const struct tbm_views *views, enum tbm_view_kind kind, size_t t, char **out,
                      size_t *len);

#endif
