/* Writes the GGUF key-values of a tokenizer directory's vocabulary (src/vocab)
 * for the integration tests to compare with ggufref.py's: vocab_kv DIR
 * VOCAB_SIZE OUT. Exit 0 with OUT written, 1 with the reason on stdout when
 * the vocabulary cannot be used, 2 when DIR cannot be read. */
#include "tbm/vocab.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    struct tbm_tokenizer_files files;
    struct tbm_vocab *v;
    char *why;

    if (argc != 4) {
        fprintf(stderr, "usage: vocab_kv DIR VOCAB_SIZE OUT\n");
        return 2;
    }
    if (tbm_tokenizer_files_read(argv[1], &files, &why) != 0) {
        printf("%s\n", why ? why : "out of memory");
        return 2;
    }
    int r = tbm_vocab_build(&files, strtoull(argv[2], NULL, 10), &v, &why);
    tbm_tokenizer_files_free(&files);
    if (r != 0) {
        printf("%s\n", why ? why : "out of memory");
        free(why);
        return 1;
    }
    uint64_t size = tbm_vocab_kv_size(v);
    uint8_t *bytes = malloc(size);
    FILE *out = fopen(argv[3], "wb");
    if (!bytes || !out) {
        perror(argv[3]);
        return 2;
    }
    tbm_vocab_kv_write(v, bytes);
    if (fwrite(bytes, 1, size, out) != size || fclose(out) != 0) {
        perror(argv[3]);
        return 2;
    }
    printf("%llu keys\n", (unsigned long long)tbm_vocab_kv_count(v));
    free(bytes);
    tbm_vocab_free(v);
    return 0;
}
