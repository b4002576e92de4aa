/* Failures explained: every read or open that fails with EIO is logged
 * once per tensor, row and reason (through the message channel), and a
 * source found changed in place is logged once and has the kernel's cached
 * pages of the files made from it dropped, so that no reader mixes the old
 * bytes it cached with the EIO that follows. */
#include "fs.h"

#include <pthread.h>

#include "tbm/log.h"

/* Whether this failure is new; remembers it. */
static bool first_time(struct tbm_fs *fs, long tensor, const struct tbm_row *row, int status)
{
    struct tbm_fs_failures *f = &fs->failures;
    bool fresh = true;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && i < TBM_FS_LOGGED_MAX && fresh; i++)
        fresh =
            !(f->seen[i].tensor == tensor && f->seen[i].row == row && f->seen[i].status == status);
    if (fresh && f->n < TBM_FS_LOGGED_MAX)
        f->seen[f->n++] = (struct tbm_fs_failure){tensor, row, status};
    else if (fresh)
        fresh = f->n++ == TBM_FS_LOGGED_MAX; /* the one "no more" line */
    pthread_mutex_unlock(&f->lock);
    return fresh;
}

/* The files made from a changed source: every root file (each may hold any
 * tensor's bytes) and the files of each tensor whose source changed. A
 * manifest's other tensors keep their cached pages: one file rewritten
 * must not make readers of the rest read everything again. */
static void invalidate_changed(struct tbm_fs *fs)
{
    for (size_t k = 0; k < fs->root_files; k++)
        fuse_lowlevel_notify_inval_inode(fs->se, tbm_fs_file_ino(fs, -1, k), 0, 0);
    for (size_t t = 0; t < fs->ntensors; t++) {
        if (!tbm_views_tensor_changed(fs->views, t))
            continue;
        for (size_t k = 0; k < fs->tensor_files; k++)
            fuse_lowlevel_notify_inval_inode(fs->se, tbm_fs_file_ino(fs, (long)t, k), 0, 0);
    }
}

static void *invalidate(void *arg)
{
    invalidate_changed(arg);
    return NULL;
}

/* Logs tensor t's source once, when it is found changed; whether it was. */
static bool report_change(struct tbm_fs *fs, size_t t)
{
    char what[256], name[4096];

    if (!tbm_views_change_report(fs->views, t, what, sizeof(what)))
        return false;
    tbm_views_source_name(fs->views, t, name, sizeof(name));
    tbm_log(TBM_LOG_ERROR, "%s changed since mount (%s): remount to see the new model", name, what);
    return true;
}

void tbm_fs_sources_changed(struct tbm_fs *fs)
{
    atomic_store(&fs->changed, true);
    for (size_t t = 0; t < fs->ntensors; t++)
        report_change(fs, t);
    if (fs->se)
        invalidate_changed(fs);
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
    case TBM_ERR_DENIED:
        return "the store refused the credentials (see the line before for its error code)";
    case TBM_ERR_TRANSFER:
        return "a transfer from the server failed or timed out (the line before says which); a "
               "read a few seconds later tries again";
    default:
        return "the source could not be read (it shrank or failed)";
    }
}

void tbm_fs_failed(struct tbm_fs *fs, long tensor, const struct tbm_row *row, int status)
{
    pthread_t thread;

    if (status == TBM_ERR_CHANGED)
        atomic_store(&fs->changed, true);
    /* Not from this request's thread: the kernel may hold the very pages
     * whose read we are answering. */
    if (status == TBM_ERR_CHANGED && tensor >= 0 && report_change(fs, (size_t)tensor) && fs->se &&
        tbm_fs_thread(&thread, invalidate, fs) == 0)
        pthread_detach(thread);
    if (!first_time(fs, tensor, row, status))
        return;
    if (fs->failures.n > TBM_FS_LOGGED_MAX) {
        tbm_log(TBM_LOG_ERROR, "more than %d failures: further ones are not logged",
                TBM_FS_LOGGED_MAX);
        return;
    }
    if (tensor < 0)
        tbm_log(TBM_LOG_ERROR, "%s: %s", row ? tbm_row_name(row) : "statistics", reason(status));
    else
        tbm_log(TBM_LOG_ERROR, "tensor %s: %s: %s", tbm_views_tensor_dir(fs->views, (size_t)tensor),
                row ? tbm_row_name(row) : "statistics", reason(status));
}
