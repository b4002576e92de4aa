/* Unit tests of the local-file source's probe: a look at bytes where they lie
 * in the page cache, answered true only when the look says so and the file
 * is unchanged, and false (the process alive) when the file is cut short
 * under the look. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tbm/source.h"

#define SIZE (1u << 20)

struct look {
    const char *path;
    size_t len;
    size_t sum; /* of the bytes looked at */
    bool cut;   /* truncate the file first, then touch every byte */
};

static bool look(const unsigned char *bytes, void *arg)
{
    struct look *l = arg;

    if (l->cut)
        assert_int_equal(truncate(l->path, 0), 0);
    for (size_t i = 0; i < l->len; i++)
        l->sum += *(const volatile unsigned char *)(bytes + i);
    return true;
}

static struct tbm_source *open_file(char *path)
{
    unsigned char *data = malloc(SIZE);
    struct tbm_source *src;
    const char *why;
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_non_null(data);
    for (size_t i = 0; i < SIZE; i++)
        data[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(write(fd, data, SIZE), SIZE);
    close(fd);
    free(data);
    assert_int_equal(tbm_source_open_file(path, &src, &why), 0);
    return src;
}

static void test_probe_sees_the_bytes(void **state)
{
    char path[] = "/tmp/tbm-probe-XXXXXX";
    struct tbm_source *src = open_file(path);
    struct look l = {.path = path, .len = 5000};
    size_t want = 0;

    (void)state;
    for (size_t i = 12345; i < 12345 + 5000; i++)
        want += (unsigned char)(i * 7 + 1);
    assert_true(tbm_source_probe(src, 12345, 5000, look, &l));
    assert_int_equal(l.sum, want);
    /* past the end, or empty: not probed */
    assert_false(tbm_source_probe(src, SIZE - 10, 11, look, &l));
    assert_false(tbm_source_probe(src, 0, 0, look, &l));
    tbm_source_close(src);
    unlink(path);
}

/* In a process of its own, without cmocka, whose handlers of SIGBUS would
 * stand in for the source's: exits 0 when the probe said false and the
 * next one too (its pages gone), 1 otherwise; SIGBUS kills it. */
static int cut_short(void)
{
    char path[] = "/tmp/tbm-probe-XXXXXX";
    struct tbm_source *src = open_file(path);
    struct look l = {.path = path, .len = SIZE / 2, .cut = true};
    bool first = tbm_source_probe(src, SIZE / 4, SIZE / 2, look, &l);

    l.cut = false;
    bool second = tbm_source_probe(src, 0, 4096, look, &l);
    tbm_source_close(src);
    unlink(path);
    return first || second;
}

static char *self;

static void test_probe_of_a_file_cut_short(void **state)
{
    int status;
    pid_t pid = fork();

    (void)state;
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self, self, "cut-short", (char *)NULL);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "cut-short") == 0)
        return cut_short();
    self = argv[0];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_sees_the_bytes),
        cmocka_unit_test(test_probe_of_a_file_cut_short),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
