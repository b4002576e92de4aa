/* Unit tests of tensor directory-name encoding against the contract's rules,
 * with expected strings written out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tbm/names.h"

static void expect(const char *name, size_t len, const char *want)
{
    char out[TBM_NAME_MAX + 1];
    size_t n = tbm_name_encode(name, len, out);

    assert_int_equal(n, strlen(want));
    assert_string_equal(out, want);
}

static void test_plain_names_unchanged(void **state)
{
    (void)state;
    expect("model.layers.0.q_proj.weight", 28, "model.layers.0.q_proj.weight");
    expect("ünïcödé ok", strlen("ünïcödé ok"), "ünïcödé ok");
    expect("...", 3, "...");
    expect(".hidden", 7, ".hidden");
}

static void test_escapes(void **state)
{
    (void)state;
    expect("a/b", 3, "a%2Fb");
    expect("100%", 4, "100%25");
    expect("tab\there", 8, "tab%09here");
    expect("del\x7f", 4, "del%7F");
    expect("nul\0byte", 8, "nul%00byte");
    expect("../etc", 6, "..%2Fetc");
}

static void test_dot_names_encoded_whole(void **state)
{
    (void)state;
    expect("", 0, "%");
    expect(".", 1, "%2E");
    expect("..", 2, "%2E%2E");
}

static void test_fnv1a64_known_values(void **state)
{
    (void)state;
    assert_true(tbm_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    assert_true(tbm_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(tbm_fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
}

static void hashed(const char *name, size_t len, char *want, size_t keep)
{
    sprintf(want + keep, "~%08x", (unsigned)(tbm_fnv1a64(name, len) >> 32));
}

static void test_long_ascii_name_cut_and_hashed(void **state)
{
    char name[400], want[300];

    (void)state;
    memset(name, 'x', sizeof(name));
    memcpy(want, name, 246);
    hashed(name, sizeof(name), want, 246);
    expect(name, sizeof(name), want);
    assert_int_equal(strlen(want), 255);

    /* exactly 255 bytes fits as it is */
    name[255] = '\0';
    expect(name, 255, name);
}

static void test_cut_never_splits_an_escape(void **state)
{
    char name[300], want[300];

    (void)state;
    /* 245 plain bytes then '/': its escape would straddle byte 246 */
    memset(name, 'y', 245);
    memset(name + 245, '/', 55);
    memcpy(want, name, 245);
    hashed(name, 300, want, 245);
    expect(name, 300, want);
}

static void test_cut_never_splits_utf8(void **state)
{
    char name[400], want[300];

    (void)state;
    /* 245 plain bytes then 2-byte characters: byte 246 is a continuation */
    memset(name, 'z', 245);
    for (int i = 245; i + 1 < 400; i += 2) {
        name[i] = (char)0xc3;
        name[i + 1] = (char)0xa9;
    }
    name[399] = 'z';
    memcpy(want, name, 245);
    hashed(name, 400, want, 245);
    expect(name, 400, want);
}

static void test_dedup_suffix(void **state)
{
    char out[TBM_NAME_MAX + 1], base[TBM_NAME_MAX + 1];

    (void)state;
    assert_int_equal(tbm_name_dedup("w", 1, 2, out), 3);
    assert_string_equal(out, "w~2");
    assert_int_equal(tbm_name_dedup("w", 1, 10, out), 4);
    assert_string_equal(out, "w~10");

    /* a full-length name is cut back so that the suffix still fits */
    memset(base, 'q', 255);
    base[255] = '\0';
    assert_int_equal(tbm_name_dedup(base, 255, 3, out), 255);
    assert_memory_equal(out, base, 253);
    assert_string_equal(out + 253, "~3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_names_unchanged),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_dot_names_encoded_whole),
        cmocka_unit_test(test_fnv1a64_known_values),
        cmocka_unit_test(test_long_ascii_name_cut_and_hashed),
        cmocka_unit_test(test_cut_never_splits_an_escape),
        cmocka_unit_test(test_cut_never_splits_utf8),
        cmocka_unit_test(test_dedup_suffix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
