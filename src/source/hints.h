/* The hinted ranges of a remote source (not installed): byte ranges the
 * format layer says it will read soon (the headers of a slice of the index),
 * fetched together by the next read, neighbours merged, and kept until the
 * fetch after it. A mount reads every header, and cache blocks for headers
 * 1 MiB apart would fetch the whole model. */
#ifndef TBM_SOURCE_HINTS_H
#define TBM_SOURCE_HINTS_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the ranges are fetched: requests the source readies on easy handles
 * of the store's, which the store runs together over one multi handle. */
struct tbm_hints_fetcher {
    void *ctx;
    CURL *(*easy_new)(void *ctx);
    /* Readies easy to fetch the len bytes at off into buf; *req is the
     * fetcher's, handed back to end. 0 or TBM_ERR_NOMEM (nothing left to
     * free then). */
    int (*start)(void *ctx, CURL *easy, uint64_t off, size_t len, void *buf, void **req);
    /* The transfer of req ended with code, its easy handle out of the multi
     * handle: whether buf holds the range whole. Frees req. */
    bool (*end)(void *ctx, void *req, CURLcode code);
};

struct tbm_hints;

/* An empty set of ranges fetched by f. TBM_ERR_NOMEM. */
int tbm_hints_new(const struct tbm_hints_fetcher *f, struct tbm_hints **out);

void tbm_hints_free(struct tbm_hints *s);

/* The len bytes at off will be read soon. Past a bound of bytes waiting,
 * hints are dropped: their reads go to the cache. */
void tbm_hints_add(struct tbm_hints *s, uint64_t off, size_t len);

/* Fetches the ranges hinted since the last fetch, if any, then copies what
 * the fetched ranges hold of the len bytes at off into buf: the bytes from
 * off to the end of the range holding off, or 0 bytes and in *next where
 * the next fetched range starts (UINT64_MAX when none does). A range that
 * did not arrive whole is not held: its bytes are read elsewhere. */
size_t tbm_hints_read(struct tbm_hints *s, void *buf, size_t len, uint64_t off, uint64_t *next);

/* Whether the ranges, waiting or fetched, may hold any of the len bytes at
 * off: the next read fetches those waiting, and serves what they bring. */
bool tbm_hints_cover(struct tbm_hints *s, uint64_t off, size_t len);

#endif
