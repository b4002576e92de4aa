/* 8-bit greyscale PNG written with stored (uncompressed) deflate blocks, so
 * that its size follows from width and height alone: mask.png and
 * weights.png have a size at mount, before any pixel is computed. CRC-32
 * and Adler-32 are zlib's. */
#include <string.h>
#include <zlib.h>

#include "tbm/stats.h"

#define IDAT_MAX   65536 /* data bytes per IDAT chunk */
#define STORED_MAX 65535 /* bytes per stored deflate block */
#define CHUNK_OVER 12    /* length, type and CRC of a chunk */

static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

/* The image an empty tensor gets: one pixel. */
static void fix_empty(uint32_t *width, uint32_t *height)
{
    if (*width == 0 || *height == 0)
        *width = *height = 1;
}

static uint64_t stored_blocks(uint64_t raw)
{
    return raw == 0 ? 1 : (raw + STORED_MAX - 1) / STORED_MAX;
}

/* zlib stream of raw bytes: 2 header bytes, 5 per block header, Adler-32. */
static uint64_t zlib_size(uint64_t raw)
{
    return 2 + 5 * stored_blocks(raw) + raw + 4;
}

uint64_t tbm_png_size(uint32_t width, uint32_t height)
{
    uint64_t raw, z;

    fix_empty(&width, &height);
    raw = (uint64_t)height * (1 + (uint64_t)width); /* a filter byte per scanline */
    z = zlib_size(raw);
    return sizeof signature + (CHUNK_OVER + 13) + (z + IDAT_MAX - 1) / IDAT_MAX * CHUNK_OVER + z +
           CHUNK_OVER;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes a chunk's length and type; the data follows at the result. */
static uint8_t *chunk_begin(uint8_t *out, const char *type, uint32_t len)
{
    put32(out, len);
    memcpy(out + 4, type, 4);
    return out + 8;
}

/* Appends the CRC of the chunk whose data ends at end; returns past it. */
static uint8_t *chunk_end(uint8_t *start, uint8_t *end)
{
    put32(end, (uint32_t)crc32(0, start + 4, (uInt)(end - start - 4)));
    return end + 4;
}

/* The zlib stream as a series of IDAT chunks: bytes are put in order and
 * a chunk is closed every IDAT_MAX bytes and at the end. */
struct idat_writer {
    uint8_t *out;      /* where the next byte goes */
    uint8_t *chunk;    /* start of the open chunk, NULL when none */
    uint64_t left;     /* zlib bytes not yet put */
    uint32_t in_chunk; /* bytes the open chunk still takes */
};

static void idat_put(struct idat_writer *w, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t take;

        if (w->chunk == NULL) {
            uint32_t len = w->left < IDAT_MAX ? (uint32_t)w->left : IDAT_MAX;

            w->chunk = w->out;
            w->out = chunk_begin(w->out, "IDAT", len);
            w->in_chunk = len;
        }
        take = n < w->in_chunk ? n : w->in_chunk;
        memcpy(w->out, p, take);
        w->out += take;
        w->in_chunk -= (uint32_t)take;
        w->left -= take;
        p += take;
        n -= take;
        if (w->in_chunk == 0) {
            w->out = chunk_end(w->chunk, w->out);
            w->chunk = NULL;
        }
    }
}

/* Puts raw bytes [off, off + n) of the scanlines (filter byte 0 and width
 * pixels each), adding them to the Adler-32 adler. */
static void put_raw(struct idat_writer *w, const uint8_t *pixels, uint32_t width, uint64_t off,
                    uint64_t n, uLong *adler)
{
    static const uint8_t filter = 0;
    uint64_t line = 1 + (uint64_t)width;

    while (n > 0) {
        uint64_t row = off / line, col = off % line;
        size_t take;

        if (col == 0) {
            idat_put(w, &filter, 1);
            *adler = adler32(*adler, &filter, 1);
            off++;
            n--;
            continue;
        }
        take = line - col < n ? (size_t)(line - col) : (size_t)n;
        idat_put(w, pixels + row * width + col - 1, take);
        *adler = adler32(*adler, pixels + row * width + col - 1, (uInt)take);
        off += take;
        n -= take;
    }
}

void tbm_png_write(const uint8_t *pixels, uint32_t width, uint32_t height, uint8_t *out)
{
    static const uint8_t black = 0;
    /* CMF 0x78 (deflate, 32 KiB window), FLG 0x01: 0x7801 is a multiple of
     * 31, and the level field says "fastest", which stored blocks are */
    static const uint8_t zlib_header[2] = {0x78, 0x01};
    uint8_t ihdr[13], adler_be[4];
    uint64_t raw, blocks;
    uLong adler = adler32(0, NULL, 0);
    struct idat_writer w;
    uint8_t *p;

    if (width == 0 || height == 0) {
        pixels = &black;
        fix_empty(&width, &height);
    }
    raw = (uint64_t)height * (1 + (uint64_t)width);
    blocks = stored_blocks(raw);
    memcpy(out, signature, sizeof signature);
    /* IHDR: width, height, bit depth 8, colour type 0 (greyscale),
     * compression 0, filter method 0, no interlace */
    put32(ihdr, width);
    put32(ihdr + 4, height);
    memcpy(ihdr + 8, (const uint8_t[]){8, 0, 0, 0, 0}, 5);
    p = chunk_begin(out + sizeof signature, "IHDR", sizeof ihdr);
    memcpy(p, ihdr, sizeof ihdr);
    p = chunk_end(out + sizeof signature, p + sizeof ihdr);

    w = (struct idat_writer){p, NULL, zlib_size(raw), 0};
    idat_put(&w, zlib_header, sizeof zlib_header);
    for (uint64_t b = 0; b < blocks; b++) {
        uint64_t off = b * STORED_MAX;
        uint16_t len = (uint16_t)(raw - off < STORED_MAX ? raw - off : STORED_MAX);
        /* BFINAL on the last, BTYPE 00; LEN and its complement, little-endian */
        uint8_t head[5] = {b + 1 == blocks, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
                           (uint8_t)(~len >> 8)};

        idat_put(&w, head, sizeof head);
        put_raw(&w, pixels, width, off, len, &adler);
    }
    put32(adler_be, (uint32_t)adler);
    idat_put(&w, adler_be, sizeof adler_be);

    p = chunk_begin(w.out, "IEND", 0);
    chunk_end(w.out, p);
}
