/* The source of every remote scheme: a .tbm container read over HTTP(S)
 * with range requests (libcurl), its tail at open, the headers the format
 * layer hints in hints.c's ranges, the rest in blocks of the cache. Here:
 * the transport (libcurl's set-up, requests, retries, redirects followed
 * hop by hop so that the source's own headers and signature go only to its
 * own origin), the judgement of every answer against the file as it was at
 * open, and the source's operations. What a scheme changes (where a URL's
 * bytes are, what signs a request) its row says (scheme.h). */
#include <curl/curl.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "answer.h"
#include "base/named.h"
#include "cache.h"
#include "hints.h"
#include "scheme.h"
#include "tbm/log.h"
#include "tbm/source.h"

/* The first request asks for this much of the end: the index length, and
 * the whole index of a model of a few hundred tensors, in one answer. */
#define TAIL_SIZE (64u << 10)
#define TRIES     3
#define MAX_HOPS  10
/* An error body is read this far: S3's XML names its code early. */
#define BODY_MAX 2048

/* libcurl hands the body over in pieces of at most this. Small enough to
 * stay in the CPU's cache between libcurl's copy and ours: side by side,
 * 64 KiB streamed some 10% faster than 512 KiB, and 8 transfer threads
 * slower than 4. */
#define CURL_BUFFER (64L << 10)
/* A CA bundle: the system's whole store is a few hundred KiB. */
#define CA_MAX ((size_t)16 << 20)

struct http {
    struct tbm_source src; /* first: the ops are given &src */
    char *url;             /* what is requested: src.name may hide parts of it */
    struct curl_slist *headers;
    long timeout;
    char *ca_file;                   /* its path, until read into ca */
    struct tbm_named ca;             /* the CA bundle's bytes, given to libcurl, which */
    struct curl_blob blob;           /* then opens no file by name */
    const struct tbm_scheme *scheme; /* its row */
    void *state;                     /* the row's, for its requests */
    char denied_logged[96];          /* the refusal logged last, until a success */
    struct tbm_validators mount;
    pthread_mutex_t lock; /* latest and changed */
    struct tbm_validators latest;
    bool changed;
    struct tbm_cache *cache;
    unsigned char *tail; /* the bytes of the first answer, from tail_off to the end */
    uint64_t tail_off;
    size_t tail_len;
    struct tbm_hints *hints; /* the headers the format layer will read */
};

/* One request's answer, as the callbacks see it. */
struct response {
    CURL *easy;
    unsigned char *const *bufs; /* the body's i-th TBM_CACHE_BLOCK goes to bufs[i], */
    unsigned char *one;         /* or, without bufs, all of it here */
    size_t cap, got;
    bool too_long;
    struct tbm_http_answer head; /* what its header says */
    long status;
    const char *location; /* a redirect's target, libcurl's until the next request */
    char body[BODY_MAX];  /* an error's body, cut */
    size_t body_len;
    char code[64]; /* the store's error code, cleaned, or "" */
    char errbuf[CURL_ERROR_SIZE];
};

/* OUT_REDIRECT: go to r->location; OUT_DENIED: the credentials were
 * refused; OUT_TIMEOUT: no whole answer within the deadline; OUT_STOPPED:
 * the program is stopping. */
enum outcome {
    OUT_OK,
    OUT_RETRY,
    OUT_FAIL,
    OUT_CHANGED,
    OUT_NOMEM,
    OUT_REDIRECT,
    OUT_DENIED,
    OUT_TIMEOUT,
    OUT_STOPPED
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status;

static void curl_init(void)
{
    curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t header_cb(char *line, size_t size, size_t nitems, void *data)
{
    struct response *r = data;

    tbm_answer_header(&r->head, line, size * nitems);
    return size * nitems;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct response *r = userdata;
    size_t len = size * nmemb;
    long status = 0;

    /* Only a partial answer's body is wanted: a server that ignores Range
     * would otherwise send the whole model. An error's is kept to quote its
     * code, and a redirect's read (libcurl tells where it goes only after a
     * whole answer), as far as BODY_MAX. */
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {
        size_t room = sizeof(r->body) - 1 - r->body_len;
        size_t n = len < room ? len : room;
        memcpy(r->body + r->body_len, data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return n == len ? len : 0;
    }
    if (status != 206)
        return 0;
    if (len > r->cap - r->got) {
        r->too_long = true;
        return 0;
    }
    if (!r->bufs) {
        memcpy(r->one + r->got, data, len);
        r->got += len;
        return len;
    }
    for (size_t done = 0; done < len;) {
        size_t in = r->got % TBM_CACHE_BLOCK;
        size_t n = TBM_CACHE_BLOCK - in < len - done ? TBM_CACHE_BLOCK - in : len - done;
        memcpy(r->bufs[r->got / TBM_CACHE_BLOCK] + in, data + done, n);
        r->got += n;
        done += n;
    }
    return len;
}

/* A read waits for its transfers this long in all: a server that sends a
 * byte a second never stalls, yet must not hold a reader for ever. libcurl
 * measures a transfer's speed over its last 5 s, so a stall is seen some
 * 5 s after the stall timeout: a short timeout (the tests') still leaves a
 * stalled transfer a second try. */
static long deadline_ms(const struct http *h)
{
    long n = h->timeout * (long)TBM_HTTP_DEADLINE_TIMEOUTS;

    return (n > h->timeout + 10 ? n : h->timeout + 10) * 1000;
}

static long ms_since(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* libcurl asks at least once a second, however slow the server. */
static int progress_cb(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)data, (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return tbm_source_stopping();
}

static CURL *easy_new(struct http *h)
{
    CURL *e = curl_easy_init();

    if (!e)
        return NULL;
    /* TLS verification is libcurl's default (the system CA store, or
     * ca_file's); only http and https may be spoken. Redirects are
     * followed by fetch, hop by hop. */
    if (curl_easy_setopt(e, CURLOPT_URL, h->url) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK ||
        (h->ca.bytes && curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &h->blob) != CURLE_OK) ||
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, progress_cb) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, deadline_ms(h)) != CURLE_OK ||
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

/* Whether URLs a and b have the same scheme, host and port. */
static bool same_origin(const char *a, const char *b)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
    CURLU *ua = curl_url(), *ub = curl_url();
    bool same = ua && ub && curl_url_set(ua, CURLUPART_URL, a, 0) == CURLUE_OK &&
                curl_url_set(ub, CURLUPART_URL, b, 0) == CURLUE_OK;

    for (size_t i = 0; same && i < sizeof(parts) / sizeof(parts[0]); i++) {
        char *x = NULL, *y = NULL;
        same = curl_url_get(ua, parts[i], &x, CURLU_DEFAULT_PORT) == CURLUE_OK &&
               curl_url_get(ub, parts[i], &y, CURLU_DEFAULT_PORT) == CURLUE_OK &&
               strcasecmp(x, y) == 0;
        curl_free(x);
        curl_free(y);
    }
    curl_url_cleanup(ua);
    curl_url_cleanup(ub);
    return same;
}

/* Points easy at url, with the headers of a request for range: the
 * source's own headers and its scheme's signature only when url is of the
 * source's origin. *list is the caller's to free once the request is
 * done. */
static int prepare(struct http *h, CURL *easy, const char *url, const char *range,
                   struct curl_slist **list, unsigned *version)
{
    bool own = url == h->url || same_origin(url, h->url);
    bool ok = curl_easy_setopt(easy, CURLOPT_URL, url) == CURLE_OK;

    *list = NULL;
    *version = 0;
    for (struct curl_slist *l = own ? h->headers : NULL; ok && l; l = l->next)
        ok = tbm_header_add(list, l->data);
    /* The handle is reused: the last request's credentials are forgotten
     * first, and a request elsewhere goes with none. */
    if (ok && h->scheme->sign)
        ok = curl_easy_setopt(easy, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) == CURLE_OK &&
             curl_easy_setopt(easy, CURLOPT_USERNAME, NULL) == CURLE_OK &&
             curl_easy_setopt(easy, CURLOPT_PASSWORD, NULL) == CURLE_OK &&
             (!own || h->scheme->sign(h->state, easy, list, version) == 0);
    if (ok)
        ok = tbm_header_add(list, range) &&
             curl_easy_setopt(easy, CURLOPT_HTTPHEADER, *list) == CURLE_OK;
    if (!ok) {
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(*list);
        *list = NULL;
        return TBM_ERR_NOMEM;
    }
    return 0;
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
static bool differs(const struct tbm_validators *m, const struct tbm_validators *v, char *why,
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

/* What a transfer that failed says, and whether trying again may help. */
static enum outcome transfer_failed(const struct response *r, CURLcode code, char *why,
                                    size_t whylen)
{
    snprintf(why, whylen, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
    /* Trying again changes nothing for these. */
    bool lasting = code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
                   code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL ||
                   code == CURLE_TOO_MANY_REDIRECTS;
    return lasting ? OUT_FAIL : OUT_RETRY;
}

/* Judges a partial answer (206): the file it is of, and the range asked
 * for whole (at open: a suffix of at most len bytes). */
static enum outcome judge_range(struct http *h, const struct response *r, bool at_open,
                                uint64_t first, size_t len, char *why, size_t whylen)
{
    const struct tbm_http_answer *a = &r->head;

    if (!a->has_range) {
        snprintf(why, whylen, "HTTP 206 without a usable Content-Range");
        return OUT_FAIL;
    }
    if (!at_open && differs(&h->mount, &a->v, why, whylen))
        return OUT_CHANGED;
    if (r->too_long) {
        snprintf(why, whylen, "a body longer than its Content-Range");
        return OUT_RETRY;
    }
    if (at_open ? a->last != a->v.size - 1 || a->last - a->first >= len
                : a->first != first || a->last != first + len - 1) {
        snprintf(why, whylen, "Content-Range bytes %llu-%llu/%llu does not answer the range asked",
                 (unsigned long long)a->first, (unsigned long long)a->last,
                 (unsigned long long)a->v.size);
        return OUT_FAIL;
    }
    if (r->got != a->last - a->first + 1) {
        snprintf(why, whylen, "a body of %zu bytes, shorter than its Content-Range's %llu", r->got,
                 (unsigned long long)(a->last - a->first + 1));
        return OUT_RETRY;
    }
    return OUT_OK;
}

/* Judges one answer to a request for len bytes at first (at open: a suffix
 * of at most len bytes). */
static enum outcome judge(struct http *h, struct response *r, CURLcode code, bool at_open,
                          uint64_t first, size_t len, char *why, size_t whylen)
{
    long status = 0;

    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    /* A write error is ours when the body was refused (see write_cb). */
    if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && status != 0))
        return transfer_failed(r, code, why, whylen);
    if (status == 200 || status == 206) {
        pthread_mutex_lock(&h->lock);
        if (r->head.v.has_size)
            h->latest = r->head.v;
        pthread_mutex_unlock(&h->lock);
    }
    if (status == 200) {
        snprintf(why, whylen,
                 "the server ignores Range requests (it answered 200 with the whole file)");
        return OUT_FAIL;
    }
    r->status = status;
    if (status >= 300 && status < 400) {
        char *location = NULL;
        if (curl_easy_getinfo(r->easy, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location) {
            r->location = location;
            return OUT_REDIRECT;
        }
    }
    if (status == 206)
        return judge_range(h, r, at_open, first, len, why, whylen);
    tbm_answer_error_code(r->body, r->body_len, r->code, sizeof(r->code));
    snprintf(why, whylen, "HTTP %ld%s%s%s%s", status, status_name(status), r->code[0] ? " (" : "",
             r->code, r->code[0] ? ")" : "");
    if (status == 408 || status == 429 || status >= 500)
        return OUT_RETRY;
    if (h->scheme->refused && h->scheme->refused(r->status, r->code))
        return OUT_DENIED;
    return OUT_FAIL;
}

static void back_off(int attempt)
{
    /* 0.25 s, then 1 s: a restarting server or a dropped connection gets a
     * moment, a reader does not wait long for a server that is gone. */
    struct timespec ts = {attempt == 1 ? 0 : 1, attempt == 1 ? 250000000L : 0};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* What a fetch asks for: len bytes at first into bufs (at open, the last
 * len bytes), with its Range header. */
struct ask {
    unsigned char *const *bufs;
    size_t len;
    uint64_t first;
    bool at_open;
    char range[80];
};

/* One request of a fetch, to url, in at most left ms: its answer in r,
 * judged; *version names the credentials it was signed with. */
static enum outcome ask_once(struct http *h, CURL *easy, struct response *r, const struct ask *a,
                             const char *url, long left, unsigned *version, char *why,
                             size_t whylen)
{
    struct curl_slist *list;

    memset(r, 0, sizeof(*r));
    r->easy = easy;
    r->bufs = a->bufs;
    r->cap = a->len;
    if (prepare(h, easy, url, a->range, &list, version) < 0)
        return OUT_NOMEM;
    enum outcome o = OUT_NOMEM;
    if (curl_easy_setopt(easy, CURLOPT_HEADERDATA, r) == CURLE_OK &&
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, r) == CURLE_OK &&
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, left) == CURLE_OK &&
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, r->errbuf) == CURLE_OK)
        o = judge(h, r, curl_easy_perform(easy), a->at_open, a->first, a->len, why, whylen);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(list);
    return o;
}

/* Takes r's redirect as the next target, at most MAX_HOPS of them:
 * OUT_REDIRECT to go on, or why not. */
static enum outcome redirect(const struct response *r, char **target, int *hops, char *why,
                             size_t whylen)
{
    free(*target);
    *target = NULL;
    if (++*hops > MAX_HOPS) {
        snprintf(why, whylen, "more than %d redirects", MAX_HOPS);
        return OUT_FAIL;
    }
    if (!(*target = strdup(r->location))) {
        snprintf(why, whylen, "out of memory");
        return OUT_NOMEM;
    }
    return OUT_REDIRECT;
}

/* Asks for len bytes at first into bufs (at open, range is "-len", a suffix),
 * tried up to TRIES times while failures look passing, following redirects
 * and, once, retrying a refusal with credentials read again. */
static enum outcome fetch(struct http *h, CURL *easy, struct response *r,
                          unsigned char *const *bufs, size_t len, uint64_t first, bool at_open,
                          char *why, size_t whylen)
{
    struct ask a = {.bufs = bufs, .len = len, .first = first, .at_open = at_open};
    enum outcome o = OUT_FAIL;
    char *target = NULL; /* a redirect's, else the source's URL */
    bool renewed = false;
    int hops = 0;
    struct timespec start;

    if (at_open)
        snprintf(a.range, sizeof(a.range), "Range: bytes=-%zu", len);
    else
        snprintf(a.range, sizeof(a.range), "Range: bytes=%llu-%llu", (unsigned long long)first,
                 (unsigned long long)(first + len - 1));
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int attempt = 0; attempt < TRIES;) {
        unsigned version;
        long left = deadline_ms(h) - ms_since(&start);
        if (tbm_source_stopping()) {
            snprintf(why, whylen, "given up: tbmfs is stopping");
            o = OUT_STOPPED;
            break;
        }
        if (left <= 0) {
            snprintf(why, whylen, "no whole answer within %ld s", deadline_ms(h) / 1000);
            o = OUT_TIMEOUT;
            break;
        }
        o = ask_once(h, easy, r, &a, target ? target : h->url, left, &version, why, whylen);
        if (o == OUT_REDIRECT && (o = redirect(r, &target, &hops, why, whylen)) == OUT_REDIRECT)
            continue;
        if (o == OUT_DENIED && !renewed && h->scheme->refresh &&
            h->scheme->refresh(h->state, version)) {
            renewed = true;
            continue;
        }
        if (o != OUT_RETRY || ++attempt == TRIES)
            break;
        if (!tbm_source_stopping() && ms_since(&start) + 1000 < deadline_ms(h))
            back_off(attempt);
    }
    free(target);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(easy, CURLOPT_URL, h->url);
    if (o == OUT_RETRY && tbm_source_stopping()) {
        snprintf(why, whylen, "given up: tbmfs is stopping");
        o = OUT_STOPPED;
    } else if (o == OUT_RETRY) {
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

/* One line for a refusal, not one per block: again only once a request
 * succeeded or the store says something else. */
static void log_denied(struct http *h, const struct response *r)
{
    char what[sizeof(h->denied_logged)];

    snprintf(what, sizeof(what), "%ld %s", r->status, r->code);
    pthread_mutex_lock(&h->lock);
    bool fresh = strcmp(what, h->denied_logged) != 0;
    if (fresh)
        snprintf(h->denied_logged, sizeof(h->denied_logged), "%s", what);
    pthread_mutex_unlock(&h->lock);
    if (fresh)
        tbm_log(TBM_LOG_ERROR, "access denied by %s (%ld): %s", h->src.name, r->status,
                r->code[0] ? r->code : "no error code");
}

static int fetch_block(void *ctx, void *worker, uint64_t off, unsigned char *const *bufs,
                       size_t len)
{
    struct http *h = ctx;
    struct response r;
    char why[512];

    if (has_changed(h))
        return TBM_ERR_IO;
    enum outcome o = fetch(h, worker, &r, bufs, len, off, false, why, sizeof(why));

    switch (o) {
    case OUT_OK:
        pthread_mutex_lock(&h->lock);
        h->denied_logged[0] = '\0';
        pthread_mutex_unlock(&h->lock);
        return 0;
    case OUT_NOMEM:
        return TBM_ERR_NOMEM;
    case OUT_CHANGED:
        mark_changed(h, why);
        return TBM_ERR_IO;
    case OUT_DENIED:
        log_denied(h, &r);
        return TBM_ERR_DENIED;
    case OUT_STOPPED:
        return TBM_ERR_STOPPED;
    default:
        /* "timed out" as the cache says it when a reader's wait runs out first */
        tbm_log(TBM_LOG_ERROR, "%s: bytes %llu-%llu: %s: %s", h->src.name,
                (unsigned long long)off, (unsigned long long)(off + len - 1),
                o == OUT_TIMEOUT ? "the transfer timed out" : "transfer failed", why);
        /* not a change: what it stopped is tried again */
        return TBM_ERR_TRANSFER;
    }
}

static void http_prefetch(struct tbm_source *src, uint64_t off, size_t len)
{
    struct http *h = (struct http *)src;

    /* The tail is here already. */
    if (off >= h->tail_off || len == 0)
        return;
    if (len > h->tail_off - off)
        len = (size_t)(h->tail_off - off);
    tbm_hints_add(h->hints, off, len);
}

/* A hinted range's request. One refused, redirected or failed is read
 * later through the cache, which retries and follows. */
struct hint_request {
    struct response r;
    struct curl_slist *list;
    uint64_t off;
    size_t len;
};

static CURL *hint_easy(void *ctx)
{
    return easy_new(ctx);
}

static int hint_start(void *ctx, CURL *easy, uint64_t off, size_t len, void *buf, void **out)
{
    struct http *h = ctx;
    struct hint_request *q = calloc(1, sizeof(*q));
    char header[80];
    unsigned version;

    *out = q;
    if (!q)
        return TBM_ERR_NOMEM;
    snprintf(header, sizeof(header), "Range: bytes=%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    *q = (struct hint_request){.r = {.easy = easy, .one = buf, .cap = len}, .off = off, .len = len};
    if (prepare(h, easy, h->url, header, &q->list, &version) < 0)
        goto fail;
    if (curl_easy_setopt(easy, CURLOPT_HEADERDATA, &q->r) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, &q->r) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, q->r.errbuf) != CURLE_OK) {
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(q->list);
        goto fail;
    }
    return 0;
fail:
    free(q);
    *out = NULL;
    return TBM_ERR_NOMEM;
}

static bool hint_end(void *ctx, void *req, CURLcode code)
{
    struct http *h = ctx;
    struct hint_request *q = req;
    char why[512];

    curl_easy_setopt(q->r.easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(q->r.easy, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(q->list);
    enum outcome o = judge(h, &q->r, code, false, q->off, q->len, why, sizeof(why));
    if (o == OUT_CHANGED)
        mark_changed(h, why);
    free(q);
    return o == OUT_OK;
}

/* The tail, the hinted ranges and the cache each serve their part. */
static int http_read(struct tbm_source *src, void *buf, size_t len, uint64_t off, unsigned mode,
                     size_t *got)
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
        if ((n = tbm_hints_read(h->hints, dst, want, pos, &next)) > 0) {
            done += n;
            continue;
        }
        uint64_t stop = next < h->tail_off ? next : h->tail_off;
        size_t part = stop - pos < want ? (size_t)(stop - pos) : want;
        int r = tbm_cache_read(h->cache, dst, part, pos, mode, &n);
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

/* Only the cache's blocks are held: the tail and the hinted ranges are
 * headers and the index, copied (and the hinted ranges fetched are
 * replaced by the next fetch of hints). */
static int http_hold(struct tbm_source *src, uint64_t off, size_t len, unsigned mode,
                     struct tbm_source_piece *pieces, size_t max, size_t *n)
{
    struct http *h = (struct http *)src;

    *n = 0;
    if (has_changed(h))
        return TBM_ERR_IO;
    if (off + len > h->tail_off || tbm_hints_cover(h->hints, off, len))
        return 0;
    int r = tbm_cache_hold(h->cache, off, len, mode, pieces, max, n);
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
    tbm_hints_free(h->hints);
    curl_slist_free_all(h->headers);
    if (h->scheme && h->scheme->close)
        h->scheme->close(h->state);
    pthread_mutex_destroy(&h->lock);
    free(h->tail);
    free(h->src.name);
    free(h->url);
    free(h->ca_file);
    tbm_named_free(&h->ca);
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

/* Where the scheme of url has its bytes, and what it keeps for the
 * requests. */
static int open_scheme(struct http *h, const char *url, const struct tbm_remote_options *opts,
                       char *why, size_t whylen)
{
    struct tbm_scheme_target t = {0};
    int r;

    if (!(h->scheme = tbm_scheme_of(url))) {
        snprintf(why, whylen, "not a URL tbmfs reads");
        return TBM_ERR_SOURCE;
    }
    if (h->scheme->open)
        r = h->scheme->open(url, tbm_scheme_options(opts, h->scheme), &t, why, whylen);
    else
        r = (t.url = strdup(url)) ? 0 : TBM_ERR_NOMEM;
    h->url = t.url;
    h->state = t.state;
    if (!h->ca_file) {
        h->ca_file = t.ca_file;
        t.ca_file = NULL;
    }
    free(t.ca_file);
    return r;
}

/* The CA bundle, read as every file named by the user is (base/named.h):
 * a FIFO or a device in its place fails the open at once. */
static int read_ca(struct http *h, char *why, size_t whylen)
{
    if (!h->ca_file)
        return 0;
    int r = tbm_named_read(AT_FDCWD, h->ca_file, h->ca_file, CA_MAX, &h->ca, why, whylen);
    if (r == 1)
        r = TBM_ERR_SOURCE; /* why says so */
    if (r == TBM_ERR_NOMEM)
        snprintf(why, whylen, "out of memory");
    h->blob = (struct curl_blob){.data = h->ca.bytes, .len = h->ca.len, .flags = CURL_BLOB_NOCOPY};
    return r;
}

/* The tail of the first answer, and the file as it was then: its length,
 * validator and mtime (the server's Last-Modified, else now). */
static void take_tail(struct http *h, const struct response *r)
{
    h->mount = r->head.v;
    h->latest = r->head.v;
    h->tail_off = r->head.first;
    h->tail_len = r->got;
    h->src.id.size = r->head.v.size;
    snprintf(h->src.id.tag, sizeof(h->src.id.tag), "%s",
             r->head.v.etag[0] ? r->head.v.etag : r->head.v.last_modified);
    time_t lm = r->head.v.last_modified[0] ? curl_getdate(r->head.v.last_modified, NULL) : -1;
    h->src.id.mtime.tv_sec = lm >= 0 ? lm : time(NULL);
}

/* The cache of the blocks, and the hinted ranges: both fetch through h. */
static int make_stores(struct http *h, const struct tbm_http_options *t)
{
    uint64_t cache_size = t->cache_size ? t->cache_size : TBM_HTTP_CACHE_DEFAULT;
    uint64_t ahead = t->readahead / TBM_CACHE_BLOCK, request = t->request_size / TBM_CACHE_BLOCK;

    /* a reader may wait behind another's transfer: as long as its own */
    struct tbm_cache_fetcher f = {.ctx = h,
                                  .worker_new = worker_new,
                                  .worker_free = worker_free,
                                  .fetch = fetch_block,
                                  .wait_limit = (unsigned)(deadline_ms(h) / 1000),
                                  .fail_memory_ms = TBM_HTTP_FAIL_MEMORY_MS,
                                  .name = h->src.name,
                                  .ahead_max = ahead > UINT_MAX ? UINT_MAX : (unsigned)ahead,
                                  .request_max = request ? (unsigned)request : 1};
    struct tbm_hints_fetcher hf = {
        .ctx = h, .easy_new = hint_easy, .start = hint_start, .end = hint_end};

    if (tbm_cache_new(&f, h->src.id.size, cache_size,
                      t->connections ? t->connections : TBM_HTTP_CONNECTIONS, &h->cache) < 0 ||
        tbm_hints_new(&hf, &h->hints) < 0)
        return TBM_ERR_NOMEM;
    return 0;
}

int tbm_source_open_url(const char *url, const struct tbm_remote_options *opts,
                        struct tbm_source **out, char *why, size_t whylen)
{
    const struct tbm_http_options *t = tbm_http_options_of(opts);
    struct response r;
    CURL *easy = NULL;
    int status = TBM_ERR_NOMEM;

    *out = NULL;
    snprintf(why, whylen, "out of memory");
    pthread_once(&curl_once, curl_init);
    if (curl_init_status != CURLE_OK) {
        snprintf(why, whylen, "libcurl: %s", curl_easy_strerror(curl_init_status));
        return TBM_ERR_SOURCE;
    }
    struct http *h = calloc(1, sizeof(*h));
    if (!h)
        return TBM_ERR_NOMEM;
    pthread_mutex_init(&h->lock, NULL);
    h->src.ops = &http_ops;
    h->src.fd = -1; /* nothing to splice from: views read into a buffer */
    h->timeout = t->timeout ? (long)t->timeout : (long)TBM_HTTP_TIMEOUT;
    if (!(h->src.name = tbm_source_url_display(url)) || !(h->tail = malloc(TAIL_SIZE)) ||
        (t->ca_file && !(h->ca_file = strdup(t->ca_file))))
        goto fail;
    if ((status = open_scheme(h, url, opts, why, whylen)) < 0 ||
        (status = read_ca(h, why, whylen)) < 0 ||
        (status = tbm_http_headers(t, &h->headers, why, whylen)) < 0)
        goto fail;
    status = TBM_ERR_NOMEM;
    if (!(easy = easy_new(h)))
        goto fail;
    unsigned char *tail[1] = {h->tail};
    switch (fetch(h, easy, &r, tail, TAIL_SIZE, 0, true, why, whylen)) {
    case OUT_OK:
        break;
    case OUT_NOMEM:
        snprintf(why, whylen, "out of memory");
        goto fail;
    default:
        status = TBM_ERR_SOURCE;
        goto fail;
    }
    take_tail(h, &r);
    if (make_stores(h, t) < 0) {
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
