/* libFuzzer target that opens a model from arbitrary bytes and reads random
 * ranges of every file of it through the daemon's door (tests/common/door.h).
 * Each input is written over one file in memory (tmpfs), kept open for the
 * whole run: no file is made per input. It has no reference of its own
 * (fuzz_source checks the bytes); its oracle is the sanitizers and the
 * views' own promises: a read within the size it gave returns that many
 * bytes, and the same bytes whether they come computed, as a range to
 * splice or as pieces the source holds. */
#include "fuzz_target.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/door.h"
#include "tbm/model.h"
#include "tbm/names.h"
#include "tbm/view.h"

/* Input layout, that of fuzz_source's corpus (tests/fuzz/corpus): byte 0
 * the mode, the rest the file; the reads' seed is a hash of the input.
 *   bit 0  open it as a bare .tb, not a .tbm container
 *   bit 3  strict open
 * (fuzz_source's other bits mean nothing here.) */
#define MODE_BLOB   0x01u
#define MODE_STRICT 0x08u
#define HEAD        1

#define MAX_TENSORS 16          /* tensors whose views are read */
#define READS       4           /* random ranges per file */
#define READ_MAX    (64u << 10) /* bytes per range at most */

#define CHECK(cond) ((cond) ? (void)0 : check_failed(#cond, __LINE__))

static void check_failed(const char *cond, int line) __attribute__((noreturn));

static void check_failed(const char *cond, int line)
{
    fprintf(stderr, "fuzz_views.c:%d: invariant violated: %s\n", line, cond);
    abort();
}

static char dir[256], tbm_path[300], tb_path[300];
static int fd = -1;
static char buf[READ_MAX], again[READ_MAX];

/* One directory on tmpfs for the run: the file, and a link named .tb to it. */
static void setup(void)
{
    if (fd >= 0)
        return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/tbm-fuzz-views.XXXXXX", base ? base : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(tbm_path, sizeof(tbm_path), "%s/model.tbm", dir);
    snprintf(tb_path, sizeof(tb_path), "%s/model.tb", dir);
    fd = open(tbm_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && symlink("model.tbm", tb_path) == 0);
}

static void cleanup(void) __attribute__((destructor));

static void cleanup(void)
{
    if (fd < 0)
        return;
    close(fd);
    unlink(tb_path);
    unlink(tbm_path);
    rmdir(dir);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* READS ranges of row's file for tensor t: at the start, at the end, and at
 * random offsets; each within the size gives exactly its bytes, read as
 * bytes and again as the seed picks (a range to splice, held pieces). A file
 * that does not open (cannot be served) has size 0. */
static void read_row(const struct tbm_views *v, const struct tbm_row *row, size_t t, uint64_t *seed)
{
    struct tbm_file *f;
    uint64_t size;
    size_t got, got2;

    if (!tbm_row_present(v, row) || tbm_row_slow(row) || tbm_row_size(v, row, t, &size) < 0)
        return;
    int st = tbm_file_open(v, row, t, &f);
    CHECK(st == 0 || (st == TBM_ERR_BROKEN && size == 0) || st == TBM_ERR_NOMEM);
    if (st < 0)
        return;
    for (int k = 0; k < READS; k++) {
        uint64_t r = splitmix64(seed);
        uint64_t off = k == 0 ? 0 : k == 1 ? (size > 7 ? size - 7 : 0) : size ? r % size : 0;
        size_t len = (size_t)(splitmix64(seed) % READ_MAX) + 1;
        enum door_mode mode = (enum door_mode)(1 + splitmix64(seed) % 2);
        st = door_read(f, off, len, buf, DOOR_BYTES, &got, NULL);
        uint64_t want = off < size ? (size - off < len ? size - off : len) : 0;
        /* a read can fail (a file the source cannot give), never give more */
        CHECK(st < 0 || got == want);
        if (st == 0) {
            CHECK(door_read(f, off, len, again, mode, &got2, NULL) == 0);
            CHECK(got2 == got && memcmp(buf, again, got) == 0);
        }
    }
    tbm_file_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR};
    struct tbm_model *m;
    struct tbm_views *v;
    char err[512];
    uint64_t seed = 0;

    if (size < HEAD)
        return 0;
    setup();
    seed = tbm_fnv1a64(data, size);
    opts.strict = (data[0] & MODE_STRICT) != 0;
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, data + HEAD, size - HEAD, 0) == (ssize_t)(size - HEAD));
    if (tbm_model_open(data[0] & MODE_BLOB ? tb_path : tbm_path, &opts, &m, err, sizeof(err)) < 0)
        return 0;
    /* blocks of 4 KiB to 64 KiB: a range is held in one or two, or read */
    door_hold_model(m, (size_t)4096 << (seed % 5));
    CHECK(tbm_views_open(m, NULL, &v) == 0);
    for (size_t k = 0; k < tbm_row_count(TBM_ROW_ROOT); k++)
        read_row(v, tbm_row_at(TBM_ROW_ROOT, k), 0, &seed);
    size_t n = tbm_views_tensor_count(v);
    for (size_t t = 0; t < n && t < MAX_TENSORS; t++)
        for (size_t k = 0; k < tbm_row_count(TBM_ROW_TENSOR); k++)
            read_row(v, tbm_row_at(TBM_ROW_TENSOR, k), t, &seed);
    CHECK(door_holds_outstanding() == 0);
    tbm_views_close(v);
    tbm_model_close(m);
    return 0;
}
