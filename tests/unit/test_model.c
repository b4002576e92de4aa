/* Unit tests of opening and validating sources: containers, manifests and
 * bare blobs built byte by byte in a temporary directory, each bad-input case
 * asserting the refusal or the per-tensor problem the contract requires. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "format/internal.h"
#include "format/table.h"

static char dir[64];

struct blob {
    uint32_t magic, version, n, m;
    uint64_t nw, nmask, woff, moff;
    uint8_t prec;
    const void *w;
    size_t wlen;
    const void *mask;
    size_t mlen;
};

/* Eight fp32 weights at 2:4: groups keep elements {0, 2} and {5, 7}. */
static const float w8[8] = {1, 0, 2, 0, 0, 3, 0, 4};
static const uint8_t m8[2] = {0x05, 0x0a};

static struct blob good_blob(void)
{
    return (struct blob){TBM_MAGIC, 1, 2, 4, 8, 2, 4096, 4096 + 32, 0, w8, 32, m8, 2};
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Serializes a blob: header, then its weights and mask where the header says. */
static size_t blob_bytes(const struct blob *b, unsigned char *out)
{
    memset(out, 0, 4096);
    put32(out, b->magic);
    put32(out + 4, b->version);
    put32(out + 8, b->n);
    put32(out + 12, b->m);
    put64(out + 16, b->nw);
    put64(out + 24, b->nmask);
    put64(out + 32, b->woff);
    put64(out + 40, b->moff);
    out[48] = b->prec;
    size_t end = 4096;
    if (b->wlen) {
        memcpy(out + b->woff, b->w, b->wlen);
        end = b->woff + b->wlen;
    }
    if (b->mlen) {
        memcpy(out + b->moff, b->mask, b->mlen);
        if (b->moff + b->mlen > end)
            end = b->moff + b->mlen;
    }
    return end;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Writes a container of blobs (each at the offset the index names) and an
 * index; index_len_override, when non-zero, replaces the stored length. */
static char *container(const char *name, const struct blob *blobs, int nblobs, const char *index,
                       uint32_t index_len_override)
{
    static char path[128];
    unsigned char *buf = calloc(1, 1 << 20);
    size_t len = 0;

    assert_non_null(buf);
    for (int i = 0; i < nblobs; i++)
        len += blob_bytes(&blobs[i], buf + len);
    size_t ilen = strlen(index);
    memcpy(buf + len, index, ilen);
    len += ilen;
    put32(buf + len, index_len_override ? index_len_override : (uint32_t)ilen);
    len += 4;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_file(path, buf, len);
    free(buf);
    return path;
}

static struct tbm_model *open_ok(const char *path, bool strict)
{
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR, .strict = strict};
    struct tbm_model *m = NULL;
    char err[512];

    int r = tbm_model_open(path, &opts, &m, err, sizeof(err));
    if (r < 0)
        fail_msg("open %s failed: %s", path, err);
    return m;
}

static void open_refused(const char *path, int status, const char *reason)
{
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR};
    struct tbm_model *m = NULL;
    char err[512] = "";

    assert_int_equal(tbm_model_open(path, &opts, &m, err, sizeof(err)), status);
    assert_null(m);
    assert_non_null(strstr(err, strrchr(path, '/') + 1));
    if (!strstr(err, reason))
        fail_msg("error \"%s\" lacks \"%s\"", err, reason);
}

static bool has_message(const struct tbm_strlist *l, const char *needle)
{
    for (size_t i = 0; i < l->count; i++)
        if (strstr(l->items[i], needle))
            return true;
    return false;
}

#define ENTRY(name, off) "{\"name\":\"" name "\",\"offset\":" #off ",\"shape\":[2,4],"

static void test_sound_container(void **state)
{
    struct blob b[2] = {good_blob(), good_blob()};
    b[1].prec = 1; /* fp16: 16 bytes of weights, mask moved up */
    b[1].wlen = 16;
    b[1].moff = 4096 + 16;
    const char *index =
        "{\"architecture\":\"llama\",\"config\":{\"hidden_size\":4},\"tensors\":[" ENTRY(
            "a", 0) "\"nm_n\":2,\"nm_m\":4,\"dtype\":\"fp32\",\"num_weights\":8,"
                    "\"num_mask_bytes\":2}," ENTRY("b", 4130) "\"dtype\":\"fp16\"}]}";
    struct tbm_model *m = open_ok(container("ok.tbm", b, 2, index, 0), false);

    (void)state;
    assert_int_equal(m->kind, TBM_SOURCE_CONTAINER);
    assert_int_equal(m->ntensors, 2);
    assert_string_equal(m->architecture, "llama");
    assert_int_equal(m->nproblem_tensors, 0);
    const struct tbm_tensor *t = &m->tensors[0];
    assert_string_equal(t->dir, "a");
    assert_true(t->header_sound && t->raw.ok && t->weights.ok && t->mask.ok && t->mask_usable);
    assert_int_equal(t->raw.off, 0);
    assert_int_equal(t->raw.len, 4130);
    assert_int_equal(t->weights.off, 4096);
    assert_int_equal(t->weights.len, 32);
    assert_int_equal(t->mask.off, 4128);
    assert_int_equal(t->mask.len, 2);
    const struct tbm_tensor_stats *st = tbm_tensor_stats(m, 0);
    assert_true(st->known && t->shape_matches);
    assert_int_equal(st->counts.kept, 4);
    assert_int_equal(st->counts.groups_over_n, 0);
    assert_int_equal(st->counts.mask_conflicts, 0);
    assert_int_equal(st->warnings.count, 0);
    assert_int_equal(t->warnings.count, 0);
    assert_int_equal(m->tensors[1].raw.off, 4130);
    assert_int_equal(m->tensors[1].weights.len, 16);
    assert_int_equal(tbm_model_find_dir(m, "b", 1), 1);
    assert_int_equal(tbm_model_find_dir(m, "c", 1), -1);
    tbm_model_close(m);
}

static void test_refused_containers(void **state)
{
    char path[128];
    struct blob b = good_blob();

    (void)state;
    snprintf(path, sizeof(path), "%s/tiny.tbm", dir);
    write_file(path, "ab", 2);
    open_refused(path, TBM_ERR_SOURCE, "too small");
    open_refused(container("zero.tbm", &b, 1, "{}", 0xffffffffu), TBM_ERR_SOURCE, "exceeds");
    open_refused(container("len0.tbm", &b, 1, "", 0), TBM_ERR_SOURCE, "index length is 0");
    open_refused(container("arr.tbm", &b, 1, "[1,2]", 0), TBM_ERR_SOURCE, "\"tensors\" array");
    open_refused(container("notarr.tbm", &b, 1, "{\"tensors\":{}}", 0), TBM_ERR_SOURCE,
                 "\"tensors\" array");
    open_refused(container("bad.tbm", &b, 1, "{\"tensors\":[}", 0), TBM_ERR_SOURCE,
                 "not valid JSON");
    open_refused(container("trail.tbm", &b, 1, "{\"tensors\":[]} x", 0), TBM_ERR_SOURCE,
                 "not valid JSON");
    open_refused(container("utf8.tbm", &b, 1, "{\"tensors\":[],\"x\":\"\xff\"}", 0), TBM_ERR_SOURCE,
                 "not valid JSON");
    open_refused(container("comma.tbm", &b, 1, "{\"tensors\":[],}", 0), TBM_ERR_SOURCE,
                 "not valid JSON");
    open_refused(container("nan.tbm", &b, 1, "{\"tensors\":[],\"config\":{\"x\":NaN}}", 0),
                 TBM_ERR_SOURCE, "NaN, infinite");
    open_refused(container("inf.tbm", &b, 1, "{\"tensors\":[{\"shape\":[1e999]}]}", 0),
                 TBM_ERR_SOURCE, "NaN, infinite");
    char deep[300] = "{\"tensors\":[],\"x\":";
    size_t n = strlen(deep);
    for (int i = 0; i < 100; i++)
        deep[n++] = '[';
    for (int i = 0; i < 100; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    open_refused(container("deep.tbm", &b, 1, deep, 0), TBM_ERR_SOURCE, "not valid JSON");
    /* Entries are loaded a slice at a time, by parallel spans past 4096: an
     * error in the last slice, after other tensors were loaded, still refuses
     * the whole index. */
    char *late = malloc(5000 * 32 + 64);
    assert_non_null(late);
    n = (size_t)sprintf(late, "{\"tensors\":[");
    for (int i = 0; i < 5000; i++)
        n += (size_t)sprintf(late + n, "{\"name\":\"t%d\",\"offset\":0},", i);
    strcpy(late + n, "]}");
    open_refused(container("late.tbm", &b, 1, late, 0), TBM_ERR_SOURCE,
                 "not valid JSON: unexpected character");
    free(late);
    snprintf(path, sizeof(path), "%s/missing.tbm", dir);
    open_refused(path, TBM_ERR_SOURCE, "No such file");
}

/* Writes a container holding only an index: prefix, then entries copies of
 * entry joined by commas, then suffix. */
static char *index_only(const char *name, const char *prefix, const char *entry, size_t entries,
                        const char *suffix)
{
    static char path[128];
    size_t plen = strlen(prefix), elen = strlen(entry), slen = strlen(suffix);
    size_t len = plen + entries * (elen + 1) + slen;
    char *buf = malloc(len + 4);

    assert_non_null(buf);
    memcpy(buf, prefix, plen);
    char *p = buf + plen;
    for (size_t i = 0; i < entries; i++, p += elen + 1) {
        memcpy(p, entry, elen);
        p[elen] = ',';
    }
    if (entries)
        p--; /* no comma after the last */
    memcpy(p, suffix, slen);
    p += slen;
    size_t ilen = (size_t)(p - buf);
    for (int i = 0; i < 4; i++)
        *p++ = (char)(ilen >> (8 * i));
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_file(path, buf, (size_t)(p - buf));
    free(buf);
    return path;
}

/* The caps that keep a hostile index from taking the machine's memory. */
static void test_index_caps(void **state)
{
    size_t max = 2u << 20;

    (void)state;
    open_refused(index_only("many.tbm", "{\"tensors\":[", "0", max + 1, "]}"), TBM_ERR_SOURCE,
                 "lists more than 2097152 tensors");
    /* the same through the whole parse, which a root key with an escape takes */
    open_refused(index_only("many-whole.tbm", "{\"\\u0041\":1,\"tensors\":[", "0", max + 1, "]}"),
                 TBM_ERR_SOURCE, "lists more than 2097152 tensors");
    open_refused(index_only("values.tbm", "{\"tensors\":[],\"x\":[", "0", 16u << 20, "]}"),
                 TBM_ERR_SOURCE, "more than 16777216 values");
}

static const struct tbm_tensor *only_tensor(struct tbm_model *m)
{
    assert_int_equal(m->ntensors, 1);
    return &m->tensors[0];
}

static void expect_problem(const char *name, const struct blob *b, const char *index,
                           const char *needle, bool weights_ok)
{
    struct tbm_model *m = open_ok(container(name, b, 1, index, 0), false);
    const struct tbm_tensor *t = only_tensor(m);

    if (!has_message(&t->problems, needle))
        fail_msg("%s: no problem mentions \"%s\" (%zu problems, first: %s)", name, needle,
                 t->problems.count, t->problems.count ? t->problems.items[0] : "-");
    assert_false(t->raw.ok);
    assert_int_equal(t->weights.ok, weights_ok);
    assert_int_equal(m->nproblem_tensors, 1);
    tbm_model_close(m);
}

static const char *one(void)
{
    return "{\"tensors\":[{\"name\":\"t\",\"offset\":0,\"shape\":[8]}]}";
}

static void test_broken_headers(void **state)
{
    struct blob b = good_blob();

    (void)state;
    b.magic = 0x12345678;
    expect_problem("magic.tbm", &b, one(), "bad magic 0x12345678", false);
    b = good_blob();
    b.version = 2;
    expect_problem("version.tbm", &b, one(), "unsupported version 2", false);
    b = good_blob();
    b.prec = 9;
    expect_problem("prec.tbm", &b, one(), "unknown precision code 9", false);
    b = good_blob();
    b.nw = 1ull << 62; /* x 4 bytes overflows */
    expect_problem("overflow.tbm", &b, one(), "overflows", false);
    b = good_blob();
    b.woff = UINT64_MAX - 8;
    b.wlen = 0;
    expect_problem("woff.tbm", &b, one(), "overflows", false);
    b = good_blob();
    b.nw = 1000; /* weights run into the index */
    b.nmask = 250;
    expect_problem("past.tbm", &b, one(), "runs past the end", false);
    b = good_blob();
    b.moff = 4096 + 16; /* inside the weights */
    expect_problem("overlap.tbm", &b, one(), "overlaps the weights", true);
    b = good_blob();
    b.woff = 100;
    b.wlen = 0;
    expect_problem("inhdr.tbm", &b, one(), "overlaps the header", false);
}

static void test_bad_offsets(void **state)
{
    struct blob b = good_blob();

    (void)state;
    expect_problem("eof.tbm", &b, "{\"tensors\":[{\"name\":\"t\",\"offset\":5000}]}",
                   "runs past the end", false);
    expect_problem("neg.tbm", &b, "{\"tensors\":[{\"name\":\"t\",\"offset\":-1}]}",
                   "not a non-negative integer", false);
    expect_problem("frac.tbm", &b, "{\"tensors\":[{\"name\":\"t\",\"offset\":0.5}]}",
                   "not a non-negative integer", false);
    expect_problem("huge.tbm", &b,
                   "{\"tensors\":[{\"name\":\"t\",\"offset\":99999999999999999999999}]}",
                   "not a non-negative integer", false);
    expect_problem("str.tbm", &b, "{\"tensors\":[{\"name\":\"t\",\"offset\":\"0\"}]}",
                   "not a non-negative integer", false);
    expect_problem("none.tbm", &b, "{\"tensors\":[{\"name\":\"t\"}]}", "no \"offset\"", false);
    expect_problem("notobj.tbm", &b, "{\"tensors\":[7]}", "not an object", false);
}

/* One tensor of nw fp32 zeros at N:M with a mask of nmask bytes (all kept
 * bits set); returns whether its mask is usable and how it reads. */
static bool mask_case(uint32_t n, uint32_t m, uint64_t nw, uint64_t nmask,
                      enum tbm_mask_layout *layout, uint64_t *groups, size_t *warnings)
{
    static float w[256];
    static uint8_t mk[256];
    struct blob b = {TBM_MAGIC, 1, n, m, nw, nmask, 4096, 4096 + nw * 4, 0, w, nw * 4, mk, nmask};
    char index[128];

    memset(mk, 0xff, sizeof(mk));
    snprintf(index, sizeof(index), "{\"tensors\":[{\"name\":\"t\",\"offset\":0}]}");
    struct tbm_model *m0 = open_ok(container("mask.tbm", &b, 1, index, 0), false);
    const struct tbm_tensor *t = &m0->tensors[0];
    bool usable = t->mask_usable;
    *layout = t->mask_layout;
    *groups = t->mask_groups;
    *warnings = t->warnings.count;
    tbm_model_close(m0);
    return usable;
}

/* A source in memory that counts the reads that reach it. */
struct counted {
    struct tbm_source src;
    const unsigned char *bytes;
    size_t size, reads;
};

static int counted_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, unsigned mode,
                        size_t *got)
{
    struct counted *c = (struct counted *)src;

    (void)mode;
    c->reads++;
    *got = off >= c->size ? 0 : len < c->size - off ? len : c->size - (size_t)off;
    memcpy(buf, c->bytes + off, *got);
    return 0;
}

/* The headers of small tensors side by side, each 4096 + 36 bytes past the
 * last (as in an index of 5,000 tiny tensors), are read through a window that
 * grows to hold many of them, not with one read each; the headers of large
 * tensors far apart (here 1 MiB, four windows of 256 KiB) still cost one small read
 * each. */
static void test_reader_window_grows_over_neighbours(void **state)
{
    static const struct tbm_source_ops ops = {.read = counted_read};
    enum { N = 1000, STRIDE = 4132, FAR = 1 << 20 };
    size_t size = (size_t)N * STRIDE;
    unsigned char *bytes = malloc(size), got[49]; /* a header's fields */
    struct counted c = {.src = {.ops = &ops}, .bytes = bytes, .size = size};
    struct tbm_reader rd = TBM_READER_INIT;

    (void)state;
    assert_non_null(bytes);
    for (size_t i = 0; i < size; i++)
        bytes[i] = (unsigned char)(i * 7 + i / 251);
    for (size_t k = 0; k < N; k++) {
        assert_int_equal(tbm_reader_read(&rd, &c.src, got, sizeof(got), k * STRIDE), 0);
        assert_memory_equal(got, bytes + k * STRIDE, sizeof(got));
    }
    /* 1 + 2 + ... windows up to 256 KiB, then one per 63 headers: about 75 */
    assert_in_range(c.reads, 1, 100);

    unsigned char *big = calloc(1, (size_t)4 * FAR);
    assert_non_null(big);
    struct counted far = {.src = {.ops = &ops}, .bytes = big, .size = (size_t)4 * FAR};
    for (size_t k = 0; k < 4; k++)
        assert_int_equal(tbm_reader_read(&rd, &far.src, got, sizeof(got), k * FAR), 0);
    assert_int_equal(far.reads, 4);
    tbm_reader_free(&rd);
    free(big);
    free(bytes);
}

/* The contract's order of mask lengths [v2], at the edges of each. */
static void test_mask_layouts(void **state)
{
    enum tbm_mask_layout l;
    uint64_t g;
    size_t w;

    (void)state;
    /* M = 8: one byte per group is the format's own layout; one byte more or less is not */
    assert_true(mask_case(2, 8, 32, 4, &l, &g, &w) && l == TBM_MASK_WORDS && g == 4);
    assert_false(mask_case(2, 8, 32, 3, &l, &g, &w));
    assert_false(mask_case(2, 8, 32, 5, &l, &g, &w));
    /* M = 9: words of 2 bytes, or the tools' one byte per group, with a warning */
    assert_true(mask_case(2, 9, 36, 8, &l, &g, &w) && l == TBM_MASK_WORDS && g == 4);
    assert_true(mask_case(2, 9, 36, 4, &l, &g, &w) && l == TBM_MASK_BYTES && g == 4);
    assert_true(w >= 1);
    assert_false(mask_case(2, 9, 36, 5, &l, &g, &w));
    assert_false(mask_case(2, 9, 36, 3, &l, &g, &w));
    /* a partial last group: one group short in either layout, never two */
    assert_true(mask_case(2, 4, 10, 2, &l, &g, &w) && l == TBM_MASK_WORDS && g == 2);
    assert_false(mask_case(2, 4, 10, 1, &l, &g, &w));
    assert_true(mask_case(2, 16, 40, 2, &l, &g, &w) && l == TBM_MASK_BYTES && g == 2);
    assert_true(mask_case(2, 16, 40, 4, &l, &g, &w) && l == TBM_MASK_WORDS && g == 2);
    /* 3 bytes for 3 groups of 16 is the tools' full layout, not the short words */
    assert_true(mask_case(2, 16, 40, 3, &l, &g, &w) && l == TBM_MASK_BYTES && g == 3);
    /* no partial group, no short layout */
    assert_false(mask_case(2, 16, 48, 2, &l, &g, &w));
    /* M = 33 stays unusable whatever the length */
    assert_false(mask_case(2, 33, 33, 1, &l, &g, &w));
}

static void test_overlapping_blobs(void **state)
{
    struct blob b = good_blob();
    const char *index = "{\"tensors\":[{\"name\":\"a\",\"offset\":0},{\"name\":\"b\",\"offset\":0},"
                        "{\"name\":\"c\",\"offset\":8}]}";
    struct tbm_model *m = open_ok(container("alias.tbm", &b, 1, index, 0), false);

    (void)state;
    assert_int_equal(m->ntensors, 3);
    assert_true(has_message(&m->tensors[0].problems, "each other's headers"));
    assert_true(has_message(&m->tensors[1].problems, "each other's headers"));
    assert_false(m->tensors[0].raw.ok || m->tensors[1].raw.ok);
    /* c's header at offset 8 reads garbage: bad magic */
    assert_true(has_message(&m->tensors[2].problems, "bad magic"));
    tbm_model_close(m);
}

/* Writes len bytes of buf, then index and its length, as a container. */
static char *raw_container(const char *name, const unsigned char *buf, size_t len,
                           const char *index)
{
    static char path[128];
    size_t ilen = strlen(index);
    unsigned char *all = malloc(len + ilen + 4);

    assert_non_null(all);
    memcpy(all, buf, len);
    memcpy(all + len, index, ilen);
    put32(all + len + ilen, (uint32_t)ilen);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_file(path, all, len + ilen + 4);
    free(all);
    return path;
}

/* Two blobs whose weights are the same bytes, neither reaching the other's
 * header: a at 0 with its weights 8192 past it, b at 4096 with its weights
 * 4096 past it. Both are broken (contract v2, Bad input). Of c, whose
 * regions lie in d's header, and d, c is the broken one. */
static void test_shared_weights(void **state)
{
    static unsigned char buf[6 * 4096];
    struct blob a = good_blob(), b = good_blob(), c = good_blob(), d = good_blob();
    const char *index = "{\"tensors\":[{\"name\":\"a\",\"offset\":0},{\"name\":\"b\","
                        "\"offset\":4096},{\"name\":\"c\",\"offset\":12288},"
                        "{\"name\":\"d\",\"offset\":16384}]}";

    (void)state;
    a.n = a.m = b.n = b.m = 0;
    a.nmask = b.nmask = a.mlen = b.mlen = 0;
    a.woff = 8192;
    blob_bytes(&b, buf + 4096);
    blob_bytes(&a, buf); /* a's weights land where b's are: the same values */
    /* c's weights and mask lie 128 bytes past its header's end: inside d's
     * header, which starts there */
    c.woff += 128;
    c.moff += 128;
    blob_bytes(&c, buf + 12288);
    blob_bytes(&d, buf + 16384);
    struct tbm_model *m = open_ok(raw_container("shared.tbm", buf, sizeof(buf), index), false);
    assert_int_equal(m->ntensors, 4);
    assert_true(has_message(&m->tensors[0].problems, "shares bytes with the weights or mask of "
                                                     "tensor b"));
    assert_true(has_message(&m->tensors[1].problems, "shares bytes with the weights or mask of "
                                                     "tensor a"));
    assert_false(m->tensors[0].weights.ok || m->tensors[1].weights.ok);
    assert_false(m->tensors[0].raw.ok || m->tensors[1].raw.ok);
    assert_true(has_message(&m->tensors[2].problems, "runs into the header of tensor d"));
    assert_int_equal(m->tensors[3].problems.count, 0);
    assert_true(m->tensors[3].raw.ok);
    tbm_model_close(m);
}

static void test_unusable_masks(void **state)
{
    struct blob b = good_blob();
    struct tbm_model *m;

    (void)state;
    b.m = 33;
    m = open_ok(container("m33.tbm", &b, 1, one(), 0), false);
    assert_true(has_message(&m->tensors[0].problems, "nm_m 33 exceeds 32"));
    assert_false(m->tensors[0].mask_usable);
    assert_false(tbm_tensor_stats(m, 0)->known);
    assert_true(m->tensors[0].weights.ok);
    tbm_model_close(m);

    b = good_blob();
    b.n = 5;
    m = open_ok(container("n5.tbm", &b, 1, one(), 0), false);
    assert_true(has_message(&m->tensors[0].problems, "nm_n 5 exceeds nm_m 4"));
    assert_false(m->tensors[0].mask_usable);
    tbm_model_close(m);

    b = good_blob();
    b.nmask = 1;
    b.mlen = 1;
    m = open_ok(container("msize.tbm", &b, 1, one(), 0), false);
    assert_true(has_message(&m->tensors[0].problems, "num_mask_bytes is 1, expected 2"));
    assert_false(m->tensors[0].mask_usable);
    tbm_model_close(m);
}

static void test_warnings_and_stats(void **state)
{
    /* group 0 keeps elements 0, 1 and 3 (over N = 2), prunes 2 stored as 2.0;
     * group 1 keeps 5 and 7, prunes 4 stored as -0.0 (no conflict) and 6
     * stored as 7.0; the junk bits >= m of group 0's word are ignored */
    static const float w[8] = {1, 9, 2, 5, -0.0f, 3, 7, 4};
    static const uint8_t mask[2] = {0x0b | 0xf0, 0x0a};
    struct blob b = good_blob();
    b.w = w;
    b.mask = mask;
    const char *index = "{\"tensors\":[{\"name\":\"t\",\"offset\":0,\"shape\":[3,3],"
                        "\"dtype\":\"fp16\",\"num_weights\":9,\"nm_n\":1}]}";
    struct tbm_model *m = open_ok(container("warn.tbm", &b, 1, index, 0), false);
    const struct tbm_tensor *t = only_tensor(m);

    (void)state;
    assert_int_equal(t->problems.count, 0);
    const struct tbm_tensor_stats *st = tbm_tensor_stats(m, 0);
    assert_int_equal(st->counts.kept, 5);
    assert_int_equal(st->counts.groups_over_n, 1);
    assert_int_equal(st->counts.mask_conflicts, 2);
    assert_int_equal(st->warnings.count, 2);
    assert_false(t->shape_matches);
    assert_true(has_message(&t->warnings, "\"dtype\" is \"fp16\" but the header says fp32"));
    assert_true(has_message(&t->warnings, "\"num_weights\" is 9 but the header says 8"));
    assert_true(has_message(&t->warnings, "\"nm_n\" is 1 but the header says 2"));
    assert_true(has_message(&t->warnings, "product 9 is not num_weights 8"));
    assert_non_null(strstr(st->warnings.items[0], "1 groups keep more than nm_n"));
    assert_non_null(strstr(st->warnings.items[1], "2 pruned elements"));
    tbm_model_close(m);
}

static void test_names_deduplicated(void **state)
{
    struct blob b[3] = {good_blob(), good_blob(), good_blob()};
    const char *index = "{\"tensors\":[{\"name\":\"x/y\",\"offset\":0},"
                        "{\"name\":\"x/y\",\"offset\":4130},{\"name\":\"x%2Fy\",\"offset\":8260}]}";
    struct tbm_model *m = open_ok(container("dups.tbm", b, 3, index, 0), false);

    (void)state;
    assert_string_equal(m->tensors[0].dir, "x%2Fy");
    assert_string_equal(m->tensors[1].dir, "x%2Fy~2");
    assert_string_equal(m->tensors[2].dir, "x%252Fy");
    assert_int_equal(m->nproblem_tensors, 0);
    tbm_model_close(m);
}

static void test_strict_refuses_problems(void **state)
{
    struct blob b = good_blob();
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR, .strict = true};
    struct tbm_model *m = NULL;
    char err[256];

    (void)state;
    b.version = 7;
    const char *path = container("strict.tbm", &b, 1, one(), 0);
    assert_int_equal(tbm_model_open(path, &opts, &m, err, sizeof(err)), TBM_ERR_PROBLEM);
    assert_non_null(strstr(err, "strict"));
    assert_null(m);
}

static void test_bare_blob(void **state)
{
    unsigned char buf[8192];
    char path[128];
    struct blob b = good_blob();

    (void)state;
    snprintf(path, sizeof(path), "%s/layer 0.tb", dir);
    write_file(path, buf, blob_bytes(&b, buf));
    struct tbm_model *m = open_ok(path, false);
    const struct tbm_tensor *t = only_tensor(m);
    assert_int_equal(m->kind, TBM_SOURCE_BLOB);
    assert_string_equal(t->name, "layer 0");
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->shape[0], 8);
    assert_true(t->raw.ok && t->mask_usable);
    assert_non_null(strstr(m->index_json, "\"layer 0\""));
    tbm_model_close(m);
}

static void test_manifest_files(void **state)
{
    unsigned char buf[8192];
    char mdir[128], path[256];
    struct blob b = good_blob();
    size_t len = blob_bytes(&b, buf);

    (void)state;
    snprintf(mdir, sizeof(mdir), "%s/man", dir);
    assert_int_equal(mkdir(mdir, 0755), 0);
    snprintf(path, sizeof(path), "%s/sub", mdir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/sub/a.tb", mdir);
    write_file(path, buf, len);
    snprintf(path, sizeof(path), "%s/outside.tb", dir);
    write_file(path, buf, len);
    snprintf(path, sizeof(path), "%s/in_link.tb", mdir);
    assert_int_equal(symlink("sub/a.tb", path), 0);
    snprintf(path, sizeof(path), "%s/out_link.tb", mdir);
    assert_int_equal(symlink("../outside.tb", path), 0);
    snprintf(path, sizeof(path), "%s/fifo.tb", mdir);
    assert_int_equal(mkfifo(path, 0644), 0);
    const char *manifest = "{\"tensors\":[{\"name\":\"ok\",\"file\":\"sub/a.tb\"},"
                           "{\"name\":\"link\",\"file\":\"in_link.tb\"},"
                           "{\"name\":\"abs\",\"file\":\"/etc/passwd\"},"
                           "{\"name\":\"dotdot\",\"file\":\"sub/../sub/a.tb\"},"
                           "{\"name\":\"out\",\"file\":\"out_link.tb\"},"
                           "{\"name\":\"fifo\",\"file\":\"fifo.tb\"},"
                           "{\"name\":\"dir\",\"file\":\"sub\"},"
                           "{\"name\":\"nofile\"},"
                           "{\"name\":\"forged\",\"file\":\"x\\npass fake\"}]}";
    snprintf(path, sizeof(path), "%s/manifest.json", mdir);
    write_file(path, manifest, strlen(manifest));

    struct tbm_model *m = open_ok(mdir, false);
    assert_int_equal(m->kind, TBM_SOURCE_MANIFEST);
    assert_int_equal(m->ntensors, 9);
    assert_int_equal(m->tensors[0].problems.count, 0);
    assert_int_equal(m->tensors[1].problems.count, 0);
    assert_true(m->tensors[1].raw.ok);
    assert_true(has_message(&m->tensors[2].problems, "absolute"));
    assert_true(has_message(&m->tensors[3].problems, "'..'"));
    assert_true(has_message(&m->tensors[4].problems, "outside the model directory"));
    assert_true(has_message(&m->tensors[5].problems, "not a regular file"));
    assert_true(has_message(&m->tensors[6].problems, "not a regular file"));
    assert_true(has_message(&m->tensors[7].problems, "no string \"file\""));
    /* a newline quoted from the file cannot start a line of its own */
    assert_true(has_message(&m->tensors[8].problems, "\"x%0Apass fake\" refused"));
    assert_null(strchr(m->tensors[8].problems.items[0], '\n'));
    assert_int_equal(m->nproblem_tensors, 7);
    assert_int_equal(m->index_json_len, strlen(manifest));
    tbm_model_close(m);
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/tbm-unit-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sound_container),
        cmocka_unit_test(test_refused_containers),
        cmocka_unit_test(test_index_caps),
        cmocka_unit_test(test_broken_headers),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_overlapping_blobs),
        cmocka_unit_test(test_shared_weights),
        cmocka_unit_test(test_unusable_masks),
        cmocka_unit_test(test_warnings_and_stats),
        cmocka_unit_test(test_names_deduplicated),
        cmocka_unit_test(test_strict_refuses_problems),
        cmocka_unit_test(test_bare_blob),
        cmocka_unit_test(test_manifest_files),
        cmocka_unit_test(test_mask_layouts),
        cmocka_unit_test(test_reader_window_grows_over_neighbours),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
