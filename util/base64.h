/*
** util/base64.h — standard base64 (RFC 4648, with padding), as Jupyter's
** JSON carries binary display data and SVG embeds PNG images.  Backed by
** OpenSSL's EVP_EncodeBlock, which the build already links for HMAC.
*/
#ifndef NABLA_UTIL_BASE64_H
#define NABLA_UTIL_BASE64_H

#include <stddef.h>

/* Length of the encoding of n bytes, without a terminating NUL. */
static inline size_t nu_base64_len(size_t n) { return (n + 2) / 3 * 4; }
/* Writes the encoding of src[0..n) and a NUL into dst, which holds at least
** nu_base64_len(n) + 1 bytes; returns the encoding's length. */
size_t nu_base64_encode(char *dst, const void *src, size_t n);
/* A malloc'd, NUL-terminated encoding (*len gets its length when len is not
** NULL); NULL when memory runs out. */
char *nu_base64_dup(const void *src, size_t n, size_t *len);

#endif
