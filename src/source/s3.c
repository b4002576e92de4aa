/* Where an s3:// source's object is: the endpoint (a store's own, addressed
 * path-style, or AWS's virtual-hosted one), the region its requests are
 * signed for, and the key percent-encoded as SigV4's canonical URI has it. */
#include "s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S3_SCHEME "s3://"

bool tbm_s3_is_url(const char *name)
{
    return strncasecmp(name, S3_SCHEME, strlen(S3_SCHEME)) == 0;
}

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
    if (endpoint && strncasecmp(endpoint, "http://", 7) != 0 &&
        strncasecmp(endpoint, "https://", 8) != 0) {
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
