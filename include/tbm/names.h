/* Tensor directory names: the contract's encoding of a tensor's true name into
 * one safe, unique file name under tensors/. */
#ifndef TBM_NAMES_H
#define TBM_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* Longest directory name, in bytes. */
#define TBM_NAME_MAX 255

/* FNV-1a 64 of len bytes. */
uint64_t tbm_fnv1a64(const void *data, size_t len);

/* Encodes the true name (len bytes, may hold NUL) into out, NUL-terminated,
 * and returns its length: '%', '/', bytes below 0x20 and 0x7F become %XX; an
 * empty, "." or ".." name is %XX-encoded whole; a result over 255 bytes is cut
 * at a safe boundary to at most 246 bytes plus '~' and 8 hex digits of the
 * name's FNV-1a 64 hash. */
size_t tbm_name_encode(const char *name, size_t len, char out[TBM_NAME_MAX + 1]);

/* Writes the n-th duplicate of an encoded name (n >= 2), "<base>~n", into out,
 * cutting base at a safe boundary so that the result fits in 255 bytes.
 * Returns its length. */
size_t tbm_name_dedup(const char *encoded, size_t len, unsigned long n, char out[TBM_NAME_MAX + 1]);

#endif
