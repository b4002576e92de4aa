/* The s3:// row of the table of schemes: where an object is (the endpoint,
 * a store's own addressed path-style or AWS's virtual-hosted one, the
 * region its requests are signed for, the key percent-encoded as SigV4's
 * canonical URI has it), its requests signed by libcurl (SigV4) with the
 * credentials of credentials.c, read again when a store refuses them or on
 * SIGHUP. */
#include "s3.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "scheme.h"
#include "tbm/log.h"

#define S3_SCHEME "s3://"
/* For every GET, signed or not: its body is empty. libcurl signs the value
 * given here as the payload's hash. */
#define S3_PAYLOAD "x-amz-content-sha256: UNSIGNED-PAYLOAD"

static const char *env_first(const char *a, const char *b)
{
    const char *v = getenv(a);

    if (v && *v)
        return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : NULL;
}

/* RFC 3986's unreserved characters, which SigV4 leaves as they are. */
static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* Bucket names are DNS labels on AWS; stores allow a little more (upper
 * case, '_'), never a byte that would change what the URL means. */
static bool bucket_ok(const char *b, size_t len)
{
    if (len == 0 || len > 255)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!unreserved((unsigned char)b[i]) || b[i] == '~')
            return false;
    return true;
}

/* Appends key, every byte but the unreserved ones and '/' as %XX. */
static char *encode_key(char *out, const char *key)
{
    static const char hex[] = "0123456789ABCDEF";

    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (unreserved(*p) || *p == '/') {
            *out++ = (char)*p;
        } else {
            *out++ = '%';
            *out++ = hex[*p >> 4];
            *out++ = hex[*p & 15];
        }
    }
    *out = '\0';
    return out;
}

int tbm_s3_locate(const char *s3url, const char *endpoint, const char *region, char **url,
                  char **out_region, char *why, size_t whylen)
{
    const char *bucket = s3url + strlen(S3_SCHEME);
    const char *slash = strchr(bucket, '/');

    *url = *out_region = NULL;
    if (!slash || slash[1] == '\0' || !bucket_ok(bucket, (size_t)(slash - bucket))) {
        snprintf(why, whylen,
                 "not an S3 object URL: it must be s3://BUCKET/KEY (bucket: letters, digits, "
                 "'.', '-', '_')");
        return TBM_ERR_SOURCE;
    }
    const char *key = slash + 1;
    size_t blen = (size_t)(slash - bucket);
    if (!endpoint || !*endpoint)
        endpoint = env_first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    if (!region || !*region)
        region = env_first("AWS_REGION", "AWS_DEFAULT_REGION");
    if (!region)
        region = "us-east-1";
    for (const char *p = region; *p; p++)
        if (!unreserved((unsigned char)*p)) {
            snprintf(why, whylen, "the region must be letters, digits and '-'");
            return TBM_ERR_SOURCE;
        }
    if (endpoint && !tbm_scheme_is_http(endpoint)) {
        snprintf(why, whylen, "the S3 endpoint must be an http:// or https:// URL");
        return TBM_ERR_SOURCE;
    }
    size_t elen = endpoint ? strlen(endpoint) : 0;
    while (elen > 0 && endpoint[elen - 1] == '/')
        elen--;
    size_t cap = elen + blen + strlen(region) + 3 * strlen(key) + 64;
    char *u = malloc(cap), *p = u;
    if (!u || !(*out_region = strdup(region))) {
        free(u);
        return TBM_ERR_NOMEM;
    }
    /* A store of one's own is addressed path-style: its host need not have
     * a name per bucket. */
    if (endpoint)
        p += snprintf(p, cap, "%.*s/%.*s/", (int)elen, endpoint, (int)blen, bucket);
    else
        p += snprintf(p, cap, "https://%.*s.s3.%s.amazonaws.com/", (int)blen, bucket, region);
    encode_key(p, key);
    *url = u;
    return 0;
}

/* The options of s3:// sources, NULL unless given: then the environment's,
 * else AWS's. */
struct s3_options {
    const char *endpoint; /* -o s3_endpoint */
    const char *region;   /* -o s3_region */
};

/* What an s3:// source keeps for its requests: libcurl's signing parameter
 * ("aws:amz:REGION:s3") and the credentials, read again when refused or on
 * SIGHUP. The lock is never held across a reading: a reader reads alone,
 * then swaps what it read in under the lock. */
struct s3 {
    char *sigv4;
    char *name; /* the s3:// URL, for messages */
    pthread_mutex_t lock;
    pthread_cond_t read_done;
    bool reading;
    struct tbm_s3_credentials cred;
    unsigned version;      /* bumped when a reading found other credentials */
    unsigned reloads_seen; /* tbm_scheme_reloads at the last reading */
    struct timespec read_at;
};

/* Reads the credentials again; called with the lock held, which is let go
 * during the reading. One reading at a time: a caller that finds one under
 * way waits for its end. A file that cannot be read keeps the credentials
 * read before, said in one line. */
static void credentials_read(struct s3 *s)
{
    struct tbm_s3_credentials now;
    char why[4200];

    if (s->reading) {
        while (s->reading)
            pthread_cond_wait(&s->read_done, &s->lock);
        return;
    }
    s->reading = true;
    s->reloads_seen = tbm_scheme_reloads();
    clock_gettime(CLOCK_MONOTONIC, &s->read_at);
    pthread_mutex_unlock(&s->lock);
    int r = tbm_s3_credentials_load(&now, why, sizeof(why));
    if (r < 0)
        tbm_log(TBM_LOG_ERROR, "%s: credentials not read again, the ones before are kept: %s",
                s->name, r == TBM_ERR_NOMEM ? "out of memory" : why);
    pthread_mutex_lock(&s->lock);
    if (r == 0 && memcmp(&now, &s->cred, sizeof(now)) != 0) {
        s->cred = now;
        s->version++;
    }
    s->reading = false;
    pthread_cond_broadcast(&s->read_done);
    tbm_s3_credentials_clear(&now);
}

static void s3_close(void *state)
{
    struct s3 *s = state;

    if (!s)
        return;
    tbm_s3_credentials_clear(&s->cred);
    pthread_cond_destroy(&s->read_done);
    pthread_mutex_destroy(&s->lock);
    free(s->sigv4);
    free(s->name);
    free(s);
}

/* The object's URL, the signing parameter, the credentials, and
 * AWS_CA_BUNDLE. */
static int s3_open(const char *name, const void *options, struct tbm_scheme_target *out, char *why,
                   size_t whylen)
{
    const struct s3_options *o = options;
    struct s3 *s = calloc(1, sizeof(*s));
    char *region = NULL;
    int r = TBM_ERR_NOMEM;

    if (!s)
        return r;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->read_done, NULL);
    out->state = s;
    if (!(s->name = strdup(name)))
        return r;
    if ((r = tbm_s3_locate(name, o ? o->endpoint : NULL, o ? o->region : NULL, &out->url, &region,
                           why, whylen)) < 0)
        return r;
    r = asprintf(&s->sigv4, "aws:amz:%s:s3", region) < 0 ? TBM_ERR_NOMEM : 0;
    if (r < 0)
        s->sigv4 = NULL;
    free(region);
    const char *bundle = getenv("AWS_CA_BUNDLE");
    if (r == 0 && bundle && *bundle && !(out->ca_file = strdup(bundle)))
        r = TBM_ERR_NOMEM;
    /* at the mount, a file that cannot be read fails it */
    s->reloads_seen = tbm_scheme_reloads();
    clock_gettime(CLOCK_MONOTONIC, &s->read_at);
    if (r == 0)
        r = tbm_s3_credentials_load(&s->cred, why, whylen);
    return r;
}

/* libcurl signs with the credentials, beside the headers S3 wants; with
 * none, the request goes unsigned. */
static int s3_sign(void *state, CURL *easy, struct curl_slist **headers, unsigned *version)
{
    struct s3 *s = state;
    char token[sizeof(s->cred.token) + 32];
    bool ok = true;

    pthread_mutex_lock(&s->lock);
    if (tbm_scheme_reloads() != s->reloads_seen) /* SIGHUP */
        credentials_read(s);
    *version = s->version;
    if (s->cred.key_id[0]) {
        snprintf(token, sizeof(token), "x-amz-security-token: %s", s->cred.token);
        ok = curl_easy_setopt(easy, CURLOPT_USERNAME, s->cred.key_id) == CURLE_OK &&
             curl_easy_setopt(easy, CURLOPT_PASSWORD, s->cred.secret) == CURLE_OK &&
             curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, s->sigv4) == CURLE_OK &&
             tbm_header_add(headers, S3_PAYLOAD) &&
             (!s->cred.token[0] || tbm_header_add(headers, token));
        explicit_bzero(token, sizeof(token));
    }
    pthread_mutex_unlock(&s->lock);
    return ok ? 0 : TBM_ERR_NOMEM;
}

/* 403, or how AWS says a session token expired. */
static bool s3_refused(long status, const char *code)
{
    return status == 403 || (status == 400 && (strcmp(code, "ExpiredToken") == 0 ||
                                               strcmp(code, "InvalidToken") == 0 ||
                                               strcmp(code, "TokenRefreshRequired") == 0));
}

/* Not again if that was done less than a second ago: a burst of refusals
 * reads the file once. */
static bool s3_refresh(void *state, unsigned used)
{
    struct s3 *s = state;
    struct timespec now;

    pthread_mutex_lock(&s->lock);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double since = (double)(now.tv_sec - s->read_at.tv_sec) +
                   (double)(now.tv_nsec - s->read_at.tv_nsec) * 1e-9;
    if (s->reading || (s->version == used && since >= 1.0))
        credentials_read(s);
    bool other = s->version != used;
    pthread_mutex_unlock(&s->lock);
    return other;
}

/* As given: a key may hold '?', '#' or '@' as any other byte, and an
 * s3:// URL carries no secret. */
static char *s3_display(const char *name)
{
    return strdup(name);
}

static const struct tbm_option_row options[] = {
    {.shown = {"s3_endpoint", "URL",
               "S3 SOURCE: an S3-compatible store, path-style (else AWS_ENDPOINT_URL_S3,\n"
               "AWS_ENDPOINT_URL, else AWS)"},
     .field = offsetof(struct s3_options, endpoint),
     .empty = "must be an http:// or https:// URL"},
    {.shown = {"s3_region", "REGION",
               "S3 SOURCE: the region signed for (else AWS_REGION, AWS_DEFAULT_REGION,\n"
               "us-east-1)"},
     .field = offsetof(struct s3_options, region),
     .empty = "must name a region"},
};

const struct tbm_scheme tbm_scheme_s3 = {
    .prefix = {S3_SCHEME},
    .form = "s3://BUCKET/KEY",
    .help = "in an S3 bucket, signed with the AWS credentials of the environment or\n"
            "~/.aws/credentials; SIGHUP reads them again",
    .options = options,
    .noptions = sizeof(options) / sizeof(options[0]),
    .options_size = sizeof(struct s3_options),
    .open = s3_open,
    .sign = s3_sign,
    .refused = s3_refused,
    .refresh = s3_refresh,
    .close = s3_close,
    .display = s3_display,
};
