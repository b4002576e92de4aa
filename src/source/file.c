/* The local-file source: a container, a bare blob or one manifest file, read
 * with pread; its descriptor is what the FUSE layer splices from, and its
 * page cache, mapped, what a probe looks at in place. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tbm/source.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels say EINVAL */
#endif

static void id_of(const struct stat *st, struct tbm_source_id *out);

/* The descriptor to read a detached source through: opened again, and only
 * if it is still the same inode (a file swapped for another is a change). */
static int open_fd(struct tbm_source *src)
{
    struct stat st;

    if (src->fd >= 0)
        return src->fd;
    int fd = src->reopen(src->reopen_ctx, src->name);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_dev != src->id.dev ||
        (uint64_t)st.st_ino != src->id.ino) {
        close(fd);
        return -1;
    }
    return fd;
}

static void close_fd(struct tbm_source *src, int fd)
{
    if (fd != src->fd)
        close(fd);
}

static int file_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, size_t *got)
{
    size_t done = 0;
    int fd = open_fd(src);

    *got = 0;
    if (fd < 0)
        return TBM_ERR_IO;
    int r = 0;
    while (done < len && r == 0) {
        if (off + done > (uint64_t)INT64_MAX) {
            r = TBM_ERR_IO;
            break;
        }
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            r = TBM_ERR_IO;
        else if (n == 0)
            break;
        else
            done += (size_t)n;
    }
    close_fd(src, fd);
    *got = done;
    return r;
}

static void id_of(const struct stat *st, struct tbm_source_id *out)
{
    memset(out, 0, sizeof(*out));
    out->size = (uint64_t)st->st_size;
    out->dev = (uint64_t)st->st_dev;
    out->ino = (uint64_t)st->st_ino;
    out->mtime = st->st_mtim;
    out->ctime = st->st_ctim;
}

static bool unchecked;
static pthread_once_t unchecked_once = PTHREAD_ONCE_INIT;

static void read_unchecked(void)
{
    const char *env = getenv("TBMFS_NO_CHANGE_CHECK");

    unchecked = env && strcmp(env, "1") == 0;
}

static int file_identify(struct tbm_source *src, struct tbm_source_id *out)
{
    struct stat st;

    /* For the benchmark that prices the check (scripts/bench.py): the
     * identity recorded at open is taken for the file's, with no fstat. */
    pthread_once(&unchecked_once, read_unchecked);
    if (unchecked) {
        *out = src->id;
        return 0;
    }
    int fd = open_fd(src);

    if (fd < 0) {
        /* gone, or another file by now: a change, not a failure to read */
        memset(out, 0, sizeof(*out));
        return 0;
    }
    int r = fstat(fd, &st);
    close_fd(src, fd);
    if (r < 0)
        return TBM_ERR_IO;
    id_of(&st, out);
    return 0;
}

void tbm_source_detach(struct tbm_source *src, int (*reopen)(void *ctx, const char *name),
                       void *ctx)
{
    if (src->fd < 0)
        return;
    src->reopen = reopen;
    src->reopen_ctx = ctx;
    close(src->fd);
    src->fd = -1;
}

/* A look over a mapping of the file faults (SIGBUS) where the file was cut
 * short under it: the thread that looked jumps back out. Any other SIGBUS
 * (another address, or one sent) is not ours: it gets the default action,
 * as it would have without this handler. */
static __thread sigjmp_buf *probe_jump;
static __thread const unsigned char *probe_from, *probe_to;
static pthread_once_t sigbus_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *ctx)
{
    const unsigned char *at = info->si_addr;

    (void)ctx;
    if (probe_jump && info->si_code == BUS_ADRERR && at >= probe_from && at < probe_to)
        siglongjmp(*probe_jump, 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* SA_NODEFER: SIGBUS stays unblocked in the handler, so the jump out needs
 * no signal mask restored (sigsetjmp saving it costs a system call a look). */
static void catch_sigbus(void)
{
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};

    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

/* The whole file mapped read-only, once; NULL when it cannot be (tried
 * once: MAP_FAILED is kept). Its pages are the page cache's: mapping takes
 * no memory of its own. */
static unsigned char *mapping(struct tbm_source *src)
{
    void *map = atomic_load(&src->map), *none = NULL;

    if (map || src->fd < 0 || src->id.size == 0 || src->id.size > SIZE_MAX)
        return map == MAP_FAILED ? NULL : map;
    map = mmap(NULL, (size_t)src->id.size, PROT_READ, MAP_SHARED, src->fd, 0);
    if (!atomic_compare_exchange_strong(&src->map, &none, map)) {
        if (map != MAP_FAILED)
            munmap(map, (size_t)src->id.size);
        map = none;
    }
    return map == MAP_FAILED ? NULL : map;
}

/* Bytes probed between two drops of the mapping's page tables. */
#define PROBE_MAPPED_MAX (16u << 20)

/* look(bytes, arg), or false when it faulted on the pages [from, to) it
 * looks at: nothing but the answer lives across the jump. */
static bool guarded(bool (*look)(const unsigned char *bytes, void *arg), const unsigned char *bytes,
                    void *arg, const unsigned char *from, const unsigned char *to)
{
    volatile bool yes = false;
    sigjmp_buf jump;

    pthread_once(&sigbus_once, catch_sigbus);
    if (sigsetjmp(jump, 0) == 0) {
        probe_from = from;
        probe_to = to;
        probe_jump = &jump;
        yes = look(bytes, arg);
    }
    probe_jump = NULL;
    return yes;
}

static bool file_probe(struct tbm_source *src, uint64_t off, size_t len,
                       bool (*look)(const unsigned char *bytes, void *arg), void *arg)
{
    unsigned char *map = mapping(src);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (!map || off > src->id.size || len > src->id.size - off || len == 0)
        return false;
    size_t first = (size_t)off / page * page, end = ((size_t)off + len + page - 1) / page * page;
    /* populated up front: a fault per page would cost more than the copy a
     * read makes; a file cut short since fails here, with no SIGBUS */
    if (madvise(map + first, end - first, MADV_POPULATE_READ) != 0 && errno != EINVAL)
        return false;
    bool yes = guarded(look, map + off, arg, map + first, map + end);
    /* Now and then the page tables go (the page cache stays), so that the
     * daemon's RSS does not grow with the model; not after every probe: each
     * drop interrupts every other CPU to flush its TLB. Another thread still
     * looking faults its pages in again, as they were. */
    if (atomic_fetch_add(&src->mapped, end - first) + (end - first) >= PROBE_MAPPED_MAX) {
        atomic_store(&src->mapped, 0);
        madvise(map, (size_t)src->id.size, MADV_DONTNEED);
    }
    return yes;
}

static void file_close(struct tbm_source *src)
{
    void *map = atomic_load(&src->map);

    if (map && map != MAP_FAILED)
        munmap(map, (size_t)src->id.size);
    if (src->fd >= 0)
        close(src->fd);
    free(src->name);
    free(src);
}

static const struct tbm_source_ops file_ops = {
    .read = file_read,
    .identify = file_identify,
    .close = file_close,
    .probe = file_probe,
};

int tbm_source_from_fd(int fd, const char *name, struct tbm_source **out, const char **why)
{
    struct stat st;
    struct tbm_source *src;

    *out = NULL;
    if (fstat(fd, &st) < 0) {
        *why = strerror(errno);
        close(fd);
        return TBM_ERR_SOURCE;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        close(fd);
        return TBM_ERR_SOURCE;
    }
    if (!(src = calloc(1, sizeof(*src))) || !(src->name = strdup(name))) {
        free(src);
        close(fd);
        return TBM_ERR_NOMEM;
    }
    src->ops = &file_ops;
    src->fd = fd;
    id_of(&st, &src->id);
    *out = src;
    return 0;
}

int tbm_source_open_file(const char *path, struct tbm_source **out, const char **why)
{
    /* Without blocking, and checked on what was opened: the path may have
     * become a FIFO since the caller looked at it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

    *out = NULL;
    if (fd < 0) {
        *why = strerror(errno);
        return TBM_ERR_SOURCE;
    }
    return tbm_source_from_fd(fd, path, out, why);
}
