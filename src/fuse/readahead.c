/* Widens the kernel's readahead for our mount: FUSE starts every mount with a
 * 128 KiB window, which caps buffered reads at 128 KiB requests; a 1 MiB
 * window sends two full requests at once, one for each worker and core. */
#include "fs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define READAHEAD_KB 1024

/* The kernel sets the window from our INIT reply, so it can only be raised
 * afterwards. A stat of the mount point returns only once our own loop has
 * answered INIT and GETATTR, so it runs in a thread of its own. */
static void *widen(void *arg)
{
    char *mountpoint = arg;
    struct stat st;
    char knob[96];

    if (stat(mountpoint, &st) == 0) {
        snprintf(knob, sizeof(knob), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
                 minor(st.st_dev));
        FILE *f = fopen(knob, "we");
        if (f) {
            fprintf(f, "%d\n", READAHEAD_KB);
            fclose(f);
        }
    }
    free(mountpoint);
    return NULL;
}

void tbm_fs_widen_readahead(const char *mountpoint)
{
    pthread_t thread;
    char *copy = strdup(mountpoint);

    if (!copy)
        return;
    if (tbm_fs_thread(&thread, widen, copy) != 0) {
        free(copy);
        return;
    }
    pthread_detach(thread);
}
