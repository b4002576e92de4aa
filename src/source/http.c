/* The HTTP(S) source: a .tbm container on a web server, read with range
 * requests through libcurl, its tail at open and the rest in blocks of the
 * cache; every response is checked against the file as it was at open. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cache.h"
#include "tbm/log.h"
#include "tbm/source.h"

/* The first request asks for this much of the end: the index length, and
 * the whole index of a model of a few hundred tensors, in one answer. */
#define TAIL_SIZE (64u << 10)
#define TRIES     3
/* Hinted ranges (the headers of a slice of the index) are fetched together,
 * this many at once, neighbours less than MERGE_GAP apart in one request of
 * at most MERGE_MAX; at most HINTS_MAX bytes of them are held at a time. */
#define HINT_TRANSFERS 8
#define MERGE_GAP      (64u << 10)
#define MERGE_MAX      (1u << 20)
#define HINTS_MAX      (8u << 20)

/* Transfer threads, each with its own connection: enough to keep a
 * loopback or LAN server busy while readers copy. */
#define WORKERS 4
/* libcurl hands the body over in pieces of at most this. Small enough to
 * stay in the CPU's cache between libcurl's copy and ours: side by side,
 * 64 KiB streamed some 10% faster than 512 KiB, and 8 transfer threads
 * slower than 4. */
#define CURL_BUFFER (64L << 10)

/* What identifies the file in one response. */
struct validators {
    uint64_t size; /* the total of Content-Range */
    bool has_size;
    char etag[128];
    char last_modified[64];
};

struct http {
    struct tbm_source src; /* first: the ops are given &src */
    struct curl_slist *headers;
    long timeout;
    struct validators mount;
    pthread_mutex_t lock; /* latest and changed */
    struct validators latest;
    bool changed;
    struct tbm_cache *cache;
    unsigned char *tail; /* the bytes of the first answer, from tail_off to the end */
    uint64_t tail_off;
    size_t tail_len;
    /* Ranges hinted since the last read, fetched by the next read, and what
     * the last such fetch brought (sorted, apart): a mount reads every
     * header, and blocks for headers 1 MiB apart would fetch the whole
     * model. */
    pthread_mutex_t hint_lock;
    struct range *hints, *store;
    size_t nhints, hints_cap, nstore;
    uint64_t hinted_bytes;
    CURLM *multi; /* its connections serve the next fetch of hints */
    CURL *hint_easy[HINT_TRANSFERS];
};

struct range {
    uint64_t off;
    size_t len;
    unsigned char *data;
};

/* One request's answer, as the callbacks see it; after redirects, the last. */
struct response {
    CURL *easy;
    unsigned char *buf;
    size_t cap, got;
    bool too_long;
    bool has_range;
    uint64_t first, last;
    struct validators v;
    char errbuf[CURL_ERROR_SIZE];
};

enum outcome { OUT_OK, OUT_RETRY, OUT_FAIL, OUT_CHANGED, OUT_NOMEM };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status;

static void curl_init(void)
{
    curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void copy_value(char *dst, size_t cap, const char *p, size_t len)
{
    while (len > 0 && (*p == ' ' || *p == '\t'))
        p++, len--;
    while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == '\n' || p[len - 1] == ' '))
        len--;
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, p, len);
    dst[len] = '\0';
}

/* "bytes A-B/T", or "bytes *" "/T" for a range not satisfiable. */
static void parse_content_range(struct response *r, const char *value)
{
    unsigned long long a, b, t;
    char star;

    if (sscanf(value, "bytes %llu-%llu/%llu", &a, &b, &t) == 3 && a <= b && b < t) {
        r->has_range = true;
        r->first = a;
        r->last = b;
        r->v.size = t;
        r->v.has_size = true;
    } else if (sscanf(value, "bytes %c/%llu", &star, &t) == 2 && star == '*') {
        r->v.size = t;
        r->v.has_size = true;
    }
}

static bool is_field(const char *line, size_t len, const char *name, const char **value,
                     size_t *vlen)
{
    size_t n = strlen(name);

    if (len <= n || line[n] != ':' || strncasecmp(line, name, n) != 0)
        return false;
    *value = line + n + 1;
    *vlen = len - n - 1;
    return true;
}

static size_t header_cb(char *line, size_t size, size_t nitems, void *data)
{
    struct response *r = data;
    size_t len = size * nitems, vlen;
    const char *value;
    char buf[128];

    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* A new answer (after a redirect or a 100 Continue): forget the last. */
        r->has_range = false;
        memset(&r->v, 0, sizeof(r->v));
    } else if (is_field(line, len, "Content-Range", &value, &vlen)) {
        copy_value(buf, sizeof(buf), value, vlen);
        parse_content_range(r, buf);
    } else if (is_field(line, len, "ETag", &value, &vlen)) {
        copy_value(r->v.etag, sizeof(r->v.etag), value, vlen);
    } else if (is_field(line, len, "Last-Modified", &value, &vlen)) {
        copy_value(r->v.last_modified, sizeof(r->v.last_modified), value, vlen);
    }
    return len;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct response *r = userdata;
    size_t len = size * nmemb;
    long status = 0;

    /* Only a partial answer's body is wanted: a server that ignores Range
     * would otherwise send the whole model, and an error page is not data. */
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 206)
        return 0;
    if (len > r->cap - r->got) {
        r->too_long = true;
        return 0;
    }
    memcpy(r->buf + r->got, data, len);
    r->got += len;
    return len;
}

static CURL *easy_new(struct http *h)
{
    CURL *e = curl_easy_init();

    if (!e)
        return NULL;
    /* TLS verification is libcurl's default (the system CA store); only
     * http and https, redirects included, may be spoken. */
    if (curl_easy_setopt(e, CURLOPT_URL, h->src.name) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, h->timeout) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, h->timeout) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, CURL_BUFFER) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb) != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    return e;
}

static void *worker_new(void *ctx)
{
    return easy_new(ctx);
}

static void worker_free(void *ctx, void *worker)
{
    (void)ctx;
    curl_easy_cleanup(worker);
}

/* Why the file in r is not the one mounted, or false when it is. */
static bool differs(const struct validators *m, const struct validators *v, char *why,
                    size_t whylen)
{
    if (v->size != m->size)
        snprintf(why, whylen, "its length changed from %llu to %llu bytes",
                 (unsigned long long)m->size, (unsigned long long)v->size);
    else if (m->etag[0] && strcmp(m->etag, v->etag) != 0)
        snprintf(why, whylen, "its ETag changed from %s to %s", m->etag,
                 v->etag[0] ? v->etag : "none");
    else if (m->last_modified[0] && strcmp(m->last_modified, v->last_modified) != 0)
        snprintf(why, whylen, "its Last-Modified changed from %s to %s", m->last_modified,
                 v->last_modified[0] ? v->last_modified : "none");
    else
        return false;
    return true;
}

static const char *status_name(long status)
{
    switch (status) {
    case 401:
        return " Unauthorized";
    case 403:
        return " Forbidden";
    case 404:
        return " Not Found";
    case 410:
        return " Gone";
    case 416:
        return " Range Not Satisfiable";
    case 503:
        return " Service Unavailable";
    default:
        return "";
    }
}

/* Judges one answer to a request for len bytes at first (at open: a suffix
 * of at most len bytes). */
static enum outcome judge(struct http *h, struct response *r, CURLcode code, bool at_open,
                          uint64_t first, size_t len, char *why, size_t whylen)
{
    long status = 0;

    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    /* A write error is ours when the body was refused (see write_cb). */
    if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && status != 0)) {
        snprintf(why, whylen, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        /* Trying again changes nothing for these. */
        bool lasting = code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
                       code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL ||
                       code == CURLE_TOO_MANY_REDIRECTS;
        return lasting ? OUT_FAIL : OUT_RETRY;
    }
    if (status == 200 || status == 206) {
        pthread_mutex_lock(&h->lock);
        if (r->v.has_size)
            h->latest = r->v;
        pthread_mutex_unlock(&h->lock);
    }
    if (status == 200) {
        snprintf(why, whylen,
                 "the server ignores Range requests (it answered 200 with the whole file)");
        return OUT_FAIL;
    }
    if (status == 408 || status == 429 || status >= 500) {
        snprintf(why, whylen, "HTTP %ld%s", status, status_name(status));
        return OUT_RETRY;
    }
    if (status != 206) {
        snprintf(why, whylen, "HTTP %ld%s", status, status_name(status));
        return OUT_FAIL;
    }
    if (!r->has_range) {
        snprintf(why, whylen, "HTTP 206 without a usable Content-Range");
        return OUT_FAIL;
    }
    if (!at_open && differs(&h->mount, &r->v, why, whylen))
        return OUT_CHANGED;
    if (r->too_long) {
        snprintf(why, whylen, "a body longer than its Content-Range");
        return OUT_RETRY;
    }
    if (at_open ? r->last != r->v.size - 1 || r->last - r->first >= len
                : r->first != first || r->last != first + len - 1) {
        snprintf(why, whylen, "Content-Range bytes %llu-%llu/%llu does not answer the range asked",
                 (unsigned long long)r->first, (unsigned long long)r->last,
                 (unsigned long long)r->v.size);
        return OUT_FAIL;
    }
    if (r->got != r->last - r->first + 1) {
        snprintf(why, whylen, "a body of %zu bytes, shorter than its Content-Range's %llu", r->got,
                 (unsigned long long)(r->last - r->first + 1));
        return OUT_RETRY;
    }
    return OUT_OK;
}

static void back_off(int attempt)
{
    /* 0.25 s, then 1 s: a restarting server or a dropped connection gets a
     * moment, a reader does not wait long for a server that is gone. */
    struct timespec ts = {attempt == 1 ? 0 : 1, attempt == 1 ? 250000000L : 0};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Asks for len bytes at first into buf (at open, range is "-len", a suffix),
 * tried up to TRIES times while failures look passing. */
static enum outcome fetch(struct http *h, CURL *easy, struct response *r, void *buf, size_t len,
                          uint64_t first, bool at_open, char *why, size_t whylen)
{
    char range[80];
    enum outcome o = OUT_FAIL;
    struct curl_slist *list = NULL;

    if (at_open)
        snprintf(range, sizeof(range), "Range: bytes=-%zu", len);
    else
        snprintf(range, sizeof(range), "Range: bytes=%llu-%llu", (unsigned long long)first,
                 (unsigned long long)(first + len - 1));
    for (struct curl_slist *l = h->headers; l; l = l->next)
        if (!(list = curl_slist_append(list, l->data)))
            return OUT_NOMEM;
    struct curl_slist *with_range = curl_slist_append(list, range);
    if (!with_range) {
        curl_slist_free_all(list);
        return OUT_NOMEM;
    }
    list = with_range;
    for (int attempt = 0; attempt < TRIES; attempt++) {
        if (attempt > 0)
            back_off(attempt);
        memset(r, 0, sizeof(*r));
        r->easy = easy;
        r->buf = buf;
        r->cap = len;
        if (curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list) != CURLE_OK ||
            curl_easy_setopt(easy, CURLOPT_HEADERDATA, r) != CURLE_OK ||
            curl_easy_setopt(easy, CURLOPT_WRITEDATA, r) != CURLE_OK ||
            curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, r->errbuf) != CURLE_OK) {
            o = OUT_NOMEM;
            break;
        }
        CURLcode code = curl_easy_perform(easy);
        o = judge(h, r, code, at_open, first, len, why, whylen);
        if (o != OUT_RETRY)
            break;
    }
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(list);
    if (o == OUT_RETRY) {
        size_t n = strlen(why);
        snprintf(why + n, whylen - n, " (%d tries)", TRIES);
    }
    return o;
}

static bool has_changed(struct http *h)
{
    pthread_mutex_lock(&h->lock);
    bool changed = h->changed;
    pthread_mutex_unlock(&h->lock);
    return changed;
}

static void mark_changed(struct http *h, const char *why)
{
    pthread_mutex_lock(&h->lock);
    bool first = !h->changed;
    h->changed = true;
    pthread_mutex_unlock(&h->lock);
    if (!first)
        return;
    tbm_log(TBM_LOG_ERROR,
            "%s: changed on the server since mount (%s): reads fail with EIO; remount to see the "
            "new model",
            h->src.name, why);
    tbm_cache_invalidate(h->cache);
}

static int fetch_block(void *ctx, void *worker, uint64_t off, void *buf, size_t len)
{
    struct http *h = ctx;
    struct response r;
    char why[512];

    if (has_changed(h))
        return TBM_ERR_IO;
    switch (fetch(h, worker, &r, buf, len, off, false, why, sizeof(why))) {
    case OUT_OK:
        return 0;
    case OUT_NOMEM:
        return TBM_ERR_NOMEM;
    case OUT_CHANGED:
        mark_changed(h, why);
        return TBM_ERR_IO;
    default:
        tbm_log(TBM_LOG_ERROR, "%s: bytes %llu-%llu: %s", h->src.name, (unsigned long long)off,
                (unsigned long long)(off + len - 1), why);
        return TBM_ERR_IO;
    }
}

static void http_prefetch(struct tbm_source *src, uint64_t off, size_t len)
{
    struct http *h = (struct http *)src;

    /* The tail is here already; past HINTS_MAX the reads go to the cache. */
    if (off >= h->tail_off || len == 0)
        return;
    if (len > h->tail_off - off)
        len = (size_t)(h->tail_off - off);
    pthread_mutex_lock(&h->hint_lock);
    if (h->hinted_bytes + len <= HINTS_MAX) {
        if (h->nhints == h->hints_cap) {
            size_t cap = h->hints_cap ? 2 * h->hints_cap : 64;
            struct range *more = realloc(h->hints, cap * sizeof(*more));
            if (!more)
                goto out;
            h->hints = more;
            h->hints_cap = cap;
        }
        h->hints[h->nhints++] = (struct range){off, len, NULL};
        h->hinted_bytes += len;
    }
out:
    pthread_mutex_unlock(&h->hint_lock);
}

static int by_offset(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void store_clear(struct http *h)
{
    for (size_t i = 0; i < h->nstore; i++)
        free(h->store[i].data);
    h->nstore = 0;
}

/* The hints, sorted and merged, become the store's ranges (their data not
 * fetched yet); the hint list starts again. */
static void hints_merge(struct http *h)
{
    qsort(h->hints, h->nhints, sizeof(*h->hints), by_offset);
    store_clear(h);
    free(h->store);
    h->store = h->hints;
    size_t n = 0;
    for (size_t i = 0; i < h->nhints; i++) {
        struct range r = h->hints[i];
        struct range *last = n ? &h->store[n - 1] : NULL;
        uint64_t end = last ? last->off + last->len : 0;
        if (last && r.off <= end + MERGE_GAP && r.off + r.len - last->off <= MERGE_MAX) {
            if (r.off + r.len > end)
                last->len = (size_t)(r.off + r.len - last->off);
            continue;
        }
        h->store[n++] = r;
    }
    h->nstore = n;
    h->hints = NULL;
    h->nhints = h->hints_cap = 0;
    h->hinted_bytes = 0;
}

struct hint_transfer {
    struct response r;
    struct curl_slist *list;
    struct range *range;
};

static int hint_start(struct http *h, CURL *easy, struct hint_transfer *t, struct range *range)
{
    char header[80];

    memset(t, 0, sizeof(*t));
    if (!(range->data = malloc(range->len)))
        return TBM_ERR_NOMEM;
    snprintf(header, sizeof(header), "Range: bytes=%llu-%llu", (unsigned long long)range->off,
             (unsigned long long)(range->off + range->len - 1));
    for (struct curl_slist *l = h->headers; l; l = l->next)
        if (!(t->list = curl_slist_append(t->list, l->data)))
            return TBM_ERR_NOMEM;
    struct curl_slist *with = curl_slist_append(t->list, header);
    if (!with)
        return TBM_ERR_NOMEM;
    t->list = with;
    t->range = range;
    t->r.easy = easy;
    t->r.buf = range->data;
    t->r.cap = range->len;
    if (curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->list) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t->r) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t->r) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->r.errbuf) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_PRIVATE, t) != CURLE_OK ||
        curl_multi_add_handle(h->multi, easy) != CURLM_OK)
        return TBM_ERR_NOMEM;
    return 0;
}

/* A range that did not arrive whole is dropped from the store: reading it
 * goes through the cache, with its retries. */
static void hint_end(struct http *h, struct hint_transfer *t, CURLcode code)
{
    char why[512];

    curl_multi_remove_handle(h->multi, t->r.easy);
    curl_easy_setopt(t->r.easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(t->r.easy, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(t->list);
    t->list = NULL;
    enum outcome o = judge(h, &t->r, code, false, t->range->off, t->range->len, why, sizeof(why));
    if (o == OUT_CHANGED)
        mark_changed(h, why);
    if (o != OUT_OK) {
        free(t->range->data);
        t->range->data = NULL;
    }
    t->range = NULL;
}

/* Fetches the hinted ranges, HINT_TRANSFERS at a time over the multi
 * handle's connections. Called with hint_lock held. */
static void hints_fetch(struct http *h)
{
    struct hint_transfer t[HINT_TRANSFERS] = {0};
    size_t next = 0;
    int active = 0;

    hints_merge(h);
    if (!h->multi && !(h->multi = curl_multi_init()))
        return;
    for (;;) {
        for (int k = 0; k < HINT_TRANSFERS && next < h->nstore; k++) {
            if (t[k].range)
                continue;
            if (!h->hint_easy[k] && !(h->hint_easy[k] = easy_new(h)))
                break;
            if (hint_start(h, h->hint_easy[k], &t[k], &h->store[next++]) < 0) {
                curl_slist_free_all(t[k].list);
                free(h->store[next - 1].data);
                h->store[next - 1].data = NULL;
                memset(&t[k], 0, sizeof(t[k]));
                continue;
            }
            active++;
        }
        if (active == 0)
            break;
        int running, left;
        if (curl_multi_perform(h->multi, &running) != CURLM_OK)
            break;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(h->multi, &left))) {
            struct hint_transfer *done = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&done);
            hint_end(h, done, msg->data.result);
            active--;
        }
        if (active > 0)
            curl_multi_poll(h->multi, NULL, 0, 1000, NULL);
    }
    for (int k = 0; k < HINT_TRANSFERS; k++) /* after a multi failure */
        if (t[k].range)
            hint_end(h, &t[k], CURLE_RECV_ERROR);
}

/* The index of the first range of the store that ends past off (nstore
 * when none does). */
static size_t store_after(const struct http *h, uint64_t off)
{
    size_t lo = 0, hi = h->nstore;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->store[mid].off + h->store[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Copies what the store holds of the len bytes at off into buf: the bytes
 * from off to the end of the fetched range holding off, or 0 bytes and in
 * *next where the next range starts (UINT64_MAX when none does). */
static size_t from_store(struct http *h, void *buf, size_t len, uint64_t off, uint64_t *next)
{
    size_t n = 0;

    *next = UINT64_MAX;
    pthread_mutex_lock(&h->hint_lock);
    if (h->nhints)
        hints_fetch(h);
    size_t lo = store_after(h, off);
    struct range *r = lo < h->nstore ? &h->store[lo] : NULL;
    if (r && r->data && off >= r->off) {
        n = r->len - (size_t)(off - r->off) < len ? r->len - (size_t)(off - r->off) : len;
        memcpy(buf, r->data + (off - r->off), n);
    } else {
        for (size_t i = lo; i < h->nstore; i++)
            if (h->store[i].off > off && h->store[i].data) {
                *next = h->store[i].off;
                break;
            }
    }
    pthread_mutex_unlock(&h->hint_lock);
    return n;
}

/* The tail, the store of hinted ranges and the cache each serve their part. */
static int http_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, size_t *got)
{
    struct http *h = (struct http *)src;
    uint64_t size = h->src.id.size, next;
    size_t done = 0;

    *got = 0;
    while (done < len && off + done < size) {
        uint64_t pos = off + done;
        char *dst = (char *)buf + done;
        size_t want = len - done, n;
        if (has_changed(h))
            return TBM_ERR_IO;
        /* The tail came with the first answer and reaches the end: the
         * index length and often the whole index are read from it. */
        if (pos >= h->tail_off) {
            n = (size_t)(size - pos) < want ? (size_t)(size - pos) : want;
            memcpy(dst, h->tail + (pos - h->tail_off), n);
            done += n;
            continue;
        }
        if ((n = from_store(h, dst, want, pos, &next)) > 0) {
            done += n;
            continue;
        }
        uint64_t stop = next < h->tail_off ? next : h->tail_off;
        size_t part = stop - pos < want ? (size_t)(stop - pos) : want;
        int r = tbm_cache_read(h->cache, dst, part, pos, &n);
        if (r < 0)
            return r;
        done += n;
        if (n < part)
            break;
    }
    if (has_changed(h))
        return TBM_ERR_IO;
    *got = done;
    return 0;
}

/* Whether the hinted ranges, waiting or fetched, may hold any of the len
 * bytes at off: the next read fetches those waiting, and serves what they
 * brought. */
static bool in_store(struct http *h, uint64_t off, size_t len)
{
    bool in;

    pthread_mutex_lock(&h->hint_lock);
    in = h->nhints > 0;
    for (size_t i = store_after(h, off); i < h->nstore && !in && h->store[i].off < off + len; i++)
        in = h->store[i].data != NULL;
    pthread_mutex_unlock(&h->hint_lock);
    return in;
}

/* Only the cache's blocks are held: the tail and the hinted ranges are
 * headers and the index, copied (and a store of hinted ranges is replaced
 * by the next fetch of hints). */
static int http_hold(struct tbm_source *src, uint64_t off, size_t len,
                     struct tbm_source_piece *pieces, size_t max, size_t *n)
{
    struct http *h = (struct http *)src;

    *n = 0;
    if (has_changed(h))
        return TBM_ERR_IO;
    if (off + len > h->tail_off || in_store(h, off, len))
        return 0;
    int r = tbm_cache_hold(h->cache, off, len, pieces, max, n);
    /* as http_read: nothing is served once a response showed the change */
    if (r > 0 && has_changed(h)) {
        tbm_cache_release(h->cache, pieces, *n);
        *n = 0;
        return TBM_ERR_IO;
    }
    return r;
}

static void http_release(struct tbm_source *src, struct tbm_source_piece *pieces, size_t n)
{
    tbm_cache_release(((struct http *)src)->cache, pieces, n);
}

static int http_identify(struct tbm_source *src, struct tbm_source_id *out)
{
    struct http *h = (struct http *)src;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&h->lock);
    out->size = h->latest.size;
    snprintf(out->tag, sizeof(out->tag), "%s",
             h->latest.etag[0] ? h->latest.etag : h->latest.last_modified);
    pthread_mutex_unlock(&h->lock);
    out->mtime = src->id.mtime;
    return 0;
}

static void http_close(struct tbm_source *src)
{
    struct http *h = (struct http *)src;

    tbm_cache_free(h->cache);
    for (int k = 0; k < HINT_TRANSFERS; k++)
        curl_easy_cleanup(h->hint_easy[k]);
    curl_multi_cleanup(h->multi);
    store_clear(h);
    free(h->store);
    free(h->hints);
    curl_slist_free_all(h->headers);
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->hint_lock);
    free(h->tail);
    free(h->src.name);
    free(h);
}

static const struct tbm_source_ops http_ops = {
    .read = http_read,
    .identify = http_identify,
    .close = http_close,
    .prefetch = http_prefetch,
    .hold = http_hold,
    .release = http_release,
};

bool tbm_source_is_url(const char *name)
{
    return strncasecmp(name, "http://", 7) == 0 || strncasecmp(name, "https://", 8) == 0;
}

int tbm_source_open_http(const char *url, const struct tbm_http_options *opts,
                         struct tbm_source **out, char *why, size_t whylen)
{
    const struct tbm_http_options defaults = {.cache_size = TBM_HTTP_CACHE_DEFAULT,
                                              .timeout = TBM_HTTP_TIMEOUT};
    struct response r;
    CURL *easy = NULL;
    int status = TBM_ERR_NOMEM;

    *out = NULL;
    snprintf(why, whylen, "out of memory");
    opts = opts ? opts : &defaults;
    pthread_once(&curl_once, curl_init);
    if (curl_init_status != CURLE_OK) {
        snprintf(why, whylen, "libcurl: %s", curl_easy_strerror(curl_init_status));
        return TBM_ERR_SOURCE;
    }
    struct http *h = calloc(1, sizeof(*h));
    if (!h)
        return TBM_ERR_NOMEM;
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->hint_lock, NULL);
    h->src.ops = &http_ops;
    h->src.fd = -1; /* nothing to splice from: views read into a buffer */
    h->timeout = opts->timeout ? (long)opts->timeout : (long)TBM_HTTP_TIMEOUT;
    if (!(h->src.name = strdup(url)) || !(h->tail = malloc(TAIL_SIZE)))
        goto fail;
    for (size_t i = 0; i < opts->nheaders; i++) {
        struct curl_slist *l = curl_slist_append(h->headers, opts->headers[i]);
        if (!l)
            goto fail;
        h->headers = l;
    }
    if (!(easy = easy_new(h)))
        goto fail;
    switch (fetch(h, easy, &r, h->tail, TAIL_SIZE, 0, true, why, whylen)) {
    case OUT_OK:
        break;
    case OUT_NOMEM:
        snprintf(why, whylen, "out of memory");
        goto fail;
    default:
        status = TBM_ERR_SOURCE;
        goto fail;
    }
    h->mount = r.v;
    h->latest = r.v;
    h->tail_off = r.first;
    h->tail_len = r.got;
    h->src.id.size = r.v.size;
    snprintf(h->src.id.tag, sizeof(h->src.id.tag), "%s",
             r.v.etag[0] ? r.v.etag : r.v.last_modified);
    time_t lm = r.v.last_modified[0] ? curl_getdate(r.v.last_modified, NULL) : -1;
    h->src.id.mtime.tv_sec = lm >= 0 ? lm : time(NULL);
    struct tbm_cache_fetcher f = {
        .ctx = h, .worker_new = worker_new, .worker_free = worker_free, .fetch = fetch_block};
    uint64_t cache = opts->cache_size ? opts->cache_size : TBM_HTTP_CACHE_DEFAULT;
    if (tbm_cache_new(&f, r.v.size, cache, WORKERS, &h->cache) < 0) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    curl_easy_cleanup(easy);
    *out = &h->src;
    return 0;

fail:
    curl_easy_cleanup(easy);
    http_close(&h->src);
    return status;
}
