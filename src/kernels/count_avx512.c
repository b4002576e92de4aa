/* Mask statistics on AVX-512: group popcounts 64 mask bytes at a time, and
 * pruned-but-nonzero elements from opmasks of 64 elements at a time. */
#include <immintrin.h>

#include "internal.h"

/* Bit i set when element i of the 64 at w is not +-0.0. */
TBM_INLINE uint64_t nonzero64(enum tbm_precision prec, const uint8_t *w)
{
    uint64_t nz = 0;

    switch (prec) {
    case TBM_FP16:
    case TBM_BF16:
        for (unsigned i = 0; i < 2; i++)
            nz |= (uint64_t)_mm512_test_epi16_mask(_mm512_loadu_si512(w + 64 * i),
                                                   _mm512_set1_epi16(0x7FFF))
                  << (32 * i);
        return nz;
    case TBM_FP64:
        for (unsigned i = 0; i < 8; i++)
            nz |= (uint64_t)_mm512_test_epi64_mask(_mm512_loadu_si512(w + 64 * i),
                                                   _mm512_set1_epi64(INT64_MAX))
                  << (8 * i);
        return nz;
    case TBM_FP32:
        break;
    }
    for (unsigned i = 0; i < 4; i++)
        nz |= (uint64_t)_mm512_test_epi32_mask(_mm512_loadu_si512(w + 64 * i),
                                               _mm512_set1_epi32(INT32_MAX))
              << (16 * i);
    return nz;
}

/* Adds kept and groups_over_n of the whole words in bytes (a multiple of 64)
 * of mask. Bytes get a nibble-table popcount; for 2- and 4-byte words
 * neighbouring byte counts are summed before comparing with n. */
static void group_stats(const uint8_t *mask, uint32_t n, uint32_t m, uint64_t bytes,
                        struct tbm_mask_stats *acc)
{
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    uint32_t word_bytes = tbm_mask_word_bytes(m);
    uint32_t valid = tbm_mask_valid_bits(m);
    /* a group holds at most 32 bits, so a larger n is never exceeded */
    int limit = n < 32 ? (int)n : 32;
    __m512i valid_v = word_bytes == 1   ? _mm512_set1_epi8((char)valid)
                      : word_bytes == 2 ? _mm512_set1_epi16((short)valid)
                                        : _mm512_set1_epi32((int)valid);
    __m512i kept = _mm512_setzero_si512();
    uint64_t over = 0;

    for (uint64_t i = 0; i < bytes; i += 64) {
        __m512i v = _mm512_and_si512(_mm512_loadu_si512(mask + i), valid_v);
        __m512i c = _mm512_add_epi8(
            _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4)),
            _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4)));
        __m512i c16 = _mm512_maddubs_epi16(c, _mm512_set1_epi8(1));

        kept = _mm512_add_epi64(kept, _mm512_sad_epu8(c, _mm512_setzero_si512()));
        if (word_bytes == 1)
            over +=
                (uint64_t)_mm_popcnt_u64(_mm512_cmpgt_epu8_mask(c, _mm512_set1_epi8((char)limit)));
        else if (word_bytes == 2)
            over += (uint64_t)_mm_popcnt_u32(
                _mm512_cmpgt_epu16_mask(c16, _mm512_set1_epi16((short)limit)));
        else
            over += (uint64_t)_mm_popcnt_u32(_mm512_cmpgt_epu32_mask(
                _mm512_madd_epi16(c16, _mm512_set1_epi16(1)), _mm512_set1_epi32(limit)));
    }
    acc->kept += (uint64_t)_mm512_reduce_add_epi64(kept);
    acc->groups_over_n += over;
}

#include "count_simd.h"

void tbm_mask_count_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    count_simd(prec, weights, mask, n, m, count, acc);
}
