/* libFuzzer target of what a server sends back: header lines (a status
 * line, Content-Range, ETag, Last-Modified, anything) and an error body, as
 * the HTTP source reads them. The input's lines up to the first empty one
 * are the header, the rest the body. What is read must hold together: a
 * range inside its total, and words that may be quoted (valid UTF-8, no
 * control bytes, within their buffers). */
#include "fuzz_target.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "source/answer.h"
#include "tbm/text.h"

/* Valid UTF-8 with no control bytes, NUL-terminated inside cap. */
static void check_word(const char *s, size_t cap)
{
    size_t len = strnlen(s, cap);

    if (len == cap)
        abort();
    for (size_t i = 0; i < len;) {
        size_t n = tbm_utf8_seq(s + i, len - i);
        if (n == 0 || (n == 1 && ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)))
            abort();
        i += n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    struct tbm_http_answer a = {0};
    char code[64];

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        if (len == 1 || (len == 2 && p[0] == '\r')) { /* the blank line: the body follows */
            p += len;
            break;
        }
        tbm_answer_header(&a, p, len);
        p += len;
    }
    if (a.has_range && !(a.v.has_size && a.first <= a.last && a.last < a.v.size))
        abort();
    check_word(a.v.etag, sizeof(a.v.etag));
    check_word(a.v.last_modified, sizeof(a.v.last_modified));
    /* the mount's mtime comes from libcurl's date parser */
    if (a.v.last_modified[0])
        (void)curl_getdate(a.v.last_modified, NULL);
    tbm_answer_error_code(p, (size_t)(end - p), code, sizeof(code));
    check_word(code, sizeof(code));
    return 0;
}
