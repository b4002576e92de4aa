/* S3 sources (not installed): where an s3:// URL's object is, and the
 * credentials its requests are signed with; the row of the table of
 * schemes is tbm_scheme_s3 (s3.c). The HTTP source does the requests;
 * libcurl signs them. */
#ifndef TBM_SOURCE_S3_H
#define TBM_SOURCE_S3_H

#include <stdbool.h>
#include <stddef.h>

#include "tbm/source.h"

/* The http(s) URL of the object of s3url ("s3://BUCKET/KEY") and the region
 * to sign for, from the options (NULL when not given) and the environment
 * (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION).
 * The key's bytes are percent-encoded as SigV4 wants them, each
 * /-separated segment alone. *url and *region are malloc'ed. 0,
 * TBM_ERR_NOMEM, or TBM_ERR_SOURCE with the reason in why. */
int tbm_s3_locate(const char *s3url, const char *endpoint, const char *region, char **url,
                  char **out_region, char *why, size_t whylen);

/* A key pair, and a session token when there is one; empty when none was
 * found (requests go unsigned). */
struct tbm_s3_credentials {
    char key_id[128];
    char secret[256];
    char token[4096];
};

/* The credentials to sign with now: the environment's AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN), else the profile
 * AWS_PROFILE (else "default") of the shared credentials file
 * (AWS_SHARED_CREDENTIALS_FILE, else .aws/credentials under $HOME or the
 * user's home directory). *out is emptied first; nothing found is not an
 * error. 0; or TBM_ERR_NOMEM or TBM_ERR_SOURCE when the file is there but
 * cannot be read (not a regular file, too big), with one line naming it in
 * why and *out empty. Never says a secret. */
int tbm_s3_credentials_load(struct tbm_s3_credentials *out, char *why, size_t whylen);

/* Wipes c (its secrets do not linger in freed or reused memory). */
void tbm_s3_credentials_clear(struct tbm_s3_credentials *c);

#endif
