/* Encoding of tensor names into directory names, as the mount contract
 * specifies; a name never escapes tensors/ and never collides. */
#include "tbm/names.h"

#include "tbm/text.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define CUT_MAX 246

uint64_t tbm_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool needs_escape(unsigned char c)
{
    return c == '%' || c == '/' || c < 0x20 || c == 0x7f;
}

/* Cuts s back to at most max bytes without splitting an escape or a UTF-8
 * character. Escapes are three bytes starting with '%'. */
static size_t safe_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t cut = max;
    if (cut >= 1 && s[cut - 1] == '%')
        cut -= 1;
    else if (cut >= 2 && s[cut - 2] == '%')
        cut -= 2;
    return tbm_utf8_cut(s, len, cut);
}

static size_t encode_whole(const char *name, size_t len, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i++)
        o += tbm_text_escape(out + o, (unsigned char)name[i]);
    if (len == 0)
        out[o++] = '%';
    out[o] = '\0';
    return o;
}

size_t tbm_name_encode(const char *name, size_t len, char out[TBM_NAME_MAX + 1])
{
    if (len == 0 || (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return encode_whole(name, len, out);

    /* Encode until the result would exceed the limit; only then is the
     * cut-and-hash form needed, so a long name costs a bounded buffer. */
    char buf[TBM_NAME_MAX + 3];
    size_t o = 0;
    size_t i;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        size_t w = needs_escape(c) ? 3 : 1;
        if (o + w > TBM_NAME_MAX)
            break;
        if (w == 3)
            tbm_text_escape(buf + o, c);
        else
            buf[o] = (char)c;
        o += w;
    }
    if (i == len) {
        memcpy(out, buf, o);
        out[o] = '\0';
        return o;
    }

    size_t cut = safe_cut(buf, o, CUT_MAX);
    memcpy(out, buf, cut);
    uint64_t h = tbm_fnv1a64(name, len);
    snprintf(out + cut, TBM_NAME_MAX + 1 - cut, "~%08x", (unsigned)(h >> 32));
    return cut + 9;
}

size_t tbm_name_dedup(const char *encoded, size_t len, unsigned long n, char out[TBM_NAME_MAX + 1])
{
    char suffix[24];
    int slen = snprintf(suffix, sizeof(suffix), "~%lu", n);
    size_t base = safe_cut(encoded, len, TBM_NAME_MAX - (size_t)slen);

    memcpy(out, encoded, base);
    memcpy(out + base, suffix, (size_t)slen + 1);
    return base + (size_t)slen;
}
