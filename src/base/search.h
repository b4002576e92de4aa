/* The one piece search (not installed): in an array of pieces of a file or
 * a source laid end to end in order (GGUF and safetensors tensors, ranges a
 * remote source fetched), the piece that holds an offset, or the next. */
#ifndef TBM_BASE_SEARCH_H
#define TBM_BASE_SEARCH_H

#include <stddef.h>
#include <stdint.h>

/* The index of the first of n records (size bytes each, from base), sorted
 * by where they start and not overlapping, that ends after off: end(record)
 * > off, with end giving where a record ends (its start plus its length).
 * n when none does. A binary search: log2(n) calls of end. */
size_t tbm_first_ending_after(const void *base, size_t n, size_t size,
                              uint64_t (*end)(const void *record), uint64_t off);

#endif
