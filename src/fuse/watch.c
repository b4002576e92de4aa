/* The watch thread: learns of a change to the model's local files as it
 * happens (inotify, through the views) and drops the kernel's cached pages
 * and attributes of the tree at once, so that no read after the change is
 * answered from the page cache with bytes from before it. */
#include "fs.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct tbm_fs_watch {
    struct tbm_fs *fs;
    struct tbm_views_watch *watch;
    int stop; /* an eventfd: written, it ends the thread (not a pipe: the tests count those) */
    pthread_t thread;
};

static void *watch_loop(void *arg)
{
    struct tbm_fs_watch *fw = arg;
    struct pollfd p[2] = {{.fd = tbm_views_watch_fd(fw->watch), .events = POLLIN},
                          {.fd = fw->stop, .events = POLLIN}};

    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        if (tbm_views_watch_read(fw->watch) > 0)
            tbm_fs_sources_changed(fw->fs);
    }
    return NULL;
}

int tbm_fs_watch_start(struct tbm_fs *fs, struct tbm_fs_watch **out)
{
    struct tbm_fs_watch *fw = calloc(1, sizeof(*fw));

    *out = NULL;
    if (!fw)
        return TBM_ERR_NOMEM;
    fw->fs = fs;
    fw->stop = -1;
    int r = tbm_views_watch_open(fs->views, &fw->watch);
    if (r < 0 || (fw->stop = eventfd(0, EFD_CLOEXEC)) < 0 ||
        tbm_fs_thread(&fw->thread, watch_loop, fw) != 0)
        goto fail;
    *out = fw;
    return 0;
fail:
    /* without a watch, a change is still found by the check of each read */
    tbm_views_watch_close(fw->watch);
    if (fw->stop >= 0)
        close(fw->stop);
    free(fw);
    return r < 0 ? r : TBM_ERR_NOMEM;
}

void tbm_fs_watch_stop(struct tbm_fs_watch *fw)
{
    if (!fw)
        return;
    while (eventfd_write(fw->stop, 1) < 0 && errno == EINTR)
        ;
    pthread_join(fw->thread, NULL);
    close(fw->stop);
    tbm_views_watch_close(fw->watch);
    free(fw);
}
