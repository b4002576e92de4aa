/* Opening a manifest's "file" entries so that none can reach outside the
 * model directory, whatever the manifest or the directory's links say. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
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

/* RESOLVE_BENEATH makes the kernel refuse any step, symlinks included, that
 * leaves dirfd, so a link that stays inside works and one that leaves fails
 * with EXDEV. O_NONBLOCK keeps a FIFO from blocking the open. The file stays
 * open from mount on, so swapping it afterwards changes nothing we serve. */
int tbm_manifest_open_file(int dirfd, const char *file, size_t len, const char **why)
{
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_BENEATH,
    };
    struct stat st;

    if (len == 0 || strlen(file) != len) {
        *why = "\"file\" is empty or holds a NUL byte";
        return -1;
    }
    if (file[0] == '/') {
        *why = "\"file\" is an absolute path";
        return -1;
    }
    if (has_dotdot(file, len)) {
        *why = "\"file\" has a '..' component";
        return -1;
    }
    int fd = (int)syscall(SYS_openat2, dirfd, file, &how, sizeof(how));
    if (fd < 0) {
        *why = errno == EXDEV ? "\"file\" resolves outside the model directory" : strerror(errno);
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = "\"file\" is not a regular file";
        return -1;
    }
    return fd;
}
