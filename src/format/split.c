/* Splits an index's "tensors" array at its elements for json-c to parse a
 * slice at a time; the scan follows strings and nesting only. */
#include "internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct scan {
    const char *buf;
    size_t len;
    size_t depth;
    size_t roots;        /* values opened at depth 0: more than one is trailing text */
    size_t tensors_keys; /* root keys spelled "tensors" */
    size_t open, close;  /* the array's brackets; 0 until seen (the root's '{' is first) */
    bool in_array;
    struct tbm_json_split *out;
    size_t cap;
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_space(const char *buf, size_t len, size_t i)
{
    while (i < len && is_space(buf[i]))
        i++;
    return i;
}

/* The index of the quote closing the string opened at buf[i], or len when
 * there is none; *escaped tells whether the string holds a backslash. Most
 * strings have none, so the search runs on memchr; each byte is searched at
 * most once for a quote and once for a backslash, so long runs of escapes
 * stay linear. */
static size_t string_end(const char *buf, size_t len, size_t i, bool *escaped)
{
    const char *quote = NULL;

    *escaped = false;
    for (i++; i < len;) {
        if (!quote || quote < buf + i) {
            quote = memchr(buf + i, '"', len - i);
            if (!quote)
                return len;
        }
        const char *backslash = memchr(buf + i, '\\', (size_t)(quote - (buf + i)));
        if (!backslash)
            return (size_t)(quote - buf);
        *escaped = true;
        i = (size_t)(backslash - buf) + 2; /* past the escaped byte */
    }
    return len;
}

static int push_sep(struct scan *s, size_t at)
{
    struct tbm_json_split *out = s->out;

    /* count is 1 + the entries so far: the '[' and a ',' after each but the
     * last, whose ']' comes next */
    if (out->count > TBM_INDEX_ENTRIES_MAX)
        return TBM_ERR_SOURCE;
    if (out->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        size_t *sep = realloc(out->sep, cap * sizeof(*sep));
        if (!sep)
            return TBM_ERR_NOMEM;
        out->sep = sep;
        s->cap = cap;
    }
    out->sep[out->count++] = at;
    return 0;
}

/* A string at depth 1 followed by ':' is a key of the root. Returns where the
 * scan goes on, or len to give up on splitting. */
static size_t after_string(struct scan *s, size_t start, size_t end, bool escaped)
{
    size_t colon = skip_space(s->buf, s->len, end + 1);

    if (s->depth != 1 || colon >= s->len || s->buf[colon] != ':')
        return end;
    if (escaped)
        return s->len; /* it might decode to "tensors" */
    if (end - start - 1 != 7 || memcmp(s->buf + start + 1, "tensors", 7) != 0)
        return end;
    size_t value = skip_space(s->buf, s->len, colon + 1);
    if (++s->tensors_keys > 1 || value >= s->len || s->buf[value] != '[')
        return s->len;
    s->open = value;
    return colon;
}

static int scan_char(struct scan *s, size_t i)
{
    char c = s->buf[i];

    if (c == '{' || c == '[') {
        if (s->depth == 0)
            s->roots++;
        s->depth++;
        if (i == s->open && s->open != 0) {
            s->in_array = true;
            return push_sep(s, i);
        }
    } else if (c == '}' || c == ']') {
        if (s->depth == 0)
            return 1;
        if (s->in_array && s->depth == 2) {
            if (c != ']')
                return 1;
            s->in_array = false;
            s->close = i;
        }
        s->depth--;
    } else if (c == ',' && s->in_array && s->depth == 2) {
        return push_sep(s, i);
    }
    return 0;
}

int tbm_json_split(const char *buf, size_t len, struct tbm_json_split *out)
{
    struct scan s = {.buf = buf, .len = len, .out = out};
    const char *why;
    int r = 0;

    memset(out, 0, sizeof(*out));
    size_t first = skip_space(buf, len, 0);
    if (first >= len || buf[first] != '{' || !tbm_json_within_limits(buf, len, &why))
        return 0;
    for (size_t i = first; i < len && r == 0; i++) {
        if (buf[i] == '"') {
            bool escaped;
            size_t end = string_end(buf, len, i, &escaped);
            i = end < len ? after_string(&s, i, end, escaped) : len;
            if (i >= len)
                r = 1;
            continue;
        }
        r = scan_char(&s, i);
    }
    if (r < 0)
        goto out_free;
    if (r > 0 || s.depth != 0 || s.roots != 1 || s.close == 0) {
        r = 0;
        goto out_free;
    }
    /* sep holds the '[' and each ','; with the ']' there is one more
     * separator than elements, unless only whitespace lies in between. */
    if ((r = push_sep(&s, s.close)) < 0)
        goto out_free;
    out->count--;
    if (out->count == 1 && skip_space(buf, s.close, s.open + 1) == s.close)
        out->count = 0;
    out->open = s.open;
    out->close = s.close;
    return 1;

out_free:
    tbm_json_split_free(out);
    return r;
}

void tbm_json_split_free(struct tbm_json_split *split)
{
    free(split->sep);
    split->sep = NULL;
    split->count = 0;
}

struct json_object *tbm_json_split_root(const char *buf, size_t len,
                                        const struct tbm_json_split *split)
{
    struct tbm_json_piece pieces[] = {{buf, split->open + 1},
                                      {buf + split->close, len - split->close}};
    const char *why;

    return tbm_json_parse_pieces(pieces, 2, TBM_JSON_DEPTH, &why);
}

struct json_object *tbm_json_split_elements(const char *buf, const struct tbm_json_split *split,
                                            size_t first, size_t end)
{
    assert(first < end && end <= split->count);
    size_t from = split->sep[first] + 1, to = split->sep[end];
    struct tbm_json_piece pieces[] = {{"[", 1}, {buf + from, to - from}, {"]", 1}};
    const char *why;

    /* An element nests one level less deep here than in the whole text. */
    struct json_object *arr = tbm_json_parse_pieces(pieces, 3, TBM_JSON_DEPTH - 1, &why);
    if (arr && (!json_object_is_type(arr, json_type_array) ||
                json_object_array_length(arr) != end - first)) {
        json_object_put(arr);
        return NULL;
    }
    return arr;
}
