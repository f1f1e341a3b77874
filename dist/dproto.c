/*
** dproto.c — the session<->worker control protocol (see dproto.h): the
** frame layout, the "TYPE SEQ RANK CTR" header, bodies split into frames,
** the CURVE keys derived from the session key and the parsers of the
** handshake's bodies.  The signing, the constant-time check and the bounded
** receive are the shared core in wire/sign.c (the kernel's Jupyter codec
** uses the same).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdint.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include "dist/dproto.h"
#include "wire/sign.h"

static const char DELIM[] = "<NBDIST>";

void dp_limit_socket(void *sock) {
  wire_limit_frame(sock, (int64_t)DP_MAX_FRAME + 4096);   /* headroom: CURVE wraps each frame in a MESSAGE command */
}

/* a CURVE key pair from the session key: secret = HMAC(key, who) (any 32
** bytes are a Curve25519 secret), public derived from it; Z85 text */
static int curve_pair(const unsigned char key[DP_KEYLEN], const char *who, char secret[41], char public_[41]) {
  unsigned char raw[32];
  const void *parts[1] = { who }; size_t lens[1] = { strlen(who) };
  int ok = !wire_hmac_sha256(key, DP_KEYLEN, parts, lens, 1, raw) && zmq_z85_encode(secret, raw, sizeof raw) != NULL && zmq_curve_public(public_, secret) == 0;
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
    if (wire_hmac_sha256(key, DP_KEYLEN, parts, lens, 2, mac)) { free(o->fr); o->fr = NULL; return -1; }
    wire_hex(mac, 32, sig);
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
    unsigned char mac[32];
    if (wire_hmac_sha256(key, DP_KEYLEN, frames + i + 2, lens + i + 2, nbody + 1, mac) ||
        !wire_sig_matches(frames[i + 1], lens[i + 1], mac, 32)) return -2;
  }
  if (parse_header(frames[i + 2], lens[i + 2], m)) return -2;
  m->body = malloc(len + 1);
  if (!m->body) return -3;
  size_t off = 0;
  for (int k = 0; k < nbody; k++) { if (lens[i + 3 + k]) memcpy(m->body + off, frames[i + 3 + k], lens[i + 3 + k]); off += lens[i + 3 + k]; }
  m->body[len] = 0; m->len = len;
  return 0;
}

int dp_recv(void *sock, const unsigned char *key, int has_ident, int dontwait, dp_Msg *m) {
  memset(m, 0, sizeof *m);
  /* at most DP_MAX_FRAMES + 1 frames and DP_MAX_MSG bytes (and the header's)
  ** are kept; the rest of a bigger message is received and dropped */
  wire_Parts r;
  if (wire_recv_parts(sock, dontwait ? ZMQ_DONTWAIT : 0, DP_MAX_FRAMES + 1, DP_MAX_MSG + 4096, &r, NULL, NULL))
    return errno == EAGAIN || errno == EINTR ? 1 : -1;
  int rc;
  if (r.nomem) rc = -1;
  else {
    const void **data = malloc(sizeof *data * (size_t)(r.n ? r.n : 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(r.n ? r.n : 1));
    if (!data || !lens) rc = -1;
    else {
      for (int k = 0; k < r.n; k++) { data[k] = zmq_msg_data(&r.p[k]); lens[k] = zmq_msg_size(&r.p[k]); }
      rc = r.over ? -3 : dp_decode(key, data, lens, r.n, has_ident, m);
      if (rc && has_ident && r.n >= 1 && !m->identlen) {   /* the sender, for the log */
        size_t n = lens[0] < sizeof m->ident ? lens[0] : sizeof m->ident;
        memcpy(m->ident, data[0], n); m->identlen = n;
      }
    }
    free(data); free(lens);
  }
  wire_parts_close(&r);
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
