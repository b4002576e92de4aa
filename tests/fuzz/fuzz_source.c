/* libFuzzer target over the whole source-opening path: each input becomes a
 * .tbm container (and, as its first byte selects, a bare .tb and a manifest
 * directory) that is opened, validated and read through every row by the
 * daemon's door (tests/common/door.h): as bytes, as ranges to splice and as
 * pieces a source holds, each checked against the others. */
#include "fuzz_target.h"

#include <fcntl.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/door.h"
#include "format/table.h"
#include "tbm/names.h"
#include "tbm/view.h"

/* A row of the table by place and name. */
#define ROW(place, name) tbm_row_find(TBM_ROW_##place, name)

/* Input layout: byte 0 is the mode, the rest the payload.
 *   bit 0     also open the container bytes as a bare .tb
 *   bit 1     also open them as a manifest directory: the index (found by its
 *             trailer, else the whole file) becomes manifest.json, and the
 *             bytes before it are cut before every "TB01" into t0.tb, t1.tb...
 *   bit 2     framed payload: a u32 LE data length, the data, then the JSON
 *             index; the harness appends the index length, so that mutations
 *             that resize the JSON keep a well-formed container
 *   bit 3     strict open
 *   bits 4-5  kernels: 1 scalar, 2 AVX2 (when supported), else the best
 *   bit 6     the bare .tb is grown to 2 MiB by repeating the bytes after its
 *             header, so that a small input makes a tensor large enough to
 *             cross the expansion and statistics steps */
#define MODE_BLOB      0x01u
#define MODE_MANIFEST  0x02u
#define MODE_FRAMED    0x04u
#define MODE_STRICT    0x08u
#define MODE_ISA_SHIFT 4
#define MODE_GROW      0x40u

/* Work caps, so that every execution takes milliseconds. */
#define MAX_TENSORS          16   /* tensors whose views are read, per model */
#define MAX_PIECES           16   /* manifest files cut from the input */
#define SELFTEST_MAX_WEIGHTS 4096 /* larger tensors skip their self-test */
#define HEAD_READ            4100 /* first read: past a blob header, 1025 floats */
#define PROBE                64
#define WHOLE_MAX            (64u * 1024u) /* JSON views read whole up to this */
#define HEAD_ELEMENTS        4096          /* dense elements checked from the start */
#define DENSE_STEP           65536         /* dense.c's elements per expansion step */
#define STATS_MAX_WEIGHTS    (1u << 14)    /* larger tensors skip the count check */
#define GROW_SIZE            (640u << 10)  /* a grown bare .tb, see MODE_GROW */
#define HOLD_BLOCK           4096          /* bytes a block of the holding source */

/* Path buffers, each long enough for what is built in it from the one before. */
#define DIR_LEN  224
#define FILE_LEN (DIR_LEN + 16)
#define PATH_LEN (FILE_LEN + 32)

static char dir[DIR_LEN];
static char container_path[FILE_LEN], blob_path[FILE_LEN], manifest_dir[FILE_LEN];
static char bufa[HEAD_READ + 8], bufb[HEAD_READ + 8];

#define CHECK(cond) ((cond) ? (void)0 : check_failed(#cond, __LINE__))

static void check_failed(const char *cond, int line) __attribute__((noreturn));

static void check_failed(const char *cond, int line)
{
    fprintf(stderr, "fuzz_source.c:%d: invariant violated: %s\n", line, cond);
    abort();
}

static void die(const char *what) __attribute__((noreturn));

static void die(const char *what)
{
    perror(what);
    abort();
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void piece_path(char *out, size_t k)
{
    snprintf(out, PATH_LEN, "%s/t%zu.tb", manifest_dir, k);
}

static void manifest_json_path(char *out)
{
    snprintf(out, PATH_LEN, "%s/manifest.json", manifest_dir);
}

static void remove_pieces(size_t from)
{
    char p[PATH_LEN];

    for (size_t k = from; k < MAX_PIECES; k++) {
        piece_path(p, k);
        unlink(p);
    }
}

static void remove_workdir(void)
{
    char p[PATH_LEN];

    unlink(container_path);
    unlink(blob_path);
    remove_pieces(0);
    manifest_json_path(p);
    unlink(p);
    rmdir(manifest_dir);
    rmdir(dir);
}

/* One private directory per process, reused by every input: on tmpfs
 * (/dev/shm) unless TMPDIR says where, so that each input's files are
 * written to memory, not to a disk's journal. */
static void setup_workdir(void)
{
    const char *tmp = getenv("TMPDIR");

    if (dir[0])
        return;
    if (!tmp || !*tmp || strlen(tmp) > 200)
        tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof(dir), "%s/tbm-fuzz-XXXXXX", tmp);
    if (!mkdtemp(dir))
        die("mkdtemp");
    /* Error messages name the source by its real path. */
    char *real = realpath(dir, NULL);
    if (!real || strlen(real) >= sizeof(dir))
        die(dir);
    strcpy(dir, real);
    free(real);
    snprintf(container_path, FILE_LEN, "%s/model.tbm", dir);
    snprintf(blob_path, FILE_LEN, "%s/x.tb", dir);
    snprintf(manifest_dir, FILE_LEN, "%s/m", dir);
    if (mkdir(manifest_dir, 0700) < 0)
        die(manifest_dir);
    atexit(remove_workdir);
}

static void write_file(const char *path, const uint8_t *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0)
        die(path);
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0)
            die(path);
        data += n;
        len -= (size_t)n;
    }
    if (close(fd) < 0)
        die(path);
}

/* Writes c, then repeats its bytes after the header (all of it if it has no
 * more) up to GROW_SIZE. */
static void write_grown(const char *path, const uint8_t *c, size_t n)
{
    static uint8_t *buf;
    size_t skip = n > TBM_HEADER_SIZE ? TBM_HEADER_SIZE : 0;

    if (n == 0 || n >= GROW_SIZE) {
        write_file(path, c, n);
        return;
    }
    if (!buf && !(buf = malloc(GROW_SIZE)))
        die("malloc");
    memcpy(buf, c, n);
    for (size_t pos = n; pos < GROW_SIZE;) {
        size_t k = n - skip < GROW_SIZE - pos ? n - skip : GROW_SIZE - pos;
        memcpy(buf + pos, c + skip, k);
        pos += k;
    }
    write_file(path, buf, GROW_SIZE);
}

/* The container of a payload: the payload itself, or a framed payload with
 * its index length appended. */
static uint8_t *container_bytes(const uint8_t *p, size_t n, bool framed, size_t *len)
{
    uint8_t *c = malloc(n + 5);

    if (!c)
        die("malloc");
    if (!framed) {
        memcpy(c, p, n);
        *len = n;
        return c;
    }
    size_t skip = n < 4 ? n : 4;
    size_t body = n - skip;
    size_t split = skip == 4 && le32(p) < body ? le32(p) : body;
    uint32_t index_len = (uint32_t)(body - split);

    memcpy(c, p + skip, body);
    for (int i = 0; i < 4; i++)
        c[body + (size_t)i] = (uint8_t)(index_len >> (8 * i));
    *len = body + 4;
    return c;
}

/* Writes the manifest directory of container bytes c: its index as
 * manifest.json, the bytes before it as t0.tb, t1.tb, ... cut before every
 * blob magic; stale pieces of earlier inputs are removed. */
static void write_manifest(const uint8_t *c, size_t n)
{
    char p[PATH_LEN];
    size_t index_off = 0, index_len = n;

    if (n >= 4 && le32(c + n - 4) > 0 && le32(c + n - 4) <= n - 4) {
        index_len = le32(c + n - 4);
        index_off = n - 4 - index_len;
    }
    manifest_json_path(p);
    write_file(p, c + index_off, index_len);

    size_t k = 0, start = 0;
    for (;;) {
        const uint8_t *next = NULL;
        if (k + 1 < MAX_PIECES && start + 1 < index_off)
            next = memmem(c + start + 1, index_off - start - 1, "TB01", 4);
        size_t end = next ? (size_t)(next - c) : index_off;
        piece_path(p, k++);
        write_file(p, c + start, end - start);
        if (!next)
            break;
        start = end;
    }
    remove_pieces(k);
}

static enum tbm_isa pick_isa(unsigned mode)
{
    enum tbm_isa best, isa;

    CHECK(tbm_isa_select(NULL, &best) == 0);
    switch ((mode >> MODE_ISA_SHIFT) & 3) {
    case 1:
        isa = TBM_ISA_SCALAR;
        break;
    case 2:
        isa = TBM_ISA_AVX2;
        break;
    default:
        isa = best;
    }
    return isa <= best && tbm_isa_supported(isa) ? isa : best;
}

/* Reads len bytes at off of f as bytes and checks the count against the
 * file's size; where the bytes lie in the source, read as a range to splice
 * and as held pieces too, they must be the same bytes. A successful read is
 * repeated in two parts split at split, into a buffer shifted by one byte,
 * and must give the same bytes. */
static int read_checked(struct tbm_file *f, uint64_t size, uint64_t off, size_t len, size_t split)
{
    size_t got, got1, got2;
    char *b = bufb + 1;
    int r = door_read(f, off, len, bufa, DOOR_BYTES, &got, NULL);

    if (r < 0)
        return r;
    uint64_t left = off < size ? size - off : 0;
    CHECK(got == (left < len ? left : len));
    for (int mode = DOOR_SPLICE; mode <= DOOR_HELD; mode++) {
        CHECK(door_read(f, off, len, b, (enum door_mode)mode, &got1, NULL) == 0);
        CHECK(got1 == got && memcmp(bufa, b, got) == 0);
    }
    if (split == 0 || split >= len)
        return 0;
    CHECK(door_read(f, off, split, b, DOOR_BYTES, &got1, NULL) == 0);
    CHECK(door_read(f, off + split, len - split, b + got1, DOOR_HELD, &got2, NULL) == 0);
    CHECK(got1 + got2 == got && memcmp(bufa, b, got) == 0);
    return 0;
}

/* Whether a row's file opens: it can be served. */
static bool servable(const struct tbm_views *v, const struct tbm_row *row, size_t t)
{
    struct tbm_file *f;
    int r = tbm_file_open(v, row, t, &f);

    CHECK(r == 0 || r == TBM_ERR_BROKEN);
    tbm_file_close(f);
    return r == 0;
}

/* A row's file opens exactly when its reads succeed, and a tensor without
 * problems serves every row; a file that does not open has size 0. */
static void probe_row(const struct tbm_views *v, const struct tbm_row *row, size_t t, bool sound)
{
    struct tbm_file *f;
    uint64_t size;
    int r = tbm_file_open(v, row, t, &f);

    CHECK(r == 0 || r == TBM_ERR_BROKEN);
    CHECK(r == 0 || !sound);
    CHECK(tbm_row_size(v, row, t, &size) == 0 && (r == 0 || size == 0));
    if (r < 0)
        return;
    CHECK(read_checked(f, size, 0, HEAD_READ, 1027) == 0);
    read_checked(f, size, size / 2 | 1, PROBE, 13);
    read_checked(f, size, size >= 37 ? size - 37 : 0, PROBE, 29);
    read_checked(f, size, size, 8, 0);
    read_checked(f, size, UINT64_MAX - 3, 8, 0);
    tbm_file_close(f);
}

/* dense.npy is an NPY 1.0 header padded to 64 bytes, then dense.f32. */
static void check_npy(const struct tbm_views *v, size_t t)
{
    uint64_t fsize, nsize;
    unsigned char head[10];
    char nl;
    size_t got, k;

    if (!servable(v, ROW(TENSOR, "dense.npy"), t))
        return;
    CHECK(servable(v, ROW(TENSOR, "dense.f32"), t));
    CHECK(tbm_row_size(v, ROW(TENSOR, "dense.f32"), t, &fsize) == 0);
    CHECK(tbm_row_size(v, ROW(TENSOR, "dense.npy"), t, &nsize) == 0);
    CHECK(nsize > fsize && (nsize - fsize) % 64 == 0 && nsize - fsize <= 10 + 65535);
    uint64_t hlen = nsize - fsize;
    CHECK(door_read_row(v, ROW(TENSOR, "dense.npy"), t, 0, 10, (char *)head, DOOR_BYTES, &got) ==
              0 &&
          got == 10);
    CHECK(memcmp(head, "\x93NUMPY\x01\x00", 8) == 0);
    CHECK((uint64_t)(head[8] | head[9] << 8) + 10 == hlen);
    CHECK(door_read_row(v, ROW(TENSOR, "dense.npy"), t, hlen - 1, 1, &nl, DOOR_BYTES, &got) == 0 &&
          got == 1);
    CHECK(nl == '\n');

    k = fsize < PROBE ? (size_t)fsize : PROBE;
    if (k == 0)
        return;
    CHECK(door_read_row(v, ROW(TENSOR, "dense.f32"), t, fsize - k, k, bufa, DOOR_BYTES, &got) ==
              0 &&
          got == k);
    CHECK(door_read_row(v, ROW(TENSOR, "dense.npy"), t, nsize - k, k, bufb, DOOR_SPLICE, &got) ==
              0 &&
          got == k);
    CHECK(memcmp(bufa, bufb, k) == 0);
}

/* Reads [off, off + len) of a row's file that must serve all of it. */
static char *read_range(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                        uint64_t off, uint64_t len)
{
    char *buf = malloc(len + 1);
    size_t got;

    CHECK(buf != NULL);
    CHECK(door_read_row(v, row, t, off, len, buf, DOOR_BYTES, &got) == 0 && got == len);
    return buf;
}

/* The stored bytes of elements [first, first + count), read through
 * weights.bin, and the mask words of their groups, through mask.bin. */
struct payload {
    char *weights, *mask;
    uint64_t first, g0; /* first element, and its group */
    size_t es;          /* bytes per stored element */
    uint32_t m, wb;     /* group size, bytes per stored group (1 in the tools' layout) */
    uint64_t stored;    /* groups the stored mask holds; later ones are pruned */
    bool masked;        /* dense views apply the mask */
};

static void load_payload(const struct tbm_views *v, const struct tbm_tensor *t, size_t i,
                         uint64_t first, uint64_t count, struct payload *p)
{
    p->first = first;
    p->es = tbm_precision_size(t->hdr.precision);
    p->m = t->hdr.nm_m;
    p->wb = t->mask_layout == TBM_MASK_BYTES ? 1 : tbm_mask_word_bytes(p->m);
    p->stored = t->mask_groups;
    p->masked = t->mask_usable;
    p->weights = read_range(v, ROW(TENSOR, "weights.bin"), i, first * p->es, count * p->es);
    p->mask = NULL;
    p->g0 = 0;
    if (!p->masked)
        return;
    p->g0 = first / p->m;
    uint64_t end = (first + count - 1) / p->m + 1;
    end = end < p->stored ? end : p->stored;
    p->mask = read_range(v, ROW(TENSOR, "mask.bin"), i, p->g0 * p->wb,
                         end > p->g0 ? (end - p->g0) * p->wb : 0);
}

static void free_payload(struct payload *p)
{
    free(p->weights);
    free(p->mask);
}

/* Whether element k is kept: bit k % m of its group's little-endian word;
 * in the tools' one byte per group, positions 8 and up are pruned, and so
 * is a group the stored mask lacks. */
static bool kept_bit(const struct payload *p, uint64_t k)
{
    if (!p->masked)
        return true;
    if (k / p->m >= p->stored)
        return false;
    const unsigned char *word = (const unsigned char *)p->mask + (k / p->m - p->g0) * p->wb;
    uint32_t j = (uint32_t)(k % p->m);
    return j / 8 < p->wb && (word[j / 8] >> (j % 8) & 1);
}

static uint64_t stored_bits(const struct payload *p, uint64_t k)
{
    uint64_t bits = 0;

    memcpy(&bits, p->weights + (k - p->first) * p->es, p->es);
    return bits;
}

/* fp16 to float32 as F16C does it: exact, signalling NaNs made quiet. */
static uint32_t f16_to_f32(uint32_t h)
{
    uint32_t sign = (h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, e = 113;

    if (exp == 0x1f)
        return sign | 0x7f800000 | man << 13 | (man ? 0x400000 : 0);
    if (exp)
        return sign | (exp + 112) << 23 | man << 13;
    if (!man)
        return sign;
    while (!(man & 0x400)) {
        man <<= 1;
        e--;
    }
    return sign | e << 23 | (man & 0x3ff) << 13;
}

/* The contract's float32 of a stored element; fp64 rounds as the hardware's
 * conversion does. */
static uint32_t expected_f32(enum tbm_precision prec, uint64_t bits)
{
    double d;
    float f;
    uint32_t out;

    switch (prec) {
    case TBM_FP16:
        return f16_to_f32((uint32_t)bits);
    case TBM_BF16:
        return (uint32_t)bits << 16;
    case TBM_FP64:
        memcpy(&d, &bits, sizeof(d));
        f = (float)d;
        memcpy(&out, &f, sizeof(out));
        return out;
    case TBM_FP32:
        break;
    }
    return (uint32_t)bits;
}

/* Elements [first, first + count) of dense.f32, read in one call (into a
 * misaligned buffer if asked), against the contract's expansion of the
 * stored payloads. */
static void check_dense_range(const struct tbm_views *v, const struct tbm_tensor *t, size_t i,
                              uint64_t first, uint64_t count, bool misaligned)
{
    struct payload p;
    char *mem = malloc(count * 4 + 1);
    char *dense = mem + misaligned;
    size_t got;

    CHECK(mem != NULL);
    load_payload(v, t, i, first, count, &p);
    CHECK(door_read_row(v, ROW(TENSOR, "dense.f32"), i, first * 4, count * 4, dense, DOOR_BYTES,
                        &got) == 0 &&
          got == count * 4);
    for (uint64_t k = first; k < first + count; k++) {
        uint32_t want = kept_bit(&p, k) ? expected_f32(t->hdr.precision, stored_bits(&p, k)) : 0;
        uint32_t have;
        memcpy(&have, dense + (k - first) * 4, 4);
        if (have != want) {
            fprintf(stderr, "dense.f32 element %llu: got 0x%08x, want 0x%08x\n",
                    (unsigned long long)k, have, want);
            CHECK(have == want);
        }
    }
    free_payload(&p);
    free(mem);
}

/* header.json's counters against a count over the whole payloads. */
static void check_stats(const struct tbm_views *v, const struct tbm_model *m,
                        const struct tbm_tensor *t, size_t i)
{
    const struct tbm_blob_header *h = &t->hdr;
    struct tbm_mask_stats want = {0};
    struct payload p;
    /* the views' own model: the statistics computed on first need */
    const struct tbm_tensor_stats *st = tbm_tensor_stats(m, i);
    if (!st || !st->known || !t->mask_usable || h->num_weights > STATS_MAX_WEIGHTS)
        return;
    load_payload(v, t, i, 0, h->num_weights, &p);
    uint64_t sign = (uint64_t)1 << (8 * p.es - 1);
    for (uint64_t g = 0; g * h->nm_m < h->num_weights; g++) {
        uint64_t kept = 0;
        for (uint64_t k = g * h->nm_m; k < (g + 1) * h->nm_m && k < h->num_weights; k++) {
            bool bit = kept_bit(&p, k);
            kept += bit;
            want.mask_conflicts += !bit && (stored_bits(&p, k) & ~sign) != 0;
        }
        want.kept += kept;
        want.groups_over_n += kept > h->nm_n;
    }
    free_payload(&p);
    CHECK(st->counts.kept == want.kept && st->counts.groups_over_n == want.groups_over_n &&
          st->counts.mask_conflicts == want.mask_conflicts);
}

/* The dense expansion at its start, across one of dense.c's expansion steps
 * from a start inside a group, and at its end; then the statistics. */
static void check_payload(const struct tbm_views *v, const struct tbm_model *m,
                          const struct tbm_tensor *t, size_t i)
{
    uint64_t nw = t->hdr.num_weights, size;

    if (!servable(v, ROW(TENSOR, "dense.f32"), i) || nw == 0)
        return;
    CHECK(tbm_row_size(v, ROW(TENSOR, "weights.bin"), i, &size) == 0 &&
          size == nw * tbm_precision_size(t->hdr.precision));
    CHECK(!t->mask_usable || (tbm_row_size(v, ROW(TENSOR, "mask.bin"), i, &size) == 0 &&
                              size == t->hdr.num_mask_bytes));
    check_dense_range(v, t, i, 0, nw < HEAD_ELEMENTS ? nw : HEAD_ELEMENTS, false);
    if (nw > DENSE_STEP + 64)
        check_dense_range(v, t, i, 3, DENSE_STEP + 50, true);
    if (nw > HEAD_ELEMENTS)
        check_dense_range(v, t, i, nw - 100, 100, false);
    check_stats(v, m, t, i);
}

/* The JSON files are one object ending in a newline. json-c's strict mode
 * still takes NaN and Infinity, which it also writes for such doubles. */
static struct json_object *parse_document(const char *s, size_t len)
{
    struct json_tokener *tok = json_tokener_new();

    CHECK(tok != NULL);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *o = json_tokener_parse_ex(tok, s, (int)len);
    CHECK(o && json_object_is_type(o, json_type_object));
    CHECK(json_tokener_get_parse_end(tok) == len && s[len - 1] == '\n');
    json_tokener_free(tok);
    return o;
}

static bool has_keys(struct json_object *o, const char *const *keys)
{
    for (; *keys; keys++)
        if (!json_object_object_get_ex(o, *keys, NULL))
            return false;
    return true;
}

static struct json_object *read_document(const struct tbm_views *v, const struct tbm_row *row,
                                         size_t t)
{
    uint64_t size;

    CHECK(tbm_row_size(v, row, t, &size) == 0);
    if (size > WHOLE_MAX)
        return NULL;
    char *buf = read_range(v, row, t, 0, size);
    struct json_object *o = parse_document(buf, size);
    free(buf);
    return o;
}

static void check_header_json(const struct tbm_views *v, const struct tbm_tensor *t, size_t i)
{
    static const char *const keys[] = {"name",
                                       "dir",
                                       "shape",
                                       "dtype",
                                       "magic",
                                       "version",
                                       "nm_n",
                                       "nm_m",
                                       "num_weights",
                                       "num_mask_bytes",
                                       "weights_offset",
                                       "masks_offset",
                                       "precision",
                                       "offset",
                                       "kept",
                                       "density",
                                       "groups_over_n",
                                       "mask_conflicts",
                                       "problems",
                                       "warnings",
                                       NULL};
    struct json_object *o = read_document(v, ROW(TENSOR, "header.json"), i);
    struct json_object *name, *d, *problems;

    if (!o)
        return;
    CHECK(has_keys(o, keys));
    CHECK(json_object_object_get_ex(o, "name", &name) &&
          json_object_is_type(name, json_type_string));
    CHECK((size_t)json_object_get_string_len(name) == t->name_len &&
          memcmp(json_object_get_string(name), t->name, t->name_len) == 0);
    CHECK(json_object_object_get_ex(o, "dir", &d) &&
          strcmp(json_object_get_string(d), t->dir) == 0);
    CHECK(json_object_object_get_ex(o, "problems", &problems) &&
          json_object_array_length(problems) == t->problems.count);
    json_object_put(o);
}

static void check_model_json(const struct tbm_views *v, const struct tbm_model *m)
{
    static const char *const keys[] = {"format", "architecture", "config", "kernels", NULL};
    struct json_object *o = read_document(v, ROW(ROOT, "model.json"), 0);
    struct json_object *count;

    if (!o)
        return;
    CHECK(has_keys(o, keys));
    CHECK(json_object_object_get_ex(o, "tensor_count", &count) &&
          json_object_get_uint64(count) == m->ntensors);
    json_object_put(o);
}

/* A tensor's self-test is one JSON object with the contract's keys. */
static void check_selftest(const struct tbm_views *v, size_t t)
{
    static const char *const keys[] = {"name",           "rows",          "cols",      "nm",
                                       "batch",          "max_abs_err",   "tolerance", "pass",
                                       "sparse_seconds", "dense_seconds", "speedup",   NULL};
    uint64_t size;

    CHECK(tbm_row_size(v, ROW(TENSOR, "selftest"), t, &size) == 0);
    char *out = read_range(v, ROW(TENSOR, "selftest"), t, 0, size);
    struct json_object *o = parse_document(out, (size_t)size);
    CHECK(has_keys(o, keys));
    json_object_put(o);
    free(out);
}

/* Every tensor has one directory name that is a safe file name and leads
 * back to it. */
static void check_dirs(const struct tbm_model *m)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        const char *d = m->tensors[i].dir;
        size_t len = strlen(d);
        CHECK(len > 0 && len <= TBM_NAME_MAX && !memchr(d, '/', len));
        CHECK(strcmp(d, ".") != 0 && strcmp(d, "..") != 0);
        CHECK(tbm_model_find_dir(m, d, len) == (long)i);
    }
}

static void exercise_views(const struct tbm_views *v, const struct tbm_model *m)
{
    for (size_t k = 0; k < tbm_row_count(TBM_ROW_ROOT); k++) {
        const struct tbm_row *row = tbm_row_at(TBM_ROW_ROOT, k);
        if (tbm_row_present(v, row) && !tbm_row_slow(row))
            probe_row(v, row, 0, true);
    }
    check_model_json(v, m);
    if (m->kind == TBM_SOURCE_BLOB)
        json_object_put(read_document(v, ROW(ROOT, "index.json"), 0));
    for (size_t i = 0; i < m->ntensors && i < MAX_TENSORS; i++) {
        const struct tbm_tensor *t = &m->tensors[i];
        for (size_t k = 0; k < tbm_row_count(TBM_ROW_TENSOR); k++)
            if (!tbm_row_slow(tbm_row_at(TBM_ROW_TENSOR, k)))
                probe_row(v, tbm_row_at(TBM_ROW_TENSOR, k), i, t->problems.count == 0);
        check_npy(v, i);
        check_header_json(v, t, i);
        check_payload(v, m, t, i);
        if (t->hdr.num_weights <= SELFTEST_MAX_WEIGHTS)
            check_selftest(v, i);
    }
}

static void exercise_source(const char *path, const struct tbm_open_options *opts)
{
    struct tbm_model *m;
    struct tbm_views *v;
    char err[512] = "";
    int r = tbm_model_open(path, opts, &m, err, sizeof(err));

    if (r < 0) {
        CHECK(m == NULL && strncmp(err, dir, strlen(dir)) == 0);
        return;
    }
    check_dirs(m);
    door_hold_model(m, HOLD_BLOCK);
    CHECK(tbm_views_open(m, NULL, &v) == 0);
    exercise_views(v, m);
    CHECK(door_holds_outstanding() == 0);
    tbm_views_close(v);
    tbm_model_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n;

    if (size == 0)
        return 0;
    setup_workdir();
    unsigned mode = data[0];
    struct tbm_open_options opts = {.isa = pick_isa(mode), .strict = (mode & MODE_STRICT) != 0};
    uint8_t *c = container_bytes(data + 1, size - 1, (mode & MODE_FRAMED) != 0, &n);

    write_file(container_path, c, n);
    exercise_source(container_path, &opts);
    if (mode & MODE_BLOB) {
        if (mode & MODE_GROW)
            write_grown(blob_path, c, n);
        else
            write_file(blob_path, c, n);
        exercise_source(blob_path, &opts);
    }
    if (mode & MODE_MANIFEST) {
        write_manifest(c, n);
        exercise_source(manifest_dir, &opts);
    }
    free(c);
    return 0;
}
