/* The tokenizer beside a model (docs/MOUNT_LAYOUT.md, "Command line" and
 * "Vocabulary [v4]"): its five files read once, kept byte for byte, and the
 * vocabulary that the GGUF files carry, built from tokenizer.json and
 * tokenizer_config.json into a compact immutable form. */
#ifndef TBM_VOCAB_H
#define TBM_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The files of a tokenizer directory, in the order the mount lists them. */
enum tbm_tokenizer_file {
    TBM_TOKENIZER_JSON,        /* tokenizer.json: the only one required */
    TBM_TOKENIZER_CONFIG,      /* tokenizer_config.json */
    TBM_TOKENIZER_SPECIAL_MAP, /* special_tokens_map.json */
    TBM_TOKENIZER_GENERATION,  /* generation_config.json */
    TBM_TOKENIZER_MODEL,       /* tokenizer.model */
    TBM_TOKENIZER_FILES
};

/* Most bytes read of each file. */
#define TBM_TOKENIZER_FILE_MAX (64u << 20)

/* The most token ids a vocabulary may have (vocab_size): more is refused
 * rather than laid out (llama.cpp's ids are int32; the largest tokenizers
 * have a few hundred thousand). */
#define TBM_VOCAB_SIZE_MAX (16u << 20)

struct tbm_tokenizer_files {
    struct {
        bool present;
        char *bytes; /* len bytes as read (and a NUL after them) */
        size_t len;
    } file[TBM_TOKENIZER_FILES];
};

/* The file's name in the directory (and at the mount's root). */
const char *tbm_tokenizer_file_name(enum tbm_tokenizer_file f);

/* Reads the files of directory dir: each opened without blocking (a FIFO, a
 * device, a directory or a symlink loop in its place is refused at once;
 * symlinks are followed, as in a Hugging Face cache), checked to be a regular
 * file, and read whole, at most TBM_TOKENIZER_FILE_MAX bytes. Returns 0 when
 * tokenizer.json and whatever else is there were read; 1 when dir has no
 * tokenizer.json; TBM_ERR_SOURCE when dir is no readable directory or a file
 * there cannot be read or is too large; TBM_ERR_NOMEM. Unless 0, *why is a
 * malloc'd line naming the file and the reason (NULL when out of memory) and
 * out holds nothing. */
int tbm_tokenizer_files_read(const char *dir, struct tbm_tokenizer_files *out, char **why);
void tbm_tokenizer_files_free(struct tbm_tokenizer_files *files);

/* The two kinds of tokenizer.json llama.cpp can use. */
enum tbm_vocab_kind {
    TBM_VOCAB_GPT2, /* byte-level BPE: tokenizer.ggml.model "gpt2", a pre-tokenizer, merges */
    TBM_VOCAB_LLAMA /* BPE with byte fallback: "llama", scores in the merges' order */
};

/* GGUF token types (llama.cpp's llama_token_type). */
enum tbm_token_type {
    TBM_TOKEN_NORMAL = 1,
    TBM_TOKEN_UNKNOWN = 2,
    TBM_TOKEN_CONTROL = 3,      /* an added token marked special */
    TBM_TOKEN_USER_DEFINED = 4, /* another added token */
    TBM_TOKEN_UNUSED = 5,       /* [PAD<id>]: an id the tokenizer does not have */
    TBM_TOKEN_BYTE = 6          /* <0xXX> of the llama kind */
};

/* What the vocabulary says beside its tokens; ids are -1 when absent. */
struct tbm_vocab_info {
    enum tbm_vocab_kind kind;
    const char *pre;   /* llama.cpp pre-tokenizer name (gpt2 kind), else NULL */
    uint32_t n_tokens; /* vocab_size: ids 0 to n_tokens - 1 */
    uint32_t n_merges; /* merges written (gpt2 kind), else 0 */
    int64_t bos, eos, unk, pad;
    bool add_bos, add_eos;
    bool add_space_prefix;     /* llama kind only */
    const char *chat_template; /* NUL-terminated, or NULL */
    size_t chat_template_len;
    size_t kept_bytes; /* memory the vocabulary keeps */
};

struct tbm_vocab;

/* Builds the vocabulary of files for a model of vocab_size token ids.
 * Returns 0, TBM_ERR_SOURCE when tokenizer.json cannot be used (*why then
 * says why, in the words that follow "no vocabulary in model.gguf: ", e.g.
 * "tokenizer.json has 151669 tokens, vocab_size is 151000"), or
 * TBM_ERR_NOMEM (*why NULL). The parse is freed before it returns. */
int tbm_vocab_build(const struct tbm_tokenizer_files *files, uint64_t vocab_size,
                    struct tbm_vocab **out, char **why);
void tbm_vocab_free(struct tbm_vocab *v);

void tbm_vocab_get_info(const struct tbm_vocab *v, struct tbm_vocab_info *info);

/* Token id's text (id < n_tokens): *len bytes, not NUL-terminated, valid
 * until v is freed; a [PAD<id>] is written into pad and returned from there. */
const char *tbm_vocab_token(const struct tbm_vocab *v, uint32_t id, char pad[24], size_t *len);
enum tbm_token_type tbm_vocab_token_type(const struct tbm_vocab *v, uint32_t id);
float tbm_vocab_score(const struct tbm_vocab *v, uint32_t id); /* llama kind, else 0 */
/* Merge rank r's "left right" (r < n_merges). */
const char *tbm_vocab_merge(const struct tbm_vocab *v, uint32_t r, size_t *len);

/* The GGUF key-values of the vocabulary, in the contract's order from
 * tokenizer.ggml.model to tokenizer.chat_template: how many, their exact
 * size in bytes, and the bytes (size of them written to dst). */
uint64_t tbm_vocab_kv_count(const struct tbm_vocab *v);
uint64_t tbm_vocab_kv_size(const struct tbm_vocab *v);
void tbm_vocab_kv_write(const struct tbm_vocab *v, uint8_t *dst);

#endif
