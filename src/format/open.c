/* Opening a model source into the immutable tensor table: which kind of
 * source it is, then each job of the open in turn (index, validation, names,
 * overlaps, statistics), and the accessors of the finished table. */
#include "internal.h"

#include "tbm/text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The line may quote the path and bytes of the file: it is made valid UTF-8. */
static void clean_error(char *err, size_t errlen)
{
    char raw[4096];
    size_t len = strnlen(err, errlen);

    if (len >= sizeof(raw) || errlen < 4)
        return;
    memcpy(raw, err, len);
    tbm_text_clean(err, errlen, raw, len);
}

/* Descriptors that manifest files may keep open: the limit, less room for
 * FUSE, its workers, sockets and the reopened files of reads under way. */
static size_t fd_budget(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return 1 << 20;
    return rl.rlim_cur > 512 ? (size_t)rl.rlim_cur - 256 : (size_t)rl.rlim_cur / 2;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A URL is always a container; its mtime is the server's Last-Modified. */
static int open_http(struct tbm_opener *o)
{
    struct tbm_model *m = o->m;
    char why[512];

    int r = tbm_source_open_url(o->given, o->opts->remote, &m->src, why, sizeof(why));
    if (r < 0)
        return tbm_open_fail(o, r, "%s", why);
    m->mtime = m->src->id.mtime;
    /* a web server has no owner here: the mounting user's, readable */
    m->owner_uid = (unsigned)getuid();
    m->owner_gid = (unsigned)getgid();
    m->owner_mode = 0444;
    m->kind = TBM_SOURCE_CONTAINER;
    return tbm_container_open(o);
}

static int open_source(struct tbm_opener *o)
{
    struct tbm_model *m = o->m;
    struct stat st;
    const char *why;

    if (tbm_source_is_url(m->path))
        return open_http(o);
    if (stat(m->path, &st) < 0)
        return tbm_open_fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
    m->mtime = st.st_mtim;
    m->owner_uid = (unsigned)st.st_uid;
    m->owner_gid = (unsigned)st.st_gid;
    m->owner_mode = (unsigned)st.st_mode & 07777;
    if (S_ISDIR(st.st_mode)) {
        m->kind = TBM_SOURCE_MANIFEST;
        m->dirfd = open(m->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (m->dirfd < 0)
            return tbm_open_fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
        return tbm_manifest_open(o);
    }
    int r = tbm_source_open_file(m->path, &m->src, &why);
    if (r == TBM_ERR_SOURCE && strcmp(why, "not a regular file") == 0)
        why = "not a regular file or a directory";
    if (r < 0)
        return tbm_open_fail(o, r, "%s", r == TBM_ERR_NOMEM ? "out of memory" : why);
    m->mtime = m->src->id.mtime;
    /* The kind and a bare blob's name come from SOURCE as given: a link
     * named x.tb is a bare blob named x, whatever its target is called. */
    if (ends_with(o->given, ".tb")) {
        m->kind = TBM_SOURCE_BLOB;
        return tbm_bare_open(o);
    }
    m->kind = TBM_SOURCE_CONTAINER;
    return tbm_container_open(o);
}

static int build_table(struct tbm_opener *o)
{
    struct tbm_model *m = o->m;
    int r;

    if (m->kind != TBM_SOURCE_BLOB && (r = tbm_index_load(o)) < 0)
        return r;
    if (m->kind == TBM_SOURCE_CONTAINER && tbm_misplaced_find(o) < 0)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    if (tbm_dirs_assign(m) < 0 || tbm_dirs_warn_duplicates(m) < 0 ||
        (m->kind == TBM_SOURCE_CONTAINER && tbm_overlaps_check(m) < 0))
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    if (tbm_stats_table_init(m) < 0)
        return tbm_open_fail(o, TBM_ERR_NOMEM, "out of memory");
    const struct tbm_tensor *first = NULL;
    for (size_t i = 0; i < m->ntensors; i++) {
        if (m->tensors[i].problems.count == 0)
            continue;
        m->nproblem_tensors++;
        first = first ? first : &m->tensors[i];
    }
    if (o->opts->strict && first)
        return tbm_open_fail(o, TBM_ERR_PROBLEM,
                             "refused by -o strict: tensor %s: %s (%zu tensor(s) with "
                             "problems)",
                             first->dir, first->problems.items[0], m->nproblem_tensors);
    return 0;
}

int tbm_model_open(const char *path, const struct tbm_open_options *opts, struct tbm_model **out,
                   char *err, size_t errlen)
{
    struct tbm_model *m = calloc(1, sizeof(*m));
    struct tbm_opener o = {.given = path, .m = m, .opts = opts, .err = err, .errlen = errlen};
    int r;

    *out = NULL;
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        return TBM_ERR_NOMEM;
    }
    m->dirfd = -1;
    m->isa = opts->isa;
    o.fd_budget = fd_budget();
    /* a URL is shown without the secrets it may carry */
    m->path = tbm_source_is_url(path) ? tbm_source_url_display(path) : realpath(path, NULL);
    if (!m->path) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        r = TBM_ERR_SOURCE;
        goto out_err;
    }
    if ((r = open_source(&o)) < 0 || (r = build_table(&o)) < 0)
        goto out_err;
    json_object_put(o.root);
    tbm_json_split_free(&o.split);
    *out = m;
    return 0;

out_err:
    if (r == TBM_ERR_SOURCE && m->kind == TBM_SOURCE_CONTAINER && m->src)
        tbm_container_diagnose(&o);
    json_object_put(o.root);
    tbm_json_split_free(&o.split);
    tbm_model_close(m);
    clean_error(err, errlen);
    return r;
}

void tbm_model_close(struct tbm_model *m)
{
    if (!m)
        return;
    tbm_tensors_free(m);
    tbm_source_close(m->src);
    if (m->dirfd >= 0)
        close(m->dirfd);
    json_object_put(m->config);
    free(m->architecture);
    tbm_dirs_free(m);
    tbm_stats_table_free(m);
    free(m->index_json);
    free(m->path);
    free(m);
}

const char *tbm_model_path(const struct tbm_model *m)
{
    return m->path;
}

void tbm_model_owner(const struct tbm_model *m, unsigned *uid, unsigned *gid, unsigned *mode)
{
    *uid = m->owner_uid;
    *gid = m->owner_gid;
    *mode = m->owner_mode;
}

size_t tbm_model_tensor_count(const struct tbm_model *m)
{
    return m->ntensors;
}

size_t tbm_model_problem_tensors(const struct tbm_model *m)
{
    return m->nproblem_tensors;
}

const char *tbm_model_tensor_dir(const struct tbm_model *m, size_t t)
{
    return m->tensors[t].dir;
}

size_t tbm_model_tensor_message_count(const struct tbm_model *m, size_t t, bool problems)
{
    const struct tbm_tensor *tensor = &m->tensors[t];
    const struct tbm_tensor_stats *st;

    if (problems)
        return tensor->problems.count;
    st = tbm_tensor_stats(m, t);
    return tensor->warnings.count + (st ? st->warnings.count : 0);
}

const char *tbm_model_tensor_message(const struct tbm_model *m, size_t t, bool problems, size_t i)
{
    const struct tbm_tensor *tensor = &m->tensors[t];

    if (problems)
        return tensor->problems.items[i];
    if (i < tensor->warnings.count)
        return tensor->warnings.items[i];
    return tbm_tensor_stats(m, t)->warnings.items[i - tensor->warnings.count];
}

void tbm_tensor_nm(const struct tbm_tensor *t, char *buf, size_t len)
{
    if (t->header_valid)
        snprintf(buf, len, "%u:%u", t->hdr.nm_n, t->hdr.nm_m);
    else if (t->index_nm_known)
        snprintf(buf, len, "%u:%u", t->index_nm_n, t->index_nm_m);
    else
        snprintf(buf, len, "0:0");
}
