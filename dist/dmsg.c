/*
** dmsg.c — asynchronous messages between workers: any value, to any rank,
** received from any rank (dist.post, dist.recv_msg, dist.recv_any,
** dist.probe, dist.irecv_msg in stdlib/dist.nbl).  What a parameter server,
** a task farm or a work-stealing loop written in nabla needs, and what the
** ring (dring.c) cannot give: its links carry collectives in lock step, so
** reading "whichever peer sent something" there would eat a collective's
** bytes.
**
** So messages go beside the ring, on ZeroMQ: every worker binds one ROUTER
** (its inbox, on the ring's interface; inside NABLA_PORT_RANGE when set) and
** connects a DEALER to a peer the first time it posts there.  Both ends use
** the control connection's security: CURVE with keys derived from the
** session key (a peer without the key is dropped in the handshake), and
** every message is a dproto message signed with the session key ("msg",
** SEQ = the tag, RANK = the sender, CTR strictly increasing per sender: a
** replay is dropped).  The inbox addresses are exchanged over the ring when
** the mesh forms (dm_exchange, from dworker.c's welcome), so every rank
** knows every other's.
**
** Bounds: a post that ZeroMQ cannot take at once (the peer's inbox is at its
** high-water mark) waits in a bounded queue (DM_MAX_POSTS; wait()/test()
** push it on); received messages wait for a matching receive in a bounded
** queue (DM_MAX_QUEUED messages, DM_MAX_QUEUED_BYTES); when that is full
** the inbox is not read, so ZeroMQ's high-water marks push back on the
** senders, and a receive that matches nothing queued fails with a clear
** error instead of waiting forever.  Everything runs on the VM's thread.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include "dist/dmsg.h"
#include "dist/dinternal.h"
#include "dist/dproto.h"
#include "dist/dlaunch.h"
#include "util/clock.h"

#define DM_MAX_QUEUED 4096
#define DM_MAX_QUEUED_BYTES ((size_t)1 << 30)
#define DM_MAX_POSTS 1024
#define DM_ADDR 128
#define DM_HWM 1000

typedef struct Msg { int src; uint32_t tag; char *body; size_t len; } Msg;
typedef struct Post { uint64_t id; int dst; dp_Out out; } Post;

static struct {
  void *ctx, *router;
  void **dealer;            /* [world]: connected on first post */
  char (*addr)[DM_ADDR];    /* [world]: "tcp://host:port" of each inbox ("" before the exchange) */
  uint64_t *sctr, *rctr;    /* per peer: the last counter sent / received */
  unsigned char *blocked;   /* per peer, during flush: its oldest post would block */
  unsigned char key[DP_KEYLEN];
  int rank, world, ready;
  char mine[DM_ADDR];
  Msg q[DM_MAX_QUEUED]; int qhead, qn; size_t qbytes;
  Post posts[DM_MAX_POSTS]; int np;     /* unsent posts, in posting order */
  uint64_t next_id;
} D;

int dm_open(void *ctx, const unsigned char key[DP_KEYLEN], int rank, int world, const char *bind, const char *adv, char *err, size_t n) {
  D.ctx = ctx; D.rank = rank; D.world = world;
  memcpy(D.key, key, DP_KEYLEN);
  D.dealer = calloc((size_t)world, sizeof *D.dealer);
  D.addr = calloc((size_t)world, sizeof *D.addr);
  D.sctr = calloc((size_t)world, sizeof *D.sctr);
  D.rctr = calloc((size_t)world, sizeof *D.rctr);
  D.blocked = calloc((size_t)world, 1);
  if (!D.dealer || !D.addr || !D.sctr || !D.rctr || !D.blocked) { snprintf(err, n, "out of memory"); return -1; }
  D.router = zmq_socket(ctx, ZMQ_ROUTER);
  int v6 = strchr(bind, ':') != NULL, hwm = DM_HWM, zero = 0;
  zmq_setsockopt(D.router, ZMQ_IPV6, &v6, sizeof v6);
  zmq_setsockopt(D.router, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(D.router, ZMQ_LINGER, &zero, sizeof zero);
  dp_limit_socket(D.router);
  if (dp_curve_server(D.router, key)) { snprintf(err, n, "this ZeroMQ has no CURVE security"); return -1; }
  char hp[96], ep[DM_ADDR + 16];
  int lo = 0, hi = 0, bound = 0; char perr[160];
  if (dl_port_range(getenv("NABLA_PORT_RANGE"), &lo, &hi, perr, sizeof perr) == 1) {
    for (int p = lo; p <= hi && !bound; p++) {
      dl_hostport(hp, sizeof hp, bind, p);
      snprintf(ep, sizeof ep, "tcp://%s", hp);
      bound = zmq_bind(D.router, ep) == 0;
    }
  } else {
    dl_hostport(hp, sizeof hp, bind, -1);
    snprintf(ep, sizeof ep, "tcp://%s:*", hp);
    bound = zmq_bind(D.router, ep) == 0;
  }
  if (!bound) { snprintf(err, n, "cannot bind the message inbox on %s: %s", hp, zmq_strerror(errno)); return -1; }
  char last[DM_ADDR + 16]; size_t ll = sizeof last;
  zmq_getsockopt(D.router, ZMQ_LAST_ENDPOINT, last, &ll);
  const char *port = strrchr(last, ':');
  dl_hostport(hp, sizeof hp, adv, port ? atoi(port + 1) : 0);
  snprintf(D.mine, sizeof D.mine, "tcp://%s", hp);
  return 0;
}

int dm_exchange(dr_Group *g) {
  if (!D.router) return 0;
  char *all = calloc((size_t)D.world, DM_ADDR);
  if (!all) return dr_fail(g, "out of memory");
  char mine[DM_ADDR] = ""; snprintf(mine, sizeof mine, "%s", D.mine);
  int st = dr_exchange(g, mine, all, DM_ADDR);
  if (!st) {
    for (int i = 0; i < D.world; i++) {
      char *a = all + (size_t)i * DM_ADDR; a[DM_ADDR - 1] = 0;
      if (strcmp(D.addr[i], a) && D.dealer[i]) { zmq_close(D.dealer[i]); D.dealer[i] = NULL; }   /* a new worker there */
      memcpy(D.addr[i], a, DM_ADDR);
    }
    D.ready = 1;
  }
  free(all);
  return st;
}

void dm_close(void) {
  for (int i = 0; i < D.np; i++) dp_out_free(&D.posts[i].out);
  D.np = 0;
  for (int k = 0; k < D.qn; k++) free(D.q[(D.qhead + k) % DM_MAX_QUEUED].body);
  D.qn = 0; D.qbytes = 0;
  int linger = 500;   /* at exit, what is still queued gets half a second to go */
  for (int i = 0; D.dealer && i < D.world; i++) if (D.dealer[i]) { zmq_setsockopt(D.dealer[i], ZMQ_LINGER, &linger, sizeof linger); zmq_close(D.dealer[i]); }
  if (D.router) zmq_close(D.router);
  free(D.dealer); free(D.addr); free(D.sctr); free(D.rctr); free(D.blocked);
  D.dealer = NULL; D.addr = NULL; D.sctr = D.rctr = NULL; D.blocked = NULL; D.router = NULL; D.ready = 0;
}

/* ---- receiving ---- */
/* reads what the inbox holds into the queue (while it has room); -1 on a socket error */
static int pump(void) {
  for (int k = 0; k < 256 && D.qn < DM_MAX_QUEUED && D.qbytes < DM_MAX_QUEUED_BYTES; k++) {
    dp_Msg m;
    int r = dp_recv(D.router, D.key, 1, 1, &m);
    if (r == 1) break;
    if (r == -1) return -1;
    if (r < 0) { fprintf(stderr, "nabla worker %d: dropped a message %s\n", D.rank, r == -3 ? "over the size limit" : "with a bad signature"); continue; }
    int src = m.rank;
    if (strcmp(m.type, "msg") || src < 0 || src >= D.world || src == D.rank) { fprintf(stderr, "nabla worker %d: dropped a malformed message\n", D.rank); dp_msg_free(&m); continue; }
    if (m.ctr <= D.rctr[src]) { fprintf(stderr, "nabla worker %d: dropped a replayed message from rank %d\n", D.rank, src); dp_msg_free(&m); continue; }
    D.rctr[src] = m.ctr;
    Msg *q = &D.q[(D.qhead + D.qn) % DM_MAX_QUEUED];
    q->src = src; q->tag = m.seq; q->body = m.body; q->len = m.len;
    m.body = NULL;
    D.qn++; D.qbytes += q->len;
    dp_msg_free(&m);
  }
  return 0;
}

/* the queue position of the first message matching src/tag (-1: any), or -1 */
static int find(int src, int64_t tag) {
  for (int k = 0; k < D.qn; k++) {
    Msg *q = &D.q[(D.qhead + k) % DM_MAX_QUEUED];
    if ((src < 0 || q->src == src) && (tag < 0 || q->tag == (uint32_t)tag)) return k;
  }
  return -1;
}

/* removes queue position k (order of the rest kept) */
static Msg take(int k) {
  Msg m = D.q[(D.qhead + k) % DM_MAX_QUEUED];
  for (int j = k; j > 0; j--) D.q[(D.qhead + j) % DM_MAX_QUEUED] = D.q[(D.qhead + j - 1) % DM_MAX_QUEUED];
  D.qhead = (D.qhead + 1) % DM_MAX_QUEUED; D.qn--; D.qbytes -= m.len;
  return m;
}

static int need_ready(nb_VM *vm, const char *f) {
  if (nbD_self.rank < 0) return nb_error_kind(vm, "DistError", "%s: messages are between workers (run it in worker code: dist.exec, dist.run, dist.submit)", f);
  if (!D.ready) return nb_error_kind(vm, "DistError", "%s: the worker group is not connected yet", f);
  return NB_OK;
}
static int arg_rank(nb_VM *vm, const char *f, const char *what, nb_Value v, int nil_ok, int *out) {
  if (nil_ok && v.t == NB_TNIL) { *out = -1; return NB_OK; }
  if (v.t != NB_TNUM || !(v.u.n >= -1e9 && v.u.n <= 1e9) || v.u.n != (double)(int)v.u.n) return nb_error_kind(vm, "TypeError", "%s: %s must be a rank (an integer)%s, got %s", f, what, nil_ok ? " or nil" : "", v.t == NB_TNUM ? "a number that is not one" : nb_typename(v));
  int r = (int)v.u.n;
  if (r < 0 || r >= D.world) return nb_error_kind(vm, "ValueError", "%s: %s %d is not a rank of this world of %d", f, what, r, D.world);
  *out = r;
  return NB_OK;
}
static int arg_tag(nb_VM *vm, const char *f, nb_Value v, int nil_ok, int64_t *out) {
  if (nil_ok && v.t == NB_TNIL) { *out = -1; return NB_OK; }
  if (v.t != NB_TNUM || !(v.u.n >= 0 && v.u.n <= 2147483647.0) || v.u.n != (double)(int64_t)v.u.n)
    return nb_error_kind(vm, "TypeError", "%s: tag must be an integer in 0..2147483647%s, got %s", f, nil_ok ? " or nil" : "", v.t == NB_TNUM ? "a number outside it" : nb_typename(v));
  *out = (int64_t)v.u.n;
  return NB_OK;
}

/* dist_msg_recv(src, tag, timeout, block): {src, tag, value} of the first
** message queued from src (nil: any) with tag (nil: any), waiting for one
** (timeout seconds, nil: none) when block; nil when none (not block, or timed out) */
static int b_recv(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.recv_msg";
  int src = -1; int64_t tag = -1;
  if (need_ready(vm, f) || arg_rank(vm, f, "src", a[0], 1, &src) || arg_tag(vm, f, a[1], 1, &tag)) return NB_ERR;
  if (a[2].t != NB_TNIL && (a[2].t != NB_TNUM || !(a[2].u.n >= 0))) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds >= 0 or nil", f);
  double timeout = a[2].t == NB_TNUM ? a[2].u.n : -1, t0 = nu_mono_s();
  int block = a[3].t == NB_TBOOL ? a[3].u.b : 1;
  int k;
  for (;;) {
    if (pump()) return nb_error_kind(vm, "DistError", "%s: the inbox failed: %s", f, zmq_strerror(errno));
    if ((k = find(src, tag)) >= 0) break;
    if (!block || (timeout >= 0 && nu_mono_s() - t0 >= timeout)) { *out = nb_nil(); return NB_OK; }
    if (D.qn >= DM_MAX_QUEUED || D.qbytes >= DM_MAX_QUEUED_BYTES) {
      char from[32] = "any rank", tg[32] = "any tag";
      if (src >= 0) snprintf(from, sizeof from, "rank %d", src);
      if (tag >= 0) snprintf(tg, sizeof tg, "tag %lld", (long long)tag);
      return nb_error_kind(vm, "DistError", "%s: %d messages (%zu bytes) wait unreceived and none is from %s with %s: receive those first (the queue is bounded)", f, D.qn, D.qbytes, from, tg);
    }
    if (nb_vm_interrupted(vm)) return nb_error_kind(vm, "Interrupted", "%s: interrupted", f);
    zmq_pollitem_t it = { D.router, 0, ZMQ_POLLIN, 0 };
    zmq_poll(&it, 1, 100);
  }
  Msg m = take(k);
  nb_Value v;
  int st = nbZ_deserialize(vm, m.body ? m.body : "", m.len, &v);
  free(m.body);
  if (st) return NB_ERR;
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "src", nb_int(m.src));
  nbR_set_cstr(r, "tag", nb_int(m.tag));
  nbR_set_cstr(r, "value", v);
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* dist_msg_probe(src, tag): {src, tag, size} of the first matching message, or nil (never waits) */
static int b_probe(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.probe";
  int src = -1; int64_t tag = -1;
  if (need_ready(vm, f) || arg_rank(vm, f, "src", a[0], 1, &src) || arg_tag(vm, f, a[1], 1, &tag)) return NB_ERR;
  if (pump()) return nb_error_kind(vm, "DistError", "%s: the inbox failed: %s", f, zmq_strerror(errno));
  int k = find(src, tag);
  if (k < 0) { *out = nb_nil(); return NB_OK; }
  Msg *m = &D.q[(D.qhead + k) % DM_MAX_QUEUED];
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "src", nb_int(m->src));
  nbR_set_cstr(r, "tag", nb_int(m->tag));
  nbR_set_cstr(r, "size", nb_int((double)m->len));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ---- sending ---- */
static void *dealer_to(int dst) {
  if (D.dealer[dst]) return D.dealer[dst];
  if (!D.addr[dst][0]) { errno = EINVAL; return NULL; }
  void *s = zmq_socket(D.ctx, ZMQ_DEALER);
  if (!s) return NULL;
  int v6 = 1, hwm = DM_HWM, linger = 2000;
  zmq_setsockopt(s, ZMQ_IPV6, &v6, sizeof v6);
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  dp_limit_socket(s);
  if (dp_curve_client(s, D.key) || zmq_connect(s, D.addr[dst]) != 0) { zmq_close(s); return NULL; }
  return D.dealer[dst] = s;
}

/* sends what can go now, oldest first; a destination whose oldest post
** would block keeps its later ones back (per-destination order) */
static void flush(void) {
  int w = 0;
  memset(D.blocked, 0, (size_t)D.world);
  for (int i = 0; i < D.np; i++) {
    Post *p = &D.posts[i];
    if (!D.blocked[p->dst] && dp_out_send(&p->out, D.dealer[p->dst], ZMQ_DONTWAIT)) continue;   /* sent: dropped from the list */
    D.blocked[p->dst] = 1;
    D.posts[w++] = *p;
  }
  D.np = w;
}
static int pending(uint64_t id) {
  for (int i = 0; i < D.np; i++) if (D.posts[i].id == id) return 1;
  return 0;
}

/* dist_msg_post(dst, value, tag): id (a number); the message is on its way,
** or queued (bounded) until the peer's inbox takes it */
static int b_post(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.post";
  int dst = -1; int64_t tag = -1;
  if (need_ready(vm, f) || arg_rank(vm, f, "dst", a[0], 0, &dst) || arg_tag(vm, f, a[2], 0, &tag)) return NB_ERR;
  if (dst == D.rank) return nb_error_kind(vm, "ValueError", "%s: dst %d is this rank (a message goes to another worker)", f, dst);
  flush();
  if (D.np >= DM_MAX_POSTS) return nb_error_kind(vm, "DistError", "%s: %d posts wait for their peers to take them: wait() on some first (the queue is bounded)", f, D.np);
  nb_Buf b = {0};
  if (nbZ_serialize(vm, a[1], &b)) { nbB_free(&b); return NB_ERR; }
  if (b.n > DP_MAX_MSG) { nbB_free(&b); return nb_error_kind(vm, "DistError", "%s: the value is %zu bytes serialized, over the limit of %zu", f, b.n, (size_t)DP_MAX_MSG); }
  if (!dealer_to(dst)) { nbB_free(&b); return nb_error_kind(vm, "DistError", "%s: cannot connect to rank %d's inbox %s: %s", f, dst, D.addr[dst], zmq_strerror(errno)); }
  Post *p = &D.posts[D.np];
  uint64_t id = ++D.next_id;
  p->id = id; p->dst = dst;
  int st = dp_build(&p->out, D.key, NULL, 0, "msg", (uint32_t)tag, D.rank, ++D.sctr[dst], b.p, b.n);
  nbB_free(&b);
  if (st) return nb_error(vm, "%s: out of memory", f);
  D.np++;
  flush();   /* (moves the list: p is not used after it) */
  *out = nb_int((double)id);
  return NB_OK;
}

/* dist_msg_post_test(id): whether the post went out (pushes the queue on) */
static int b_post_test(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  if (a[0].t != NB_TNUM || !(a[0].u.n >= 0 && a[0].u.n < 9e15)) return nb_error_kind(vm, "TypeError", "post.test: expected a post id");
  flush();
  *out = nb_bool(!pending((uint64_t)a[0].u.n));
  return NB_OK;
}

/* dist_msg_post_wait(id, timeout): returns once the post went out; an error
** after timeout seconds (nil: the group's timeout) without progress */
static int b_post_wait(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "post.wait";
  if (a[0].t != NB_TNUM || !(a[0].u.n >= 0 && a[0].u.n < 9e15)) return nb_error_kind(vm, "TypeError", "%s: expected a post id", f);
  if (a[1].t != NB_TNIL && (a[1].t != NB_TNUM || !(a[1].u.n >= 0))) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds >= 0 or nil", f);
  uint64_t id = (uint64_t)a[0].u.n;
  double timeout = a[1].t == NB_TNUM ? a[1].u.n : nbD_self.g ? nbD_self.g->timeout_ms / 1e3 : 300, t0 = nu_mono_s();
  for (;;) {
    flush();
    if (!pending(id)) break;
    if (nb_vm_interrupted(vm)) return nb_error_kind(vm, "Interrupted", "%s: interrupted", f);
    int dst = -1;
    for (int i = 0; i < D.np; i++) if (D.posts[i].id == id) dst = D.posts[i].dst;
    if (timeout > 0 && nu_mono_s() - t0 > timeout)
      return nb_error_kind(vm, "DistError", "%s: rank %d took no message for %.0f s (its inbox is full, or it is gone)", f, dst, timeout);
    pump();   /* keep reading our own inbox meanwhile: two ranks posting to each other cannot stall */
    zmq_pollitem_t it = { D.dealer[dst], 0, ZMQ_POLLOUT, 0 };
    zmq_poll(&it, 1, 50);
  }
  *out = nb_nil();
  return NB_OK;
}

static nb_Builtin msg_builtins[] = {
  { "dist_msg_post", b_post, "dst, value, tag=0", "dist_msg_post(dst, value, tag): starts sending a value to worker dst (use dist.post)" },
  { "dist_msg_post_test", b_post_test, "id", "dist_msg_post_test(id): whether the post went out (use h.test())" },
  { "dist_msg_post_wait", b_post_wait, "id, timeout=nil", "dist_msg_post_wait(id, timeout): waits until the post went out (use h.wait())" },
  { "dist_msg_recv", b_recv, "src=nil, tag=nil, timeout=nil, block=true", "dist_msg_recv(src, tag, timeout, block): {src, tag, value} of a message (use dist.recv_msg / dist.recv_any)" },
  { "dist_msg_probe", b_probe, "src=nil, tag=nil", "dist_msg_probe(src, tag): {src, tag, size} of a waiting message, or nil (use dist.probe)" },
  { NULL, NULL, NULL, NULL },
};

void dm_init(void) { nbC_register(msg_builtins); }
