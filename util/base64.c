/* util/base64.c — base64 through OpenSSL (see base64.h). */
#include <stdlib.h>
#include <limits.h>
#include <openssl/evp.h>
#include "util/base64.h"

/* EVP_EncodeBlock takes an int length: encode in pieces that are a multiple
** of 3 bytes, so the pieces' encodings concatenate to the whole one. */
size_t nu_base64_encode(char *dst, const void *src, size_t n) {
  const unsigned char *s = src;
  unsigned char *d = (unsigned char *)dst;
  const size_t piece = (size_t)3 << 28;
  size_t out = 0;
  do {
    size_t k = n < piece ? n : piece;
    out += (size_t)EVP_EncodeBlock(d + out, s, (int)k);
    s += k; n -= k;
  } while (n > 0);
  dst[out] = 0;
  return out;
}

char *nu_base64_dup(const void *src, size_t n, size_t *len) {
  if (n > (SIZE_MAX - 1) / 4 * 3 - 3) return NULL;
  char *d = malloc(nu_base64_len(n) + 1);
  if (!d) return NULL;
  size_t k = nu_base64_encode(d, src, n);
  if (len) *len = k;
  return d;
}
