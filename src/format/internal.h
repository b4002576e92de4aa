/* Cross-file helpers of the format layer (not installed). */
#ifndef TBM_FORMAT_INTERNAL_H
#define TBM_FORMAT_INTERNAL_H

#include <json-c/json.h>

#include "tbm/model.h"

/* Largest index or manifest we parse, and its nesting depth. */
#define TBM_INDEX_MAX  (256u << 20)
#define TBM_JSON_DEPTH 64
/* json-c spends about a kilobyte on each object or array it builds, so their
 * number is capped before parsing: 2 Mi containers, about 2 GiB at worst. A
 * 100,000-tensor index holds 200,000. */
#define TBM_JSON_CONTAINERS_MAX (2u << 20)

/* Appends a printf-formatted message to list. Returns 0 or TBM_ERR_NOMEM. */
int tbm_strlist_addf(struct tbm_strlist *list, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tbm_strlist_free(struct tbm_strlist *list);

/* Parses len bytes strictly (RFC 8259, valid UTF-8, bounded depth, nothing
 * but whitespace after the value). Returns the value or NULL with a reason in
 * why. */
struct json_object *tbm_json_parse_strict(const char *buf, size_t len, const char **why);

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

/* Fills t (name, shape, serialized entry) and e from index entry number i.
 * Entry-level defects go to t's problems or warnings. */
int tbm_entry_parse(struct json_object *entry, size_t i, struct tbm_tensor *t, struct tbm_entry *e);

/* Reads and validates the blob at t->offset of t->fd, whose data may not
 * extend past data_end, filling the header, regions and mask usability. */
int tbm_blob_validate(struct tbm_tensor *t, uint64_t data_end);

/* Compares the index entry with the blob header and records warnings. */
int tbm_entry_check_header(struct json_object *entry, struct tbm_tensor *t);

/* Scratch for statistics, allocated once per open: TBM_COUNT_CHUNK elements
 * of the widest precision and their mask words (at most one byte per element, for m = 1). */
#define TBM_COUNT_CHUNK (256u * 1024u)
struct tbm_count_buf {
    void *weights;
    uint8_t *mask;
};
int tbm_count_buf_init(struct tbm_count_buf *buf);
void tbm_count_buf_free(struct tbm_count_buf *buf);

/* Computes t's mask statistics by reading its payloads in chunks. */
int tbm_blob_count(struct tbm_tensor *t, enum tbm_isa isa, struct tbm_count_buf *buf);

/* Opens a manifest's "file" beneath dirfd, the directory at the real path
 * dirpath; -1 with a reason in why. */
int tbm_manifest_open_file(int dirfd, const char *dirpath, const char *file, size_t len,
                           const char **why);

#endif
