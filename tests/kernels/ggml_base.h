/* node-llama-cpp's libggml-base.so, where llama.cpp's reference quantizers live, for
 * test_quant_oracle and bench_quant: under TBMFS_LLAMA_DIR (default /opt/tbmfs-test/llama,
 * where scripts/install-deps.sh installs it), as the integration tests find node-llama-cpp. */
#ifndef TBM_TESTS_GGML_BASE_H
#define TBM_TESTS_GGML_BASE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define GGML_BASE_UNDER "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"

/* The library, or NULL (dlerror() says why). */
static inline void *ggml_base_open(void)
{
    const char *dir = getenv("TBMFS_LLAMA_DIR");
    char path[4096];

    if (dir == NULL || dir[0] == '\0')
        dir = "/opt/tbmfs-test/llama";
    /* a path cut short fails to open, with dlerror() saying so */
    snprintf(path, sizeof path, "%s%s", dir, GGML_BASE_UNDER);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

#endif
