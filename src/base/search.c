/* The one piece search (search.h). */
#include "search.h"

size_t tbm_first_ending_after(const void *base, size_t n, size_t size,
                              uint64_t (*end)(const void *record), uint64_t off)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (end((const char *)base + mid * size) <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
