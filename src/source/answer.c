/* Reading a server's answer: the fields of its header the HTTP source
 * judges by (Content-Range, ETag, Last-Modified) and the code of a store's
 * XML error body. Every byte may be hostile: numbers are digits only and
 * checked for overflow, and words are cleaned before anyone quotes them. */
#include "answer.h"

#include <string.h>
#include <strings.h>

#include "tbm/text.h"

/* The value without the blanks and CRLF around it. */
static const char *trim(const char *p, size_t *len)
{
    while (*len > 0 && (*p == ' ' || *p == '\t'))
        p++, (*len)--;
    while (*len > 0 && (p[*len - 1] == '\r' || p[*len - 1] == '\n' || p[*len - 1] == ' ' ||
                        p[*len - 1] == '\t'))
        (*len)--;
    return p;
}

static void copy_clean(char *dst, size_t cap, const char *p, size_t len)
{
    p = trim(p, &len);
    tbm_text_clean(dst, cap, p, len);
}

/* Decimal digits at *p (not past end) into *out; false on none or overflow. */
static bool number(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;

    if (s == end || *s < '0' || *s > '9')
        return false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *out = v;
    return true;
}

static bool expect(const char **p, const char *end, char c)
{
    if (*p == end || **p != c)
        return false;
    (*p)++;
    return true;
}

/* "bytes A-B/T", or "bytes *" then "/T" for a range not satisfiable. */
static void content_range(struct tbm_http_answer *ans, const char *p, size_t len)
{
    uint64_t a, b, t;

    /* the last Content-Range says it all: a range and a total of an
     * earlier one must not outlive it */
    ans->has_range = ans->v.has_size = false;
    ans->v.size = 0;
    p = trim(p, &len);
    const char *end = p + len;
    if (len < 6 || strncasecmp(p, "bytes ", 6) != 0)
        return;
    p += 6;
    if (expect(&p, end, '*')) {
        if (expect(&p, end, '/') && number(&p, end, &t) && p == end) {
            ans->v.size = t;
            ans->v.has_size = true;
        }
        return;
    }
    if (number(&p, end, &a) && expect(&p, end, '-') && number(&p, end, &b) &&
        expect(&p, end, '/') && number(&p, end, &t) && p == end && a <= b && b < t) {
        ans->has_range = true;
        ans->first = a;
        ans->last = b;
        ans->v.size = t;
        ans->v.has_size = true;
    }
}

static bool is_field(const char *line, size_t len, const char *name, const char **value,
                     size_t *vlen)
{
    size_t n = strlen(name);

    if (len <= n || line[n] != ':' || strncasecmp(line, name, n) != 0)
        return false;
    *value = line + n + 1;
    *vlen = len - n - 1;
    return true;
}

void tbm_answer_header(struct tbm_http_answer *ans, const char *line, size_t len)
{
    const char *value;
    size_t vlen;

    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0)
        *ans = (struct tbm_http_answer){0}; /* a new answer: forget the last */
    else if (is_field(line, len, "Content-Range", &value, &vlen))
        content_range(ans, value, vlen);
    else if (is_field(line, len, "ETag", &value, &vlen))
        copy_clean(ans->v.etag, sizeof(ans->v.etag), value, vlen);
    else if (is_field(line, len, "Last-Modified", &value, &vlen))
        copy_clean(ans->v.last_modified, sizeof(ans->v.last_modified), value, vlen);
}

void tbm_answer_error_code(const char *body, size_t len, char *code, size_t cap)
{
    static const char open[] = "<Code>", close[] = "</Code>";
    const char *a = memmem(body, len, open, sizeof(open) - 1);

    code[0] = '\0';
    if (!a)
        return;
    a += sizeof(open) - 1;
    const char *b = memmem(a, (size_t)(body + len - a), close, sizeof(close) - 1);
    if (b)
        tbm_text_clean(code, cap, a, (size_t)(b - a));
}
