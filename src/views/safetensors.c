/* model.safetensors: the whole model as one safetensors file. Its layout
 * (header bytes and where each tensor's data lies) is fixed once at open; a
 * read maps its range onto the header and pieces of tensors and computes
 * only those bytes: the stored weights with pruned elements zeroed. */
#include "internal.h"

#include "tbm/names.h"

#include <json-c/json.h>
#include <json-c/printbuf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Elements masked per step: bounds the per-thread scratch. */
#define CHUNK (64u * 1024u)

/* A tensor's data in the file: [start, start + len), data in its precision. */
struct piece {
    uint64_t start;
    uint64_t len;
    size_t t;
};

struct tbm_safetensors {
    char *head; /* length prefix and padded JSON header */
    size_t head_len;
    struct piece *pieces; /* non-empty tensors, by start */
    size_t npieces;
    uint64_t size;
};

static const char *st_dtype(unsigned precision)
{
    static const char *const names[] = {"F32", "F16", "BF16", "F64"};
    return names[precision];
}

/* Sound tensors are safe to serve whole in their stored precision. */
static bool sound(const struct tbm_views *v, size_t t)
{
    return v->model->tensors[t].problems.count == 0 && tbm_dense_servable(v, t);
}

static bool same_name(const struct tbm_tensor *x, const struct tbm_tensor *y)
{
    return x->name_len == y->name_len && memcmp(x->name, y->name, x->name_len) == 0;
}

/* Orders tensor indices by name, then by index. */
static int cmp_name(const void *a, const void *b, void *arg)
{
    const struct tbm_tensor *ts = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const struct tbm_tensor *x = &ts[i], *y = &ts[j];
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);

    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Marks in keep the tensors that appear: sound, and the first sound one of
 * their name. Sorting the names keeps this O(n log n) for 100,000 tensors. */
static int choose(const struct tbm_views *v, bool *keep)
{
    const struct tbm_model *m = v->model;
    size_t *order = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*order));
    size_t n = 0;

    if (!order)
        return TBM_ERR_NOMEM;
    for (size_t t = 0; t < m->ntensors; t++)
        if (sound(v, t))
            order[n++] = t;
    qsort_r(order, n, sizeof(*order), cmp_name, (void *)m->tensors);
    for (size_t k = 0; k < n; k++)
        keep[order[k]] = k == 0 || !same_name(&m->tensors[order[k - 1]], &m->tensors[order[k]]);
    free(order);
    return 0;
}

/* Appends the JSON string of len bytes at s (escaped by json-c). */
static int add_string(struct printbuf *pb, const char *s, size_t len)
{
    struct json_object *o = json_object_new_string_len(s, (int)len);
    if (!o)
        return TBM_ERR_NOMEM;
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_NOSLASHESCAPE);
    int r = text && printbuf_memappend(pb, text, (int)strlen(text)) >= 0 ? 0 : TBM_ERR_NOMEM;
    json_object_put(o);
    return r;
}

static int add_entry(struct printbuf *pb, const struct tbm_tensor *t, uint64_t start, uint64_t end)
{
    int r = add_string(pb, t->name, t->name_len);

    if (r < 0)
        return r;
    sprintbuf(pb, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype(t->hdr.precision));
    if (t->shape && t->shape_matches)
        for (size_t k = 0; k < t->ndim; k++)
            sprintbuf(pb, k ? ",%llu" : "%llu", (unsigned long long)t->shape[k]);
    else
        sprintbuf(pb, "%llu", (unsigned long long)t->hdr.num_weights);
    sprintbuf(pb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)start,
              (unsigned long long)end);
    return 0;
}

/* __metadata__: string values only, "omitted" a JSON array as a string. */
static int add_metadata(struct printbuf *pb, const struct tbm_model *m, const bool *keep)
{
    struct json_object *meta = json_object_new_object();
    struct json_object *omitted = json_object_new_array();
    const char *base = strrchr(m->path, '/');
    char source[4096];
    int r = TBM_ERR_NOMEM;

    if (!meta || !omitted)
        goto cleanup;
    for (size_t t = 0; t < m->ntensors; t++)
        if (!keep[t])
            json_object_array_add(omitted, json_object_new_string_len(m->tensors[t].name,
                                                                      (int)m->tensors[t].name_len));
    base = base ? base + 1 : m->path;
    tbm_text_clean(source, sizeof(source), base, strlen(base));
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    if (m->architecture)
        json_object_object_add(meta, "architecture", json_object_new_string(m->architecture));
    json_object_object_add(meta, "source", json_object_new_string(source));
    json_object_object_add(meta, "omitted",
                           json_object_new_string(json_object_to_json_string_ext(
                               omitted, JSON_C_TO_STRING_NOSLASHESCAPE)));
    const char *text = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text && printbuf_memappend(pb, "\"__metadata__\":", 15) >= 0 &&
        printbuf_memappend(pb, text, (int)strlen(text)) >= 0)
        r = 0;
cleanup:
    json_object_put(omitted);
    json_object_put(meta);
    return r;
}

/* Renders the header and places every kept tensor's data after it. */
static int build(const struct tbm_views *v, struct tbm_safetensors *st, const bool *keep)
{
    const struct tbm_model *m = v->model;
    struct printbuf *pb = printbuf_new();
    uint64_t data = 0;
    int r = TBM_ERR_NOMEM;

    if (!pb)
        return r;
    printbuf_memappend(pb, "{", 1);
    if ((r = add_metadata(pb, m, keep)) < 0)
        goto cleanup;
    for (size_t t = 0; t < m->ntensors; t++) {
        const struct tbm_tensor *tensor = &m->tensors[t];
        if (!keep[t])
            continue;
        /* Servable: the weights lie inside the source, so their length fits. */
        uint64_t len = tensor->weights.len;
        printbuf_memappend(pb, ",", 1);
        if ((r = add_entry(pb, tensor, data, data + len)) < 0)
            goto cleanup;
        if (len)
            st->pieces[st->npieces++] = (struct piece){.start = data, .len = len, .t = t};
        data += len;
    }
    printbuf_memappend(pb, "}", 1);
    r = TBM_ERR_NOMEM;
    size_t json = (size_t)printbuf_length(pb), padded = (json + 7) / 8 * 8;
    if (!(st->head = malloc(8 + padded)))
        goto cleanup;
    for (int k = 0; k < 8; k++)
        st->head[k] = (char)((uint64_t)padded >> (8 * k));
    memcpy(st->head + 8, pb->buf, json);
    memset(st->head + 8 + json, ' ', padded - json);
    st->head_len = 8 + padded;
    for (size_t k = 0; k < st->npieces; k++)
        st->pieces[k].start += st->head_len;
    st->size = st->head_len + data;
    r = 0;
cleanup:
    printbuf_free(pb);
    return r;
}

int tbm_safetensors_init(struct tbm_views *v)
{
    size_t n = v->model->ntensors ? v->model->ntensors : 1;
    struct tbm_safetensors *st = calloc(1, sizeof(*st));
    bool *keep = calloc(n, sizeof(*keep));
    int r = TBM_ERR_NOMEM;

    if (!st || !keep || !(st->pieces = malloc(n * sizeof(*st->pieces))))
        goto cleanup;
    if ((r = choose(v, keep)) < 0 || (r = build(v, st, keep)) < 0)
        goto cleanup;
    v->safetensors = st;
    st = NULL;
cleanup:
    free(keep);
    if (st) {
        free(st->pieces);
        free(st->head);
        free(st);
    }
    return r;
}

void tbm_safetensors_free(struct tbm_views *v)
{
    struct tbm_safetensors *st = v->safetensors;

    if (!st)
        return;
    free(st->pieces);
    free(st->head);
    free(st);
}

int tbm_safetensors_size(const struct tbm_views *v, size_t t, uint64_t *size)
{
    (void)t;
    *size = v->safetensors->size;
    return 0;
}

/* The first piece that ends after off (npieces when none). */
static size_t piece_at(const struct tbm_safetensors *st, uint64_t off)
{
    size_t lo = 0, hi = st->npieces;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->pieces[mid].start + st->pieces[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether a tensor's data is its stored weights as they are. */
static bool as_stored(const struct tbm_tensor *t)
{
    return t->hdr.nm_m == 0 || !t->mask_usable;
}

static pthread_key_t mask_key;
static pthread_once_t mask_once = PTHREAD_ONCE_INIT;

static void make_key(void)
{
    pthread_key_create(&mask_key, free);
}

/* The mask words of a chunk (m = 1 needs one byte per element), then one
 * keep flag per element. */
struct scratch {
    uint8_t mask[CHUNK + 8];
    uint8_t keep[CHUNK];
};

/* Each FUSE worker keeps one scratch: reads allocate nothing. */
static struct scratch *thread_scratch(void)
{
    pthread_once(&mask_once, make_key);
    struct scratch *s = pthread_getspecific(mask_key);
    if (!s) {
        s = malloc(sizeof(*s));
        if (s && pthread_setspecific(mask_key, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    return s;
}

/* Zeroes, in buf holding tensor bytes [b0, b1), the bytes of element i that
 * it holds: for the elements cut by either end of a read. */
static void zero_element(char *buf, uint64_t b0, uint64_t b1, uint64_t i, size_t es)
{
    uint64_t s = i * es, e = s + es;

    s = s < b0 ? b0 : s;
    e = e > b1 ? b1 : e;
    memset(buf + (s - b0), 0, (size_t)(e - s));
}

static uint32_t load_word(const uint8_t *p, uint32_t wb)
{
    uint32_t word = p[0];

    for (uint32_t k = 1; k < wb; k++)
        word |= (uint32_t)p[k] << (8 * k);
    return word;
}

/* Clears the n whole elements of size T at p whose keep flag is 0: a
 * branchless loop the compiler vectorizes (p need not be aligned). */
#define CLEAR_PRUNED(T, p, keep, n)                                                                \
    for (size_t k = 0; k < (n); k++) {                                                             \
        T x;                                                                                       \
        memcpy(&x, (p) + k * sizeof(T), sizeof(T));                                                \
        x &= (T)0 - (T)(keep)[k];                                                                  \
        memcpy((p) + k * sizeof(T), &x, sizeof(T));                                                \
    }

/* Zeroes the pruned elements of elements [first, first + count) of t, whose
 * bytes [b0, b1) buf holds; 0 < count <= CHUNK. */
static int mask_chunk(const struct tbm_tensor *t, struct scratch *s, char *buf, uint64_t b0,
                      uint64_t b1, uint64_t first, size_t count)
{
    uint32_t m = t->hdr.nm_m, wb = tbm_mask_word_bytes(m);
    size_t es = tbm_precision_size(t->hdr.precision);
    uint64_t g0 = first / m, g1 = (first + count - 1) / m;

    int r = tbm_mask_read(t, g0, g1 - g0 + 1, s->mask);
    if (r < 0)
        return r;
    /* flags first, walking the groups without a division per element; bits
     * at positions >= M are never looked at */
    const uint8_t *p = s->mask;
    uint32_t j = (uint32_t)(first % m), word = load_word(p, wb);
    for (size_t k = 0; k < count; k++) {
        s->keep[k] = (uint8_t)((word >> j) & 1);
        if (++j == m && k + 1 < count) {
            j = 0;
            p += wb;
            word = load_word(p, wb);
        }
    }
    /* only the first and last elements can be cut by the read's ends */
    size_t lo = first * es < b0, hi = count - ((first + count) * es > b1);
    if (lo && !s->keep[0])
        zero_element(buf, b0, b1, first, es);
    if (hi < count && !s->keep[count - 1])
        zero_element(buf, b0, b1, first + count - 1, es);
    if (lo >= hi)
        return 0;
    char *whole = buf + ((first + lo) * es - b0);
    const uint8_t *keep = s->keep + lo;
    switch (es) {
    case 2:
        CLEAR_PRUNED(uint16_t, whole, keep, hi - lo);
        break;
    case 4:
        CLEAR_PRUNED(uint32_t, whole, keep, hi - lo);
        break;
    default:
        CLEAR_PRUNED(uint64_t, whole, keep, hi - lo);
        break;
    }
    return 0;
}

/* Reads bytes [b0, b0 + len) of tensor t's data into buf. */
static int tensor_bytes(const struct tbm_tensor *t, char *buf, uint64_t b0, size_t len)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    uint64_t b1 = b0 + len;
    struct scratch *s;

    int r = tbm_source_read_full(t->src, buf, len, t->weights.off + b0);
    if (r < 0 || as_stored(t) || len == 0)
        return r;
    if (!(s = thread_scratch()))
        return TBM_ERR_NOMEM;
    for (uint64_t first = b0 / es, end = (b1 + es - 1) / es; first < end;) {
        size_t count = end - first < CHUNK ? (size_t)(end - first) : CHUNK;
        if ((r = mask_chunk(t, s, buf, b0, b1, first, count)) < 0)
            return r;
        first += count;
    }
    return 0;
}

int tbm_safetensors_read(const struct tbm_views *v, size_t t, char *buf, uint64_t off, size_t len,
                         size_t *got)
{
    const struct tbm_safetensors *st = v->safetensors;
    size_t done = 0;

    (void)t;
    *got = 0;
    if (off >= st->size)
        return 0;
    if (len > st->size - off)
        len = (size_t)(st->size - off);
    if (off < st->head_len)
        tbm_copy_range(buf, off, len, st->head, st->head_len, &done);
    for (size_t k = piece_at(st, off + done); done < len; k++) {
        const struct piece *p = &st->pieces[k];
        uint64_t pos = off + done;
        uint64_t in = pos - p->start;
        size_t n = p->len - in < len - done ? (size_t)(p->len - in) : len - done;
        int r = tensor_bytes(&v->model->tensors[p->t], buf + done, in, n);
        if (r < 0)
            return r;
        done += n;
    }
    *got = len;
    return 0;
}

int tbm_safetensors_locate(const struct tbm_views *v, size_t t, uint64_t off, size_t len,
                           struct tbm_source_range *out, struct tbm_source **src)
{
    const struct tbm_safetensors *st = v->safetensors;

    (void)t;
    if (off >= st->size)
        return 1;
    if (len > st->size - off)
        len = (size_t)(st->size - off);
    size_t k = piece_at(st, off);
    if (k == st->npieces || off < st->pieces[k].start)
        return 0;
    const struct piece *p = &st->pieces[k];
    const struct tbm_tensor *tensor = &v->model->tensors[p->t];
    uint64_t in = off - p->start;
    /* A reply short of the request reads as the end of the file: only a
     * range wholly inside one stored tensor is spliced. */
    if (!as_stored(tensor) || tensor->src->fd < 0 || len > p->len - in)
        return 0;
    *out = (struct tbm_source_range){
        .fd = tensor->src->fd, .pos = tensor->weights.off + in, .len = len};
    *src = tensor->src;
    return 1;
}
