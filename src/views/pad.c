/* Documents whose size is fixed before their figures are known: the bound
 * on their size, and the padding to it (spaces at the ends of lines, where
 * a terminal shows none). */
#include "internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Spaces the line [start, end) can take while its last row on a terminal
 * of TBM_PAD_COLUMNS stays short of the edge: a row of spaces alone would
 * show as blank. */
static size_t pad_room(size_t start, size_t end)
{
    size_t n = end - start, used = n % TBM_PAD_COLUMNS;

    return n > 0 && used == 0 ? 0 : TBM_PAD_COLUMNS - 1 - used;
}

int tbm_pad_lines(char **doc, size_t *len, uint64_t size)
{
    const char *d = *doc;

    if (*len > size || *len == 0 || d[*len - 1] != '\n') {
        free(*doc);
        return TBM_ERR_NOMEM; /* a bound of ours was wrong: never served cut */
    }
    size_t pad = size - *len, lines = 0, room = 0;
    for (size_t i = 0, start = 0; i < *len; i++) {
        if (d[i] == '\n') {
            lines++;
            room += pad_room(start, i);
            start = i + 1;
        }
    }
    char *p = malloc(size);
    if (!p) {
        free(*doc);
        return TBM_ERR_NOMEM;
    }
    /* Each line takes what its last row has room for, the last lines
     * first; when that is not enough, an even share each (the rest on the
     * last lines). */
    bool fits = room >= pad;
    size_t out = 0, line = 0, after = room;
    for (size_t i = 0, start = 0; i < *len; i++) {
        if (d[i] != '\n')
            continue;
        size_t here, mine = pad_room(start, i);
        after -= mine; /* room of the lines after this one */
        if (fits)
            here = pad > after ? (pad - after < mine ? pad - after : mine) : 0;
        else
            here = pad / lines + (line >= lines - pad % lines);
        line++;
        memcpy(p + out, d + start, i - start);
        out += i - start;
        memset(p + out, ' ', here);
        out += here;
        p[out++] = '\n';
        start = i + 1;
    }
    assert(out == size);
    free(*doc);
    *doc = p;
    *len = size;
    return 0;
}

int tbm_lazy_doc_size(const struct tbm_views *v, tbm_doc_fn doc, uint64_t slack, uint64_t *size)
{
    char *text;
    size_t len;
    int r = doc(v, false, &text, &len);

    if (r < 0)
        return r;
    free(text);
    *size = len + slack;
    return 0;
}

int tbm_lazy_doc_render(const struct tbm_views *v, tbm_doc_fn doc, char **out, size_t *len)
{
    int r = v->opts.stats_nowait ? 0 : tbm_model_compute_stats(v->model);

    return r < 0 ? r : doc(v, true, out, len);
}
