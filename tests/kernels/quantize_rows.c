/* quantize_rows TYPE [LEVEL]: float32 values on standard input (a whole number of TYPE's
 * blocks) to TYPE's blocks on standard output, by tbm_quant_find(TYPE) on LEVEL (scalar, avx2,
 * avx512; the best this CPU has when left out). For the integration tests that rebuild a GGUF
 * file with tbmfs's kernels (test_q4km.py). Exit 2 on a bad argument or input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/kernels.h"

/* All of standard input in *out (malloc'd); its length, or -1 when out of memory. */
static long read_all(uint8_t **out)
{
    size_t cap = 1 << 20, n = 0, got;
    uint8_t *buf = malloc(cap), *more;

    while (buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            more = realloc(buf, cap *= 2);
            if (!more)
                free(buf);
            buf = more;
        }
    }
    *out = buf;
    return buf ? (long)n : -1;
}

int main(int argc, char **argv)
{
    const struct tbm_quant *q = argc >= 2 ? tbm_quant_find((uint32_t)atoi(argv[1])) : NULL;
    enum tbm_isa isa;
    uint8_t *in = NULL, *out = NULL;
    int status = 2;

    if (q == NULL || argc > 3 || tbm_isa_select(argc == 3 ? argv[2] : NULL, &isa) != 0) {
        fprintf(stderr, "usage: quantize_rows TYPE [scalar|avx2|avx512] < float32 > blocks "
                        "(TYPE a ggml type code tbmfs quantizes to, LEVEL one this CPU has)\n");
        return 2;
    }
    long n = read_all(&in);
    size_t block_in = q->block_elems * sizeof(float), blocks = n > 0 ? (size_t)n / block_in : 0;
    if (n < 0 || (size_t)n % block_in != 0 || !(out = malloc(blocks * q->block_bytes + 1))) {
        fprintf(stderr, "quantize_rows: %ld bytes of input are not whole %s blocks\n", n, q->name);
        goto cleanup;
    }
    q->quantize(isa, (const float *)(const void *)in, blocks, out);
    if (fwrite(out, 1, blocks * q->block_bytes, stdout) == blocks * q->block_bytes)
        status = 0;
cleanup:
    free(in);
    free(out);
    return status;
}
