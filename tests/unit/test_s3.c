/* Unit tests of where an s3:// URL's object is (endpoint, region, the key's
 * SigV4 encoding), of the credentials' search order and file format, and of
 * what the table of schemes says of a name (a URL or not, how it is shown
 * and hidden), with expected strings written out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "source/s3.h"
#include "tbm/source.h"
#include "tbm/status.h"

static const char *const aws_vars[] = {
    "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",  "AWS_REGION",
    "AWS_DEFAULT_REGION",  "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",   "AWS_PROFILE",       "AWS_SHARED_CREDENTIALS_FILE",
};

static int clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
        unsetenv(aws_vars[i]);
    setenv("HOME", "/nonexistent", 1);
    return 0;
}

static void locate(const char *s3url, const char *endpoint, const char *region,
                   const char *want_url, const char *want_region)
{
    char why[256], *url, *reg;

    assert_int_equal(tbm_s3_locate(s3url, endpoint, region, &url, &reg, why, sizeof(why)), 0);
    assert_string_equal(url, want_url);
    assert_string_equal(reg, want_region);
    free(url);
    free(reg);
}

static void test_aws_virtual_host(void **state)
{
    (void)state;
    locate("s3://models/llama.tbm", NULL, NULL,
           "https://models.s3.us-east-1.amazonaws.com/llama.tbm", "us-east-1");
    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    locate("s3://models/llama.tbm", NULL, NULL,
           "https://models.s3.eu-west-3.amazonaws.com/llama.tbm", "eu-west-3");
    setenv("AWS_REGION", "ap-south-1", 1);
    locate("s3://models/llama.tbm", NULL, NULL,
           "https://models.s3.ap-south-1.amazonaws.com/llama.tbm", "ap-south-1");
    locate("s3://models/llama.tbm", NULL, "us-west-2",
           "https://models.s3.us-west-2.amazonaws.com/llama.tbm", "us-west-2");
}

static void test_endpoint_order(void **state)
{
    (void)state;
    setenv("AWS_ENDPOINT_URL", "http://general:9000", 1);
    locate("s3://b1/k", NULL, NULL, "http://general:9000/b1/k", "us-east-1");
    setenv("AWS_ENDPOINT_URL_S3", "http://s3only:9000/", 1);
    locate("s3://b1/k", NULL, NULL, "http://s3only:9000/b1/k", "us-east-1");
    locate("s3://b1/k", "https://option:443//", NULL, "https://option:443/b1/k", "us-east-1");
}

static void test_key_encoding(void **state)
{
    (void)state;
    locate("s3://b1/team/llama v1/\xc3\xa9t\xc3\xa9+1~a_b-c.tbm", "http://h", NULL,
           "http://h/b1/team/llama%20v1/%C3%A9t%C3%A9%2B1~a_b-c.tbm", "us-east-1");
    locate("s3://b1/a?b#c%d@e", "http://h", NULL, "http://h/b1/a%3Fb%23c%25d%40e", "us-east-1");
}

static void test_refusals(void **state)
{
    static const char *const bad[] = {"s3://bucket", "s3://bucket/", "s3:///key",
                                      "s3://bad bucket/k", "s3://b~x/k"};
    char why[256], *url, *reg;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(tbm_s3_locate(bad[i], NULL, NULL, &url, &reg, why, sizeof(why)),
                         TBM_ERR_SOURCE);
    assert_int_equal(tbm_s3_locate("s3://b1/k", "ftp://h", NULL, &url, &reg, why, sizeof(why)),
                     TBM_ERR_SOURCE);
    assert_int_equal(tbm_s3_locate("s3://b1/k", NULL, "us/east", &url, &reg, why, sizeof(why)),
                     TBM_ERR_SOURCE);
}

/* A credentials file in a temporary directory; its path in path. */
static void write_file(char *path, const char *text)
{
    strcpy(path, "/tmp/tbm-test-s3-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static const char file_text[] = "# comment\n"
                                "[default]\n"
                                "aws_access_key_id = AKDEFAULT\n"
                                "aws_secret_access_key=secret default\r\n"
                                "\n"
                                "; another comment\n"
                                "  [reader]  \n"
                                "aws_access_key_id=AKREADER\n"
                                "aws_secret_access_key = SKREADER\n"
                                "aws_session_token = TOKEN=with=equals\n"
                                "[half]\n"
                                "aws_access_key_id=AKHALF\n";

/* A load that must succeed. */
static void load(struct tbm_s3_credentials *c)
{
    char why[4200];

    assert_int_equal(tbm_s3_credentials_load(c, why, sizeof(why)), 0);
}

/* A credentials file that is no regular file fails at once, one line that
 * names it, and gives no credentials. */
static void refused(const char *path, const char *reason)
{
    struct tbm_s3_credentials c;
    char why[4200], want[4200];

    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    assert_int_equal(tbm_s3_credentials_load(&c, why, sizeof(why)), TBM_ERR_SOURCE);
    snprintf(want, sizeof(want), "%s: %s", path, reason);
    assert_string_equal(why, want);
    assert_string_equal(c.key_id, "");
}

static void test_credentials_not_a_file(void **state)
{
    char dir[] = "/tmp/tbm-test-cred-XXXXXX", fifo[64], zero[64];

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(zero, sizeof(zero), "%s/zero", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink("/dev/zero", zero), 0);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_PROFILE");
    refused(fifo, "is a FIFO, not a regular file");
    refused(zero, "is a character device, not a regular file");
    refused(dir, "is a directory, not a regular file");
    unlink(fifo);
    unlink(zero);
    rmdir(dir);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static void test_credentials_file(void **state)
{
    struct tbm_s3_credentials c;
    char path[64];

    (void)state;
    write_file(path, file_text);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    load(&c);
    assert_string_equal(c.key_id, "AKDEFAULT");
    assert_string_equal(c.secret, "secret default");
    assert_string_equal(c.token, "");
    setenv("AWS_PROFILE", "reader", 1);
    load(&c);
    assert_string_equal(c.key_id, "AKREADER");
    assert_string_equal(c.secret, "SKREADER");
    assert_string_equal(c.token, "TOKEN=with=equals");
    setenv("AWS_PROFILE", "half", 1); /* half a key pair signs nothing */
    load(&c);
    assert_string_equal(c.key_id, "");
    setenv("AWS_PROFILE", "missing", 1);
    load(&c);
    assert_string_equal(c.key_id, "");
    unlink(path);
}

static void test_environment_first(void **state)
{
    struct tbm_s3_credentials c;
    char path[64];

    (void)state;
    write_file(path, file_text);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
    load(&c); /* no secret in the environment: the file's */
    assert_string_equal(c.key_id, "AKDEFAULT");
    setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
    setenv("AWS_SESSION_TOKEN", "TKENV", 1);
    load(&c);
    assert_string_equal(c.key_id, "AKENV");
    assert_string_equal(c.secret, "SKENV");
    assert_string_equal(c.token, "TKENV");
    unlink(path);
}

static void test_home_file(void **state)
{
    struct tbm_s3_credentials c;
    char home[] = "/tmp/tbm-test-home-XXXXXX", dir[128], path[160];

    (void)state;
    assert_non_null(mkdtemp(home));
    snprintf(dir, sizeof(dir), "%s/.aws", home);
    snprintf(path, sizeof(path), "%s/credentials", dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(file_text, f);
    fclose(f);
    setenv("HOME", home, 1);
    load(&c);
    assert_string_equal(c.key_id, "AKDEFAULT");
    unlink(path);
    rmdir(dir);
    rmdir(home);
}

static void shown(const char *url, const char *want)
{
    char *s = tbm_source_url_display(url);

    assert_non_null(s);
    assert_string_equal(s, want);
    free(s);
}

static void test_url_display(void **state)
{
    (void)state;
    shown("https://host/m.tbm", "https://host/m.tbm");
    shown("https://alice:pw@host:8443/dir/m.tbm", "https://host:8443/dir/m.tbm");
    shown("http://u:p@x@host/m.tbm?token=abc", "http://host/m.tbm?\xe2\x80\xa6");
    shown("https://host/m.tbm#frag", "https://host/m.tbm?\xe2\x80\xa6");
    shown("https://host?x=1", "https://host?\xe2\x80\xa6");
    shown("s3://bucket/a?b@c", "s3://bucket/a?b@c");
    shown("/local/path?x", "/local/path?x");
}

static void hidden(const char *arg, const char *want)
{
    char buf[256];

    snprintf(buf, sizeof(buf), "%s", arg);
    tbm_source_hide_secrets(buf);
    assert_string_equal(buf, want);
}

/* What ps is left to show of an argument: no URL's user information or
 * query, no header's value. */
static void test_hide_secrets(void **state)
{
    (void)state;
    hidden("https://alice:pw@host:8443/dir/m.tbm?token=abc#f",
           "https://********@host:8443/dir/m.tbm?***********");
    hidden("http://u:p@x@host/m.tbm", "http://*****@host/m.tbm");
    hidden("HTTP://host/m.tbm#frag", "HTTP://host/m.tbm#****");
    hidden("s3://bucket/a?b", "s3://bucket/a?*");
    hidden("ftp://u:p@host/x?y", "ftp://u:p@host/x?y");
    hidden("/local/path?x", "/local/path?x");
    hidden("http_header=X-Api-Key: secret", "http_header=X-Api-Key:*******");
    hidden("ro,http_header=X: v,allow_other", "ro,http_header=X:**************");
    hidden("http_header_file=/etc/a:b", "http_header_file=/etc/a:b");
    hidden("s3_endpoint=http://user:pass@host:9000/", "s3_endpoint=http://*********@host:9000/");
    hidden("ro,s3_endpoint=HTTPS://u:p@h,allow_other", "ro,s3_endpoint=HTTPS://***@h,allow_other");
    hidden("s3_endpoint=http://host/a@b", "s3_endpoint=http://host/a@b");
}

/* The table of schemes is the one that tells a URL, whatever the case. */
static void test_is_url(void **state)
{
    static const char *const urls[] = {"http://h/m", "HTTPS://h/m", "s3://b/k", "S3://b/k"};
    static const char *const others[] = {"ftp://h/m", "/path/s3://x", "http:/h", "s3:/b/k", ""};

    (void)state;
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++)
        assert_true(tbm_source_is_url(urls[i]));
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
        assert_false(tbm_source_is_url(others[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_aws_virtual_host, clean_env),
        cmocka_unit_test_setup(test_endpoint_order, clean_env),
        cmocka_unit_test_setup(test_key_encoding, clean_env),
        cmocka_unit_test_setup(test_refusals, clean_env),
        cmocka_unit_test_setup(test_credentials_file, clean_env),
        cmocka_unit_test_setup(test_credentials_not_a_file, clean_env),
        cmocka_unit_test_setup(test_environment_first, clean_env),
        cmocka_unit_test_setup(test_home_file, clean_env),
        cmocka_unit_test_setup(test_url_display, clean_env),
        cmocka_unit_test_setup(test_hide_secrets, clean_env),
        cmocka_unit_test_setup(test_is_url, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
