/* Unit tests of parsing an index in slices of its "tensors" array: the slices
 * must say what one whole parse says, valid or not, wherever the cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

/* The elements [first, end) of a split document, or NULL when they do not parse. */
static struct json_object *elements(const char *doc, const struct tbm_json_split *s, size_t first,
                                    size_t end)
{
    if (first == end)
        return json_object_new_array();
    return tbm_json_split_elements(doc, s, first, end);
}

/* Rebuilds the whole array from the two sides of a cut. */
static struct json_object *join(struct json_object *a, struct json_object *b)
{
    struct json_object *out = json_object_new_array();

    for (size_t i = 0; i < json_object_array_length(a); i++)
        json_object_array_add(out, json_object_get(json_object_array_get_idx(a, i)));
    for (size_t i = 0; i < json_object_array_length(b); i++)
        json_object_array_add(out, json_object_get(json_object_array_get_idx(b, i)));
    return out;
}

/* Checks the split of doc against its whole parse, cut at every element.
 * Returns the split's verdict: -1 not split, 0 split but invalid, 1 valid. */
static int agree(const char *doc)
{
    size_t len = strlen(doc);
    const char *why;
    struct json_object *whole = tbm_json_parse_strict(doc, len, &why);
    struct tbm_json_split s;
    int r = tbm_json_split(doc, len, &s);

    assert_true(r >= 0);
    if (r == 0) {
        json_object_put(whole);
        return -1;
    }
    struct json_object *root = tbm_json_split_root(doc, len, &s);
    int verdict = root != NULL;
    for (size_t cut = 0; cut <= s.count && verdict; cut++) {
        struct json_object *a = elements(doc, &s, 0, cut), *b = elements(doc, &s, cut, s.count);
        if (!a || !b) {
            verdict = 0;
        } else {
            struct json_object *all = join(a, b), *arr;
            if (!whole)
                fail_msg("%s: whole parse fails (%s) but the slices parse", doc, why);
            assert_true(json_object_object_get_ex(whole, "tensors", &arr));
            if (!json_object_equal(all, arr))
                fail_msg("%s: cut at %zu, the slices differ from the whole", doc, cut);
            json_object_put(all);
        }
        json_object_put(a);
        json_object_put(b);
    }
    if (verdict) {
        /* the root as parsed, with its array emptied, is the root the split gives */
        json_object_object_add(whole, "tensors", json_object_new_array());
        assert_true(json_object_equal(whole, root));
    } else if (whole) {
        fail_msg("%s: whole parse succeeds but the split does not", doc);
    }
    json_object_put(root);
    json_object_put(whole);
    tbm_json_split_free(&s);
    return verdict;
}

static size_t count_of(const char *doc)
{
    struct tbm_json_split s;

    assert_int_equal(tbm_json_split(doc, strlen(doc), &s), 1);
    size_t n = s.count;
    tbm_json_split_free(&s);
    return n;
}

static void test_valid_documents_split(void **state)
{
    (void)state;
    assert_int_equal(agree("{\"tensors\":[]}"), 1);
    assert_int_equal(count_of("{\"tensors\":[]}"), 0);
    assert_int_equal(agree(" {\"tensors\" : [ \n ] } \n"), 1);
    assert_int_equal(count_of(" {\"tensors\" : [ \n ] } \n"), 0);
    assert_int_equal(agree("{\"tensors\":[7]}"), 1);
    assert_int_equal(count_of("{\"tensors\":[7]}"), 1);
    const char *mixed = "{\"a\":1,\"tensors\":[{\"x\":[1,2]},{\"y\":\"a,b]}\"}, 3, [4,[5]]],"
                        "\"z\":{\"tensors\":[9,9]}}";
    assert_int_equal(agree(mixed), 1);
    assert_int_equal(count_of(mixed), 4);
    const char *quoted = "{\"s\":\"\\\"tensors\\\":[\",\"tensors\":[\"a\\\\\",\"\\\",\",1]}";
    assert_int_equal(agree(quoted), 1);
    assert_int_equal(count_of(quoted), 3);
    assert_int_equal(agree("{\"tensors\":[1e5, -0.5, null, true, \"\\u00e9\"]}"), 1);
}

static void test_invalid_documents_fail_alike(void **state)
{
    (void)state;
    assert_int_equal(agree("{\"tensors\":[1,2,]}"), 0);
    assert_int_equal(agree("{\"tensors\":[,1]}"), 0);
    assert_int_equal(agree("{\"tensors\":[1 2]}"), 0);
    assert_int_equal(agree("{\"tensors\":[,]}"), 0);
    assert_int_equal(agree("{\"tensors\":[\"\xff\"]}"), 0);
    assert_int_equal(agree("{\"tensors\":[01]}"), 0);
    assert_int_equal(agree("{\"tensors\":[1]} x"), 0);
    assert_int_equal(agree("{\"tensors\":[1],}"), 0);
    assert_int_equal(agree("{\"tensors\":[1],\"x\":}"), 0);
    assert_int_equal(agree("{\"tensors\":[NaN]}"), 0);
    assert_int_equal(agree("{\"tensors\":[{\"shape\":[-Infinity]}]}"), 0);
    assert_int_equal(agree("{\"tensors\":[1e999]}"), 0);
    assert_int_equal(agree("{\"tensors\":[],\"config\":{\"x\":Infinity}}"), 0);
}

static void test_unplain_documents_not_split(void **state)
{
    (void)state;
    assert_int_equal(agree("{\"tensors\":[1],\"tensors\":[2]}"), -1);
    assert_int_equal(agree("{\"tens\\u006frs\":[1]}"), -1);
    assert_int_equal(agree("{\"tensors\":[1]}{}"), -1);
    assert_int_equal(agree("[{\"tensors\":[1]}]"), -1);
    assert_int_equal(agree("{\"tensors\":{\"a\":[1]}}"), -1);
    assert_int_equal(agree("{\"tensors\":[1}"), -1);
    assert_int_equal(agree("{\"tensors\":[1]"), -1);
    assert_int_equal(agree("{\"x\":\"unterminated"), -1);
    assert_int_equal(agree("{\"x\":1}"), -1);
    assert_int_equal(agree(""), -1);
}

/* An element nested to the depth limit parses in a slice exactly when it
 * parses in the whole text. */
static void test_depth_limit_kept(void **state)
{
    (void)state;
    for (int extra = TBM_JSON_DEPTH - 4; extra <= TBM_JSON_DEPTH + 1; extra++) {
        char doc[512] = "{\"tensors\":[1,";
        size_t n = strlen(doc);
        for (int i = 0; i < extra; i++)
            doc[n++] = '[';
        for (int i = 0; i < extra; i++)
            doc[n++] = ']';
        strcpy(doc + n, "]}");
        const char *why;
        struct json_object *whole = tbm_json_parse_strict(doc, strlen(doc), &why);
        assert_int_equal(agree(doc), whole ? 1 : 0);
        json_object_put(whole);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_documents_split),
        cmocka_unit_test(test_invalid_documents_fail_alike),
        cmocka_unit_test(test_unplain_documents_not_split),
        cmocka_unit_test(test_depth_limit_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
