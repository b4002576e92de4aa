/* Reads the five files of a tokenizer directory once, each as every file
 * named by the user is (base/named.h): bounded and checked to be a regular
 * file before a byte is read. */
#include "tbm/vocab.h"
#include "tbm/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/named.h"

static const char *const file_names[TBM_TOKENIZER_FILES] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    "tokenizer.model"};

const char *tbm_tokenizer_file_name(enum tbm_tokenizer_file f)
{
    return f < TBM_TOKENIZER_FILES ? file_names[f] : NULL;
}

/* Sets *why to a malloc'd line; returns status. */
static int fail(char **why, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(why, fmt, ap) < 0)
        *why = NULL;
    va_end(ap);
    return *why ? status : TBM_ERR_NOMEM;
}

/* One file of the directory: 1 when it is not there. */
static int read_file(int dirfd, const char *dir, enum tbm_tokenizer_file f,
                     struct tbm_tokenizer_files *out, char **why)
{
    struct tbm_named named;
    char *path, line[8192];
    int r;

    if (asprintf(&path, "%s/%s", dir, file_names[f]) < 0)
        return TBM_ERR_NOMEM;
    r = tbm_named_read(dirfd, file_names[f], path, TBM_TOKENIZER_FILE_MAX, &named, line,
                       sizeof(line));
    free(path);
    if (r == 0) {
        out->file[f].bytes = named.bytes;
        out->file[f].len = named.len;
        out->file[f].present = true;
    } else if (r < 0 && r != TBM_ERR_NOMEM) {
        r = fail(why, r, "%s", line);
    }
    return r;
}

int tbm_tokenizer_files_read(const char *dir, struct tbm_tokenizer_files *out, char **why)
{
    int r = 0;

    memset(out, 0, sizeof(*out));
    *why = NULL;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dirfd < 0) {
        int err = errno;
        return fail(why, TBM_ERR_SOURCE, "%s: %s", dir,
                    err == ENOTDIR ? "not a directory"
                    : err == ELOOP ? "a symlink loop"
                                   : strerror(err));
    }
    for (int f = 0; f < TBM_TOKENIZER_FILES; f++) {
        r = read_file(dirfd, dir, (enum tbm_tokenizer_file)f, out, why);
        if (r == 1 && f == TBM_TOKENIZER_JSON) {
            r = fail(why, 1, "%s: no tokenizer.json", dir);
            break;
        }
        if (r < 0)
            break;
        r = 0;
    }
    close(dirfd);
    if (r != 0)
        tbm_tokenizer_files_free(out);
    return r;
}

void tbm_tokenizer_files_free(struct tbm_tokenizer_files *files)
{
    for (int f = 0; f < TBM_TOKENIZER_FILES; f++) {
        free(files->file[f].bytes);
        files->file[f].bytes = NULL;
        files->file[f].len = 0;
        files->file[f].present = false;
    }
}
