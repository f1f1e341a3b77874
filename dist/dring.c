/*
** dring.c — ring collectives over TCP (see dring.h).
**
** Every transfer goes through xfer(): non-blocking sockets, poll() with a
** 100 ms tick so an interrupt (Ctrl-C, or the session stopping the cell
** after another rank failed) and the no-progress timeout are noticed; a peer
** that dies closes its socket, which fails the collective at once.
** all_reduce is reduce-scatter then all-gather around the ring (each rank
** sends and receives 2(w-1)/w of the data); received data is reduced in
** 256 KiB pieces while the rest is still arriving (pipelining).
*/
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "dist/dring.h"
#include "dist/dproto.h"
#include "dist/dshm.h"
#include "dist/dhier.h"
#include "dist/dchan.h"
#include "dist/dlaunch.h"
#include "util/clock.h"

#define PIECE (256u << 10)

int dr_fail(dr_Group *g, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  g->broken = 1;
  return -1;
}

/* the collective in progress (the outermost one), for heartbeats: set on
** entry, restored on every return by the cleanup attribute */
const char *volatile dr_op;
static void op_restore(const char *const *prev) { dr_op = *prev; }
#define DR_OP(name) const char *dr_prev_op_ __attribute__((cleanup(op_restore))) = dr_op; dr_op = dr_prev_op_ ? dr_prev_op_ : (name)

size_t dr_esize(int dtype) { return dtype == DR_F64 || dtype == DR_I64 ? 8 : 4; }

static void tune(int fd) {
  int one = 1, big = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* ------------------------------------------------------------ reductions */
#define RED_LOOP(T) do { T *d = dst; const T *s = src; \
    if (op == DR_SUM) for (size_t i = 0; i < n; i++) d[i] += s[i]; \
    else if (op == DR_MAX) for (size_t i = 0; i < n; i++) { if (s[i] > d[i] || s[i] != s[i]) d[i] = s[i]; } \
    else for (size_t i = 0; i < n; i++) { if (s[i] < d[i] || s[i] != s[i]) d[i] = s[i]; } } while (0)
static void reduce(void *dst, const void *src, size_t n, int dtype, int op) {
  switch (dtype) {
  case DR_F32: RED_LOOP(float); break;
  case DR_F64: RED_LOOP(double); break;
  case DR_I32: RED_LOOP(int32_t); break;
  default: RED_LOOP(int64_t); break;
  }
}

typedef struct { char *dst; int dtype, op; } Red;

/* the core transfer: send sn bytes to rank dst while receiving rn bytes from
** rank src (either -1); with red, received bytes are reduced into red->dst */
static int xfer(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn, Red *red) {
  if (dst < 0) sn = 0;
  if (src < 0) rn = 0;
  int sfd = sn ? g->fd[dst] : -1, rfd = rn ? g->fd[src] : -1;
  if ((sn && sfd < 0) || (rn && rfd < 0)) return dr_fail(g, "no connection to rank %d (the group is not connected)", sn && sfd < 0 ? dst : src);
  size_t sent = 0, got = 0, done = 0;
  size_t es = red ? dr_esize(red->dtype) : 1;
  double last = nu_mono_ms();
  const char *sb = sbuf; char *rb = rbuf;
  while (sent < sn || got < rn) {
    struct pollfd p[2]; int np = 0, is = -1, ir = -1;
    if (sent < sn) { p[np].fd = sfd; p[np].events = POLLOUT; p[np].revents = 0; is = np++; }
    if (got < rn) {
      if (is >= 0 && sfd == rfd) { p[is].events |= POLLIN; ir = is; }
      else { p[np].fd = rfd; p[np].events = POLLIN; p[np].revents = 0; ir = np++; }
    }
    int rc = poll(p, (nfds_t)np, 100);
    if (g->interrupted && *g->interrupted) return dr_fail(g, "interrupted");
    if (rc < 0) { if (errno == EINTR) continue; return dr_fail(g, "poll: %s", strerror(errno)); }
    if (rc == 0) {
      if (g->timeout_ms > 0 && nu_mono_ms() - last > g->timeout_ms)
        return dr_fail(g, "timed out after %.0f s without progress (waiting on rank %d)", g->timeout_ms / 1e3, got < rn ? src : dst);
      continue;
    }
    int progressed = 0;
    if (ir >= 0 && (p[ir].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t k = recv(rfd, rb + got, rn - got, 0);
      if (k == 0) return dr_fail(g, "connection to rank %d closed (did the worker die?)", src);
      if (k < 0 && errno != EAGAIN && errno != EINTR) return dr_fail(g, "receive from rank %d: %s", src, strerror(errno));
      if (k > 0) {
        got += (size_t)k; g->bytes_recv += (uint64_t)k; progressed = 1;
        if (red) {
          size_t whole = got - got % es;
          if (whole - done >= PIECE || (got == rn && whole > done)) {
            reduce(red->dst + done, rb + done, (whole - done) / es, red->dtype, red->op);
            done = whole;
          }
        }
      }
    }
    if (is >= 0 && (p[is].revents & (POLLOUT | POLLERR | POLLHUP)) && sent < sn) {
      ssize_t k = send(sfd, sb + sent, sn - sent, MSG_NOSIGNAL);
      if (k < 0 && errno != EAGAIN && errno != EINTR) return dr_fail(g, "send to rank %d: %s", dst, strerror(errno));
      if (k > 0) { sent += (size_t)k; g->bytes_sent += (uint64_t)k; progressed = 1; }
    }
    if (progressed) last = nu_mono_ms();
  }
  return 0;
}

int dr_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn) {
  DR_OP("send/recv");
  if (g->broken) return dr_fail(g, "the collective group is broken by an earlier failure (%s); the session reconnects it", g->err);
  if (g->chan && ((dst >= 0 && sn && dc_has(g, dst)) || (src >= 0 && rn && dc_has(g, src))))
    return dc_sendrecv(g, dst, sbuf, sn, src, rbuf, rn);   /* a rank of this host: shared memory */
  return xfer(g, dst, sbuf, sn, src, rbuf, rn, NULL);
}

/* every rank sends the same n bytes (mine) to every other rank over its
** direct link and receives theirs: all[i*n..] = rank i's bytes.  One network
** hop whatever the group size (the ring would take 2(w-1)): for small
** control messages such as the desync check (ddesync.c). */
int dr_exchange(dr_Group *g, const void *mine, void *all, size_t n) {
  DR_OP("desync check");
  if (g->broken) return dr_fail(g, "the collective group is broken by an earlier failure (%s); the session reconnects it", g->err);
  int w = g->world, r = g->rank;
  memcpy((char *)all + (size_t)r * n, mine, n);
  if (w == 1 || n == 0) return 0;
  size_t *sent = calloc((size_t)w * 2, sizeof *sent), *got = sent + w;
  struct pollfd *p = malloc(sizeof *p * (size_t)w);
  int *who = malloc(sizeof *who * (size_t)w);
  if (!sent || !p || !who) { free(sent); free(p); free(who); return dr_fail(g, "out of memory"); }
  int st = 0, left = 2 * (w - 1);
  for (int i = 0; i < w; i++) if (i != r && g->fd[i] < 0) { st = dr_fail(g, "no connection to rank %d (the group is not connected)", i); goto done; }
  sent[r] = got[r] = n;
  double last = nu_mono_ms();
  while (left > 0) {
    int np = 0;
    for (int i = 0; i < w; i++) {
      if (i == r || (sent[i] == n && got[i] == n)) continue;
      p[np] = (struct pollfd){ g->fd[i], (short)((sent[i] < n ? POLLOUT : 0) | (got[i] < n ? POLLIN : 0)), 0 };
      who[np++] = i;
    }
    int rc = poll(p, (nfds_t)np, 100);
    if (g->interrupted && *g->interrupted) { st = dr_fail(g, "interrupted"); goto done; }
    if (rc < 0) { if (errno == EINTR) continue; st = dr_fail(g, "poll: %s", strerror(errno)); goto done; }
    if (rc == 0) {
      if (g->timeout_ms > 0 && nu_mono_ms() - last > g->timeout_ms) {
        int late = -1;
        for (int i = 0; i < w && late < 0; i++) if (got[i] < n) late = i;
        st = dr_fail(g, "timed out after %.0f s without progress (waiting on rank %d)", g->timeout_ms / 1e3, late);
        goto done;
      }
      continue;
    }
    for (int k = 0; k < np; k++) {
      int i = who[k], fd = g->fd[i];
      if (got[i] < n && (p[k].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t m = recv(fd, (char *)all + (size_t)i * n + got[i], n - got[i], 0);
        if (m == 0) { st = dr_fail(g, "connection to rank %d closed (did the worker die?)", i); goto done; }
        if (m < 0 && errno != EAGAIN && errno != EINTR) { st = dr_fail(g, "receive from rank %d: %s", i, strerror(errno)); goto done; }
        if (m > 0) { got[i] += (size_t)m; g->bytes_recv += (uint64_t)m; last = nu_mono_ms(); if (got[i] == n) left--; }
      }
      if (sent[i] < n && (p[k].revents & (POLLOUT | POLLERR | POLLHUP))) {
        ssize_t m = send(fd, (const char *)mine + sent[i], n - sent[i], MSG_NOSIGNAL);
        if (m < 0 && errno != EAGAIN && errno != EINTR) { st = dr_fail(g, "send to rank %d: %s", i, strerror(errno)); goto done; }
        if (m > 0) { sent[i] += (size_t)m; g->bytes_sent += (uint64_t)m; last = nu_mono_ms(); if (sent[i] == n) left--; }
      }
    }
  }
done:
  free(sent); free(p); free(who);
  return st;
}

/* ------------------------------------------------------------ collectives */
static int check(dr_Group *g) {
  if (g->broken) return dr_fail(g, "the collective group is broken by an earlier failure; the session reconnects it before the next command");
  return 0;
}
static int mod(int a, int w) { return ((a % w) + w) % w; }

int dr_reduce_scatter(dr_Group *g, void *buf, const size_t *counts, int dtype, int op) {
  DR_OP("reduce_scatter");
  if (check(g)) return -1;
  int w = g->world, r = g->rank;
  if (w == 1) return 0;
  if (ds_on(g)) {   /* one host: the whole buffer's all_reduce in shared memory holds every chunk */
    size_t tot = 0;
    for (int i = 0; i < w; i++) tot += counts[i];
    return ds_all_reduce(g, buf, tot, dtype, op);
  }
  if (dh_on(g)) return dh_reduce_scatter(g, buf, counts, dtype, op);   /* hosts: striped (dhier.c) */
  size_t es = dr_esize(dtype), maxc = 0;
  size_t *off = malloc(sizeof(size_t) * (size_t)w);
  if (!off) return dr_fail(g, "out of memory");
  size_t acc = 0;
  for (int i = 0; i < w; i++) { off[i] = acc; acc += counts[i]; if (counts[i] > maxc) maxc = counts[i]; }
  char *tmp = malloc(maxc * es + 1), *b = buf;
  if (!tmp) { free(off); return dr_fail(g, "out of memory"); }
  int next = (r + 1) % w, prev = mod(r - 1, w), st = 0;
  for (int s = 0; s < w - 1 && !st; s++) {
    int sc = mod(r - s - 1, w), rc = mod(r - s - 2, w);
    Red red = { b + off[rc] * es, dtype, op };
    st = xfer(g, next, b + off[sc] * es, counts[sc] * es, prev, tmp, counts[rc] * es, &red);
  }
  free(tmp); free(off);
  return st;
}

int dr_all_gather(dr_Group *g, void *buf, const size_t *counts, size_t es) {
  DR_OP("all_gather");
  if (check(g)) return -1;
  int w = g->world, r = g->rank;
  if (w == 1) return 0;
  if (ds_on(g)) return ds_all_gather(g, buf, counts, es);
  if (dh_on(g)) return dh_all_gather(g, buf, counts, es);
  size_t *off = malloc(sizeof(size_t) * (size_t)w), acc = 0;
  if (!off) return dr_fail(g, "out of memory");
  for (int i = 0; i < w; i++) { off[i] = acc; acc += counts[i]; }
  char *b = buf;
  int next = (r + 1) % w, prev = mod(r - 1, w), st = 0;
  for (int s = 0; s < w - 1 && !st; s++) {
    int sc = mod(r - s, w), rc = mod(r - s - 1, w);
    st = xfer(g, next, b + off[sc] * es, counts[sc] * es, prev, b + off[rc] * es, counts[rc] * es, NULL);
  }
  free(off);
  return st;
}

int dr_all_reduce(dr_Group *g, void *buf, size_t count, int dtype, int op) {
  DR_OP("all_reduce");
  if (check(g)) return -1;
  int w = g->world;
  if (w == 1) return 0;
  if (ds_on(g)) return ds_all_reduce(g, buf, count, dtype, op);
  if (dh_on(g)) return dh_all_reduce(g, buf, count, dtype, op);
  size_t counts[256], *c = w <= 256 ? counts : malloc(sizeof(size_t) * (size_t)w);
  if (!c) return dr_fail(g, "out of memory");
  for (int i = 0; i < w; i++) c[i] = count / (size_t)w + ((size_t)i < count % (size_t)w);
  int st = dr_reduce_scatter(g, buf, c, dtype, op);
  if (!st) st = dr_all_gather(g, buf, c, dr_esize(dtype));
  if (c != counts) free(c);
  return st;
}

/* a pipelined chain src -> src+1 -> ... in 1 MiB segments */
int dr_broadcast(dr_Group *g, void *buf, size_t nbytes, int src) {
  DR_OP("broadcast");
  if (check(g)) return -1;
  int w = g->world;
  if (w == 1 || nbytes == 0) return 0;
  if (ds_on(g)) return ds_broadcast(g, buf, nbytes, src);
  if (dh_on(g)) return dh_broadcast(g, buf, nbytes, src);
  int pos = mod(g->rank - src, w);
  int next = pos + 1 < w ? (g->rank + 1) % w : -1, prev = pos > 0 ? mod(g->rank - 1, w) : -1;
  size_t seg = 1u << 20, nseg = (nbytes + seg - 1) / seg;
  char *b = buf;
  for (size_t k = 0; k <= nseg; k++) {
    const char *sp = NULL; size_t sn = 0; char *rp = NULL; size_t rn = 0;
    if (pos == 0) { if (k < nseg) { sp = b + k * seg; sn = k + 1 < nseg ? seg : nbytes - k * seg; } }
    else {
      if (k < nseg) { rp = b + k * seg; rn = k + 1 < nseg ? seg : nbytes - k * seg; }
      if (k >= 1 && next >= 0) { sp = b + (k - 1) * seg; sn = k < nseg ? seg : nbytes - (k - 1) * seg; }
    }
    if (xfer(g, sn ? next : -1, sp, sn, rn ? prev : -1, rp, rn, NULL)) return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ the mesh */
/* a listening socket on host:port (any family; "::" also takes IPv4 where
** the system allows dual-stack sockets): 0, -1 with err, or 1 when the port
** is taken (the caller may try another) */
int dr_listen_port(dr_Group *g, const char *host, int port) {
  struct sockaddr_storage a; char why[320];
  if (dl_resolve(host, 1, &a, why, sizeof why)) return dr_fail(g, "bad listen address: %s", why);
  struct sockaddr *sa = (struct sockaddr *)&a;
  socklen_t al = sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6) : (socklen_t)sizeof(struct sockaddr_in);
  if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
  else ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return dr_fail(g, "socket: %s", strerror(errno));
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, sa, al) || listen(fd, 256)) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE && port > 0) return 1;
    char hp[96]; dl_hostport(hp, sizeof hp, host, port);
    return dr_fail(g, "cannot listen on %s: %s", hp, strerror(e));
  }
  al = sizeof a;
  getsockname(fd, sa, &al);
  g->listen_fd = fd;
  g->port = sa->sa_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)sa)->sin6_port) : ntohs(((struct sockaddr_in *)sa)->sin_port);
  return 0;
}

int dr_listen(dr_Group *g, const char *host) { return dr_listen_port(g, host, 0) ? -1 : 0; }

void dr_close(dr_Group *g) {
  ds_close(g);
  dh_close(g);
  dc_close(g);
  if (g->fd) for (int i = 0; i < g->world; i++) if (g->fd[i] >= 0) { close(g->fd[i]); g->fd[i] = -1; }
}

/* The accepting rank sends a fresh random nonce; the connecting one answers
** "NBR2", gen, from, to (each u32 network order) and the HMAC of those 16
** bytes and the nonce — so a handshake seen on the wire is no good later. */
#define HS 48
#define NONCE 16
static void handshake(dr_Group *g, int from, int to, const unsigned char nonce[NONCE], unsigned char out[HS]) {
  uint32_t v[4] = { htonl(0x4e425232), htonl(g->gen), htonl((uint32_t)from), htonl((uint32_t)to) };
  memcpy(out, v, 16);
  const void *parts[2] = { out, nonce }; size_t lens[2] = { 16, NONCE };
  if (wire_hmac_sha256(g->key, DP_KEYLEN, parts, lens, 2, out + 16) && getrandom(out + 16, 32, 0) < 0) memset(out + 16, 0xa5, 32);   /* no HMAC: an answer nobody can match */
}

/* blocking read/write with the group timeout (sockets are non-blocking) */
static int io_all(dr_Group *g, int fd, void *buf, size_t n, int wr, double deadline) {
  size_t done = 0;
  while (done < n) {
    struct pollfd p = { fd, (short)(wr ? POLLOUT : POLLIN), 0 };
    int rc = poll(&p, 1, 100);
    if (g->interrupted && *g->interrupted) return -1;
    if (nu_mono_ms() > deadline) return -1;
    if (rc <= 0) continue;
    ssize_t k = wr ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
    if (k == 0) return -1;
    if (k < 0) { if (errno == EAGAIN || errno == EINTR) continue; return -1; }
    done += (size_t)k;
  }
  return 0;
}

/*
** Accepting the higher ranks.  An accepted connection is pending until it has
** sent its HS bytes; pending connections are read side by side with the
** accept (never one at a time), each within HS_DEADLINE_MS, and at most
** HS_PENDING at once (a new one pushes out the oldest).  So connections
** without the key — idle ones included — cost a peer nothing but a slot for
** a moment, and a real peer behind them in the backlog is served at once.
*/
#define HS_PENDING 32
#define HS_DEADLINE_MS 2000.0
typedef struct HsConn { int fd; size_t got; double deadline; struct sockaddr_storage a; unsigned char nonce[NONCE], buf[HS]; } HsConn;

static void hs_drop(HsConn *p, int *np, int i, int close_fd) {
  if (close_fd) close(p[i].fd);
  memmove(&p[i], &p[i + 1], sizeof *p * (size_t)(*np - i - 1));
  (*np)--;
}

/* the rank a complete handshake comes from, or -1 (refused and logged) */
static int hs_check(dr_Group *g, const HsConn *c) {
  int r = g->rank, w = g->world;
  uint32_t v[4]; memcpy(v, c->buf, 16);
  int from = (int)ntohl(v[2]);
  int ok = ntohl(v[0]) == 0x4e425232 && ntohl(v[1]) == g->gen && ntohl(v[3]) == (uint32_t)r && from > r && from < w && g->fd[from] < 0;
  unsigned char want[HS];
  if (ok) { handshake(g, from, r, c->nonce, want); ok = wire_equal(want, c->buf, HS); }
  if (ok) return from;
  char ip[96]; dl_addr_port_text((const struct sockaddr *)&c->a, ip, sizeof ip);
  fprintf(stderr, "nabla dist: rank %d refused a ring connection from %s without a valid key\n", r, ip);
  return -1;
}

/* reads what a pending connection sent; 1 when it is done with (taken or dropped) */
static int hs_read(dr_Group *g, HsConn *c, int *need) {
  ssize_t k = recv(c->fd, c->buf + c->got, HS - c->got, 0);
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (k <= 0) { close(c->fd); return 1; }
  c->got += (size_t)k;
  if (c->got < HS) return 0;
  int from = hs_check(g, c);
  if (from < 0) { close(c->fd); return 1; }
  g->fd[from] = c->fd; (*need)--;
  return 1;
}

static int accept_peers(dr_Group *g, int need, double deadline) {
  HsConn pend[HS_PENDING]; int np = 0;
  int st = 0;
  while (need > 0) {
    struct pollfd p[1 + HS_PENDING];
    p[0] = (struct pollfd){ g->listen_fd, POLLIN, 0 };
    for (int i = 0; i < np; i++) p[1 + i] = (struct pollfd){ pend[i].fd, POLLIN, 0 };
    int n = np;
    int rc = poll(p, (nfds_t)(1 + n), 100);
    if (g->interrupted && *g->interrupted) { st = dr_fail(g, "interrupted while connecting the group"); break; }
    double t = nu_mono_ms();
    if (t > deadline) { st = dr_fail(g, "timed out waiting for %d higher rank(s) to connect", need); break; }
    if (rc < 0) continue;
    for (int i = n - 1; i >= 0; i--) {   /* backwards: dropping one moves the later ones */
      if ((p[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) && hs_read(g, &pend[i], &need)) hs_drop(pend, &np, i, 0);
      else if (t > pend[i].deadline) hs_drop(pend, &np, i, 1);
    }
    if (!(p[0].revents & POLLIN) || need <= 0) continue;
    HsConn c = { .got = 0 };
    socklen_t al = sizeof c.a;
    c.fd = accept4(g->listen_fd, (struct sockaddr *)&c.a, &al, SOCK_CLOEXEC);
    if (c.fd < 0) continue;
    tune(c.fd);
    /* the nonce fits any fresh socket's buffer: a send that does not take it all is a dead peer */
    if (getrandom(c.nonce, NONCE, 0) != NONCE || send(c.fd, c.nonce, NONCE, MSG_NOSIGNAL) != NONCE) { close(c.fd); continue; }
    c.deadline = t + HS_DEADLINE_MS < deadline ? t + HS_DEADLINE_MS : deadline;
    if (np == HS_PENDING) hs_drop(pend, &np, 0, 1);   /* the oldest goes */
    pend[np++] = c;
  }
  for (int i = 0; i < np; i++) close(pend[i].fd);
  return st;
}

int dr_connect(dr_Group *g, char *const *addrs) {
  DR_OP("connect");
  int w = g->world, r = g->rank;
  if (!g->fd) { g->fd = malloc(sizeof(int) * (size_t)w); if (!g->fd) return dr_fail(g, "out of memory"); for (int i = 0; i < w; i++) g->fd[i] = -1; }
  dr_close(g);
  g->broken = 0; g->err[0] = 0;
  double deadline = nu_mono_ms() + (g->timeout_ms > 0 && g->timeout_ms < 60000 ? g->timeout_ms : 60000);
  /* connect to the lower ranks (they accept) */
  for (int j = 0; j < r; j++) {
    char host[256], why[320]; int port = 0;
    struct sockaddr_storage a;
    if (dl_split_hostport(addrs[j], host, sizeof host, &port) || port == 0) return dr_fail(g, "bad peer address %s (expected HOST:PORT, an IPv6 host in brackets)", addrs[j]);
    if (dl_resolve(host, 1, &a, why, sizeof why)) return dr_fail(g, "bad peer address %s: %s", addrs[j], why);
    struct sockaddr *sa = (struct sockaddr *)&a;
    socklen_t al = sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6) : (socklen_t)sizeof(struct sockaddr_in);
    if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    int fd = -1;
    for (;;) {
      fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, sa, al) == 0) break;
      if (fd >= 0) close(fd);
      fd = -1;
      if (nu_mono_ms() > deadline || (g->interrupted && *g->interrupted)) return dr_fail(g, "cannot connect to rank %d at %s: %s", j, addrs[j], strerror(errno));
      usleep(20000);
    }
    tune(fd);
    unsigned char nonce[NONCE], hs[HS];
    if (io_all(g, fd, nonce, NONCE, 0, deadline)) { close(fd); return dr_fail(g, "handshake with rank %d failed (no nonce)", j); }
    handshake(g, r, j, nonce, hs);
    if (io_all(g, fd, hs, HS, 1, deadline)) { close(fd); return dr_fail(g, "handshake with rank %d failed", j); }
    g->fd[j] = fd;
  }
  /* accept the higher ranks; anything without a valid handshake is refused */
  if (accept_peers(g, w - 1 - r, deadline)) return -1;
  return dh_setup(g);   /* shared memory: for all ranks on one host, or within each host (dhier.h) */
}
