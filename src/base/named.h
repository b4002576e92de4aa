/* The one way the daemon reads a file the user named (not installed): the
 * credentials, a header file, a CA bundle, a tokenizer's files. Opened
 * without blocking, checked to be a regular file before a byte is read, and
 * read up to a bound, so that nothing put in its place (a FIFO, /dev/zero
 * behind a symlink, a directory, a loop) can hang the mount or read without
 * end. */
#ifndef TBM_BASE_NAMED_H
#define TBM_BASE_NAMED_H

#include <stddef.h>
#include <sys/stat.h>

/* A file read whole: its bytes (NUL after them, not counted in len) and
 * what fstat said of it when it was opened. */
struct tbm_named {
    char *bytes;
    size_t len;
    struct stat st;
};

/* Reads name (relative to dirfd, or AT_FDCWD) whole, at most max bytes
 * (a multiple of 1 MiB: messages say it in MiB). shown is how a message
 * names the file. Returns 0; 1 when there is no such file; TBM_ERR_NOMEM;
 * or TBM_ERR_SOURCE. Unless 0, why holds one line, "SHOWN: reason", and
 * out is empty. */
int tbm_named_read(int dirfd, const char *name, const char *shown, size_t max,
                   struct tbm_named *out, char *why, size_t whylen);
/* What a file of that mode is, for a message: "a FIFO", "a directory"... */
const char *tbm_named_kind(mode_t mode);
/* Frees out's bytes, wiped first: they may be a secret. */
void tbm_named_free(struct tbm_named *out);

#endif
