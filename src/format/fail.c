/* The opener's failure path: the one line an open that fails writes, which
 * every job of the open (container, manifest, bare blob, index) calls, in a
 * home of its own so that the jobs depend on it and not on the opener. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

int tbm_open_fail(struct tbm_opener *o, int status, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(o->err, o->errlen, "%s: ", o->m->path);

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < o->errlen)
        vsnprintf(o->err + n, o->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}
