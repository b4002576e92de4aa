/* Cross-file pieces of the views (not installed): the row type of the
 * table, the views of a model, and each kind of file's functions. */
#ifndef TBM_VIEWS_INTERNAL_H
#define TBM_VIEWS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "format/table.h"
#include "tbm/view.h"

struct json_object;
struct tbm_selftests;  /* the self-tests' lock and stop flag (selftest.c) */
struct tbm_results;    /* results rendered once and shared (results.c) */
struct tbm_result;     /* one of them: immutable, reference-counted */
struct tbm_row_slot;   /* what the table keeps per row (view.c) */
struct tbm_gguf_vocab; /* the GGUF files' vocabulary (gguf.h) */
struct tbm_open_files; /* the files open and not released (view.c) */

struct tbm_views {
    const struct tbm_model *model;
    struct tbm_views_options opts;   /* as given, their defaults filled in */
    struct tbm_selftests *selftests; /* every self-test's, both selftest rows' */
    struct tbm_results *results;
    struct tbm_row_slot *slots;   /* one per row of the table */
    struct tbm_gguf_vocab *vocab; /* NULL: no tokenizer */
    struct tbm_open_files *open;
    char *tokenizer_note; /* opts.tokenizer_note's copy */
    /* stats_nowait: per tensor, and for every tensor, whether someone is
     * having the statistics computed (pending.c) */
    atomic_bool *asked;
    atomic_bool asked_all;
    atomic_uint_fast64_t stats_done; /* steps that computed a tensor's */
};

/* Bytes of a file that lie as stored in a source: len bytes at pos of src
 * (len 0 past the end of the file). */
struct tbm_span {
    struct tbm_source *src;
    uint64_t pos;
    size_t len;
};

/* How a row's bytes come. */
enum tbm_row_bytes {
    TBM_BYTES_SOURCE,   /* a region of the tensor's source (or computed, where
                         * region gives NULL for the tensor) */
    TBM_BYTES_COMPUTED, /* any range computed on request by read */
    TBM_BYTES_RENDERED, /* the whole content rendered once per mount, when first
                         * opened, and every open reading that result */
    TBM_BYTES_BUFFER,   /* bytes fixed at tbm_views_open: the row's state is a
                         * struct tbm_buffer */
};

/* A row of the table: a file of the tree, for the root or for each tensor.
 * Its functions take the row, whose arg tells variants of one kind apart
 * (which region of the blob, which GGUF file) and whose state, made by
 * prepare, tbm_row_state gives. t is the tensor (0 for a root row). */
struct tbm_row {
    const char *name;
    enum tbm_row_place place;
    enum tbm_row_bytes bytes;
    const void *arg;
    /* Optional: what the row keeps for the mount (a file's layout, a
     * rendering, a lock), made when the views are opened into *state (NULL
     * for nothing) and given to free when they close. */
    int (*prepare)(const struct tbm_views *v, const struct tbm_row *row, void **state);
    void (*free)(void *state);
    /* ROOT, optional: whether the model has this file (NULL: always). */
    bool (*present)(const struct tbm_views *v, const struct tbm_row *row);
    /* NULL: a source row is servable when its region is sound, any other
     * row always. */
    bool (*servable)(const struct tbm_views *v, size_t t);
    /* SOURCE: the region holding the file's bytes from *skip on (what comes
     * before, such as an .npy header, is computed), or NULL for a tensor
     * whose file is computed by size and read. */
    const struct tbm_region *(*region)(const struct tbm_views *v, const struct tbm_row *row,
                                       size_t t, uint64_t *skip);
    /* The size (a SOURCE row without it: its region's length past skip). */
    int (*size)(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size);
    /* Bytes [off, off + len) into buf, short only at the end, each read of
     * a source made as part of req, which the table ends (NULL: a SOURCE
     * row's region is read). */
    int (*read)(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                uint64_t off, size_t len, struct tbm_request *req, size_t *got);
    int (*render)(const struct tbm_views *v, const struct tbm_row *row, size_t t, char **out,
                  size_t *len);
    /* COMPUTED, optional: where bytes at off lie as stored, for files
     * pieced together from many regions: 1 with out, 0 for computed bytes. */
    int (*span)(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t off,
                size_t len, struct tbm_span *out);
    /* ROOT, optional: what model.json says of the file: why the model lacks
     * it (a line for missing, which holds each line once) or what it leaves
     * out (notes); *expected set when the model is of a kind that has it,
     * so that views_missing is shown even when empty. */
    int (*notes)(const struct tbm_views *v, const struct tbm_row *row, struct json_object *missing,
                 struct json_object *notes, bool *expected);
    /* RENDERED: the size is a bound known before the figures are (size,
     * remembered per tensor: it may cost a render), and each rendering is
     * padded to it (tbm_pad_lines). */
    bool padded;
    /* RENDERED: whose statistics it shows; its render returns 1 when some
     * were not known yet (stats_nowait), a rendering kept only until some
     * of them are */
    enum tbm_row_stats stats;
    bool slow;      /* rendering can take seconds */
    bool evictable; /* rendering again gives the same bytes: the result may be
                     * dropped when the cache is full */
};

/* The state prepare made for row (NULL when it has none). */
void *tbm_row_state(const struct tbm_views *v, const struct tbm_row *row);

/* The content of a rendered row for tensor t, padded when the row says so:
 * what results.c keeps (1: showing statistics not known yet). */
int tbm_row_render(const struct tbm_views *v, const struct tbm_row *row, size_t t, char **out,
                   size_t *len);

/* What model.json says of the root rows (their notes). */
int tbm_views_notes(const struct tbm_views *v, struct json_object *missing,
                    struct json_object *notes, bool *expected);
/* Adds line to the string array arr unless it holds it already. */
int tbm_json_add_once(struct json_object *arr, const char *line);

/* A BUFFER row's state: len bytes at data, owned (freed with it) or not. */
struct tbm_buffer {
    const char *data;
    size_t len;
    char *owned;
};
/* Makes one; owned is taken (freed on failure too). */
int tbm_buffer_new(const char *data, size_t len, char *owned, void **state);
void tbm_buffer_free(void *state);

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

/* pending.c: statistics not waited for (stats_nowait) */
int tbm_views_pending_init(struct tbm_views *v);
void tbm_views_pending_free(struct tbm_views *v);
/* Tensor t's statistics for a file that shows them: 0 with *out, computed
 * now if they are not yet; with stats_nowait, 1 with *out statistics
 * unknown whose one warning says why when they are not computed yet; or
 * the failure. */
int tbm_views_tensor_stats(const struct tbm_views *v, size_t t,
                           const struct tbm_tensor_stats **out);
/* What a rendering of row for tensor t that showed statistics not known
 * yet depends on: a value that changes when some of them become known
 * (its tensor's, for header.json; any tensor's, for the root files). */
uint64_t tbm_views_stats_gen(const struct tbm_views *v, const struct tbm_row *row, size_t t);

/* Root documents that sum up every tensor's statistics (model.json,
 * tensors.json): doc renders one, with the statistics or (for the size)
 * without; 1 when some were not known yet. */
typedef int (*tbm_doc_fn)(const struct tbm_views *v, bool with_stats, char **out, size_t *len);
/* The rendering without the statistics plus slack, a bound on what they
 * can add. */
int tbm_lazy_doc_size(const struct tbm_views *v, tbm_doc_fn doc, uint64_t slack, uint64_t *size);
/* Renders one with the statistics, every tensor's computed first (in
 * parallel) unless stats_nowait. */
int tbm_lazy_doc_render(const struct tbm_views *v, tbm_doc_fn doc, char **out, size_t *len);

/* Serializes obj pretty-printed with a final newline into a malloc'd buffer. */
int tbm_json_dump(struct json_object *obj, char **out, size_t *len);

/* shape.c: a tensor's shape as the views show it */
/* The index's shape as a JSON array, or NULL (JSON null) when it has none. */
struct json_object *tbm_shape_json(const struct tbm_tensor *t);
/* The dimensions of t shown: the index's shape, or [num_weights] when the
 * index has none or, with layout (a file that lays the elements out in
 * that shape), when it does not describe num_weights. Returns how many. */
size_t tbm_shape_dims(const struct tbm_tensor *t, bool layout, const uint64_t **dims);
/* Writes the n dims in decimal, sep between them, into out (cap bytes,
 * NUL-terminated when cap > 0, cut when short); returns the text's whole
 * length, as snprintf does, so that out may be NULL with cap 0. */
size_t tbm_shape_text(const uint64_t *dims, size_t n, const char *sep, char *out, size_t cap);

/* region.c: raw.tb, weights.bin, mask.bin; the row's arg is the part */
enum tbm_blob_part {
    TBM_PART_RAW,
    TBM_PART_WEIGHTS,
    TBM_PART_MASK,
};
const struct tbm_region *tbm_part_region(const struct tbm_views *v, const struct tbm_row *row,
                                         size_t t, uint64_t *skip);

/* json_views.c: index.json, model.json, header.json */
int tbm_index_json_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state);
int tbm_model_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                        uint64_t *size);
int tbm_model_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          char **out, size_t *len);
int tbm_header_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t *size);
int tbm_header_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                           char **out, size_t *len);

/* dense.c: dense.f32, dense.npy; the row's arg says whether an NPY header
 * comes first */
/* The float32 expansion, masked, of count elements of t from first on into
 * out, read as part of req, through the caller's scratch: weights (8 bytes
 * an element) and mask (a byte an element, plus 8). float32 weights are read
 * straight into out and masked in place, one copy fewer. */
int tbm_expand_chunk(const struct tbm_views *v, const struct tbm_tensor *t, void *weights,
                     uint8_t *mask, uint64_t first, size_t count, float *out,
                     struct tbm_request *req);
bool tbm_dense_servable(const struct tbm_views *v, size_t t);
const struct tbm_region *tbm_dense_region(const struct tbm_views *v, const struct tbm_row *row,
                                          size_t t, uint64_t *skip);
int tbm_dense_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size);
int tbm_dense_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                   uint64_t off, size_t len, struct tbm_request *req, size_t *got);

/* safetensors.c: model.safetensors; its layout is built when first needed */
int tbm_safetensors_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state);
void tbm_safetensors_free(void *state);
int tbm_safetensors_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t *size);
/* Whether model.safetensors exists: not when its header would be over the
 * 100,000,000 bytes safetensors loaders accept (its size is then a
 * failure). */
bool tbm_safetensors_present(const struct tbm_views *v, const struct tbm_row *row);
/* Why model.safetensors is missing, and which tensors it leaves out that
 * its own "omitted" alone does not explain. */
int tbm_safetensors_notes(const struct tbm_views *v, const struct tbm_row *row,
                          struct json_object *missing, struct json_object *notes, bool *expected);
int tbm_safetensors_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                         uint64_t off, size_t len, struct tbm_request *req, size_t *got);
int tbm_safetensors_span(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                         uint64_t off, size_t len, struct tbm_span *out);

/* gguf_layout.c, gguf.c: the GGUF files; the row's arg is the file's
 * struct tbm_gguf_variant (gguf.h), its state the file's layout, fixed at
 * mount */
struct tbm_gguf_variant;
extern const struct tbm_gguf_variant tbm_gguf_stored, tbm_gguf_q8_0, tbm_gguf_q4_k_m;
int tbm_gguf_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state);
void tbm_gguf_free(void *state);
bool tbm_gguf_present(const struct tbm_views *v, const struct tbm_row *row);
/* Why a llama or mistral model has no GGUF files. */
int tbm_gguf_notes(const struct tbm_views *v, const struct tbm_row *row,
                   struct json_object *missing, struct json_object *notes, bool *expected);
int tbm_gguf_size(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *size);
int tbm_gguf_read(const struct tbm_views *v, const struct tbm_row *row, size_t t, char *buf,
                  uint64_t off, size_t len, struct tbm_request *req, size_t *got);
int tbm_gguf_span(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t off,
                  size_t len, struct tbm_span *out);

/* model_views.c: tensors.json, config.json */
int tbm_tensors_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          uint64_t *size);
int tbm_tensors_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                            char **out, size_t *len);
/* tokenizer.c: the tokenizer's files at the root, byte for byte; the row's
 * arg is its enum tbm_tokenizer_file. */
bool tbm_tokenizer_present(const struct tbm_views *v, const struct tbm_row *row);
int tbm_tokenizer_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state);
int tbm_tokenizer_notes(const struct tbm_views *v, const struct tbm_row *row,
                        struct json_object *missing, struct json_object *notes, bool *expected);

bool tbm_config_json_present(const struct tbm_views *v, const struct tbm_row *row);
int tbm_config_json_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state);

/* results.c: the cache of shared results */
int tbm_results_init(struct tbm_views *v);
void tbm_results_free(struct tbm_views *v);
/* A reference to row's result for tensor t: the cached one, or rendered
 * now (once, however many ask at the same time). */
int tbm_results_get(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                    struct tbm_result **out);
/* Whether row's result for tensor t is rendered and cached, so that
 * tbm_results_get would hand it over at once. */
bool tbm_results_ready(const struct tbm_views *v, const struct tbm_row *row, size_t t);
/* A result holding a copy of len bytes of data, one reference. */
struct tbm_result *tbm_result_new(const char *data, size_t len);
const char *tbm_result_data(const struct tbm_result *result, size_t *len);
/* One more reference to result; result. */
struct tbm_result *tbm_result_take(struct tbm_result *result);
void tbm_result_put(struct tbm_result *result);

/* inspect.c: stats.json, mask.png, weights.png; a picture row's arg is
 * what it shows */
/* The matrix view of the contract: shape[0] rows when the shape has two or
 * more dimensions and describes num_weights, else one row. */
void tbm_matrix_dims(const struct tbm_tensor *t, uint64_t *rows, uint64_t *cols);
int tbm_stats_json_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                        uint64_t *size);
int tbm_stats_json_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                          char **out, size_t *len);
enum tbm_picture {
    TBM_PICTURE_MASK,    /* the mask's kept share per block */
    TBM_PICTURE_WEIGHTS, /* the mean |dense| per block, on a log scale */
};
int tbm_picture_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                     uint64_t *size);
int tbm_picture_render(const struct tbm_views *v, const struct tbm_row *row, size_t t, char **out,
                       size_t *len);

/* selftest.c: a tensor's selftest and the root report */
int tbm_selftests_init(struct tbm_views *v);
void tbm_selftests_free(struct tbm_views *v);
int tbm_selftest_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                      uint64_t *size);
int tbm_selftest_render(const struct tbm_views *v, const struct tbm_row *row, size_t t, char **out,
                        size_t *len);
int tbm_selftest_report_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                             uint64_t *size);
int tbm_selftest_report_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                               char **out, size_t *len);

#endif
