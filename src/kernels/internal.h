/* Internals shared by the kernel files of src/kernels: the per-level entry
 * points behind the dispatchers and the reading of N:M masks as element bits. */
#ifndef TBM_KERNELS_INTERNAL_H
#define TBM_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__BMI2__)
#include <immintrin.h>
#endif

#include "tbm/kernels.h"

/* The SIMD files' helpers: always inlined, so that a constant argument (a
 * precision, an m, a value kind) gives each copy of a loop its own code. */
#define TBM_INLINE static inline __attribute__((always_inline))

/* Per-level bodies of tbm_expand, tbm_mask_apply and tbm_mask_count, same
 * contracts. The scalar ones are the portable reference the others must match
 * bit for bit. */
void tbm_expand_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out);
void tbm_expand_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask, uint32_t m,
                     uint64_t first, size_t count, float *out);
void tbm_expand_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                       uint32_t m, uint64_t first, size_t count, float *out);

bool tbm_mask_apply_scalar(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                           uint64_t first, size_t count);
bool tbm_mask_apply_avx2(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                         uint64_t first, size_t count);
bool tbm_mask_apply_avx512(enum tbm_precision prec, void *weights, const uint8_t *mask, uint32_t m,
                           uint64_t first, size_t count);

void tbm_mask_count_scalar(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc);
void tbm_mask_count_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc);
void tbm_mask_count_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc);

/* Per-level bodies of tbm_q8_0_quantize. */
void tbm_q8_0_scalar(const float *x, size_t blocks, uint8_t *out);
void tbm_q8_0_avx2(const float *x, size_t blocks, uint8_t *out);
void tbm_q8_0_avx512(const float *x, size_t blocks, uint8_t *out);

/* tbm_precision_size for the four precisions, visible to the compiler so
 * that loops specialised on a precision get a constant. */
static inline size_t tbm_element_size(enum tbm_precision prec)
{
    return prec == TBM_FP64 ? 8 : prec == TBM_FP32 ? 4 : 2;
}

/* float32 bits of an fp16 value as x86 F16C (vcvtph2ps) gives them: exact
 * for every finite value, and a NaN keeps its payload but is made quiet. */
static inline uint32_t tbm_f16_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = h >> 10 & 0x1F;
    uint32_t frac = h & 0x3FF;

    if (exp == 0x1F)
        return sign | 0x7F800000 | frac << 13 | (frac != 0 ? 0x400000 : 0);
    if (exp != 0)
        return sign | (exp + 112) << 23 | frac << 13;
    if (frac == 0)
        return sign;
    /* A subnormal half is a normal float32: frac * 2^-24, normalised. */
    exp = 113;
    while (!(frac & 0x400)) {
        frac <<= 1;
        exp--;
    }
    return sign | exp << 23 | (frac & 0x3FF) << 13;
}

/* float32 bits of a bf16 value: its upper half. */
static inline uint32_t tbm_bf16_bits(uint16_t h)
{
    return (uint32_t)h << 16;
}

/* fp16 bits of the float32 whose bits are f, as x86 F16C (vcvtps2ph, round
 * to nearest even) gives them: too large for fp16 becomes infinity, a NaN
 * keeps the top of its payload and is made quiet. */
static inline uint16_t tbm_f16_from_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)(f >> 16 & 0x8000);
    uint32_t abs = f & 0x7FFFFFFF;

    if (abs > 0x7F800000)
        return sign | 0x7E00 | (uint16_t)(abs >> 13 & 0x3FF);
    if (abs >= 0x477FF000) /* 65520 and up: past the tie with 65504 */
        return sign | 0x7C00;
    if (abs >= 0x38800000) { /* a normal fp16: the exponent rebiased by 112 */
        uint32_t r = abs - 0x38000000;
        return sign | (uint16_t)((r + 0xFFF + (r >> 13 & 1)) >> 13);
    }
    if (abs < 0x33000000) /* below 2^-25, or the tie at it: +-0 */
        return sign;
    /* a subnormal fp16, in units of 2^-24: the significand shifted by 14 to 24 */
    uint32_t e = abs >> 23, sig = (abs & 0x7FFFFF) | 0x800000, shift = 126 - e;
    uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | (uint16_t)(q + (rem > half || (rem == half && (q & 1))));
}

/* The Q8_0 scale of a block of finite values whose largest |x| is amax: d
 * as fp16 bits, and in *id the multiplier of every value. Where 1 / d is
 * infinite (amax below about 2^-121, d then 0 as fp16), llama.cpp's
 * reference multiplies to +-inf or NaN and converts that to int8 as x86 does,
 * giving 0: id 0 gives the same. */
static inline uint16_t tbm_q8_0_scale(float amax, float *id)
{
    float d = amax / 127.0f;
    float inv = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t bits;

    memcpy(&bits, &d, sizeof bits);
    *id = inv > 3.40282347e38f ? 0.0f : inv;
    return tbm_f16_from_bits(bits);
}

/* What a block holding a NaN or an infinity gets: the F16 quiet NaN as d and
 * every q 0, so that the fault reaches the model's output. */
static inline void tbm_q8_0_nonfinite(uint8_t *out)
{
    out[0] = 0x00;
    out[1] = 0x7E;
    memset(out + 2, 0, TBM_Q8_0_ELEMS);
}

/* Stores d, little-endian, at the start of a block. */
static inline void tbm_q8_0_store_d(uint8_t *out, uint16_t d)
{
    out[0] = (uint8_t)d;
    out[1] = (uint8_t)(d >> 8);
}

/* The bits of a group's word that name elements: 0 .. m-1. */
static inline uint32_t tbm_mask_valid_bits(uint32_t m)
{
    return (uint32_t)((UINT64_C(1) << m) - 1);
}

/* Little-endian loads at any alignment. Every path runs on x86, which is
 * little-endian like the format. */
static inline uint16_t tbm_load16(const uint8_t *p)
{
    uint16_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t tbm_load32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t tbm_load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

/* A group's mask word of word_bytes (1, 2 or 4) bytes. */
static inline uint32_t tbm_mask_word(const uint8_t *p, uint32_t word_bytes)
{
    return word_bytes == 1 ? p[0] : word_bytes == 2 ? tbm_load16(p) : tbm_load32(p);
}

/* A mask read as one bit per element in element order, a group at a time,
 * so that any m and any starting position cost the same code. */
struct tbm_mask_stream {
    const uint8_t *next; /* word of the next group to read */
    uint64_t bits;       /* pending element bits, the next element in bit 0 */
    uint32_t pending;    /* how many bits of bits are pending */
    uint32_t m;
    uint32_t word_bytes;
    uint32_t valid;
};

/* Starts at position j of the group whose word is at mask. Reads nothing
 * when j is 0, so that a caller may also walk whole groups from mask itself. */
static inline void tbm_mask_stream_init(struct tbm_mask_stream *s, const uint8_t *mask, uint32_t m,
                                        uint32_t j)
{
    s->next = mask;
    s->bits = 0;
    s->pending = 0;
    s->m = m;
    s->word_bytes = tbm_mask_word_bytes(m);
    s->valid = tbm_mask_valid_bits(m);
    if (j == 0)
        return;
    s->bits = (tbm_mask_word(mask, s->word_bytes) & s->valid) >> j;
    s->pending = m - j;
    s->next += s->word_bytes;
}

/* The bits of the next n elements (1..32). Only words of groups that hold
 * one of those elements are read, so a range's last word is never overrun;
 * pending stays below n + m <= 64 bits. */
static inline uint64_t tbm_mask_stream_take(struct tbm_mask_stream *s, uint32_t n)
{
    uint64_t out;

    while (s->pending < n) {
        s->bits |= (uint64_t)(tbm_mask_word(s->next, s->word_bytes) & s->valid) << s->pending;
        s->pending += s->m;
        s->next += s->word_bytes;
    }
    out = s->bits & ((UINT64_C(1) << n) - 1);
    s->bits >>= n;
    s->pending -= n;
    return out;
}

/* Group sizes whose 64-element blocks are whole groups: the common ones,
 * whose element bits sit at fixed places of the mask bytes, so that vector
 * loops can take them without walking the groups. */
static inline bool tbm_mask_blocks(uint32_t m)
{
    return m <= 32 && (m & (m - 1)) == 0;
}

/* Mask bytes of one 64-element block (m as for tbm_mask_blocks). */
static inline uint32_t tbm_mask_block_bytes(uint32_t m)
{
    return 64 / m * tbm_mask_word_bytes(m);
}

/* Packs the low bit of each of 8 bytes into 8 bits: the multiply moves byte
 * i's bit to bit 56 + i, and no two partial products share a bit. */
static inline uint64_t tbm_pack_bits1(uint64_t x)
{
    return ((x & 0x0101010101010101) * 0x0102040810204080) >> 56;
}

/* Packs the low 2 bits of each of 8 bytes into 16 bits. */
static inline uint64_t tbm_pack_bits2(uint64_t x)
{
    x &= 0x0303030303030303;
    x = (x | x >> 6) & 0x000F000F000F000F;
    x = (x | x >> 12) & 0x000000FF000000FF;
    return (x | x >> 24) & 0xFFFF;
}

/* Packs the low 4 bits of each of 8 bytes into 32 bits. */
static inline uint64_t tbm_pack_bits4(uint64_t x)
{
    x &= 0x0F0F0F0F0F0F0F0F;
    x = (x | x >> 4) & 0x00FF00FF00FF00FF;
    x = (x | x >> 8) & 0x0000FFFF0000FFFF;
    return (x | x >> 16) & 0xFFFFFFFF;
}

/* The low n (1, 2 or 4; nothing else) bits of each of 8 bytes, packed. The
 * AVX-512 level (built with BMI2) takes pext, one instruction where the
 * shifts take up to eleven (tbm_mask_apply on 2:4 bf16, Zen 5: 4.5 cycles
 * per 64-element block against 7.8), fast on every CPU that level runs on;
 * the other levels shift and multiply, as pext is microcoded on AMD before
 * Zen 3, CPUs that run the AVX2 path. */
static inline uint64_t tbm_pack_bits(uint64_t x, unsigned n)
{
#if defined(__AVX512F__) && defined(__BMI2__)
    return _pext_u64(x, UINT64_C(0x0101010101010101) * ((1u << n) - 1));
#else
    return n == 1 ? tbm_pack_bits1(x) : n == 2 ? tbm_pack_bits2(x) : tbm_pack_bits4(x);
#endif
}

/* Element bits of the 64-element block whose first group's word is at mask. */
static inline uint64_t tbm_mask_block_bits(uint32_t m, const uint8_t *mask)
{
    uint64_t bits = 0;

    switch (m) {
    case 1:
        for (unsigned i = 0; i < 8; i++)
            bits |= tbm_pack_bits(tbm_load64(mask + 8 * i), 1) << (8 * i);
        return bits;
    case 2:
        for (unsigned i = 0; i < 4; i++)
            bits |= tbm_pack_bits(tbm_load64(mask + 8 * i), 2) << (16 * i);
        return bits;
    case 4:
        return tbm_pack_bits(tbm_load64(mask), 4) | tbm_pack_bits(tbm_load64(mask + 8), 4) << 32;
    }
    /* m = 8, 16, 32: every bit of the words names an element */
    return tbm_load64(mask);
}

/* Zeroes the elements among count (< 64) at w of size es whose bit in bits
 * is clear and whose bytes are not all zero; returns whether there was one.
 * The tails of tbm_mask_apply on every level: count elements, no more, are
 * read and written. */
static inline bool tbm_clear_pruned_bits(uint8_t *w, size_t es, uint64_t bits, size_t count)
{
    bool changed = false;

    for (size_t k = 0; k < count; k++, w += es) {
        uint64_t x = 0;

        if (bits >> k & 1)
            continue;
        memcpy(&x, w, es);
        if (x != 0) {
            memset(w, 0, es);
            changed = true;
        }
    }
    return changed;
}

#endif
