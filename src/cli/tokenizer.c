/* Which tokenizer a mount uses (docs/MOUNT_LAYOUT.md, "Command line"
 * [v4]): -o tokenizer=DIR, refused like a bad option value when DIR cannot
 * be used; none; or by default the directory of a local SOURCE, used when it
 * holds tokenizer.json and passed over, with a line for model.json, when it
 * cannot be read. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "tbm/log.h"
#include "tbm/source.h"
#include "tbm/status.h"
#include "tbm/vocab.h"

/* The directory beside a local SOURCE: a manifest directory is its own, a
 * container's or a bare .tb's the one holding it. NULL: out of memory. */
static char *beside(const char *source)
{
    struct stat st;
    char *copy, *dir;

    if (stat(source, &st) == 0 && S_ISDIR(st.st_mode))
        return strdup(source);
    if (!(copy = strdup(source)))
        return NULL;
    dir = strdup(dirname(copy));
    free(copy);
    return dir;
}

int tbm_cli_tokenizer(const struct tbm_cli *cli, struct tbm_tokenizer_files *files, bool *found,
                      char **note)
{
    const char *source = cli->sources[0];
    char *dir, *why = NULL;
    int r;

    *found = false;
    *note = NULL;
    if (cli->tokenizer && strcmp(cli->tokenizer, "none") == 0)
        return 0;
    if (cli->tokenizer) {
        r = tbm_tokenizer_files_read(cli->tokenizer, files, &why);
        if (r != 0)
            tbm_log(TBM_LOG_ERROR, "tokenizer=%s: %s", cli->tokenizer, why ? why : "out of memory");
        free(why);
        *found = r == 0;
        return r == 0 ? 0 : r == TBM_ERR_NOMEM ? 1 : TBM_EXIT_USAGE;
    }
    if (tbm_source_is_url(source))
        return 0;
    if (!(dir = beside(source)))
        return 1;
    r = tbm_tokenizer_files_read(dir, files, &why);
    free(dir);
    *found = r == 0;
    if (r < 0 && r != TBM_ERR_NOMEM && why &&
        asprintf(note, "no tokenizer: %s (beside the source, so not used)", why) < 0)
        *note = NULL, r = TBM_ERR_NOMEM;
    free(why);
    if (r == TBM_ERR_NOMEM) {
        tbm_log(TBM_LOG_ERROR, "%s: out of memory reading its tokenizer", source);
        return 1;
    }
    return 0;
}
