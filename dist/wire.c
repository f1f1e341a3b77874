/*
** wire.c — the Jupyter wire protocol codec (see wire.h).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <jansson.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include "dist/wire.h"

const char *wire_strerror(int code) {
  switch (code) {
  case WIRE_OK: return "ok";
  case WIRE_ETRUNC: return "truncated message";
  case WIRE_ESIG: return "bad signature";
  case WIRE_EJSON: return "bad JSON";
  case WIRE_EFIELD: return "missing or mistyped field";
  case WIRE_ETOOBIG: return "message too big";
  case WIRE_ESYS: return "system error";
  }
  return "unknown error";
}

#define ERR(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); return (code); } while (0)

/* ------------------------------------------------------------ signing */
int wire_auth_init(wire_Auth *a, const char *scheme, const char *key, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  if (!key || !*key) return 0;
  const char *alg = "sha256";
  if (scheme && *scheme) {
    if (strncmp(scheme, "hmac-", 5)) ERR(-1, "unsupported signature_scheme '%s'", scheme);
    alg = scheme + 5;
  }
  const EVP_MD *md = NULL;
  if (!strcmp(alg, "sha256")) md = EVP_sha256();
  else if (!strcmp(alg, "sha1")) md = EVP_sha1();
  else if (!strcmp(alg, "sha224")) md = EVP_sha224();
  else if (!strcmp(alg, "sha384")) md = EVP_sha384();
  else if (!strcmp(alg, "sha512")) md = EVP_sha512();
  else if (!strcmp(alg, "md5")) md = EVP_md5();
  if (!md) ERR(-1, "unsupported signature_scheme '%s'", scheme);
  a->keylen = strlen(key);
  a->key = malloc(a->keylen + 1);
  if (!a->key) ERR(-1, "out of memory");
  memcpy(a->key, key, a->keylen + 1);
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  EVP_MAC_free(mac);
  OSSL_PARAM params[2] = {
    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)EVP_MD_get0_name(md), 0),
    OSSL_PARAM_construct_end(),
  };
  if (!ctx || !EVP_MAC_init(ctx, a->key, a->keylen, params)) {
    EVP_MAC_CTX_free(ctx); wire_auth_free(a);
    ERR(-1, "cannot set up HMAC-%s", alg);
  }
  a->ctx = ctx;
  a->md = md;
  return 0;
}

void wire_auth_free(wire_Auth *a) {
  if (a->key) { OPENSSL_cleanse(a->key, a->keylen); free(a->key); }
  EVP_MAC_CTX_free(a->ctx);
  memset(a, 0, sizeof *a);
}

static int sign_raw(const wire_Auth *a, const wire_Frame f[4], unsigned char *mac, unsigned *maclen) {
  /* the keyed context is only read here, so threads can sign at once */
  EVP_MAC_CTX *h = EVP_MAC_CTX_dup(a->ctx);
  if (!h) return -1;
  int ok = 1;
  for (int i = 0; ok && i < 4; i++) ok = EVP_MAC_update(h, f[i].data ? f[i].data : (const unsigned char *)"", f[i].len);
  size_t n = 0;
  if (ok) ok = EVP_MAC_final(h, mac, &n, EVP_MAX_MD_SIZE);
  EVP_MAC_CTX_free(h);
  *maclen = (unsigned)n;
  return ok ? 0 : -1;
}

void wire_sign(const wire_Auth *a, const wire_Frame f[4], char *hex) {
  hex[0] = 0;
  if (!a || !a->md) return;
  unsigned char mac[EVP_MAX_MD_SIZE]; unsigned n = 0;
  if (sign_raw(a, f, mac, &n)) return;
  static const char digits[] = "0123456789abcdef";
  for (unsigned i = 0; i < n; i++) { hex[2 * i] = digits[mac[i] >> 4]; hex[2 * i + 1] = digits[mac[i] & 15]; }
  hex[2 * n] = 0;
}

/* Constant-time check of a hex signature (either case) against the HMAC. */
static int verify(const wire_Auth *a, const wire_Frame *sig, const wire_Frame f[4]) {
  if (!a || !a->md) return 1;
  unsigned char mac[EVP_MAX_MD_SIZE]; unsigned n = 0;
  if (sign_raw(a, f, mac, &n)) return 0;
  if (sig->len != 2 * (size_t)n) return 0;
  unsigned char got[EVP_MAX_MD_SIZE];
  unsigned bad = 0;
  for (unsigned i = 0; i < n; i++) {
    unsigned v = 0;
    for (int k = 0; k < 2; k++) {
      unsigned c = sig->data[2 * i + (unsigned)k], d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if ((c | 32) >= 'a' && (c | 32) <= 'f') d = (c | 32) - 'a' + 10;
      else { d = 0; bad = 1; }
      v = v * 16 + d;
    }
    got[i] = (unsigned char)v;
  }
  return CRYPTO_memcmp(got, mac, n) == 0 && !bad;
}

/* ------------------------------------------------------------ helpers */
void wire_uuid4(char out[37]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = getrandom(b + got, sizeof b - got, 0);
    if (r <= 0) {   /* no entropy source: fall back to time and a counter */
      static unsigned long ctr;
      struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
      unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^ (++ctr * 0x9e3779b97f4a7c15ull) ^ (unsigned long long)getpid();
      for (; got < sizeof b; got++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; b[got] = (unsigned char)x; }
      break;
    }
    got += (size_t)r;
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  static const char digits[] = "0123456789abcdef";
  int o = 0;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = digits[b[i] >> 4]; out[o++] = digits[b[i] & 15];
  }
  out[o] = 0;
}

void wire_now_iso(char out[40]) {
  struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm; gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, 40 - n, ".%06ldZ", ts.tv_nsec / 1000);
}

void wire_session_init(wire_Session *s) {
  memset(s, 0, sizeof *s);
  wire_uuid4(s->session);
  const char *u = getenv("USER");
  snprintf(s->username, sizeof s->username, "%s", u && *u ? u : "nabla");
}

/* ------------------------------------------------------------ decoding */
void wire_msg_free(wire_Msg *m) {
  for (int i = 0; i < m->nids; i++) free((void *)m->ids[i].data);
  free(m->ids);
  for (int i = 0; i < m->nbuffers; i++) free((void *)m->buffers[i].data);
  free(m->buffers);
  json_decref(m->header); json_decref(m->parent); json_decref(m->metadata); json_decref(m->content);
  free(m->header_raw);
  memset(m, 0, sizeof *m);
}

static int copy_frames(const wire_Frame *src, int n, wire_Frame **dst) {
  *dst = NULL;
  if (n <= 0) return 0;
  wire_Frame *d = calloc((size_t)n, sizeof *d);
  if (!d) return -1;
  for (int i = 0; i < n; i++) {
    unsigned char *p = malloc(src[i].len ? src[i].len : 1);
    if (!p) { for (int k = 0; k < i; k++) free((void *)d[k].data); free(d); return -1; }
    if (src[i].len) memcpy(p, src[i].data, src[i].len);
    d[i].data = p; d[i].len = src[i].len;
  }
  *dst = d;
  return 0;
}

static json_t *parse_object(const wire_Frame *f, const char *what, char *err, size_t errlen) {
  json_error_t je;
  json_t *j = json_loadb((const char *)(f->data ? f->data : (const unsigned char *)""), f->len, JSON_REJECT_DUPLICATES, &je);
  if (!j) { if (err && errlen) snprintf(err, errlen, "%s: %s", what, je.text); return NULL; }
  if (!json_is_object(j)) { if (err && errlen) snprintf(err, errlen, "%s is not a JSON object", what); json_decref(j); return NULL; }
  return j;
}

int wire_decode(const wire_Auth *a, const wire_Frame *frames, int n, wire_Msg *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (n < 0 || n > WIRE_MAX_FRAMES) ERR(WIRE_ETOOBIG, "%d frames", n);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (!frames[i].data && frames[i].len) ERR(WIRE_ETRUNC, "frame %d has no data", i);
    total += frames[i].len;
    if (total > WIRE_MAX_BYTES) ERR(WIRE_ETOOBIG, "message over %zu bytes", (size_t)WIRE_MAX_BYTES);
  }
  int d = -1;
  for (int i = 0; i < n; i++)
    if (frames[i].len == sizeof WIRE_DELIM - 1 && !memcmp(frames[i].data, WIRE_DELIM, sizeof WIRE_DELIM - 1)) { d = i; break; }
  if (d < 0) ERR(WIRE_ETRUNC, "no <IDS|MSG> delimiter in %d frames", n);
  if (n - d - 1 < 5) ERR(WIRE_ETRUNC, "%d frames after the delimiter, need 5", n - d - 1);
  const wire_Frame *sig = &frames[d + 1], *body = &frames[d + 2];
  if (!verify(a, sig, body)) ERR(WIRE_ESIG, "signature does not match");

  wire_Msg m = {0};
  int code = WIRE_EJSON;
  if (!(m.header = parse_object(&body[0], "header", err, errlen))) goto fail;
  if (!(m.parent = parse_object(&body[1], "parent_header", err, errlen))) goto fail;
  if (!(m.metadata = parse_object(&body[2], "metadata", err, errlen))) goto fail;
  if (!(m.content = parse_object(&body[3], "content", err, errlen))) goto fail;
  code = WIRE_EFIELD;
  json_t *t = json_object_get(m.header, "msg_type"), *id = json_object_get(m.header, "msg_id"),
         *se = json_object_get(m.header, "session"), *u = json_object_get(m.header, "username"),
         *v = json_object_get(m.header, "version");
  if (!json_is_string(t) || !*json_string_value(t)) { if (err) snprintf(err, errlen, "header.msg_type missing or not a string"); goto fail; }
  if (!json_is_string(id)) { if (err) snprintf(err, errlen, "header.msg_id missing or not a string"); goto fail; }
  if (se && !json_is_string(se)) { if (err) snprintf(err, errlen, "header.session is not a string"); goto fail; }
  if (u && !json_is_string(u)) { if (err) snprintf(err, errlen, "header.username is not a string"); goto fail; }
  if (v && !json_is_string(v)) { if (err) snprintf(err, errlen, "header.version is not a string"); goto fail; }
  m.msg_type = json_string_value(t);
  m.msg_id = json_string_value(id);
  m.session = se ? json_string_value(se) : "";
  code = WIRE_ESYS;
  m.header_raw = malloc(body[0].len + 1);
  if (!m.header_raw) goto fail;
  memcpy(m.header_raw, body[0].data, body[0].len); m.header_raw[body[0].len] = 0;
  m.header_len = body[0].len;
  if (copy_frames(frames, d, &m.ids)) goto fail;
  m.nids = d;
  if (copy_frames(frames + d + 6, n - d - 6, &m.buffers)) goto fail;
  m.nbuffers = n - d - 6;
  *out = m;
  return WIRE_OK;
fail:
  if (code == WIRE_ESYS && err && errlen) snprintf(err, errlen, "out of memory");
  wire_msg_free(&m);
  return code;
}

int wire_recv(void *sock, const wire_Auth *a, wire_Msg *out, int flags, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  zmq_msg_t parts[64];
  zmq_msg_t *p = parts;
  int cap = 64, n = 0, code = WIRE_OK;
  size_t total = 0;
  for (;;) {
    zmq_msg_t tmp;
    zmq_msg_init(&tmp);
    if (zmq_msg_recv(&tmp, sock, n == 0 ? flags : 0) < 0) {
      int e = errno;
      zmq_msg_close(&tmp);
      for (int i = 0; i < n; i++) zmq_msg_close(&p[i]);
      if (p != parts) free(p);
      errno = e;
      if (err && errlen) snprintf(err, errlen, "recv: %s", zmq_strerror(e));
      return WIRE_ESYS;
    }
    int more = zmq_msg_more(&tmp);
    total += zmq_msg_size(&tmp);
    if (code == WIRE_OK && (n >= WIRE_MAX_FRAMES || total > WIRE_MAX_BYTES)) code = WIRE_ETOOBIG;
    if (code == WIRE_OK) {
      if (n == cap) {
        int ncap = cap * 2;
        zmq_msg_t *np = malloc(sizeof *np * (size_t)ncap);
        if (!np) { code = WIRE_ESYS; zmq_msg_close(&tmp); }
        else { memcpy(np, p, sizeof *np * (size_t)n); if (p != parts) free(p); p = np; cap = ncap; }
      }
      if (code == WIRE_OK) { memcpy(&p[n], &tmp, sizeof tmp); n++; }
      else zmq_msg_close(&tmp);
    } else zmq_msg_close(&tmp);   /* draining the rest of a rejected message */
    if (!more) break;
  }
  if (code == WIRE_OK) {
    wire_Frame *f = malloc(sizeof *f * (size_t)(n ? n : 1));
    if (!f) code = WIRE_ESYS;
    else {
      for (int i = 0; i < n; i++) { f[i].data = zmq_msg_data(&p[i]); f[i].len = zmq_msg_size(&p[i]); }
      code = wire_decode(a, f, n, out, err, errlen);
      free(f);
    }
  } else if (err && errlen) {
    snprintf(err, errlen, code == WIRE_ETOOBIG ? "message over %zu bytes or %d frames" : "out of memory",
             (size_t)WIRE_MAX_BYTES, WIRE_MAX_FRAMES);
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&p[i]);
  if (p != parts) free(p);
  if (code == WIRE_ESYS) errno = ENOMEM;
  return code;
}

/* ------------------------------------------------------------ sending */
static int send_frame(void *sock, const void *data, size_t len, int more) {
  for (;;) {
    if (zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) >= 0) return 0;
    if (errno != EINTR) return -1;
  }
}

int wire_send(void *sock, const wire_Session *s, const wire_Frame *ids, int nids, const char *topic,
              const char *parent_raw, size_t parent_len, const char *msg_type,
              json_t *content, json_t *metadata) {
  char id[37], date[40];
  wire_uuid4(id);
  wire_now_iso(date);
  json_t *h = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "session", s->session,
                        "username", s->username, "date", date, "msg_type", msg_type,
                        "version", WIRE_PROTOCOL_VERSION);
  char *hs = h ? json_dumps(h, JSON_COMPACT) : NULL;
  char *cs = content ? json_dumps(content, JSON_COMPACT) : NULL;
  char *ms = metadata ? json_dumps(metadata, JSON_COMPACT) : NULL;
  json_decref(h); json_decref(content); json_decref(metadata);
  int rc = -1;
  if (!hs || (content && !cs) || (metadata && !ms)) goto done;
  if (!parent_raw || !parent_len) { parent_raw = "{}"; parent_len = 2; }
  wire_Frame body[4] = {
    { (const unsigned char *)hs, strlen(hs) },
    { (const unsigned char *)parent_raw, parent_len },
    { (const unsigned char *)(ms ? ms : "{}"), ms ? strlen(ms) : 2 },
    { (const unsigned char *)(cs ? cs : "{}"), cs ? strlen(cs) : 2 },
  };
  char sig[2 * EVP_MAX_MD_SIZE + 1];
  wire_sign(&s->auth, body, sig);
  if (topic && send_frame(sock, topic, strlen(topic), 1)) goto done;
  for (int i = 0; i < nids; i++) if (send_frame(sock, ids[i].data, ids[i].len, 1)) goto done;
  if (send_frame(sock, WIRE_DELIM, sizeof WIRE_DELIM - 1, 1)) goto done;
  if (send_frame(sock, sig, strlen(sig), 1)) goto done;
  for (int i = 0; i < 4; i++) if (send_frame(sock, body[i].data, body[i].len, i < 3)) goto done;
  rc = 0;
done:
  free(hs); free(cs); free(ms);
  return rc;
}

int wire_reply(void *sock, const wire_Session *s, const wire_Msg *msg, const char *msg_type, json_t *content) {
  return wire_send(sock, s, msg->ids, msg->nids, NULL, msg->header_raw, msg->header_len, msg_type, content, NULL);
}
