/* Statistics on AVX2 + F16C: 16 float32 per step as two 8-lane vectors,
 * their doubles in four 4-lane vectors, exclusions as all-ones lanes;
 * histogram bins from an estimate corrected against gathered edge keys; the
 * fp16 and bf16 table from kept patterns compacted by byte shuffles. */
#include <immintrin.h>

#include "stats_internal.h"

#define expand_level tbm_expand_avx2

struct scan_regs {
    __m256d sum[4], abs[4]; /* lanes 0-3, 4-7, 8-11, 12-15 */
    __m256i min, max;
    uint64_t kept, zeros, nan, finite;
};

TBM_INLINE void scan_load(struct scan_regs *r, const struct tbm_stats_acc *a)
{
    for (unsigned i = 0; i < 4; i++) {
        r->sum[i] = _mm256_loadu_pd(a->sum.part + 4 * i);
        r->abs[i] = _mm256_loadu_pd(a->abs_sum.part + 4 * i);
    }
    r->min = _mm256_set1_epi32(a->min_key);
    r->max = _mm256_set1_epi32(a->max_key);
    r->kept = r->zeros = r->nan = r->finite = 0;
}

/* The smallest and largest of 8 int32. */
TBM_INLINE int32_t reduce_min8(__m256i v)
{
    __m128i x = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

    x = _mm_min_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_min_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

TBM_INLINE int32_t reduce_max8(__m256i v)
{
    __m128i x = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

    x = _mm_max_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_max_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

TBM_INLINE void scan_store(struct scan_regs *r, struct tbm_stats_acc *a)
{
    for (unsigned i = 0; i < 4; i++) {
        _mm256_storeu_pd(a->sum.part + 4 * i, r->sum[i]);
        _mm256_storeu_pd(a->abs_sum.part + 4 * i, r->abs[i]);
    }
    a->min_key = reduce_min8(r->min);
    a->max_key = reduce_max8(r->max);
    a->kept += r->kept;
    a->zeros += r->zeros;
    a->nan += r->nan;
    a->finite += r->finite;
    a->inf += r->kept - r->finite - r->nan;
}

/* All-ones in lane i when bit i of bits is set (bits above 7 are ignored). */
TBM_INLINE __m256i keep8(uint32_t bits)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);

    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), sel), sel);
}

TBM_INLINE __m256i keys8(__m256i bits)
{
    return _mm256_xor_si256(
        bits, _mm256_and_si256(_mm256_srai_epi32(bits, 31), _mm256_set1_epi32(INT32_MAX)));
}

TBM_INLINE uint64_t lanes_set(__m256i v)
{
    return (uint64_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(v)));
}

TBM_INLINE void scan16(struct scan_regs *r, const float *v, uint32_t bits)
{
    const __m256i inf = _mm256_set1_epi32((int)TBM_F32_INF);
    const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));

    r->kept += (uint64_t)_mm_popcnt_u32(bits & 0xFFFF);
    for (unsigned h = 0; h < 2; h++) {
        __m256 x = _mm256_loadu_ps(v + 8 * h);
        __m256i b = _mm256_castps_si256(x);
        __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(INT32_MAX));
        __m256i keep = keep8(bits >> (8 * h));
        __m256i fin = _mm256_and_si256(keep, _mm256_cmpgt_epi32(inf, abs));
        __m256i key = keys8(b);
        /* +0.0 in the lanes of excluded elements, as the reference adds */
        __m256 xf = _mm256_and_ps(x, _mm256_castsi256_ps(fin));
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(xf));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(xf, 1));

        r->finite += lanes_set(fin);
        r->nan += lanes_set(_mm256_and_si256(keep, _mm256_cmpgt_epi32(abs, inf)));
        r->zeros +=
            lanes_set(_mm256_and_si256(keep, _mm256_cmpeq_epi32(abs, _mm256_setzero_si256())));
        r->min =
            _mm256_min_epi32(r->min, _mm256_blendv_epi8(_mm256_set1_epi32(INT32_MAX), key, fin));
        r->max =
            _mm256_max_epi32(r->max, _mm256_blendv_epi8(_mm256_set1_epi32(INT32_MIN), key, fin));
        r->sum[2 * h] = _mm256_add_pd(r->sum[2 * h], lo);
        r->sum[2 * h + 1] = _mm256_add_pd(r->sum[2 * h + 1], hi);
        r->abs[2 * h] = _mm256_add_pd(r->abs[2 * h], _mm256_and_pd(lo, abs_mask));
        r->abs[2 * h + 1] = _mm256_add_pd(r->abs[2 * h + 1], _mm256_and_pd(hi, abs_mask));
    }
}

/* Sub-histograms, one per lane, so that the increments of one vector never
 * wait on each other (with 4, the excluded lanes' bin, TBM_STATS_BINS, made
 * chains of dependent increments that took 3/4 of pass 2's time). */
#define SUBHISTS 16

struct hist_regs {
    __m256d dev[4];
    __m256d mean, min, scale;
    __m256i first; /* the lowest estimate: the last bin when min == max */
    const int32_t *lo_key, *hi_key;
    uint64_t counts[SUBHISTS][TBM_STATS_BINS + 1];
};

TBM_INLINE void hist_load(struct hist_regs *r, const struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 4; i++)
        r->dev[i] = _mm256_loadu_pd(h->dev2.part + 4 * i);
    r->mean = _mm256_set1_pd(h->mean);
    r->min = _mm256_set1_pd(h->min);
    r->scale = _mm256_set1_pd(h->scale);
    r->first = _mm256_set1_epi32(h->scale == 0.0 ? TBM_STATS_BINS - 1 : 0);
    r->lo_key = h->lo_key;
    r->hi_key = h->hi_key;
    memset(r->counts, 0, sizeof r->counts);
}

TBM_INLINE void hist_store(struct hist_regs *r, struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 4; i++)
        _mm256_storeu_pd(h->dev2.part + 4 * i, r->dev[i]);
    for (unsigned b = 0; b < TBM_STATS_BINS; b++) {
        for (unsigned s = 0; s < SUBHISTS; s++)
            h->counts[b] += r->counts[s][b];
    }
    memset(r->counts, 0, sizeof r->counts);
}

/* The squared deviation of 4 doubles, +0.0 where fin (4 int64 lanes) is 0. */
TBM_INLINE __m256d dev4(__m256d x, __m256d mean, __m128i fin32)
{
    __m256d d = _mm256_sub_pd(x, mean);

    return _mm256_and_pd(_mm256_mul_pd(d, d), _mm256_castsi256_pd(_mm256_cvtepi32_epi64(fin32)));
}

TBM_INLINE void hist_flush(struct hist_regs *r, struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 4; i++)
        _mm256_storeu_pd(h->dev2.part + 4 * i, r->dev[i]);
    tbm_stats_sum_flush(&h->dev2);
    for (unsigned i = 0; i < 4; i++)
        r->dev[i] = _mm256_loadu_pd(h->dev2.part + 4 * i);
}

/* The estimate floor((x - min) * scale) is within one bin of the true one
 * (its rounding errors are some ulps of 32, the edges' as small), so one
 * step down when the key is below its bin's lower edge key, or up when at
 * or above its upper one, gives the bin tbm_stats_bin defines. */
TBM_INLINE void hist16(struct hist_regs *r, const float *v, uint32_t bits)
{
    const __m256i inf = _mm256_set1_epi32((int)TBM_F32_INF);
    uint32_t idx[16];

    for (unsigned h = 0; h < 2; h++) {
        __m256 x = _mm256_loadu_ps(v + 8 * h);
        __m256i b = _mm256_castps_si256(x);
        __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(INT32_MAX));
        __m256i fin = _mm256_and_si256(keep8(bits >> (8 * h)), _mm256_cmpgt_epi32(inf, abs));
        __m256i key = keys8(b);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        __m128i elo = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(lo, r->min), r->scale));
        __m128i ehi = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(hi, r->min), r->scale));
        __m256i est = _mm256_inserti128_si256(_mm256_castsi128_si256(elo), ehi, 1);
        __m256i lower, upper, bin;

        r->dev[2 * h] =
            _mm256_add_pd(r->dev[2 * h], dev4(lo, r->mean, _mm256_castsi256_si128(fin)));
        r->dev[2 * h + 1] =
            _mm256_add_pd(r->dev[2 * h + 1], dev4(hi, r->mean, _mm256_extracti128_si256(fin, 1)));
        est = _mm256_min_epi32(_mm256_max_epi32(est, r->first),
                               _mm256_set1_epi32(TBM_STATS_BINS - 1));
        lower = _mm256_i32gather_epi32(r->lo_key, est, 4);
        upper = _mm256_i32gather_epi32(r->hi_key, est, 4);
        /* a true compare is -1: adding it steps down, subtracting steps up */
        bin = _mm256_add_epi32(est, _mm256_cmpgt_epi32(lower, key));
        bin = _mm256_sub_epi32(
            bin, _mm256_xor_si256(_mm256_cmpgt_epi32(upper, key), _mm256_set1_epi32(-1)));
        /* below bin 0 only for a value below min: tbm_stats_bin's bin 0 */
        bin = _mm256_max_epi32(bin, _mm256_setzero_si256());
        bin = _mm256_blendv_epi8(_mm256_set1_epi32(TBM_STATS_BINS), bin, fin);
        _mm256_storeu_si256((__m256i *)(idx + 8 * h), bin);
    }
    for (unsigned k = 0; k < 16; k++)
        r->counts[k][idx[k]]++;
}

#include "stats_simd.h"

void tbm_stats_scan_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    stats_scan_simd(prec, weights, mask, m, count, a);
}

void tbm_stats_hist_avx2(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                         uint32_t m, uint64_t count, struct tbm_stats_hist *h)
{
    stats_hist_simd(prec, weights, mask, m, count, h);
}

/* The patterns of the 16 fp16 or bf16 at w whose bits are set, in order,
 * to out (all 16 entries may be written); returns how many. Two halves of
 * 8, each moved by a byte shuffle made from tbm_stats_compact8. */
TBM_INLINE size_t compact16(const uint8_t *w, uint32_t bits, uint16_t *out)
{
    size_t k = 0;

    for (unsigned h = 0; h < 2; h++) {
        uint32_t b = bits >> (8 * h) & 0xFF;
        __m128i at = _mm_loadl_epi64((const __m128i *)&tbm_stats_compact8[b]);
        __m128i shuffle = _mm_unpacklo_epi8(at, _mm_add_epi8(at, _mm_set1_epi8(1)));
        __m128i x = _mm_loadu_si128((const __m128i *)(w + 16 * h));

        _mm_storeu_si128((__m128i *)(out + k), _mm_shuffle_epi8(x, shuffle));
        k += (size_t)_mm_popcnt_u32(b);
    }
    return k;
}

/* A round of the table: one by one when no entry after the first repeats
 * it (the usual case), at once when all do, else spread (see
 * tbm_stats_count_spread). */
TBM_INLINE void count_round(uint16_t *low, uint64_t *high, const uint8_t *at)
{
    uint32_t first = tbm_load16(at);
    __m256i match = _mm256_set1_epi16((short)first);
    __m256i same[2];
    uint64_t bits; /* two per entry */
    uint32_t spread[TBM_STATS_ROUND];

    for (unsigned h = 0; h < 2; h++)
        same[h] = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(at + 32 * h)), match);
    bits = (uint32_t)_mm256_movemask_epi8(same[0]) |
           (uint64_t)(uint32_t)_mm256_movemask_epi8(same[1]) << 32;
    uint32_t repeats = (uint32_t)_mm_popcnt_u64(bits) / 2;
    if (tbm_stats_count_unspread(low, high, at, first, repeats))
        return;
    for (unsigned e = 0; e < 4; e++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(at + 16 * e));
        __m128i s =
            e % 2 ? _mm256_extracti128_si256(same[e / 2], 1) : _mm256_castsi256_si128(same[e / 2]);
        __m256i spare = _mm256_add_epi32(_mm256_set1_epi32((int)(TBM_STATS_PATTERNS + 8 * e)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

        _mm256_storeu_si256(
            (__m256i *)(spread + 8 * e),
            _mm256_blendv_epi8(_mm256_cvtepu16_epi32(x), spare, _mm256_cvtepi16_epi32(s)));
    }
    tbm_stats_count_spread(low, high, first, repeats, spread);
}

/* The level's chunk (tbm_stats_chunk_fn): 16 elements compacted at a time,
 * or 64 with whole mask blocks. */
TBM_INLINE size_t count_chunk(const uint8_t *w, size_t n, bool blocks, struct tbm_mask_stream *s,
                              uint16_t *idx, size_t k, struct tbm_stats_acc *a)
{
    const uint32_t block_bytes = tbm_mask_block_bytes(s->m);
    uint16_t *low = a->low;
    uint64_t *high = a->high;
    size_t i = 0, j = 0;

    while (n - i >= 16) {
        if (blocks && s->pending == 0 && n - i >= 64) {
            uint64_t bits;

            tbm_stats_prefetch(w + 2 * i, s->next, block_bytes);
            bits = tbm_mask_block_bits(s->m, s->next);
            s->next += block_bytes;
            for (unsigned q = 0; q < 4; q++)
                k +=
                    compact16(w + 2 * (i + 16 * q), (uint32_t)(bits >> (16 * q) & 0xFFFF), idx + k);
            i += 64;
        } else {
            k += compact16(w + 2 * i, (uint32_t)tbm_mask_stream_take(s, 16), idx + k);
            i += 16;
        }
        for (; k - j >= TBM_STATS_ROUND + TBM_STATS_LAG; j += TBM_STATS_ROUND)
            count_round(low, high, (const uint8_t *)(idx + j));
    }
    if (n - i != 0) {
        uint64_t bits = tbm_mask_stream_take(s, (uint32_t)(n - i));

        for (; i < n; i++, bits >>= 1) {
            idx[k] = tbm_load16(w + 2 * i);
            k += bits & 1;
        }
    }
    memmove(idx, idx + j, (k - j) * sizeof *idx);
    return k - j;
}

/* Also the AVX-512 level's on CPUs without VBMI2. */
void tbm_stats_count_avx2(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                          struct tbm_stats_acc *a)
{
    /* entries left uncounted by the last chunk (fewer than a round and the
     * lag), a chunk's, and the 16 a compaction may write past them */
    uint16_t idx[TBM_STATS_ROUND + TBM_STATS_LAG + TBM_STATS_CHUNK + 16];

    if (mask == NULL) {
        tbm_stats_count_rounds(weights, count, a, count_round);
        return;
    }
    tbm_stats_count_chunks(weights, mask, m, count, a, idx, count_chunk);
}

uint64_t tbm_mask_kept_avx2(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count)
{
    return mask_kept_simd(mask, m, first, count);
}
