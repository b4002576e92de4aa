/* Cross-file pieces of the views (not installed): the row type of the view
 * table, the shared context, and each file kind's functions. */
#ifndef TBM_VIEWS_INTERNAL_H
#define TBM_VIEWS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "format/table.h"
#include "tbm/view.h"

struct tbm_selftests;   /* the self-tests' lock and stop flag (selftest.c) */
struct tbm_results;     /* results rendered once and shared (results.c) */
struct tbm_result;      /* one of them: immutable, reference-counted */
struct tbm_safetensors; /* model.safetensors' layout (safetensors.c) */
struct tbm_gguf;        /* the GGUF views' layout (gguf_layout.c) */

struct tbm_views {
    const struct tbm_model *model;
    uint32_t batch; /* self-test batch */
    /* fixed for the mount, counted when first asked; rendered when first
     * opened */
    _Atomic uint64_t model_json_size;
    /* per tensor, the size of each row whose size is cached (header.json,
     * selftest) plus one, once known (0: not yet): stat must not render
     * them every time */
    _Atomic uint64_t *rendered_sizes[2];
    struct tbm_selftests *selftests;
    struct tbm_results *results;
    struct tbm_safetensors *safetensors;
    struct tbm_gguf *gguf;
    /* fixed for the mount, counted when first asked (0 until then: a
     * million tensors take a while); rendered when first opened */
    _Atomic uint64_t tensors_json_size;
    char *config_json; /* NULL for an architecture config.json does not know */
    size_t config_json_len;
};

/* Bytes of a view that lie as stored in a source: len bytes at pos of src
 * (len 0 past the end of the view). */
struct tbm_span {
    struct tbm_source *src;
    uint64_t pos;
    size_t len;
};

/* How a row's bytes come. */
enum tbm_view_bytes {
    TBM_BYTES_SOURCE,   /* a region of the tensor's source (or computed, where
                         * region gives NULL for the tensor) */
    TBM_BYTES_COMPUTED, /* any range computed on request by read */
    TBM_BYTES_RENDERED, /* the whole content rendered once per mount, when first
                         * opened, and every open reading that result */
};

/* How a row's size is known. */
enum tbm_view_sizing {
    TBM_SIZE_FN,     /* size (or, for a source region, its length) */
    TBM_SIZE_CACHED, /* size, remembered per tensor: it costs a render */
};

struct tbm_file_kind {
    const char *name;
    enum tbm_view_place place;
    enum tbm_view_bytes bytes;
    enum tbm_view_sizing sizing;
    /* SOURCE: the region holding the view's bytes from *skip on (what comes
     * before, such as an .npy header, is computed), or NULL for a tensor
     * whose view is computed by size and read */
    const struct tbm_region *(*region)(const struct tbm_views *v, size_t t, uint64_t *skip);
    int (*size)(const struct tbm_views *v, size_t t, uint64_t *size);
    int (*read)(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                size_t *got);
    int (*render)(const struct tbm_views *v, size_t t, char **out, size_t *len);
    /* COMPUTED, optional: where bytes at off lie as stored, for views
     * pieced together from many regions (as tbm_view_span) */
    int (*span)(const struct tbm_views *v, size_t t, uint64_t off, size_t len,
                struct tbm_span *out);
    /* ROOT, optional: whether the model has this file (NULL: always) */
    bool (*present)(const struct tbm_views *v);
    /* NULL: a source view is servable when its region is sound, any other
     * view always */
    bool (*servable)(const struct tbm_views *v, size_t t);
    /* Optional: what the row keeps for the mount, made when the views are
     * opened (its size fixed at mount, a layout) and freed when they close.
     * free must take a views that prepare failed on, or never ran on. */
    int (*prepare)(struct tbm_views *v);
    void (*free)(struct tbm_views *v);
    int cache;      /* TBM_SIZE_CACHED: which of rendered_sizes, 0 or 1 */
    bool slow;      /* rendering can take seconds */
    bool evictable; /* rendering again gives the same bytes: the result may be
                     * dropped when the cache is full */
};

/* A buffer of one size kept per thread for the thread's life: each FUSE
 * worker has its own, so reads share nothing and allocate nothing after the
 * first. One struct per kind of buffer, TBM_THREAD_SCRATCH_INIT. */
struct tbm_thread_scratch {
    pthread_mutex_t lock;
    atomic_bool made; /* key created */
    pthread_key_t key;
};
#define TBM_THREAD_SCRATCH_INIT                                                                    \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, false, 0                                                        \
    }

/* The calling thread's buffer of ts (size bytes, the same at every call),
 * or NULL when out of memory. */
void *tbm_thread_scratch(struct tbm_thread_scratch *ts, size_t size);

/* Copies the part of [src, src + srclen) at off into buf. */
void tbm_copy_range(char *buf, uint64_t off, size_t len, const char *src, size_t srclen,
                    size_t *got);

/* Pads a rendered document (ending in a newline) to size bytes with spaces
 * at the ends of its lines, as many as each line's last row on a terminal
 * of TBM_PAD_COLUMNS has room for (an even share of them when that is not
 * enough): JSON and report lines allow them, a size fixed before the
 * content is known is what stat reported, and cat shows no blank rows. The
 * document's newlines must all lie outside strings, as json-c and the
 * reports write them. Frees *doc on failure. */
#define TBM_PAD_COLUMNS 80
int tbm_pad_lines(char **doc, size_t *len, uint64_t size);

/* Root documents that sum up every tensor's statistics (model.json,
 * tensors.json): doc renders one, with the statistics or (at mount, for
 * the size) without. Its size is the rendering without them plus slack, a
 * bound on what they can add; it is rendered when first opened, after
 * every tensor's statistics are computed (in parallel), and padded. */
typedef int (*tbm_doc_fn)(const struct tbm_views *v, bool with_stats, char **out, size_t *len);
int tbm_lazy_doc_size(const struct tbm_views *v, tbm_doc_fn doc, uint64_t slack, uint64_t *size);
/* Renders one with the statistics, padded by tbm_pad_lines. */
int tbm_lazy_doc_render_lines(const struct tbm_views *v, tbm_doc_fn doc, uint64_t size, char **out,
                              size_t *len);

/* Serializes obj pretty-printed with a final newline into a malloc'd buffer. */
int tbm_json_dump(struct json_object *obj, char **out, size_t *len);

/* shape.c: a tensor's shape as the views show it */
/* The index's shape as a JSON array, or NULL (JSON null) when it has none. */
struct json_object *tbm_shape_json(const struct tbm_tensor *t);
/* The dimensions of t shown: the index's shape, or [num_weights] when the
 * index has none or, with layout (a view that lays the elements out in
 * that shape), when it does not describe num_weights. Returns how many. */
size_t tbm_shape_dims(const struct tbm_tensor *t, bool layout, const uint64_t **dims);
/* Writes the n dims in decimal, sep between them, into out (cap bytes,
 * NUL-terminated when cap > 0, cut when short); returns the text's whole
 * length, as snprintf does, so that out may be NULL with cap 0. */
size_t tbm_shape_text(const uint64_t *dims, size_t n, const char *sep, char *out, size_t cap);

/* region.c: raw.tb, weights.bin, mask.bin */
const struct tbm_region *tbm_raw_region(const struct tbm_views *v, size_t t, uint64_t *skip);
const struct tbm_region *tbm_weights_region(const struct tbm_views *v, size_t t, uint64_t *skip);
const struct tbm_region *tbm_mask_region(const struct tbm_views *v, size_t t, uint64_t *skip);

/* json_views.c: index.json, model.json, header.json */
int tbm_index_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_index_json_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                        size_t *got);
int tbm_model_json_prepare(struct tbm_views *v); /* its size, at mount */
int tbm_model_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_model_json_render(const struct tbm_views *v, size_t t, char **out, size_t *len);
int tbm_header_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_header_json_render(const struct tbm_views *v, size_t t, char **out, size_t *len);

/* dense.c: dense.f32, dense.npy */
/* The float32 expansion, masked, of count elements of t from first on into
 * out, through the caller's scratch: weights (8 bytes an element) and mask
 * (a byte an element, plus 8). float32 weights are read straight into out
 * and masked in place, one copy fewer. */
int tbm_expand_chunk(const struct tbm_views *v, const struct tbm_tensor *t, void *weights,
                     uint8_t *mask, uint64_t first, size_t count, float *out);
bool tbm_dense_servable(const struct tbm_views *v, size_t t);
const struct tbm_region *tbm_f32_region(const struct tbm_views *v, size_t t, uint64_t *skip);
int tbm_f32_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_f32_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                 size_t *got);
const struct tbm_region *tbm_npy_region(const struct tbm_views *v, size_t t, uint64_t *skip);
int tbm_npy_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_npy_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                 size_t *got);

/* safetensors.c: model.safetensors */
int tbm_safetensors_init(struct tbm_views *v);
void tbm_safetensors_free(struct tbm_views *v);
int tbm_safetensors_size(const struct tbm_views *v, size_t t, uint64_t *size);
/* Whether model.safetensors exists: not when its header would be over the
 * 100,000,000 bytes safetensors loaders accept (its size is then a
 * failure). */
bool tbm_safetensors_present(const struct tbm_views *v);
/* Adds to model.json's arrays why model.safetensors is missing, and which
 * tensors it leaves out that its own "omitted" alone does not explain. */
int tbm_safetensors_notes(const struct tbm_views *v, struct json_object *missing,
                          struct json_object *notes);
int tbm_safetensors_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                         size_t *got);
int tbm_safetensors_span(const struct tbm_views *v, size_t t, uint64_t off, size_t len,
                         struct tbm_span *out);

/* gguf_layout.c, gguf.c: model.gguf and model.Q8_0.gguf */
int tbm_gguf_init(struct tbm_views *v); /* once; model.json's prepare asks first */
void tbm_gguf_free(struct tbm_views *v);
bool tbm_gguf_present(const struct tbm_views *v);
/* model.json's views_missing: NULL when it has none (not llama or mistral) */
struct json_object *tbm_gguf_missing_json(const struct tbm_views *v);
int tbm_gguf_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_gguf_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                  size_t *got);
int tbm_gguf_span(const struct tbm_views *v, size_t t, uint64_t off, size_t len,
                  struct tbm_span *out);
int tbm_gguf_q8_0_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_gguf_q8_0_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                       size_t *got);

/* model_views.c: tensors.json, config.json */
int tbm_tensors_json_prepare(struct tbm_views *v); /* its size, at mount */
int tbm_tensors_json_render(const struct tbm_views *v, size_t t, char **out, size_t *len);
int tbm_tensors_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
bool tbm_config_json_present(const struct tbm_views *v);
int tbm_config_json_prepare(struct tbm_views *v); /* rendered once, at mount */
void tbm_config_json_free(struct tbm_views *v);
int tbm_config_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_config_json_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                         size_t *got);

/* results.c: the cache of shared results */
int tbm_results_init(struct tbm_views *v);
void tbm_results_free(struct tbm_views *v);
/* A reference to row's result for tensor t: the cached one, or rendered
 * now (once, however many ask at the same time). */
int tbm_results_get(const struct tbm_views *v, const struct tbm_file_kind *row, size_t t,
                    struct tbm_result **out);
/* Whether row's result for tensor t is rendered and cached, so that
 * tbm_results_get would hand it over at once. */
bool tbm_results_ready(const struct tbm_views *v, const struct tbm_file_kind *row, size_t t);
/* A result holding a copy of len bytes of data, one reference. */
struct tbm_result *tbm_result_new(const char *data, size_t len);
const char *tbm_result_data(const struct tbm_result *result, size_t *len);
void tbm_result_put(struct tbm_result *result);

/* inspect.c: stats.json, mask.png, weights.png */
/* The matrix view of the contract: shape[0] rows when the shape has two or
 * more dimensions and describes num_weights, else one row. */
void tbm_matrix_dims(const struct tbm_tensor *t, uint64_t *rows, uint64_t *cols);
int tbm_stats_json_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_stats_json_render(const struct tbm_views *v, size_t t, char **out, size_t *len);
int tbm_png_view_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_mask_png_render(const struct tbm_views *v, size_t t, char **out, size_t *len);
int tbm_weights_png_render(const struct tbm_views *v, size_t t, char **out, size_t *len);

/* selftest.c: a tensor's selftest and the root report */
int tbm_selftests_init(struct tbm_views *v);
void tbm_selftests_free(struct tbm_views *v);
int tbm_selftest_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_selftest_render(const struct tbm_views *v, size_t t, char **out, size_t *len);
int tbm_selftest_report_size(const struct tbm_views *v, size_t t, uint64_t *size);
int tbm_selftest_report_render(const struct tbm_views *v, size_t t, char **out, size_t *len);

#endif
