/* The validated tensor table: a model source (.tbm container, manifest
 * directory or bare .tb) opened once and checked into immutable records. */
#ifndef TBM_MODEL_H
#define TBM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tbm/kernels.h"

struct json_object;

/* Status codes of the library: 0 or one of these negative values. */
enum tbm_status {
    TBM_OK = 0,
    TBM_ERR_NOMEM = -1,   /* allocation failed */
    TBM_ERR_IO = -2,      /* the source could not be read (it may have shrunk) */
    TBM_ERR_SOURCE = -3,  /* the source is not usable at all */
    TBM_ERR_BROKEN = -4,  /* this view of a broken tensor cannot be served */
    TBM_ERR_PROBLEM = -5, /* strict open refused a model with problems */
    TBM_ERR_STOPPED = -6  /* a self-test given up: the daemon is stopping */
};

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

/* A byte range of a tensor's file descriptor that was checked at open. */
struct tbm_region {
    uint64_t off;
    uint64_t len;
    bool ok; /* inside the file and clear of other regions: safe to serve */
};

/* A growable list of messages (problems or warnings). */
struct tbm_strlist {
    char **items;
    size_t count;
};

struct tbm_tensor {
    char *name; /* true name from the index; may hold NUL bytes */
    size_t name_len;
    char *dir; /* directory name under tensors/, unique in the model */
    int fd;    /* the model's, or in manifest mode the tensor's own (owns_fd) */
    uint64_t offset;
    bool header_read; /* hdr holds the 4096-byte header read from the file */
    struct tbm_blob_header hdr;
    bool header_sound;         /* magic, version, precision and sizes are valid */
    struct tbm_region raw;     /* whole blob: header to end of last region */
    struct tbm_region weights; /* stored weight payload */
    struct tbm_region mask;    /* stored mask payload */
    bool mask_usable;          /* the mask is applied by dense views */
    uint64_t *shape;           /* from the index; NULL when absent */
    size_t ndim;
    bool shape_matches; /* product of shape == num_weights */
    bool stats_known;   /* stats below are meaningful */
    struct tbm_mask_stats stats;
    struct tbm_strlist problems;
    struct tbm_strlist warnings;
    char *entry_json; /* the tensor's index entry, serialized */
    bool owns_fd;     /* manifest mode: the tensor's own file */
};

struct tbm_model {
    char *path; /* absolute path of the source */
    enum tbm_source_kind kind;
    struct timespec mtime;
    int fd;    /* container or bare blob; -1 in manifest mode */
    int dirfd; /* manifest directory; -1 otherwise */
    enum tbm_isa isa;
    char *index_json; /* exact stored bytes (or synthesized for a bare .tb) */
    size_t index_json_len;
    char *architecture;         /* NULL when absent or not a string */
    struct json_object *config; /* NULL when absent */
    struct tbm_tensor *tensors;
    size_t ntensors;
    size_t nproblem_tensors;
    size_t *dir_table; /* open-addressed hash of dir names -> tensor index + 1 */
    size_t dir_table_size;
};

struct tbm_open_options {
    enum tbm_isa isa; /* kernels used for statistics and reported in model.json */
    bool strict;      /* refuse a model in which any tensor has a problem */
};

/* Opens and validates path into *out. On failure returns a negative status
 * and writes one line naming the file and the reason into err. Problems of
 * single tensors do not fail the open (unless strict): they are recorded in
 * each tensor's problems list. */
int tbm_model_open(const char *path, const struct tbm_open_options *opts, struct tbm_model **out,
                   char *err, size_t errlen);

void tbm_model_close(struct tbm_model *model);

/* Index of the tensor whose directory name is dir (len bytes), or -1. */
long tbm_model_find_dir(const struct tbm_model *model, const char *dir, size_t len);

/* Reads exactly len bytes at off of fd; TBM_ERR_IO on a short read or error. */
int tbm_pread_full(int fd, void *buf, size_t len, uint64_t off);

#endif
