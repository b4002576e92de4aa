/* tbmfs: mounts a Tensorbit model read-only as a tree of tensors, or checks
 * models with --check. Wires the command line to the jobs (src/cli/). */
#include <cblas.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tbm/log.h"

/* libfuse's messages (an option it does not know, a failed mount) take the
 * same way as ours. It writes some lines in pieces: they are gathered, per
 * thread, up to the newline. */
static void fuse_to_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
    static _Thread_local char line[2048];
    static _Thread_local size_t used;
    int n = vsnprintf(line + used, sizeof(line) - used, fmt, ap);

    if (n < 0)
        return;
    used += (size_t)n < sizeof(line) - used ? (size_t)n : sizeof(line) - 1 - used;
    if (used > 0 && line[used - 1] != '\n' && used < sizeof(line) - 1)
        return;
    tbm_log(level <= FUSE_LOG_ERR       ? TBM_LOG_ERROR
            : level <= FUSE_LOG_WARNING ? TBM_LOG_WARNING
                                        : TBM_LOG_INFO,
            "%.*s", (int)used, line);
    used = 0;
}

int main(int argc, char *argv[])
{
    struct fuse_args args;
    struct tbm_cli cli;
    int status;

    fuse_set_log_func(fuse_to_log);
    /* The self-test compares a single-threaded sparse kernel with BLAS, on a
     * thread of its own beside the FUSE workers; more BLAS threads would only
     * fight those workers for the CPUs (and, started at the first call, spin
     * through the open of the model). */
    openblas_set_num_threads(1);
    /* Snapshots of large files are allocated at open and freed at release,
     * often by another worker thread: a fixed threshold keeps them mapped
     * apart, so freeing one gives its memory back instead of leaving it in
     * some thread's arena. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    status = tbm_cli_parse(argc, argv, &cli, &args);
    tbm_cli_hide_secrets(argc, argv);
    if (status != 0)
        goto out;
    if (cli.logfile) {
        char why[256];
        if (tbm_log_to_file(cli.logfile, why, sizeof(why)) < 0) {
            tbm_log(TBM_LOG_ERROR, "logfile=%s: %s", cli.logfile, why);
            status = TBM_EXIT_USAGE;
            goto out;
        }
    }
    if (cli.help) {
        tbm_cli_help(argv[0]);
    } else if (cli.version) {
        printf("tbmfs version %s\nFUSE library version %s\n", TBMFS_VERSION, fuse_pkgversion());
        fflush(stdout); /* fuse_lowlevel_version writes through another stream */
        fuse_lowlevel_version();
    } else if (cli.check) {
        status = tbm_check_run(&cli);
    } else {
        status = tbm_mount_run(&cli, &args);
    }
out:
    tbm_cli_free(&cli);
    fuse_opt_free_args(&args);
    return status;
}
