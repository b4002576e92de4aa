/* The one message channel of the program: every part (sources, format,
 * views, FUSE, the command line) reports through tbm_log, and main alone
 * decides where the lines go: stderr while in the foreground, syslog
 * (LOG_DAEMON, ident "tbmfs") once in the background, or a log file. */
#ifndef TBM_LOG_H
#define TBM_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum tbm_log_level {
    TBM_LOG_ERROR,   /* a request or the program failed */
    TBM_LOG_WARNING, /* something the user should know; the work goes on */
    TBM_LOG_INFO,
};

/* Where lines go from now on. stderr is the default; syslog is for a daemon
 * in the background, whose stderr is /dev/null. */
void tbm_log_to_stderr(void);
void tbm_log_to_syslog(void);

/* Appends lines to path (created 0600 if missing), each beginning with an
 * ISO 8601 UTC timestamp, in place of stderr or syslog for the rest of the
 * run. Only a regular file the user running owns, never through a symlink,
 * and opened without blocking (a FIFO is refused, not waited on). 0, or -1
 * with nothing changed and the reason in why. */
int tbm_log_to_file(const char *path, char *why, size_t whylen);

/* Logs one line. The text is made valid UTF-8 with no control bytes
 * (%XX in their place) whatever it quotes, and "tbmfs: " leads it on stderr.
 * Safe from any thread. */
void tbm_log(enum tbm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbm_vlog(enum tbm_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#endif
