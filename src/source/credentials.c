/* The credentials an S3 source signs with, found where the AWS tools look:
 * the environment, then a profile of the shared credentials file. s3.c
 * reads them again when a store refuses them or on SIGHUP, so that keys
 * that rotate under a long mount are picked up. The file is read as every
 * file named by the user (base/named.h). */
#include "s3.h"

#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/named.h"

/* A credentials file is a few lines; a bigger one is not one. */
#define CREDENTIALS_MAX ((size_t)1 << 20)

void tbm_s3_credentials_clear(struct tbm_s3_credentials *c)
{
    explicit_bzero(c, sizeof(*c));
}

static void set(char *dst, size_t cap, const char *v, size_t len)
{
    if (len >= cap)
        len = 0; /* cut, it would not sign: better none */
    memcpy(dst, v, len);
    dst[len] = '\0';
}

/* The line without its leading and trailing blanks. */
static char *trim(char *s, size_t *len)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        n--;
    s[n] = '\0';
    *len = n;
    return s;
}

/* Where the shared credentials file is, in buf; false when there is no
 * home to find it under. */
static bool credentials_path(char *buf, size_t cap)
{
    const char *path = getenv("AWS_SHARED_CREDENTIALS_FILE");

    if (path && *path)
        return snprintf(buf, cap, "%s", path) < (int)cap;
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    return home && snprintf(buf, cap, "%s/.aws/credentials", home) < (int)cap;
}

/* One line of the INI file: a section header sets *in (whether it is
 * [profile]), a key of it sets its credential. */
static void take_line(struct tbm_s3_credentials *out, const char *profile, char *line, bool *in)
{
    size_t len;
    char *s = trim(line, &len);

    if (len == 0 || *s == '#' || *s == ';')
        return;
    if (*s == '[') {
        size_t plen = strlen(profile);
        *in = len == plen + 2 && s[len - 1] == ']' && strncmp(s + 1, profile, plen) == 0;
        return;
    }
    char *eq = strchr(s, '=');
    if (!*in || !eq)
        return;
    *eq = '\0';
    size_t klen, vlen;
    char *k = trim(s, &klen), *v = trim(eq + 1, &vlen);
    if (strcmp(k, "aws_access_key_id") == 0)
        set(out->key_id, sizeof(out->key_id), v, vlen);
    else if (strcmp(k, "aws_secret_access_key") == 0)
        set(out->secret, sizeof(out->secret), v, vlen);
    else if (strcmp(k, "aws_session_token") == 0)
        set(out->token, sizeof(out->token), v, vlen);
}

/* The INI file's section [profile]: its aws_access_key_id,
 * aws_secret_access_key and aws_session_token. A file that is not there is
 * no credentials; one that cannot be read is a failure. */
static int load_file(struct tbm_s3_credentials *out, const char *profile, char *why, size_t whylen)
{
    struct tbm_named f;
    char path[4096];
    bool in = false;

    if (!credentials_path(path, sizeof(path)))
        return 0;
    int r = tbm_named_read(AT_FDCWD, path, path, CREDENTIALS_MAX, &f, why, whylen);
    if (r == 1)
        return 0;
    if (r < 0)
        return r;
    /* the bytes end in a NUL: line by line in place */
    for (char *line = f.bytes, *next; line < f.bytes + f.len; line = next) {
        char *nl = memchr(line, '\n', (size_t)(f.bytes + f.len - line));
        next = nl ? nl + 1 : f.bytes + f.len;
        if (nl)
            *nl = '\0';
        take_line(out, profile, line, &in);
    }
    tbm_named_free(&f);
    return 0;
}

int tbm_s3_credentials_load(struct tbm_s3_credentials *out, char *why, size_t whylen)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    int r = 0;

    tbm_s3_credentials_clear(out);
    if (id && *id && secret && *secret) {
        const char *token = getenv("AWS_SESSION_TOKEN");
        set(out->key_id, sizeof(out->key_id), id, strlen(id));
        set(out->secret, sizeof(out->secret), secret, strlen(secret));
        if (token)
            set(out->token, sizeof(out->token), token, strlen(token));
    } else {
        const char *profile = getenv("AWS_PROFILE");
        r = load_file(out, profile && *profile ? profile : "default", why, whylen);
    }
    /* half a key pair signs nothing */
    if (r < 0 || !out->key_id[0] || !out->secret[0])
        tbm_s3_credentials_clear(out);
    return r;
}
