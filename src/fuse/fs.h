/* The FUSE front end: serves a model's views through the low-level,
 * inode-based libfuse API. */
#ifndef TBM_FUSE_FS_H
#define TBM_FUSE_FS_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tbm/view.h"

struct tbm_deferred;
struct tbm_fs_watch;

/* Distinct failures remembered (and so logged once each); past this many,
 * one line says that further ones go unlogged. */
#define TBM_FS_LOGGED_MAX 4096

struct tbm_fs_failure {
    long tensor;
    const struct tbm_row *row;
    int status;
};

/* The failures of this mount logged so far. */
struct tbm_fs_failures {
    pthread_mutex_t lock;
    size_t n; /* one past TBM_FS_LOGGED_MAX once the "no more" line is out */
    struct tbm_fs_failure seen[TBM_FS_LOGGED_MAX];
};

struct tbm_fs {
    struct tbm_views *views;                   /* not const: stopping them at exit */
    size_t root_files, tensor_files, ntensors; /* the table's rows per place; tensors */
    fuse_ino_t first_tensor;                   /* inode of the first tensor's directory */
    uid_t uid;                                 /* owner of every file and directory */
    gid_t gid;
    mode_t file_mode, dir_mode;     /* permission bits of every file, every directory */
    unsigned max_read;              /* bytes per read request, as given in the mount options */
    bool splice;                    /* byte ranges of the source are spliced: wanted, then
                                     * kept by init only if the kernel and pipe allow */
    struct tbm_deferred *deferred;  /* answers the self-test opens; NULL: inline */
    struct tbm_deferred *stats;     /* answers what waits for statistics, and computes
                                     * those not waited for; NULL: inline */
    struct tbm_deferred *transfers; /* reads that wait for a remote source; NULL: inline */
    struct tbm_fs_watch *watch;     /* the watch of the local files; NULL: none */
    struct fuse_session *se;        /* for the kernel-cache notifications */
    bool debug;                     /* -d: name the file of each node opened */
    atomic_bool changed;            /* a source was found changed in place */
    struct tbm_fs_failures failures;
};

/* The inode of the file of row k of tensor t's directory, or with t -1 of
 * row k of the root. */
fuse_ino_t tbm_fs_file_ino(const struct tbm_fs *fs, long t, size_t k);

/* Reports a failed read or open of row's file (row NULL: the computing of
 * its statistics, apart from any file) of tensor
 * (-1 for a root file) with status: logged once per tensor, row and reason; a
 * source changed in place is logged once more and the kernel's cache of the
 * tree dropped. */
void tbm_fs_failed(struct tbm_fs *fs, long tensor, const struct tbm_row *row, int status);

/* Logs, once each, the sources found changed since the mount and drops the
 * kernel's cache of the files made from them: the root's files and the
 * files of each tensor whose source changed. From a thread that serves no
 * request: the kernel may hold the very pages a request is answering. */
void tbm_fs_sources_changed(struct tbm_fs *fs);

/* A thread that watches the model's local files and calls
 * tbm_fs_sources_changed as soon as one changes; none for a URL. Start it
 * after fuse_daemonize; stop (NULL allowed) before the session goes. */
int tbm_fs_watch_start(struct tbm_fs *fs, struct tbm_fs_watch **out);
void tbm_fs_watch_stop(struct tbm_fs_watch *watch);

/* Sets the views of fs and the inode layout that follows from the table. */
void tbm_fs_init(struct tbm_fs *fs, struct tbm_views *views);

/* The operations to pass to fuse_session_new with a struct tbm_fs as userdata
 * (set up by tbm_fs_init); init settles its splice field. */
extern const struct fuse_lowlevel_ops tbm_fs_ops;

/* pthread_create, with every signal blocked in the new thread: signals are
 * for the loop's thread, which they stop (libfuse's workers block them too). */
int tbm_fs_thread(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Answers a read of the open file in fi. A read that would wait for a
 * remote source's transfer goes to fs->transfers unless may_wait. */
void tbm_fs_read(const struct tbm_fs *fs, fuse_req_t req, fuse_ino_t ino,
                 const struct fuse_file_info *fi, size_t size, off_t off, bool may_wait);

/* Answers a getxattr of name (listxattr when name is NULL) on tensor t's
 * directory or files, size bytes at most (0: the length alone). */
void tbm_fs_reply_xattr(const struct tbm_fs *fs, fuse_req_t req, size_t t, const char *name,
                        size_t size);

/* Opens row's file of tensor t (its rendering taken, for a rendered row)
 * and answers req: fuse_reply_open with the open file in fi->fh, or the
 * error. */
void tbm_fs_open_file(const struct tbm_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
                      const struct tbm_row *row, size_t t);

/* A queue of requests answered by threads of their own (threads of them,
 * 1 to 16), so that requests that take seconds never hold the FUSE workers:
 * ten readers of selftest files would otherwise hold them all. It takes the
 * waiting requests' users in turn: the next request is that of the user
 * served least recently (of those never served, the earliest asked), of
 * the users with fewer than per_user requests on its threads (0: no cap). */
int tbm_deferred_start(const struct tbm_fs *fs, unsigned threads, unsigned per_user,
                       struct tbm_deferred **out);
/* Queues, as user uid's, the computing of the statistics that
 * tbm_views_stats_ask(fs->views, want) asked, one tensor a turn (a failure
 * reported with row NULL); false when out of memory or stopping (then they
 * are the caller's to drop). */
bool tbm_deferred_push_stats(struct tbm_deferred *d, uid_t uid, long want);
/* Queues an open for tbm_fs_open_file; false when out of memory. */
bool tbm_deferred_push(struct tbm_deferred *d, fuse_req_t req, const struct fuse_file_info *fi,
                       const struct tbm_row *row, size_t t);
/* Queues a getxattr (name) or listxattr (name NULL) of tensor t's files
 * for tbm_fs_reply_xattr; false when out of memory. */
bool tbm_deferred_push_xattr(struct tbm_deferred *d, fuse_req_t req, size_t t, const char *name,
                             size_t size);
/* Queues a read for tbm_fs_read, which may wait there; false when out of
 * memory. */
bool tbm_deferred_push_read(struct tbm_deferred *d, fuse_req_t req, fuse_ino_t ino,
                            const struct fuse_file_info *fi, size_t size, off_t off);
/* Stops the self-test under way (a root report between two tensors), answers
 * the requests still queued with ENOTCONN and frees d (which may be NULL). */
void tbm_deferred_stop(struct tbm_deferred *d);

/* Best effort, for root only: raises the readahead of the tbmfs mount on
 * mountpoint to 1 MiB once the session loop has answered INIT. Call after
 * fuse_daemonize, just before the loop. */
void tbm_fs_widen_readahead(const char *mountpoint);

#endif
