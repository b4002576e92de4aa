/* Views: the virtual files of a mounted model, as one table. Each row of
 * the table is a file of the tree (its name, where it lives, how its bytes
 * come and how its size is known), for the root or for every tensor, with a
 * size known up front and a read of any byte range that computes only that
 * range. The FUSE layer builds the tree from this API alone and reads every
 * file through one call (tbm_file_read). */
#ifndef TBM_VIEW_H
#define TBM_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tbm/model.h"

/* A model's views: the model and what is kept for it while it is mounted. */
struct tbm_views;

/* One row of the table: a file of the tree (dense.f32, model.json, ...). */
struct tbm_row;

/* Where a row's file lives: the mount's root, or each tensors/<dir>/. */
enum tbm_row_place {
    TBM_ROW_ROOT,
    TBM_ROW_TENSOR,
};

/* How the views behave; zeroed fields take their defaults. */
struct tbm_tokenizer_files;

struct tbm_views_options {
    uint32_t selftest_batch; /* columns of the self-test's X, 1..TBM_BATCH_MAX; 0: 8 */
    /* The tokenizer beside the model (tbm/vocab.h), read at mount: its files
     * at the root, its vocabulary in the GGUF files. NULL: none. It must
     * outlive the views. */
    const struct tbm_tokenizer_files *tokenizer;
    /* Why a tokenizer directory found beside the source is not used, a line
     * for model.json's views_missing (NULL: nothing to say); copied. */
    const char *tokenizer_note;
    /* Files that show statistics (model.json, tensors.json, header.json,
     * user.tbm.density) never wait for them to be computed, for a source
     * whose reads wait for transfers: they show those known, the others
     * null with a warning that says why, and the caller has them computed
     * apart (tbm_views_stats_ask). false: they are computed when asked. */
    bool stats_nowait;
};

#define TBM_BATCH_DEFAULT 8
#define TBM_BATCH_MAX     1024

/* Prepares the views of an opened model (which must outlive them); opts may
 * be NULL for the defaults. Closing them closes every file of theirs still
 * open (tbm_file_open), which no thread may be reading then. */
int tbm_views_open(const struct tbm_model *model, const struct tbm_views_options *opts,
                   struct tbm_views **out);
void tbm_views_close(struct tbm_views *views);

/* Makes self-tests of these views give up with TBM_ERR_STOPPED from now on,
 * the root report between two tensors: for a daemon that is exiting and
 * should not wait for a report over a large model. */
void tbm_views_stop(struct tbm_views *views);

/* The tree's tensor directories, in index order, and their timestamps. */
size_t tbm_views_tensor_count(const struct tbm_views *views);
const char *tbm_views_tensor_dir(const struct tbm_views *views, size_t t);
/* The tensor whose directory name is dir (len bytes), or -1. */
long tbm_views_find_tensor(const struct tbm_views *views, const char *dir, size_t len);
struct timespec tbm_views_mtime(const struct tbm_views *views);

/* Writes into buf the path or URL of tensor t's source: the model's, or a
 * manifest's file under its directory. */
void tbm_views_source_name(const struct tbm_views *views, size_t t, char *buf, size_t len);

/* Whether tensor t's source is known changed in place since the mount. */
bool tbm_views_tensor_changed(const struct tbm_views *views, size_t t);

/* True once, the first time it is asked after tensor t's source changed in
 * place: then buf says how ("size 100 -> 80"), for the one log line. */
bool tbm_views_change_report(const struct tbm_views *views, size_t t, char *buf, size_t len);

/* A watch over the model's local files (inotify), so that a change to one
 * is known as it happens rather than at the next read of it: the container
 * or bare blob, or a manifest's directory. TBM_ERR_SOURCE when there is
 * nothing local to watch (a URL) or the system refuses one. */
struct tbm_views_watch;
int tbm_views_watch_open(const struct tbm_views *views, struct tbm_views_watch **out);
/* A descriptor that polls readable when events wait. */
int tbm_views_watch_fd(const struct tbm_views_watch *watch);
/* Reads the events that wait and checks the sources they name; returns how
 * many of those are found changed now. */
size_t tbm_views_watch_read(struct tbm_views_watch *watch);
void tbm_views_watch_close(struct tbm_views_watch *watch);

/* The rows of a place, in listing order; i < tbm_row_count(place). */
size_t tbm_row_count(enum tbm_row_place place);
const struct tbm_row *tbm_row_at(enum tbm_row_place place, size_t i);
/* The row of a place named name, or NULL. */
const struct tbm_row *tbm_row_find(enum tbm_row_place place, const char *name);

/* Whether the model has a root row's file (config.json only for the
 * architectures it knows); every other row is always there. */
bool tbm_row_present(const struct tbm_views *views, const struct tbm_row *row);

/* The file name of a row, e.g. "dense.f32", and where it lives. */
const char *tbm_row_name(const struct tbm_row *row);
enum tbm_row_place tbm_row_place(const struct tbm_row *row);

/* True for rows rendered whole: an open takes the mount's one rendering of
 * the file (rendered then, if it is not yet), and every read of the open
 * file reads it. */
bool tbm_row_rendered(const struct tbm_row *row);

/* True for rows whose rendering can take seconds (the self-tests): their
 * opens are best answered away from the threads that serve everything else. */
bool tbm_row_slow(const struct tbm_row *row);

/* In what follows, t is the tensor (ignored for root rows). */

/* Whether the row is rendered and its file for tensor t is, so that an open
 * is answered at once: cheap, one lookup, never renders. */
bool tbm_row_ready(const struct tbm_views *views, const struct tbm_row *row, size_t t);

/* Whether tensor t's statistics are computed, so that what needs them
 * (user.tbm.density, header.json) is answered at once; computing them reads
 * the whole tensor. */
bool tbm_views_stats_ready(const struct tbm_views *views, size_t t);

/* Whose statistics a row's file shows: none, its tensor's (header.json), or
 * every tensor's (model.json, tensors.json). */
enum tbm_row_stats {
    TBM_ROW_STATS_NONE,
    TBM_ROW_STATS_TENSOR,
    TBM_ROW_STATS_ALL,
};
enum tbm_row_stats tbm_row_stats(const struct tbm_row *row);

/* The views' stats_nowait option. */
bool tbm_views_stats_nowait(const struct tbm_views *views);

/* With stats_nowait: what a file showing the statistics of tensor want (-1:
 * of every tensor) asks. True when some of them are not known and no one is
 * computing them: the caller is to have them computed, calling
 * tbm_views_stats_step until it returns 0 or less (or tbm_views_stats_drop
 * when it cannot), and until then later asks are false. */
bool tbm_views_stats_ask(const struct tbm_views *views, long want);
void tbm_views_stats_drop(const struct tbm_views *views, long want);

/* One step of computing what tbm_views_stats_ask(views, want) asked: one
 * tensor's statistics (for want -1, the next unknown one from *t on; *t
 * starts at 0). Returns 1 when more steps remain, 0 when done, or the
 * failure of tensor *t (a failed transfer: a later ask starts again). */
int tbm_views_stats_step(const struct tbm_views *views, long want, size_t *t);

/* The size in bytes: 0 for a file that cannot be served (those of a broken
 * tensor that validation found unsafe), which tbm_file_open refuses. */
int tbm_row_size(const struct tbm_views *views, const struct tbm_row *row, size_t t,
                 uint64_t *size);

/* An open file: a row's file of tensor t as one open descriptor reads it,
 * and the one way its bytes are read. Whether it can be served is decided
 * once, here (TBM_ERR_BROKEN when not); a rendered row's content is taken
 * here too (the mount's one result, rendered now if it is not yet). */
struct tbm_file;
int tbm_file_open(const struct tbm_views *views, const struct tbm_row *row, size_t t,
                  struct tbm_file **out);
void tbm_file_close(struct tbm_file *file);

/* Bytes of a source's descriptor: len bytes at pos of fd. */
struct tbm_source_range {
    int fd;
    uint64_t pos;
    size_t len;
};

/* How the bytes of one read come back. */
enum tbm_reply_kind {
    TBM_REPLY_BYTES,  /* data and len: in the caller's buffer, or memory of the file's */
    TBM_REPLY_SPLICE, /* range: bytes of a source's descriptor, to splice */
    TBM_REPLY_HELD,   /* held: pieces of a remote source's cache, let go with tbm_reply_done */
};

struct tbm_result;

struct tbm_reply {
    enum tbm_reply_kind kind;
    const char *data;
    size_t len;
    /* BYTES of a rendering: held until tbm_reply_done, so that a release of
     * the file while the reply is sent frees nothing it reads (the cache may
     * have let go of it: evicted, or showing statistics since known) */
    struct tbm_result *result;
    struct tbm_source_range range;
    struct tbm_source *src; /* SPLICE: the source of range */
    struct tbm_source_hold held;
};

/* The one call of a read: up to len bytes at off, short only at the end of
 * the file. Bytes that lie as stored in a source come back as a range of its
 * descriptor when flags allow one (see tbm_reply_check), else held where the
 * source keeps them in memory; any other bytes are computed into buf (len
 * bytes at least). A reply's data stays valid until tbm_reply_done, which
 * every reply gets (a rendering's even after the file is closed). Fails with TBM_ERR_IO when the
 * source cannot be read, TBM_ERR_CHANGED when it changed since the mount, TBM_ERR_AGAIN (with
 * TBM_READ_NOWAIT) when it would wait for a remote source's transfer. */
int tbm_file_read(struct tbm_file *file, uint64_t off, size_t len, char *buf, unsigned flags,
                  struct tbm_reply *out);

/* flags of tbm_file_read */
#define TBM_READ_SPLICE 1u /* a descriptor range may be the reply */
#define TBM_READ_NOWAIT 2u /* fail with TBM_ERR_AGAIN rather than wait for a transfer */

/* For a SPLICE reply: 0 while its range is still the source's bytes as at
 * the mount, else TBM_ERR_CHANGED or TBM_ERR_IO. The caller takes the
 * source's pages first and checks after, so that a change between the two
 * is never sent; the range is not checked by tbm_file_read. */
int tbm_reply_check(const struct tbm_reply *reply);

/* Makes a SPLICE reply a BYTES one: its range read into buf (the buffer
 * given to tbm_file_read) and checked as any read is, for a caller that
 * cannot splice it after all (a range too short to be worth it, a pipe that
 * refused the pages). Fails as tbm_file_read does. */
int tbm_reply_copy(struct tbm_reply *reply, char *buf);

void tbm_reply_done(struct tbm_reply *reply);

/* Extended attributes of tensor t's directory and of each of its files:
 * user.tbm.name (the true name), user.tbm.shape (e.g. "4096,4096"),
 * user.tbm.dtype, user.tbm.nm ("2:4", "0:0" for dense), user.tbm.density.
 * An attribute whose value is not known (no readable header, statistics
 * not computed) is left out. */

/* Whether a getxattr of name (NULL: a listxattr) is to have the statistics
 * computed when they are not waited for: user.tbm.density's alone, not a
 * listxattr or the names that ls -l asks of every file (ACLs, labels; newer
 * coreutils list them), which would transfer every tensor listed. */
bool tbm_xattr_asks_stats(const char *name);

/* Writes the names present, each followed by a NUL, into buf when size
 * allows; returns the bytes they need. */
size_t tbm_xattr_list(const struct tbm_views *views, size_t t, char *buf, size_t size);

/* Writes the value of attribute name into buf when size allows; *len is
 * the value's length either way. TBM_ERR_NOATTR for a name that tensor t
 * does not have. */
int tbm_xattr_get(const struct tbm_views *views, size_t t, const char *name, char *buf, size_t size,
                  size_t *len);

#endif
