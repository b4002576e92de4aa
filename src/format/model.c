/* Opening a model source into the immutable tensor table: the source kind,
 * its index, every tensor's validation, directory names and statistics. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tbm/names.h"

struct opener {
    const char *given; /* SOURCE as the user wrote it */
    struct tbm_model *m;
    const struct tbm_open_options *opts;
    const char *what;            /* "index" or "manifest.json", for messages */
    struct json_object *root;    /* parsed index or manifest */
    struct json_object *entries; /* its "tensors" array */
    struct tbm_json_split split; /* that array's elements, when parsed in slices */
    uint64_t data_end;           /* container: where the index starts */
    char *err;
    size_t errlen;
};

static int fail(struct opener *o, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct opener *o, int status, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(o->err, o->errlen, "%s: ", o->m->path);

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < o->errlen)
        vsnprintf(o->err + n, o->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int too_many(struct opener *o)
{
    return fail(o, TBM_ERR_SOURCE, "%s lists more than %u tensors", o->what, TBM_INDEX_ENTRIES_MAX);
}

static int parse_whole(struct opener *o)
{
    const char *why;

    o->root = tbm_json_parse_strict(o->m->index_json, o->m->index_json_len, &why);
    if (!o->root)
        return fail(o, TBM_ERR_SOURCE, "%s is not valid JSON: %s", o->what, why);
    return 0;
}

/* An index that is plainly an object with a "tensors" array is parsed in
 * slices of that array (see add_sliced); any other text is parsed whole. */
static int read_json(struct opener *o, int fd, uint64_t off, uint64_t len, const char *what)
{
    if (len > TBM_INDEX_MAX)
        return fail(o, TBM_ERR_SOURCE, "%s is %llu bytes, over the %u MiB limit", what,
                    (unsigned long long)len, TBM_INDEX_MAX >> 20);
    char *buf = malloc(len ? len : 1);
    if (!buf)
        return fail(o, TBM_ERR_NOMEM, "out of memory reading the %s", what);
    if (tbm_pread_full(fd, buf, len, off) < 0) {
        free(buf);
        return fail(o, TBM_ERR_SOURCE, "cannot read the %s", what);
    }
    o->m->index_json = buf;
    o->m->index_json_len = len;
    o->what = what;
    int r = tbm_json_split(buf, len, &o->split);
    if (r == TBM_ERR_SOURCE)
        return too_many(o);
    if (r < 0)
        return fail(o, TBM_ERR_NOMEM, "out of memory reading the %s", what);
    if (r > 0 && (o->root = tbm_json_split_root(buf, len, &o->split)))
        return 0;
    tbm_json_split_free(&o->split);
    return parse_whole(o);
}

static int open_container(struct opener *o, const struct stat *st)
{
    unsigned char tail[4];
    uint64_t size = (uint64_t)st->st_size;

    if (size < 4)
        return fail(o, TBM_ERR_SOURCE,
                    "not a .tbm container: %llu bytes, too small for the index length",
                    (unsigned long long)size);
    if (tbm_pread_full(o->m->fd, tail, 4, size - 4) < 0)
        return fail(o, TBM_ERR_SOURCE, "cannot read the index length");
    uint64_t len = (uint64_t)tail[0] | (uint64_t)tail[1] << 8 | (uint64_t)tail[2] << 16 |
                   (uint64_t)tail[3] << 24;
    if (len == 0)
        return fail(o, TBM_ERR_SOURCE, "not a .tbm container: index length is 0");
    if (len > size - 4)
        return fail(o, TBM_ERR_SOURCE,
                    "not a .tbm container: index length %llu exceeds the %llu bytes before it",
                    (unsigned long long)len, (unsigned long long)(size - 4));
    o->data_end = size - 4 - len;
    return read_json(o, o->m->fd, o->data_end, len, "index");
}

static int open_manifest(struct opener *o)
{
    struct stat st;

    int fd = openat(o->m->dirfd, "manifest.json", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return fail(o, TBM_ERR_SOURCE, "cannot open manifest.json: %s", strerror(errno));
    int r;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        r = fail(o, TBM_ERR_SOURCE, "manifest.json is not a regular file");
    else
        r = read_json(o, fd, 0, (uint64_t)st.st_size, "manifest.json");
    close(fd);
    return r;
}

static struct json_object *tensors_array(struct opener *o)
{
    struct json_object *v;

    if (!json_object_is_type(o->root, json_type_object) ||
        !json_object_object_get_ex(o->root, "tensors", &v) ||
        !json_object_is_type(v, json_type_array))
        return NULL;
    return v;
}

static int take_metadata(struct opener *o)
{
    struct json_object *v;

    if (json_object_object_get_ex(o->root, "architecture", &v) &&
        json_object_is_type(v, json_type_string)) {
        o->m->architecture = strdup(json_object_get_string(v));
        if (!o->m->architecture)
            return fail(o, TBM_ERR_NOMEM, "out of memory");
    }
    if (json_object_object_get_ex(o->root, "config", &v))
        o->m->config = json_object_get(v);
    return 0;
}

static int check_shape(struct tbm_tensor *t)
{
    uint64_t product = 1;

    if (!t->shape || !t->header_read)
        return 0;
    for (size_t k = 0; k < t->ndim; k++)
        if (__builtin_mul_overflow(product, t->shape[k], &product))
            return tbm_strlist_addf(&t->warnings, "the shape's product overflows 64 bits");
    t->shape_matches = product == t->hdr.num_weights;
    if (!t->shape_matches)
        return tbm_strlist_addf(&t->warnings, "the shape's product %llu is not num_weights %llu",
                                (unsigned long long)product,
                                (unsigned long long)t->hdr.num_weights);
    return 0;
}

static int locate(struct opener *o, struct tbm_tensor *t, const struct tbm_entry *e,
                  uint64_t *data_end)
{
    struct stat st;
    const char *why;

    if (o->m->kind == TBM_SOURCE_CONTAINER) {
        if (!e->has_offset)
            return e->bad_offset ? 0
                                 : tbm_strlist_addf(&t->problems, "index entry has no \"offset\"");
        t->fd = o->m->fd;
        t->offset = e->offset;
        *data_end = o->data_end;
        return 1;
    }
    if (!e->file)
        return tbm_strlist_addf(&t->problems, "manifest entry has no string \"file\"");
    t->fd = tbm_manifest_open_file(o->m->dirfd, o->m->path, e->file, e->file_len, &why);
    if (t->fd < 0)
        return tbm_strlist_addf(&t->problems, "manifest file \"%s\" refused: %s", e->file, why);
    t->owns_fd = true;
    if (fstat(t->fd, &st) < 0)
        return tbm_strlist_addf(&t->problems, "manifest file \"%s\" cannot be read", e->file);
    *data_end = (uint64_t)st.st_size;
    return 1;
}

static int add_tensor(struct opener *o, struct json_object *entry, size_t i, struct tbm_reader *rd)
{
    struct tbm_tensor *t = &o->m->tensors[i];
    struct tbm_entry e;
    uint64_t data_end = 0;
    int r;

    t->fd = -1;
    if ((r = tbm_entry_parse(entry, i, t, &e)) < 0)
        return r;
    if (!json_object_is_type(entry, json_type_object))
        return 0;
    if ((r = locate(o, t, &e, &data_end)) <= 0)
        return r;
    if ((r = tbm_blob_validate(t, data_end, rd)) < 0 || (r = tbm_entry_check_header(entry, t)) < 0)
        return r;
    return check_shape(t);
}

/* Below this many tensors one thread does the work sooner than several. */
#define PARALLEL_MIN 4096
#define PARALLEL_MAX 8

struct span {
    struct opener *o;
    size_t begin, end;
    int (*fn)(struct opener *o, size_t begin, size_t end);
    int status;
};

static void *run_span(void *arg)
{
    struct span *s = arg;
    s->status = s->fn(s->o, s->begin, s->end);
    return NULL;
}

/* Runs fn over [0, n) split into one span per CPU. Each tensor is touched by
 * exactly one span, and the parsed index is only read, so spans share nothing
 * but the allocator. Returns the first span's failure, if any. */
static int for_each_span(struct opener *o, size_t n,
                         int (*fn)(struct opener *o, size_t begin, size_t end))
{
    long cpus = n < PARALLEL_MIN ? 1 : sysconf(_SC_NPROCESSORS_ONLN);
    size_t k = cpus < 1 ? 1 : cpus > PARALLEL_MAX ? PARALLEL_MAX : (size_t)cpus;
    struct span spans[PARALLEL_MAX];
    pthread_t threads[PARALLEL_MAX];
    bool started[PARALLEL_MAX] = {false};
    int r = 0;

    for (size_t i = 0; i < k; i++)
        spans[i] = (struct span){o, n * i / k, n * (i + 1) / k, fn, 0};
    for (size_t i = 1; i < k; i++)
        started[i] = pthread_create(&threads[i], NULL, run_span, &spans[i]) == 0;
    run_span(&spans[0]);
    for (size_t i = 1; i < k; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            run_span(&spans[i]);
    }
    for (size_t i = 0; i < k && r == 0; i++)
        r = spans[i].status;
    return r;
}

static int add_tensors(struct opener *o, size_t begin, size_t end)
{
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t i = begin; i < end && r == 0; i++)
        r = add_tensor(o, json_object_array_get_idx(o->entries, i), i, &rd);
    tbm_reader_free(&rd);
    return r;
}

/* A span's status when a slice of the array is not valid JSON: negative like
 * every failure, and apart from the TBM_ERR_ codes. */
#define SLICE_INVALID (-100)

/* At most this many elements, or bytes of their text, are parsed at once:
 * the tree of one slice is all the memory the index takes while it loads. */
#define SLICE_ELEMENTS 256
#define SLICE_BYTES    (1u << 20)

static size_t slice_end(const struct tbm_json_split *split, size_t first, size_t end)
{
    size_t last = first + 1;

    while (last < end && last - first < SLICE_ELEMENTS &&
           split->sep[last + 1] - split->sep[first] <= SLICE_BYTES)
        last++;
    return last;
}

static int add_sliced(struct opener *o, size_t begin, size_t end)
{
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t first = begin; first < end && r == 0;) {
        size_t last = slice_end(&o->split, first, end);
        struct json_object *arr = tbm_json_split_elements(o->m->index_json, &o->split, first, last);

        if (!arr) {
            r = SLICE_INVALID;
            break;
        }
        for (size_t i = first; i < last && r == 0; i++)
            r = add_tensor(o, json_object_array_get_idx(arr, i - first), i, &rd);
        json_object_put(arr);
        first = last;
    }
    tbm_reader_free(&rd);
    return r;
}

static void free_tensors(struct tbm_model *m)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (t->owns_fd && t->fd >= 0)
            close(t->fd);
        free(t->name);
        free(t->dir);
        free(t->shape);
        free(t->entry_json);
        tbm_strlist_free(&t->problems);
        tbm_strlist_free(&t->warnings);
    }
    free(m->tensors);
    m->tensors = NULL;
    m->ntensors = 0;
}

static int load_entries(struct opener *o)
{
    struct json_object *arr = tensors_array(o);

    if (!arr)
        return fail(o, TBM_ERR_SOURCE, "%s has no \"tensors\" array", o->what);
    bool sliced = o->split.sep != NULL;
    size_t n = sliced ? o->split.count : json_object_array_length(arr);
    if (n > TBM_INDEX_ENTRIES_MAX)
        return too_many(o);
    /* Zeroed records own nothing, so a failure part way can close them all. */
    o->m->tensors = calloc(n ? n : 1, sizeof(*o->m->tensors));
    if (!o->m->tensors)
        return fail(o, TBM_ERR_NOMEM, "out of memory for %zu tensors", n);
    o->m->ntensors = n;
    o->entries = arr;
    int r = for_each_span(o, n, sliced ? add_sliced : add_tensors);
    if (r == SLICE_INVALID) {
        /* The whole text is invalid too, and parsing it says why. */
        free_tensors(o->m);
        json_object_put(o->root);
        tbm_json_split_free(&o->split);
        return (r = parse_whole(o)) < 0 ? r : load_entries(o);
    }
    return r < 0 ? fail(o, r, "out of memory loading %zu tensors", n) : 0;
}

static struct json_object *u64_json(uint64_t v)
{
    return json_object_new_uint64(v);
}

/* A bare .tb has no index: its one tensor is named after the file, and its
 * index entry and index.json are synthesized from the header. */
static int synthesize_index(struct opener *o)
{
    static const char *const dtypes[] = {"fp32", "fp16", "bf16", "fp64"};
    struct tbm_tensor *t = &o->m->tensors[0];
    const struct tbm_blob_header *h = &t->hdr;
    struct json_object *root = json_object_new_object();
    struct json_object *arr = json_object_new_array();
    struct json_object *e = json_object_new_object();
    int r = TBM_ERR_NOMEM;

    if (!root || !arr || !e) {
        json_object_put(arr);
        json_object_put(e);
        goto out;
    }
    json_object_object_add(root, "architecture", NULL);
    json_object_object_add(root, "config", json_object_new_object());
    json_object_object_add(root, "tensors", arr);
    json_object_array_add(arr, e);
    json_object_object_add(e, "name", json_object_new_string_len(t->name, (int)t->name_len));
    json_object_object_add(e, "offset", u64_json(0));
    if (t->header_read) {
        struct json_object *shape = json_object_new_array();
        json_object_array_add(shape, u64_json(h->num_weights));
        json_object_object_add(e, "shape", shape);
        json_object_object_add(e, "nm_n", u64_json(h->nm_n));
        json_object_object_add(e, "nm_m", u64_json(h->nm_m));
        json_object_object_add(
            e, "dtype", h->precision < 4 ? json_object_new_string(dtypes[h->precision]) : NULL);
        json_object_object_add(e, "num_weights", u64_json(h->num_weights));
        json_object_object_add(e, "num_mask_bytes", u64_json(h->num_mask_bytes));
    }
    t->entry_json = strdup(json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN));
    const char *s =
        json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    o->m->index_json = s ? malloc(strlen(s) + 1) : NULL;
    if (!t->entry_json || !o->m->index_json)
        goto out;
    o->m->index_json_len = strlen(s) + 1;
    memcpy(o->m->index_json, s, o->m->index_json_len - 1);
    o->m->index_json[o->m->index_json_len - 1] = '\n';
    o->m->config = json_object_get(json_object_object_get(root, "config"));
    r = 0;
out:
    json_object_put(root);
    return r;
}

static int load_blob(struct opener *o, const struct stat *st)
{
    struct tbm_reader rd = TBM_READER_INIT;
    struct tbm_tensor *t;
    const char *base = strrchr(o->given, '/');
    base = base ? base + 1 : o->given;

    o->m->tensors = calloc(1, sizeof(*o->m->tensors));
    if (!o->m->tensors)
        return fail(o, TBM_ERR_NOMEM, "out of memory");
    o->m->ntensors = 1;
    t = &o->m->tensors[0];
    t->fd = o->m->fd;
    t->name_len = strlen(base) - 3;
    t->name = strndup(base, t->name_len);
    int r = t->name ? tbm_blob_validate(t, (uint64_t)st->st_size, &rd) : TBM_ERR_NOMEM;
    tbm_reader_free(&rd);
    if (r < 0)
        return fail(o, TBM_ERR_NOMEM, "out of memory");
    if (t->header_read) {
        t->shape = malloc(sizeof(*t->shape));
        if (!t->shape)
            return fail(o, TBM_ERR_NOMEM, "out of memory");
        t->shape[0] = t->hdr.num_weights;
        t->ndim = 1;
        t->shape_matches = true;
    }
    if (synthesize_index(o) < 0)
        return fail(o, TBM_ERR_NOMEM, "out of memory");
    return 0;
}

/* Open-addressed string set keyed by directory name; slots hold index + 1
 * into keys, so the table owns no strings. */
struct dirset {
    size_t *slots;
    size_t size; /* power of two, at least twice the entries */
    char *const *keys;
};

static size_t dirset_probe(const struct dirset *d, const char *key, size_t len)
{
    size_t mask = d->size - 1;
    size_t i = (size_t)tbm_fnv1a64(key, len) & mask;

    while (d->slots[i]) {
        const char *k = d->keys[d->slots[i] - 1];
        if (strlen(k) == len && memcmp(k, key, len) == 0)
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

static bool dirset_has(const struct dirset *d, const char *key, size_t len)
{
    return d->slots[dirset_probe(d, key, len)] != 0;
}

static size_t table_size(size_t n)
{
    size_t size = 16;
    while (size < 2 * n + 1)
        size *= 2;
    return size;
}

/* Per encoded base name, the next duplicate suffix to try, so that many
 * tensors with one name do not rescan every earlier suffix. */
struct dupcount {
    char **bases;
    size_t *next;
    struct dirset set;
};

static unsigned long next_suffix(struct dupcount *dc, size_t *nbases, const char *enc, size_t len)
{
    size_t slot = dirset_probe(&dc->set, enc, len);

    if (!dc->set.slots[slot]) {
        dc->bases[*nbases] = strndup(enc, len);
        if (!dc->bases[*nbases])
            return 0;
        dc->next[*nbases] = 2;
        dc->set.slots[slot] = ++*nbases;
    }
    return dc->next[dc->set.slots[slot] - 1]++;
}

static int assign_dirs(struct tbm_model *m)
{
    struct dupcount dc = {0};
    size_t nbases = 0;
    char enc[TBM_NAME_MAX + 1], cand[TBM_NAME_MAX + 1];
    int r = TBM_ERR_NOMEM;

    m->dir_table_size = table_size(m->ntensors);
    m->dir_table = calloc(m->dir_table_size, sizeof(size_t));
    dc.bases = calloc(m->ntensors ? m->ntensors : 1, sizeof(char *));
    dc.next = calloc(m->ntensors ? m->ntensors : 1, sizeof(size_t));
    dc.set.size = m->dir_table_size;
    dc.set.slots = calloc(dc.set.size, sizeof(size_t));
    dc.set.keys = dc.bases;
    if (!m->dir_table || !dc.bases || !dc.next || !dc.set.slots)
        goto out;

    char **dirs = malloc((m->ntensors ? m->ntensors : 1) * sizeof(char *));
    if (!dirs)
        goto out;
    struct dirset taken = {m->dir_table, m->dir_table_size, dirs};
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        size_t len = tbm_name_encode(t->name, t->name_len, enc);
        const char *pick = enc;
        while (dirset_has(&taken, pick, len)) {
            unsigned long k = next_suffix(&dc, &nbases, enc, strlen(enc));
            if (k == 0) {
                free(dirs);
                goto out;
            }
            len = tbm_name_dedup(enc, strlen(enc), k, cand);
            pick = cand;
        }
        t->dir = strndup(pick, len);
        if (!t->dir) {
            free(dirs);
            goto out;
        }
        dirs[i] = t->dir;
        m->dir_table[dirset_probe(&taken, pick, len)] = i + 1;
    }
    free(dirs);
    r = 0;
out:
    for (size_t i = 0; i < nbases; i++)
        free(dc.bases[i]);
    free(dc.bases);
    free(dc.next);
    free(dc.set.slots);
    return r;
}

long tbm_model_find_dir(const struct tbm_model *m, const char *dir, size_t len)
{
    size_t mask = m->dir_table_size - 1;
    size_t i = (size_t)tbm_fnv1a64(dir, len) & mask;

    while (m->dir_table[i]) {
        const struct tbm_tensor *t = &m->tensors[m->dir_table[i] - 1];
        if (strlen(t->dir) == len && memcmp(t->dir, dir, len) == 0)
            return (long)(m->dir_table[i] - 1);
        i = (i + 1) & mask;
    }
    return -1;
}

/* The bytes a blob's servable parts occupy: its header and each region that
 * validation placed inside the data. */
struct extent {
    struct tbm_tensor *t;
    uint64_t start, end;
};

static uint64_t region_end(const struct tbm_region *r, uint64_t end)
{
    return r->ok && r->len && r->off + r->len > end ? r->off + r->len : end;
}

static int by_start(const void *a, const void *b)
{
    const struct extent *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int mark_overlap(const struct extent *e, const struct extent *other)
{
    struct tbm_tensor *t = e->t;

    t->raw.ok = t->weights.ok = t->mask.ok = false;
    return tbm_strlist_addf(&t->problems, "blob [%llu, %llu) overlaps tensor \"%s\"'s blob",
                            (unsigned long long)e->start, (unsigned long long)e->end,
                            other->t->dir);
}

/* In a container every blob must have bytes of its own: a sweep in offset
 * order finds each blob that starts before an earlier one has ended. Only
 * what would be served counts: a region already refused says nothing about
 * its neighbours. */
static int check_overlaps(struct tbm_model *m)
{
    struct extent *v = malloc((m->ntensors ? m->ntensors : 1) * sizeof(*v));
    size_t n = 0;
    int r = 0;

    if (!v)
        return TBM_ERR_NOMEM;
    for (size_t i = 0; i < m->ntensors; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (!t->header_sound)
            continue;
        uint64_t end = region_end(&t->mask, region_end(&t->weights, t->offset + TBM_HEADER_SIZE));
        v[n++] = (struct extent){t, t->offset, end};
    }
    qsort(v, n, sizeof(*v), by_start);
    const struct extent *reach = NULL; /* the earlier blob ending furthest */
    for (size_t i = 0; i < n && r == 0; i++) {
        if (reach && v[i].start < reach->end) {
            r = mark_overlap(&v[i], reach);
            if (r == 0)
                r = mark_overlap(reach, &v[i]);
        }
        if (!reach || v[i].end > reach->end)
            reach = &v[i];
    }
    free(v);
    return r;
}

static int warn_stats(struct tbm_tensor *t)
{
    int r = 0;

    if (!t->stats_known)
        return 0;
    if (t->stats.groups_over_n)
        r = tbm_strlist_addf(&t->warnings, "%llu groups keep more than nm_n = %u elements",
                             (unsigned long long)t->stats.groups_over_n, t->hdr.nm_n);
    if (r == 0 && t->stats.mask_conflicts)
        r = tbm_strlist_addf(&t->warnings, "%llu pruned elements have a non-zero stored weight",
                             (unsigned long long)t->stats.mask_conflicts);
    return r;
}

static int count_tensors(struct opener *o, size_t begin, size_t end)
{
    struct tbm_model *m = o->m;
    struct tbm_count_buf buf = {0};
    struct tbm_reader rd = TBM_READER_INIT;
    int r = 0;

    for (size_t i = begin; i < end && r == 0; i++) {
        struct tbm_tensor *t = &m->tensors[i];
        if (!t->header_sound || !t->weights.ok)
            continue;
        if (t->hdr.nm_m == 0) {
            t->stats.kept = t->hdr.num_weights;
            t->stats_known = true;
        } else if (t->mask_usable && t->mask.ok) {
            if (!buf.weights && (r = tbm_count_buf_init(&buf)) < 0)
                break;
            r = tbm_blob_count(t, m->isa, &buf, &rd);
        }
        if (r == 0)
            r = warn_stats(t);
    }
    tbm_count_buf_free(&buf);
    tbm_reader_free(&rd);
    return r;
}

static int open_source(struct opener *o)
{
    struct tbm_model *m = o->m;
    struct stat st;

    if (stat(m->path, &st) < 0)
        return fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
    m->mtime = st.st_mtim;
    if (S_ISDIR(st.st_mode)) {
        m->kind = TBM_SOURCE_MANIFEST;
        m->dirfd = open(m->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (m->dirfd < 0)
            return fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
        return open_manifest(o);
    }
    /* The type is checked again on what was opened, without blocking: the
     * path may have become a FIFO since the stat. */
    m->fd = open(m->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (m->fd < 0)
        return fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
    if (fstat(m->fd, &st) < 0)
        return fail(o, TBM_ERR_SOURCE, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(o, TBM_ERR_SOURCE, "not a regular file or a directory");
    m->mtime = st.st_mtim;
    /* The kind and a bare blob's name come from SOURCE as given: a link
     * named x.tb is a bare blob named x, whatever its target is called. */
    if (ends_with(o->given, ".tb")) {
        m->kind = TBM_SOURCE_BLOB;
        return load_blob(o, &st);
    }
    m->kind = TBM_SOURCE_CONTAINER;
    return open_container(o, &st);
}

static int build_table(struct opener *o)
{
    struct tbm_model *m = o->m;
    int r;

    if (m->kind != TBM_SOURCE_BLOB && ((r = load_entries(o)) < 0 || (r = take_metadata(o)) < 0))
        return r;
    if (assign_dirs(m) < 0 || (m->kind == TBM_SOURCE_CONTAINER && check_overlaps(m) < 0))
        return fail(o, TBM_ERR_NOMEM, "out of memory");
    if ((r = for_each_span(o, m->ntensors, count_tensors)) < 0)
        return fail(o, r, "out of memory computing statistics");
    const struct tbm_tensor *first = NULL;
    for (size_t i = 0; i < m->ntensors; i++) {
        if (m->tensors[i].problems.count == 0)
            continue;
        m->nproblem_tensors++;
        first = first ? first : &m->tensors[i];
    }
    if (o->opts->strict && first)
        return fail(o, TBM_ERR_PROBLEM,
                    "refused by -o strict: tensor %s: %s (%zu tensor(s) with "
                    "problems)",
                    first->dir, first->problems.items[0], m->nproblem_tensors);
    return 0;
}

int tbm_model_open(const char *path, const struct tbm_open_options *opts, struct tbm_model **out,
                   char *err, size_t errlen)
{
    struct tbm_model *m = calloc(1, sizeof(*m));
    struct opener o = {.given = path, .m = m, .opts = opts, .err = err, .errlen = errlen};
    int r;

    *out = NULL;
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        return TBM_ERR_NOMEM;
    }
    m->fd = m->dirfd = -1;
    m->isa = opts->isa;
    m->path = realpath(path, NULL);
    if (!m->path) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        r = TBM_ERR_SOURCE;
        goto out_err;
    }
    if ((r = open_source(&o)) < 0 || (r = build_table(&o)) < 0)
        goto out_err;
    json_object_put(o.root);
    tbm_json_split_free(&o.split);
    *out = m;
    return 0;

out_err:
    json_object_put(o.root);
    tbm_json_split_free(&o.split);
    tbm_model_close(m);
    return r;
}

void tbm_model_close(struct tbm_model *m)
{
    if (!m)
        return;
    free_tensors(m);
    if (m->fd >= 0)
        close(m->fd);
    if (m->dirfd >= 0)
        close(m->dirfd);
    json_object_put(m->config);
    free(m->architecture);
    free(m->dir_table);
    free(m->index_json);
    free(m->path);
    free(m);
}
