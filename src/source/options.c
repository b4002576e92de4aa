/* The options of remote sources: the transport's table (block cache,
 * headers, stall timeout, CAs) and each scheme's, set by name as -o gives
 * them into the struct of their owner, and what the command line must not
 * show of them. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/named.h"
#include "scheme.h"
#include "tbm/log.h"

/* A header file is a few lines; each as long as a line was before it was
 * read whole (fgets' 8 KiB). */
#define HEADER_FILE_MAX ((size_t)1 << 20)
#define HEADER_LINE_MAX 8191

struct tbm_remote_options {
    struct tbm_http_options http;
    void **scheme; /* each row's options, by its place in the table */
    char **kept;   /* the copies of the values set */
    size_t nschemes, nkept;
};

static const struct tbm_http_options defaults = {.cache_size = TBM_HTTP_CACHE_DEFAULT,
                                                 .timeout = TBM_HTTP_TIMEOUT,
                                                 .connections = TBM_HTTP_CONNECTIONS,
                                                 .readahead = TBM_HTTP_READAHEAD,
                                                 .request_size = TBM_HTTP_REQUEST_SIZE};

/* A number of bytes with an optional K, M or G (powers of 1024), from min
 * to max. */
static int parse_bytes(const char *value, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;

    if (*value < '0' || *value > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (errno || *end || v > (UINT64_MAX >> shift) || (v << shift) < min || (v << shift) > max)
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int set_cache_size(void *opts, const char *value, const char **why)
{
    *why = "must be a number of bytes (K, M, G allowed), at least 2M";
    return parse_bytes(value, TBM_HTTP_CACHE_MIN, UINT64_MAX,
                       &((struct tbm_http_options *)opts)->cache_size);
}

static int set_readahead(void *opts, const char *value, const char **why)
{
    *why = "must be a number of bytes (K, M, G allowed), 0 for none";
    return parse_bytes(value, 0, UINT64_MAX, &((struct tbm_http_options *)opts)->readahead);
}

static int set_request_size(void *opts, const char *value, const char **why)
{
    *why = "must be a number of bytes (K, M allowed) from 1M to 64M";
    return parse_bytes(value, 1u << 20, 64u << 20,
                       &((struct tbm_http_options *)opts)->request_size);
}

/* A whole number from min to max, in decimal, nothing after it. */
static int parse_count(const char *value, unsigned min, unsigned max, unsigned *out)
{
    char *end;

    if (*value < '0' || *value > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(value, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int set_connections(void *opts, const char *value, const char **why)
{
    *why = "must be 1 to 64 connections";
    return parse_count(value, 1, 64, &((struct tbm_http_options *)opts)->connections);
}

/* One header line, kept for every request. */
static int set_http_header(void *opts, const char *value, const char **why)
{
    struct tbm_http_options *o = opts;
    const char *colon = strchr(value, ':');

    *why = "must be one header line, \"Name: value\"";
    if (!colon || colon == value || strpbrk(value, "\r\n"))
        return -1;
    const char **more = realloc(o->headers, (o->nheaders + 1) * sizeof(*more));
    *why = "out of memory";
    if (!more)
        return -1;
    o->headers = more;
    o->headers[o->nheaders++] = value;
    return 0;
}

static int set_http_timeout(void *opts, const char *value, const char **why)
{
    *why = "must be 1 to 3600 seconds";
    return parse_count(value, 1, 3600, &((struct tbm_http_options *)opts)->timeout);
}

/* The transport's options, in the order --help lists them; every scheme's
 * follow. */
static const struct tbm_option_row transport[] = {
    {.shown = {"cache_size", "BYTES",
               "HTTP(S) SOURCE: block cache size (default 256M; K, M, G allowed; at least\n"
               "2M)"},
     .set = set_cache_size},
    {.shown = {"readahead", "BYTES",
               "HTTP(S) SOURCE: a sequential reader's widest read-ahead window; it starts\n"
               "at 2M and doubles with every 1M read on (default 256M, at most three\n"
               "quarters of cache_size; 0: none)"},
     .set = set_readahead},
    {.shown = {"http_request_size", "BYTES",
               "HTTP(S) SOURCE: the largest request of a read-ahead (default 8M; 1M to\n"
               "64M); a reader's own block is asked for alone (1M)"},
     .set = set_request_size},
    {.shown = {"http_connections", "N",
               "HTTP(S) SOURCE: requests (and kept-alive connections) at once (default\n"
               "24; 1 to 64); read-ahead leaves an eighth of them (at least one) to\n"
               "readers' own blocks"},
     .set = set_connections},
    {.shown = {"http_header", "\"Name: value\"",
               "HTTP(S) SOURCE: a header sent with every request to SOURCE's own scheme,\n"
               "host and port (repeatable; a comma in the value is written \\,)"},
     .set = set_http_header,
     .secret = true},
    {.shown = {"http_header_file", "PATH",
               "the same, one \"Name: value\" a line read from PATH (a token stays out of\n"
               "ps)"},
     .field = offsetof(struct tbm_http_options, header_file),
     .empty = "must name a file"},
    {.shown = {"ca_file", "PATH",
               "HTTPS or S3 SOURCE: trust the CAs of this PEM file in place of the\n"
               "system's (S3: else AWS_CA_BUNDLE)"},
     .field = offsetof(struct tbm_http_options, ca_file),
     .empty = "must name a PEM file"},
    /* not documented: lets the tests stall a transfer for seconds, not 30 */
    {.shown = {"http_timeout", "SECONDS", NULL}, .set = set_http_timeout},
};

#define NTRANSPORT (sizeof(transport) / sizeof(transport[0]))

/* The row of the i-th option, and in *scheme the place of its scheme in
 * the table (SIZE_MAX: the transport's). */
static const struct tbm_option_row *row_at(size_t i, size_t *scheme)
{
    const struct tbm_scheme *s;

    *scheme = SIZE_MAX;
    if (i < NTRANSPORT)
        return &transport[i];
    i -= NTRANSPORT;
    for (size_t k = 0; (s = tbm_scheme_at(k)); k++) {
        if (i < s->noptions) {
            *scheme = k;
            return &s->options[i];
        }
        i -= s->noptions;
    }
    return NULL;
}

const struct tbm_remote_option *tbm_remote_option(size_t i)
{
    size_t scheme;
    const struct tbm_option_row *row = row_at(i, &scheme);

    return row ? &row->shown : NULL;
}

struct tbm_remote_options *tbm_remote_options_new(void)
{
    struct tbm_remote_options *o = calloc(1, sizeof(*o));
    const struct tbm_scheme *s;

    if (!o)
        return NULL;
    o->http = defaults;
    while (tbm_scheme_at(o->nschemes))
        o->nschemes++;
    if (!(o->scheme = calloc(o->nschemes, sizeof(*o->scheme))))
        goto fail;
    for (size_t k = 0; (s = tbm_scheme_at(k)); k++)
        if (s->options_size && !(o->scheme[k] = calloc(1, s->options_size)))
            goto fail;
    return o;
fail:
    tbm_remote_options_free(o);
    return NULL;
}

int tbm_remote_options_set(struct tbm_remote_options *o, size_t i, const char *value,
                           const char **why)
{
    size_t scheme;
    const struct tbm_option_row *row = row_at(i, &scheme);
    char **more = realloc(o->kept, (o->nkept + 1) * sizeof(*more));

    *why = "out of memory";
    if (!more)
        return -1;
    o->kept = more;
    if (!(o->kept[o->nkept] = strdup(value ? value : "")))
        return -1;
    value = o->kept[o->nkept++];
    void *owner = scheme == SIZE_MAX ? (void *)&o->http : o->scheme[scheme];
    if (row->set)
        return row->set(owner, value, why);
    *why = row->empty;
    if (!*value)
        return -1;
    *(const char **)((char *)owner + row->field) = value;
    return 0;
}

void tbm_remote_options_free(struct tbm_remote_options *o)
{
    if (!o)
        return;
    for (size_t k = 0; o->scheme && k < o->nschemes; k++)
        free(o->scheme[k]);
    free(o->scheme);
    for (size_t i = 0; i < o->nkept; i++)
        free(o->kept[i]);
    free(o->kept);
    free(o->http.headers);
    free(o);
}

const struct tbm_http_options *tbm_http_options_of(const struct tbm_remote_options *o)
{
    return o ? &o->http : &defaults;
}

const void *tbm_scheme_options(const struct tbm_remote_options *o, const struct tbm_scheme *s)
{
    for (size_t k = 0; o && k < o->nschemes; k++)
        if (tbm_scheme_at(k) == s)
            return o->scheme[k];
    return NULL;
}

/* One line of the header file, the n-th; lines that are blank or begin
 * with '#' are skipped. */
static int header_line(const char *path, unsigned n, char *line, struct curl_slist **list,
                       char *why, size_t whylen)
{
    size_t len = strlen(line);
    bool control = false;

    while (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    if (len == 0 || line[0] == '#')
        return 0;
    for (size_t i = 0; i < len; i++)
        control |= (unsigned char)line[i] < 0x20 && line[i] != '\t';
    const char *colon = strchr(line, ':');
    if (!colon || colon == line || control || len >= HEADER_LINE_MAX) {
        snprintf(why, whylen, "%s: line %u: not one header line \"Name: value\"", path, n);
        return TBM_ERR_SOURCE;
    }
    if (!tbm_header_add(list, line)) {
        snprintf(why, whylen, "out of memory");
        return TBM_ERR_NOMEM;
    }
    return 0;
}

/* -o http_header_file: "Name: value" a line, read as every file named by
 * the user is (base/named.h). A line is never quoted: it may be a secret;
 * for the same reason a file others may read is warned of. */
static int read_header_file(const char *path, struct curl_slist **list, char *why, size_t whylen)
{
    struct tbm_named f;
    int status = tbm_named_read(AT_FDCWD, path, path, HEADER_FILE_MAX, &f, why, whylen);
    unsigned n = 0;

    if (status == 1)
        status = TBM_ERR_SOURCE; /* why says so */
    if (status == TBM_ERR_NOMEM)
        snprintf(why, whylen, "out of memory");
    if (status < 0)
        return status;
    if (f.st.st_mode & (S_IRGRP | S_IROTH))
        tbm_log(TBM_LOG_WARNING, "%s: readable by %s: a header file holds secrets, chmod 600 it",
                path, f.st.st_mode & S_IROTH ? "every user" : "its group");
    /* the bytes end in a NUL: line by line in place */
    for (char *line = f.bytes, *next; status == 0 && line < f.bytes + f.len; line = next) {
        char *nl = memchr(line, '\n', (size_t)(f.bytes + f.len - line));
        next = nl ? nl + 1 : f.bytes + f.len;
        if (nl)
            *nl = '\0';
        status = header_line(path, ++n, line, list, why, whylen);
    }
    tbm_named_free(&f);
    return status;
}

int tbm_http_headers(const struct tbm_http_options *o, struct curl_slist **list, char *why,
                     size_t whylen)
{
    for (size_t i = 0; i < o->nheaders; i++)
        if (!tbm_header_add(list, o->headers[i])) {
            snprintf(why, whylen, "out of memory");
            return TBM_ERR_NOMEM;
        }
    return o->header_file ? read_header_file(o->header_file, list, why, whylen) : 0;
}

void tbm_source_hide_secrets(char *arg)
{
    const struct tbm_option_row *row;
    char name[64];
    size_t scheme;

    for (size_t i = 0; (row = row_at(i, &scheme)); i++) {
        if (!row->secret)
            continue;
        snprintf(name, sizeof(name), "%s=", row->shown.name);
        /* a header's value: a token, most often; hidden to the end of the
         * argument, options after it too */
        char *p = strstr(arg, name);
        if (p && (p = strchr(p, ':')))
            memset(p + 1, '*', strlen(p + 1));
    }
    /* an option's value that is a URL (s3_endpoint=http://user:pw@host):
     * its user information, as a source URL's */
    for (char *eq = strchr(arg, '='); eq; eq = strchr(eq + 1, '=')) {
        char *start = !strncasecmp(eq + 1, "http://", 7)    ? eq + 8
                      : !strncasecmp(eq + 1, "https://", 8) ? eq + 9
                                                            : NULL;
        char *at = start ? memrchr(start, '@', strcspn(start, "/?#,")) : NULL;
        if (at)
            memset(start, '*', (size_t)(at - start));
    }
    tbm_scheme_url_hide(arg);
}
