/* Statistics on AVX-512: 16 float32 per vector, their doubles in two 8-lane
 * vectors, exclusions as opmasks; histogram bins from an estimate corrected
 * against the edge keys by two permutes; the fp16 and bf16 table from kept
 * patterns compacted by VBMI2's vpcompressw. */
#include <immintrin.h>

#include "stats_internal.h"

#define expand_level tbm_expand_avx512

struct scan_regs {
    __m512d sum[2], abs[2]; /* lanes 0-7 and 8-15 */
    __m512i min, max;
    uint64_t kept, zeros, nan, finite;
};

TBM_INLINE void scan_load(struct scan_regs *r, const struct tbm_stats_acc *a)
{
    for (unsigned i = 0; i < 2; i++) {
        r->sum[i] = _mm512_loadu_pd(a->sum.part + 8 * i);
        r->abs[i] = _mm512_loadu_pd(a->abs_sum.part + 8 * i);
    }
    r->min = _mm512_set1_epi32(a->min_key);
    r->max = _mm512_set1_epi32(a->max_key);
    r->kept = r->zeros = r->nan = r->finite = 0;
}

TBM_INLINE void scan_store(struct scan_regs *r, struct tbm_stats_acc *a)
{
    for (unsigned i = 0; i < 2; i++) {
        _mm512_storeu_pd(a->sum.part + 8 * i, r->sum[i]);
        _mm512_storeu_pd(a->abs_sum.part + 8 * i, r->abs[i]);
    }
    a->min_key = _mm512_reduce_min_epi32(r->min);
    a->max_key = _mm512_reduce_max_epi32(r->max);
    a->kept += r->kept;
    a->zeros += r->zeros;
    a->nan += r->nan;
    a->finite += r->finite;
    a->inf += r->kept - r->finite - r->nan;
}

/* Bits of the kept elements that are finite, NaN and zero. */
TBM_INLINE __mmask16 finite16(__m512i abs, __mmask16 keep)
{
    return _mm512_mask_cmplt_epi32_mask(keep, abs, _mm512_set1_epi32((int)TBM_F32_INF));
}

/* Order keys, as tbm_stats_key. */
TBM_INLINE __m512i keys16(__m512i bits)
{
    return _mm512_xor_si512(
        bits, _mm512_and_si512(_mm512_srai_epi32(bits, 31), _mm512_set1_epi32(INT32_MAX)));
}

TBM_INLINE void scan16(struct scan_regs *r, const float *v, uint32_t bits)
{
    __m512 x = _mm512_loadu_ps(v);
    __m512i b = _mm512_castps_si512(x);
    __m512i abs = _mm512_and_si512(b, _mm512_set1_epi32(INT32_MAX));
    __mmask16 keep = (__mmask16)bits;
    __mmask16 fin = finite16(abs, keep);
    __m512i key = keys16(b);
    /* +0.0 in the lanes of excluded elements, as the reference adds */
    __m512 xf = _mm512_maskz_mov_ps(fin, x);
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(xf));
    __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(xf, 1));

    r->kept += (uint64_t)_mm_popcnt_u32(keep);
    r->finite += (uint64_t)_mm_popcnt_u32(fin);
    r->nan += (uint64_t)_mm_popcnt_u32(
        _mm512_mask_cmpgt_epi32_mask(keep, abs, _mm512_set1_epi32((int)TBM_F32_INF)));
    r->zeros +=
        (uint64_t)_mm_popcnt_u32(_mm512_mask_cmpeq_epi32_mask(keep, abs, _mm512_setzero_si512()));
    r->min = _mm512_mask_min_epi32(r->min, fin, r->min, key);
    r->max = _mm512_mask_max_epi32(r->max, fin, r->max, key);
    r->sum[0] = _mm512_add_pd(r->sum[0], lo);
    r->sum[1] = _mm512_add_pd(r->sum[1], hi);
    r->abs[0] = _mm512_add_pd(r->abs[0], _mm512_abs_pd(lo));
    r->abs[1] = _mm512_add_pd(r->abs[1], _mm512_abs_pd(hi));
}

/* Bin counts in registers: byte q of lane l of bytes[j] counts lane l's
 * values in bin 4 j + q. Bytes hold 255 at most, so they are drained into
 * counts every 255 vectors (when is immaterial: the counts are integers).
 * Scalar increments of per-lane sub-histograms in memory took 5 times as
 * long as the rest of pass 2. */
#define DRAIN_VECTORS 255

struct hist_regs {
    __m512d dev[2];
    __m512d mean, min, scale;
    __m512i lo_key[2], hi_key[2]; /* bins 0-15 and 16-31 */
    __m512i first;                /* the lowest estimate: the last bin when min == max */
    __m512i bytes[TBM_STATS_BINS / 4];
    unsigned pending; /* vectors counted in bytes */
    uint64_t counts[TBM_STATS_BINS];
};

TBM_INLINE void drain(struct hist_regs *r)
{
    for (unsigned j = 0; j < TBM_STATS_BINS / 4; j++) {
        for (unsigned q = 0; q < 4; q++)
            r->counts[4 * j + q] += (uint64_t)_mm512_reduce_add_epi32(
                _mm512_and_si512(_mm512_srli_epi32(r->bytes[j], 8 * q), _mm512_set1_epi32(0xFF)));
        r->bytes[j] = _mm512_setzero_si512();
    }
    r->pending = 0;
}

TBM_INLINE void hist_load(struct hist_regs *r, const struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 2; i++) {
        r->dev[i] = _mm512_loadu_pd(h->dev2.part + 8 * i);
        r->lo_key[i] = _mm512_loadu_si512(h->lo_key + 16 * i);
        r->hi_key[i] = _mm512_loadu_si512(h->hi_key + 16 * i);
    }
    r->mean = _mm512_set1_pd(h->mean);
    r->min = _mm512_set1_pd(h->min);
    r->scale = _mm512_set1_pd(h->scale);
    r->first = _mm512_set1_epi32(h->scale == 0.0 ? TBM_STATS_BINS - 1 : 0);
    for (unsigned j = 0; j < TBM_STATS_BINS / 4; j++)
        r->bytes[j] = _mm512_setzero_si512();
    r->pending = 0;
    memset(r->counts, 0, sizeof r->counts);
}

TBM_INLINE void hist_store(struct hist_regs *r, struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 2; i++)
        _mm512_storeu_pd(h->dev2.part + 8 * i, r->dev[i]);
    drain(r);
    for (unsigned b = 0; b < TBM_STATS_BINS; b++)
        h->counts[b] += r->counts[b];
    memset(r->counts, 0, sizeof r->counts);
}

TBM_INLINE void hist_flush(struct hist_regs *r, struct tbm_stats_hist *h)
{
    for (unsigned i = 0; i < 2; i++)
        _mm512_storeu_pd(h->dev2.part + 8 * i, r->dev[i]);
    tbm_stats_sum_flush(&h->dev2);
    for (unsigned i = 0; i < 2; i++)
        r->dev[i] = _mm512_loadu_pd(h->dev2.part + 8 * i);
}

/* The estimate floor((x - min) * scale) is within one bin of the true one
 * (its rounding errors are some ulps of 32, the edges' as small), so one
 * step down when the key is below its bin's lower edge key, or up when at
 * or above its upper one, gives the bin tbm_stats_bin defines. */
TBM_INLINE void hist16(struct hist_regs *r, const float *v, uint32_t bits)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512 x = _mm512_loadu_ps(v);
    __m512i b = _mm512_castps_si512(x);
    __m512i abs = _mm512_and_si512(b, _mm512_set1_epi32(INT32_MAX));
    __mmask16 fin = finite16(abs, (__mmask16)bits);
    __m512i key = keys16(b);
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
    __m512d dlo = _mm512_sub_pd(lo, r->mean);
    __m512d dhi = _mm512_sub_pd(hi, r->mean);
    __m256i elo = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_sub_pd(lo, r->min), r->scale));
    __m256i ehi = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_sub_pd(hi, r->min), r->scale));
    __m512i est = _mm512_inserti64x4(_mm512_castsi256_si512(elo), ehi, 1);
    __m512i bin, lower, upper, shift;

    r->dev[0] = _mm512_add_pd(r->dev[0], _mm512_maskz_mul_pd((__mmask8)fin, dlo, dlo));
    r->dev[1] = _mm512_add_pd(r->dev[1], _mm512_maskz_mul_pd((__mmask8)(fin >> 8), dhi, dhi));
    est = _mm512_min_epi32(_mm512_max_epi32(est, r->first), _mm512_set1_epi32(TBM_STATS_BINS - 1));
    lower = _mm512_permutex2var_epi32(r->lo_key[0], est, r->lo_key[1]);
    upper = _mm512_permutex2var_epi32(r->hi_key[0], est, r->hi_key[1]);
    bin = _mm512_mask_sub_epi32(est, _mm512_cmplt_epi32_mask(key, lower), est, one);
    bin = _mm512_mask_add_epi32(bin, _mm512_cmpge_epi32_mask(key, upper), bin, one);
    /* below bin 0 only for a value below min: tbm_stats_bin's bin 0 */
    bin = _mm512_max_epi32(bin, _mm512_setzero_si512());
    bin = _mm512_mask_mov_epi32(_mm512_set1_epi32(TBM_STATS_BINS), fin, bin);
    /* 1 << (8 bin - 32 j) is the lane's byte when bin is in bytes[j]; the
     * shift is negative (so huge) or >= 32 otherwise, and gives 0, as it does
     * for every j with the excluded bin TBM_STATS_BINS */
    shift = _mm512_slli_epi32(bin, 3);
#pragma GCC unroll 8
    for (unsigned j = 0; j < TBM_STATS_BINS / 4; j++)
        r->bytes[j] = _mm512_add_epi32(
            r->bytes[j],
            _mm512_sllv_epi32(one, _mm512_sub_epi32(shift, _mm512_set1_epi32(32 * (int)j))));
    if (++r->pending == DRAIN_VECTORS)
        drain(r);
}

#include "stats_simd.h"

void tbm_stats_scan_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_acc *a)
{
    stats_scan_simd(prec, weights, mask, m, count, a);
}

void tbm_stats_hist_avx512(enum tbm_precision prec, const void *weights, const uint8_t *mask,
                           uint32_t m, uint64_t count, struct tbm_stats_hist *h)
{
    stats_hist_simd(prec, weights, mask, m, count, h);
}

/* VBMI2's vpcompressw moves the kept ones of 32 patterns to the front of a
 * register at once, where the AVX2 loop needs four byte shuffles (and their
 * table loads): bench_stats 12.0 to 12.8 ms against the AVX2 loop's 14.8 to
 * 16.5 (Zen 5, side by side). */
#define COMPRESS __attribute__((target("avx512vbmi2")))

/* A round of the table: one by one when no entry after the first repeats
 * it (the usual case), at once when all do, else spread (see
 * tbm_stats_count_spread). */
TBM_INLINE void count_round(uint16_t *low, uint64_t *high, const uint8_t *at)
{
    const __m512i spare =
        _mm512_add_epi32(_mm512_set1_epi32(TBM_STATS_PATTERNS),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    uint32_t first = tbm_load16(at);
    __m512i x = _mm512_loadu_si512(at);
    __mmask32 same = _mm512_cmpeq_epi16_mask(x, _mm512_set1_epi16((short)first));
    uint32_t repeats = (uint32_t)_mm_popcnt_u32(same);
    uint32_t spread[TBM_STATS_ROUND];

    if (tbm_stats_count_unspread(low, high, at, first, repeats))
        return;
    for (unsigned h = 0; h < 2; h++) {
        __m256i half = h ? _mm512_extracti64x4_epi64(x, 1) : _mm512_castsi512_si256(x);

        _mm512_storeu_si512(
            spread + 16 * h,
            _mm512_mask_mov_epi32(_mm512_cvtepu16_epi32(half), (__mmask16)(same >> (16 * h)),
                                  _mm512_add_epi32(spare, _mm512_set1_epi32(16 * (int)h))));
    }
    tbm_stats_count_spread(low, high, first, repeats, spread);
}

/* The level's chunk (tbm_stats_chunk_fn): 32 elements compacted at a time
 * (the two halves of a 64-element block when the mask has whole ones; a
 * masked load for fewer, so that a chunk's tail needs no scalar loop). */
TBM_INLINE COMPRESS size_t count_chunk(const uint8_t *w, size_t n, bool blocks,
                                       struct tbm_mask_stream *s, uint16_t *idx, size_t k,
                                       struct tbm_stats_acc *a)
{
    const uint32_t block_bytes = tbm_mask_block_bytes(s->m);
    uint16_t *low = a->low;
    uint64_t *high = a->high;
    size_t i = 0, j = 0;

    while (i < n) {
        uint64_t bits;
        size_t len;

        if (blocks && s->pending == 0 && n - i >= 64) {
            tbm_stats_prefetch(w + 2 * i, s->next, block_bytes);
            bits = tbm_mask_block_bits(s->m, s->next);
            s->next += block_bytes;
            len = 64;
        } else {
            len = n - i < 32 ? n - i : 32;
            bits = tbm_mask_stream_take(s, (uint32_t)len);
        }
        for (size_t h = 0; h < len; h += 32) {
            __mmask32 keep = (__mmask32)(bits >> h);
            /* a masked load of 16-bit elements costs 3 plain ones on Zen 5 */
            __m512i x = len - h >= 32 ? _mm512_loadu_si512(w + 2 * (i + h))
                                      : _mm512_maskz_loadu_epi16(keep, w + 2 * (i + h));

            _mm512_storeu_si512(idx + k, _mm512_maskz_compress_epi16(keep, x));
            k += (size_t)_mm_popcnt_u32(keep);
        }
        i += len;
        for (; k - j >= TBM_STATS_ROUND + TBM_STATS_LAG; j += TBM_STATS_ROUND)
            count_round(low, high, (const uint8_t *)(idx + j));
    }
    memmove(idx, idx + j, (k - j) * sizeof *idx);
    return k - j;
}

static COMPRESS void count_compress(const uint8_t *w, const uint8_t *mask, uint32_t m,
                                    uint64_t count, struct tbm_stats_acc *a)
{
    /* entries left uncounted by the last chunk (fewer than a round and the
     * lag), a chunk's, and the 32 a compaction may write past them */
    uint16_t idx[TBM_STATS_ROUND + TBM_STATS_LAG + TBM_STATS_CHUNK + 32];

    tbm_stats_count_chunks(w, mask, m, count, a, idx, count_chunk);
}

/* The AVX-512 level does not require VBMI2 (Skylake-X and Cascade Lake lack
 * it): without it, the AVX2 loop. */
void tbm_stats_count_avx512(const void *weights, const uint8_t *mask, uint32_t m, uint64_t count,
                            struct tbm_stats_acc *a)
{
    if (mask == NULL)
        tbm_stats_count_rounds(weights, count, a, count_round);
    else if (__builtin_cpu_supports("avx512vbmi2"))
        count_compress(weights, mask, m, count, a);
    else
        tbm_stats_count_avx2(weights, mask, m, count, a);
}

uint64_t tbm_mask_kept_avx512(const uint8_t *mask, uint32_t m, uint64_t first, uint64_t count)
{
    return mask_kept_simd(mask, m, first, count);
}
