/* The credentials an S3 source signs with, found where the AWS tools look:
 * the environment, then a profile of the shared credentials file. s3.c
 * reads them again when a store refuses them or on SIGHUP, so that keys
 * that rotate under a long mount are picked up. */
#include "s3.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static FILE *open_credentials_file(void)
{
    const char *path = getenv("AWS_SHARED_CREDENTIALS_FILE");
    char buf[4096];

    if (path && *path)
        return fopen(path, "re");
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    if (!home || snprintf(buf, sizeof(buf), "%s/.aws/credentials", home) >= (int)sizeof(buf))
        return NULL;
    return fopen(buf, "re");
}

/* The INI file's section [profile]: its aws_access_key_id,
 * aws_secret_access_key and aws_session_token. */
static void load_file(struct tbm_s3_credentials *out, const char *profile)
{
    FILE *f = open_credentials_file();
    char line[8192];
    bool in = false;

    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        size_t len;
        char *s = trim(line, &len);
        if (len == 0 || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            size_t plen = strlen(profile);
            in = len == plen + 2 && s[len - 1] == ']' && strncmp(s + 1, profile, plen) == 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq)
            continue;
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
    explicit_bzero(line, sizeof(line));
    fclose(f);
}

void tbm_s3_credentials_load(struct tbm_s3_credentials *out)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");

    tbm_s3_credentials_clear(out);
    if (id && *id && secret && *secret) {
        const char *token = getenv("AWS_SESSION_TOKEN");
        set(out->key_id, sizeof(out->key_id), id, strlen(id));
        set(out->secret, sizeof(out->secret), secret, strlen(secret));
        if (token)
            set(out->token, sizeof(out->token), token, strlen(token));
    } else {
        const char *profile = getenv("AWS_PROFILE");
        load_file(out, profile && *profile ? profile : "default");
    }
    /* half a key pair signs nothing */
    if (!out->key_id[0] || !out->secret[0])
        tbm_s3_credentials_clear(out);
}
