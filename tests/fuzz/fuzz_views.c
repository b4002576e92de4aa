/* libFuzzer target that opens a model from arbitrary bytes and reads random
 * ranges of every view of it. Each input is written over one file in memory
 * (tmpfs), kept open for the whole run: no file is made per input. It has
 * no reference of its own (fuzz_source checks the bytes); its oracle is the
 * sanitizers and the views' own promises (a read within the size it gave
 * returns that many bytes). */
#include "fuzz_target.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tbm/model.h"
#include "tbm/view.h"

/* Input layout: byte 0 the mode, bytes 1..8 the seed of the reads, the rest
 * the file.
 *   bit 0  open it as a bare .tb, not a .tbm container
 *   bit 1  strict open */
#define MODE_BLOB   0x01u
#define MODE_STRICT 0x02u
#define HEAD        9

#define MAX_TENSORS 16          /* tensors whose views are read */
#define READS       4           /* random ranges per view */
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
static char buf[READ_MAX];

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

/* READS ranges of view for tensor t: at the start, at the end, and at
 * random offsets; each within the size gives exactly its bytes. */
static void read_view(const struct tbm_views *v, const struct tbm_file_kind *view, size_t t,
                      uint64_t *seed)
{
    uint64_t size;
    size_t got;

    if (!tbm_view_present(v, view) || tbm_view_slow(view) || tbm_view_size(v, view, t, &size) < 0)
        return;
    bool servable = tbm_view_servable(v, view, t);
    for (int k = 0; k < READS; k++) {
        uint64_t r = splitmix64(seed);
        uint64_t off = k == 0 ? 0 : k == 1 ? (size > 7 ? size - 7 : 0) : size ? r % size : 0;
        size_t len = (size_t)(splitmix64(seed) % READ_MAX) + 1;
        int st = tbm_view_read(v, view, t, buf, off, len, &got);
        if (!servable) {
            CHECK(st < 0);
            return;
        }
        uint64_t want = off < size ? (size - off < len ? size - off : len) : 0;
        /* a read can fail (a view the source cannot give), never give more */
        CHECK(st < 0 || got == want);
    }
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
    memcpy(&seed, data + 1, 8);
    opts.strict = (data[0] & MODE_STRICT) != 0;
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, data + HEAD, size - HEAD, 0) == (ssize_t)(size - HEAD));
    if (tbm_model_open(data[0] & MODE_BLOB ? tb_path : tbm_path, &opts, &m, err, sizeof(err)) < 0)
        return 0;
    CHECK(tbm_views_open(m, NULL, &v) == 0);
    for (size_t k = 0; k < tbm_view_count(TBM_VIEW_ROOT); k++)
        read_view(v, tbm_view_at(TBM_VIEW_ROOT, k), 0, &seed);
    size_t n = tbm_views_tensor_count(v);
    for (size_t t = 0; t < n && t < MAX_TENSORS; t++)
        for (size_t k = 0; k < tbm_view_count(TBM_VIEW_TENSOR); k++)
            read_view(v, tbm_view_at(TBM_VIEW_TENSOR, k), t, &seed);
    tbm_views_close(v);
    tbm_model_close(m);
    return 0;
}
