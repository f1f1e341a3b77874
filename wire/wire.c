/*
** wire.c — the Jupyter wire protocol codec (see wire.h): the frame layout,
** the JSON header and the checks of a Jupyter message.  Signing, constant-
** time verification, replay memory and the bounded receive are the shared
** core in sign.c (dist's control protocol uses the same).
*/
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
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
#include "wire/wire.h"
#include "wire/sign.h"

const char *wire_strerror(int code) {
  switch (code) {
  case WIRE_OK: return "ok";
  case WIRE_ETRUNC: return "truncated message";
  case WIRE_ESIG: return "bad signature";
  case WIRE_EJSON: return "bad JSON";
  case WIRE_EFIELD: return "missing or mistyped field";
  case WIRE_ETOOBIG: return "message too big";
  case WIRE_ESYS: return "system error";
  case WIRE_EREPLAY: return "replayed message";
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
  void *ctx = wire_mac_new(EVP_MD_get0_name(md), a->key, a->keylen);
  if (!ctx) {
    wire_auth_free(a);
    ERR(-1, "cannot set up HMAC-%s", alg);
  }
  a->ctx = ctx;
  a->md = md;
  return 0;
}

int wire_auth_reject_replays(wire_Auth *a) {
  if (a->seen) return 0;
  a->seen = wire_seen_new(WIRE_SEEN_GEN);
  return a->seen ? 0 : -1;
}

void wire_limit_socket(void *sock) { wire_limit_frame(sock, (int64_t)WIRE_MAX_FRAME); }

void wire_auth_free(wire_Auth *a) {
  wire_seen_free(a->seen);
  if (a->key) { OPENSSL_cleanse(a->key, a->keylen); free(a->key); }
  wire_mac_free(a->ctx);
  memset(a, 0, sizeof *a);
}

static int sign_raw(const wire_Auth *a, const wire_Frame f[4], unsigned char *mac, unsigned *maclen) {
  return wire_mac(a->ctx, f, 4, mac, maclen);
}

void wire_sign(const wire_Auth *a, const wire_Frame f[4], char *hex) {
  hex[0] = 0;
  if (!a || !a->md) return;
  unsigned char mac[EVP_MAX_MD_SIZE]; unsigned n = 0;
  if (sign_raw(a, f, mac, &n)) return;
  wire_hex(mac, n, hex);
}

/* Constant-time check of a hex signature (either case) against an HMAC. */
static int sig_matches(const wire_Frame *sig, const unsigned char *mac, unsigned n) {
  return wire_sig_matches(sig->data, sig->len, mac, n);
}

/* Checks the signature of the four signed frames, and that it is not a
** replay (when a->seen): WIRE_OK, WIRE_ESIG or WIRE_EREPLAY. */
static int verify(const wire_Auth *a, const wire_Frame *sig, const wire_Frame f[4]) {
  if (!a || !a->md) return WIRE_OK;
  unsigned char mac[EVP_MAX_MD_SIZE]; unsigned n = 0;
  if (sign_raw(a, f, mac, &n) || !sig_matches(sig, mac, n)) return WIRE_ESIG;
  if (a->seen && wire_seen_check(a->seen, mac, n)) return WIRE_EREPLAY;
  return WIRE_OK;
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

static json_t *parse_object(const wire_Frame *f, const char *what, size_t flags, char *err, size_t errlen) {
  json_error_t je;
  json_t *j = json_loadb((const char *)(f->data ? f->data : (const unsigned char *)""), f->len, JSON_REJECT_DUPLICATES | flags, &je);
  if (!j) { if (err && errlen) snprintf(err, errlen, "%s: %s", what, je.text); return NULL; }
  if (!json_is_object(j)) { if (err && errlen) snprintf(err, errlen, "%s is not a JSON object", what); json_decref(j); return NULL; }
  return j;
}

/* Parses the header frame into m and copies the routing identities: what a
** reply needs.  WIRE_OK or an error code (m is then partly filled: free it). */
static int take_header(const wire_Frame *ids, int nids, const wire_Frame *hdr, wire_Msg *m, char *err, size_t errlen) {
  if (!(m->header = parse_object(hdr, "header", 0, err, errlen))) return WIRE_EJSON;
  json_t *t = json_object_get(m->header, "msg_type"), *id = json_object_get(m->header, "msg_id"),
         *se = json_object_get(m->header, "session"), *u = json_object_get(m->header, "username"),
         *v = json_object_get(m->header, "version");
  if (!json_is_string(t) || !*json_string_value(t)) ERR(WIRE_EFIELD, "header.msg_type missing or not a string");
  if (!json_is_string(id)) ERR(WIRE_EFIELD, "header.msg_id missing or not a string");
  if (se && !json_is_string(se)) ERR(WIRE_EFIELD, "header.session is not a string");
  if (u && !json_is_string(u)) ERR(WIRE_EFIELD, "header.username is not a string");
  if (v && !json_is_string(v)) ERR(WIRE_EFIELD, "header.version is not a string");
  m->msg_type = json_string_value(t);
  m->msg_id = json_string_value(id);
  m->session = se ? json_string_value(se) : "";
  m->header_raw = malloc(hdr->len + 1);
  if (!m->header_raw) ERR(WIRE_ESYS, "out of memory");
  if (hdr->len) memcpy(m->header_raw, hdr->data, hdr->len);
  m->header_raw[hdr->len] = 0;
  m->header_len = hdr->len;
  if (copy_frames(ids, nids, &m->ids)) ERR(WIRE_ESYS, "out of memory");
  m->nids = nids;
  return WIRE_OK;
}

/* Keeps only what an error reply needs (see wire.h); the code is returned. */
static int partial(wire_Msg *m, wire_Msg *out, int code) {
  json_decref(m->parent); json_decref(m->metadata); json_decref(m->content);
  m->parent = m->metadata = m->content = NULL;
  *out = *m;
  return code;
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
  int code = verify(a, sig, body);
  if (code == WIRE_ESIG) ERR(code, "signature does not match");
  if (code == WIRE_EREPLAY) ERR(code, "a message with this signature was received before (a replay)");

  wire_Msg m = {0};
  if ((code = take_header(frames, d, &body[0], &m, err, errlen)) != WIRE_OK) { wire_msg_free(&m); return code; }
  /* from here on the message is known: errors keep the header for a reply */
  if (!(m.parent = parse_object(&body[1], "parent_header", 0, err, errlen))) return partial(&m, out, WIRE_EJSON);
  if (!(m.metadata = parse_object(&body[2], "metadata", 0, err, errlen))) return partial(&m, out, WIRE_EJSON);
  /* a NUL in a string of the content is valid JSON; the handlers say where it may not be */
  if (!(m.content = parse_object(&body[3], "content", JSON_ALLOW_NUL, err, errlen))) return partial(&m, out, WIRE_EJSON);
  if (copy_frames(frames + d + 6, n - d - 6, &m.buffers)) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return partial(&m, out, WIRE_ESYS);
  }
  m.nbuffers = n - d - 6;
  *out = m;
  return WIRE_OK;
}

/* An over-limit message, read frame by frame without keeping it: its
** signature is computed on the fly, and the header (when it came before the
** limit was reached) is kept for an error reply. */
typedef struct Over {
  const wire_Auth *a;
  int on;
  int d;                      /* index of the delimiter, -1 until seen */
  EVP_MAC_CTX *h;             /* HMAC of the signed frames so far (when signing) */
  int ok;                     /* the frames it needs were there */
} Over;

static int is_delim(const void *data, size_t len) {
  return len == sizeof WIRE_DELIM - 1 && !memcmp(data, WIRE_DELIM, sizeof WIRE_DELIM - 1);
}

/* each frame of an over-limit message, in order (wire_OverFn) */
static void over_frame(void *ud, int idx, const void *data, size_t len) {
  Over *o = ud;
  const wire_Auth *a = o->a;
  if (!o->on) {   /* the first: start the HMAC */
    o->on = 1;
    if (a && a->md) o->h = EVP_MAC_CTX_dup(a->ctx);
  }
  if (o->d < 0 && is_delim(data, len)) o->d = idx;
  if (o->d < 0 || idx < o->d + 2 || idx > o->d + 5) return;
  if (a && a->md && o->h && !EVP_MAC_update(o->h, data, len)) o->ok = 0;
}

static int over_finish(const wire_Auth *a, Over *o, zmq_msg_t *p, int n, int total_frames, wire_Msg *out) {
  if (o->d < 0 || o->d + 2 >= n || total_frames < o->d + 6 || !o->ok) return WIRE_ETOOBIG;
  wire_Frame sig = { zmq_msg_data(&p[o->d + 1]), zmq_msg_size(&p[o->d + 1]) };
  if (a && a->md) {
    unsigned char mac[EVP_MAX_MD_SIZE]; size_t mn = 0;
    if (!o->h || !EVP_MAC_final(o->h, mac, &mn, sizeof mac) || !sig_matches(&sig, mac, (unsigned)mn)) return WIRE_ETOOBIG;
    if (a->seen && wire_seen_check(a->seen, mac, (unsigned)mn)) return WIRE_ETOOBIG;
  }
  wire_Frame *ids = malloc(sizeof *ids * (size_t)(o->d ? o->d : 1));
  if (!ids) return WIRE_ETOOBIG;
  for (int i = 0; i < o->d; i++) { ids[i].data = zmq_msg_data(&p[i]); ids[i].len = zmq_msg_size(&p[i]); }
  wire_Frame hdr = { zmq_msg_data(&p[o->d + 2]), zmq_msg_size(&p[o->d + 2]) };
  wire_Msg m = {0};
  char e2[8];
  if (take_header(ids, o->d, &hdr, &m, e2, sizeof e2) == WIRE_OK) *out = m;
  else wire_msg_free(&m);
  free(ids);
  return WIRE_ETOOBIG;
}

int wire_recv(void *sock, const wire_Auth *a, wire_Msg *out, int flags, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  /* a message over the limit is not kept: its signature is computed on the
  ** fly (over_frame), and the header, when it came before the limit was
  ** reached, is kept for an error reply */
  Over over = { .a = a, .d = -1, .ok = 1 };
  wire_Parts r;
  if (wire_recv_parts(sock, flags, WIRE_MAX_FRAMES, WIRE_MAX_BYTES, &r, over_frame, &over)) {
    int e = errno;
    EVP_MAC_CTX_free(over.h);
    errno = e;
    if (err && errlen) snprintf(err, errlen, "recv: %s", zmq_strerror(e));
    return WIRE_ESYS;
  }
  int code;
  if (r.nomem) {
    code = WIRE_ESYS;
    if (err && errlen) snprintf(err, errlen, "out of memory");
  } else if (r.over) {
    code = over_finish(a, &over, r.p, r.n, r.frames, out);
    if (err && errlen) snprintf(err, errlen, "message of %zu bytes in %d frames is over the limit of %zu bytes or %d frames", r.bytes, r.frames,
                                (size_t)WIRE_MAX_BYTES, WIRE_MAX_FRAMES);
  } else {
    wire_Frame *f = malloc(sizeof *f * (size_t)(r.n ? r.n : 1));
    if (!f) { code = WIRE_ESYS; if (err && errlen) snprintf(err, errlen, "out of memory"); }
    else {
      for (int i = 0; i < r.n; i++) { f[i].data = zmq_msg_data(&r.p[i]); f[i].len = zmq_msg_size(&r.p[i]); }
      code = wire_decode(a, f, r.n, out, err, errlen);
      free(f);
    }
  }
  EVP_MAC_CTX_free(over.h);
  wire_parts_close(&r);
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
