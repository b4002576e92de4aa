/* The FUSE front end: inode numbers are computed from (tensor, table row), so
 * the tree needs no table, stays stable and maps each file to one row.
 * Library statuses become errno values here and nowhere else. */
#include "fs.h"

#include "tbm/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Inode numbers: the root, tensors/, the root files in table order, then
 * per tensor its directory followed by its files in table order. */
enum {
    INO_ROOT = FUSE_ROOT_ID,
    INO_TENSORS,
    INO_FIRST_ROOT_FILE,
};

/* Background requests the kernel may have outstanding on the connection. */
#define TBM_FS_MAX_BACKGROUND 256u

/* The tree never changes while mounted, so the kernel may cache it all. */
#define CACHE_SECONDS 86400.0

struct node {
    bool dir;
    long tensor;               /* -1 for the root, tensors/ and the root files */
    const struct tbm_row *row; /* NULL for a directory */
};

/* libfuse splices a reply through a pipe that must hold all of it with its
 * header; past pipe-max-size (1 MiB by default) the pipe cannot grow
 * unprivileged, and libfuse would then copy every reply through a freshly
 * allocated buffer, far slower than our own pread. */
static bool reply_fits_pipe(unsigned max_read)
{
    unsigned long pipe_max = 0;
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "re");

    if (!f)
        return false;
    if (fscanf(f, "%lu", &pipe_max) != 1)
        pipe_max = 0;
    fclose(f);
    return (unsigned long)max_read + 4 * 4096 <= pipe_max;
}

void tbm_fs_init(struct tbm_fs *fs, struct tbm_views *views)
{
    fs->views = views;
    fs->root_files = tbm_row_count(TBM_ROW_ROOT);
    fs->tensor_files = tbm_row_count(TBM_ROW_TENSOR);
    fs->first_tensor = INO_FIRST_ROOT_FILE + fs->root_files;
    fs->ntensors = tbm_views_tensor_count(views);
    pthread_mutex_init(&fs->failures.lock, NULL);
    fs->failures.n = 0;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct tbm_fs *fs = userdata;

    conn->max_read = fs->max_read;
    /* Bytes of the source (a SPLICE reply of tbm_file_read) are spliced from
     * its page cache into the reply: one copy fewer, and no pinning of a
     * reply buffer page by page. Side by side on 2 cores (bench.sh, figure
     * 7), raw.tb read 27% faster, 44% with O_DIRECT. */
    fs->splice =
        fs->splice && (conn->capable & FUSE_CAP_SPLICE_WRITE) && reply_fits_pipe(fs->max_read);
    if (fs->splice)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    /* Every listing carries attributes: find and ls -l over a large tree then
     * need no lookup per entry. */
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    /* The kernel's default of 12 background requests (O_DIRECT and
     * read-ahead reads among them) lets reads parked for a remote transfer
     * hold every slot, and another user's read of a file served from memory
     * then queues in the kernel behind them: parked reads hold no worker, so
     * the daemon can take many more. */
    conn->max_background = TBM_FS_MAX_BACKGROUND;
    conn->congestion_threshold = TBM_FS_MAX_BACKGROUND * 3 / 4;
}

static const struct tbm_fs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static int status_errno(int status)
{
    switch (status) {
    case TBM_ERR_NOMEM:
        return ENOMEM;
    case TBM_ERR_STOPPED:
        return ENOTCONN;
    case TBM_ERR_NOATTR:
        return ENODATA;
    case TBM_ERR_DENIED:
        return EACCES;
    default:
        return EIO;
    }
}

/* Answers a failed open or read of a row of a tensor: logged, then the errno. */
static void reply_failure(fuse_req_t req, long tensor, const struct tbm_row *row, int status)
{
    tbm_fs_failed(fuse_req_userdata(req), tensor, row, status);
    fuse_reply_err(req, status_errno(status));
}

static fuse_ino_t tensor_ino(const struct tbm_fs *fs, size_t t)
{
    return fs->first_tensor + (fuse_ino_t)t * (1 + fs->tensor_files);
}

fuse_ino_t tbm_fs_file_ino(const struct tbm_fs *fs, long t, size_t k)
{
    return t < 0 ? INO_FIRST_ROOT_FILE + k : tensor_ino(fs, (size_t)t) + 1 + k;
}

/* The tensor of a file node; root files take 0, which their views ignore. */
static size_t node_tensor(const struct node *n)
{
    return n->tensor < 0 ? 0 : (size_t)n->tensor;
}

static bool decode_ino(const struct tbm_fs *fs, fuse_ino_t ino, struct node *n)
{
    *n = (struct node){.dir = ino == INO_ROOT || ino == INO_TENSORS, .tensor = -1};
    if (ino < fs->first_tensor) {
        if (ino >= INO_FIRST_ROOT_FILE)
            n->row = tbm_row_at(TBM_ROW_ROOT, ino - INO_FIRST_ROOT_FILE);
        return ino >= INO_ROOT && (!n->row || tbm_row_present(fs->views, n->row));
    }
    fuse_ino_t rel = ino - fs->first_tensor, slots = 1 + fs->tensor_files;
    if (rel / slots >= fs->ntensors)
        return false;
    n->tensor = (long)(rel / slots);
    n->dir = rel % slots == 0;
    if (!n->dir)
        n->row = tbm_row_at(TBM_ROW_TENSOR, rel % slots - 1);
    return true;
}

static int fill_attr(const struct tbm_fs *fs, fuse_ino_t ino, const struct node *n, struct stat *st)
{
    uint64_t size = 0;

    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_atim = st->st_mtim = st->st_ctim = tbm_views_mtime(fs->views);
    if (n->dir) {
        st->st_mode = S_IFDIR | fs->dir_mode;
        st->st_nlink = ino == INO_ROOT ? 3 : 2;
        if (ino == INO_TENSORS)
            st->st_nlink = 2 + (nlink_t)fs->ntensors;
        return 0;
    }
    int r = tbm_row_size(fs->views, n->row, node_tensor(n), &size);
    if (r < 0)
        return r;
    st->st_mode = S_IFREG | fs->file_mode;
    st->st_nlink = 1;
    st->st_size = size > (uint64_t)INT64_MAX ? INT64_MAX : (off_t)size;
    st->st_blksize = 1 << 20;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
    return 0;
}

static void reply_entry(fuse_req_t req, fuse_ino_t ino)
{
    const struct tbm_fs *fs = fs_of(req);
    struct fuse_entry_param e = {
        .ino = ino, .attr_timeout = CACHE_SECONDS, .entry_timeout = CACHE_SECONDS};
    struct node n;

    if (!decode_ino(fs, ino, &n)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    int r = fill_attr(fs, ino, &n, &e.attr);
    if (r < 0)
        fuse_reply_err(req, status_errno(r));
    else
        fuse_reply_entry(req, &e);
}

/* The index of a row within its place. */
static size_t row_index(enum tbm_row_place place, const struct tbm_row *row)
{
    size_t k = 0;

    while (tbm_row_at(place, k) != row)
        k++;
    return k;
}

static fuse_ino_t lookup_root(const struct tbm_fs *fs, const char *name)
{
    const struct tbm_row *row = tbm_row_find(TBM_ROW_ROOT, name);

    if (row)
        return tbm_row_present(fs->views, row)
                   ? tbm_fs_file_ino(fs, -1, row_index(TBM_ROW_ROOT, row))
                   : 0;
    return strcmp(name, "tensors") == 0 ? INO_TENSORS : 0;
}

static fuse_ino_t lookup_tensor_file(const struct tbm_fs *fs, size_t t, const char *name)
{
    const struct tbm_row *row = tbm_row_find(TBM_ROW_TENSOR, name);

    return row ? tbm_fs_file_ino(fs, (long)t, row_index(TBM_ROW_TENSOR, row)) : 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    const struct tbm_fs *fs = fs_of(req);
    fuse_ino_t ino = 0;
    struct node n;

    if (parent == INO_ROOT) {
        ino = lookup_root(fs, name);
    } else if (parent == INO_TENSORS) {
        long t = tbm_views_find_tensor(fs->views, name, strlen(name));
        ino = t < 0 ? 0 : tensor_ino(fs, (size_t)t);
    } else if (decode_ino(fs, parent, &n) && n.dir && n.tensor >= 0) {
        ino = lookup_tensor_file(fs, (size_t)n.tensor, name);
    }
    if (ino == 0)
        fuse_reply_err(req, ENOENT);
    else
        reply_entry(req, ino);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    const struct tbm_fs *fs = fs_of(req);
    struct stat st;
    struct node n;

    (void)fi;
    if (!decode_ino(fs, ino, &n)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    int r = fill_attr(fs, ino, &n, &st);
    if (r < 0)
        fuse_reply_err(req, status_errno(r));
    else
        fuse_reply_attr(req, &st, CACHE_SECONDS);
}

/* Directory entry i of a directory ("." and ".." first); false past the end. */
static bool dir_entry(const struct tbm_fs *fs, fuse_ino_t dir, const struct node *n, size_t i,
                      const char **name, fuse_ino_t *ino, mode_t *mode)
{
    *mode = S_IFDIR;
    if (i < 2) {
        *name = i == 0 ? "." : "..";
        *ino = i == 0 || dir == INO_ROOT || dir == INO_TENSORS ? (i == 0 ? dir : INO_ROOT)
                                                               : INO_TENSORS;
        return true;
    }
    i -= 2;
    if (dir == INO_ROOT) {
        if (i > fs->root_files)
            return false;
        if (i == fs->root_files) {
            *name = "tensors";
            *ino = INO_TENSORS;
            return true;
        }
        *name = tbm_row_name(tbm_row_at(TBM_ROW_ROOT, i));
        *ino = tbm_fs_file_ino(fs, -1, i);
        *mode = S_IFREG;
        return true;
    }
    if (dir == INO_TENSORS) {
        if (i >= fs->ntensors)
            return false;
        *name = tbm_views_tensor_dir(fs->views, i);
        *ino = tensor_ino(fs, i);
        return true;
    }
    if (i >= fs->tensor_files)
        return false;
    *name = tbm_row_name(tbm_row_at(TBM_ROW_TENSOR, i));
    *ino = tbm_fs_file_ino(fs, n->tensor, i);
    *mode = S_IFREG;
    return true;
}

/* Fills one reply of directory entries from offset off; with plus, each
 * entry carries its attributes so that listing a directory needs no lookups. */
static void reply_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
    const struct tbm_fs *fs = fs_of(req);
    struct node n, cn;
    const char *name;
    fuse_ino_t child;
    mode_t mode;

    if (!decode_ino(fs, ino, &n) || !n.dir) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (size_t i = (size_t)off; dir_entry(fs, ino, &n, i, &name, &child, &mode); i++) {
        struct fuse_entry_param e = {
            .ino = child, .attr_timeout = CACHE_SECONDS, .entry_timeout = CACHE_SECONDS};
        size_t need;
        /* a root file this model lacks is not listed */
        if (i >= 2 && !decode_ino(fs, child, &cn))
            continue;
        if (!plus) {
            e.attr.st_ino = child;
            e.attr.st_mode = mode;
            need = fuse_add_direntry(req, buf + used, size - used, name, &e.attr, (off_t)i + 1);
        } else {
            /* "." and ".." carry no entry: the kernel must not count a lookup */
            if (i >= 2 && fill_attr(fs, child, &cn, &e.attr) < 0)
                break;
            if (i < 2) {
                memset(&e, 0, sizeof(e));
                e.attr.st_ino = child;
                e.attr.st_mode = S_IFDIR;
            }
            need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)i + 1);
        }
        if (need > size - used)
            break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

/* Nothing is kept per open directory, so the kernel may skip opendir and
 * releasedir entirely: ENOSYS here tells it so once, for the whole mount. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino, (void)fi;
    fuse_reply_err(req, ENOSYS);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    reply_dir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    reply_dir(req, ino, size, off, true);
}

int tbm_fs_thread(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* Whether the source of row's file of tensor t is known changed in place: a
 * root file may hold any tensor's bytes. Its open then drops the kernel's
 * cached pages of the file: the invalidation that follows a change runs on
 * a thread of its own (tbm_fs_failed), and a reader who opens the next file
 * at once must get the EIO, not the old bytes from the cache. */
static bool source_changed(const struct tbm_fs *fs, const struct tbm_row *row, size_t t)
{
    if (tbm_row_place(row) == TBM_ROW_ROOT)
        return atomic_load(&fs->changed);
    return tbm_views_tensor_changed(fs->views, t);
}

void tbm_fs_open_file(const struct tbm_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
                      const struct tbm_row *row, size_t t)
{
    struct tbm_file *file;
    int r = tbm_file_open(fs->views, row, t, &file);

    if (r < 0) {
        reply_failure(req, tbm_row_place(row) == TBM_ROW_ROOT ? -1 : (long)t, row, r);
        return;
    }
    /* every size is exact in stat and the bytes never change while the
     * source does not: the kernel's cache of them lasts across opens; but
     * for the statistics not waited for, which a later open may show where
     * an earlier one had null, and once the source changed */
    fi->keep_cache =
        (!tbm_views_stats_nowait(fs->views) || tbm_row_stats(row) == TBM_ROW_STATS_NONE) &&
        !source_changed(fs, row, t);
    fi->fh = (uint64_t)(uintptr_t)file;
    /* Unanswered (the opener is gone), the open gets no release to close it. */
    if (fuse_reply_open(req, fi) != 0)
        tbm_file_close(file);
}

/* On a mount that does not wait for statistics: has those of tensor want
 * (-1: every tensor's) computed on the statistics' threads, as the asking
 * user's work, when they are not known and no one is computing them. */
static void ask_stats(const struct tbm_fs *fs, fuse_req_t req, long want)
{
    size_t t = 0;

    if (!tbm_views_stats_ask(fs->views, want))
        return;
    if (fs->stats && tbm_deferred_push_stats(fs->stats, fuse_req_ctx(req)->uid, want))
        return;
    if (fs->stats) {
        tbm_views_stats_drop(fs->views, want);
        return;
    }
    /* no statistics' threads (none could start): as a mount that waits */
    while (tbm_views_stats_step(fs->views, want, &t) > 0)
        continue;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    const struct tbm_fs *fs = fs_of(req);
    struct node n;

    if (!decode_ino(fs, ino, &n)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (n.dir) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    /* libfuse's -d lines show node numbers; this says which file one is */
    if (fs->debug)
        tbm_log(TBM_LOG_INFO, "open node %lu: %s%s%s%s", (unsigned long)ino,
                n.tensor < 0 ? "" : "tensors/",
                n.tensor < 0 ? "" : tbm_views_tensor_dir(fs->views, (size_t)n.tensor),
                n.tensor < 0 ? "" : "/", tbm_row_name(n.row));
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    size_t t = node_tensor(&n);
    enum tbm_row_stats shows = tbm_row_stats(n.row);
    /* Statistics not waited for: what is known is rendered at once, here. */
    if (shows != TBM_ROW_STATS_NONE && tbm_views_stats_nowait(fs->views)) {
        ask_stats(fs, req, shows == TBM_ROW_STATS_ALL ? -1 : (long)t);
        tbm_fs_open_file(fs, req, fi, n.row, t);
        return;
    }
    /* A rendered file not rendered yet may take seconds (a self-test, or
     * statistics that read the whole tensor or model): answered on a thread
     * of its own. A result already rendered is handed over here: queued, its
     * open would wait for the work of others for nothing. */
    struct tbm_deferred *queue = tbm_row_slow(n.row) ? fs->deferred : fs->stats;
    if (tbm_row_rendered(n.row) && queue && !tbm_row_ready(fs->views, n.row, t) &&
        tbm_deferred_push(queue, req, fi, n.row, t))
        return;
    tbm_fs_open_file(fs, req, fi, n.row, t);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    tbm_file_close((struct tbm_file *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

/* A worker's reply buffer. Its data starts on a page: the kernel copies a
 * reply into the page cache page by page, and the kernels write whole
 * vectors. 24 bytes past a page, where malloc put it, first reads of a
 * 2 GiB dense.f32 took 0.89 s of CPU per GiB rather than 0.52, and ran at
 * 1.75 GiB/s rather than 3.18; model.safetensors 0.58 rather than 0.56,
 * 2.61 GiB/s rather than 2.75 (medians of 11, fresh mounts side by side,
 * 2 CPUs, libfuse's 10 workers). */
struct read_buf {
    size_t cap;
    char *data;
};

#define READ_BUF_ALIGN 4096

static void free_read_buf(void *p)
{
    struct read_buf *b = p;

    free(b->data);
    free(b);
}

static void make_buf_key(void)
{
    pthread_key_create(&buf_key, free_read_buf);
}

/* Each worker thread reuses one reply buffer, grown to the largest request. */
static char *thread_buf(size_t size)
{
    pthread_once(&buf_once, make_buf_key);
    struct read_buf *b = pthread_getspecific(buf_key);
    if (b && b->data && b->cap >= size)
        return b->data;
    if (!b) {
        if (!(b = calloc(1, sizeof(*b))))
            return NULL;
        if (pthread_setspecific(buf_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    /* whole pages, one at least; requests are at most max_read or a
     * listing's size, far from wrapping */
    size_t cap =
        size ? (size + READ_BUF_ALIGN - 1) / READ_BUF_ALIGN * READ_BUF_ALIGN : READ_BUF_ALIGN;
    char *data = aligned_alloc(READ_BUF_ALIGN, cap);
    if (!data)
        return NULL;
    free(b->data);
    b->data = data;
    b->cap = cap;
    return data;
}

/* A worker's pipe for the source's pages of a spliced reply, sized for the
 * largest; -1 when none can be had. */
struct splice_pipe {
    int fd[2];
    size_t cap;
};

static pthread_key_t pipe_key;
static pthread_once_t pipe_once = PTHREAD_ONCE_INIT;

static void close_pipe(struct splice_pipe *p)
{
    if (p->fd[0] >= 0) {
        close(p->fd[0]);
        close(p->fd[1]);
    }
    p->fd[0] = p->fd[1] = -1;
    p->cap = 0;
}

static void free_pipe(void *arg)
{
    close_pipe(arg);
    free(arg);
}

static void make_pipe_key(void)
{
    pthread_key_create(&pipe_key, free_pipe);
}

static struct splice_pipe *thread_pipe(size_t len)
{
    pthread_once(&pipe_once, make_pipe_key);
    struct splice_pipe *p = pthread_getspecific(pipe_key);
    if (!p) {
        if (!(p = malloc(sizeof(*p))))
            return NULL;
        p->fd[0] = p->fd[1] = -1;
        p->cap = 0;
        if (pthread_setspecific(pipe_key, p) != 0) {
            free(p);
            return NULL;
        }
    }
    if (p->fd[0] < 0 && pipe2(p->fd, O_CLOEXEC) != 0)
        return NULL;
    /* A page spliced in takes a whole slot of the pipe, however little of
     * it the range covers: a range that starts inside a page spans one
     * page more than its length. */
    size_t need = len + 2 * 4096;
    if (p->cap < need) {
        int cap = fcntl(p->fd[1], F_SETPIPE_SZ, (int)need);
        if (cap < 0 || (size_t)cap < need)
            return NULL;
        p->cap = (size_t)cap;
    }
    return p;
}

/* Moves the source's pages of range into p: how many bytes. */
static ssize_t fill_pipe(struct splice_pipe *p, const struct tbm_source_range *range)
{
    loff_t pos = (loff_t)range->pos;
    size_t done = 0;

    while (done < range->len) {
        ssize_t n = splice(range->fd, &pos, p->fd[1], NULL, range->len - done,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

/* As libfuse does: a reply of less than two pages is copied, not spliced,
 * and costs less so. */
#define SPLICE_MIN (2 * 4096)

/* Replies with bytes of the source, spliced: the source's pages are taken
 * into a pipe first and the source checked after, so that a change made
 * before they were taken is never sent (one made between the check and the
 * kernel's copy to the reader still can be: the pipe holds the pages, not a
 * copy of them). Returns 0 once answered, the failure to answer with, or 1
 * when the bytes are better copied (a short range) or the pages could not
 * be taken (no pipe, or the pipe refused them). */
static int reply_splice(fuse_req_t req, const struct tbm_reply *reply)
{
    const struct tbm_source_range *range = &reply->range;
    struct splice_pipe *p = range->len < SPLICE_MIN ? NULL : thread_pipe(range->len);
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(range->len);
    ssize_t got;
    int r, left = 0;

    if (!p)
        return 1;
    got = fill_pipe(p, range);
    if (got < 0) {
        close_pipe(p);
        return 1;
    }
    r = tbm_reply_check(reply);
    if (r == 0 && (size_t)got != range->len)
        r = TBM_ERR_IO;
    if (r == 0) {
        bv.buf[0].size = (size_t)got;
        bv.buf[0].flags = FUSE_BUF_IS_FD;
        bv.buf[0].fd = p->fd[0];
        fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
    }
    /* whatever was not sent must not lead the next reply */
    if (ioctl(p->fd[0], FIONREAD, &left) != 0 || left != 0)
        close_pipe(p);
    return r;
}

/* Replies with bytes held in a remote source's cache, written to the kernel
 * from where they are: the write copies them before it returns, so the
 * hold need last no longer. */
static void reply_held(fuse_req_t req, const struct tbm_source_hold *h)
{
    struct iovec iov[TBM_SOURCE_PIECES];

    for (size_t i = 0; i < h->n; i++)
        iov[i] = (struct iovec){(void *)(uintptr_t)h->piece[i].data, h->piece[i].len};
    fuse_reply_iov(req, iov, (int)h->n);
}

/* One call into the views per read; what comes back says how to reply. A
 * rendered row's bytes are written from its result: the write copies them
 * before it returns, and the file's release cannot come before the reply.
 * A request shorter than SPLICE_MIN does not ask for a range to splice; a
 * range that cannot be spliced after all is copied (tbm_reply_copy). A read
 * that would wait for a remote source's transfer is handed to the transfer
 * threads, which answer it (out of memory for that, it fails). */
void tbm_fs_read(const struct tbm_fs *fs, fuse_req_t req, fuse_ino_t ino,
                 const struct fuse_file_info *fi, size_t size, off_t off, bool may_wait)
{
    struct tbm_file *file = (struct tbm_file *)(uintptr_t)fi->fh;
    bool splice = fs->splice && size >= SPLICE_MIN;
    unsigned flags = (splice ? TBM_READ_SPLICE : 0) | (may_wait ? 0 : TBM_READ_NOWAIT);
    struct tbm_reply reply;
    struct node n;
    char *buf = thread_buf(size);

    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int r = tbm_file_read(file, (uint64_t)off, size, buf, flags, &reply);
    if (r == TBM_ERR_AGAIN && fs->transfers &&
        tbm_deferred_push_read(fs->transfers, req, ino, fi, size, off))
        return;
    if (r == TBM_ERR_AGAIN)
        r = TBM_ERR_NOMEM;
    if (r == 0 && reply.kind == TBM_REPLY_SPLICE && (r = reply_splice(req, &reply)) == 1)
        r = tbm_reply_copy(&reply, buf);
    if (r < 0) {
        if (decode_ino(fs, ino, &n))
            reply_failure(req, n.tensor, n.row, r);
        else
            fuse_reply_err(req, status_errno(r));
        return;
    }
    switch (reply.kind) {
    case TBM_REPLY_SPLICE: /* answered above */
        break;
    case TBM_REPLY_HELD:
        reply_held(req, &reply.held);
        break;
    case TBM_REPLY_BYTES:
        fuse_reply_buf(req, reply.data, reply.len);
        break;
    }
    tbm_reply_done(&reply);
}

/* A worker never waits for a remote source's transfer while there are
 * threads to wait for it: a stalled server would otherwise take every
 * worker, and with them the files that need no transfer. */
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    const struct tbm_fs *fs = fs_of(req);

    tbm_fs_read(fs, req, ino, fi, size, off, fs->transfers == NULL);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    const struct tbm_fs *fs = fs_of(req);
    struct statvfs sv = {
        .f_bsize = 4096,
        .f_frsize = 4096,
        .f_files = fs->first_tensor + fs->ntensors * (1 + fs->tensor_files),
        .f_namemax = 255,
        .f_flag = ST_RDONLY,
    };

    (void)ino;
    fuse_reply_statfs(req, &sv);
}

/* Every call that would change the tree fails, even on a mount remounted
 * read-write. (write and fallocate need a descriptor open for writing,
 * which open never hands out.) */
static void erofs(fuse_req_t req)
{
    fuse_reply_err(req, EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)ino, (void)attr, (void)to_set, (void)fi;
    erofs(req);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    (void)parent, (void)name, (void)mode, (void)rdev;
    erofs(req);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    erofs(req);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    erofs(req);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link, (void)parent, (void)name;
    erofs(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    (void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
    erofs(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    (void)ino, (void)newparent, (void)newname;
    erofs(req);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    erofs(req);
}

void tbm_fs_reply_xattr(const struct tbm_fs *fs, fuse_req_t req, size_t t, const char *name,
                        size_t size)
{
    size_t len = name ? 0 : tbm_xattr_list(fs->views, t, NULL, 0);
    char *buf = size ? malloc(size) : NULL;
    int r = 0;

    if (size && !buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (name)
        r = tbm_xattr_get(fs->views, t, name, buf, size, &len);
    else if (size >= len)
        tbm_xattr_list(fs->views, t, buf, size);
    if (r < 0)
        fuse_reply_err(req, status_errno(r));
    else if (size == 0)
        fuse_reply_xattr(req, len);
    else if (len > size)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, buf, len);
    free(buf);
}

/* Attributes live on tensor directories and their files; the root's files
 * and directories have none. size 0 asks for the length alone. Whether
 * user.tbm.density is there, and its value, need the tensor's statistics:
 * until they are computed, on the statistics' threads, or not waited for
 * (absent until they are). */
static void xattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    const struct tbm_fs *fs = fs_of(req);
    struct node n;

    if (!decode_ino(fs, ino, &n)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (n.tensor < 0) {
        if (name)
            fuse_reply_err(req, ENODATA);
        else if (size == 0)
            fuse_reply_xattr(req, 0);
        else
            fuse_reply_buf(req, NULL, 0);
        return;
    }
    size_t t = (size_t)n.tensor;
    if (tbm_views_stats_nowait(fs->views)) {
        if (tbm_xattr_asks_stats(name))
            ask_stats(fs, req, (long)t);
        tbm_fs_reply_xattr(fs, req, t, name, size);
        return;
    }
    if (fs->stats && !tbm_views_stats_ready(fs->views, t) &&
        tbm_deferred_push_xattr(fs->stats, req, t, name, size))
        return;
    tbm_fs_reply_xattr(fs, req, t, name, size);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    xattr(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    xattr(req, ino, NULL, size);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    (void)ino, (void)name, (void)value, (void)size, (void)flags;
    erofs(req);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino, (void)name;
    erofs(req);
}

const struct fuse_lowlevel_ops tbm_fs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .statfs = op_statfs,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .create = op_create,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
};
