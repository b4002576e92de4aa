/* The fuzz target's entry point, shared by the libFuzzer build and the
 * replay driver that runs it without libFuzzer. */
#ifndef TBM_FUZZ_TARGET_H
#define TBM_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input through the target; aborts on a broken
 * invariant. Always returns 0, as libFuzzer requires. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
