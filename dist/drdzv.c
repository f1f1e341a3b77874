/*
** drdzv.c — the rendezvous (drdzv.h): the job's side, a ZeroMQ ROUTER that
** hosts not named in --hosts dial to join, and `nabla join`, the joiner's
** side.
**
** Security is the control connection's (dproto.h), with the job's key in
** place of a session's: CURVE keys derived from it (a peer without the key
** fails the handshake and nothing it sends is read) and every message
** HMAC-signed with it.  The key is a file of 64 hex digits the job creates
** (0600) and the joiner is given, as a Slurm job's munge key or torch
** elastic's shared store secret would be.  Bounds: a frame of at most 8 KiB
** on the socket, a host name of at most DZ_MAX_NAME characters of
** [A-Za-z0-9.-], at most DZ_MAX_JOINS hosts admitted per run and never more
** than --max-workers holds at the job's slots per host.
**
** Joining only names a host: the job starts the workers there itself, with
** ssh and the job's ssh settings, at its next checkpoint (a regroup, as a
** returning host's) — so a joiner must be reachable by ssh as the others.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include "dist/drdzv.h"
#include "dist/dsession.h"
#include "util/clock.h"

enum { DZ_MAX_FRAME = 8192 };

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

int dz_key_file(const char *path, int create, unsigned char key[DP_KEYLEN], char *why, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    unsigned char raw[DP_KEYLEN];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) { snprintf(why, n, "no random bytes for a key: %s", strerror(errno)); return -1; }
    char hex[2 * DP_KEYLEN + 2];
    for (int i = 0; i < DP_KEYLEN; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * DP_KEYLEN] = '\n'; hex[2 * DP_KEYLEN + 1] = 0;
    OPENSSL_cleanse(raw, sizeof raw);
    int w = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w < 0 || write(w, hex, 2 * DP_KEYLEN + 1) != 2 * DP_KEYLEN + 1) {
      snprintf(why, n, "cannot write the key file %s: %s", path, strerror(errno));
      if (w >= 0) { close(w); unlink(path); }
      OPENSSL_cleanse(hex, sizeof hex);
      return -1;
    }
    close(w);
    OPENSSL_cleanse(hex, sizeof hex);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) { snprintf(why, n, "cannot read the key file %s: %s", path, strerror(errno)); return -1; }
  char buf[2 * DP_KEYLEN + 64];
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r < 0) { snprintf(why, n, "cannot read the key file %s: %s", path, strerror(errno)); return -1; }
  buf[r] = 0;
  size_t len = (size_t)r;
  while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) len--;
  int ok = len == 2 * DP_KEYLEN;
  for (int i = 0; ok && i < DP_KEYLEN; i++) {
    int hi = hexval((unsigned char)buf[2 * i]), lo = hexval((unsigned char)buf[2 * i + 1]);
    if (hi < 0 || lo < 0) ok = 0;
    else key[i] = (unsigned char)(hi * 16 + lo);
  }
  OPENSSL_cleanse(buf, sizeof buf);
  if (!ok) { snprintf(why, n, "the key file %s does not hold a key (%d hex digits and a newline)", path, 2 * DP_KEYLEN); return -1; }
  return 0;
}

/* a host name a joiner may give: 1..DZ_MAX_NAME of [A-Za-z0-9.-], not starting with '-' */
static int good_name(const char *s, size_t len) {
  if (!len || len > DZ_MAX_NAME || s[0] == '-') return 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return 0;
  }
  return 1;
}

static void answer(dz_Rdzv *z, const dp_Msg *m, const char *type, const char *text) {
  dp_send(z->sock, z->key, m->ident, m->identlen, type, 0, -1, ++z->ctr, text, strlen(text));
}

static void on_join(dz_Rdzv *z, const dp_Msg *m) {
  char text[200];
  if (strcmp(m->type, "join")) { answer(z, m, "refused", "expected a join"); return; }
  if (!good_name(m->body, m->len)) { answer(z, m, "refused", "a host name is 1 to 63 characters of A-Z a-z 0-9 . -"); return; }
  pthread_mutex_lock(&z->mu);
  int known = 0;
  for (int i = 0; i < z->nknown && !known; i++) known = !strcmp(z->known[i], m->body);
  if (known) snprintf(text, sizeof text, "%s is already a host of the job (used whenever it answers ssh)", m->body);
  else if (z->room <= 0 || z->npending >= DZ_MAX_JOINS || z->nknown >= (int)(sizeof z->known / sizeof *z->known))
    snprintf(text, sizeof text, "the job is full (its hosts hold --max-workers)");
  else {
    char *a = strdup(m->body), *b = strdup(m->body);
    if (!a || !b) { free(a); free(b); snprintf(text, sizeof text, "out of memory"); }
    else {
      z->known[z->nknown++] = a; z->pending[z->npending++] = b; z->room--;
      snprintf(text, sizeof text, "%s joins: the job starts workers there (ssh) at its next checkpoint", m->body);
      fprintf(stderr, "nabla run: host %s joins through the rendezvous: the group regroups at its next checkpoint\n", m->body);
      dsess_request_regroup();
      pthread_mutex_unlock(&z->mu);
      answer(z, m, "joined", text);
      return;
    }
  }
  pthread_mutex_unlock(&z->mu);
  answer(z, m, known ? "joined" : "refused", text);
}

static void *rdzv_main(void *arg) {
  dz_Rdzv *z = arg;
  while (!__atomic_load_n(&z->stop, __ATOMIC_SEQ_CST)) {
    zmq_pollitem_t it = { z->sock, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, 200) <= 0) continue;
    for (int k = 0; k < 64; k++) {   /* a burst, then the stop flag again */
      dp_Msg m;
      int rc = dp_recv(z->sock, z->key, 1, 1, &m);
      if (rc == 1 || rc == -1) break;
      if (rc == 0) on_join(z, &m);
      else fprintf(stderr, "nabla run: the rendezvous refused a message %s; it was not looked at\n", rc == -3 ? "over its size limit" : "with a bad signature");
      dp_msg_free(&m);
    }
  }
  return NULL;
}

int dz_open(dz_Rdzv *z, const char *where, const unsigned char key[DP_KEYLEN], char *const *hosts, int nhosts, int room, char *why, size_t n) {
  memset(z, 0, sizeof *z);
  pthread_mutex_init(&z->mu, NULL);
  memcpy(z->key, key, DP_KEYLEN);
  z->room = room;
  for (int i = 0; i < nhosts && z->nknown < 1024; i++) if ((z->known[z->nknown] = strdup(hosts[i]))) z->nknown++;
  const char *colon = strrchr(where, ':');
  char ep[160];
  if (!colon) snprintf(ep, sizeof ep, "tcp://*:%s", where);
  else if (colon == where) snprintf(ep, sizeof ep, "tcp://*%s", colon);
  else snprintf(ep, sizeof ep, "tcp://%s", where);
  z->ctx = zmq_ctx_new();
  z->sock = z->ctx ? zmq_socket(z->ctx, ZMQ_ROUTER) : NULL;
  int zero = 0, six = 1;
  if (!z->sock || dp_curve_server(z->sock, key)) { snprintf(why, n, "--rdzv: cannot make a secure socket (ZeroMQ without CURVE?)"); dz_close(z); return -1; }
  wire_limit_frame(z->sock, DZ_MAX_FRAME);
  zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(z->sock, ZMQ_IPV6, &six, sizeof six);
  if (zmq_bind(z->sock, ep)) { snprintf(why, n, "--rdzv: cannot listen on %s: %s", ep, strerror(errno)); dz_close(z); return -1; }
  if (pthread_create(&z->th, NULL, rdzv_main, z)) { snprintf(why, n, "--rdzv: cannot start a thread"); dz_close(z); return -1; }
  z->on = 1;
  return 0;
}

int dz_take(dz_Rdzv *z, char **out, int max) {
  if (!z->sock) return 0;
  pthread_mutex_lock(&z->mu);
  int k = 0;
  for (; k < z->npending && k < max; k++) out[k] = z->pending[k];
  for (int i = k; i < z->npending; i++) z->pending[i - k] = z->pending[i];
  z->npending -= k;
  pthread_mutex_unlock(&z->mu);
  return k;
}

void dz_close(dz_Rdzv *z) {
  __atomic_store_n(&z->stop, 1, __ATOMIC_SEQ_CST);
  if (z->on) pthread_join(z->th, NULL);
  z->on = 0;
  if (z->sock) zmq_close(z->sock);
  if (z->ctx) zmq_ctx_term(z->ctx);
  z->sock = z->ctx = NULL;
  for (int i = 0; i < z->nknown; i++) free(z->known[i]);
  for (int i = 0; i < z->npending; i++) free(z->pending[i]);
  z->nknown = z->npending = 0;
  OPENSSL_cleanse(z->key, sizeof z->key);
  pthread_mutex_destroy(&z->mu);
}

/* ------------------------------------------------------------ nabla join */
static const char JOIN_USAGE[] = "usage: nabla join HOST:PORT --key FILE [--name NAME] [--timeout SECONDS]\n"
                                 "  asks the job whose rendezvous is at HOST:PORT (nabla run --rdzv) to take this host;\n"
                                 "  FILE: the job's key file (--rdzv-key); NAME: how the job reaches this host by ssh (default: its hostname)\n";

int nbD_join_main(int argc, char **argv) {
  const char *addr = NULL, *keyfile = NULL, *name = NULL;
  int timeout = 30;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--key") && v) { keyfile = v; i++; }
    else if (!strcmp(a, "--name") && v) { name = v; i++; }
    else if (!strcmp(a, "--timeout") && v) {
      char *end; long t = strtol(v, &end, 10);
      if (*end || t < 1 || t > 3600) { fprintf(stderr, "nabla join: --timeout must be 1 to 3600 seconds, got \"%s\"\n", v); return 2; }
      timeout = (int)t; i++;
    } else if (a[0] != '-' && !addr) addr = a;
    else { fputs(JOIN_USAGE, stderr); return 2; }
  }
  if (!addr || !keyfile || !strrchr(addr, ':') || strlen(addr) > 120) { fputs(JOIN_USAGE, stderr); return 2; }
  char host[256];
  if (!name) { if (gethostname(host, sizeof host)) host[0] = 0; host[sizeof host - 1] = 0; name = host; }
  if (!good_name(name, strlen(name))) { fprintf(stderr, "nabla join: the host name \"%.80s\" is not 1 to %d characters of A-Z a-z 0-9 . - (give --name)\n", name, DZ_MAX_NAME); return 2; }
  unsigned char key[DP_KEYLEN]; char why[400];
  if (dz_key_file(keyfile, 0, key, why, sizeof why)) { fprintf(stderr, "nabla join: %s\n", why); return 2; }
  char ep[160]; snprintf(ep, sizeof ep, "tcp://%s", addr);
  void *ctx = zmq_ctx_new(), *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
  int zero = 0, six = 1, st = 1;
  if (!sock || dp_curve_client(sock, key)) { fprintf(stderr, "nabla join: cannot make a secure socket (ZeroMQ without CURVE?)\n"); goto out; }
  wire_limit_frame(sock, DZ_MAX_FRAME);
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(sock, ZMQ_IPV6, &six, sizeof six);
  if (zmq_connect(sock, ep)) { fprintf(stderr, "nabla join: cannot connect to %s: %s\n", ep, strerror(errno)); goto out; }
  if (dp_send(sock, key, NULL, 0, "join", 0, -1, 1, name, strlen(name))) { fprintf(stderr, "nabla join: cannot send\n"); goto out; }
  double t0 = nu_mono_s();
  for (;;) {
    double left = timeout - (nu_mono_s() - t0);
    if (left <= 0) { fprintf(stderr, "nabla join: no answer from %s within %d s (a wrong address, or a wrong key: the job reads nothing without its key)\n", addr, timeout); break; }
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, (long)(left * 1000) < 200 ? (long)(left * 1000) : 200) <= 0) continue;
    dp_Msg m;
    int rc = dp_recv(sock, key, 0, 1, &m);
    if (rc == 1 || rc == -1) continue;
    if (rc < 0) { fprintf(stderr, "nabla join: dropped an answer with a bad signature\n"); continue; }
    int ok = !strcmp(m.type, "joined");
    fprintf(ok ? stdout : stderr, "nabla join: %s: %.200s\n", ok ? "admitted" : "refused", m.body ? m.body : "");
    dp_msg_free(&m);
    st = ok ? 0 : 1;
    break;
  }
out:
  OPENSSL_cleanse(key, sizeof key);
  if (sock) zmq_close(sock);
  if (ctx) zmq_ctx_term(ctx);
  return st;
}
