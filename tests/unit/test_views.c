/* Unit tests of the view table through the daemon's own door (tbm_file_open,
 * tbm_file_read, tbm_reply_*): for every row and every tensor of a small
 * container built byte by byte, the size, the whole content against a
 * reference computed here from the stored bytes, short and long ranges
 * against the whole, each read as bytes, as a range to splice (read back
 * from the file's descriptor) and as pieces held by a source that holds
 * blocks in memory, and as a read that may not wait while the source's bytes
 * are far; then every row of a small llama model, its GGUF files among
 * them, read those ways; then a request's mode and its one change check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "common/door.h"
#include "format/table.h"
#include "tbm/view.h"
#include "tbm/vocab.h"

static char dir[64];
static unsigned char file[1 << 20];
static size_t file_len, index_len;

/* Bytes per block of the holding source: a short range is held in one or
 * two pieces, a long one read. */
#define HOLD_BLOCK 256

/* Replies of each kind seen by the checks: each kind must be seen, or the
 * checks did not read what the daemon sends. */
static size_t seen[3];

/* The tensors: fp32 2:4 (2 x 4), fp16 1:2 (6), fp64 dense (3), bad magic,
 * fp32 dense (its dense views are its stored bytes). */
static const float f32_w[8] = {1, 0, 2, 0, 0, 3, 0, 4};
static const uint8_t f32_m[2] = {0x05, 0x0a};
static const float f32_dense[8] = {1, 0, 2, 0, 0, 3, 0, 4};
static const uint16_t f16_w[6] = {0x3e00, 0x4000, 0xbc00, 0x0000, 0x3800, 0x4200};
static const uint8_t f16_m[3] = {0x01, 0x02, 0x03};
static const float f16_dense[6] = {1.5f, 0, 0, 0, 0.5f, 3.0f};
static const double f64_w[3] = {0.25, -1.0, 8.0};
static const float f64_dense[3] = {0.25f, -1.0f, 8.0f};
static const float plain_w[4] = {-2.5f, 0, 7, 1e-3f};

struct spec {
    const char *name; /* for the llama model; the small one's names are in index_fmt */
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
    {NULL, TBM_MAGIC, 2, 4, 8, 0, f32_w, sizeof(f32_w), f32_m, 2, f32_dense, 0},
    {NULL, TBM_MAGIC, 1, 2, 6, 1, f16_w, sizeof(f16_w), f16_m, 3, f16_dense, 0},
    {NULL, TBM_MAGIC, 0, 0, 3, 3, f64_w, sizeof(f64_w), NULL, 0, f64_dense, 0},
    {NULL, 0xdeadbeef, 2, 4, 8, 0, f32_w, sizeof(f32_w), f32_m, 2, f32_dense, 0},
    {NULL, TBM_MAGIC, 0, 0, 4, 0, plain_w, sizeof(plain_w), NULL, 0, plain_w, 0},
};
#define NSPECS 5u

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

/* Writes the blobs of n specs, then the index (the text index, its length
 * appended), into file and dir/name. */
static void write_container(struct spec *s, size_t n, const char *index, const char *name)
{
    char path[128];
    size_t ilen = strlen(index);

    file_len = 0;
    for (size_t i = 0; i < n; i++) {
        s[i].offset = file_len;
        file_len += append_blob(&s[i], file + file_len);
    }
    assert_true(file_len + ilen + 4 <= sizeof(file));
    memcpy(file + file_len, index, ilen);
    index_len = ilen;
    put(file + file_len + ilen, ilen, 4);
    file_len += ilen + 4;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 1, file_len, f), file_len);
    assert_int_equal(fclose(f), 0);
}

static const char *index_fmt =
    "{\"architecture\": \"custom\", \"config\": {}, \"tensors\": ["
    "{\"name\": \"a.weight\", \"offset\": %llu, \"shape\": [2, 4], \"nm_n\": 2, \"nm_m\": 4, "
    "\"dtype\": \"fp32\"},"
    "{\"name\": \"b/h\", \"offset\": %llu, \"shape\": [6], \"nm_n\": 1, \"nm_m\": 2, "
    "\"dtype\": \"fp16\"},"
    "{\"name\": \"c\", \"offset\": %llu, \"shape\": [3], \"nm_n\": 0, \"nm_m\": 0, "
    "\"dtype\": \"fp64\"},"
    "{\"name\": \"broken\", \"offset\": %llu, \"shape\": [8]},"
    "{\"name\": \"d\", \"offset\": %llu, \"shape\": [2, 2], \"nm_n\": 0, \"nm_m\": 0, "
    "\"dtype\": \"fp32\"}]}";

/* Blob offsets are those of the blobs as written: one pass to learn them. */
static void write_small(void)
{
    char index[2048];

    for (int pass = 0; pass < 2; pass++) {
        snprintf(index, sizeof(index), index_fmt, (unsigned long long)specs[0].offset,
                 (unsigned long long)specs[1].offset, (unsigned long long)specs[2].offset,
                 (unsigned long long)specs[3].offset, (unsigned long long)specs[4].offset);
        write_container(specs, NSPECS, index, "m.tbm");
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tbm-views-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char path[128];

    (void)state;
    snprintf(path, sizeof(path), "%s/m.tbm", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/llama.tbm", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* The content a row must have for tensor t of the small model, computed
 * from the stored bytes and the specs; NULL (len 0) for JSON rows, which
 * are checked by parsing. */
static unsigned char *reference(const struct tbm_row *row, size_t t, size_t *len)
{
    const struct spec *s = &specs[t];
    const char *name = tbm_row_name(row);
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
    static const char *const shapes[NSPECS] = {"2, 4", "6,", "3,", "8,", "2, 2"};
    int n = snprintf(dict, sizeof(dict),
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shapes[t]);
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
        {"d", "F32", plain_w, sizeof(plain_w)},
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
    assert_int_equal(json_object_object_length(o), 5);
    for (size_t k = 0; k < 4; k++) {
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

static void check_json(const struct tbm_row *row, size_t t, const char *doc, size_t len)
{
    const char *name = tbm_row_name(row);
    struct json_object *o, *v;

    if (strcmp(name, "index.json") == 0) {
        assert_int_equal(len, index_len);
        assert_memory_equal(doc, file + file_len - 4 - index_len, len);
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

/* Reads len bytes at off of f each of the three ways and checks that each
 * gives exactly the bytes of whole (wlen bytes) there, short only at its
 * end; then as a read that may not wait while the source is far, which
 * gives the same bytes or, when they come from the source, TBM_ERR_AGAIN
 * (the door aborts on a read of the source that would wait). */
static void check_range(struct tbm_file *f, const char *whole, size_t wlen, uint64_t off,
                        size_t len)
{
    static char buf[1 << 20];
    size_t want = off >= wlen ? 0 : wlen - off < len ? wlen - (size_t)off : len;
    struct door_seen how;
    size_t got;

    assert_true(len <= sizeof(buf));
    for (int mode = DOOR_BYTES; mode <= DOOR_HELD; mode++) {
        memset(buf, 0xa5, len);
        assert_int_equal(door_read(f, off, len, buf, (enum door_mode)mode, &got, &how), 0);
        if (got != want)
            fail_msg("mode %d, %zu bytes at %llu: got %zu, want %zu", mode, len,
                     (unsigned long long)off, got, want);
        if (memcmp(buf, whole + (off < wlen ? off : 0), want) != 0)
            fail_msg("mode %d, %zu bytes at %llu: not the file's bytes (a %s reply)", mode, len,
                     (unsigned long long)off,
                     how.kind == TBM_REPLY_SPLICE ? "spliced"
                     : how.kind == TBM_REPLY_HELD ? "held"
                                                  : "bytes");
        seen[how.kind]++;
    }
    int r = door_read(f, off, len, buf, DOOR_NOWAIT, &got, &how);
    if (r == TBM_ERR_AGAIN)
        assert_int_equal(got, 0);
    else if (r != 0 || got != want || memcmp(buf, whole + (off < wlen ? off : 0), want) != 0)
        fail_msg("a read that may not wait, %zu bytes at %llu: status %d, %zu bytes", len,
                 (unsigned long long)off, r, got);
}

/* Offsets of the short ranges: every one in a small file, else a sample
 * that still falls on every residue of small alignments. */
static size_t range_step(size_t wlen)
{
    return wlen <= 4200 ? 1 : 7;
}

/* Opens row of tensor t and checks what it serves; ref (rlen bytes), when
 * given, is what it must be. Returns its content (NULL when not servable). */
static char *check_row(const struct tbm_views *v, const struct tbm_row *row, size_t t, bool sound,
                       size_t *wlen)
{
    struct tbm_file *f;
    uint64_t size, again;
    size_t got;

    assert_int_equal(tbm_row_size(v, row, t, &size), 0);
    assert_int_equal(tbm_row_size(v, row, t, &again), 0);
    assert_int_equal(again, size);
    int r = tbm_file_open(v, row, t, &f);
    if (r == TBM_ERR_BROKEN) {
        assert_false(sound);
        assert_int_equal(size, 0);
        return NULL;
    }
    assert_int_equal(r, 0);
    assert_true(size < (1u << 20));
    char *whole = malloc(size + 1);
    /* the whole, asked with a byte to spare: short only at the end */
    assert_int_equal(door_read(f, 0, size + 1, whole, DOOR_BYTES, &got, NULL), 0);
    assert_int_equal(got, size);
    whole[got] = '\0'; /* the JSON checks parse it as a string */
    *wlen = got;
    /* long ranges, each way: the whole, and from an odd offset on */
    check_range(f, whole, got, 0, got + 1);
    check_range(f, whole, got, got / 3 | 1, got);
    /* every short range of the fast rows: any range is computed on its own */
    if (!tbm_row_slow(row))
        for (size_t off = 0; off <= got + 1; off += range_step(got))
            for (size_t len = 1; len <= 9; len += 4)
                check_range(f, whole, got, off, len);
    tbm_file_close(f);
    return whole;
}

/* A tokenizer for the llama model: a byte-level BPE of five tokens and an
 * added special one, and a config naming it and a chat template, which the
 * GGUF files carry. */
static char tok_json[] =
    "{\"added_tokens\": [{\"id\": 5, \"content\": \"<|end|>\", \"special\": true}], "
    "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
    "\"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
    "\"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4}, "
    "\"merges\": [\"a b\", \"ab c\"]}}";
static char tok_config[] = "{\"eos_token\": \"<|end|>\", \"chat_template\": \"{{ chat }}\"}";
static const struct tbm_tokenizer_files tokenizer = {
    .file = {
        [TBM_TOKENIZER_JSON] = {true, tok_json, sizeof(tok_json) - 1},
        [TBM_TOKENIZER_CONFIG] = {true, tok_config, sizeof(tok_config) - 1},
    }};

static bool holds(const char *bytes, size_t len, const char *text)
{
    return memmem(bytes, len, text, strlen(text)) != NULL;
}

/* Opens dir/name with its sources behind a holding one, and its views
 * (with the tokenizer above when asked). */
static void open_views(const char *name, bool with_tokenizer, struct tbm_model **m,
                       struct tbm_views **v)
{
    struct tbm_views_options vopts = {.tokenizer = with_tokenizer ? &tokenizer : NULL};
    struct tbm_open_options opts = {.isa = TBM_ISA_SCALAR};
    char path[128], err[512];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(tbm_model_open(path, &opts, m, err, sizeof(err)), 0);
    door_hold_model(*m, HOLD_BLOCK);
    assert_int_equal(tbm_views_open(*m, &vopts, v), 0);
    memset(seen, 0, sizeof(seen));
}

/* Files the kernel never released (a session ended before the release of a
 * file closed just before it reached the daemon): closing the views closes
 * them, a rendered one's result with it. LeakSanitizer (the ASan build)
 * finds them otherwise. */
static void views_close_the_files_left_open(void **state)
{
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    struct tbm_file *raw, *hdr, *hdr2;
    struct tbm_reply reply;

    (void)state;
    write_small();
    open_views("m.tbm", false, &m, &v);
    assert_int_equal(tbm_file_open(v, tbm_row_find(TBM_ROW_TENSOR, "raw.tb"), 0, &raw), 0);
    const struct tbm_row *hrow = tbm_row_find(TBM_ROW_TENSOR, "header.json");
    assert_int_equal(tbm_file_open(v, hrow, 0, &hdr), 0);
    assert_int_equal(tbm_file_open(v, hrow, 1, &hdr2), 0);
    assert_int_equal(tbm_file_read(hdr, 0, 16, NULL, 0, &reply), 0);
    tbm_reply_done(&reply);
    tbm_file_close(hdr); /* the middle of the open files */
    tbm_views_close(v);
    tbm_model_close(m);
}

static void small_rows(void **state)
{
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    size_t wlen, reflen;

    (void)state;
    write_small();
    open_views("m.tbm", false, &m, &v);
    assert_int_equal(tbm_views_tensor_count(v), NSPECS);
    for (size_t k = 0; k < tbm_row_count(TBM_ROW_ROOT); k++) {
        const struct tbm_row *row = tbm_row_at(TBM_ROW_ROOT, k);
        const char *name = tbm_row_name(row);
        /* config.json and the GGUF files are only there for the
         * architectures they know, this is custom; the tokenizer's files
         * only with a tokenizer */
        bool present = strcmp(name, "config.json") != 0 && !strstr(name, ".gguf") &&
                       !strstr(name, "tokenizer") && !strstr(name, "_config.json") &&
                       strcmp(name, "special_tokens_map.json") != 0;
        assert_int_equal(tbm_row_present(v, row), present);
        if (!present)
            continue;
        char *whole = check_row(v, row, 0, true, &wlen);
        if (strcmp(name, "model.safetensors") == 0)
            check_safetensors(whole, wlen);
        else if (!tbm_row_slow(row))
            check_json(row, 0, whole, wlen);
        free(whole);
    }
    for (size_t t = 0; t < NSPECS; t++) {
        for (size_t k = 0; k < tbm_row_count(TBM_ROW_TENSOR); k++) {
            const struct tbm_row *row = tbm_row_at(TBM_ROW_TENSOR, k);
            char *whole = check_row(v, row, t, t != 3, &wlen);
            unsigned char *ref = whole ? reference(row, t, &reflen) : NULL;
            if (ref) {
                assert_int_equal(wlen, reflen);
                assert_memory_equal(whole, ref, reflen);
            } else if (whole && !tbm_row_slow(row)) {
                check_json(row, t, whole, wlen);
            }
            free(ref);
            free(whole);
        }
    }
    /* each kind of reply was read: the source's bytes spliced and held */
    assert_true(seen[TBM_REPLY_BYTES] > 0);
    assert_true(seen[TBM_REPLY_SPLICE] > 0);
    assert_true(seen[TBM_REPLY_HELD] > 0);
    assert_int_equal(door_holds_outstanding(), 0);
    tbm_views_close(v);
    tbm_model_close(m);
}

/* --- a small llama model: the rows only such a model has --- */

#define HIDDEN        32
#define KV            16 /* one key/value head of HIDDEN / 2 */
#define LLAMA_TENSORS 12

static unsigned char llama_data[LLAMA_TENSORS][2][HIDDEN * HIDDEN * 8];

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Stored weights that are finite in every precision, and a mask keeping n
 * of each m (one byte a group, m <= 8). */
static void llama_spec(struct spec *s, size_t k, const char *name, uint64_t rows, uint64_t cols,
                       uint8_t prec, uint32_t n, uint32_t m)
{
    static const size_t es[] = {4, 2, 2, 8};
    static const uint64_t finite[] = {0xBFFFFFFFull, 0xBBFF, 0xBFFF, 0xBFEFFFFFFFFFFFFFull};
    uint64_t seed = k * 1000 + 7, nw = rows * cols;
    unsigned char *w = llama_data[k][0], *mask = llama_data[k][1];

    for (uint64_t i = 0; i < nw; i++)
        put(w + i * es[prec], splitmix(&seed) & finite[prec], (int)es[prec]);
    for (uint64_t g = 0; m && g < nw / m; g++) {
        uint8_t bits = 0;
        for (uint32_t kept = 0; kept < n;) {
            uint32_t j = (uint32_t)(splitmix(&seed) % m);
            kept += !(bits >> j & 1);
            bits |= (uint8_t)(1u << j);
        }
        mask[g] = bits;
    }
    *s = (struct spec){name,           TBM_MAGIC, n, m, nw, prec, w, nw * es[prec], m ? mask : NULL,
                       m ? nw / m : 0, NULL,      0};
}

static void write_llama(void)
{
    static struct spec s[LLAMA_TENSORS];
    static const char *const dtypes[] = {"fp32", "fp16", "bf16", "fp64"};
    char index[8192];
    struct {
        const char *name;
        uint64_t rows, cols;
        uint8_t prec;
        uint32_t n, m;
    } t[LLAMA_TENSORS] = {
        /* stored in place, unmasked: spliced and held in model.gguf */
        {"model.embed_tokens.weight", HIDDEN, HIDDEN, 1, 0, 0},
        {"model.norm.weight", 1, HIDDEN, 0, 0, 0},
        {"lm_head.weight", HIDDEN, HIDDEN, 0, 0, 0},
        {"model.layers.0.input_layernorm.weight", 1, HIDDEN, 0, 0, 0},
        /* rows permuted, masked */
        {"model.layers.0.self_attn.q_proj.weight", HIDDEN, HIDDEN, 1, 2, 4},
        {"model.layers.0.self_attn.k_proj.weight", KV, HIDDEN, 2, 2, 4},
        {"model.layers.0.self_attn.v_proj.weight", KV, HIDDEN, 0, 0, 0},
        /* masked in place; expanded from fp64 */
        {"model.layers.0.self_attn.o_proj.weight", HIDDEN, HIDDEN, 0, 2, 4},
        {"model.layers.0.post_attention_layernorm.weight", 1, HIDDEN, 0, 0, 0},
        {"model.layers.0.mlp.gate_proj.weight", HIDDEN, HIDDEN, 1, 1, 2},
        {"model.layers.0.mlp.up_proj.weight", HIDDEN, HIDDEN, 3, 0, 0},
        {"model.layers.0.mlp.down_proj.weight", HIDDEN, HIDDEN, 2, 3, 8},
    };

    for (size_t k = 0; k < LLAMA_TENSORS; k++)
        llama_spec(&s[k], k, t[k].name, t[k].rows, t[k].cols, t[k].prec, t[k].n, t[k].m);
    for (int pass = 0; pass < 2; pass++) {
        size_t n = (size_t)snprintf(
            index, sizeof(index),
            "{\"architecture\": \"llama\", \"config\": {\"hidden_size\": %d, \"num_heads\": 2, "
            "\"num_kv_heads\": 1, \"num_layers\": 1, \"intermediate_size\": %d, "
            "\"vocab_size\": %d}, \"tensors\": [",
            HIDDEN, HIDDEN, HIDDEN);
        for (size_t k = 0; k < LLAMA_TENSORS; k++) {
            char shape[32];
            if (t[k].rows == 1)
                snprintf(shape, sizeof(shape), "[%llu]", (unsigned long long)t[k].cols);
            else
                snprintf(shape, sizeof(shape), "[%llu, %llu]", (unsigned long long)t[k].rows,
                         (unsigned long long)t[k].cols);
            n += (size_t)snprintf(index + n, sizeof(index) - n,
                                  "%s{\"name\": \"%s\", \"offset\": %llu, \"shape\": %s, "
                                  "\"nm_n\": %u, \"nm_m\": %u, \"dtype\": \"%s\"}",
                                  k ? ", " : "", t[k].name, (unsigned long long)s[k].offset, shape,
                                  t[k].n, t[k].m, dtypes[t[k].prec]);
        }
        snprintf(index + n, sizeof(index) - n, "]}");
        write_container(s, LLAMA_TENSORS, index, "llama.tbm");
    }
}

/* Every row of the llama model, each read the three ways; the GGUF files'
 * ranges that lie in a tensor stored as it is are spliced and held. */
static void llama_rows(void **state)
{
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    size_t wlen;

    (void)state;
    write_llama();
    open_views("llama.tbm", true, &m, &v);
    for (size_t k = 0; k < tbm_row_count(TBM_ROW_ROOT); k++) {
        const struct tbm_row *row = tbm_row_at(TBM_ROW_ROOT, k);
        const char *name = tbm_row_name(row);
        /* the tokenizer has two of its five files */
        bool present =
            strcmp(name, "tokenizer.json") == 0 || strcmp(name, "tokenizer_config.json") == 0 ||
            (!strstr(name, "tokenizer") && strcmp(name, "special_tokens_map.json") != 0 &&
             strcmp(name, "generation_config.json") != 0);
        assert_int_equal(tbm_row_present(v, row), present);
        if (!present)
            continue;
        size_t before = seen[TBM_REPLY_SPLICE] + seen[TBM_REPLY_HELD];
        char *whole = check_row(v, row, 0, true, &wlen);
        if (strcmp(name, "tokenizer.json") == 0)
            assert_memory_equal(whole, tok_json, sizeof(tok_json) - 1);
        if (strstr(name, ".gguf")) {
            assert_memory_equal(whole, "GGUF\3\0\0\0", 8);
            /* the vocabulary, shared by the files, in its place */
            assert_true(holds(whole, wlen, "tokenizer.ggml.merges"));
            assert_true(holds(whole, wlen, "ab c"));
            assert_true(holds(whole, wlen, "{{ chat }}"));
            assert_false(holds(whole, wlen, "none"));
            /* its stored tensors are sent as stored */
            assert_true(seen[TBM_REPLY_SPLICE] + seen[TBM_REPLY_HELD] > before ||
                        strcmp(name, "model.Q8_0.gguf") == 0);
        }
        free(whole);
    }
    for (size_t t = 0; t < LLAMA_TENSORS; t++)
        for (size_t k = 0; k < tbm_row_count(TBM_ROW_TENSOR); k++)
            free(check_row(v, tbm_row_at(TBM_ROW_TENSOR, k), t, true, &wlen));
    assert_true(seen[TBM_REPLY_SPLICE] > 0);
    assert_true(seen[TBM_REPLY_HELD] > 0);
    assert_int_equal(door_holds_outstanding(), 0);
    tbm_views_close(v);
    tbm_model_close(m);
}

/* Reads len bytes at off of place's row name for tensor t, asked as mode
 * says; *got the bytes. */
static int read_named(const struct tbm_views *v, enum tbm_row_place place, const char *name,
                      size_t t, uint64_t off, size_t len, enum door_mode mode, size_t *got)
{
    static char buf[1 << 20];
    const struct tbm_row *row = tbm_row_find(place, name);

    assert_non_null(row);
    assert_true(len <= sizeof(buf));
    return door_read_row(v, row, t, off, len, buf, mode, got);
}

/* A request's reads of the source: made in its mode all the way down,
 * whichever way the row's bytes come (its region, the expansion's
 * tbm_chunk_read, the masked reads of model.safetensors and model.gguf, the
 * quantized blocks of model.Q8_0.gguf and model.Q4_K_M.gguf), so that a read
 * that may not wait is told TBM_ERR_AGAIN; and checked for a change once,
 * after the last. */
static void request_reads(void **state)
{
    static const struct {
        enum tbm_row_place place;
        const char *name;
        size_t t;
    } far[] = {
        {TBM_ROW_TENSOR, "weights.bin", 4}, /* a region */
        {TBM_ROW_TENSOR, "dense.f32", 7},   /* fp32 2:4, weights then mask words */
        {TBM_ROW_TENSOR, "dense.npy", 9},   /* fp16 1:2, after its header */
        {TBM_ROW_ROOT, "model.safetensors", 0}, {TBM_ROW_ROOT, "model.gguf", 0},
        {TBM_ROW_ROOT, "model.Q8_0.gguf", 0},   {TBM_ROW_ROOT, "model.Q4_K_M.gguf", 0},
    };
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    char path[128];
    size_t got;

    (void)state;
    write_llama();
    open_views("llama.tbm", true, &m, &v);
    for (size_t k = 0; k < sizeof(far) / sizeof(far[0]); k++) {
        int r = read_named(v, far[k].place, far[k].name, far[k].t, 0, 1 << 20, DOOR_NOWAIT, &got);
        if (r != TBM_ERR_AGAIN)
            fail_msg("%s of tensor %zu, a read that may not wait: status %d, not TBM_ERR_AGAIN",
                     far[k].name, far[k].t, r);
        assert_int_equal(got, 0);
    }
    /* bytes fixed at open, or rendered then, do not wait */
    assert_int_equal(read_named(v, TBM_ROW_ROOT, "index.json", 0, 0, 100, DOOR_NOWAIT, &got), 0);
    assert_int_equal(got, 100);
    assert_int_equal(read_named(v, TBM_ROW_TENSOR, "header.json", 7, 0, 100, DOOR_NOWAIT, &got), 0);
    assert_int_equal(got, 100);
    /* one check, however many reads the request made of the source */
    for (size_t k = 1; k < sizeof(far) / sizeof(far[0]); k++) {
        long before = door_checks();
        int r = read_named(v, far[k].place, far[k].name, far[k].t, 0, 1 << 20, DOOR_BYTES, &got);
        assert_int_equal(r, 0);
        assert_true(got > 0);
        if (door_checks() - before != 1)
            fail_msg("%s of tensor %zu: %ld checks for one request", far[k].name, far[k].t,
                     door_checks() - before);
    }
    /* and that check sees a change */
    snprintf(path, sizeof(path), "%s/llama.tbm", dir);
    struct timespec times[2] = {{0, UTIME_OMIT}, {1, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
    assert_int_equal(read_named(v, TBM_ROW_TENSOR, "dense.f32", 7, 0, 64, DOOR_BYTES, &got),
                     TBM_ERR_CHANGED);
    assert_int_equal(got, 0);
    tbm_views_close(v);
    tbm_model_close(m);
}

/* row name's file of tensor t, whole, as one open reads it (a rendered row:
 * its content is taken at open); its size in stat is *size. */
static char *render_named(const struct tbm_views *v, enum tbm_row_place place, const char *name,
                          size_t t, uint64_t *size)
{
    const struct tbm_row *row = tbm_row_find(place, name);
    struct tbm_file *f;
    struct tbm_reply reply;

    assert_non_null(row);
    assert_int_equal(tbm_row_size(v, row, t, size), 0);
    assert_int_equal(tbm_file_open(v, row, t, &f), 0);
    assert_int_equal(tbm_file_read(f, 0, *size + 1, NULL, 0, &reply), 0);
    assert_int_equal(reply.kind, TBM_REPLY_BYTES);
    assert_int_equal(reply.len, *size);
    char *text = strndup(reply.data, reply.len);
    tbm_reply_done(&reply);
    tbm_file_close(f);
    return text;
}

/* stats_nowait (a remote mount's): the files that show statistics never
 * compute them; those not known are null, with the warning that says why,
 * until a step computes them, and the next open shows them, at the same
 * size. */
static void stats_not_waited(void **state)
{
    struct tbm_views_options opts = {.stats_nowait = true};
    struct tbm_open_options oopts = {.isa = TBM_ISA_SCALAR};
    struct tbm_model *m = NULL;
    struct tbm_views *v = NULL;
    char path[128], err[512], names[256];
    uint64_t size, again;
    size_t t = 0;

    (void)state;
    write_small();
    snprintf(path, sizeof(path), "%s/m.tbm", dir);
    assert_int_equal(tbm_model_open(path, &oopts, &m, err, sizeof(err)), 0);
    assert_int_equal(tbm_views_open(m, &opts, &v), 0);
    assert_true(tbm_views_stats_nowait(v));
    /* tensor 0 is 2:4 (its statistics read it), 2 dense (known from its header) */
    assert_false(tbm_views_stats_ready(v, 0));
    assert_true(tbm_views_stats_ready(v, 2));
    char *hdr = render_named(v, TBM_ROW_TENSOR, "header.json", 0, &size);
    assert_non_null(strstr(hdr, "\"kept\": null"));
    assert_non_null(strstr(hdr, "statistics not known yet"));
    char *model = render_named(v, TBM_ROW_ROOT, "model.json", 0, &again);
    assert_non_null(strstr(model, "\"total_kept\": null"));
    size_t len = tbm_xattr_list(v, 0, names, sizeof(names));
    assert_null(memmem(names, len, "user.tbm.density", 16));
    assert_false(tbm_views_stats_ready(v, 0)); /* none of them computed it */
    free(hdr);
    free(model);
    /* until they are known, every open shares one rendering */
    const struct tbm_row *hrow = tbm_row_find(TBM_ROW_TENSOR, "header.json");
    struct tbm_file *f1, *f2;
    struct tbm_reply r1, r2;
    assert_int_equal(tbm_file_open(v, hrow, 0, &f1), 0);
    assert_int_equal(tbm_file_open(v, hrow, 0, &f2), 0);
    assert_int_equal(tbm_file_read(f1, 0, size, NULL, 0, &r1), 0);
    assert_int_equal(tbm_file_read(f2, 0, size, NULL, 0, &r2), 0);
    assert_ptr_equal(r1.data, r2.data);
    tbm_reply_done(&r2);
    tbm_file_close(f2);
    /* asked once, whoever asks, until computed */
    assert_true(tbm_views_stats_ask(v, 0));
    assert_false(tbm_views_stats_ask(v, 0));
    assert_int_equal(tbm_views_stats_step(v, 0, &t), 0);
    assert_true(tbm_views_stats_ready(v, 0));
    assert_false(tbm_views_stats_ask(v, 0));
    hdr = render_named(v, TBM_ROW_TENSOR, "header.json", 0, &again);
    assert_int_equal(again, size);
    assert_null(strstr(hdr, "\"kept\": null"));
    assert_null(strstr(hdr, "not known yet"));
    len = tbm_xattr_list(v, 0, names, sizeof(names));
    assert_non_null(memmem(names, len, "user.tbm.density", 16));
    /* an open from before keeps what it read, its reply even past a close */
    tbm_file_close(f1);
    assert_non_null(memmem(r1.data, r1.len, "not known yet", 13));
    tbm_reply_done(&r1);
    free(hdr);
    /* every tensor's, a tensor a step */
    assert_true(tbm_views_stats_ask(v, -1));
    assert_false(tbm_views_stats_ask(v, -1));
    t = 0;
    int steps = 0, r;
    while ((r = tbm_views_stats_step(v, -1, &t)) > 0)
        steps++;
    assert_int_equal(r, 0);
    assert_int_equal(steps, 1); /* tensor 1: 0 was known, 2 to 4 need no read */
    assert_false(tbm_views_stats_ask(v, -1));
    model = render_named(v, TBM_ROW_ROOT, "model.json", 0, &again);
    assert_null(strstr(model, "\"total_kept\": null"));
    free(model);
    tbm_views_close(v);
    tbm_model_close(m);
}

/* The table's lookups agree with its listing, and names are unique. */
static void table_lookups(void **state)
{
    (void)state;
    for (int place = TBM_ROW_ROOT; place <= TBM_ROW_TENSOR; place++) {
        size_t n = tbm_row_count((enum tbm_row_place)place);
        assert_true(n > 0);
        for (size_t k = 0; k < n; k++) {
            const struct tbm_row *row = tbm_row_at((enum tbm_row_place)place, k);
            assert_ptr_equal(tbm_row_find((enum tbm_row_place)place, tbm_row_name(row)), row);
        }
        assert_null(tbm_row_at((enum tbm_row_place)place, n));
        assert_null(tbm_row_find((enum tbm_row_place)place, "no-such-file"));
    }
}

int main(void)
{
    /* one test a line: clang-format packs six in columns */
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_lookups),
        cmocka_unit_test(small_rows),
        cmocka_unit_test(llama_rows),
        cmocka_unit_test(request_reads),
        cmocka_unit_test(stats_not_waited),
        cmocka_unit_test(views_close_the_files_left_open),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, setup, teardown);
}
