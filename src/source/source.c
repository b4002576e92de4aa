/* What every source shares, built on its operations (tbm_source_ops): the
 * check that it is still the file it was, reads in a request's mode with the
 * one check at its end, holds of its bytes, and the stop of every transfer. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/source.h"

/* A ctime taken as the file's after it lost a link: immutable once
 * published, each one kept (linked to the one before) until the source
 * closes, so that a reader holding one never sees it freed. */
struct tbm_source_unlinked {
    struct timespec ctime;
    uint64_t nlink;
    struct tbm_source_unlinked *before;
};

static bool same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Whether src is still the file it was, now as identified. ctime too, which
 * no one can set back (contract v2: a file rewritten in place with its mtime
 * put back is a change), except that losing a link moves it: a source
 * replaced by a rename has its old inode's ctime bumped by the unlink, yet is
 * served as it was (we hold that inode). That ctime, with the link count
 * after the loss, becomes the file's: a later rewrite moves it again without
 * a link lost, and is a change. */
static bool same_file(struct tbm_source *src, const struct tbm_source_id *now)
{
    const struct tbm_source_id *was = &src->id;

    if (now->size != was->size || now->dev != was->dev || now->ino != was->ino ||
        !same_time(now->mtime, was->mtime) || strcmp(now->tag, was->tag) != 0)
        return false;
    struct tbm_source_unlinked *last = atomic_load(&src->unlinked);
    struct timespec ctime = last ? last->ctime : was->ctime;
    uint64_t nlink = last ? last->nlink : was->nlink;
    if (same_time(now->ctime, ctime))
        return true;
    if (now->nlink >= nlink)
        return false;
    struct tbm_source_unlinked *u = malloc(sizeof(*u));
    if (!u)
        return true; /* as before this rule: a link lost is not a change */
    *u = (struct tbm_source_unlinked){now->ctime, now->nlink, last};
    if (!atomic_compare_exchange_strong(&src->unlinked, &last, u))
        free(u); /* another reader recorded it (or a later loss) first */
    return true;
}

static atomic_bool stopping;

void tbm_source_stop(void)
{
    atomic_store(&stopping, true);
}

bool tbm_source_stopping(void)
{
    return atomic_load(&stopping);
}

int tbm_source_verify(struct tbm_source *src)
{
    struct tbm_source_id now;

    if (atomic_load(&src->changed))
        return TBM_ERR_CHANGED;
    if (src->ops->identify(src, &now) < 0)
        return TBM_ERR_IO;
    if (same_file(src, &now))
        return 0;
    src->changed_to = now;
    atomic_store(&src->changed, true);
    return TBM_ERR_CHANGED;
}

bool tbm_source_take_report(struct tbm_source *src, char *buf, size_t len)
{
    const struct tbm_source_id *a = &src->id, *b = &src->changed_to;

    if (!atomic_load(&src->changed) || atomic_exchange(&src->reported, true))
        return false;
    if (a->size != b->size)
        snprintf(buf, len, "size %llu -> %llu", (unsigned long long)a->size,
                 (unsigned long long)b->size);
    else if (a->dev != b->dev || a->ino != b->ino)
        snprintf(buf, len, "another file");
    else if (strcmp(a->tag, b->tag) != 0)
        snprintf(buf, len, "validator %s -> %s", a->tag, b->tag);
    else if (a->mtime.tv_sec != b->mtime.tv_sec || a->mtime.tv_nsec != b->mtime.tv_nsec)
        snprintf(buf, len, "mtime");
    else
        snprintf(buf, len, "ctime");
    return true;
}

int tbm_request_end(struct tbm_request *req, int status)
{
    int r = status;

    for (size_t i = 0; i < req->n; i++) {
        int v = tbm_source_verify(req->src[i]);
        if (v == TBM_ERR_CHANGED || (v < 0 && r >= 0))
            r = v;
    }
    req->n = 0;
    return r;
}

/* Whether a read of src is checked at the end of req, which then counts
 * it. */
static bool deferred(struct tbm_request *req, struct tbm_source *src)
{
    if (!req)
        return false;
    for (size_t i = 0; i < req->n; i++)
        if (req->src[i] == src)
            return true;
    if (req->n == TBM_REQUEST_SOURCES)
        return false;
    req->src[req->n++] = src;
    return true;
}

static unsigned mode_of(const struct tbm_request *req)
{
    return req ? req->mode : 0;
}

int tbm_source_read(struct tbm_source *src, void *buf, size_t len, uint64_t off,
                    struct tbm_request *req, size_t *got)
{
    return src->ops->read(src, buf, len, off, mode_of(req), got);
}

int tbm_source_read_full(struct tbm_source *src, void *buf, size_t len, uint64_t off,
                         struct tbm_request *req)
{
    size_t got;
    int r = src->ops->read(src, buf, len, off, mode_of(req), &got);

    if (r < 0 && r != TBM_ERR_IO)
        return r; /* TBM_ERR_AGAIN among them: nothing was read */
    if (deferred(req, src))
        return r < 0 ? r : got == len ? 0 : TBM_ERR_IO;
    /* a short read because the file shrank is the change, said as such */
    int v = tbm_source_verify(src);
    if (v == TBM_ERR_CHANGED)
        return v;
    return r < 0 ? r : got == len ? 0 : TBM_ERR_IO;
}

int tbm_source_hold(struct tbm_source *src, uint64_t off, size_t len, const struct tbm_request *req,
                    struct tbm_source_hold *h)
{
    h->src = src;
    h->n = 0;
    if (!src->ops->hold)
        return 0;
    int r = src->ops->hold(src, off, len, mode_of(req), h->piece, TBM_SOURCE_PIECES, &h->n);
    if (r == 0 || (r < 0 && r != TBM_ERR_IO))
        return r;
    /* as for a read: bytes of a file found changed are not served, and a
     * failure because it changed is said as such */
    int v = tbm_source_verify(src);
    if (r < 0 || v < 0) {
        tbm_source_release(h);
        return v < 0 ? v : r;
    }
    return 1;
}

void tbm_source_release(struct tbm_source_hold *h)
{
    if (h->n)
        h->src->ops->release(h->src, h->piece, h->n);
    h->n = 0;
}

void tbm_source_close(struct tbm_source *src)
{
    if (!src)
        return;
    for (struct tbm_source_unlinked *u = atomic_load(&src->unlinked), *next; u; u = next) {
        next = u->before;
        free(u);
    }
    src->ops->close(src);
}
