/* Test buffers followed by an inaccessible page, shared by the kernel tests:
 * a path that reads past the end of its input faults instead of passing. */
#ifndef TBM_TESTS_GUARD_BUF_H
#define TBM_TESTS_GUARD_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

struct buf {
    uint8_t *base;
    size_t len;
    uint8_t *p; /* the size bytes asked for */
};

/* size bytes whose end touches the guard page (at_guard), or that start
 * skew (< 64) bytes into the mapping, so that no path can count on an
 * alignment. Aborts the test (cmocka) when the mapping fails. */
static inline struct buf alloc_buf(size_t size, bool at_guard, size_t skew)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct buf b = {NULL, (size + 64 + page - 1) / page * page + page, NULL};

    b.base = mmap(NULL, b.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(b.base != MAP_FAILED);
    assert_int_equal(mprotect(b.base + b.len - page, page, PROT_NONE), 0);
    b.p = at_guard ? b.base + b.len - page - size : b.base + skew;
    return b;
}

static inline void free_buf(struct buf b)
{
    munmap(b.base, b.len);
}

#endif
