/* The command line: one table of options, with the options of remote
 * sources (the source layer's, tbm_remote_option) in its place, from which
 * they are parsed and --help is printed (and against which a test checks the
 * README and the man page), and the refusal of anything else. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tbm/log.h"
#include "tbm/source.h"
#include "tbm/view.h"

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

/* Parses value (the text after '=', or NULL for a flag) into cli; given is
 * the option as written, for the one line of a refusal. 0 or -1. */
typedef int (*set_fn)(struct tbm_cli *cli, const char *value, const char *given);

struct option {
    /* "-f", "--check", or the name of an -o option; NULL: here stand the
     * options of remote sources */
    const char *name;
    const char *arg;  /* what its value is, in --help ("N"); NULL for a flag */
    set_fn set;       /* NULL: libfuse's, passed on as given */
    const char *help; /* NULL: not documented (for the tests) */
};

static int refuse(const char *given, const char *why)
{
    tbm_log(TBM_LOG_ERROR, "%s: %s", given, why);
    return -1;
}

/* A whole decimal number from min to max. */
static int parse_uint(const char *value, const char *given, unsigned long min, unsigned long max,
                      const char *why, unsigned *out)
{
    char *end;

    errno = 0;
    unsigned long v = value ? strtoul(value, &end, 10) : 0;
    if (!value || *value < '0' || *value > '9' || errno || *end || v < min || v > max)
        return refuse(given, why);
    *out = (unsigned)v;
    return 0;
}

static int set_check(struct tbm_cli *cli, const char *value, const char *given)
{
    (void)value, (void)given;
    cli->check = true;
    return 0;
}

static int set_help(struct tbm_cli *cli, const char *value, const char *given)
{
    (void)value, (void)given;
    cli->help = true;
    return 0;
}

static int set_version(struct tbm_cli *cli, const char *value, const char *given)
{
    (void)value, (void)given;
    cli->version = true;
    return 0;
}

static int set_strict(struct tbm_cli *cli, const char *value, const char *given)
{
    (void)value, (void)given;
    cli->strict = true;
    return 0;
}

static int set_nosplice(struct tbm_cli *cli, const char *value, const char *given)
{
    (void)value, (void)given;
    cli->nosplice = true;
    return 0;
}

static int set_batch(struct tbm_cli *cli, const char *value, const char *given)
{
    return parse_uint(value, given, 1, TBM_BATCH_MAX, "must be 1 to 1024", &cli->batch);
}

/* max_read is given to libfuse again as a mount option; the kernel takes
 * no less than a page. */
static int set_max_read(struct tbm_cli *cli, const char *value, const char *given)
{
    return parse_uint(value, given, 4096, UINT_MAX, "must be a number of bytes, at least 4096",
                      &cli->max_read);
}

/* Checked here, passed on to libfuse as given. */
static int set_max_threads(struct tbm_cli *cli, const char *value, const char *given)
{
    cli->set_max_threads = true;
    return parse_uint(value, given, 1, 100000, "must be a number of threads, at least 1",
                      &cli->max_threads);
}

static int set_logfile(struct tbm_cli *cli, const char *value, const char *given)
{
    if (!value || !*value)
        return refuse(given, "must name a file");
    free(cli->logfile);
    cli->logfile = strdup(value);
    return cli->logfile ? 0 : refuse(given, "out of memory");
}

static int set_tokenizer(struct tbm_cli *cli, const char *value, const char *given)
{
    if (!value || !*value)
        return refuse(given, "must name a directory, or none");
    free(cli->tokenizer);
    cli->tokenizer = strdup(value);
    return cli->tokenizer ? 0 : refuse(given, "out of memory");
}

static int set_uid(struct tbm_cli *cli, const char *value, const char *given)
{
    cli->set_uid = true;
    return parse_uint(value, given, 0, UINT_MAX - 1, "must be a number", &cli->uid);
}

static int set_gid(struct tbm_cli *cli, const char *value, const char *given)
{
    cli->set_gid = true;
    return parse_uint(value, given, 0, UINT_MAX - 1, "must be a number", &cli->gid);
}

static int set_umask(struct tbm_cli *cli, const char *value, const char *given)
{
    char *end;

    errno = 0;
    unsigned long v = value ? strtoul(value, &end, 8) : 0;
    if (!value || *value < '0' || *value > '7' || errno || *end || v > 0777)
        return refuse(given, "must be octal, at most 777");
    cli->umask = (unsigned)v;
    cli->set_umask = true;
    return 0;
}

/* Every option, in the order --help lists them. */
static const struct option options[] = {
    {"--check", NULL, set_check,
     "validate every SOURCE, print its problems and warnings and exit with the\n"
     "worst status (0: none, 1: problems, 2: a SOURCE unusable)"},
    {"-f", NULL, NULL, "stay in the foreground; exit 0 when unmounted or on SIGINT/SIGTERM"},
    {"-d", NULL, NULL, "FUSE debug output (implies -f)"},
    {"-s", NULL, NULL, "single-threaded"},
    {"-h", NULL, set_help, "print this help and exit"},
    {"--help", NULL, set_help, NULL},
    {"-V", NULL, set_version, "print the versions of tbmfs and libfuse and exit"},
    {"--version", NULL, set_version, NULL},
    {"strict", NULL, set_strict, "refuse to mount when any tensor has a problem"},
    {"selftest_batch", "N", set_batch,
     "columns of the self-test's X, 1 to 1024 (default 8; 1 compares with\n"
     "cblas_sgemv)"},
    {"max_read", "N", set_max_read,
     "bytes per read request, at least 4096 (default 524288; the kernel caps it\n"
     "at 1 MiB)"},
    {"max_threads", "N", set_max_threads,
     "FUSE worker threads at most (default twice the CPUs tbmfs may run on, at\n"
     "least 4, at most 10)"},
    {"nosplice", NULL, set_nosplice,
     "read raw.tb, weights.bin, mask.bin into a buffer instead of splicing them\n"
     "from the source"},
    {"tokenizer", "DIR", set_tokenizer,
     "the Hugging Face tokenizer's directory (tokenizer.json, ...): its files at\n"
     "the root, its vocabulary and chat template in the GGUF files (default: the\n"
     "local SOURCE's directory when it has tokenizer.json; none: no tokenizer)"},
    {"uid", "N", set_uid, "owner of every file, in place of the source's"},
    {"gid", "N", set_gid, "group of every file, in place of the source's"},
    {"umask", "NNN", set_umask, "modes 0444 & ~umask (files), 0555 & ~umask (directories)"},
    {NULL, NULL, NULL, NULL}, /* the options of remote sources */
    {"logfile", "PATH", set_logfile,
     "append every message to PATH (created 0600), each line stamped with the UTC\n"
     "time, in place of stderr and syslog"},
    {"allow_other", NULL, NULL, "let other users read the mount (FUSE)"},
    {"allow_root", NULL, NULL, "let root read the mount too (FUSE)"},
    {"auto_unmount", NULL, NULL, "unmount when the daemon ends, however it ends (FUSE)"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static bool named(const char *option, const char *name, size_t len)
{
    return option && strncmp(option, name, len) == 0 && option[len] == '\0';
}

static const struct option *find_option(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (named(options[i].name, name, len))
            return &options[i];
    return NULL;
}

/* The place of name among the options of remote sources, or -1. */
static long find_remote(const char *name, size_t len)
{
    const struct tbm_remote_option *o;

    for (size_t i = 0; (o = tbm_remote_option(i)); i++)
        if (named(o->name, name, len))
            return (long)i;
    return -1;
}

/* Sets the remote option i to value; given is the option as written. */
static int set_remote(struct tbm_cli *cli, size_t i, const char *value, const char *given)
{
    const char *why;

    if (!value) {
        refuse(given, "needs a value (name=value)");
        return -1;
    }
    return tbm_remote_options_set(cli->remote, i, value, &why) < 0 ? refuse(given, why) : 0;
}

/* The command line's words: collected here, settled once all are seen
 * (--check may come after the sources). */
struct parse {
    struct tbm_cli *cli;
    char **words;
    size_t nwords;
    bool failed;
};

static int add_word(struct parse *p, const char *arg)
{
    char **more = realloc(p->words, (p->nwords + 1) * sizeof(*more));

    if (!more)
        return -1;
    p->words = more;
    if (!(more[p->nwords] = strdup(arg)))
        return -1;
    p->nwords++;
    return 0;
}

/* fuse_opt's callback: an option of ours is set here and dropped (0), one
 * of libfuse's kept for it (1), an argument collected. */
static int proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct parse *p = data;

    (void)outargs;
    if (key == FUSE_OPT_KEY_NONOPT)
        return add_word(p, arg);
    const char *eq = arg[0] == '-' ? NULL : strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct option *o = find_option(arg, len);
    long remote = o ? -1 : find_remote(arg, len);
    if (remote >= 0) {
        if (set_remote(p->cli, (size_t)remote, eq ? eq + 1 : NULL, arg) < 0)
            goto fail;
        return 0;
    }
    if (!o)
        return 1; /* libfuse says whether it knows it */
    if ((o->arg != NULL) != (eq != NULL)) {
        refuse(arg, o->arg ? "needs a value (name=value)" : "takes no value");
        goto fail;
    }
    if (!o->set)
        return 1;
    if (o->set(p->cli, eq ? eq + 1 : NULL, arg) < 0)
        goto fail;
    /* max_threads is libfuse's to use as well */
    return o->set == set_max_threads ? 1 : 0;
fail:
    p->failed = true;
    return -1;
}

/* libfuse prints one line naming any option it does not know, and refuses
 * it: asked of a copy, before anything is opened or mounted. */
static bool libfuse_knows(const struct fuse_args *args)
{
    static const struct fuse_lowlevel_ops none;
    struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
    bool ok = true;

    for (int i = 0; i < args->argc && ok; i++)
        ok = fuse_opt_add_arg(&copy, args->argv[i]) == 0;
    if (ok) {
        struct fuse_session *se = fuse_session_new(&copy, &none, sizeof(none), NULL);
        ok = se != NULL;
        if (se)
            fuse_session_destroy(se);
    }
    fuse_opt_free_args(&copy);
    return ok;
}

/* The words become the sources and the mount point. */
static int settle_words(struct parse *p)
{
    struct tbm_cli *cli = p->cli;
    size_t want = cli->check ? p->nwords : 1;

    if (cli->help || cli->version)
        return 0;
    if (p->nwords == 0 || (!cli->check && p->nwords < 2)) {
        tbm_log(TBM_LOG_ERROR, "missing %s (see tbmfs --help)",
                cli->check  ? "SOURCE"
                : p->nwords ? "MOUNTPOINT"
                            : "SOURCE and MOUNTPOINT");
        return -1;
    }
    if (!cli->check && p->nwords > 2) {
        tbm_log(TBM_LOG_ERROR, "%s: an argument too many (tbmfs [options] SOURCE MOUNTPOINT)",
                p->words[2]);
        return -1;
    }
    cli->sources = p->words;
    cli->nsources = want;
    if (!cli->check) {
        cli->mountpoint = p->words[1];
        p->words[1] = NULL;
    }
    p->words = NULL;
    p->nwords = 0;
    return 0;
}

int tbm_cli_parse(int argc, char *argv[], struct tbm_cli *cli, struct fuse_args *args)
{
    struct parse p = {.cli = cli};
    int status = TBM_EXIT_USAGE;

    *cli = (struct tbm_cli){.batch = TBM_BATCH_DEFAULT,
                            .max_read = MAX_READ_DEFAULT,
                            .max_threads = default_workers(),
                            .remote = tbm_remote_options_new()};
    *args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
    if (!cli->remote) {
        tbm_log(TBM_LOG_ERROR, "out of memory");
        goto out;
    }
    if (fuse_opt_parse(args, &p, NULL, proc) != 0) {
        if (!p.failed)
            tbm_log(TBM_LOG_ERROR, "cannot parse the command line");
        goto out;
    }
    if (settle_words(&p) < 0)
        goto out;
    if (cli->help || cli->version) {
        status = 0;
        goto out;
    }
    /* libfuse's own: -f, -d, -s, max_threads and the like; then what is
     * left must be options of its session or of the mount */
    if (fuse_parse_cmdline(args, &cli->fuse) != 0 || !libfuse_knows(args))
        goto out;
    if (!cli->set_max_threads)
        cli->fuse.max_threads = cli->max_threads;
    status = 0;
out:
    for (size_t i = 0; i < p.nwords; i++)
        free(p.words[i]);
    free(p.words);
    return status;
}

void tbm_cli_free(struct tbm_cli *cli)
{
    for (size_t i = 0; i < cli->nsources; i++)
        free(cli->sources[i]);
    free(cli->sources);
    free(cli->mountpoint);
    free(cli->logfile);
    free(cli->tokenizer);
    tbm_remote_options_free(cli->remote);
    free(cli->fuse.mountpoint);
}

/* Prints text indented under an option, one line of it at a time. */
static void print_help_text(const char *text)
{
    while (*text) {
        const char *nl = strchr(text, '\n');
        int len = nl ? (int)(nl - text) : (int)strlen(text);
        printf("%*s%.*s\n", 8, "", len, text);
        text += len + (nl != NULL);
    }
}

/* One option of --help: its name, its value, its text indented below. */
static void print_option(const char *name, const char *arg, const char *help)
{
    if (name[0] == '-')
        printf("    %s\n", name);
    else
        printf("    -o %s%s%s\n", name, arg ? "=" : "", arg ? arg : "");
    print_help_text(help);
}

void tbm_cli_help(const char *prog)
{
    const struct tbm_remote_option *r;
    const char *form, *help;

    printf("usage: %s [options] SOURCE MOUNTPOINT\n"
           "       %s --check [options] SOURCE...\n\n"
           "Mounts a Tensorbit model read-only as a tree of tensors. SOURCE is a .tbm\n"
           "container, a directory with manifest.json, a bare .tb file, or the URL of a\n"
           ".tbm container:\n",
           prog, prog);
    for (size_t i = 0; tbm_source_scheme_help(i, &form, &help); i++) {
        printf("    %s\n", form);
        print_help_text(help);
    }
    printf("\noptions:\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option *o = &options[i];
        for (size_t k = 0; !o->name && (r = tbm_remote_option(k)); k++)
            if (r->help)
                print_option(r->name, r->arg, r->help);
        if (o->help)
            print_option(o->name, o->arg, o->help);
    }
    printf("\n"
           "Other FUSE mount options (see mount.fuse3(8)) are passed on; one that\n"
           "libfuse does not know is refused.\n\n"
           "environment:\n"
           "    TBMFS_KERNELS=scalar|avx2|avx512\n"
           "        force a kernel level (refused if the CPU lacks it)\n"
           "    TBMFS_NO_CHANGE_CHECK=1\n"
           "        benchmarks only: no check per read that the source is unchanged\n\n"
           "Here the default -o max_threads is %u.\n",
           default_workers());
}

int tbm_cli_select_isa(enum tbm_isa *isa)
{
    const char *env = getenv("TBMFS_KERNELS");
    char line[256];
    size_t used;

    if (tbm_isa_select(env, isa) == 0)
        return 0;
    used = (size_t)snprintf(line, sizeof(line),
                            "TBMFS_KERNELS=%s: not a kernel this CPU runs (use one of:", env);
    for (int k = TBM_ISA_SCALAR; k <= TBM_ISA_AVX512 && used < sizeof(line); k++)
        if (tbm_isa_supported((enum tbm_isa)k))
            used += (size_t)snprintf(line + used, sizeof(line) - used, " %s",
                                     tbm_isa_name((enum tbm_isa)k));
    tbm_log(TBM_LOG_ERROR, "%s)", line);
    return -1;
}

void tbm_cli_hide_secrets(int argc, char *argv[])
{
    for (int i = 1; i < argc; i++)
        tbm_source_hide_secrets(argv[i]);
}
