/* Mask statistics on AVX2: group popcounts 32 mask bytes at a time, and
 * pruned-but-nonzero elements from movemask bits of 64 elements at a time. */
#include <immintrin.h>

#include "internal.h"

/* Bit i set when element i of the 64 at w is +-0.0. */
TBM_INLINE uint64_t zero64(enum tbm_precision prec, const uint8_t *w)
{
    const __m256i zero = _mm256_setzero_si256();
    uint64_t z = 0;

    switch (prec) {
    case TBM_FP16:
    case TBM_BF16:
        /* packs interleaves 128-bit lanes; the permute puts them back */
        for (unsigned i = 0; i < 2; i++) {
            const __m256i abs = _mm256_set1_epi16(0x7FFF);
            __m256i a = _mm256_loadu_si256((const __m256i *)(w + 64 * i));
            __m256i b = _mm256_loadu_si256((const __m256i *)(w + 64 * i + 32));
            __m256i za = _mm256_cmpeq_epi16(_mm256_and_si256(a, abs), zero);
            __m256i zb = _mm256_cmpeq_epi16(_mm256_and_si256(b, abs), zero);
            __m256i zab = _mm256_permute4x64_epi64(_mm256_packs_epi16(za, zb), 0xD8);

            z |= (uint64_t)(uint32_t)_mm256_movemask_epi8(zab) << (32 * i);
        }
        return z;
    case TBM_FP64:
        for (unsigned i = 0; i < 16; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + 32 * i));
            __m256i zv =
                _mm256_cmpeq_epi64(_mm256_and_si256(v, _mm256_set1_epi64x(INT64_MAX)), zero);

            z |= (uint64_t)_mm256_movemask_pd(_mm256_castsi256_pd(zv)) << (4 * i);
        }
        return z;
    case TBM_FP32:
        break;
    }
    for (unsigned i = 0; i < 8; i++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + 32 * i));
        __m256i zv = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(INT32_MAX)), zero);

        z |= (uint64_t)_mm256_movemask_ps(_mm256_castsi256_ps(zv)) << (8 * i);
    }
    return z;
}

TBM_INLINE uint64_t nonzero64(enum tbm_precision prec, const uint8_t *w)
{
    return ~zero64(prec, w);
}

/* Adds kept and groups_over_n of the whole words in bytes (a multiple of 32)
 * of mask. Bytes get a nibble-table popcount; for 2- and 4-byte words
 * neighbouring byte counts are summed before comparing with n. Counts are at
 * most 32, so signed compares are exact. */
static void group_stats(const uint8_t *mask, uint32_t n, uint32_t m, uint64_t bytes,
                        struct tbm_mask_stats *acc)
{
    const __m256i table = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1,
                                           2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    uint32_t word_bytes = tbm_mask_word_bytes(m);
    uint32_t valid = tbm_mask_valid_bits(m);
    /* a group holds at most 32 bits, so a larger n is never exceeded */
    int limit = n < 32 ? (int)n : 32;
    __m256i valid_v = word_bytes == 1   ? _mm256_set1_epi8((char)valid)
                      : word_bytes == 2 ? _mm256_set1_epi16((short)valid)
                                        : _mm256_set1_epi32((int)valid);
    __m256i kept = _mm256_setzero_si256();
    uint64_t over_bits = 0;

    for (uint64_t i = 0; i < bytes; i += 32) {
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(mask + i)), valid_v);
        __m256i c = _mm256_add_epi8(
            _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4)),
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)));
        __m256i c16 = _mm256_maddubs_epi16(c, _mm256_set1_epi8(1));
        __m256i over;

        kept = _mm256_add_epi64(kept, _mm256_sad_epu8(c, _mm256_setzero_si256()));
        if (word_bytes == 1)
            over = _mm256_cmpgt_epi8(c, _mm256_set1_epi8((char)limit));
        else if (word_bytes == 2)
            over = _mm256_cmpgt_epi16(c16, _mm256_set1_epi16((short)limit));
        else
            over = _mm256_cmpgt_epi32(_mm256_madd_epi16(c16, _mm256_set1_epi16(1)),
                                      _mm256_set1_epi32(limit));
        over_bits += (uint64_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_epi8(over));
    }
    /* movemask gave one bit per byte of each true group */
    acc->groups_over_n += over_bits / word_bytes;
    acc->kept += (uint64_t)_mm256_extract_epi64(kept, 0) + (uint64_t)_mm256_extract_epi64(kept, 1) +
                 (uint64_t)_mm256_extract_epi64(kept, 2) + (uint64_t)_mm256_extract_epi64(kept, 3);
}

#include "count_simd.h"

void tbm_mask_count_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    count_simd(prec, weights, mask, n, m, count, acc);
}
