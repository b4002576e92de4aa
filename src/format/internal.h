/* Cross-file helpers of the format layer (not installed). */
#ifndef TBM_FORMAT_INTERNAL_H
#define TBM_FORMAT_INTERNAL_H

#include <json-c/json.h>
#include <stdatomic.h>

#include "table.h"

/* Little-endian fields of the format, whatever the host's order. */
static inline uint32_t tbm_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t tbm_le64(const unsigned char *p)
{
    return (uint64_t)tbm_le32(p) | (uint64_t)tbm_le32(p + 4) << 32;
}

/* Largest index or manifest we parse, and its nesting depth. */
#define TBM_INDEX_MAX  (256u << 20)
#define TBM_JSON_DEPTH 64
/* json-c spends about a kilobyte on each object or array it builds, so their
 * number is capped before parsing: 2 Mi containers, about 2 GiB at worst. A
 * 100,000-tensor index holds 200,000. */
#define TBM_JSON_CONTAINERS_MAX (2u << 20)
/* Every value, a number or a string too, costs json-c some 50 bytes: 16 Mi of
 * them (counted before parsing, as an upper bound) is under a gigabyte. */
#define TBM_JSON_VALUES_MAX (16u << 20)
/* Entries of a "tensors" array: each tensor's is an object, so no valid
 * index has more; the cap also bounds the table before any entry is parsed. */
#define TBM_INDEX_ENTRIES_MAX TBM_JSON_CONTAINERS_MAX

/* Appends a printf-formatted message to list. Returns 0 or TBM_ERR_NOMEM. */
int tbm_strlist_addf(struct tbm_strlist *list, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Drops the messages after the first count. */
void tbm_strlist_truncate(struct tbm_strlist *list, size_t count);
void tbm_strlist_free(struct tbm_strlist *list);

/* Parses len bytes strictly (RFC 8259, valid UTF-8, bounded depth, nothing
 * but whitespace after the value). Returns the value or NULL with a reason in
 * why. */
struct json_object *tbm_json_parse_strict(const char *buf, size_t len, const char **why);

/* tbm_json_parse_strict, and where it failed: *at is the byte offset in buf
 * (SIZE_MAX when no byte is to blame: a limit, a NaN). */
struct json_object *tbm_json_parse_located(const char *buf, size_t len, const char **why,
                                           size_t *at);

/* The 1-based line and column (in characters) of byte at of buf. */
void tbm_json_position(const char *buf, size_t at, size_t *line, size_t *column);

/* Whether len bytes are within the size and container limits of an index;
 * false with a reason in why. */
bool tbm_json_within_limits(const char *buf, size_t len, const char **why);

/* A stretch of JSON text; a document may be given as several. */
struct tbm_json_piece {
    const char *buf;
    size_t len;
};

/* Parses the concatenation of npieces pieces as tbm_json_parse_strict does,
 * with nesting depth at most depth, but without checking the limits (so each
 * piece is within TBM_INDEX_MAX). */
struct json_object *tbm_json_parse_pieces(const struct tbm_json_piece *pieces, size_t npieces,
                                          int depth, const char **why);

/* An index or manifest whose "tensors" array is split at its elements, so
 * that json-c can parse it a slice at a time: in parallel, and without ever
 * building the whole tree (a large index's tree takes about 2.5 KiB per
 * entry, and faulting that memory in was most of a 100,000-tensor mount). */
struct tbm_json_split {
    size_t open, close; /* offsets of the array's '[' and ']' */
    size_t count;       /* elements of the array */
    size_t *sep;        /* element i lies between sep[i] and sep[i + 1]: the '[',
                         * the ',' between elements, the ']' */
};

/* Finds the elements of the root object's "tensors" array with a scan that
 * follows only strings and nesting; json-c still parses every byte. Returns
 * 1 when split, 0 when the text is not plainly such an object (one
 * "tensors" key, no escapes in root keys, within the limits, balanced):
 * then it is to be parsed whole, which also gives the reason it is invalid.
 * TBM_ERR_SOURCE when the array has more than TBM_INDEX_ENTRIES_MAX entries,
 * TBM_ERR_NOMEM when out of memory. */
int tbm_json_split(const char *buf, size_t len, struct tbm_json_split *out);
void tbm_json_split_free(struct tbm_json_split *split);

/* The root object with its "tensors" array left empty, or NULL when that
 * text is not valid JSON. */
struct json_object *tbm_json_split_root(const char *buf, size_t len,
                                        const struct tbm_json_split *split);

/* Elements [first, end), first < end, as a json-c array, or NULL unless their
 * text parses as exactly end - first values (so a mis-split can never pass as
 * valid). */
struct json_object *tbm_json_split_elements(const char *buf, const struct tbm_json_split *split,
                                            size_t first, size_t end);

/* Reads an unsigned integer member; 1 if present and valid, 0 if absent, -1
 * if present with another type, negative, fractional or too large. */
int tbm_json_get_u64(struct json_object *obj, const char *key, uint64_t *out);

/* The fields of one index entry that the validation uses. */
struct tbm_entry {
    bool has_offset;
    bool bad_offset; /* present but not a valid integer: already a problem */
    uint64_t offset;
    const char *file; /* manifest mode */
    size_t file_len;
};

/* Fills t (name, shape, entry text) and e from index entry number i, whose
 * text in the index (held for the model's life) is text_len bytes at text,
 * or NULL to serialize it. Entry-level defects go to t's problems or
 * warnings. */
int tbm_entry_parse(struct json_object *entry, size_t i, struct tbm_tensor *t, struct tbm_entry *e,
                    const char *text, size_t text_len);

/* Reads of the source while it is validated, through a window: the small
 * tensors of a large index lie side by side, and one pread per window rather
 * than per header or region saved a third of a 100,000-tensor mount. */
#define TBM_READER_WINDOW (256u << 10)
#define TBM_READER_FIRST  4096u
struct tbm_reader {
    struct tbm_source *src; /* whose bytes buf holds; NULL for none */
    uint64_t start;
    size_t len;
    size_t size;        /* bytes the last refill asked for */
    bool hit;           /* the window served a read besides the one that filled it */
    unsigned char *buf; /* TBM_READER_WINDOW bytes, allocated at first use */
};
#define TBM_READER_INIT                                                                            \
    {                                                                                              \
        .src = NULL                                                                                \
    }

/* Reads exactly len bytes at off of src, from the window when it holds them;
 * reads over half a window bypass it. TBM_ERR_IO when those bytes cannot be
 * read, TBM_ERR_NOMEM. */
int tbm_reader_read(struct tbm_reader *r, struct tbm_source *src, void *dst, size_t len,
                    uint64_t off);
void tbm_reader_free(struct tbm_reader *r);

/* Reads the header's fields at t->offset of t->src into t->hdr: 1, or 0
 * when they cannot be read, TBM_ERR_NOMEM. */
int tbm_blob_read_header(struct tbm_tensor *t, struct tbm_reader *rd);

/* Reads and validates the blob at t->offset of t->src, whose data may not
 * extend past data_end, filling the header, regions and mask usability. */
int tbm_blob_validate(struct tbm_tensor *t, uint64_t data_end, struct tbm_reader *rd);

/* Compares the index entry with the blob header and records warnings. */
int tbm_entry_check_header(struct json_object *entry, struct tbm_tensor *t);

/* Validates t's blob at t->offset (whose data may not extend past
 * data_end) against its index entry: tbm_blob_validate, the index-versus-
 * header warnings and the shape. */
int tbm_tensor_validate(struct tbm_tensor *t, struct json_object *entry, uint64_t data_end,
                        struct tbm_reader *rd);

/* Opens a manifest's "file" beneath dirfd, the directory at the real path
 * dirpath; -1 with a reason in why. */
int tbm_manifest_open_file(int dirfd, const char *dirpath, const char *file, size_t len,
                           const char **why);

/* Opens a manifest file of model ctx again, confined as at first (for a
 * detached source); -1 when it cannot. */
int tbm_manifest_reopen(void *ctx, const char *file);

/* What an open carries from one job to the next. */
struct tbm_opener {
    const char *given; /* SOURCE as the user wrote it */
    struct tbm_model *m;
    const struct tbm_open_options *opts;
    const char *what;            /* "index" or "manifest.json", for messages */
    struct json_object *root;    /* parsed index or manifest */
    struct json_object *entries; /* its "tensors" array */
    struct tbm_json_split split; /* that array's elements, when parsed in slices */
    uint64_t data_end;           /* container: where the index starts */
    /* manifest files kept open, and how many may be: past that, a file is
     * opened again whenever it is read */
    atomic_size_t kept_fds;
    size_t fd_budget;
    char *err;
    size_t errlen;
};

/* Writes "path: message" into the opener's err and returns status. */
int tbm_open_fail(struct tbm_opener *o, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The jobs of an open, in the order tbm_model_open runs them. */
int tbm_container_open(struct tbm_opener *o);      /* index length, then tbm_index_read */
void tbm_container_diagnose(struct tbm_opener *o); /* why its index is unusable: cut, or a .tb */
int tbm_manifest_open(struct tbm_opener *o);       /* manifest.json, then tbm_index_read */
int tbm_bare_open(struct tbm_opener *o);           /* one blob, its index synthesized */
int tbm_index_read(struct tbm_opener *o, struct tbm_source *src, uint64_t off, uint64_t len,
                   const char *what);              /* JSON read and split or parsed */
int tbm_index_parse(struct tbm_opener *o);         /* the whole text parsed, or why not */
int tbm_index_too_many(struct tbm_opener *o);      /* the refusal of too many entries */
int tbm_index_load(struct tbm_opener *o);          /* every entry into a tensor record */
int tbm_dirs_assign(struct tbm_model *m);          /* directory names, unique */
int tbm_dirs_warn_duplicates(struct tbm_model *m); /* each names the others */
void tbm_dirs_free(struct tbm_model *m);
int tbm_misplaced_find(struct tbm_opener *o);  /* blobs the merge script misplaced */
int tbm_overlaps_check(struct tbm_model *m);   /* blobs that reach into others are broken */
int tbm_stats_table_init(struct tbm_model *m); /* room for statistics computed later */
void tbm_stats_table_free(struct tbm_model *m);
void tbm_tensors_free(struct tbm_model *m);

#endif
