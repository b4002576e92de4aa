/* The tests' door to the views (door.h): reads through tbm_file_read taken
 * as the FUSE layer takes them, and a source that holds blocks in memory. */
#include "door.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/table.h"

static bool holding, far;
static long outstanding, checks;

static void broken(const char *what)
{
    fprintf(stderr, "door: %s\n", what);
    abort();
}

int door_read(struct tbm_file *f, uint64_t off, size_t len, char *dst, enum door_mode mode,
              size_t *got, struct door_seen *seen)
{
    struct tbm_reply reply;
    struct door_seen none;

    seen = seen ? seen : &none;
    *got = 0;
    unsigned flags = mode == DOOR_SPLICE   ? TBM_READ_SPLICE
                     : mode == DOOR_NOWAIT ? TBM_READ_NOWAIT
                                           : 0;
    holding = mode == DOOR_HELD;
    far = mode == DOOR_NOWAIT;
    int r = tbm_file_read(f, off, len, dst, flags, &reply);
    holding = far = false;
    if (r < 0)
        return r;
    seen->kind = reply.kind;
    seen->pieces = 0;
    switch (reply.kind) {
    case TBM_REPLY_BYTES:
        if (reply.len > len)
            broken("a reply of more bytes than asked");
        if (reply.data != dst)
            memmove(dst, reply.data, reply.len);
        *got = reply.len;
        break;
    case TBM_REPLY_SPLICE:
        if (mode != DOOR_SPLICE || reply.range.len > len || reply.range.len == 0)
            broken("a range to splice not asked for, empty, or longer than asked");
        r = tbm_reply_check(&reply);
        if (r < 0)
            break;
        if (pread(reply.range.fd, dst, reply.range.len, (off_t)reply.range.pos) !=
            (ssize_t)reply.range.len)
            broken("a range to splice that its descriptor does not hold");
        *got = reply.range.len;
        break;
    case TBM_REPLY_HELD:
        if (mode != DOOR_HELD)
            broken("held pieces not asked for");
        seen->pieces = reply.held.n;
        for (size_t i = 0; i < reply.held.n; i++) {
            if (*got + reply.held.piece[i].len > len)
                broken("held pieces longer than asked");
            memcpy(dst + *got, reply.held.piece[i].data, reply.held.piece[i].len);
            *got += reply.held.piece[i].len;
        }
        break;
    }
    tbm_reply_done(&reply);
    return r;
}

int door_read_row(const struct tbm_views *views, const struct tbm_row *row, size_t t, uint64_t off,
                  size_t len, char *dst, enum door_mode mode, size_t *got)
{
    struct tbm_file *f;
    int r = tbm_file_open(views, row, t, &f);

    *got = 0;
    if (r < 0)
        return r;
    r = door_read(f, off, len, dst, mode, got, NULL);
    tbm_file_close(f);
    return r;
}

/* The holding source: another source's reads and identity, and holds of
 * its bytes as copied when it was wrapped. */
struct held {
    struct tbm_source src;
    struct tbm_source *inner;
    unsigned char *copy;
    size_t len, block;
};

static int held_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, unsigned mode,
                     size_t *got)
{
    struct held *h = (struct held *)src;

    if (far && !(mode & TBM_SOURCE_NOWAIT))
        broken("a read that would wait, in a request that may not");
    if (far)
        return TBM_ERR_AGAIN;
    return h->inner->ops->read(h->inner, buf, len, off, mode, got);
}

static int held_identify(struct tbm_source *src, struct tbm_source_id *out)
{
    struct held *h = (struct held *)src;

    checks++;
    return h->inner->ops->identify(h->inner, out);
}

static void held_close(struct tbm_source *src)
{
    struct held *h = (struct held *)src;

    tbm_source_close(h->inner);
    free(h->copy);
    free(h);
}

static int held_hold(struct tbm_source *src, uint64_t off, size_t len, unsigned mode,
                     struct tbm_source_piece *pieces, size_t max, size_t *n)
{
    struct held *h = (struct held *)src;

    (void)mode; /* every byte is in memory: nothing waits */
    *n = 0;
    if (!holding)
        return 0;
    if (off > h->len || len > h->len - off)
        return TBM_ERR_IO;
    for (uint64_t pos = off; pos < off + len;) {
        uint64_t end = (pos / h->block + 1) * h->block;
        end = end < off + len ? end : off + len;
        if (*n == max) {
            *n = 0;
            return 0; /* more blocks than a hold takes: read instead */
        }
        pieces[(*n)++] = (struct tbm_source_piece){h->copy + pos, (size_t)(end - pos), h};
        pos = end;
    }
    outstanding += (long)*n;
    return 1;
}

static void held_release(struct tbm_source *src, struct tbm_source_piece *pieces, size_t n)
{
    (void)src;
    for (size_t i = 0; i < n; i++)
        if (pieces[i].ref != src)
            broken("a piece let go by another source");
    outstanding -= (long)n;
}

static const struct tbm_source_ops held_ops = {
    .read = held_read,
    .identify = held_identify,
    .close = held_close,
    .hold = held_hold,
    .release = held_release,
};

static struct tbm_source *wrap(struct tbm_source *inner, size_t block)
{
    struct held *h = calloc(1, sizeof(*h));
    size_t got;

    if (!h || !(h->copy = malloc(inner->id.size ? inner->id.size : 1)))
        broken("out of memory");
    h->inner = inner;
    h->len = inner->id.size;
    h->block = block;
    if (inner->ops->read(inner, h->copy, h->len, 0, 0, &got) < 0 || got != h->len)
        broken("cannot copy the source");
    h->src = (struct tbm_source){
        .ops = &held_ops, .name = inner->name, .id = inner->id, .fd = inner->fd};
    return &h->src;
}

void door_hold_model(struct tbm_model *m, size_t block)
{
    struct tbm_source *old = m->src;

    if (old)
        m->src = wrap(old, block);
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (old && t->src == old)
            t->src = m->src;
        else if (t->owns_src)
            t->src = wrap(t->src, block);
    }
}

long door_holds_outstanding(void)
{
    return outstanding;
}

long door_checks(void)
{
    return checks;
}
