/* The command line of tbmfs, the jobs main runs from it (check, mount) and
 * the terminal progress line they share. Not installed: the daemon's own. */
#ifndef TBM_CLI_H
#define TBM_CLI_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/model.h"

/* What the command line asked for. */
struct tbm_cli {
    char **sources; /* --check: every SOURCE; a mount: one */
    size_t nsources;
    char *mountpoint;
    bool check, help, version;
    bool strict, nosplice;
    unsigned batch;       /* self-test batch */
    unsigned max_read;    /* bytes per read request */
    unsigned max_threads; /* FUSE workers at most */
    bool set_max_threads; /* given: passed on to libfuse as given */
    char *logfile;
    char *tokenizer; /* -o tokenizer=: a directory, "none", or NULL (beside SOURCE) */
    struct tbm_remote_options *remote; /* for a URL SOURCE: the source layer's own options */
    /* -o uid=, gid=, umask=: in place of the source's owner and modes */
    unsigned uid, gid, umask;
    bool set_uid, set_gid, set_umask;
    struct fuse_cmdline_opts fuse; /* -f, -d, -s and libfuse's loop options */
};

/* Exit statuses of the command line's refusals (contract: "Command line"). */
#define TBM_EXIT_USAGE 2

/* Parses argv into cli, keeping in args what goes on to libfuse (its mount
 * and session options, already checked to be ones it knows). 0, or an exit
 * status after one line on stderr saying what was refused. */
int tbm_cli_parse(int argc, char *argv[], struct tbm_cli *cli, struct fuse_args *args);
void tbm_cli_free(struct tbm_cli *cli);

/* Overwrites, in the process's own arguments (what ps and /proc/PID/cmdline
 * show), what remote sources' options and URLs carry as secrets with '*'
 * (tbm_source_hide_secrets). Call once argv is parsed: nothing reads it
 * after. */
void tbm_cli_hide_secrets(int argc, char *argv[]);

/* Prints --help: the usage, the remote schemes and every documented option,
 * from the table of options and the source layer's (tbm_remote_option). */
void tbm_cli_help(const char *prog);

/* Forces the kernel level of TBMFS_KERNELS; -1 after one line on stderr
 * when the CPU lacks it. */
int tbm_cli_select_isa(enum tbm_isa *isa);

struct tbm_tokenizer_files;

/* The tokenizer a mount of cli's source uses, read into files (*found;
 * tbm_tokenizer_files_free them after). *note is a malloc'd line for
 * model.json when a directory beside the source could not be used. 0, an
 * exit status after one line on stderr (TBM_EXIT_USAGE: -o tokenizer= names
 * a directory that cannot be used), or 1 when out of memory. */
int tbm_cli_tokenizer(const struct tbm_cli *cli, struct tbm_tokenizer_files *files, bool *found,
                      char **note);

/* --check: checks every source, printing its problems and warnings; returns
 * the worst status (2 SOURCE unusable, over 1 problems, over 0 none). */
int tbm_check_run(const struct tbm_cli *cli);

/* Mounts cli's source on its mount point and serves it until unmounted;
 * the exit status. */
int tbm_mount_run(const struct tbm_cli *cli, struct fuse_args *args);

/* A line on stderr, on a terminal only, that says how far a long job is:
 * shown once the job has run a second, redrawn twice a second, erased at
 * stop. line() writes its text from what the job has published. */
struct tbm_progress;
struct tbm_progress *tbm_progress_start(void (*line)(const void *arg, double secs, char *buf,
                                                     size_t len),
                                        const void *arg);
void tbm_progress_stop(struct tbm_progress *p);

/* tbm_model_open with a progress line. */
int tbm_open_with_progress(const char *source, struct tbm_open_options *opts,
                           struct tbm_model **out, char *err, size_t errlen);

#endif
