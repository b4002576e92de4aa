/* Text hygiene: every file of the tree and every line tbmfs prints is valid
 * UTF-8, though names, paths and strings come from files, servers and
 * command lines that need not be. The ground floor: every part of tbmfs may
 * use it, and it uses none. */
#ifndef TBM_TEXT_H
#define TBM_TEXT_H

#include <stddef.h>

/* Length of the well-formed UTF-8 character at s (len bytes left): 1 to 4,
 * or 0 when the bytes there are not one. */
size_t tbm_utf8_seq(const char *s, size_t len);

/* The largest cut of s (len bytes) at most max that falls between two
 * characters. */
size_t tbm_utf8_cut(const char *s, size_t len, size_t max);

/* Writes byte c as %XX (3 bytes) at out; returns 3. */
size_t tbm_text_escape(char *out, unsigned char c);

/* Writes len bytes of in into out (size bytes, size >= 4), NUL-terminated:
 * control bytes and bytes that are not UTF-8 become %XX, and text that does
 * not fit is cut between characters and ends in "...". Returns the length
 * written. */
size_t tbm_text_clean(char *out, size_t size, const char *in, size_t len);

#endif
