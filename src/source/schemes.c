/* The table of remote schemes, and what reads it: whether a name is a URL,
 * how a URL is shown and hidden, and the http(s) row, whose URLs are
 * requested as they are. */
#include "scheme.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where the secrets of a URL ride, as offsets in it: its user information
 * from user to the '@' before host (host == user when there is none), and
 * its query and fragment from query (the end when there are none). */
struct secrets {
    size_t user, host, query;
};

static bool find_secrets(const char *url, struct secrets *out)
{
    const char *scheme = strstr(url, "://");

    if (!scheme)
        return false;
    const char *start = scheme + 3;
    const char *at = memrchr(start, '@', strcspn(start, "/?#"));
    out->user = (size_t)(start - url);
    out->host = at ? (size_t)(at + 1 - url) : out->user;
    out->query = out->user + strcspn(start, "?#");
    return true;
}

/* Without user information, and with the query and fragment as "?…". */
static char *http_display(const char *url)
{
    struct secrets s;

    if (!find_secrets(url, &s))
        return strdup(url);
    bool query = url[s.query] != '\0';
    char *out = malloc(s.user + s.query - s.host + sizeof("?\u2026"));
    if (out)
        sprintf(out, "%.*s%.*s%s", (int)s.user, url, (int)(s.query - s.host), url + s.host,
                query ? "?\u2026" : "");
    return out;
}

static const struct tbm_scheme http = {
    .prefix = {"http://", "https://"},
    .form = "http://HOST/PATH, https://HOST/PATH",
    .help = "on a web server",
    .display = http_display,
};

/* Every scheme's row lives in its own file. */
extern const struct tbm_scheme tbm_scheme_s3;

static const struct tbm_scheme *const schemes[] = {&http, &tbm_scheme_s3};

#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

const struct tbm_scheme *tbm_scheme_at(size_t i)
{
    return i < NSCHEMES ? schemes[i] : NULL;
}

const struct tbm_scheme *tbm_scheme_of(const char *name)
{
    for (size_t i = 0; i < NSCHEMES; i++)
        for (size_t k = 0; k < 2 && schemes[i]->prefix[k]; k++)
            if (strncasecmp(name, schemes[i]->prefix[k], strlen(schemes[i]->prefix[k])) == 0)
                return schemes[i];
    return NULL;
}

bool tbm_scheme_is_http(const char *url)
{
    return tbm_scheme_of(url) == &http;
}

bool tbm_source_scheme_help(size_t i, const char **form, const char **help)
{
    if (i >= NSCHEMES)
        return false;
    *form = schemes[i]->form;
    *help = schemes[i]->help;
    return true;
}

bool tbm_source_is_url(const char *name)
{
    return tbm_scheme_of(name) != NULL;
}

char *tbm_source_url_display(const char *name)
{
    const struct tbm_scheme *s = tbm_scheme_of(name);

    return s ? s->display(name) : strdup(name);
}

void tbm_scheme_url_hide(char *arg)
{
    struct secrets s;

    /* Every scheme alike: in ps, even an s3:// key's '?' part is masked,
     * over-cautious rather than ever a leak. */
    if (!tbm_scheme_of(arg) || !find_secrets(arg, &s))
        return;
    if (s.host > s.user)
        memset(arg + s.user, '*', s.host - 1 - s.user);
    if (arg[s.query])
        memset(arg + s.query + 1, '*', strlen(arg + s.query + 1));
}

static atomic_uint reloads;

void tbm_source_credentials_reload(void)
{
    atomic_fetch_add(&reloads, 1);
}

unsigned tbm_scheme_reloads(void)
{
    return atomic_load(&reloads);
}

bool tbm_header_add(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);

    if (l)
        *list = l;
    return l != NULL;
}
