/* Reads the five files of a tokenizer directory once, each bounded and
 * checked to be a regular file before a byte is read, so that nothing put in
 * their place (a FIFO, /dev/zero behind a symlink, a directory, a loop) can
 * make the mount hang or read without end. */
#include "tbm/vocab.h"
#include "tbm/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const file_names[TBM_TOKENIZER_FILES] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    "tokenizer.model"};

const char *tbm_tokenizer_file_name(enum tbm_tokenizer_file f)
{
    return f < TBM_TOKENIZER_FILES ? file_names[f] : NULL;
}

/* Sets *why to a malloc'd line; returns status. */
static int fail(char **why, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(why, fmt, ap) < 0)
        *why = NULL;
    va_end(ap);
    return *why ? status : TBM_ERR_NOMEM;
}

static const char *kind_of(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

/* Reads all of fd (a regular file of st_size bytes when opened) into *bytes,
 * NUL-terminated: the file may grow meanwhile, so the read is bounded by the
 * limit, not by the size seen. */
static int read_all(int fd, const char *path, char **bytes, size_t *len, char **why)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);

    if (!buf)
        return TBM_ERR_NOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > TBM_TOKENIZER_FILE_MAX)
                break;
            size_t grown = cap * 2 > (size_t)TBM_TOKENIZER_FILE_MAX + 1
                               ? (size_t)TBM_TOKENIZER_FILE_MAX + 1
                               : cap * 2;
            char *p = realloc(buf, grown + 1);
            if (!p) {
                free(buf);
                return TBM_ERR_NOMEM;
            }
            buf = p;
            cap = grown;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int err = errno;
            free(buf);
            return fail(why, TBM_ERR_SOURCE, "%s: %s", path, strerror(err));
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (n > TBM_TOKENIZER_FILE_MAX) {
        free(buf);
        return fail(why, TBM_ERR_SOURCE, "%s: larger than %u MiB", path,
                    TBM_TOKENIZER_FILE_MAX >> 20);
    }
    buf[n] = '\0';
    *bytes = buf;
    *len = n;
    return 0;
}

/* One file of the directory: 1 when it is not there. */
static int read_file(int dirfd, const char *dir, enum tbm_tokenizer_file f,
                     struct tbm_tokenizer_files *out, char **why)
{
    char *path;
    int r;

    if (asprintf(&path, "%s/%s", dir, file_names[f]) < 0)
        return TBM_ERR_NOMEM;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer; a regular file ignores it. */
    int fd = openat(dirfd, file_names[f], O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        r = err == ENOENT ? 1
                          : fail(why, TBM_ERR_SOURCE, "%s: %s", path,
                                 err == ELOOP ? "a symlink loop" : strerror(err));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        r = fail(why, TBM_ERR_SOURCE, "%s: %s", path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        r = fail(why, TBM_ERR_SOURCE, "%s: is %s, not a regular file", path, kind_of(st.st_mode));
        goto out_close;
    }
    if (st.st_size > (off_t)TBM_TOKENIZER_FILE_MAX) {
        r = fail(why, TBM_ERR_SOURCE, "%s: %lld bytes, larger than %u MiB", path,
                 (long long)st.st_size, TBM_TOKENIZER_FILE_MAX >> 20);
        goto out_close;
    }
    r = read_all(fd, path, &out->file[f].bytes, &out->file[f].len, why);
    out->file[f].present = r == 0;
out_close:
    close(fd);
out:
    free(path);
    return r;
}

int tbm_tokenizer_files_read(const char *dir, struct tbm_tokenizer_files *out, char **why)
{
    int r = 0;

    memset(out, 0, sizeof(*out));
    *why = NULL;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dirfd < 0) {
        int err = errno;
        return fail(why, TBM_ERR_SOURCE, "%s: %s", dir,
                    err == ENOTDIR ? "not a directory"
                    : err == ELOOP ? "a symlink loop"
                                   : strerror(err));
    }
    for (int f = 0; f < TBM_TOKENIZER_FILES; f++) {
        r = read_file(dirfd, dir, (enum tbm_tokenizer_file)f, out, why);
        if (r == 1 && f == TBM_TOKENIZER_JSON) {
            r = fail(why, 1, "%s: no tokenizer.json", dir);
            break;
        }
        if (r < 0)
            break;
        r = 0;
    }
    close(dirfd);
    if (r != 0)
        tbm_tokenizer_files_free(out);
    return r;
}

void tbm_tokenizer_files_free(struct tbm_tokenizer_files *files)
{
    for (int f = 0; f < TBM_TOKENIZER_FILES; f++) {
        free(files->file[f].bytes);
        files->file[f].bytes = NULL;
        files->file[f].len = 0;
        files->file[f].present = false;
    }
}
