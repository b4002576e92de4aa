/* Failures explained: every read or open that fails with EIO is logged
 * once per tensor, view and reason (stderr in the foreground, syslog in the
 * background), and a source found changed in place is logged once and has
 * the kernel's cached pages of the mount dropped, so that no reader mixes
 * the old bytes it cached with the EIO that follows. */
#include "fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/* Distinct failures remembered (and so logged once each); past this many,
 * one line says that further ones go unlogged. */
#define LOGGED_MAX 4096

struct key {
    long tensor;
    const struct tbm_view *view;
    int status;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct key logged[LOGGED_MAX];
static size_t nlogged;

void tbm_fs_log(const struct tbm_fs *fs, const char *fmt, ...)
{
    va_list ap;
    char line[2048];

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (fs->foreground)
        fprintf(stderr, "tbmfs: %s\n", line);
    else
        syslog(LOG_DAEMON | LOG_ERR, "%s", line);
}

/* Whether this failure is new; remembers it. */
static bool first_time(long tensor, const struct tbm_view *view, int status)
{
    bool fresh = true;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nlogged && fresh; i++)
        fresh =
            !(logged[i].tensor == tensor && logged[i].view == view && logged[i].status == status);
    if (fresh && nlogged < LOGGED_MAX)
        logged[nlogged++] = (struct key){tensor, view, status};
    else if (fresh)
        fresh = nlogged++ == LOGGED_MAX; /* the one "no more" line */
    pthread_mutex_unlock(&lock);
    return fresh;
}

static void *invalidate(void *arg)
{
    struct tbm_fs *fs = arg;

    /* Every file inode: for a container all its tensors changed, and for a
     * manifest dropping the cache of a sound file only costs a re-read. */
    for (fuse_ino_t ino = FUSE_ROOT_ID + 1; ino < tbm_fs_last_ino(fs); ino++)
        fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
    return NULL;
}

static const char *reason(int status)
{
    switch (status) {
    case TBM_ERR_CHANGED:
        return "the source changed since the mount";
    case TBM_ERR_BROKEN:
        return "the tensor has problems (see header.json or tbmfs --check)";
    case TBM_ERR_NOMEM:
        return "out of memory";
    default:
        return "the source could not be read (it shrank or failed)";
    }
}

void tbm_fs_failed(struct tbm_fs *fs, long tensor, const struct tbm_view *view, int status)
{
    char what[256];
    pthread_t thread;

    if (status == TBM_ERR_CHANGED && tensor >= 0 &&
        tbm_views_change_report(fs->views, (size_t)tensor, what, sizeof(what))) {
        tbm_fs_log(fs, "%s changed since mount (%s): remount to see the new model",
                   tbm_views_source_name(fs->views, (size_t)tensor), what);
        /* Not from this request's thread: the kernel may hold the very
         * pages whose read we are answering. */
        if (fs->se && tbm_fs_thread(&thread, invalidate, fs) == 0)
            pthread_detach(thread);
    }
    if (!first_time(tensor, view, status))
        return;
    if (nlogged > LOGGED_MAX) {
        tbm_fs_log(fs, "more than %d failures: further ones are not logged", LOGGED_MAX);
        return;
    }
    if (tensor < 0)
        tbm_fs_log(fs, "%s: %s", view ? tbm_view_name(view) : "?", reason(status));
    else
        tbm_fs_log(fs, "tensor %s: %s: %s", tbm_views_tensor_dir(fs->views, (size_t)tensor),
                   view ? tbm_view_name(view) : "?", reason(status));
}
