/*
** sign.c — the signing core shared by the kernel's Jupyter codec and dist's
** control protocol (see sign.h).
*/
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include "wire/sign.h"

/* ------------------------------------------------------------ HMAC */
void *wire_mac_new(const char *digest, const void *key, size_t keylen) {
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  EVP_MAC_free(mac);   /* the context holds its own reference */
  OSSL_PARAM params[2] = {
    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0),
    OSSL_PARAM_construct_end(),
  };
  if (!ctx || !EVP_MAC_init(ctx, key, keylen, params)) { EVP_MAC_CTX_free(ctx); return NULL; }
  return ctx;
}

void wire_mac_free(void *ctx) { EVP_MAC_CTX_free(ctx); }

int wire_mac(void *ctx, const wire_Frame *f, int n, unsigned char *mac, unsigned *maclen) {
  /* the keyed context is only read here (a duplicate takes the data), so
  ** threads can sign with one key at once */
  EVP_MAC_CTX *h = EVP_MAC_CTX_dup(ctx);
  if (!h) return -1;
  int ok = 1;
  for (int i = 0; ok && i < n; i++) ok = EVP_MAC_update(h, f[i].data ? f[i].data : (const unsigned char *)"", f[i].len);
  size_t len = 0;
  if (ok) ok = EVP_MAC_final(h, mac, &len, EVP_MAX_MD_SIZE);
  EVP_MAC_CTX_free(h);
  *maclen = (unsigned)len;
  return ok ? 0 : -1;
}

int wire_hmac_sha256(const void *key, size_t keylen, const void *const *parts, const size_t *lens, int n, unsigned char out[32]) {
  EVP_MAC_CTX *h = wire_mac_new("SHA256", key, keylen);
  int ok = h != NULL;
  for (int i = 0; ok && i < n; i++) ok = EVP_MAC_update(h, parts[i] ? parts[i] : (const void *)"", lens[i]);
  size_t len = 0;
  if (ok) ok = EVP_MAC_final(h, out, &len, 32) && len == 32;
  EVP_MAC_CTX_free(h);
  return ok ? 0 : -1;
}

/* ------------------------------------------------------------ signatures as text */
void wire_hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) { out[2 * i] = digits[in[i] >> 4]; out[2 * i + 1] = digits[in[i] & 15]; }
  out[2 * n] = 0;
}

/* a hex digit's value (either case), or -1 */
static int hexval(unsigned c) {
  unsigned l = c | 32;
  int dec = c >= '0' && c <= '9', alpha = l >= 'a' && l <= 'f';
  return dec ? (int)(c - '0') : alpha ? (int)(l - 'a' + 10) : -1;
}

int wire_unhex(const char *in, unsigned char *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int a = hexval((unsigned char)in[2 * i]), b = a < 0 ? -1 : hexval((unsigned char)in[2 * i + 1]);
    if (a < 0 || b < 0) return -1;
    out[i] = (unsigned char)(a * 16 + b);
  }
  return 0;
}

int wire_sig_matches(const unsigned char *hex, size_t hexlen, const unsigned char *mac, unsigned n) {
  if (!n || n > EVP_MAX_MD_SIZE || hexlen != 2 * (size_t)n) return 0;
  unsigned char got[EVP_MAX_MD_SIZE];
  unsigned bad = 0;
  for (unsigned i = 0; i < n; i++) {
    int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
    bad |= (unsigned)(a < 0) | (unsigned)(b < 0);
    got[i] = (unsigned char)(((a & 15) << 4) | (b & 15));
  }
  return CRYPTO_memcmp(got, mac, n) == 0 && !bad;
}

int wire_equal(const void *a, const void *b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

/* ------------------------------------------------------------ replays */
struct wire_Seen {
  pthread_mutex_t mu;
  int gen;                       /* entries per generation */
  size_t slots;                  /* 2*gen slots per table */
  unsigned char (*t[2])[32];     /* open addressing; all zero: empty */
  int count;                     /* entries in t[0] */
};

wire_Seen *wire_seen_new(int gen) {
  wire_Seen *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->gen = gen; s->slots = 2 * (size_t)gen;
  s->t[0] = calloc(s->slots, sizeof *s->t[0]);
  s->t[1] = calloc(s->slots, sizeof *s->t[1]);
  if (!s->t[0] || !s->t[1]) { free(s->t[0]); free(s->t[1]); free(s); return NULL; }
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

void wire_seen_free(wire_Seen *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->mu);
  free(s->t[0]); free(s->t[1]); free(s);
}

/* 1 when d is in table t; else 0 and *slot is where it goes */
static int seen_find(const wire_Seen *s, unsigned char (*t)[32], const unsigned char d[32], size_t *slot) {
  static const unsigned char zero[32];
  uint64_t h; memcpy(&h, d, sizeof h);   /* an HMAC: its bytes are as good as a hash */
  for (size_t i = (size_t)h % s->slots;; i = (i + 1) % s->slots) {
    if (!memcmp(t[i], d, 32)) return 1;
    if (!memcmp(t[i], zero, 32)) { *slot = i; return 0; }
  }
}

/* A full generation becomes the old one and the old one is forgotten, so
** memory is fixed. */
int wire_seen_check(wire_Seen *s, const unsigned char *mac, unsigned n) {
  unsigned char d[32] = {0};
  memcpy(d, mac, n < 32 ? n : 32);
  d[31] |= 1;   /* never all zero (the empty slot) */
  pthread_mutex_lock(&s->mu);
  size_t slot = 0, other;
  int hit = seen_find(s, s->t[1], d, &other) || seen_find(s, s->t[0], d, &slot);
  if (!hit) {
    if (s->count >= s->gen) {
      unsigned char (*old)[32] = s->t[1];
      s->t[1] = s->t[0];
      memset(old, 0, s->slots * sizeof *old);
      s->t[0] = old; s->count = 0;
      seen_find(s, s->t[0], d, &slot);
    }
    memcpy(s->t[0][slot], d, 32);
    s->count++;
  }
  pthread_mutex_unlock(&s->mu);
  return hit;
}

/* ------------------------------------------------------------ bounds */
void wire_limit_frame(void *sock, int64_t max) {
  zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
}

void wire_parts_close(wire_Parts *r) {
  for (int i = 0; i < r->n; i++) zmq_msg_close(&r->p[i]);
  free(r->p);
  r->p = NULL; r->n = r->cap = 0;
}

int wire_recv_parts(void *sock, int flags, int maxf, size_t maxbytes, wire_Parts *r, wire_OverFn over, void *ud) {
  memset(r, 0, sizeof *r);
  for (int idx = 0;; idx++) {
    zmq_msg_t tmp;
    zmq_msg_init(&tmp);
    if (zmq_msg_recv(&tmp, sock, idx == 0 ? flags : 0) < 0) {
      int e = errno;
      zmq_msg_close(&tmp);
      /* the rest of a message whose first part came is there: only a signal stops it */
      if (e == EINTR && idx > 0) { idx--; continue; }
      wire_parts_close(r);
      errno = e;
      return -1;
    }
    int more = zmq_msg_more(&tmp);
    r->bytes += zmq_msg_size(&tmp);
    r->frames = idx + 1;
    if (!r->over && !r->nomem && (r->n >= maxf || r->bytes > maxbytes)) {
      /* over the limit: from here on frames are shown to `over` and dropped */
      r->over = 1;
      if (over) for (int i = 0; i < r->n; i++) over(ud, i, zmq_msg_data(&r->p[i]), zmq_msg_size(&r->p[i]));
    }
    if (!r->over && !r->nomem && r->n == r->cap) {
      int ncap = r->cap ? r->cap * 2 : 16;
      zmq_msg_t *np = realloc(r->p, sizeof *np * (size_t)ncap);
      if (np) { r->p = np; r->cap = ncap; } else r->nomem = 1;
    }
    if (!r->over && !r->nomem) { memcpy(&r->p[r->n], &tmp, sizeof tmp); r->n++; }
    else {
      if (r->over && over) over(ud, idx, zmq_msg_data(&tmp), zmq_msg_size(&tmp));
      zmq_msg_close(&tmp);
    }
    if (!more) return 0;
  }
}
