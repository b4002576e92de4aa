/* Precision sizes and names, and the choice of instruction-set level: what the CPU has
 * and what the OS saves on a context switch. */
#include <cpuid.h>
#include <string.h>

#include "tbm/kernels.h"

/* XCR0 state components: SSE and the upper YMM halves for AVX; the opmask
 * registers and both ZMM parts on top of them for AVX-512. */
#define XCR0_AVX    UINT64_C(0x06)
#define XCR0_AVX512 UINT64_C(0xE6)

size_t tbm_precision_size(unsigned code)
{
    switch (code) {
    case TBM_FP32:
        return 4;
    case TBM_FP16:
    case TBM_BF16:
        return 2;
    case TBM_FP64:
        return 8;
    }
    return 0;
}

const char *tbm_precision_name(unsigned code)
{
    static const char *const names[] = {"fp32", "fp16", "bf16", "fp64"};

    return code < sizeof(names) / sizeof(names[0]) ? names[code] : NULL;
}

const char *tbm_isa_name(enum tbm_isa isa)
{
    switch (isa) {
    case TBM_ISA_AVX2:
        return "avx2";
    case TBM_ISA_AVX512:
        return "avx512";
    case TBM_ISA_SCALAR:
        break;
    }
    return "scalar";
}

/* Whether the OS has enabled every state component in want. XGETBV exists
 * only when CPUID reports OSXSAVE. */
static bool os_saves(uint64_t want)
{
    unsigned eax, ebx, ecx, edx, lo, hi;

    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE))
        return false;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((((uint64_t)hi << 32) | lo) & want) == want;
}

/* F16C is read from CPUID directly: clang's __builtin_cpu_supports does not
 * know its name. */
static bool cpu_has_f16c(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}

/* The AVX2 level also covers what the compiler may emit under its flags
 * (-mavx2 implies POPCNT; -mbmi2, -mf16c, -mfma). */
static bool cpu_has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") && os_saves(XCR0_AVX);
}

static bool cpu_has_avx512(void)
{
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && os_saves(XCR0_AVX512);
}

bool tbm_isa_supported(enum tbm_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case TBM_ISA_SCALAR:
        return true;
    case TBM_ISA_AVX2:
        return cpu_has_avx2();
    case TBM_ISA_AVX512:
        return cpu_has_avx512();
    }
    return false;
}

/* The level an exact name means; -1 for any other name. */
static int isa_from_name(const char *name, enum tbm_isa *out)
{
    static const enum tbm_isa all[] = {TBM_ISA_SCALAR, TBM_ISA_AVX2, TBM_ISA_AVX512};

    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, tbm_isa_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

int tbm_isa_select(const char *env, enum tbm_isa *out)
{
    enum tbm_isa isa;

    if (env == NULL || env[0] == '\0') {
        *out = tbm_isa_supported(TBM_ISA_AVX512) ? TBM_ISA_AVX512
               : tbm_isa_supported(TBM_ISA_AVX2) ? TBM_ISA_AVX2
                                                 : TBM_ISA_SCALAR;
        return 0;
    }
    if (isa_from_name(env, &isa) != 0 || !tbm_isa_supported(isa))
        return -1;
    *out = isa;
    return 0;
}
