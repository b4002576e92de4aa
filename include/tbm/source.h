/* A model's bytes, read through one interface whatever holds them: a local
 * file (a container, a bare blob, or one .tb of a manifest), or a remote
 * file (a URL of one of the remote schemes: http(s), s3). The format layer
 * and the views read only through it. */
#ifndef TBM_SOURCE_H
#define TBM_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <time.h>

#include "tbm/status.h"

/* What makes a source the same file as when it was opened: for a local file
 * its device, inode, size, mtime and ctime; for a remote file its length
 * and the server's validator (ETag, else Last-Modified) in tag. */
struct tbm_source_id {
    uint64_t size;
    uint64_t dev, ino;
    struct timespec mtime, ctime;
    uint64_t nlink;
    char tag[128];
};

struct tbm_source;
struct tbm_source_unlinked;

/* Bytes of a source where they already are in memory (a block of a remote
 * source's cache), kept there while held. */
struct tbm_source_piece {
    const unsigned char *data;
    size_t len;
    void *ref; /* the source's, to let the piece go */
};

/* The kernel caps a read request at 1 MiB, so a range of one spans at most
 * two 1 MiB blocks. */
#define TBM_SOURCE_PIECES 2

/* A range held by tbm_source_hold: its n pieces, in order. */
struct tbm_source_hold {
    struct tbm_source *src;
    size_t n;
    struct tbm_source_piece piece[TBM_SOURCE_PIECES];
};

/* How a read may go, a request's mode: with TBM_SOURCE_NOWAIT a read that
 * would wait for a remote source's transfer fails with TBM_ERR_AGAIN
 * instead, the transfer asked for, so that a thread that serves everything
 * never waits on a server. 0: it waits. */
#define TBM_SOURCE_NOWAIT 1u

struct tbm_source_ops {
    /* Reads up to len bytes at off into buf, as mode allows; *got is short
     * only at the end of the source. 0, or TBM_ERR_IO / TBM_ERR_NOMEM
     * (TBM_ERR_DENIED: a store refused the credentials; TBM_ERR_AGAIN:
     * TBM_SOURCE_NOWAIT and the bytes are on their way). */
    int (*read)(struct tbm_source *src, void *buf, size_t len, uint64_t off, unsigned mode,
                size_t *got);
    /* The source's identity now (a local file is fstat'ed; a remote one
     * reports what its latest response said). 0 or TBM_ERR_IO. */
    int (*identify)(struct tbm_source *src, struct tbm_source_id *out);
    void (*close)(struct tbm_source *src);
    /* Optional: len bytes at off will be read soon, so a remote source may
     * start fetching them alongside others. NULL for a local file. */
    void (*prefetch)(struct tbm_source *src, uint64_t off, size_t len);
    /* Optional: holds the len bytes at off (inside the source) in at most
     * max pieces, each kept in memory until release, as mode allows. 1
     * with *n pieces, 0 when the bytes are not all where they can be held
     * (read them instead), or TBM_ERR_IO / TBM_ERR_NOMEM / TBM_ERR_AGAIN.
     * NULL for a local file. */
    int (*hold)(struct tbm_source *src, uint64_t off, size_t len, unsigned mode,
                struct tbm_source_piece *pieces, size_t max, size_t *n);
    void (*release)(struct tbm_source *src, struct tbm_source_piece *pieces, size_t n);
};

struct tbm_source {
    const struct tbm_source_ops *ops;
    char *name;              /* path or URL, for messages */
    struct tbm_source_id id; /* identity when opened */
    int fd;                  /* a descriptor the bytes can be spliced from, or -1 */
    /* set once the source is found changed in place: nothing read from it
     * is served from then on */
    atomic_bool changed;
    atomic_bool reported; /* the change was logged */
    struct tbm_source_id changed_to;
    /* the ctime and link count the file had when it last lost a link (its
     * ctime then moved, and nothing else did), NULL before: tbm_source_verify
     * takes that ctime as the file's from then on */
    struct tbm_source_unlinked *_Atomic unlinked;
    /* set by tbm_source_detach: the file is opened only while read */
    int (*reopen)(void *ctx, const char *name);
    void *reopen_ctx;
};

/* Opens the regular file at path (relative to dirfd, or AT_FDCWD) for
 * reading without following it into a FIFO or device: the type is checked
 * on the opened descriptor. On failure returns TBM_ERR_SOURCE with the
 * reason in *why (a static string or strerror's). */
int tbm_source_open_file(const char *path, struct tbm_source **out, const char **why);

/* Wraps fd, an open regular file that the source then owns; name is copied
 * for messages. TBM_ERR_NOMEM or TBM_ERR_SOURCE (with *why). */
int tbm_source_from_fd(int fd, const char *name, struct tbm_source **out, const char **why);

/* Closes src's descriptor and has it opened again, with reopen(ctx, name),
 * only while it is read, and checked to be the same file then: for
 * manifests with more files than the process may hold open. The source
 * then has no descriptor to splice from. */
void tbm_source_detach(struct tbm_source *src, int (*reopen)(void *ctx, const char *name),
                       void *ctx);

/* A request: one read of a file of the tree, made in one mode and passed
 * down to every read of a source it makes. Its reads are checked for a
 * change once, at its end (tbm_request_end), rather than after each: a
 * dense read reads weights and mask in several steps, and each fstat was a
 * few per cent of a request. Made where the read is served, as
 * (struct tbm_request){.mode = mode}; past TBM_REQUEST_SOURCES sources, a
 * read is checked at once. Bytes read in a request may be used only for the
 * reply that the end's answer decides: nothing kept. A read that is part of
 * no request (at open, a rendering, the statistics) passes NULL: it waits,
 * and is checked at once. */
#define TBM_REQUEST_SOURCES 8

struct tbm_request {
    unsigned mode; /* TBM_SOURCE_NOWAIT or 0 */
    size_t n;      /* the sources read so far, in src */
    struct tbm_source *src[TBM_REQUEST_SOURCES];
};

/* Checks once each source req has read since it was made (or last ended):
 * status, or TBM_ERR_CHANGED (or the check's failure) when one changed. */
int tbm_request_end(struct tbm_request *req, int status);

/* Reads exactly len bytes at off in req's mode (req NULL: waiting);
 * TBM_ERR_IO when the source ends sooner, TBM_ERR_CHANGED when it is no
 * longer the file it was when opened: checked after the read, so that bytes
 * of a rewrite in progress are not served, or at req's end. */
int tbm_source_read_full(struct tbm_source *src, void *buf, size_t len, uint64_t off,
                         struct tbm_request *req);

/* Reads up to len bytes at off, as tbm_source_ops' read, in req's mode
 * (req NULL: waiting); unchecked. */
int tbm_source_read(struct tbm_source *src, void *buf, size_t len, uint64_t off,
                    struct tbm_request *req, size_t *got);

/* Holds the len bytes at off (inside the source) where they are in memory,
 * so that they can be handed to the kernel without a copy, in req's mode
 * (req NULL: waiting): 1 with h filled (let it go with tbm_source_release),
 * 0 when the source cannot (read them with tbm_source_read_full), or an
 * error as tbm_source_read_full's, the change checked once the bytes are
 * held (not at req's end). */
int tbm_source_hold(struct tbm_source *src, uint64_t off, size_t len, const struct tbm_request *req,
                    struct tbm_source_hold *h);

void tbm_source_release(struct tbm_source_hold *h);

/* 0 while the source is the file it was when opened (device, inode, size,
 * mtime; for a remote file length and validator), else TBM_ERR_CHANGED,
 * from then on for good. One fstat for a local file. */
int tbm_source_verify(struct tbm_source *src);

/* True exactly once after the source changed, for the one log line;
 * describes the change in buf ("size 100 -> 80, mtime"). */
bool tbm_source_take_report(struct tbm_source *src, char *buf, size_t len);

/* How remote sources are read: the options of their transport (the block
 * cache, request headers, the stall timeout, the CAs to trust) and of each
 * scheme (s3_endpoint, ...), set by name as -o gives them; each is kept in
 * the struct of its owner, the transport or a scheme's row. */
struct tbm_remote_options;

/* An option of remote sources as --help shows it: -o name=arg, and what it
 * does (help NULL: not documented, for the tests). */
struct tbm_remote_option {
    const char *name, *arg, *help;
};

/* The i-th option of remote sources, the transport's then each scheme's,
 * or NULL past the last. */
const struct tbm_remote_option *tbm_remote_option(size_t i);

/* Every option at its default; NULL when out of memory. */
struct tbm_remote_options *tbm_remote_options_new(void);

/* Sets the i-th option (of tbm_remote_option) to value, a copy of which o
 * keeps: 0, or -1 with the reason in *why ("must name a file"). */
int tbm_remote_options_set(struct tbm_remote_options *o, size_t i, const char *value,
                           const char **why);

void tbm_remote_options_free(struct tbm_remote_options *o);

/* The i-th remote scheme as --help shows it: the form of its URLs
 * ("s3://BUCKET/KEY") and what they name; false past the last. */
bool tbm_source_scheme_help(size_t i, const char **form, const char **help);

/* Whether name is the URL of a remote scheme (http://, https://, s3://),
 * which only tbm_source_open_url opens: the table of schemes says. */
bool tbm_source_is_url(const char *name);

/* name as it may be shown (messages, the mount's source name, files of the
 * tree), as its scheme shows it: an http(s) URL without user information
 * ("user:password@"), query string or fragment, where secrets ride; an
 * s3:// URL as given; anything else as given. malloc'ed, or NULL. */
char *tbm_source_url_display(const char *name);

/* Overwrites with '*', in place, what a command-line argument may carry
 * as secrets for remote sources, so that ps does not show them: the value
 * of a header option after its ':' (-o http_header=Name: value), and the
 * user information and what follows '?' or '#' of a URL of a remote
 * scheme. */
void tbm_source_hide_secrets(char *arg);

/* The credentials of remote sources are read again before their next
 * request (for SIGHUP: async-signal-safe). */
void tbm_source_credentials_reload(void);

/* The program is stopping (for SIGTERM: async-signal-safe): transfers are
 * given up and their readers answered with TBM_ERR_STOPPED, within a
 * second, so that no thread of the daemon stays waiting for a server. */
void tbm_source_stop(void);
bool tbm_source_stopping(void);

/* Opens the file at url, the URL of a remote scheme (http://, https://,
 * or s3://, whose requests are signed), which must answer range requests:
 * its tail is fetched at once, the rest on demand through a block cache.
 * On failure returns TBM_ERR_SOURCE (or TBM_ERR_NOMEM) with the reason in
 * why, which names no secret. opts may be NULL for the defaults. The
 * source's name is url as tbm_source_url_display shows it. */
int tbm_source_open_url(const char *url, const struct tbm_remote_options *opts,
                        struct tbm_source **out, char *why, size_t whylen);

static inline void tbm_source_prefetch(struct tbm_source *src, uint64_t off, size_t len)
{
    if (src->ops->prefetch)
        src->ops->prefetch(src, off, len);
}

void tbm_source_close(struct tbm_source *src);

#endif
