/* The tokenizer's files at the mount's root (docs/MOUNT_LAYOUT.md, "Tree"
 * [v4]): each one byte for byte as read at mount, and only when the
 * tokenizer directory has it. */
#include "internal.h"

#include "tbm/vocab.h"

static enum tbm_tokenizer_file which(const struct tbm_row *row)
{
    return *(const enum tbm_tokenizer_file *)row->arg;
}

bool tbm_tokenizer_present(const struct tbm_views *v, const struct tbm_row *row)
{
    return v->opts.tokenizer && v->opts.tokenizer->file[which(row)].present;
}

/* The bytes stay the mount's (v->opts.tokenizer): the row only points at
 * them. */
int tbm_tokenizer_prepare(const struct tbm_views *v, const struct tbm_row *row, void **state)
{
    if (!tbm_tokenizer_present(v, row))
        return 0;
    const struct tbm_tokenizer_files *files = v->opts.tokenizer;
    return tbm_buffer_new(files->file[which(row)].bytes, files->file[which(row)].len, NULL, state);
}

/* A tokenizer directory beside the source that could not be read: one line
 * (every tokenizer row says it; model.json holds it once). */
int tbm_tokenizer_notes(const struct tbm_views *v, const struct tbm_row *row,
                        struct json_object *missing, struct json_object *notes, bool *expected)
{
    (void)row, (void)notes, (void)expected;
    return v->tokenizer_note ? tbm_json_add_once(missing, v->tokenizer_note) : 0;
}
