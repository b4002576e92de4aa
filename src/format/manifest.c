/* A manifest directory: its manifest.json, and its "file" entries opened so
 * that none can reach outside the model directory, whatever the manifest or
 * the directory's links say. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool has_dotdot(const char *file, size_t len)
{
    size_t start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i == len || file[i] == '/') {
            if (i - start == 2 && file[start] == '.' && file[start + 1] == '.')
                return true;
            start = i + 1;
        }
    }
    return false;
}

/* Opens an O_PATH descriptor for reading through its /proc link, which
 * reaches the very inode it names, whatever the path says by now. */
static int reopen_path_fd(int pathfd)
{
    char link[64];

    snprintf(link, sizeof(link), "/proc/self/fd/%d", pathfd);
    return open(link, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
}

/* RESOLVE_BENEATH refuses every absolute symlink, even one that points back
 * inside the directory, which the contract allows: for those the target is
 * opened, and kept only if its real path lies under the directory's. */
static int open_absolute_link(int dirfd, const char *dirpath, const char *file, const char **why)
{
    char real[PATH_MAX + 1], link[64];
    size_t dlen = strlen(dirpath);

    int pathfd = openat(dirfd, file, O_PATH | O_CLOEXEC);
    if (pathfd < 0) {
        *why = strerror(errno);
        return -1;
    }
    snprintf(link, sizeof(link), "/proc/self/fd/%d", pathfd);
    ssize_t n = readlink(link, real, PATH_MAX);
    bool inside =
        n > 0 && (size_t)n > dlen && memcmp(real, dirpath, dlen) == 0 && real[dlen] == '/';
    int fd = inside ? reopen_path_fd(pathfd) : -1;
    if (!inside)
        *why = "it resolves outside the model directory";
    else if (fd < 0)
        *why = strerror(errno);
    close(pathfd);
    return fd;
}

/* RESOLVE_BENEATH makes the kernel refuse any step, symlinks included, that
 * leaves dirfd, so a link that stays inside works and one that leaves fails
 * with EXDEV. O_NONBLOCK keeps a FIFO from blocking the open. The file stays
 * open from mount on, so swapping it afterwards changes nothing we serve. */
int tbm_manifest_open_file(int dirfd, const char *dirpath, const char *file, size_t len,
                           const char **why)
{
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_BENEATH,
    };
    struct stat st;

    if (len == 0 || strlen(file) != len) {
        *why = "the name is empty or holds a NUL byte";
        return -1;
    }
    if (file[0] == '/') {
        *why = "an absolute path is not allowed";
        return -1;
    }
    if (has_dotdot(file, len)) {
        *why = "a '..' component is not allowed";
        return -1;
    }
    int fd = (int)syscall(SYS_openat2, dirfd, file, &how, sizeof(how));
    if (fd < 0 && errno == EXDEV)
        fd = open_absolute_link(dirfd, dirpath, file, why);
    else if (fd < 0)
        *why = strerror(errno);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = "not a regular file";
        return -1;
    }
    return fd;
}

int tbm_manifest_reopen(void *ctx, const char *file)
{
    const struct tbm_model *m = ctx;
    const char *why;

    return tbm_manifest_open_file(m->dirfd, m->path, file, strlen(file), &why);
}

/* What a directory without manifest.json holds instead, for its refusal:
 * its .tbm files (a tb-prune output directory), else how many .tb files. */
static int refuse_without_manifest(struct tbm_opener *o)
{
    char tbm[256] = "";
    size_t ntbm = 0, ntb = 0;
    int fd = openat(o->m->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    struct dirent *e;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return tbm_open_fail(o, TBM_ERR_SOURCE, "no manifest.json in the directory");
    }
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".tbm") == 0) {
            /* the first in name order, so that the message does not depend
             * on the order readdir happens to give */
            if (ntbm++ == 0 || strcmp(e->d_name, tbm) < 0)
                snprintf(tbm, sizeof(tbm), "%s", e->d_name);
        } else if (len > 3 && strcmp(e->d_name + len - 3, ".tb") == 0) {
            ntb++;
        }
    }
    closedir(d);
    if (ntbm == 1)
        return tbm_open_fail(o, TBM_ERR_SOURCE,
                             "no manifest.json: the directory holds %s: mount that file", tbm);
    if (ntbm > 1)
        return tbm_open_fail(o, TBM_ERR_SOURCE,
                             "no manifest.json: the directory holds %zu .tbm files (%s, ...): "
                             "mount one of those files",
                             ntbm, tbm);
    if (ntb > 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE,
                             "no manifest.json: the directory holds %zu .tb file%s but no "
                             "manifest.json",
                             ntb, ntb == 1 ? "" : "s");
    return tbm_open_fail(o, TBM_ERR_SOURCE, "no manifest.json in the directory");
}

/* manifest.json is opened as its entries are: beneath the directory, and
 * only if what was opened is a regular file, so that a link to a private
 * file elsewhere, or to a device, is never read. */
int tbm_manifest_open(struct tbm_opener *o)
{
    struct tbm_source *src;
    const char *why;
    int r;

    int fd = tbm_manifest_open_file(o->m->dirfd, o->m->path, "manifest.json",
                                    strlen("manifest.json"), &why);
    if (fd < 0 && errno == ENOENT)
        return refuse_without_manifest(o);
    if (fd < 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "manifest.json refused: %s", why);
    if ((r = tbm_source_from_fd(fd, "manifest.json", &src, &why)) < 0)
        return tbm_open_fail(o, r, "cannot read manifest.json: %s",
                             r == TBM_ERR_NOMEM ? "out of memory" : why);
    r = tbm_index_read(o, src, 0, src->id.size, "manifest.json");
    tbm_source_close(src);
    return r;
}
