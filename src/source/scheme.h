/* The schemes of remote sources (not installed): one row per scheme says
 * what differs between them (its prefix, where a URL's bytes are, what
 * signs a request, how it is shown, how credentials are read again, its
 * options); the HTTP source (http.c) does the rest, the same for every row.
 * A scheme is one file with its row, and the row's line in the table
 * (schemes.c). */
#ifndef TBM_SOURCE_SCHEME_H
#define TBM_SOURCE_SCHEME_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbm/source.h"

/* How the transport reads, whatever the scheme: the options every remote
 * source shares. */
struct tbm_http_options {
    uint64_t cache_size;  /* bytes; at least 2 blocks (TBM_HTTP_CACHE_MIN) */
    const char **headers; /* "Name: value", sent with every request to the source */
    size_t nheaders;
    const char *header_file; /* more of them, one a line, or NULL */
    unsigned timeout;        /* seconds of stall (and of connecting) before a try fails */
    const char *ca_file;     /* PEM CAs in place of the system's, or NULL */
    unsigned connections;    /* transfer threads, each a connection, at once */
    uint64_t readahead;      /* bytes: a sequential reader's widest read-ahead window */
    uint64_t request_size;   /* bytes: a read-ahead request's largest */
};

#define TBM_HTTP_CACHE_DEFAULT (256ull << 20)
#define TBM_HTTP_CACHE_MIN     (2ull << 20)
#define TBM_HTTP_TIMEOUT       30u
/* A cloud store gives one connection some 25 MB/s at a 20 ms round trip:
 * 24 connections (21 of them reading ahead), each asking for up to 8 MiB
 * at a time (a request's own round trip is then 5% of it), keep a far link
 * full, with a window of up to 256 MiB (at most three quarters of the
 * cache) in flight ahead of a sequential reader; with 16, a link capped per
 * connection ran at 0.7x aria2c -x16. */
#define TBM_HTTP_CONNECTIONS  24u
#define TBM_HTTP_READAHEAD    (256ull << 20)
#define TBM_HTTP_REQUEST_SIZE (8ull << 20)
/* A read waits for a transfer at most this many times the stall timeout
 * (90 s by default; at least the timeout and 10 s) in all, whatever the
 * server sends. */
#define TBM_HTTP_DEADLINE_TIMEOUTS 3u
/* A block whose transfer failed or timed out fails every read at once for
 * this long: the kernel asks a failed read-ahead again page by page, at
 * once, and none of those may wait another deadline. Short, so that a read
 * a few seconds later tries the server again. */
#define TBM_HTTP_FAIL_MEMORY_MS 3000u

/* An option of the transport's or of a scheme's: how --help shows it, and
 * how it is set in its owner's struct of options. */
struct tbm_option_row {
    struct tbm_remote_option shown;
    /* Takes value (a copy the options keep while they live) into opts:
     * 0, or -1 with the reason in *why. NULL: value is a string kept, as
     * it is, in the const char * at offset field of opts, and refused with
     * the reason empty when it is "". */
    int (*set)(void *opts, const char *value, const char **why);
    size_t field;
    const char *empty;
    /* what follows the first ':' of its value (a header's value) is
     * hidden in the command line that ps shows */
    bool secret;
};

/* What a scheme's open gives the transport. */
struct tbm_scheme_target {
    char *url;     /* the http(s) URL requested, malloc'ed */
    char *ca_file; /* CAs to trust unless -o ca_file says, malloc'ed, or NULL */
    void *state;   /* the scheme's, for sign, refresh and close */
};

struct tbm_scheme {
    /* Its URLs begin with one of these (any case). */
    const char *prefix[2];
    /* For --help: the form of its URLs, and what they name. */
    const char *form, *help;
    /* Its options (-o NAME=VALUE), set in a struct of options_size bytes,
     * zeroed at first, which open is given. */
    const struct tbm_option_row *options;
    size_t noptions, options_size;
    /* Where name's bytes are, and what the source keeps for its requests,
     * given the scheme's options: 0, TBM_ERR_NOMEM, or TBM_ERR_SOURCE with
     * the reason in why (no secret). NULL: name is the http(s) URL
     * requested. */
    int (*open)(const char *name, const void *options, struct tbm_scheme_target *out, char *why,
                size_t whylen);
    /* Makes a request to the source's own origin carry what proves who
     * asks (a signature, headers added to *headers); *version names the
     * credentials used. 0 or TBM_ERR_NOMEM. NULL: requests go as they are.
     * A scheme that signs has a request elsewhere (after a redirect) go
     * with no credentials at all. */
    int (*sign)(void *state, CURL *easy, struct curl_slist **headers, unsigned *version);
    /* Whether an answer (its status, and the store's error code or "")
     * refuses the credentials. NULL: none does. */
    bool (*refused)(long status, const char *code);
    /* After a refusal of the credentials of version: reads them again;
     * whether others were found, so that the request is tried once more. */
    bool (*refresh)(void *state, unsigned version);
    void (*close)(void *state);
    /* name as it may be shown, malloc'ed (NULL when out of memory). */
    char *(*display)(const char *name);
};

/* The row of name's scheme, or NULL when name is no URL of a remote
 * scheme: the one place that tells. */
const struct tbm_scheme *tbm_scheme_of(const char *name);

/* The i-th row of the table, NULL past the last. */
const struct tbm_scheme *tbm_scheme_at(size_t i);

/* The options of the transport in o (the defaults when o is NULL), and
 * those of scheme s (NULL when o is NULL or s has none: every one unset,
 * which a row's open takes as such). */
const struct tbm_http_options *tbm_http_options_of(const struct tbm_remote_options *o);
const void *tbm_scheme_options(const struct tbm_remote_options *o, const struct tbm_scheme *s);

/* The header lines of the options, sent with every request to the
 * source's origin: -o http_header's, then those of -o http_header_file,
 * appended to *list. 0, TBM_ERR_NOMEM, or TBM_ERR_SOURCE with the reason
 * in why (which quotes no line: it may be a secret). */
int tbm_http_headers(const struct tbm_http_options *o, struct curl_slist **list, char *why,
                     size_t whylen);

/* Whether url is an http:// or https:// URL, which is requested as it is. */
bool tbm_scheme_is_http(const char *url);

/* Overwrites with '*', in place, the user information and what follows
 * '?' or '#' of arg when it is the URL of a remote scheme. */
void tbm_scheme_url_hide(char *arg);

/* How many times tbm_source_credentials_reload was called: a source that
 * saw another count reads its credentials again before its next request. */
unsigned tbm_scheme_reloads(void);

/* Appends one header line to *list; false when out of memory. */
bool tbm_header_add(struct curl_slist **list, const char *line);

#endif
