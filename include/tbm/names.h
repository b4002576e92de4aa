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

/* Valid UTF-8, whatever the bytes: every file of the tree and every line
 * tbmfs prints is valid UTF-8, though names, paths and strings come from
 * files and command lines that need not be. */

/* Length of the well-formed UTF-8 character at s (len bytes left): 1 to 4,
 * or 0 when the bytes there are not one. */
size_t tbm_utf8_seq(const char *s, size_t len);

/* The largest cut of s (len bytes) at most max that falls between two
 * characters. */
size_t tbm_utf8_cut(const char *s, size_t len, size_t max);

/* Writes len bytes of in into out (size bytes, size >= 4), NUL-terminated:
 * control bytes and bytes that are not UTF-8 become %XX, and text that does
 * not fit is cut between characters and ends in "...". Returns the length
 * written. */
size_t tbm_text_clean(char *out, size_t size, const char *in, size_t len);

#endif
