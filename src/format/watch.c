/* Learning of a change to a model's local files as it happens (inotify):
 * one watch on a container or bare blob, or one on a manifest's directory,
 * which reports changes to the files in it however many there are. What an
 * event names is then checked as a read would check it. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

/* What writes, truncates, appends, renames or deletes a watched file. */
#define FILE_EVENTS (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVE_SELF | IN_DELETE_SELF)
#define DIR_EVENTS  (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_DELETE)

struct tbm_watch {
    const struct tbm_model *m;
    int fd;
};

int tbm_model_watch_open(const struct tbm_model *m, struct tbm_watch **out)
{
    bool dir = m->kind == TBM_SOURCE_MANIFEST;
    struct tbm_watch *w;

    *out = NULL;
    if (!dir && (!m->src || m->src->fd < 0))
        return TBM_ERR_SOURCE; /* a URL: nothing here to watch */
    if (!(w = calloc(1, sizeof(*w))))
        return TBM_ERR_NOMEM;
    w->m = m;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0 || inotify_add_watch(w->fd, m->path, dir ? DIR_EVENTS : FILE_EVENTS) < 0) {
        tbm_watch_close(w);
        return TBM_ERR_SOURCE;
    }
    *out = w;
    return 0;
}

int tbm_watch_fd(const struct tbm_watch *w)
{
    return w->fd;
}

/* Whether a manifest entry's file is name, or lies under the directory name. */
static bool names_file(const char *file, const char *name)
{
    size_t len = strlen(name);

    return strncmp(file, name, len) == 0 && (file[len] == '\0' || file[len] == '/');
}

/* Whether src is found changed now, not before: a source known changed
 * stays so, and the events that keep coming for it (a file rewritten in a
 * loop) must not drop the kernel's cache of the whole tree each time. */
static bool newly_changed(struct tbm_source *src)
{
    return !atomic_load(&src->changed) && tbm_source_verify(src) == TBM_ERR_CHANGED;
}

/* Checks the sources an event names: the model's own, or in manifest mode
 * those of the tensors whose file it names; how many changed now. */
static size_t check_event(const struct tbm_model *m, const struct inotify_event *ev)
{
    size_t changed = 0;

    if (m->kind != TBM_SOURCE_MANIFEST)
        return newly_changed(m->src);
    if (ev->len == 0)
        return 0;
    for (size_t t = 0; t < m->ntensors; t++) {
        struct tbm_source *src = m->tensors[t].src;
        if (m->tensors[t].owns_src && src && names_file(src->name, ev->name))
            changed += newly_changed(src);
    }
    return changed;
}

size_t tbm_watch_read(struct tbm_watch *w)
{
    char buf[16 * (sizeof(struct inotify_event) + NAME_MAX + 1)]
        __attribute__((aligned(__alignof__(struct inotify_event))));
    size_t changed = 0;
    ssize_t n;

    while ((n = read(w->fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            changed += check_event(w->m, ev);
            p += sizeof(*ev) + ev->len;
        }
    }
    return changed;
}

void tbm_watch_close(struct tbm_watch *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}
