/* Unit tests of the view table: for every row and every tensor of a small
 * container built byte by byte, the size, the whole content against a
 * reference computed here from the stored bytes, every short range against
 * the whole, and the source ranges that splicing would hand out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "format/table.h"
#include "tbm/view.h"

static char dir[64];
static unsigned char file[1 << 16];
static size_t file_len;

/* The tensors: fp32 2:4 (2 x 4), fp16 1:2 (6), fp64 dense (3), bad magic. */
static const float f32_w[8] = {1, 0, 2, 0, 0, 3, 0, 4};
static const uint8_t f32_m[2] = {0x05, 0x0a};
static const float f32_dense[8] = {1, 0, 2, 0, 0, 3, 0, 4};
static const uint16_t f16_w[6] = {0x3e00, 0x4000, 0xbc00, 0x0000, 0x3800, 0x4200};
static const uint8_t f16_m[3] = {0x01, 0x02, 0x03};
static const float f16_dense[6] = {1.5f, 0, 0, 0, 0.5f, 3.0f};
static const double f64_w[3] = {0.25, -1.0, 8.0};
static const float f64_dense[3] = {0.25f, -1.0f, 8.0f};

struct spec {
    uint32_t magic, n, m;
    uint64_t nw;
    uint8_t prec;
    const void *w;
    size_t wlen;
    const void *mask;
    size_t mlen;
    const float *dense;
    uint64_t offset; /* filled when written */
};

static struct spec specs[] = {
    {TBM_MAGIC, 2, 4, 8, 0, f32_w, sizeof(f32_w), f32_m, 2, f32_dense, 0},
    {TBM_MAGIC, 1, 2, 6, 1, f16_w, sizeof(f16_w), f16_m, 3, f16_dense, 0},
    {TBM_MAGIC, 0, 0, 3, 3, f64_w, sizeof(f64_w), NULL, 0, f64_dense, 0},
    {0xdeadbeef, 2, 4, 8, 0, f32_w, sizeof(f32_w), f32_m, 2, f32_dense, 0},
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

static void put(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static size_t append_blob(struct spec *s, unsigned char *out)
{
    memset(out, 0, 4096);
    put(out, s->magic, 4);
    put(out + 4, 1, 4);
    put(out + 8, s->n, 4);
    put(out + 12, s->m, 4);
    put(out + 16, s->nw, 8);
    put(out + 24, s->mlen, 8);
    put(out + 32, 4096, 8);
    put(out + 40, 4096 + s->wlen, 8);
    out[48] = s->prec;
    memcpy(out + 4096, s->w, s->wlen);
    if (s->mlen)
        memcpy(out + 4096 + s->wlen, s->mask, s->mlen);
    return 4096 + s->wlen + s->mlen;
}

static const char *index_fmt =
    "{\"architecture\": \"custom\", \"config\": {}, \"tensors\": ["
    "{\"name\": \"a.weight\", \"offset\": %llu, \"shape\": [2, 4], \"nm_n\": 2, \"nm_m\": 4, "
    "\"dtype\": \"fp32\"},"
    "{\"name\": \"b/h\", \"offset\": %llu, \"shape\": [6], \"nm_n\": 1, \"nm_m\": 2, "
    "\"dtype\": \"fp16\"},"
    "{\"name\": \"c\", \"offset\": %llu, \"shape\": [3], \"nm_n\": 0, \"nm_m\": 0, "
    "\"dtype\": \"fp64\"},"
    "{\"name\": \"broken\", \"offset\": %llu, \"shape\": [8]}]}";

static int setup(void **state)
{
    char path[128], index[2048];

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tbm-views-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < NSPECS; i++) {
        specs[i].offset = file_len;
        file_len += append_blob(&specs[i], file + file_len);
    }
    int n = snprintf(index, sizeof(index), index_fmt, (unsigned long long)specs[0].offset,
                     (unsigned long long)specs[1].offset, (unsigned long long)specs[2].offset,
                     (unsigned long long)specs[3].offset);
    memcpy(file + file_len, index, (size_t)n);
    put(file + file_len + n, (uint64_t)n, 4);
    file_len += (size_t)n + 4;
    snprintf(path, sizeof(path), "%s/m.tbm", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 1, file_len, f), file_len);
    assert_int_equal(fclose(f), 0);
    return 0;
}

static int teardown(void **state)
{
    char path[128];

    (void)state;
    snprintf(path, sizeof(path), "%s/m.tbm", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* The content a row must have for tensor t, computed from the stored bytes
 * and the specs; NULL (len 0) for JSON rows, which are checked by parsing. */
static unsigned char *reference(const struct tbm_file_kind *row, size_t t, size_t *len)
{
    const struct spec *s = &specs[t];
    const char *name = tbm_view_name(row);
    const unsigned char *blob = file + s->offset;
    unsigned char *out = NULL;

    bool bytes = true;

    *len = 0;
    if (strcmp(name, "raw.tb") == 0)
        *len = 4096 + s->wlen + s->mlen;
    else if (strcmp(name, "weights.bin") == 0)
        *len = s->wlen, blob += 4096;
    else if (strcmp(name, "mask.bin") == 0)
        *len = s->mlen, blob += 4096 + s->wlen;
    else if (strcmp(name, "dense.f32") == 0)
        *len = s->nw * 4, blob = (const unsigned char *)s->dense;
    else
        bytes = false;
    if (bytes) {
        out = malloc(*len + 1);
        memcpy(out, blob, *len);
        return out;
    }
    if (strcmp(name, "dense.npy") != 0)
        return NULL;
    /* NPY 1.0: magic, version, header length, dict; the data after it */
    char dict[256];
    int n =
        snprintf(dict, sizeof(dict), "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                 t == 0   ? "2, 4"
                 : t == 1 ? "6,"
                          : "3,");
    size_t hlen = (10 + (size_t)n + 1 + 63) / 64 * 64;
    *len = hlen + s->nw * 4;
    out = malloc(*len);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put(out + 8, hlen - 10, 2);
    memset(out + 10, ' ', hlen - 10);
    memcpy(out + 10, dict, (size_t)n);
    out[hlen - 1] = '\n';
    memcpy(out + hlen, s->dense, s->nw * 4);
    return out;
}

/* model.safetensors: the header's entries, and the data in each tensor's
 * own precision with pruned elements zeroed; the broken tensor omitted. */
static void check_safetensors(const char *doc, size_t len)
{
    static const uint16_t f16_masked[6] = {0x3e00, 0, 0, 0x0000, 0x3800, 0x4200};
    static const struct {
        const char *name, *dtype;
        const void *data;
        size_t len;
    } want[] = {
        {"a.weight", "F32", f32_dense, sizeof(f32_dense)},
        {"b/h", "F16", f16_masked, sizeof(f16_masked)},
        {"c", "F64", f64_w, sizeof(f64_w)},
    };
    struct json_object *o, *e, *v;
    uint64_t n = 0;

    assert_true(len >= 8);
    for (int k = 0; k < 8; k++)
        n |= (uint64_t)(unsigned char)doc[k] << (8 * k);
    assert_int_equal(n % 8, 0);
    assert_true(8 + n <= len);
    char *head = strndup(doc + 8, (size_t)n);
    o = json_tokener_parse(head);
    free(head);
    if (!o)
        fail_msg("model.safetensors' header does not parse");
    assert_true(json_object_object_get_ex(o, "__metadata__", &e));
    assert_true(json_object_object_get_ex(e, "omitted", &v));
    assert_string_equal(json_object_get_string(v), "[\"broken\"]");
    assert_int_equal(json_object_object_length(o), 4);
    for (size_t k = 0; k < 3; k++) {
        assert_true(json_object_object_get_ex(o, want[k].name, &e));
        assert_true(json_object_object_get_ex(e, "dtype", &v));
        assert_string_equal(json_object_get_string(v), want[k].dtype);
        assert_true(json_object_object_get_ex(e, "data_offsets", &v));
        uint64_t a = (uint64_t)json_object_get_int64(json_object_array_get_idx(v, 0));
        uint64_t b = (uint64_t)json_object_get_int64(json_object_array_get_idx(v, 1));
        assert_int_equal(b - a, want[k].len);
        assert_true(8 + n + b <= len);
        assert_memory_equal(doc + 8 + n + a, want[k].data, want[k].len);
    }
    json_object_put(o);
}

static void check_json(const struct tbm_file_kind *row, size_t t, const char *doc, size_t len)
{
    const char *name = tbm_view_name(row);
    struct json_object *o, *v;

    if (strcmp(name, "index.json") == 0) {
        assert_int_equal(len, file_len - 4 - specs[NSPECS - 1].offset - 4096 - 32 - 2);
        return;
    }

    o = json_tokener_parse(doc);
    if (!o)
        fail_msg("%s of tensor %zu does not parse: %.*s", name, t, (int)len, doc);
    if (strcmp(name, "header.json") == 0) {
        assert_true(json_object_object_get_ex(o, "magic", &v));
        /* the stored fields are shown whatever they hold */
        assert_int_equal(strtoul(json_object_get_string(v), NULL, 16), specs[t].magic);
        assert_true(json_object_object_get_ex(o, "kept", &v));
        if (t == 0)
            assert_int_equal(json_object_get_int64(v), 4);
    } else if (strcmp(name, "model.json") == 0) {
        assert_true(json_object_object_get_ex(o, "tensors_with_problems", &v));
        assert_int_equal(json_object_get_int64(v), 1);
    }
    json_object_put(o);
}

static void check_row(const struct tbm_views *v, const struct tbm_file_kind *row, size_t t,
                      bool sound)
{
    uint64_t size;
    size_t got, reflen;
    char buf[8192];

    uint64_t again;
    assert_int_equal(tbm_view_size(v, row, t, &size), 0);
    assert_int_equal(tbm_view_size(v, row, t, &again), 0);
    assert_int_equal(again, size);
    if (!tbm_view_servable(v, row, t)) {
        assert_false(sound);
        assert_int_equal(size, 0);
        assert_int_equal(tbm_view_read(v, row, t, buf, 0, 16, &got), TBM_ERR_BROKEN);
        return;
    }
    char *whole;
    size_t wlen;
    if (tbm_view_rendered(row)) {
        assert_int_equal(tbm_view_render(v, row, t, &whole, &wlen), 0);
        assert_int_equal(wlen, size);
    } else {
        assert_true(size < sizeof(buf));
        whole = malloc(size + 1);
        assert_int_equal(tbm_view_read(v, row, t, whole, 0, size + 1, &got), 0);
        assert_int_equal(got, size);
        wlen = size;
    }
    unsigned char *ref = reference(row, t, &reflen);
    if (ref) {
        assert_int_equal(wlen, reflen);
        assert_memory_equal(whole, ref, reflen);
        free(ref);
    } else if (strcmp(tbm_view_name(row), "model.safetensors") == 0) {
        check_safetensors(whole, wlen);
    } else if (!tbm_view_slow(row)) {
        char *text = strndup(whole, wlen);
        check_json(row, t, text, wlen);
        free(text);
    }
    /* every range of the fast rows against the whole: a read computes any
     * range, short only at the end */
    if (!tbm_view_slow(row)) {
        for (size_t off = 0; off <= wlen + 1; off++) {
            for (size_t len = 1; len <= 9 && off + len <= wlen + 9; len += 4) {
                assert_int_equal(tbm_view_read(v, row, t, buf, off, len, &got), 0);
                size_t want = off >= wlen ? 0 : wlen - off < len ? wlen - off : len;
                assert_int_equal(got, want);
                assert_memory_equal(buf, whole + (off < wlen ? off : 0), want);
            }
        }
    }
    /* what splicing would send is the same bytes */
    for (size_t off = 0; off < wlen; off += 7) {
        struct tbm_source_range src;
        int r = tbm_view_locate(v, row, t, off, 64, &src);
        assert_true(r == 0 || r == 1);
        if (r == 1 && src.fd >= 0) {
            assert_true(src.pos + src.len <= file_len);
            assert_memory_equal(file + src.pos, whole + off, src.len);
        }
    }
    free(whole);
}

static void every_row(void **state)
{
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR};
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    char path[128], err[512];

    (void)state;
    snprintf(path, sizeof(path), "%s/m.tbm", dir);
    assert_int_equal(tbm_model_open(path, &opts, &m, err, sizeof(err)), 0);
    assert_int_equal(tbm_views_open(m, NULL, &v), 0);
    assert_int_equal(tbm_views_tensor_count(v), NSPECS);
    for (size_t k = 0; k < tbm_view_count(TBM_VIEW_ROOT); k++) {
        const struct tbm_file_kind *row = tbm_view_at(TBM_VIEW_ROOT, k);
        /* config.json and the GGUF files are only there for llama and
         * mistral; this is custom */
        const char *name = tbm_view_name(row);
        assert_int_equal(tbm_view_present(v, row), strcmp(name, "config.json") != 0 &&
                                                       strcmp(name, "model.gguf") != 0 &&
                                                       strcmp(name, "model.Q8_0.gguf") != 0);
        if (tbm_view_present(v, row))
            check_row(v, row, 0, true);
    }
    for (size_t t = 0; t < NSPECS; t++)
        for (size_t k = 0; k < tbm_view_count(TBM_VIEW_TENSOR); k++)
            check_row(v, tbm_view_at(TBM_VIEW_TENSOR, k), t, t != 3);
    tbm_views_close(v);
    tbm_model_close(m);
}

/* The table's lookups agree with its listing, and names are unique. */
static void table_lookups(void **state)
{
    (void)state;
    for (int place = TBM_VIEW_ROOT; place <= TBM_VIEW_TENSOR; place++) {
        size_t n = tbm_view_count((enum tbm_view_place)place);
        assert_true(n > 0);
        for (size_t k = 0; k < n; k++) {
            const struct tbm_file_kind *row = tbm_view_at((enum tbm_view_place)place, k);
            assert_ptr_equal(tbm_view_find((enum tbm_view_place)place, tbm_view_name(row)), row);
        }
        assert_null(tbm_view_at((enum tbm_view_place)place, n));
        assert_null(tbm_view_find((enum tbm_view_place)place, "no-such-file"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_lookups),
        cmocka_unit_test(every_row),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
