/* The block cache of a remote source (not installed): fixed-size blocks
 * fetched by a few transfer threads, shared by every reader, bounded. */
#ifndef TBM_SOURCE_CACHE_H
#define TBM_SOURCE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tbm/source.h"
#include "tbm/status.h"

#define TBM_CACHE_BLOCK (1u << 20)

/* How blocks are fetched. Each transfer thread owns the state worker_new
 * gives it (a connection), so that a thread's transfers reuse it. */
struct tbm_cache_fetcher {
    void *ctx;
    void *(*worker_new)(void *ctx);
    void (*worker_free)(void *ctx, void *worker);
    /* Fills exactly len bytes at off (one request): the i-th TBM_CACHE_BLOCK
     * of them into bufs[i]. 0 or a TBM_ERR_* that the blocks' readers get
     * (TBM_ERR_IO, TBM_ERR_NOMEM, TBM_ERR_DENIED, TBM_ERR_TRANSFER). Called
     * without any lock of the cache held. */
    int (*fetch)(void *ctx, void *worker, uint64_t off, unsigned char *const *bufs, size_t len);
    /* Seconds a read waits for its blocks at most (TBM_ERR_TRANSFER then,
     * and a line naming the source and the bytes), 0 for no limit; every
     * reader stops waiting once tbm_source_stop was called
     * (TBM_ERR_STOPPED). */
    unsigned wait_limit;
    /* Milliseconds a block whose transfer failed or timed out
     * (TBM_ERR_TRANSFER) fails every read at once, 0 for never: the kernel asks a failed read-ahead
     * again page by page, and none of those retries may wait a deadline again. */
    unsigned fail_memory_ms;
    const char *name; /* the source's, for messages */
    /* A sequential reader's widest read-ahead window, in blocks (at most
     * three quarters of the slots; 0: no read-ahead), and the most blocks one
     * read-ahead request asks for (0: 1). */
    unsigned ahead_max, request_max;
};

struct tbm_cache;

/* A cache of a source of size bytes holding at most cache_bytes of blocks
 * (at least two), fetched by up to workers threads. TBM_ERR_NOMEM. */
int tbm_cache_new(const struct tbm_cache_fetcher *f, uint64_t size, uint64_t cache_bytes,
                  unsigned workers, struct tbm_cache **out);

/* Reads up to len bytes at off, short only at the end of the source; reading
 * on from where a reader left off fetches the next blocks ahead of it. 0,
 * or the failed fetch's status (TBM_ERR_IO once the source changed,
 * TBM_ERR_TRANSFER when the wait_limit passed, or the block failed less
 * than fail_memory_ms ago); with
 * mode TBM_SOURCE_NOWAIT, TBM_ERR_AGAIN instead of any wait, the block
 * asked for. */
int tbm_cache_read(struct tbm_cache *c, void *buf, size_t len, uint64_t off, unsigned mode,
                   size_t *got);

/* Holds the blocks of the len bytes at off (inside the source, len > 0) in
 * at most max pieces, read on from as tbm_cache_read does; none is evicted
 * until tbm_cache_release. 1 with *n pieces; 0 when they need more pieces,
 * or a further block would wait for a slot that others hold (read them
 * with tbm_cache_read, which holds one block at a time); TBM_ERR_IO, or
 * TBM_ERR_AGAIN as tbm_cache_read. */
int tbm_cache_hold(struct tbm_cache *c, uint64_t off, size_t len, unsigned mode,
                   struct tbm_source_piece *pieces, size_t max, size_t *n);

void tbm_cache_release(struct tbm_cache *c, struct tbm_source_piece *pieces, size_t n);

/* The source changed: every block is dropped and every read from now on
 * fails with TBM_ERR_IO. Safe from a fetch callback. */
void tbm_cache_invalidate(struct tbm_cache *c);

void tbm_cache_free(struct tbm_cache *c);

#endif
