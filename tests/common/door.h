/* What the unit tests and the fuzzers read the views through: the daemon's
 * own door (tbm_file_open, tbm_file_read, tbm_reply_*), each reply taken as
 * the FUSE layer takes it, and a source that holds blocks in memory as a
 * remote source's cache does, so that every kind of reply is read (or, for
 * a read that may not wait, has its bytes far, as a remote source's not yet
 * fetched), and that counts its change checks. */
#ifndef TBM_TESTS_DOOR_H
#define TBM_TESTS_DOOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/model.h"
#include "tbm/view.h"

/* How a read is asked for. */
enum door_mode {
    DOOR_BYTES,  /* no flags, holding off: computed or read bytes */
    DOOR_SPLICE, /* TBM_READ_SPLICE: a range of the source's descriptor where the bytes lie */
    DOOR_HELD,   /* holding on: pieces of the source's blocks where the bytes lie */
    DOOR_NOWAIT, /* TBM_READ_NOWAIT, holding off, the source far: each read of the
                  * holding source answers TBM_ERR_AGAIN, as a remote source's
                  * whose blocks are on their way, and a read that would wait
                  * aborts */
};

/* What door_read saw. */
struct door_seen {
    enum tbm_reply_kind kind;
    size_t pieces; /* HELD: how many */
};

/* Reads up to len bytes at off of f through tbm_file_read, asked as mode
 * says, into dst (len bytes; also the buffer the read may compute into),
 * and lets the reply go. A SPLICE reply is checked with tbm_reply_check and
 * its range read back from the descriptor, as the daemon's splice takes it;
 * HELD pieces are copied in order. Returns tbm_file_read's status, with
 * *got the bytes (0 on failure). Aborts when a reply breaks its promises (a
 * range or pieces longer than asked, a range the descriptor does not hold). */
int door_read(struct tbm_file *f, uint64_t off, size_t len, char *dst, enum door_mode mode,
              size_t *got, struct door_seen *seen);

/* Opens row's file of tensor t and reads len bytes at off through it (one
 * open, one read, one close). */
int door_read_row(const struct tbm_views *views, const struct tbm_row *row, size_t t, uint64_t off,
                  size_t len, char *dst, enum door_mode mode, size_t *got);

/* Puts every source of m behind a holding source: reads, identity and
 * descriptor are the source's own, and, while the mode of a door_read is
 * DOOR_HELD, a range of at most two blocks of block bytes is held from a
 * copy of the source taken now. For a test, right after the open: the
 * model's table is the test's to change then. */
void door_hold_model(struct tbm_model *m, size_t block);

/* Holds not yet let go (0 once every reply is done). */
long door_holds_outstanding(void);

/* How many times a holding source was asked whether it changed (its
 * identity), since the start. */
long door_checks(void);

#endif
