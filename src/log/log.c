/* The message channel: one destination at a time for every line the
 * program prints about its work (include/tbm/log.h). */
#include "tbm/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/named.h"
#include "tbm/text.h"

enum dest { DEST_STDERR, DEST_SYSLOG, DEST_FILE };

/* Lines are written whole under the lock, so that two threads' lines never
 * interleave and a switch of destination never splits one. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static enum dest dest = DEST_STDERR;
static int log_fd = -1;

static void set_dest(enum dest d, int fd)
{
    pthread_mutex_lock(&lock);
    if (dest == DEST_SYSLOG && d != DEST_SYSLOG)
        closelog();
    if (log_fd >= 0 && log_fd != fd)
        close(log_fd);
    log_fd = fd;
    dest = d;
    if (d == DEST_SYSLOG)
        openlog("tbmfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
    pthread_mutex_unlock(&lock);
}

void tbm_log_to_stderr(void)
{
    set_dest(DEST_STDERR, -1);
}

void tbm_log_to_syslog(void)
{
    /* a log file, once chosen, stays: it is what the user asked for */
    if (dest != DEST_FILE)
        set_dest(DEST_SYSLOG, -1);
}

int tbm_log_to_file(const char *path, char *why, size_t whylen)
{
    /* O_NOFOLLOW: a symlink planted where the log goes would have the lines
     * appended anywhere; O_NONBLOCK: a FIFO with no reader fails (ENXIO)
     * instead of waiting for one */
    int fd = open(
        path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK, 0600);
    struct stat st;

    if (fd < 0) {
        int err = errno;
        snprintf(why, whylen, "%s",
                 err == ELOOP    ? "a symbolic link: name the file itself"
                 : err == EISDIR ? "is a directory, not a regular file"
                 : err == ENXIO  ? "not a regular file (a FIFO or a device with no reader)"
                                 : strerror(err));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, whylen, "%s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "is %s, not a regular file", tbm_named_kind(st.st_mode));
    } else if (st.st_uid != geteuid()) {
        snprintf(why, whylen, "owned by uid %u, not by uid %u who mounts: refused",
                 (unsigned)st.st_uid, (unsigned)geteuid());
    } else {
        set_dest(DEST_FILE, fd);
        return 0;
    }
    close(fd);
    return -1;
}

static int syslog_priority(enum tbm_log_level level)
{
    switch (level) {
    case TBM_LOG_ERROR:
        return LOG_ERR;
    case TBM_LOG_WARNING:
        return LOG_WARNING;
    default:
        return LOG_INFO;
    }
}

/* Writes all of line to fd; a short write to a pipe or file is finished. */
static void write_all(int fd, const char *line, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, line, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        line += n;
        len -= (size_t)n;
    }
}

void tbm_log(enum tbm_log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tbm_vlog(level, fmt, ap);
    va_end(ap);
}

void tbm_vlog(enum tbm_log_level level, const char *fmt, va_list ap)
{
    char raw[2048], text[2048], line[2200];
    int n = vsnprintf(raw, sizeof(raw), fmt, ap);
    size_t len;

    if (n < 0)
        return;
    /* libfuse's lines end in a newline of their own */
    len = strnlen(raw, sizeof(raw));
    while (len > 0 && raw[len - 1] == '\n')
        len--;
    tbm_text_clean(text, sizeof(text), raw, len);
    pthread_mutex_lock(&lock);
    switch (dest) {
    case DEST_SYSLOG:
        syslog(LOG_DAEMON | syslog_priority(level), "%s", text);
        break;
    case DEST_FILE: {
        struct tm tm;
        time_t now = time(NULL);
        gmtime_r(&now, &tm);
        n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02dZ %s\n", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, text);
        write_all(log_fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        break;
    }
    case DEST_STDERR:
        n = snprintf(line, sizeof(line), "tbmfs: %s\n", text);
        write_all(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        break;
    }
    pthread_mutex_unlock(&lock);
}
