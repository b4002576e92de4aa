/* The one string builder (not installed): bytes appended to a buffer that
 * grows, or only counted, for documents and headers built piece by piece. */
#ifndef TBM_BASE_BUF_H
#define TBM_BASE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* A growing run of bytes. An append that cannot grow it is remembered:
 * later ones are counted, not written, and tbm_buf_take fails. A counting
 * builder (TBM_BUF_COUNT) writes nothing at all: len says how long the text
 * would be, for sizes known without building what they measure. */
struct tbm_buf {
    char *data;
    size_t len, cap;
    bool failed;
    bool count_only;
};
#define TBM_BUF_INIT                                                                               \
    {                                                                                              \
        .data = NULL                                                                               \
    }
#define TBM_BUF_COUNT                                                                              \
    {                                                                                              \
        .count_only = true                                                                         \
    }

void tbm_buf_add(struct tbm_buf *b, const void *data, size_t len);
/* A NUL-terminated string, without its NUL. */
void tbm_buf_adds(struct tbm_buf *b, const char *s);
void tbm_buf_printf(struct tbm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbm_buf_vprintf(struct tbm_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Hands the bytes over, a NUL after them (not counted in *len): 0, or
 * TBM_ERR_NOMEM when an append failed (the bytes freed). b is empty after. */
int tbm_buf_take(struct tbm_buf *b, char **out, size_t *len);
void tbm_buf_free(struct tbm_buf *b);

#endif
