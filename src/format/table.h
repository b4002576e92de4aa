/* The records of the tensor table, shared by the format layer that fills
 * them and the views that read them (not installed). Filled once by
 * tbm_model_open, never changed after. */
#ifndef TBM_FORMAT_TABLE_H
#define TBM_FORMAT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tbm/kernels.h"
#include "tbm/model.h"
#include "tbm/source.h"

struct json_object;

enum tbm_source_kind {
    TBM_SOURCE_CONTAINER, /* .tbm: blobs, JSON index, 4-byte index length */
    TBM_SOURCE_MANIFEST,  /* directory with manifest.json */
    TBM_SOURCE_BLOB,      /* one bare .tb file */
};

#define TBM_HEADER_SIZE 4096u
#define TBM_MAGIC       0x31304254u
#define TBM_VERSION     1u

/* The fields of a blob header as stored, before any validation. */
struct tbm_blob_header {
    uint32_t magic;
    uint32_t version;
    uint32_t nm_n;
    uint32_t nm_m;
    uint64_t num_weights;
    uint64_t num_mask_bytes;
    uint64_t weights_offset;
    uint64_t masks_offset;
    uint8_t precision;
};

/* A byte range of a tensor's source that was checked at open. */
struct tbm_region {
    uint64_t off;
    uint64_t len;
    bool ok; /* inside the source and clear of other regions: safe to serve */
};

/* How a usable mask is stored: the contract's words of tbm_mask_word_bytes(M)
 * bytes per group, or the Tensorbit tools' one byte per group for M > 8
 * (positions 8..M-1 of every group then pruned). */
enum tbm_mask_layout {
    TBM_MASK_WORDS,
    TBM_MASK_BYTES,
};

/* A growable list of messages (problems or warnings). */
struct tbm_strlist {
    char **items;
    size_t count;
};

struct tbm_tensor {
    char *name; /* true name from the index; may hold NUL bytes */
    size_t name_len;
    char *dir;              /* directory name under tensors/, unique in the model */
    struct tbm_source *src; /* the model's, or in manifest mode the tensor's own (owns_src) */
    uint64_t offset;        /* of the blob in src */
    bool header_read;       /* hdr holds the header's fields as stored (header.json shows
                             * them, or nulls when the header could not be read) */
    struct tbm_blob_header hdr;
    bool header_valid;         /* magic and version are the format's: the fields mean something */
    bool header_sound;         /* valid, and precision and sizes too */
    struct tbm_region raw;     /* whole blob: header to end of last region */
    struct tbm_region weights; /* stored weight payload */
    struct tbm_region mask;    /* stored mask payload */
    bool mask_usable;          /* the mask is applied by the files that apply one */
    enum tbm_mask_layout mask_layout;
    uint64_t mask_groups; /* groups the stored mask holds: all, or one fewer (the tools' floor),
                           * the missing last group pruned */
    uint64_t *shape;      /* from the index; NULL when absent */
    size_t ndim;
    bool shape_matches; /* product of shape == num_weights */
    /* the index's nm_n and nm_m, when both are integers below 2^32: the N:M
     * shown of a tensor without a valid header */
    bool index_nm_known;
    uint32_t index_nm_n, index_nm_m;
    struct tbm_strlist problems;
    struct tbm_strlist warnings;
    /* the tensor's index entry: its text in the index as stored (sliced
     * parse), or serialized (entry_json_owned) */
    const char *entry_json;
    size_t entry_json_len;
    bool entry_json_owned;
    /* problems and warnings before the blob was validated: a second look
     * for a misplaced blob starts again from there */
    size_t entry_problems, entry_warnings;
    bool owns_src; /* manifest mode: the tensor's own file */
};

struct tbm_model {
    char *path; /* absolute path of the source */
    enum tbm_source_kind kind;
    struct timespec mtime;
    unsigned owner_uid, owner_gid, owner_mode; /* of the source (the manifest directory) */
    struct tbm_source *src;                    /* container or bare blob; NULL in manifest mode */
    int dirfd;                                 /* manifest directory; -1 otherwise */
    enum tbm_isa isa;
    char *index_json; /* exact stored bytes (or synthesized for a bare .tb) */
    size_t index_json_len;
    char *architecture;         /* NULL when absent or not a string */
    struct json_object *config; /* NULL when absent */
    struct tbm_tensor *tensors;
    size_t ntensors;
    size_t nproblem_tensors;
    struct tbm_dir_table *dirs;    /* directory name -> tensor */
    struct tbm_stats_table *stats; /* mask statistics, computed when first needed */
};

/* A tensor's mask statistics and the warnings they raise. The mount reads
 * only the index and the headers; these need every mask and weight, so
 * they are computed the first time something asks, once, and kept. */
struct tbm_tensor_stats {
    bool known; /* false: no usable mask and weights, or the source failed */
    struct tbm_mask_stats counts;
    struct tbm_strlist warnings; /* what the counts say, or why they are unknown */
};

/* t's statistics, computed on the first call (from any thread: a second
 * caller waits for the first). A source that could not be read (it changed
 * or shrank) leaves them unknown for good; a failure that may pass (out of
 * memory, a failed transfer, a refusal) is returned and the next call
 * computes them again. 0 with *out, or the failure. */
int tbm_tensor_stats_get(const struct tbm_model *model, size_t t,
                         const struct tbm_tensor_stats **out);

/* The same, NULL on a failure. */
const struct tbm_tensor_stats *tbm_tensor_stats(const struct tbm_model *model, size_t t);

/* The density of tensor t whose statistics st are known: its kept elements
 * over its num_weights (0 for a tensor of none). */
double tbm_tensor_density(const struct tbm_tensor *t, const struct tbm_tensor_stats *st);

/* Whether computing t's statistics reads its masks and weights (a sound
 * tensor with a usable mask); the others' are known from the mount on. */
bool tbm_tensor_stats_reads(const struct tbm_tensor *t);

/* Whether t's statistics are computed, so that tbm_tensor_stats returns at
 * once. */
bool tbm_tensor_stats_ready(const struct tbm_model *model, size_t t);

/* Where the stored bytes of mask groups [g0, g0 + n) of t lie: *len bytes
 * at *off of t->src, fewer than n words when the layout stores fewer. */
void tbm_mask_stored(const struct tbm_tensor *t, uint64_t g0, uint64_t n, uint64_t *off,
                     size_t *len);

/* Turns the len stored bytes at buf (as tbm_mask_stored placed them, read
 * from the source) into the n mask words of groups [g0, g0 + n) in the
 * contract's layout, in place: buf holds n * tbm_mask_word_bytes(M) bytes.
 * The kernels read masks only in that layout. */
void tbm_mask_widen(const struct tbm_tensor *t, uint64_t n, uint8_t *buf, size_t len);

/* Reads the n mask words of groups [g0, g0 + n) of t into buf, as part of
 * req (NULL: of no request; tbm_source_read_full's). */
int tbm_mask_read(const struct tbm_tensor *t, uint64_t g0, uint64_t n, uint8_t *buf,
                  struct tbm_request *req);

/* Reads a chunk of t as part of req (NULL: of no request): the stored
 * weights of elements [first, first + n) into weights and, when mask is not
 * NULL, the mask words of every group they touch, from group first / M on,
 * into mask. The one way weights are read with their mask words beside them
 * (the expansions, the statistics, the self-tests); tbm_masked_read gives
 * stored bytes with the mask applied. */
int tbm_chunk_read(const struct tbm_tensor *t, uint64_t first, uint64_t n, void *weights,
                   uint8_t *mask, struct tbm_request *req);

/* Stored weight bytes are masked in windows of at most this many bytes,
 * each window's mask words read at once (a whole request's), into scratch
 * of TBM_MASKED_MASK_BYTES: a window holds at most TBM_MASKED_WINDOW / 2
 * elements (and two cut at its ends), and m = 1 needs a byte per element. */
#define TBM_MASKED_WINDOW     (512u << 10)
#define TBM_MASKED_MASK_BYTES (TBM_MASKED_WINDOW / 2 + 8)

/* How a masked read reports what masking did: in steps that end where the
 * caller's position of the byte (pos for the first) is a multiple of grain,
 * note hears each step's first position and whether masking changed a byte
 * of it. */
struct tbm_masked_steps {
    uint64_t pos, grain;
    void (*note)(void *ctx, uint64_t at, bool changed);
    void *ctx;
};

/* Reads weight bytes [b0, b0 + len) of t as stored into buf, as part of req
 * (NULL: of no request), with the mask applied when it is usable: the bytes
 * of pruned elements zeroed (of an element cut by either end, those buf
 * holds), through mask (scratch of TBM_MASKED_MASK_BYTES). steps, when not
 * NULL, hears what masking changed (not called when nothing is masked). The
 * one way the views read stored bytes with their mask applied, as
 * tbm_chunk_read is for weights and mask words apart. */
int tbm_masked_read(enum tbm_isa isa, const struct tbm_tensor *t, uint64_t b0, size_t len,
                    char *buf, uint8_t *mask, const struct tbm_masked_steps *steps,
                    struct tbm_request *req);

/* t's N:M as "N:M" ("0:0" for dense): the header's when it is valid, else
 * the index entry's, else "0:0" (an entry that gives none is read as
 * dense, as the format reads a header's zero M). */
void tbm_tensor_nm(const struct tbm_tensor *t, char *buf, size_t len);

/* Index of the tensor whose directory name is dir (len bytes), or -1. */
long tbm_model_find_dir(const struct tbm_model *model, const char *dir, size_t len);

#endif
