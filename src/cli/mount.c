/* The mount job: opens the model and its views, checks the mount point and
 * /dev/fuse, mounts, goes to the background and serves until unmounted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cli.h"
#include "fuse/fs.h"
#include "tbm/log.h"
#include "tbm/text.h"
#include "tbm/source.h"
#include "tbm/view.h"
#include "tbm/vocab.h"

/* A manifest keeps one open file per tensor for the whole mount, so the
 * soft limit on descriptors is raised as far as the hard one allows. */
static void raise_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Every file and directory belongs to the source's owner and group, files
 * with the source's read bits, directories those plus the matching execute
 * bits: a private model stays private under -o allow_other (the kernel
 * checks them: default_permissions). -o uid, gid and umask override. */
static void set_ownership(struct tbm_fs *fs, const struct tbm_model *model,
                          const struct tbm_cli *cli)
{
    unsigned uid, gid, mode;

    tbm_model_owner(model, &uid, &gid, &mode);
    fs->uid = cli->set_uid ? cli->uid : uid;
    fs->gid = cli->set_gid ? cli->gid : gid;
    if (cli->set_umask) {
        fs->file_mode = 0444 & ~cli->umask;
        fs->dir_mode = 0555 & ~cli->umask;
    } else {
        fs->file_mode = mode & 0444;
        fs->dir_mode = fs->file_mode | (fs->file_mode >> 2);
    }
}

/* Mounting over a directory that holds files, or over another mount, hides
 * them until unmounted: allowed, as mount does, but said. */
static void warn_mountpoint(const char *mountpoint, const struct stat *st)
{
    struct stat parent;
    char *up = NULL;
    size_t entries = 0;
    DIR *d = opendir(mountpoint);

    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
        closedir(d);
    }
    if (entries > 0)
        tbm_log(TBM_LOG_WARNING, "warning: %s is not empty: the mount hides its %zu entr%s",
                mountpoint, entries, entries == 1 ? "y" : "ies");
    /* a mount point sits on another device than its parent, or is the
     * parent's own inode (the root of a file system) */
    if (asprintf(&up, "%s/..", mountpoint) >= 0 && stat(up, &parent) == 0 &&
        (parent.st_dev != st->st_dev || parent.st_ino == st->st_ino))
        tbm_log(TBM_LOG_WARNING, "warning: %s is already a mount point: the new mount hides it",
                mountpoint);
    free(up);
}

/* The mount point must be a directory we can mount on. A FUSE mount whose
 * daemon died answers ENOTCONN: a mount stacked on it would be the one the
 * next fusermount3 -u removes, so it is refused. */
static bool mountpoint_usable(const char *mountpoint)
{
    struct stat st;
    struct statfs sf;

    /* stat of a dead FUSE mount may still be answered from the kernel's
     * cache of its attributes; statfs always asks the daemon */
    if (stat(mountpoint, &st) != 0 || statfs(mountpoint, &sf) != 0) {
        if (errno == ENOTCONN)
            tbm_log(TBM_LOG_ERROR,
                    "%s: a mount whose daemon is gone: unmount it first (fusermount3 -u %s)",
                    mountpoint, mountpoint);
        else
            tbm_log(TBM_LOG_ERROR, "%s: %s", mountpoint, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        tbm_log(TBM_LOG_ERROR, "%s: mount point is not a directory", mountpoint);
        return false;
    }
    warn_mountpoint(mountpoint, &st);
    return true;
}

/* libfuse's own word for a /dev/fuse the user may not open is "Permission
 * denied"; this says what to do. */
static bool fuse_device_usable(void)
{
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);

    if (fd >= 0) {
        close(fd);
        return true;
    }
    if (errno == EACCES || errno == EPERM)
        tbm_log(TBM_LOG_ERROR,
                "cannot open /dev/fuse: %s. Mounting needs read and write access to it: join the "
                "group that owns it (ls -l /dev/fuse; often \"fuse\"), or have it made 0666, or "
                "mount as root with -o allow_other so that others can read the mount",
                strerror(errno));
    else
        tbm_log(TBM_LOG_ERROR, "cannot open /dev/fuse: %s (is the fuse module loaded?)",
                strerror(errno));
    return false;
}

/* fsname shows in /proc/mounts; commas and backslashes would split or
 * escape the -o list, so they are escaped. max_read is a mount option that
 * libfuse also wants from init(), so it is always given. */
static int add_mount_options(struct fuse_args *args, const char *raw, unsigned max_read)
{
    char path[4096];
    /* tools read /proc/mounts as text: the path's bytes that are not UTF-8
     * are shown %XX */
    size_t len = tbm_text_clean(path, sizeof(path), raw, strlen(raw));
    char *opt = malloc(len * 2 + 96);

    if (!opt)
        return -1;
    char *p =
        opt + sprintf(opt, "-oro,default_permissions,subtype=tbmfs,max_read=%u,fsname=", max_read);
    for (size_t i = 0; i < len; i++) {
        if (path[i] == ',' || path[i] == '\\')
            *p++ = '\\';
        *p++ = path[i];
    }
    *p = '\0';
    int r = fuse_opt_add_arg(args, opt);
    free(opt);
    return r;
}

/* Reads of a remote source that wait for its transfers, at once: as many as
 * the FUSE workers may be, so that moving the waits off them costs nothing
 * in throughput. */
#define TRANSFER_WAITERS 10

/* Threads that compute statistics (reading a whole tensor each), and of
 * them those one user's requests may hold at once: another user's always
 * finds one free while there are fewer users than threads, whatever the one
 * asks. Each holds a tensor's chunk buffers (a few MiB) while it works. */
#define STATS_THREADS  4
#define STATS_PER_USER 1

static void reload_credentials(int sig)
{
    (void)sig;
    tbm_source_credentials_reload();
}

/* libfuse's handler for SIGTERM and SIGINT, which ends the session. */
static struct sigaction fuse_exit;

/* Workers waiting for a server would never see the session end: sources
 * give up their transfers first. */
static void stop_sources(int sig)
{
    tbm_source_stop();
    fuse_exit.sa_handler(sig);
}

static int serve(struct fuse_args *args, const struct tbm_cli *cli, struct tbm_fs *fs)
{
    const struct fuse_cmdline_opts *opts = &cli->fuse;
    struct fuse_session *se = fuse_session_new(args, &tbm_fs_ops, sizeof(tbm_fs_ops), fs);
    int r = 1;

    if (!se)
        return 1;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_destroy;
    /* libfuse's handlers end the session on SIGHUP; ours has remote
     * sources read their credentials again (S3's) */
    struct sigaction hup = {.sa_handler = reload_credentials}, stop = {.sa_handler = stop_sources};
    sigemptyset(&hup.sa_mask);
    sigemptyset(&stop.sa_mask);
    sigaction(SIGHUP, &hup, NULL);
    sigaction(SIGTERM, NULL, &fuse_exit); /* the same for SIGINT */
    if (fuse_exit.sa_handler != SIG_DFL && fuse_exit.sa_handler != SIG_IGN) {
        sigaction(SIGTERM, &stop, NULL);
        sigaction(SIGINT, &stop, NULL);
    }
    if (fuse_session_mount(se, cli->mountpoint) != 0)
        goto out_signals;
    if (fuse_daemonize(opts->foreground) != 0)
        goto out_unmount;
    /* stderr is /dev/null from here on in the background */
    if (!opts->foreground)
        tbm_log_to_syslog();
    fs->se = se;
    fs->debug = opts->debug;
    tbm_fs_widen_readahead(cli->mountpoint);
    /* Threads start after fuse_daemonize, whose fork they would not survive.
     * Without them, self-tests and statistics run in the FUSE workers. */
    tbm_deferred_start(fs, 1, 0, &fs->deferred);
    tbm_deferred_start(fs, STATS_THREADS, STATS_PER_USER, &fs->stats);
    if (tbm_source_is_url(cli->sources[0]))
        tbm_deferred_start(fs, TRANSFER_WAITERS, 0, &fs->transfers);
    tbm_fs_watch_start(fs, &fs->watch);
    if (opts->singlethread) {
        r = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        if (!cfg)
            goto out_stop;
        fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts->clone_fd);
        fuse_loop_cfg_set_max_threads(cfg, opts->max_threads);
        if (opts->max_idle_threads != UINT_MAX) /* unset: keep libfuse's default */
            fuse_loop_cfg_set_idle_threads(cfg, opts->max_idle_threads);
        r = fuse_session_loop_mt(se, cfg);
        fuse_loop_cfg_destroy(cfg);
    }
    /* The loop returns the number of a signal that ended it: SIGINT and
     * SIGTERM are the ordinary way to stop, not a failure. */
    r = r >= 0 ? 0 : 1;
out_stop:
    /* however the loop ended: no thread of the queues below waits for a
     * server (a read parked, statistics being computed) */
    tbm_source_stop();
    tbm_fs_watch_stop(fs->watch);
    fs->watch = NULL;
    tbm_deferred_stop(fs->transfers);
    fs->transfers = NULL;
    tbm_deferred_stop(fs->stats);
    fs->stats = NULL;
    tbm_deferred_stop(fs->deferred);
    fs->deferred = NULL;
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_destroy:
    fuse_session_destroy(se);
    return r;
}

int tbm_mount_run(const struct tbm_cli *cli, struct fuse_args *args)
{
    struct tbm_open_options open_opts = {.strict = cli->strict, .remote = cli->remote};
    /* a remote source's statistics wait for transfers: no file waits for them */
    struct tbm_views_options view_opts = {.selftest_batch = cli->batch,
                                          .stats_nowait = tbm_source_is_url(cli->sources[0])};
    struct tbm_tokenizer_files tokenizer = {0};
    bool with_tokenizer;
    char *tokenizer_note = NULL;
    struct tbm_model *model = NULL;
    struct tbm_views *views = NULL;
    struct tbm_fs *fs = NULL;
    const char *source = cli->sources[0];
    char err[1024];
    int status = 1;

    status = tbm_cli_tokenizer(cli, &tokenizer, &with_tokenizer, &tokenizer_note);
    if (status != 0)
        return status;
    status = 1;
    view_opts.tokenizer = with_tokenizer ? &tokenizer : NULL;
    view_opts.tokenizer_note = tokenizer_note;
    raise_fd_limit();
    if (!mountpoint_usable(cli->mountpoint) || !fuse_device_usable() ||
        tbm_cli_select_isa(&open_opts.isa) < 0)
        goto out;
    const char *unchecked = getenv("TBMFS_NO_CHANGE_CHECK");
    if (unchecked && strcmp(unchecked, "1") == 0)
        tbm_log(TBM_LOG_WARNING,
                "%s: TBMFS_NO_CHANGE_CHECK=1: a change to the source will not be noticed (meant "
                "for benchmarks)",
                source);
    if (tbm_open_with_progress(source, &open_opts, &model, err, sizeof(err)) < 0) {
        tbm_log(TBM_LOG_ERROR, "%s", err);
        goto out;
    }
    size_t broken = tbm_model_problem_tensors(model);
    if (broken > 0)
        tbm_log(TBM_LOG_WARNING,
                "%s: %zu tensor%s with problems: their unsafe views fail with EIO (see tbmfs "
                "--check)",
                tbm_model_path(model), broken, broken == 1 ? "" : "s");
    if (tbm_views_open(model, &view_opts, &views) < 0 || !(fs = calloc(1, sizeof(*fs))) ||
        add_mount_options(args, tbm_model_path(model), cli->max_read) != 0) {
        tbm_log(TBM_LOG_ERROR, "%s: out of memory", tbm_model_path(model));
        goto out;
    }
    /* The index's parse tree is gone by now; its pages go back to the system
     * so that a large index does not keep the daemon big for its lifetime. */
    malloc_trim(0);
    fs->max_read = cli->max_read;
    fs->splice = !cli->nosplice;
    set_ownership(fs, model, cli);
    tbm_fs_init(fs, views);
    status = serve(args, cli, fs);
out:
    free(fs);
    tbm_views_close(views);
    tbm_model_close(model);
    tbm_tokenizer_files_free(&tokenizer);
    free(tokenizer_note);
    return status;
}
