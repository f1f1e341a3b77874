/*
** dproto.c — signed multipart control messages (see dproto.h).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <zmq.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include "dist/dproto.h"

static const char DELIM[] = "<NBDIST>";

void dp_hmac(const unsigned char key[DP_KEYLEN], const void *const *parts, const size_t *lens, int n, unsigned char out[32]) {
  /* HMAC by hand over SHA-256 (EVP digests), so no deprecated HMAC_CTX API */
  unsigned char k0[64] = {0}, ipad[64], opad[64], inner[32];
  memcpy(k0, key, DP_KEYLEN);
  for (int i = 0; i < 64; i++) { ipad[i] = k0[i] ^ 0x36; opad[i] = k0[i] ^ 0x5c; }
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  unsigned int olen = 32;
  EVP_DigestInit_ex(c, EVP_sha256(), NULL);
  EVP_DigestUpdate(c, ipad, 64);
  for (int i = 0; i < n; i++) EVP_DigestUpdate(c, parts[i], lens[i]);
  EVP_DigestFinal_ex(c, inner, &olen);
  EVP_DigestInit_ex(c, EVP_sha256(), NULL);
  EVP_DigestUpdate(c, opad, 64);
  EVP_DigestUpdate(c, inner, 32);
  EVP_DigestFinal_ex(c, out, &olen);
  EVP_MD_CTX_free(c);
}

void dp_hex(const unsigned char *in, size_t n, char *out) {
  static const char h[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) { out[2 * i] = h[in[i] >> 4]; out[2 * i + 1] = h[in[i] & 15]; }
  out[2 * n] = 0;
}
static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
int dp_unhex(const char *in, unsigned char *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int a = hexval(in[2 * i]), b = a < 0 ? -1 : hexval(in[2 * i + 1]);
    if (a < 0 || b < 0) return -1;
    out[i] = (unsigned char)(a * 16 + b);
  }
  return 0;
}
int dp_equal(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b; unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= x[i] ^ y[i];
  return d == 0;
}

int dp_send(void *sock, const unsigned char key[DP_KEYLEN], const char *ident, size_t identlen,
            const char *type, uint32_t seq, int rank, const void *body, size_t len) {
  char header[96];
  int hn = snprintf(header, sizeof header, "%s %u %d", type, seq, rank);
  const void *parts[2] = { header, body ? body : "" };
  size_t lens[2] = { (size_t)hn, body ? len : 0 };
  unsigned char mac[32]; char sig[65];
  dp_hmac(key, parts, lens, 2, mac);
  dp_hex(mac, 32, sig);
  for (;;) {
    int rc = 0;
    if (ident) rc = zmq_send(sock, ident, identlen, ZMQ_SNDMORE);
    if (rc >= 0) rc = zmq_send(sock, DELIM, sizeof DELIM - 1, ZMQ_SNDMORE);
    if (rc >= 0) rc = zmq_send(sock, sig, 64, ZMQ_SNDMORE);
    if (rc >= 0) rc = zmq_send(sock, header, (size_t)hn, ZMQ_SNDMORE);
    if (rc >= 0) rc = zmq_send(sock, body ? body : "", body ? len : 0, 0);
    if (rc >= 0) return 0;
    if (errno == EINTR && !ident) continue;   /* nothing sent yet on a DEALER is rare; retry */
    return -1;
  }
}

void dp_msg_free(dp_Msg *m) { free(m->body); m->body = NULL; m->len = 0; }

/* reads all frames of one message */
static int read_frames(void *sock, int dontwait, zmq_msg_t *fr, int maxf, int *nf) {
  *nf = 0;
  for (;;) {
    zmq_msg_t tmp; zmq_msg_init(&tmp);
    int rc = zmq_msg_recv(&tmp, sock, (*nf == 0 && dontwait) ? ZMQ_DONTWAIT : 0);
    if (rc < 0) {
      zmq_msg_close(&tmp);
      if (*nf == 0 && errno == EAGAIN) return 1;
      if (*nf == 0 && errno == EINTR) return 1;
      if (errno == EINTR) continue;
      for (int i = 0; i < *nf; i++) zmq_msg_close(&fr[i]);
      return -1;
    }
    int more = zmq_msg_more(&tmp);
    if (*nf < maxf) { fr[*nf] = tmp; (*nf)++; } else zmq_msg_close(&tmp);
    if (!more) return 0;
  }
}

int dp_recv(void *sock, const unsigned char key[DP_KEYLEN], int has_ident, int dontwait, dp_Msg *m) {
  memset(m, 0, sizeof *m);
  zmq_msg_t fr[8]; int nf;
  int rc = read_frames(sock, dontwait, fr, 8, &nf);
  if (rc) return rc;
  int i = 0, bad = 0;
  if (has_ident) {
    size_t n = zmq_msg_size(&fr[0]);
    if (n > sizeof m->ident) n = sizeof m->ident;
    memcpy(m->ident, zmq_msg_data(&fr[0]), n); m->identlen = n;
    i = 1;
  }
  if (nf != i + 4 || zmq_msg_size(&fr[i]) != sizeof DELIM - 1 || memcmp(zmq_msg_data(&fr[i]), DELIM, sizeof DELIM - 1) != 0
      || zmq_msg_size(&fr[i + 1]) != 64 || zmq_msg_size(&fr[i + 2]) >= 96) bad = 1;
  if (!bad) {
    const void *parts[2] = { zmq_msg_data(&fr[i + 2]), zmq_msg_data(&fr[i + 3]) };
    size_t lens[2] = { zmq_msg_size(&fr[i + 2]), zmq_msg_size(&fr[i + 3]) };
    unsigned char mac[32], got[32];
    dp_hmac(key, parts, lens, 2, mac);
    if (dp_unhex(zmq_msg_data(&fr[i + 1]), got, 32) != 0 || !dp_equal(mac, got, 32)) bad = 1;
  }
  if (!bad) {
    char header[96]; size_t hn = zmq_msg_size(&fr[i + 2]);
    memcpy(header, zmq_msg_data(&fr[i + 2]), hn); header[hn] = 0;
    unsigned seq = 0; int rank = -1;
    if (sscanf(header, "%31s %u %d", m->type, &seq, &rank) != 3) bad = 1;
    m->seq = seq; m->rank = rank;
  }
  if (!bad) {
    m->len = zmq_msg_size(&fr[i + 3]);
    m->body = malloc(m->len + 1);
    if (!m->body) bad = 1;
    else { memcpy(m->body, zmq_msg_data(&fr[i + 3]), m->len); m->body[m->len] = 0; }
  }
  for (int k = 0; k < nf; k++) zmq_msg_close(&fr[k]);
  return bad ? -2 : 0;
}
