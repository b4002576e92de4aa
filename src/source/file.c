/* The local-file source: a container, a bare blob or one manifest file, read
 * with pread; its descriptor is what the FUSE layer splices from. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tbm/source.h"

static int file_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, size_t *got)
{
    size_t done = 0;

    *got = 0;
    while (done < len) {
        if (off + done > (uint64_t)INT64_MAX)
            return TBM_ERR_IO;
        ssize_t n = pread(src->fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return TBM_ERR_IO;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return 0;
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

static int file_identify(struct tbm_source *src, struct tbm_source_id *out)
{
    struct stat st;

    if (fstat(src->fd, &st) < 0)
        return TBM_ERR_IO;
    id_of(&st, out);
    return 0;
}

static void file_close(struct tbm_source *src)
{
    close(src->fd);
    free(src->name);
    free(src);
}

static const struct tbm_source_ops file_ops = {
    .read = file_read,
    .identify = file_identify,
    .close = file_close,
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
