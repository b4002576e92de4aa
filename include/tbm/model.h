/* The validated tensor table: a model source (.tbm container, manifest
 * directory or bare .tb) opened once and checked into immutable records.
 * Callers outside the library see it through these accessors; the views
 * read the records themselves (src/format/table.h). */
#ifndef TBM_MODEL_H
#define TBM_MODEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/kernels.h"
#include "tbm/source.h"
#include "tbm/status.h"

struct tbm_model;

/* How far an open has come, for a progress line shown by another thread:
 * tensors is 0 until the index has been read and split, then its entry count;
 * loaded counts the entries taken up (each then has its header read) so far. */
struct tbm_open_progress {
    atomic_size_t tensors;
    atomic_size_t loaded;
};

struct tbm_open_options {
    enum tbm_isa isa; /* kernels used for statistics and reported in model.json */
    bool strict;      /* refuse a model in which any tensor has a problem */
    const struct tbm_remote_options *remote; /* for a URL SOURCE; NULL: defaults */
    struct tbm_open_progress *progress;      /* updated as the open goes; may be NULL */
};

/* Opens and validates path into *out. On failure returns a negative status
 * and writes one line naming the file and the reason into err. Problems of
 * single tensors do not fail the open (unless strict): they are recorded in
 * each tensor's problems list. */
int tbm_model_open(const char *path, const struct tbm_open_options *opts, struct tbm_model **out,
                   char *err, size_t errlen);

void tbm_model_close(struct tbm_model *model);

/* The source's absolute path, or its URL. */
const char *tbm_model_path(const struct tbm_model *model);

/* The source's owner, group and permission bits (a manifest directory's;
 * the mounting user's and 0444 for a URL). */
void tbm_model_owner(const struct tbm_model *model, unsigned *uid, unsigned *gid, unsigned *mode);

size_t tbm_model_tensor_count(const struct tbm_model *model);

/* Tensors with at least one problem. */
size_t tbm_model_problem_tensors(const struct tbm_model *model);

/* Tensor t's directory name under tensors/. */
const char *tbm_model_tensor_dir(const struct tbm_model *model, size_t t);

/* Computes every tensor's mask statistics (the mount computes them only
 * when first needed), in parallel; 0 or TBM_ERR_NOMEM. */
int tbm_model_compute_stats(const struct tbm_model *model);

/* How far tbm_model_compute_stats has come: bytes of masks and weights
 * read so far, of *total. */
void tbm_model_stats_progress(const struct tbm_model *model, uint64_t *done, uint64_t *total);

/* The number of tensor t's problems (problems true) or warnings, the
 * warnings of its statistics included (which computes them). */
size_t tbm_model_tensor_message_count(const struct tbm_model *model, size_t t, bool problems);

/* A watch over the model's local files (inotify), so that a change to one
 * is known as it happens rather than at the next read of it: the container
 * or bare blob, or a manifest's directory. TBM_ERR_SOURCE when there is
 * nothing local to watch (a URL) or the system refuses one. */
struct tbm_watch;
int tbm_model_watch_open(const struct tbm_model *model, struct tbm_watch **out);
/* A descriptor that polls readable when events wait. */
int tbm_watch_fd(const struct tbm_watch *watch);
/* Reads the events that wait and checks the sources they name, one fstat
 * each; returns how many of those are found changed now. */
size_t tbm_watch_read(struct tbm_watch *watch);
void tbm_watch_close(struct tbm_watch *watch);

/* Message i of those. */
const char *tbm_model_tensor_message(const struct tbm_model *model, size_t t, bool problems,
                                     size_t i);

#endif
