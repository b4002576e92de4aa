/* Files named by the user, read without blocking and up to a bound
 * (named.h). */
#include "named.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tbm/status.h"

const char *tbm_named_kind(mode_t mode)
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

/* Reads all of fd into out: the file may grow meanwhile, so the read is
 * bounded by max, not by the size fstat saw. */
static int read_all(int fd, const char *shown, size_t max, struct tbm_named *out, char *why,
                    size_t whylen)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);

    if (!buf)
        return TBM_ERR_NOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max)
                break;
            size_t grown = cap * 2 > max + 1 ? max + 1 : cap * 2;
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
            snprintf(why, whylen, "%s: %s", shown, strerror(err));
            return TBM_ERR_SOURCE;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (n > max) {
        explicit_bzero(buf, n);
        free(buf);
        snprintf(why, whylen, "%s: larger than %zu MiB", shown, max >> 20);
        return TBM_ERR_SOURCE;
    }
    buf[n] = '\0';
    out->bytes = buf;
    out->len = n;
    return 0;
}

int tbm_named_read(int dirfd, const char *name, const char *shown, size_t max,
                   struct tbm_named *out, char *why, size_t whylen)
{
    int r;

    memset(out, 0, sizeof(*out));
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer; a regular file ignores it. */
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        snprintf(why, whylen, "%s: %s", shown, err == ELOOP ? "a symlink loop" : strerror(err));
        return err == ENOENT ? 1 : TBM_ERR_SOURCE;
    }
    if (fstat(fd, &out->st) != 0) {
        snprintf(why, whylen, "%s: %s", shown, strerror(errno));
        r = TBM_ERR_SOURCE;
    } else if (!S_ISREG(out->st.st_mode)) {
        snprintf(why, whylen, "%s: is %s, not a regular file", shown,
                 tbm_named_kind(out->st.st_mode));
        r = TBM_ERR_SOURCE;
    } else if (out->st.st_size > (off_t)max) {
        snprintf(why, whylen, "%s: %lld bytes, larger than %zu MiB", shown,
                 (long long)out->st.st_size, max >> 20);
        r = TBM_ERR_SOURCE;
    } else {
        r = read_all(fd, shown, max, out, why, whylen);
    }
    close(fd);
    return r;
}

void tbm_named_free(struct tbm_named *out)
{
    if (out->bytes)
        explicit_bzero(out->bytes, out->len);
    free(out->bytes);
    out->bytes = NULL;
    out->len = 0;
}
