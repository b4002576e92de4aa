/* What a server's answer says, as the HTTP source reads it (not installed):
 * the header lines libcurl hands over one by one, and a store's XML error
 * body. Apart from libcurl, so that a fuzzer can feed them anything. */
#ifndef TBM_SOURCE_ANSWER_H
#define TBM_SOURCE_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What identifies the file in one answer; the words are cleaned (valid
 * UTF-8, no control bytes), so that they may be quoted. */
struct tbm_validators {
    uint64_t size; /* the total of Content-Range */
    bool has_size;
    char etag[128];
    char last_modified[64];
};

/* What the header of one HTTP answer says: the range it holds and the
 * file's validators. */
struct tbm_http_answer {
    bool has_range; /* Content-Range "bytes first-last/size", first <= last < size */
    uint64_t first, last;
    struct tbm_validators v;
};

/* Takes one header line (len bytes, with or without its CRLF; a status
 * line starts a new answer, after a redirect or a 100 Continue). */
void tbm_answer_header(struct tbm_http_answer *ans, const char *line, size_t len);

/* The store's error code of an XML error body (S3's <Code>), cleaned, in
 * code (cap bytes, at least 4); "" when there is none. */
void tbm_answer_error_code(const char *body, size_t len, char *code, size_t cap);

#endif
