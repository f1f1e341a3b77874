/*
** dproto.c — signed multipart control messages (see dproto.h).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdint.h>
#include <zmq.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
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

void dp_limit_socket(void *sock) {
  int64_t max = (int64_t)DP_MAX_FRAME + 4096;   /* headroom: CURVE wraps each frame in a MESSAGE command */
  zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
}

/* a CURVE key pair from the session key: secret = HMAC(key, who) (any 32
** bytes are a Curve25519 secret), public derived from it; Z85 text */
static int curve_pair(const unsigned char key[DP_KEYLEN], const char *who, char secret[41], char public_[41]) {
  unsigned char raw[32];
  const void *parts[1] = { who }; size_t lens[1] = { strlen(who) };
  dp_hmac(key, parts, lens, 1, raw);
  int ok = zmq_z85_encode(secret, raw, sizeof raw) != NULL && zmq_curve_public(public_, secret) == 0;
  OPENSSL_cleanse(raw, sizeof raw);
  return ok ? 0 : -1;
}

int dp_curve_server(void *sock, const unsigned char key[DP_KEYLEN]) {
  char sec[41], pub[41]; int one = 1;
  int rc = zmq_has("curve") && !curve_pair(key, "nabla-curve-server", sec, pub)
           && !zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one)
           && !zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 41) ? 0 : -1;
  OPENSSL_cleanse(sec, sizeof sec); OPENSSL_cleanse(pub, sizeof pub);
  return rc;
}

int dp_curve_client(void *sock, const unsigned char key[DP_KEYLEN]) {
  char ssec[41], spub[41], csec[41], cpub[41];
  int rc = zmq_has("curve") && !curve_pair(key, "nabla-curve-server", ssec, spub) && !curve_pair(key, "nabla-curve-client", csec, cpub)
           && !zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, spub, 41)
           && !zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, cpub, 41)
           && !zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, csec, 41) ? 0 : -1;
  OPENSSL_cleanse(ssec, sizeof ssec); OPENSSL_cleanse(spub, sizeof spub);
  OPENSSL_cleanse(csec, sizeof csec); OPENSSL_cleanse(cpub, sizeof cpub);
  return rc;
}

void dp_out_free(dp_Out *o) {
  for (int i = 0; i < o->n; i++) zmq_msg_close(&o->fr[i]);
  free(o->fr);
  o->fr = NULL; o->n = 0;
}

static int frame_of(zmq_msg_t *f, const void *data, size_t len) {
  if (zmq_msg_init_size(f, len)) return -1;
  if (len) memcpy(zmq_msg_data(f), data, len);
  return 0;
}

int dp_build(dp_Out *o, const unsigned char *key, const char *ident, size_t identlen,
             const char *type, uint32_t seq, int rank, uint64_t ctr, const void *body, size_t len) {
  o->fr = NULL; o->n = 0;
  if (!body) len = 0;
  if (len > DP_MAX_MSG) return -1;
  char header[128];
  int hn = snprintf(header, sizeof header, "%s %u %d %llu", type, seq, rank, (unsigned long long)ctr);
  if (hn < 0 || hn >= 96) return -1;
  int nbody = (int)((len + DP_MAX_FRAME - 1) / DP_MAX_FRAME);
  int total = (ident ? 1 : 0) + 3 + nbody;
  o->fr = malloc(sizeof *o->fr * (size_t)total);
  if (!o->fr) return -1;
  char sig[65];
  if (key) {
    const void *parts[2] = { header, body ? body : "" };
    size_t lens[2] = { (size_t)hn, len };
    unsigned char mac[32];
    dp_hmac(key, parts, lens, 2, mac);
    dp_hex(mac, 32, sig);
  } else memset(sig, '0', 64);
  int bad = 0;
  if (ident) bad |= frame_of(&o->fr[o->n++], ident, identlen);
  if (!bad) bad |= frame_of(&o->fr[o->n++], DELIM, sizeof DELIM - 1);
  if (!bad) bad |= frame_of(&o->fr[o->n++], sig, 64);
  if (!bad) bad |= frame_of(&o->fr[o->n++], header, (size_t)hn);
  for (int i = 0; i < nbody && !bad; i++) {
    size_t off = (size_t)i * DP_MAX_FRAME, k = len - off < DP_MAX_FRAME ? len - off : DP_MAX_FRAME;
    bad |= frame_of(&o->fr[o->n++], (const char *)body + off, k);
  }
  if (bad) { o->n--; dp_out_free(o); return -1; }
  return 0;
}

int dp_out_send(dp_Out *o, void *sock, int flags) {
  if (!o->n) return 1;
  for (;;) {
    if (zmq_msg_send(&o->fr[0], sock, (flags & ZMQ_DONTWAIT) | (o->n > 1 ? ZMQ_SNDMORE : 0)) >= 0) break;
    if (errno == EAGAIN && (flags & ZMQ_DONTWAIT)) return 0;
    if (errno == EINTR) { if (flags & ZMQ_DONTWAIT) return 0; continue; }
    dp_out_free(o);
    return 1;
  }
  /* the first part went: ZeroMQ takes the rest of a multipart message as a whole */
  for (int i = 1; i < o->n; i++)
    if (zmq_msg_send(&o->fr[i], sock, i + 1 < o->n ? ZMQ_SNDMORE : 0) < 0) zmq_msg_close(&o->fr[i]);
  free(o->fr);
  o->fr = NULL; o->n = 0;
  return 1;
}

int dp_send(void *sock, const unsigned char *key, const char *ident, size_t identlen,
            const char *type, uint32_t seq, int rank, uint64_t ctr, const void *body, size_t len) {
  dp_Out o;
  if (dp_build(&o, key, ident, identlen, type, seq, rank, ctr, body, len)) return -1;
  dp_out_send(&o, sock, 0);
  return 0;
}

void dp_msg_free(dp_Msg *m) { free(m->body); m->body = NULL; m->len = 0; }

/* Parses the header "TYPE SEQ RANK CTR" (n bytes, not NUL-terminated). */
static int parse_header(const void *data, size_t n, dp_Msg *m) {
  if (n >= 96) return -1;
  char header[96];
  memcpy(header, data, n); header[n] = 0;
  if (memchr(header, 0, n)) return -1;
  unsigned seq = 0; int rank = -1; unsigned long long ctr = 0; int used = 0;
  if (sscanf(header, "%31s %u %d %llu%n", m->type, &seq, &rank, &ctr, &used) != 4 || header[used]) return -1;
  m->seq = seq; m->rank = rank; m->ctr = ctr;
  return 0;
}

int dp_decode(const unsigned char *key, const void *const *frames, const size_t *lens, int nf, int has_ident, dp_Msg *m) {
  memset(m, 0, sizeof *m);
  int i = 0;
  if (has_ident) {
    if (nf < 1) return -2;
    size_t n = lens[0] < sizeof m->ident ? lens[0] : sizeof m->ident;
    memcpy(m->ident, frames[0], n); m->identlen = n;
    i = 1;
  }
  if (nf < i + 3 || nf > DP_MAX_FRAMES) return nf > DP_MAX_FRAMES ? -3 : -2;
  if (lens[i] != sizeof DELIM - 1 || memcmp(frames[i], DELIM, sizeof DELIM - 1) || lens[i + 1] != 64) return -2;
  int nbody = nf - i - 3;
  size_t len = 0;
  for (int k = 0; k < nbody; k++) {
    if (lens[i + 3 + k] > DP_MAX_FRAME || len + lens[i + 3 + k] > DP_MAX_MSG) return -3;
    len += lens[i + 3 + k];
  }
  if (key) {
    unsigned char mac[32], got[32];
    const void *parts[DP_MAX_FRAMES];
    size_t plens[DP_MAX_FRAMES];
    for (int k = 0; k < nbody + 1; k++) { parts[k] = frames[i + 2 + k]; plens[k] = lens[i + 2 + k]; }
    dp_hmac(key, parts, plens, nbody + 1, mac);
    if (dp_unhex(frames[i + 1], got, 32) != 0 || !dp_equal(mac, got, 32)) return -2;
  }
  if (parse_header(frames[i + 2], lens[i + 2], m)) return -2;
  m->body = malloc(len + 1);
  if (!m->body) return -3;
  size_t off = 0;
  for (int k = 0; k < nbody; k++) { if (lens[i + 3 + k]) memcpy(m->body + off, frames[i + 3 + k], lens[i + 3 + k]); off += lens[i + 3 + k]; }
  m->body[len] = 0; m->len = len;
  return 0;
}

/* Reads all frames of one message, keeping at most maxf of them and at most
** DP_MAX_MSG bytes: the rest of an over-limit message is received and closed
** one frame at a time (each is at most DP_MAX_FRAME: ZMQ_MAXMSGSIZE). */
static int read_frames(void *sock, int dontwait, zmq_msg_t *fr, int maxf, int *nf, int *over) {
  *nf = 0; *over = 0;
  size_t total = 0;
  for (;;) {
    zmq_msg_t tmp; zmq_msg_init(&tmp);
    int rc = zmq_msg_recv(&tmp, sock, (*nf == 0 && !*over && dontwait) ? ZMQ_DONTWAIT : 0);
    if (rc < 0) {
      zmq_msg_close(&tmp);
      if (*nf == 0 && !*over && (errno == EAGAIN || errno == EINTR)) return 1;
      if (errno == EINTR) continue;
      for (int i = 0; i < *nf; i++) zmq_msg_close(&fr[i]);
      *nf = 0;
      return -1;
    }
    int more = zmq_msg_more(&tmp);
    total += zmq_msg_size(&tmp);
    if (*nf >= maxf || total > DP_MAX_MSG + 4096) *over = 1;
    if (!*over) { fr[*nf] = tmp; (*nf)++; } else zmq_msg_close(&tmp);
    if (!more) return 0;
  }
}

int dp_recv(void *sock, const unsigned char *key, int has_ident, int dontwait, dp_Msg *m) {
  memset(m, 0, sizeof *m);
  zmq_msg_t *fr = malloc(sizeof *fr * (size_t)(DP_MAX_FRAMES + 1));
  if (!fr) return -1;
  int nf, over;
  int rc = read_frames(sock, dontwait, fr, DP_MAX_FRAMES + 1, &nf, &over);
  if (rc) { free(fr); return rc; }
  const void *data[DP_MAX_FRAMES + 1]; size_t lens[DP_MAX_FRAMES + 1];
  for (int k = 0; k < nf; k++) { data[k] = zmq_msg_data(&fr[k]); lens[k] = zmq_msg_size(&fr[k]); }
  rc = over ? -3 : dp_decode(key, data, lens, nf, has_ident, m);
  if (rc && has_ident && nf >= 1 && !m->identlen) {
    size_t n = lens[0] < sizeof m->ident ? lens[0] : sizeof m->ident;
    memcpy(m->ident, data[0], n); m->identlen = n;
  }
  for (int k = 0; k < nf; k++) zmq_msg_close(&fr[k]);
  free(fr);
  if (rc) dp_msg_free(m);
  return rc;
}

/* ------------------------------------------------------------ bodies */
int dp_parse_hello(const char *body, dp_Hello *h) {
  memset(h, 0, sizeof *h);
  h->rank = -1;
  if (sscanf(body, "%63s %d %d %d %79s %79s %23s %71s", h->ver, &h->pid, &h->rank, &h->lrank, h->addr, h->host, h->ts, h->mac) < 8) return -1;
  return 0;
}

void dp_welcome_free(dp_Welcome *w) {
  if (w->addrs) for (int i = 0; i < w->world; i++) free(w->addrs[i]);
  free(w->addrs);
  w->addrs = NULL;
}

int dp_parse_welcome(const char *body, size_t len, int world, dp_Welcome *w) {
  memset(w, 0, sizeof *w);
  snprintf(w->backend, sizeof w->backend, "ring");
  const char *end = body + len, *nl = memchr(body, '\n', len);
  size_t first = nl ? (size_t)(nl - body) : len;
  char line[128];
  if (first >= sizeof line) return -1;
  memcpy(line, body, first); line[first] = 0;
  int wd = 0, tmo = 0; unsigned gen = 0;
  if (sscanf(line, "%d %d %u %15s", &wd, &tmo, &gen, w->backend) < 3 || wd != world || world < 1) return -1;
  w->addrs = calloc((size_t)world, sizeof *w->addrs);
  if (!w->addrs) return -1;
  w->world = world; w->timeout_ms = tmo; w->gen = gen;
  const char *p = nl ? nl + 1 : end;
  for (int i = 0; i < world; i++) {
    const char *e = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    size_t n = p < end ? (e ? (size_t)(e - p) : (size_t)(end - p)) : 0;
    if (!(w->addrs[i] = strndup(p < end ? p : "", n))) { dp_welcome_free(w); return -1; }
    p = e ? e + 1 : end;
  }
  return 0;
}

int dp_split_args(char *body, size_t len, char **argv, int max) {
  int argc = 0;
  for (size_t i = 0; i < len && argc < max; ) {
    argv[argc++] = body + i;
    size_t k = strnlen(body + i, len - i);
    i += k + 1;
  }
  return argc;
}
