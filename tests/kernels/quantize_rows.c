/* quantize_rows TYPE [LEVEL]: float32 values on standard input (a whole number of TYPE's
 * blocks) to TYPE's blocks on standard output, by tbm_quant_find(TYPE) on LEVEL (scalar, avx2,
 * avx512; the best this CPU has when left out). For the integration tests that rebuild a GGUF
 * file with tbmfs's kernels (test_q4km.py). Exit 2 on a bad argument or input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbm/kernels.h"

int main(int argc, char **argv)
{
    const struct tbm_quant *q = argc >= 2 ? tbm_quant_find((uint32_t)atoi(argv[1])) : NULL;
    size_t cap = 1 << 20, n = 0, got;
    enum tbm_isa isa;
    float *x = malloc(cap);
    uint8_t *out;

    if (q == NULL || argc > 3 || tbm_isa_select(argc == 3 ? argv[2] : NULL, &isa) != 0 || !x) {
        fprintf(stderr, "usage: quantize_rows TYPE [scalar|avx2|avx512] < float32 > blocks "
                        "(TYPE a ggml type code tbmfs quantizes to, LEVEL one this CPU has)\n");
        return 2;
    }
    while ((got = fread((uint8_t *)x + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap && !(x = realloc(x, cap *= 2)))
            return 2;
    }
    size_t block_in = q->block_elems * sizeof(float), blocks = n / block_in;
    if (n % block_in != 0 || !(out = malloc(blocks * q->block_bytes + 1))) {
        fprintf(stderr, "quantize_rows: %zu bytes of input are not whole %s blocks\n", n, q->name);
        return 2;
    }
    q->quantize(isa, x, blocks, out);
    return fwrite(out, 1, blocks * q->block_bytes, stdout) == blocks * q->block_bytes ? 0 : 2;
}
