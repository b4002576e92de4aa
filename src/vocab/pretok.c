/* Which llama.cpp pre-tokenizer splits text as a byte-level tokenizer.json's
 * pre_tokenizer does. llama.cpp's converter names it by hashing a
 * tokenization; the daemon cannot tokenize, so the name is found by the
 * rules instead: the pre_tokenizer's splits (Split regexes, Digits, the
 * ByteLevel step's own regex) against the splits each name stands for in
 * llama.cpp's src/llama-vocab.cpp (release v0.4.0, the one node-llama-cpp
 * 3.21.1 bundles), written here as Hugging Face writes them in
 * tokenizer.json (llama.cpp rewrites some, e.g. (?i:'s) as '[sS], for its
 * own regex engine). */
#include "internal.h"

#include <string.h>

/* Hugging Face's ByteLevel pre-tokenizer's regex (use_regex), GPT-2's. */
#define GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* The same as some tokenizers spell it in a Split, without the last \s+ (a
 * whitespace character the rest leaves is a piece of its own either way). */
#define GPT2_SHORT   "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define LLAMA3                                                                                     \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"      \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2                                                                                      \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"           \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN35                                                                                     \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"       \
                 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define GPT4O                                                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" UPPER     \
    "+" LOWER "*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"      \
    "\\s+(?!\\S)|\\s+"
#define TEKKEN                                                                                     \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER            \
    "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek V3's tokenizer.json holds real CR and LF characters in these. */
#define DEEPSEEK3_CJK "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
#define DEEPSEEK3                                                                                  \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"             \
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define SEED_CODER                                                                                 \
    CONTRACTIONS "|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\r\n]+|\\s*[\r\n]+|"   \
                 "\\s+(?!\\S)|\\s+"
#define DIGIT  "\\p{N}"
#define DIGITS "\\p{N}+"

#define MAX_SPLITS 4

/* A name and the splits it stands for; ignore_merges and clean_spaces are
 * llama.cpp's settings for it (a word that is a token is taken whole; spaces
 * before punctuation dropped when decoding), which tell apart names of the
 * same splits. total: every character falls in a match of each regex, so
 * keeping what matches ("Removed" with "invert") splits as "Isolated". */
struct row {
    const char *name;
    const char *split[MAX_SPLITS];
    bool ignore_merges, clean_spaces, total;
};

static const struct row rows[] = {
    {"gpt-2", {GPT2}, false, true, false},
    {"gpt-2", {GPT2_SHORT}, false, true, false},
    {"llama-bpe", {LLAMA3}, true, true, true},
    {"dbrx", {LLAMA3}, false, true, true},
    {"qwen2", {QWEN2}, false, false, true},
    {"stablelm2", {QWEN2}, false, true, true},
    {"qwen35", {QWEN35}, false, false, true},
    {"gpt-4o", {GPT4O}, false, false, true},
    {"tekken", {TEKKEN}, true, false, true},
    {"deepseek-v3", {DIGIT "{1,3}", DEEPSEEK3_CJK, DEEPSEEK3}, false, false, false},
    {"starcoder", {DIGIT, GPT2}, false, true, false},
    {"smollm", {DIGIT, GPT2}, false, false, false},
    {"seed-coder", {SEED_CODER}, false, false, true},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* The tokenizer's splits, in order. */
struct splits {
    const char *regex[MAX_SPLITS];
    bool removed[MAX_SPLITS]; /* "Removed" with "invert": only the matches kept */
    size_t n;
    bool byte_level; /* a ByteLevel step came last */
};

static const char *str_member(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* A boolean member: def when absent, -1 when not a boolean. */
static int bool_member(struct json_object *o, const char *key, int def)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return def;
    if (!json_object_is_type(v, json_type_boolean))
        return -1;
    return json_object_get_boolean(v);
}

static bool push(struct splits *s, const char *regex, bool removed, const char **why)
{
    if (s->byte_level) {
        *why = "tokenizer.json's pre_tokenizer splits after its ByteLevel step";
        return false;
    }
    if (s->n == MAX_SPLITS) {
        *why = "llama.cpp has no pre-tokenizer with the rules of tokenizer.json's pre_tokenizer";
        return false;
    }
    s->regex[s->n] = regex;
    s->removed[s->n++] = removed;
    return true;
}

static bool split_step(struct json_object *step, struct splits *s, const char **why)
{
    struct json_object *pattern;
    const char *behavior = str_member(step, "behavior");
    int invert = bool_member(step, "invert", 0);

    if (!json_object_object_get_ex(step, "pattern", &pattern) || !str_member(pattern, "Regex")) {
        *why = "tokenizer.json's pre_tokenizer splits on a string, which llama.cpp does not";
        return false;
    }
    bool isolated = behavior && strcmp(behavior, "Isolated") == 0 && invert == 0;
    bool removed = behavior && strcmp(behavior, "Removed") == 0 && invert == 1;
    if (!isolated && !removed) {
        *why = "tokenizer.json's pre_tokenizer splits in a way llama.cpp does not (its "
               "Split is neither Isolated nor Removed and inverted)";
        return false;
    }
    return push(s, str_member(pattern, "Regex"), removed, why);
}

static bool byte_level_step(struct json_object *step, struct splits *s, const char **why)
{
    if (bool_member(step, "add_prefix_space", 0) != 0) {
        *why = "tokenizer.json's ByteLevel pre-tokenizer adds a space before the text, which "
               "llama.cpp does not";
        return false;
    }
    int use_regex = bool_member(step, "use_regex", 1);
    if (use_regex < 0) {
        *why = "tokenizer.json's ByteLevel pre-tokenizer has a use_regex that is not a boolean";
        return false;
    }
    if (use_regex && !push(s, GPT2, false, why))
        return false;
    s->byte_level = true;
    return true;
}

static bool collect(struct json_object *pre, struct splits *s, const char **why)
{
    const char *type = str_member(pre, "type");
    struct json_object *steps;

    if (!type) {
        *why = "tokenizer.json's pre_tokenizer has no type";
        return false;
    }
    if (strcmp(type, "Sequence") == 0) {
        if (!json_object_object_get_ex(pre, "pretokenizers", &steps) ||
            !json_object_is_type(steps, json_type_array)) {
            *why = "tokenizer.json's Sequence pre-tokenizer has no pretokenizers array";
            return false;
        }
        for (size_t i = 0; i < json_object_array_length(steps); i++)
            if (!collect(json_object_array_get_idx(steps, i), s, why))
                return false;
        return true;
    }
    if (strcmp(type, "Split") == 0)
        return split_step(pre, s, why);
    if (strcmp(type, "ByteLevel") == 0)
        return byte_level_step(pre, s, why);
    if (strcmp(type, "Digits") == 0) {
        int single = bool_member(pre, "individual_digits", 0);
        if (single < 0) {
            *why = "tokenizer.json's Digits pre-tokenizer has an individual_digits that is not a "
                   "boolean";
            return false;
        }
        return push(s, single ? DIGIT : DIGITS, false, why);
    }
    *why = "tokenizer.json's pre_tokenizer has a step llama.cpp does not have";
    return false;
}

static bool same_splits(const struct row *r, const struct splits *s)
{
    for (size_t i = 0; i < MAX_SPLITS; i++) {
        if (i == s->n)
            return r->split[i] == NULL;
        if (!r->split[i] || strcmp(r->split[i], s->regex[i]) != 0 || (s->removed[i] && !r->total))
            return false;
    }
    return true;
}

const char *pretok_name(struct json_object *pre_tokenizer, bool ignore_merges, bool clean_spaces,
                        const char **why)
{
    struct splits s = {0};
    const struct row *best = NULL;
    int best_score = -1;

    if (!pre_tokenizer || json_object_is_type(pre_tokenizer, json_type_null)) {
        *why = "tokenizer.json has no pre_tokenizer";
        return NULL;
    }
    if (!collect(pre_tokenizer, &s, why))
        return NULL;
    if (!s.byte_level) {
        *why = "tokenizer.json's pre_tokenizer does not end in a ByteLevel step";
        return NULL;
    }
    /* Among the names of the same splits, the one whose merges and decoding
     * are the tokenizer's too; merges first, as they change the ids. */
    for (size_t i = 0; i < NROWS; i++) {
        if (!same_splits(&rows[i], &s))
            continue;
        int score =
            2 * (rows[i].ignore_merges == ignore_merges) + (rows[i].clean_spaces == clean_spaces);
        if (score > best_score) {
            best = &rows[i];
            best_score = score;
        }
    }
    if (!best) {
        *why = "llama.cpp has no pre-tokenizer with the rules of tokenizer.json's pre_tokenizer";
        return NULL;
    }
    return best->name;
}
