/* Reads tokenizer.json a value at a time: json-c parses every value (every
 * string, number and nested value, strictly, UTF-8 checked), and this walk
 * only steps over the punctuation between the values of the root object,
 * "model" and its "vocab" and "merges". json-c's tree of a Qwen-sized file
 * (151,669 tokens, 151,387 merges, 11 MB) took 70 MiB; walked, the big two
 * are never a tree. */
#include "internal.h"

#include "../format/internal.h"
#include "tbm/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct walker {
    const char *buf;
    size_t len, pos;
    struct json_tokener *tok;
    const struct tj_sink *sink;
    const char *err; /* what failed, at byte at */
    bool twice;      /* it is a key given twice, not a syntax error */
    size_t at;
    int status; /* a sink's failure */
};

static void skip_space(struct walker *w)
{
    while (w->pos < w->len && (w->buf[w->pos] == ' ' || w->buf[w->pos] == '\t' ||
                               w->buf[w->pos] == '\n' || w->buf[w->pos] == '\r'))
        w->pos++;
}

static bool failed(struct walker *w, const char *err, size_t at)
{
    if (!w->err) {
        w->err = err;
        w->at = at;
    }
    return false;
}

/* Steps over c, after whitespace. */
static bool take(struct walker *w, char c)
{
    skip_space(w);
    if (w->pos < w->len && w->buf[w->pos] == c) {
        w->pos++;
        return true;
    }
    return false;
}

static bool peek(struct walker *w, char c)
{
    skip_space(w);
    return w->pos < w->len && w->buf[w->pos] == c;
}

/* The value at pos (after whitespace) into *o (NULL for a JSON null), which
 * the walk steps past: json-c parses it strictly and stops where it ends. A
 * number that ends the text is only known to have ended when json-c is told
 * so (a NUL). */
static bool value(struct walker *w, struct json_object **o)
{
    skip_space(w);
    if (w->pos >= w->len)
        return failed(w, "JSON ends early", w->len);
    size_t rest = w->len - w->pos;
    json_tokener_reset(w->tok);
    *o = json_tokener_parse_ex(w->tok, w->buf + w->pos, (int)rest);
    size_t stop = json_tokener_get_parse_end(w->tok);
    if (!*o && json_tokener_get_error(w->tok) == json_tokener_continue) {
        *o = json_tokener_parse_ex(w->tok, "", 1);
        stop = rest;
    }
    enum json_tokener_error e = json_tokener_get_error(w->tok);
    if (e != json_tokener_success) {
        json_object_put(*o);
        *o = NULL;
        return failed(w,
                      e == json_tokener_continue ? "JSON ends early" : json_tokener_error_desc(e),
                      e == json_tokener_continue ? w->len : w->pos + stop);
    }
    w->pos += stop;
    return true;
}

/* After a member or element: a ',' (true: another follows) or the closing c. */
static bool next(struct walker *w, char c, bool *more)
{
    if (take(w, ',')) {
        *more = true;
        return true;
    }
    if (take(w, c)) {
        *more = false;
        return true;
    }
    if (w->pos >= w->len)
        return failed(w, "JSON ends early", w->len);
    return failed(w, c == '}' ? "expected ',' or '}'" : "expected ',' or ']'", w->pos);
}

/* '{' (or '[') then true when the container is empty (and closed). */
static bool open_container(struct walker *w, char open, char close, bool *empty)
{
    if (!take(w, open))
        return failed(w, "expected an object", w->pos);
    *empty = take(w, close);
    return true;
}

/* A member's key and the ':' after it. */
static struct json_object *key(struct walker *w)
{
    size_t at = (skip_space(w), w->pos);
    struct json_object *k;
    if (!value(w, &k))
        return NULL;
    if (!json_object_is_type(k, json_type_string) || !take(w, ':')) {
        json_object_put(k);
        failed(w, "expected a key and ':'", at);
        return NULL;
    }
    return k;
}

static bool add_member(struct walker *w, struct json_object *obj, struct json_object *k,
                       struct json_object *v, size_t at)
{
    const char *name = json_object_get_string(k);

    /* a key given twice would leave which one counts to the reader */
    if (json_object_object_get_ex(obj, name, NULL)) {
        json_object_put(v);
        w->twice = true;
        return failed(w, "a key twice in one object", at);
    }
    if (json_object_object_add(obj, name, v) != 0) {
        json_object_put(v);
        w->status = TBM_ERR_NOMEM;
        return false;
    }
    return true;
}

static bool walk_vocab(struct walker *w)
{
    bool empty, more = true;

    if (!open_container(w, '{', '}', &empty))
        return false;
    while (!empty && more) {
        struct json_object *k = key(w);
        if (!k)
            return false;
        struct json_object *id;
        bool ok = value(w, &id);
        int r = ok ? w->sink->vocab_entry(w->sink->ctx, json_object_get_string(k),
                                          (size_t)json_object_get_string_len(k), id)
                   : 0;
        json_object_put(k);
        json_object_put(id);
        if (!ok)
            return false;
        if (r < 0) {
            w->status = r;
            return false;
        }
        if (!next(w, '}', &more))
            return false;
    }
    return true;
}

static bool walk_merges(struct walker *w)
{
    bool empty, more = true;

    if (!open_container(w, '[', ']', &empty))
        return false;
    while (!empty && more) {
        struct json_object *m;
        if (!value(w, &m))
            return false;
        int r = w->sink->merge(w->sink->ctx, m);
        json_object_put(m);
        if (r < 0) {
            w->status = r;
            return false;
        }
        if (!next(w, ']', &more))
            return false;
    }
    return true;
}

/* The members of an object at pos into obj; inside "model" (in_model), the
 * vocab and merges go to the sink instead; at the root, so does "model". */
static bool walk_object(struct walker *w, struct json_object *obj, bool root, struct tj_parsed *out)
{
    bool empty, more = true;

    if (!open_container(w, '{', '}', &empty))
        return false;
    while (!empty && more) {
        size_t at = (skip_space(w), w->pos);
        struct json_object *k = key(w);
        if (!k)
            return false;
        const char *name = json_object_get_string(k);
        bool *seen = NULL;
        struct json_object *v = NULL;
        if (root && strcmp(name, "model") == 0 && peek(w, '{')) {
            v = json_object_new_object();
            if (!v || !add_member(w, obj, k, v, at)) {
                json_object_put(k);
                w->status = w->err ? 0 : TBM_ERR_NOMEM;
                return false;
            }
            out->model = v;
            json_object_put(k);
            if (!walk_object(w, v, false, out))
                return false;
        } else if (!root && strcmp(name, "vocab") == 0 && peek(w, '{')) {
            seen = &out->has_vocab;
        } else if (!root && strcmp(name, "merges") == 0 && peek(w, '[')) {
            seen = &out->has_merges;
        } else {
            bool ok = value(w, &v) && add_member(w, obj, k, v, at);
            json_object_put(k);
            if (!ok)
                return false;
        }
        if (seen) {
            json_object_put(k);
            if (*seen) {
                w->twice = true;
                return failed(w, "a key twice in one object", at);
            }
            *seen = true;
            if (!(seen == &out->has_vocab ? walk_vocab(w) : walk_merges(w)))
                return false;
        }
        if (!next(w, '}', &more))
            return false;
    }
    return true;
}

int tj_walk(const char *buf, size_t len, const struct tj_sink *sink, struct tj_parsed *out,
            char **why)
{
    struct walker w = {.buf = buf, .len = len, .sink = sink};
    int r = 0;

    memset(out, 0, sizeof(*out));
    *why = NULL;
    w.tok = json_tokener_new_ex(TBM_JSON_DEPTH);
    out->root = json_object_new_object();
    if (!w.tok || !out->root) {
        r = TBM_ERR_NOMEM;
        goto out;
    }
    json_tokener_set_flags(w.tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                      JSON_TOKENER_VALIDATE_UTF8);
    if (!peek(&w, '{')) {
        /* not an object: json-c says what it is or where it breaks */
        struct json_object *v;
        if (value(&w, &v))
            failed(&w, "the root is not an object", 0);
        json_object_put(v);
    } else if (walk_object(&w, out->root, true, out)) {
        skip_space(&w);
        if (w.pos < w.len)
            failed(&w, "trailing bytes after the root object", w.pos);
    }
    if (w.status < 0) {
        r = w.status;
    } else if (w.err) {
        size_t line, column;
        tbm_json_position(buf, w.at, &line, &column);
        if (asprintf(why, "tokenizer.json %s%s at byte %zu (line %zu, column %zu)",
                     w.twice ? "has " : "is not valid JSON: ", w.err, w.at, line, column) < 0)
            *why = NULL;
        r = *why ? TBM_ERR_SOURCE : TBM_ERR_NOMEM;
    }
out:
    json_tokener_free(w.tok);
    if (r != 0) {
        json_object_put(out->root);
        memset(out, 0, sizeof(*out));
    }
    return r;
}

struct json_object *tj_parse_whole(const char *buf, size_t len)
{
    const char *why;

    return tbm_json_parse_strict(buf, len, &why);
}
