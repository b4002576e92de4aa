/* The one string builder (buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/status.h"

/* Room for len more bytes and a NUL; false when it cannot be had. */
static bool room(struct tbm_buf *b, size_t len)
{
    if (b->failed)
        return false;
    if (b->cap - b->len > len)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len <= len) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void tbm_buf_add(struct tbm_buf *b, const void *data, size_t len)
{
    if (!b->count_only && room(b, len))
        memcpy(b->data + b->len, data, len);
    b->len += len;
}

void tbm_buf_adds(struct tbm_buf *b, const char *s)
{
    tbm_buf_add(b, s, strlen(s));
}

void tbm_buf_vprintf(struct tbm_buf *b, const char *fmt, va_list ap)
{
    size_t left = b->count_only || b->failed ? 0 : b->cap - b->len;
    va_list again;

    va_copy(again, ap);
    int n = vsnprintf(left ? b->data + b->len : NULL, left, fmt, ap);
    if (n < 0)
        b->failed = true;
    else if (!b->count_only && (size_t)n >= left && room(b, (size_t)n))
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
    va_end(again);
    b->len += n < 0 ? 0 : (size_t)n;
}

void tbm_buf_printf(struct tbm_buf *b, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tbm_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

int tbm_buf_take(struct tbm_buf *b, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (b->count_only || !room(b, 0)) {
        tbm_buf_free(b);
        return TBM_ERR_NOMEM;
    }
    b->data[b->len] = '\0';
    *out = b->data;
    *len = b->len;
    *b = (struct tbm_buf)TBM_BUF_INIT;
    return 0;
}

void tbm_buf_free(struct tbm_buf *b)
{
    free(b->data);
    *b = (struct tbm_buf){.count_only = b->count_only};
}
