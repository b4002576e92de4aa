/* Unit tests of the ground floor (src/base/): the piece search over records
 * of two shapes, the string builder (growing, counting, failing), text
 * hygiene, and the parallel runner over every item once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/parallel.h"
#include "base/search.h"
#include "tbm/status.h"
#include "tbm/text.h"

/* Records as the views keep them (start, 64-bit length) and as a remote
 * source keeps fetched ranges (off, size_t length, then data). */
struct piece {
    uint64_t start, len;
    size_t k;
};

struct range {
    uint64_t off;
    size_t len;
    unsigned char *data;
};

static uint64_t piece_end(const void *p)
{
    const struct piece *x = p;
    return x->start + x->len;
}

static uint64_t range_end(const void *p)
{
    const struct range *x = p;
    return x->off + x->len;
}

static void first_ending_after(void **state)
{
    /* [10, 20), [20, 25), gap, [40, 41), gap, [100, 200) */
    static const struct piece p[] = {{10, 10, 0}, {20, 5, 1}, {40, 1, 2}, {100, 100, 3}};
    static const struct {
        uint64_t off;
        size_t want;
    } cases[] = {
        {0, 0},  {9, 0},  {10, 0}, {19, 0}, {20, 1},  {24, 1},  {25, 2},
        {39, 2}, {40, 2}, {41, 3}, {99, 3}, {199, 3}, {200, 4}, {UINT64_MAX, 4},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(tbm_first_ending_after(p, 4, sizeof(*p), piece_end, cases[i].off),
                         cases[i].want);
    assert_int_equal(tbm_first_ending_after(p, 0, sizeof(*p), piece_end, 5), 0);
    assert_int_equal(tbm_first_ending_after(p, 1, sizeof(*p), piece_end, 20), 1);

    /* another record shape, by its own end */
    struct range r[] = {{0, 64, NULL}, {64, 64, NULL}, {1 << 20, 4096, NULL}};
    assert_int_equal(tbm_first_ending_after(r, 3, sizeof(*r), range_end, 63), 0);
    assert_int_equal(tbm_first_ending_after(r, 3, sizeof(*r), range_end, 64), 1);
    assert_int_equal(tbm_first_ending_after(r, 3, sizeof(*r), range_end, 128), 2);
    assert_int_equal(tbm_first_ending_after(r, 3, sizeof(*r), range_end, (1 << 20) + 4096), 3);
}

static void builder(void **state)
{
    struct tbm_buf b = TBM_BUF_INIT, count = TBM_BUF_COUNT;
    static char want[8192];
    size_t n = 0;
    char *out;
    size_t len;

    (void)state;
    /* past the first 4 KiB, so that it grows, and printfs that do not fit */
    for (int i = 0; i < 1000; i++) {
        tbm_buf_printf(&b, "%d,", i);
        tbm_buf_printf(&count, "%d,", i);
        n += (size_t)snprintf(want + n, sizeof(want) - n, "%d,", i);
    }
    memcpy(want + n, "\0xend", 6);
    tbm_buf_add(&b, "\0x", 2);
    tbm_buf_add(&count, "\0x", 2);
    tbm_buf_adds(&b, "end");
    tbm_buf_adds(&count, "end");
    assert_int_equal(count.len, b.len);
    assert_null(count.data);
    assert_int_equal(tbm_buf_take(&count, &out, &len), TBM_ERR_NOMEM);
    assert_int_equal(tbm_buf_take(&b, &out, &len), 0);
    assert_null(b.data);
    assert_int_equal(len, n + 5);
    assert_memory_equal(out, want, len);
    assert_int_equal(out[len], '\0');
    free(out);

    /* a failed append is remembered: the builder hands nothing over */
    b.failed = true;
    tbm_buf_adds(&b, "lost");
    assert_int_equal(b.len, 4);
    assert_int_equal(tbm_buf_take(&b, &out, &len), TBM_ERR_NOMEM);
    assert_null(out);
}

static void text_clean(void **state)
{
    char out[64];

    (void)state;
    assert_int_equal(tbm_text_clean(out, sizeof(out), "a\x01\x7f\xff\xc3\xa9", 6), 12);
    assert_string_equal(out, "a%01%7F%FF\xc3\xa9");
    /* overlong, surrogate, and a character cut by the end */
    assert_int_equal(tbm_utf8_seq("\xc0\x80", 2), 0);
    assert_int_equal(tbm_utf8_seq("\xed\xa0\x80", 3), 0);
    assert_int_equal(tbm_utf8_seq("\xe2\x82\xac", 2), 0);
    assert_int_equal(tbm_utf8_seq("\xe2\x82\xac", 3), 3);
    /* cut between characters, and said */
    tbm_text_clean(out, 10, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8);
    assert_string_equal(out, "\xc3\xa9\xc3\xa9\xc3\xa9...");
    assert_int_equal(tbm_utf8_cut("\xc3\xa9\xc3\xa9", 4, 3), 2);
}

#define ITEMS 20000

static atomic_int seen[ITEMS];

static int mark(void *ctx, size_t begin, size_t end)
{
    for (size_t i = begin; i < end; i++)
        atomic_fetch_add(&seen[i], 1);
    return ctx && begin <= *(size_t *)ctx && *(size_t *)ctx < end ? -7 : 0;
}

static void parallel(void **state)
{
    size_t fail_at = ITEMS - 1;

    (void)state;
    for (size_t n = 0; n <= ITEMS; n += ITEMS / 4) {
        memset(seen, 0, sizeof(seen));
        assert_int_equal(tbm_for_each_span(n, mark, NULL), 0);
        for (size_t i = 0; i < ITEMS; i++)
            assert_int_equal(atomic_load(&seen[i]), i < n);
    }
    /* a span's failure is the run's, the other spans run all the same */
    memset(seen, 0, sizeof(seen));
    assert_int_equal(tbm_for_each_span(ITEMS, mark, &fail_at), -7);
    assert_int_equal(atomic_load(&seen[0]), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_ending_after),
        cmocka_unit_test(builder),
        cmocka_unit_test(text_clean),
        cmocka_unit_test(parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
