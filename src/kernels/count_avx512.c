/* Mask statistics on AVX-512: group popcounts 64 mask bytes at a time, and
 * pruned-but-nonzero elements from opmasks of 64 elements at a time. */
#include <immintrin.h>

#include "internal.h"

#define INLINE static inline __attribute__((always_inline))

/* Groups per chunk: the vector loops run over whole chunks (64 mask words,
 * 64 * m elements, a multiple of 64) and the reference takes the rest. */
#define CHUNK_GROUPS 64

/* Bit i set when element i of the 64 at w is not +-0.0. */
INLINE uint64_t nonzero64(enum tbm_precision prec, const uint8_t *w)
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

/* Pruned elements that are not +-0.0 among 64 * blocks elements starting
 * at a group boundary, for m = 1, 2, 4, 8, 16 or 32. */
INLINE uint64_t conflicts_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                                 uint32_t m, uint64_t blocks)
{
    size_t size = tbm_element_size(prec);
    uint64_t total = 0;

    for (uint64_t b = 0; b < blocks; b++, w += 64 * size, mask += tbm_mask_block_bytes(m)) {
        uint64_t kept = tbm_mask_block_bits(m, mask);

        total += (uint64_t)_mm_popcnt_u64(nonzero64(prec, w) & ~kept);
    }
    return total;
}

/* The same for any m, the bits read as a stream. */
INLINE uint64_t conflicts_stream(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                                 uint32_t m, uint64_t blocks)
{
    size_t size = tbm_element_size(prec);
    struct tbm_mask_stream s;
    uint64_t total = 0;

    tbm_mask_stream_init(&s, mask, m, 0);
    for (uint64_t b = 0; b < blocks; b++, w += 64 * size) {
        uint64_t kept = tbm_mask_stream_take(&s, 32);

        kept |= tbm_mask_stream_take(&s, 32) << 32;
        total += (uint64_t)_mm_popcnt_u64(nonzero64(prec, w) & ~kept);
    }
    return total;
}

/* conflicts_blocks with m a constant in each copy, or conflicts_stream. */
INLINE uint64_t conflicts(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                          uint32_t m, uint64_t blocks)
{
    switch (m) {
    case 1:
        return conflicts_blocks(prec, w, mask, 1, blocks);
    case 2:
        return conflicts_blocks(prec, w, mask, 2, blocks);
    case 4:
        return conflicts_blocks(prec, w, mask, 4, blocks);
    case 8:
        return conflicts_blocks(prec, w, mask, 8, blocks);
    case 16:
        return conflicts_blocks(prec, w, mask, 16, blocks);
    case 32:
        return conflicts_blocks(prec, w, mask, 32, blocks);
    }
    return conflicts_stream(prec, w, mask, m, blocks);
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

INLINE void count_chunks(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    uint64_t chunks = count / ((uint64_t)CHUNK_GROUPS * m);
    uint64_t done = chunks * CHUNK_GROUPS * m;
    uint64_t mask_done = chunks * CHUNK_GROUPS * tbm_mask_word_bytes(m);

    group_stats(mask, n, m, mask_done, acc);
    acc->mask_conflicts += conflicts(prec, weights, mask, m, done / 64);
    tbm_mask_count_scalar(prec, (const uint8_t *)weights + done * tbm_element_size(prec),
                          mask + mask_done, n, m, count - done, acc);
}

/* One copy of the loops per precision, so that none of them branches on it. */
void tbm_mask_count_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t n, uint32_t m, uint64_t count, struct tbm_mask_stats *acc)
{
    switch (prec) {
    case TBM_FP32:
        count_chunks(TBM_FP32, weights, mask, n, m, count, acc);
        return;
    case TBM_FP16:
        count_chunks(TBM_FP16, weights, mask, n, m, count, acc);
        return;
    case TBM_BF16:
        count_chunks(TBM_BF16, weights, mask, n, m, count, acc);
        return;
    case TBM_FP64:
        count_chunks(TBM_FP64, weights, mask, n, m, count, acc);
        return;
    }
}
