/* tbmfs: mounts a Tensorbit model read-only as a tree of tensors, or checks
 * it with --check. Parses the command line and wires model, views and FUSE. */
#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuse/fs.h"
#include "tbm/log.h"
#include "tbm/model.h"
#include "tbm/names.h"
#include "tbm/view.h"

struct cli {
    char *source;
    int check;
    int strict;
    unsigned batch;
    unsigned max_read; /* 0 until -o max_read= is seen */
    int nosplice;
    /* http(s):// sources */
    uint64_t cache_size;
    char **http_headers;
    size_t nheaders;
    char *http_header_file, *ca_file;
    char *s3_endpoint, *s3_region; /* s3:// sources */
    unsigned http_timeout;         /* hidden: lets the tests stall a transfer for seconds, not 30 */
    /* -o uid=, gid=, umask=: in place of the source's owner and modes */
    unsigned uid, gid, umask;
    int set_uid, set_gid, set_umask;
    int set_max_threads; /* -o max_threads= given: libfuse's, as given */
};

/* Bytes per read request. Smaller than the kernel's 1 MiB ceiling on
 * purpose: the kernel splits a 1 MiB read (O_DIRECT, or a 1 MiB readahead
 * window) into two requests that two workers serve at once, one per core.
 * Side by side on 2 cores, raw.tb O_DIRECT ran at 4.4 GB/s with 512 KiB
 * against 3.6 GB/s with 1 MiB, first buffered reads 3.2 against 2.9. */
#define MAX_READ_DEFAULT (512u << 10)

/* FUSE workers at most, unless -o max_threads= says: twice the CPUs this
 * process may run on, 4 at least, and no more than libfuse's own 10. On 2
 * CPUs, in one run of fresh mounts side by side, first reads of a 2 GiB
 * dense.f32 with 10 workers fell to 1.1-1.7 GiB/s in 5 of 15 mounts; with
 * 4 (or 2) none was below 2.1 (medians 2.41, 2.60 and 2.57 GiB/s). In the
 * slow mounts 8 to 10 workers ran, and the kernel's copy of the replies out
 * of the workers' buffers took half the CPU time, against 6% with 4 or 5
 * workers: the more workers take turns on a CPU, the less of a buffer is
 * still in its caches when its reply is copied. Reads that wait on an HTTP
 * server were no slower with 2 workers than with 10. */
static unsigned default_workers(void)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                             : sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus > 0 ? 2 * cpus : 4;

    return n < 4 ? 4 : n > 10 ? 10 : (unsigned)n;
}

enum { KEY_CHECK, KEY_MAX_READ, KEY_MAX_THREADS, KEY_CACHE_SIZE, KEY_HTTP_HEADER };

static const struct fuse_opt cli_opts[] = {
    {"strict", offsetof(struct cli, strict), 1},
    {"nosplice", offsetof(struct cli, nosplice), 1},
    {"selftest_batch=%u", offsetof(struct cli, batch), 0},
    FUSE_OPT_KEY("--check", KEY_CHECK),
    FUSE_OPT_KEY("max_read=", KEY_MAX_READ),
    FUSE_OPT_KEY("max_threads=", KEY_MAX_THREADS),
    FUSE_OPT_KEY("cache_size=", KEY_CACHE_SIZE),
    FUSE_OPT_KEY("http_header=", KEY_HTTP_HEADER),
    {"http_timeout=%u", offsetof(struct cli, http_timeout), 0},
    {"http_header_file=%s", offsetof(struct cli, http_header_file), 0},
    {"ca_file=%s", offsetof(struct cli, ca_file), 0},
    {"s3_endpoint=%s", offsetof(struct cli, s3_endpoint), 0},
    {"s3_region=%s", offsetof(struct cli, s3_region), 0},
    {"uid=%u", offsetof(struct cli, uid), 0},
    {"uid=", offsetof(struct cli, set_uid), 1},
    {"gid=%u", offsetof(struct cli, gid), 0},
    {"gid=", offsetof(struct cli, set_gid), 1},
    {"umask=%o", offsetof(struct cli, umask), 0},
    {"umask=", offsetof(struct cli, set_umask), 1},
    FUSE_OPT_END,
};

/* -o http_header="Name: value": one header line, kept for every request. */
static int add_http_header(struct cli *cli, const char *arg)
{
    const char *h = arg + strlen("http_header=");
    const char *colon = strchr(h, ':');

    if (!colon || colon == h || strpbrk(h, "\r\n")) {
        fprintf(stderr, "tbmfs: %s: must be one header line, \"Name: value\"\n", arg);
        return -1;
    }
    char **more = realloc(cli->http_headers, (cli->nheaders + 1) * sizeof(*more));
    if (!more)
        return -1;
    cli->http_headers = more;
    if (!(more[cli->nheaders] = strdup(h)))
        return -1;
    cli->nheaders++;
    return 0;
}

/* -o cache_size=BYTES, with an optional K, M or G (powers of 1024). */
static int parse_cache_size(struct cli *cli, const char *arg)
{
    const char *digits = arg + strlen("cache_size=");
    char *end;

    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*digits < '0' || *digits > '9' || errno || *end || v > (UINT64_MAX >> shift) ||
        (v << shift) < TBM_HTTP_CACHE_MIN) {
        fprintf(stderr, "tbmfs: %s: must be a number of bytes (K, M, G allowed), at least %llu\n",
                arg, (unsigned long long)TBM_HTTP_CACHE_MIN);
        return -1;
    }
    cli->cache_size = (uint64_t)v << shift;
    return 0;
}

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct cli *cli = data;

    (void)outargs;
    if (key == KEY_CHECK) {
        cli->check = 1;
        return 0;
    }
    if (key == KEY_MAX_READ) {
        /* given to libfuse again by add_mount_options; the kernel takes no
         * less than a page */
        const char *digits = arg + strlen("max_read=");
        char *end;
        errno = 0;
        unsigned long v = strtoul(digits, &end, 10);
        if (*digits < '0' || *digits > '9' || errno || *end || v < 4096 || v > UINT_MAX) {
            fprintf(stderr, "tbmfs: %s: must be a number of bytes, at least 4096\n", arg);
            return -1;
        }
        cli->max_read = (unsigned)v;
        return 0;
    }
    if (key == KEY_MAX_THREADS) {
        cli->set_max_threads = 1;
        return 1; /* kept for fuse_parse_cmdline */
    }
    if (key == KEY_CACHE_SIZE)
        return parse_cache_size(cli, arg);
    if (key == KEY_HTTP_HEADER)
        return add_http_header(cli, arg);
    if (key == FUSE_OPT_KEY_NONOPT && !cli->source) {
        cli->source = strdup(arg);
        return cli->source ? 0 : -1;
    }
    return 1; /* the mount point and FUSE's own options go on to libfuse */
}

static void usage(const char *prog)
{
    printf("usage: %s [options] SOURCE MOUNTPOINT\n"
           "       %s --check SOURCE\n\n"
           "Mounts a Tensorbit model read-only as a tree of tensors. SOURCE is a .tbm\n"
           "container, a directory with manifest.json, a bare .tb file, or the URL of a\n"
           ".tbm container on a web server (http:// or https://) or in an S3 bucket\n"
           "(s3://BUCKET/KEY, signed with the AWS credentials of the environment or\n"
           "~/.aws/credentials; SIGHUP reads them again).\n\n"
           "tbmfs options:\n"
           "    --check                validate SOURCE, print its problems and exit\n"
           "                           (0: none, 1: problems, 2: SOURCE unusable)\n"
           "    -o strict              refuse to mount when any tensor has a problem\n"
           "    -o selftest_batch=N    columns of the self-test's matrix X (default 8, at\n"
           "                           most 1024; 1 compares with cblas_sgemv)\n"
           "    -o max_read=N          bytes per read request, at least 4096 (default\n"
           "                           %u; the kernel caps it at 1 MiB)\n"
           "    -o max_threads=N       FUSE workers at most (default twice the CPUs\n"
           "                           it may run on, at least 4, at most 10: here %u)\n"
           "    -o nosplice            read the views that are bytes of the source\n"
           "                           (raw.tb, weights.bin, mask.bin, unmasked fp32\n"
           "                           dense views) into a buffer instead of splicing\n"
           "                           them\n"
           "    -o cache_size=BYTES    http(s):// SOURCE: block cache size (default 256M;\n"
           "                           K, M, G allowed)\n"
           "    -o http_header=\"Name: value\"  http(s):// SOURCE: a header sent with every\n"
           "                           request to SOURCE's host (repeatable)\n"
           "    -o http_header_file=PATH  the same, one header a line, read from PATH (a\n"
           "                           token stays out of ps)\n"
           "    -o ca_file=PATH        https:// or s3:// SOURCE: trust the CAs of this PEM\n"
           "                           file in place of the system's (s3://: else\n"
           "                           AWS_CA_BUNDLE)\n"
           "    -o s3_endpoint=URL     s3:// SOURCE: an S3-compatible store, path-style\n"
           "                           (else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS)\n"
           "    -o s3_region=REGION    s3:// SOURCE: the region signed for (else\n"
           "                           AWS_REGION, AWS_DEFAULT_REGION, us-east-1)\n"
           "    TBMFS_KERNELS=scalar|avx2|avx512 in the environment forces a kernel\n\n",
           prog, prog, MAX_READ_DEFAULT, default_workers());
}

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

static int select_isa(enum tbm_isa *isa)
{
    const char *env = getenv("TBMFS_KERNELS");

    if (tbm_isa_select(env, isa) == 0)
        return 0;
    fprintf(stderr, "tbmfs: TBMFS_KERNELS=%s: not a kernel this CPU runs (use one of:", env);
    for (int k = TBM_ISA_SCALAR; k <= TBM_ISA_AVX512; k++)
        if (tbm_isa_supported((enum tbm_isa)k))
            fprintf(stderr, " %s", tbm_isa_name((enum tbm_isa)k));
    fprintf(stderr, ")\n");
    return -1;
}

/* Prints tensor t's problems or warnings; returns how many. */
static size_t print_messages(const char *source, const struct tbm_model *m, size_t t, bool problems)
{
    size_t n = tbm_model_tensor_message_count(m, t, problems);

    for (size_t i = 0; i < n; i++)
        printf("%s: tensor %s: %s: %s\n", source, tbm_model_tensor_dir(m, t),
               problems ? "problem" : "warning", tbm_model_tensor_message(m, t, problems, i));
    return n;
}

/* A line of stderr that says how far a long job is, on a terminal only:
 * shown once the job has run a second, redrawn twice a second, erased at the
 * end. line() writes its text from what the job has published. */
struct progress {
    void (*line)(const void *arg, double secs, char *buf, size_t len);
    const void *arg;
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done;
    pthread_t thread;
    bool started;
};

static void *show_progress(void *arg)
{
    struct progress *p = arg;
    struct timespec start, now, until;
    bool shown = false;
    char text[256];

    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_mutex_lock(&p->lock);
    for (int tick = 1; !p->done; tick++) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&p->done_cond, &p->lock, &until);
        if (p->done || tick < 2)
            continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        p->line(p->arg,
                (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9,
                text, sizeof(text));
        fprintf(stderr, "\rtbmfs: %s\033[K", text);
        shown = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (shown)
        fprintf(stderr, "\r\033[K");
    return NULL;
}

static void progress_start(struct progress *p,
                           void (*line)(const void *arg, double secs, char *buf, size_t len),
                           const void *arg)
{
    *p = (struct progress){.line = line, .arg = arg};
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->done_cond, NULL);
    if (isatty(STDERR_FILENO))
        p->started = pthread_create(&p->thread, NULL, show_progress, p) == 0;
}

static void progress_stop(struct progress *p)
{
    pthread_mutex_lock(&p->lock);
    p->done = true;
    pthread_cond_signal(&p->done_cond);
    pthread_mutex_unlock(&p->lock);
    if (p->started)
        pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->done_cond);
    pthread_mutex_destroy(&p->lock);
}

/* --check reads every mask and weight. */
static void check_line(const void *arg, double secs, char *buf, size_t len)
{
    uint64_t done, total;

    tbm_model_stats_progress(arg, &done, &total);
    double rate = secs > 0 ? (double)done / secs : 0;
    snprintf(buf, len, "checking: %.0f of %.0f MiB, %.0f MiB/s, %.0f s left",
             (double)done / 1048576, (double)total / 1048576, rate / 1048576,
             rate > 0 ? (double)(total - (done < total ? done : total)) / rate : 0.0);
}

static int compute_with_progress(const struct tbm_model *m)
{
    struct progress p;

    progress_start(&p, check_line, m);
    int r = tbm_model_compute_stats(m);
    progress_stop(&p);
    return r;
}

/* An open reads the index, then every tensor's header: a million-entry
 * index, a manifest of many files or a far server take seconds. */
static void open_line(const void *arg, double secs, char *buf, size_t len)
{
    const struct tbm_open_progress *op = arg;
    size_t n = atomic_load(&op->tensors), done = atomic_load(&op->loaded);

    (void)secs;
    if (n == 0)
        snprintf(buf, len, "opening: reading the index");
    else
        snprintf(buf, len, "opening: %zu of %zu tensors", done < n ? done : n, n);
}

static int open_with_progress(const char *path, struct tbm_open_options *opts,
                              struct tbm_model **out, char *err, size_t errlen)
{
    struct tbm_open_progress op = {0};
    struct progress p;

    opts->progress = &op;
    progress_start(&p, open_line, &op);
    int r = tbm_model_open(path, opts, out, err, errlen);
    progress_stop(&p);
    opts->progress = NULL;
    return r;
}

static int run_check(const char *given, struct tbm_open_options *opts)
{
    struct tbm_model *m;
    char err[1024], source[4096];
    size_t warnings = 0;

    /* every line printed is UTF-8, whatever bytes the path holds, and
     * shows no secret a URL carries */
    char *shown = tbm_source_url_display(given);
    tbm_text_clean(source, sizeof(source), shown ? shown : "?", shown ? strlen(shown) : 1);
    free(shown);
    if (open_with_progress(given, opts, &m, err, sizeof(err)) < 0) {
        fprintf(stderr, "tbmfs: %s\n", err);
        return 2;
    }
    /* --check reads every mask and weight: the statistics' warnings too */
    int computed = compute_with_progress(m);
    if (computed < 0) {
        fprintf(stderr, "tbmfs: %s: %s\n", source,
                computed == TBM_ERR_NOMEM ? "out of memory computing statistics"
                                          : "statistics not computed: the source failed (above)");
        tbm_model_close(m);
        return 2;
    }
    size_t n = tbm_model_tensor_count(m), broken = tbm_model_problem_tensors(m);
    for (size_t i = 0; i < n; i++) {
        print_messages(source, m, i, true);
        warnings += print_messages(source, m, i, false);
    }
    printf("%s: %zu tensor%s, %zu with problems, %zu warning%s\n", source, n, n == 1 ? "" : "s",
           broken, warnings, warnings == 1 ? "" : "s");
    int status = broken ? 1 : 0;
    tbm_model_close(m);
    return status;
}

/* Every file and directory belongs to the source's owner and group, files
 * with the source's read bits, directories those plus the matching execute
 * bits: a private model stays private under -o allow_other (the kernel
 * checks them: default_permissions). -o uid, gid and umask override. */
static void set_ownership(struct tbm_fs *fs, const struct tbm_model *model, const struct cli *cli)
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
        fprintf(stderr, "tbmfs: warning: %s is not empty: the mount hides its %zu entr%s\n",
                mountpoint, entries, entries == 1 ? "y" : "ies");
    /* a mount point sits on another device than its parent, or is the
     * parent's own inode (the root of a file system) */
    if (asprintf(&up, "%s/..", mountpoint) >= 0 && stat(up, &parent) == 0 &&
        (parent.st_dev != st->st_dev || parent.st_ino == st->st_ino))
        fprintf(stderr, "tbmfs: warning: %s is already a mount point: the new mount hides it\n",
                mountpoint);
    free(up);
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
        fprintf(stderr,
                "tbmfs: cannot open /dev/fuse: %s. Mounting needs read and write access to it: "
                "join the group that owns it (ls -l /dev/fuse; often \"fuse\"), or have it "
                "made 0666, or mount as root with -o allow_other so that others can read the "
                "mount\n",
                strerror(errno));
    else
        fprintf(stderr, "tbmfs: cannot open /dev/fuse: %s (is the fuse module loaded?)\n",
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

static int serve(struct fuse_args *args, const struct fuse_cmdline_opts *opts, struct tbm_fs *fs)
{
    struct fuse_session *se = fuse_session_new(args, &tbm_fs_ops, sizeof(tbm_fs_ops), fs);
    int r = 1;

    if (!se)
        return 1;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_destroy;
    /* libfuse's handlers end the session on SIGHUP; ours reads the
     * credentials of S3 sources again */
    struct sigaction hup = {.sa_handler = reload_credentials}, stop = {.sa_handler = stop_sources};
    sigemptyset(&hup.sa_mask);
    sigemptyset(&stop.sa_mask);
    sigaction(SIGHUP, &hup, NULL);
    sigaction(SIGTERM, NULL, &fuse_exit); /* the same for SIGINT */
    if (fuse_exit.sa_handler != SIG_DFL && fuse_exit.sa_handler != SIG_IGN) {
        sigaction(SIGTERM, &stop, NULL);
        sigaction(SIGINT, &stop, NULL);
    }
    if (fuse_session_mount(se, opts->mountpoint) != 0)
        goto out_signals;
    if (fuse_daemonize(opts->foreground) != 0)
        goto out_unmount;
    fs->se = se;
    /* stderr is /dev/null from here on in the background */
    if (!opts->foreground)
        tbm_log_to_syslog();
    fs->debug = opts->debug;
    tbm_fs_widen_readahead(opts->mountpoint);
    /* Threads start after fuse_daemonize, whose fork they would not survive.
     * Without this one, self-tests run in the FUSE workers. */
    tbm_deferred_start(fs, &fs->deferred);
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

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts opts = {0};
    struct cli cli = {.batch = TBM_BATCH_DEFAULT};
    struct tbm_model *model = NULL;
    struct tbm_views *views = NULL;
    enum tbm_isa isa;
    char err[1024];
    int status = 1;

    if (fuse_opt_parse(&args, &cli, cli_opts, cli_proc) != 0)
        goto out;
    struct tbm_http_options http_opts = {
        .cache_size = cli.cache_size ? cli.cache_size : TBM_HTTP_CACHE_DEFAULT,
        .headers = (const char *const *)cli.http_headers,
        .nheaders = cli.nheaders,
        .header_file = cli.http_header_file,
        .timeout = cli.http_timeout ? cli.http_timeout : TBM_HTTP_TIMEOUT,
        .ca_file = cli.ca_file,
        .s3_endpoint = cli.s3_endpoint,
        .s3_region = cli.s3_region};
    raise_fd_limit();
    /* Snapshots of large files are allocated at open and freed at release,
     * often by another worker thread: a fixed threshold keeps them mapped
     * apart, so freeing one gives its memory back instead of leaving it in
     * some thread's arena. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    if (cli.check) {
        if (!cli.source) {
            fprintf(stderr, "tbmfs: --check needs a SOURCE\n");
            status = 2;
        } else {
            struct tbm_open_options check_opts = {.http = &http_opts};
            status = select_isa(&check_opts.isa) < 0 ? 2 : run_check(cli.source, &check_opts);
        }
        goto out;
    }
    if (cli.batch < 1 || cli.batch > TBM_BATCH_MAX) {
        fprintf(stderr, "tbmfs: selftest_batch=%u: must be 1 to %d\n", cli.batch, TBM_BATCH_MAX);
        goto out;
    }
    if (fuse_parse_cmdline(&args, &opts) != 0)
        goto out;
    if (!cli.set_max_threads)
        opts.max_threads = default_workers();
    if (opts.show_help) {
        usage(argv[0]);
        fuse_cmdline_help();
        fuse_lowlevel_help();
        status = 0;
        goto out;
    }
    if (opts.show_version) {
        printf("tbmfs version %s\nFUSE library version %s\n", TBMFS_VERSION, fuse_pkgversion());
        fflush(stdout); /* fuse_lowlevel_version writes through another stream */
        fuse_lowlevel_version();
        status = 0;
        goto out;
    }
    if (!cli.source || !opts.mountpoint) {
        fprintf(stderr, "tbmfs: missing %s (see %s --help)\n",
                cli.source ? "MOUNTPOINT" : "SOURCE and MOUNTPOINT", argv[0]);
        goto out;
    }
    struct stat st;
    if (stat(opts.mountpoint, &st) != 0) {
        fprintf(stderr, "tbmfs: %s: %s\n", opts.mountpoint, strerror(errno));
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tbmfs: %s: mount point is not a directory\n", opts.mountpoint);
        goto out;
    }
    warn_mountpoint(opts.mountpoint, &st);
    if (!fuse_device_usable())
        goto out;
    if (select_isa(&isa) < 0)
        goto out;
    const char *unchecked = getenv("TBMFS_NO_CHANGE_CHECK");
    if (unchecked && strcmp(unchecked, "1") == 0)
        fprintf(stderr,
                "tbmfs: %s: TBMFS_NO_CHANGE_CHECK=1: a change to the source will not be "
                "noticed (meant for benchmarks)\n",
                cli.source);
    struct tbm_open_options open_opts = {.isa = isa, .strict = cli.strict, .http = &http_opts};
    if (open_with_progress(cli.source, &open_opts, &model, err, sizeof(err)) < 0) {
        fprintf(stderr, "tbmfs: %s\n", err);
        goto out;
    }
    size_t broken = tbm_model_problem_tensors(model);
    if (broken > 0)
        fprintf(stderr,
                "tbmfs: %s: %zu tensor%s with problems: their unsafe views fail with EIO (see "
                "tbmfs --check)\n",
                tbm_model_path(model), broken, broken == 1 ? "" : "s");
    struct tbm_view_options view_opts = {.selftest_batch = cli.batch};
    if (cli.max_read == 0)
        cli.max_read = MAX_READ_DEFAULT;
    if (tbm_views_open(model, &view_opts, &views) < 0 ||
        add_mount_options(&args, tbm_model_path(model), cli.max_read) != 0) {
        fprintf(stderr, "tbmfs: %s: out of memory\n", tbm_model_path(model));
        goto out;
    }
    /* The index's parse tree is gone by now; its pages go back to the system
     * so that a large index does not keep the daemon big for its lifetime. */
    malloc_trim(0);
    /* The self-test compares a single-threaded sparse kernel with BLAS, on a
     * thread of its own beside the FUSE workers; more BLAS threads would only
     * fight those workers for the CPUs and skew the comparison. */
    openblas_set_num_threads(1);
    struct tbm_fs fs = {.max_read = cli.max_read, .splice = !cli.nosplice};
    set_ownership(&fs, model, &cli);
    tbm_fs_init(&fs, views);
    status = serve(&args, &opts, &fs);
out:
    tbm_views_close(views);
    tbm_model_close(model);
    free(opts.mountpoint);
    free(cli.source);
    for (size_t i = 0; i < cli.nheaders; i++)
        free(cli.http_headers[i]);
    free(cli.http_headers);
    free(cli.http_header_file);
    free(cli.ca_file);
    free(cli.s3_endpoint);
    free(cli.s3_region);
    fuse_opt_free_args(&args);
    return status;
}
