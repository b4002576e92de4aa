/* Text hygiene (include/tbm/text.h): UTF-8 characters told apart from other
 * bytes, cuts between characters, and text made clean for a line or a file
 * of the tree. */
#include "tbm/text.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static bool is_continuation(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

size_t tbm_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t cut = max;
    while (cut > 0 && is_continuation((unsigned char)s[cut]))
        cut--;
    return cut;
}

size_t tbm_utf8_seq(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n;
    uint32_t cp;

    if (len == 0)
        return 0;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if (!is_continuation(p[i]))
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    /* overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8 */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

size_t tbm_text_escape(char *out, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";

    out[0] = '%';
    out[1] = hex[c >> 4];
    out[2] = hex[c & 15];
    return 3;
}

size_t tbm_text_clean(char *out, size_t size, const char *in, size_t len)
{
    size_t o = 0, i = 0;

    while (i < len) {
        unsigned char c = (unsigned char)in[i];
        size_t n = c < 0x20 || c == 0x7f ? 0 : tbm_utf8_seq(in + i, len - i);
        size_t need = n ? n : 3;
        if (o + need + 4 > size) {
            /* cut between characters, and say so */
            if (o + 4 <= size) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (n) {
            memcpy(out + o, in + i, n);
            o += n;
            i += n;
        } else {
            o += tbm_text_escape(out + o, c);
            i++;
        }
    }
    out[o] = '\0';
    return o;
}
