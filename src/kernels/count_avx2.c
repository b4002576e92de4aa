/* Mask statistics on AVX2: group popcounts 32 mask bytes at a time, and
 * pruned-but-nonzero elements from movemask bits of 64 elements at a time. */
#include <immintrin.h>

#include "internal.h"

#define INLINE static inline __attribute__((always_inline))

/* Groups per chunk: the vector loops run over whole chunks (64 mask words,
 * 64 * m elements, a multiple of 64) and the reference takes the rest. */
#define CHUNK_GROUPS 64

/* Bit i set when element i of the 64 at w is +-0.0. */
INLINE uint64_t zero64(enum tbm_precision prec, const uint8_t *w)
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

/* Pruned elements that are not +-0.0 among 64 * blocks elements starting
 * at a group boundary, for m = 1, 2, 4, 8, 16 or 32. */
INLINE uint64_t conflicts_blocks(enum tbm_precision prec, const uint8_t *w, const uint8_t *mask,
                                 uint32_t m, uint64_t blocks)
{
    size_t size = tbm_element_size(prec);
    uint64_t total = 0;

    for (uint64_t b = 0; b < blocks; b++, w += 64 * size, mask += tbm_mask_block_bytes(m)) {
        uint64_t kept = tbm_mask_block_bits(m, mask);

        total += (uint64_t)_mm_popcnt_u64(~(zero64(prec, w) | kept));
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
        total += (uint64_t)_mm_popcnt_u64(~(zero64(prec, w) | kept));
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
void tbm_mask_count_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
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
