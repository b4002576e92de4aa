/* Strict JSON reading for indexes and manifests: json-c in strict mode with
 * UTF-8 validation, every value's type checked before it is used. */
#include "internal.h"

#include "tbm/text.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest message kept; a longer one (a huge name or path quoted in it) is cut. */
#define MESSAGE_MAX 1024

/* Messages quote names and paths from the file, and every output that shows
 * them is one line per message of valid UTF-8: control bytes and bytes that
 * are not UTF-8 are written %XX, as in directory names, so that no file can
 * forge a line of a report or make a JSON file undecodable; a long message
 * is cut between characters. */
static char *clean_message(const char *raw)
{
    char *out = malloc(MESSAGE_MAX + 1);

    if (out)
        tbm_text_clean(out, MESSAGE_MAX + 1, raw, strlen(raw));
    return out;
}

int tbm_strlist_addf(struct tbm_strlist *list, const char *fmt, ...)
{
    va_list ap;
    char *raw;

    va_start(ap, fmt);
    int n = vasprintf(&raw, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TBM_ERR_NOMEM;
    char *msg = clean_message(raw);
    free(raw);
    if (!msg)
        return TBM_ERR_NOMEM;
    char **items = realloc(list->items, (list->count + 1) * sizeof(*items));
    if (!items) {
        free(msg);
        return TBM_ERR_NOMEM;
    }
    items[list->count++] = msg;
    list->items = items;
    return 0;
}

void tbm_strlist_truncate(struct tbm_strlist *list, size_t count)
{
    while (list->count > count)
        free(list->items[--list->count]);
}

void tbm_strlist_free(struct tbm_strlist *list)
{
    tbm_strlist_truncate(list, 0);
    free(list->items);
    list->items = NULL;
}

static bool only_whitespace(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && p[i] != '\r')
            return false;
    return true;
}

/* Counts '{' and '[' bytes, inside strings too: an upper bound on the
 * objects and arrays the text can make; with the ',' bytes added, on all its
 * values, since every value but the first of each container follows one. */
static void count_bounds(const char *buf, size_t len, size_t *containers, size_t *values)
{
    size_t open = 0, commas = 0;

    for (size_t i = 0; i < len; i++) {
        open += buf[i] == '{' || buf[i] == '[';
        commas += buf[i] == ',';
    }
    *containers = open;
    *values = 1 + open + commas;
}

/* Whether only whitespace follows the value that ended at end of pieces[k]:
 * json-c stops at the value's end and leaves the rest to us. */
static bool rest_is_whitespace(const struct tbm_json_piece *pieces, size_t npieces, size_t k,
                               size_t end)
{
    if (end > pieces[k].len || !only_whitespace(pieces[k].buf + end, pieces[k].len - end))
        return false;
    for (k++; k < npieces; k++)
        if (!only_whitespace(pieces[k].buf, pieces[k].len))
            return false;
    return true;
}

/* json-c's strict mode still takes NaN, Infinity and -Infinity, which RFC
 * 8259 does not have and which it would write back as such into header.json
 * and model.json; a number beyond a double's range reads as infinite too. */
static bool all_finite(struct json_object *obj)
{
    switch (json_object_get_type(obj)) {
    case json_type_double:
        return isfinite(json_object_get_double(obj));
    case json_type_array:
        for (size_t i = 0; i < json_object_array_length(obj); i++)
            if (!all_finite(json_object_array_get_idx(obj, i)))
                return false;
        return true;
    case json_type_object: {
        json_object_object_foreach(obj, key, value)
        {
            (void)key;
            if (!all_finite(value))
                return false;
        }
        return true;
    }
    default:
        return true;
    }
}

/* The offset of the first byte that is not whitespace from piece k's byte
 * end on, counted from the start of the whole text (before is the length of
 * the pieces before k). */
static size_t first_trailing(const struct tbm_json_piece *pieces, size_t npieces, size_t k,
                             size_t end, size_t before)
{
    for (; k < npieces; before += pieces[k].len, end = 0, k++)
        for (size_t i = end; i < pieces[k].len; i++)
            if (!only_whitespace(pieces[k].buf + i, 1))
                return before + i;
    return before;
}

static struct json_object *parse_pieces(const struct tbm_json_piece *pieces, size_t npieces,
                                        int depth, const char **why, size_t *at)
{
    struct json_tokener *tok = json_tokener_new_ex(depth);
    struct json_object *obj = NULL;
    enum json_tokener_error err = json_tokener_continue;
    size_t k = 0, end = 0, before = 0;
    bool took_all = false;

    *at = SIZE_MAX;
    if (!tok) {
        *why = "out of memory";
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    for (k = 0; k < npieces && err == json_tokener_continue; k++) {
        if (pieces[k].len == 0)
            continue;
        assert(pieces[k].len <= TBM_INDEX_MAX);
        obj = json_tokener_parse_ex(tok, pieces[k].buf, (int)pieces[k].len);
        err = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        before += pieces[k].len;
    }
    /* where json-c stopped: end bytes into the last piece it was given */
    size_t stop = before - (k > 0 ? pieces[k - 1].len : 0) + end;
    /* A bare number could go on with more digits: json-c waits for more input
     * until it is told the text has ended, which a NUL byte does. */
    if (!obj && err == json_tokener_continue) {
        obj = json_tokener_parse_ex(tok, "", 1);
        err = json_tokener_get_error(tok);
        took_all = true;
    }
    json_tokener_free(tok);

    if (!obj || err != json_tokener_success) {
        json_object_put(obj);
        *why = err == json_tokener_continue ? "JSON ends early" : json_tokener_error_desc(err);
        /* json-c stops at the byte it choked on; a text that ends early is
         * to blame at its end */
        *at = err == json_tokener_continue || took_all ? before : stop;
        return NULL;
    }
    /* the value ended in piece k - 1, at end */
    if (!took_all && !rest_is_whitespace(pieces, npieces, k - 1, end)) {
        json_object_put(obj);
        *why = "JSON has trailing bytes after its value";
        *at = first_trailing(pieces, npieces, k - 1, end, before - pieces[k - 1].len);
        return NULL;
    }
    if (!all_finite(obj)) {
        json_object_put(obj);
        *why = "JSON has a number that is NaN, infinite or beyond a double's range";
        return NULL;
    }
    return obj;
}

struct json_object *tbm_json_parse_pieces(const struct tbm_json_piece *pieces, size_t npieces,
                                          int depth, const char **why)
{
    size_t at;

    return parse_pieces(pieces, npieces, depth, why, &at);
}

bool tbm_json_within_limits(const char *buf, size_t len, const char **why)
{
    if (len > TBM_INDEX_MAX) {
        *why = "JSON is larger than the 256 MiB limit";
        return false;
    }
    size_t containers, values;
    count_bounds(buf, len, &containers, &values);
    if (containers > TBM_JSON_CONTAINERS_MAX) {
        *why = "JSON has more than 2097152 objects and arrays";
        return false;
    }
    if (values > TBM_JSON_VALUES_MAX) {
        *why = "JSON has more than 16777216 values";
        return false;
    }
    return true;
}

struct json_object *tbm_json_parse_located(const char *buf, size_t len, const char **why,
                                           size_t *at)
{
    struct tbm_json_piece whole = {buf, len};

    *at = SIZE_MAX;
    if (!tbm_json_within_limits(buf, len, why))
        return NULL;
    return parse_pieces(&whole, 1, TBM_JSON_DEPTH, why, at);
}

struct json_object *tbm_json_parse_strict(const char *buf, size_t len, const char **why)
{
    size_t at;

    return tbm_json_parse_located(buf, len, why, &at);
}

void tbm_json_position(const char *buf, size_t at, size_t *line, size_t *column)
{
    *line = *column = 1;
    for (size_t i = 0; i < at; i++) {
        if (buf[i] == '\n') {
            ++*line;
            *column = 1;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
            ++*column; /* columns count characters, not the bytes of one */
        }
    }
}

int tbm_json_get_u64(struct json_object *obj, const char *key, uint64_t *out)
{
    struct json_object *v;

    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return -1;
    /* json-c keeps integers above INT64_MAX as unsigned; get_int64 saturates
     * those to INT64_MAX, so a negative answer means a negative number. It
     * also saturates anything beyond 2^64 - 1 to UINT64_MAX, which is thus
     * refused: no count or offset of a real file is that large. */
    if (json_object_get_int64(v) < 0 || json_object_get_uint64(v) == UINT64_MAX)
        return -1;
    *out = json_object_get_uint64(v);
    return 1;
}
