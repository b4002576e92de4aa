/* The layout of a GGUF file (model.gguf, model.Q8_0.gguf, model.Q4_K_M.gguf) shared by the
 * file that fixes it at mount (gguf_layout.c) and the one that serves reads
 * (gguf.c). */
#ifndef TBM_VIEWS_GGUF_H
#define TBM_VIEWS_GGUF_H

#include "arch.h"
#include "internal.h"

/* GGUF tensor types (ggml's enum ggml_type). */
enum {
    TBM_GGUF_F32 = 0,
    TBM_GGUF_F16 = 1,
    TBM_GGUF_Q5_0 = 6,
    TBM_GGUF_Q5_1 = 7,
    TBM_GGUF_Q8_0 = 8,
    TBM_GGUF_Q4_K = 12,
    TBM_GGUF_Q5_K = 13,
    TBM_GGUF_Q6_K = 14,
    TBM_GGUF_BF16 = 30,
};

/* A tensor of the files, in index order. */
struct tbm_gguf_tensor {
    size_t t;   /* in the model */
    char *name; /* its GGUF name */
    long layer; /* N of blk.N., -1 for a whole-model tensor */
    bool matrix;
    uint64_t rows, cols; /* 1 x n for a 1-D tensor */
    uint32_t heads;      /* rows permuted as llama.cpp's converter does, in that
                          * many heads (attn_q, attn_k of Hugging Face names); 0: not */
};

/* A tensor's data in one file: [start, start + len), then zeros to 32. */
struct tbm_gguf_piece {
    uint64_t start, len;
    size_t k; /* in tbm_gguf.tensors */
    uint32_t type;
};

/* The vocabulary's key-values (tokenizer.ggml.model to
 * tokenizer.chat_template), rendered once at mount for every GGUF file
 * (gguf_vocab.c); or, when the tokenizer cannot be used, why. */
struct tbm_gguf_vocab {
    char *kv; /* NULL: none (the files say tokenizer.ggml.model "none") */
    size_t len;
    uint64_t count;
    char *missing; /* "no vocabulary in model.gguf: ...", or NULL */
};

/* The vocabulary of tokenizer files (NULL: none) for a model of that
 * config; 0, or TBM_ERR_NOMEM. */
int tbm_gguf_vocab_open(const struct tbm_tokenizer_files *files, const struct json_object *config,
                        struct tbm_gguf_vocab **out);
void tbm_gguf_vocab_free(struct tbm_gguf_vocab *vocab);

struct tbm_gguf_file {
    /* everything before the data, padded to 32: head_len bytes, of which
     * head holds the first vocab_at, then the rest after the vocabulary's
     * vocab_len bytes (shared, not copied) */
    char *head;
    size_t head_len;
    size_t vocab_at;
    const char *vocab;
    size_t vocab_len;
    struct tbm_gguf_piece *pieces; /* by start */
    size_t npieces;
    uint64_t size;
};

/* What a variant's rule may ask of the whole model besides the tensor. */
struct tbm_gguf_model {
    uint32_t layers;
    bool type_70b; /* llama.cpp takes it for a 70B model (arch.h) */
    bool output;   /* output.weight is there (else token_embd is the output too) */
};

/* A GGUF file of the model, a row's arg: the rule that gives each tensor
 * its type in the file, and what its header says of them. */
struct tbm_gguf_variant {
    /* the type of tensor gt, stored in precision, in the file of model m */
    uint32_t (*type)(const struct tbm_gguf_model *m, const struct tbm_gguf_tensor *gt,
                     unsigned precision);
    uint32_t file_type; /* general.file_type, or TBM_GGUF_FILE_TYPE_MOST */
    bool quantized;     /* general.quantization_version is written */
    /* the file is model.gguf rewritten by llama_model_quantize: tensors in
     * its order (layer, then name), dimensions as ggml counts them (trailing
     * 1s dropped), general.quantization_version and general.file_type last */
    bool requantized;
};

/* general.file_type: that of the type most matrix elements have (llama.cpp's
 * 0 F32, 1 F16, 32 BF16; the lower number on a tie). */
#define TBM_GGUF_FILE_TYPE_MOST UINT32_MAX

/* model.gguf's type of a tensor: a matrix in its stored precision (fp64 as
 * F32), the rest F32. */
uint32_t tbm_gguf_stored_type(const struct tbm_gguf_tensor *gt, unsigned precision);

/* A GGUF row's state: which tensors go in under which name (or why the
 * model cannot be a GGUF), and the file's layout, fixed at mount. */
struct tbm_gguf {
    const struct tbm_arch *arch; /* NULL: an architecture with no GGUF file */
    bool ok;                     /* the file exists */
    char *missing;               /* an arch but no file: why, one line for model.json */
    struct tbm_gguf_tensor *tensors;
    size_t ntensors;
    struct tbm_gguf_file file;
};

#endif
