/* The schemes of remote sources (not installed): one row per scheme says
 * what differs between them (its prefix, where a URL's bytes are, what
 * signs a request, how it is shown, how credentials are read again); the
 * HTTP source (http.c) does the rest, the same for every row. A scheme is
 * one file with its row, and the row's line in the table (schemes.c). */
#ifndef TBM_SOURCE_SCHEME_H
#define TBM_SOURCE_SCHEME_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

#include "tbm/source.h"

/* What a scheme's open gives the transport. */
struct tbm_scheme_target {
    char *url;     /* the http(s) URL requested, malloc'ed */
    char *ca_file; /* CAs to trust unless -o ca_file says, malloc'ed, or NULL */
    void *state;   /* the scheme's, for sign, refresh and close */
};

struct tbm_scheme {
    /* Its URLs begin with one of these (any case). */
    const char *prefix[2];
    /* Where name's bytes are, and what the source keeps for its requests:
     * 0, TBM_ERR_NOMEM, or TBM_ERR_SOURCE with the reason in why (no
     * secret). NULL: name is the http(s) URL requested. */
    int (*open)(const char *name, const struct tbm_http_options *opts,
                struct tbm_scheme_target *out, char *why, size_t whylen);
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

/* Whether url is an http:// or https:// URL, which is requested as it is. */
bool tbm_scheme_is_http(const char *url);

/* How many times tbm_source_credentials_reload was called: a source that
 * saw another count reads its credentials again before its next request. */
unsigned tbm_scheme_reloads(void);

/* Appends one header line to *list; false when out of memory. */
bool tbm_header_add(struct curl_slist **list, const char *line);

#endif
