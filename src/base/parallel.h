/* The parallel runner (not installed): one piece of work split over the
 * CPUs, for the format layer's loads and statistics. */
#ifndef TBM_BASE_PARALLEL_H
#define TBM_BASE_PARALLEL_H

#include <stddef.h>

/* Runs fn(ctx, begin, end) over [0, n) split into one span per CPU (at most
 * 8; below a few thousand items, one span, on the calling thread). Each item
 * is in exactly one span, and spans share nothing but ctx, which they only
 * read. Returns the first span's failure (a negative fn result), if any. */
int tbm_for_each_span(size_t n, int (*fn)(void *ctx, size_t begin, size_t end), void *ctx);

#endif
