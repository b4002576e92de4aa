/* The FUSE front end: serves a model's views through the low-level,
 * inode-based libfuse API. */
#ifndef TBM_FUSE_FS_H
#define TBM_FUSE_FS_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "tbm/view.h"

struct tbm_fs {
    const struct tbm_model *model;
    const struct tbm_views *views;
    uid_t uid; /* owner of every file: whoever mounted */
    gid_t gid;
    unsigned max_read; /* bytes per read request, as given in the mount options */
    bool splice;       /* byte ranges of the source are spliced: wanted, then
                        * kept by init only if the kernel and pipe allow */
};

/* The operations to pass to fuse_session_new with a struct tbm_fs as userdata;
 * init settles its splice field. */
extern const struct fuse_lowlevel_ops tbm_fs_ops;

/* Best effort, for root only: raises the readahead of the tbmfs mount on
 * mountpoint to 1 MiB once the session loop has answered INIT. Call after
 * fuse_daemonize, just before the loop. */
void tbm_fs_widen_readahead(const char *mountpoint);

#endif
