/*
** dworker.c — `nabla worker`: one worker process of a distributed session.
**
** It runs one VM, answers the session's commands in order, and forms the
** collective group (dring.c, dnccl.c) with the other workers.  It dies with
** the session: PR_SET_PDEATHSIG, a ZeroMQ monitor that sees the control
** connection close, and the session's heartbeats.
**
** Two threads.  The main thread runs the VM: it takes commands from an
** inproc PAIR socket and sends its output and replies back on it.  The I/O
** thread owns the DEALER connection to the session: it forwards commands to
** the main thread and outgoing messages to the session, and itself handles
** what must work while the VM is busy: `interrupt` (interrupts the VM if it
** is still running that command), heartbeats both ways (a `ping` every
** second or so naming the command and collective in progress; no message
** from the session for --heartbeat seconds, or its connection closing, ends
** the process), and a `stop` the busy VM does not get to.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <zmq.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include "dist/dist.h"
#include "dist/dinternal.h"
#include "dist/ddataparallel.h"
#include "dist/dproto.h"
#include "dist/dlaunch.h"
#include "dist/dnccl.h"
#include "dist/ddesync.h"
#include "dist/dmsg.h"
#include "tensor/tdevice.h"
#include "util/clock.h"


/*
** The worker's state, by who owns it.  W is what both threads use: set
** before the I/O thread starts, or read and written atomically (the I/O
** thread and the SIGINT handler only interrupt the VM, which nb_vm_interrupt
** allows from anywhere).  M is
** the main thread's, IO the I/O thread's (the main thread sets IO's sockets
** up before starting it and closes them after joining it).
*/
static struct {
  nb_VM *vm;
  int rank;
  unsigned char key[DP_KEYLEN];
  double hb_s;             /* the session's heartbeat timeout (0: none) */
  uint32_t busy_seq;       /* the command the VM runs now (0: idle); atomic */
  uint32_t intr_seq;       /* the last command the session asked to interrupt; atomic */
  const char *busy_type;   /* its type ("exec", ...); atomic */
  int main_done;           /* atomic: the main loop has ended */
  int threads_shared;      /* thread counts are this machine's cores / its workers (not set by the user) */
} W;
static struct {
  void *ctx;
  void *pipe;              /* inproc PAIR to the I/O thread */
  uint32_t seq;            /* of the command being run (output is tagged with it) */
  dr_Group g;
  char **addrs;
  pthread_t io; int io_on;
} M;
static struct {
  void *dealer, *mon;      /* the connection to the session; its monitor */
  void *pipe;              /* inproc PAIR to the main thread */
  uint64_t ctr;            /* counter of the messages sent to the session (the main thread sends `hi` first) */
  uint64_t rctr;           /* the session's last counter: a lower or equal one is a replay */
  char hello[512];         /* the hello's body, sent with the session's challenge */
  int hello_sent;
} IO;


static void wsink_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s;
  char *b = malloc(len + 1);
  if (!b) return;
  b[0] = stream == NB_STDERR ? '2' : '1';
  memcpy(b + 1, data, len);
  dp_send(M.pipe, NULL, NULL, 0, "stream", M.seq, W.rank, 0, b, len + 1);
  free(b);
}
static void wsink_display(nb_Sink *s, const nb_MimeItem *items, int n, const char *id, int update) {
  (void)n; (void)id; (void)update;
  wsink_write(s, NB_STDOUT, items[0].data, items[0].len);
  wsink_write(s, NB_STDOUT, "\n", 1);
}
static char *wsink_input(nb_Sink *s, const char *prompt, int password) { (void)s; (void)prompt; (void)password; return NULL; }
static nb_Sink wsink = { wsink_write, wsink_display, NULL, wsink_input, NULL };

static void on_sigint(int sig) { (void)sig; if (W.vm) nb_vm_interrupt(W.vm); }

/* clears the VM's interrupt flag for a new command, unless the session
** already asked to interrupt it (the request can arrive before the command
** starts: the I/O thread records it, see wio_incoming) */
static void arm(void) {
  nb_vm_clear_interrupt(W.vm);
  uint32_t busy = __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST);
  if (busy && __atomic_load_n(&W.intr_seq, __ATOMIC_SEQ_CST) == busy) nb_vm_interrupt(W.vm);
}

static void reply_err(uint32_t seq, const char *name, const char *msg, const char *report);
/* every command gets a reply: a result that cannot be sent becomes an error */
static void reply_ok(uint32_t seq, const char *data, size_t len) {
  char *b = len < DP_MAX_MSG ? malloc(len + 1) : NULL;
  int sent = 0;
  if (b) {
    b[0] = '0';
    if (len) memcpy(b + 1, data, len);
    sent = dp_send(M.pipe, NULL, NULL, 0, "reply", seq, W.rank, 0, b, len + 1) == 0;
    free(b);
  }
  if (!sent) {
    char msg[160];
    snprintf(msg, sizeof msg, "the result (%zu bytes) cannot be sent: %s", len, len >= DP_MAX_MSG ? "over the control channel's limit" : "out of memory");
    reply_err(seq, "DistError", msg, msg);
  }
}
static void reply_err(uint32_t seq, const char *name, const char *msg, const char *report) {
  nb_Buf b = {0};
  nbB_putc(&b, '1');
  nbB_add(&b, name, strlen(name)); nbB_putc(&b, 0);
  nbB_add(&b, msg, strlen(msg)); nbB_putc(&b, 0);
  nbB_add(&b, report, strlen(report));
  dp_send(M.pipe, NULL, NULL, 0, "reply", seq, W.rank, 0, b.p, b.n);
  nbB_free(&b);
}
static void reply_last_error(uint32_t seq) {
  const nb_ErrorInfo *e = nb_last_error(W.vm);
  if (e) reply_err(seq, e->name ? e->name : "Error", e->message ? e->message : "", e->report ? e->report : "");
  else reply_err(seq, "Error", "failed", "failed");
}

/* runs src; 0 ok, else the error was replied */
static int wrun(uint32_t seq, const char *src, size_t len, const char *name) {
  arm();
  int st = nb_run(W.vm, src, len, name, 0);
  if (st) { reply_last_error(seq); return -1; }
  /* every rank runs exec/call: its end is a desync check (ddesync.h), so a
  ** peer still inside a collective learns that this rank has finished */
  /* a dist.submit task runs on its rank alone: no check (the others are not in it) */
  if (strcmp(name, "<dist.pull>") && strcmp(name, "<dist.submit>") && nbD_desync_end()) { reply_err(seq, "DistError", nt_error_msg(), nt_error_msg()); return -1; }
  return 0;
}

static nb_Value take_global(const char *name) {
  int i = nb_global_find(W.vm, name, strlen(name));
  if (i < 0) return nb_nil();
  nb_Value v = *nb_global_at(W.vm, i);
  *nb_global_at(W.vm, i) = nb_undef();
  return v.t == NB_TUNDEF ? nb_nil() : v;
}
static void set_global(const char *name, size_t len, nb_Value v) {
  nb_Str *s = nbS_intern(name, len);
  int i = nb_global_slot(W.vm, s);
  nb_decref(nb_strv(s));
  nb_store(nb_global_at(W.vm, i), v);
}

static void reply_value(uint32_t seq, nb_Value v) {
  nb_Buf b = {0};
  if (nbZ_serialize(W.vm, v, &b)) {
    nbE_finish(W.vm);
    reply_last_error(seq);
  } else reply_ok(seq, b.p ? b.p : "", b.n);
  nbB_free(&b);
}

/* (re)connects the TCP mesh; after `welcome` the reply also says whether
** this worker can run NCCL (unless the session asked for the ring) */
static int connect_mesh(uint32_t seq, const char *backend) {
  dn_close(&M.g);   /* a reconnect replaces the NCCL communicators too */
  if (dr_connect(&M.g, M.addrs)) { reply_err(seq, "DistError", M.g.err, M.g.err); return -1; }
  /* every rank learns every rank's message inbox (dmsg.c) while all are here */
  if (dm_exchange(&M.g)) { reply_err(seq, "DistError", M.g.err, M.g.err); return -1; }
  char body[800] = "", info[700];
  if (backend && strcmp(backend, "ring") != 0) {
    int ok = dn_probe(info, sizeof info);
    snprintf(body, sizeof body, "%s %s", ok ? "nccl" : "ring", info);
  }
  reply_ok(seq, body, strlen(body));
  return 0;
}

/* the conventional variables (torchrun's), and dist.local_rank()/node_rank() */
static void setenv_int(const char *name, int v) { char b[24]; snprintf(b, sizeof b, "%d", v); setenv(name, b, 1); }
static int cores_per(int share) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN); if (cpus < 1) cpus = 1;
  return (int)(cpus / share > 0 ? cpus / share : 1);
}
static void set_threads(int threads) {
  setenv_int("OMP_NUM_THREADS", threads); setenv_int("OPENBLAS_NUM_THREADS", threads);   /* the processes it starts */
  nt_set_num_threads(threads);   /* this one's: OpenMP (read its variable at load), OpenBLAS (dlopened: now or as it loads), oneDNN */
}
static void set_launch_env(int lrank, int lworld, int node, int nnodes, int from_session) {
  /* the launcher counted workers per host name; the machine may hold more */
  if (from_session && W.threads_shared) set_threads(cores_per(lworld));
  nbD_self.local_rank = lrank;
  nbD_self.node_rank = node; nbD_self.local_world = lworld;
  setenv_int("LOCAL_RANK", lrank); setenv_int("LOCAL_WORLD_SIZE", lworld);
  setenv_int("NODE_RANK", node); setenv_int("GROUP_RANK", node); setenv_int("NNODES", nnodes);
}

/* call (dist.run) and task (dist.submit): [fn, args...] called through
** nb_run so the call has a proper top-level frame; the result replied */
static void call_fn(uint32_t seq, const char *body, size_t len, const char *name) {
  nb_Value lv;
  arm();
  if (nbZ_deserialize(W.vm, body, len, &lv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
  if (lv.t != NB_TLIST || nb_list(lv)->n < 1) { nb_decref(lv); reply_err(seq, "DistError", "bad call", "bad call"); return; }
  nb_List *l = nb_list(lv);
  /* call through nb_run so the call has a proper top-level frame */
  set_global("__dist_fn__", 11, l->items[0]); nb_incref(l->items[0]);
  nb_List *args = nbL_new(l->n);
  for (int i = 1; i < l->n; i++) { nb_incref(l->items[i]); nbL_push(args, l->items[i]); }
  set_global("__dist_args__", 13, nb_obj(NB_TLIST, args));
  int nargs = l->n - 1;
  nb_decref(lv);
  nb_Buf src = {0};
  nbB_puts(&src, "__dist_ret__ = __dist_fn__(");
  for (int i = 0; i < nargs; i++) nbB_printf(&src, "%s__dist_args__[%d]", i ? ", " : "", i);
  nbB_puts(&src, ")");
  int st = wrun(seq, src.p, src.n, name);
  nbB_free(&src);
  nb_decref(take_global("__dist_fn__")); nb_decref(take_global("__dist_args__"));
  if (st) return;
  nb_Value v = take_global("__dist_ret__");
  reply_value(seq, v);
  nb_decref(v);
}

static void handle(dp_Msg *m) {
  uint32_t seq = m->seq;
  M.seq = seq;
  if (!strcmp(m->type, "welcome")) {
    dp_Welcome wl;
    if (M.addrs || dp_parse_welcome(m->body, m->len, M.g.world, &wl)) { reply_err(seq, "DistError", "bad welcome", "bad welcome"); return; }
    M.g.timeout_ms = wl.timeout_ms; M.g.gen = wl.gen;
    M.addrs = wl.addrs;   /* taken over */
    arm();
    connect_mesh(seq, wl.backend);
  } else if (!strcmp(m->type, "launchenv")) {
    /* where this worker sits among the machines of the job, from the host
    ** ids of every worker's hello (dl_host_id): "LOCAL_RANK LOCAL_WORLD NODE_RANK NNODES" */
    int lr = -1, lw = 0, nr = -1, nn = 0;
    if (sscanf(m->body, "%d %d %d %d", &lr, &lw, &nr, &nn) != 4 || lr < 0 || lw < 1 || lr >= lw || nr < 0 || nn < 1 || nr >= nn) {
      reply_err(seq, "DistError", "bad launchenv", "bad launchenv"); return;
    }
    set_launch_env(lr, lw, nr, nn, 1);
    reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "reconnect")) {
    M.g.gen = (uint32_t)strtoul(m->body, NULL, 10);
    arm();
    dn_close(&M.g);
    /* The session reconnects after a command failed on some rank.  This
    ** rank's part may have stopped (interrupted, or its own error) with GPU
    ** work queued whose data error (a bad take index, ...) no wait has
    ** reported yet: end that epoch here, with the communicators gone, so its
    ** results are refused naming the error (textend.h nt_dev_check) and the
    ** next command's first synchronisation does not raise it. */
    if (nt_cuda_synchronize()) nt_error_clear();
    connect_mesh(seq, NULL);
  } else if (!strcmp(m->type, "ncclid")) {
    unsigned char id[NT_COMM_ID_BYTES]; char hex[2 * NT_COMM_ID_BYTES + 2];
    if (nt_cuda_comm_unique_id(id)) { reply_err(seq, "DistError", nt_error_msg(), nt_error_msg()); return; }
    wire_hex(id, sizeof id, hex);
    reply_ok(seq, hex, 2 * NT_COMM_ID_BYTES);
    OPENSSL_cleanse(id, sizeof id); OPENSSL_cleanse(hex, sizeof hex);
  } else if (!strcmp(m->type, "nccl")) {
    unsigned char id[NT_COMM_ID_BYTES];
    arm();
    if (m->len != 2 * NT_COMM_ID_BYTES || wire_unhex(m->body, id, sizeof id) != 0) { reply_err(seq, "DistError", "bad NCCL id", "bad NCCL id"); return; }
    int st = dn_world_init(&M.g, id);
    OPENSSL_cleanse(id, sizeof id);
    if (st) {
      char msg[700]; snprintf(msg, sizeof msg, "%s", M.g.err);
      M.g.broken = 0;   /* the TCP mesh is fine; the session reports this and stops */
      reply_err(seq, nb_vm_interrupted(W.vm) ? "Interrupted" : "DistError", msg, msg);
    } else reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "exec")) {
    if (!wrun(seq, m->body, m->len, "<dist>")) reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "eval")) {
    nb_Buf src = {0};
    nbB_puts(&src, "__dist_ret__ = (");
    nbB_add(&src, m->body, m->len);
    nbB_puts(&src, "\n)");
    int st = wrun(seq, src.p, src.n, "<dist.pull>");
    nbB_free(&src);
    if (st) return;
    nb_Value v = take_global("__dist_ret__");
    reply_value(seq, v);
    nb_decref(v);
  } else if (!strcmp(m->type, "call")) {
    call_fn(seq, m->body, m->len, "<dist.run>");
  } else if (!strcmp(m->type, "task")) {
    call_fn(seq, m->body, m->len, "<dist.submit>");
  } else if (!strcmp(m->type, "set")) {
    nb_Value rv;
    if (nbZ_deserialize(W.vm, m->body, m->len, &rv)) { nbE_finish(W.vm); reply_last_error(seq); return; }
    if (rv.t == NB_TREC) {
      nb_Rec *r = nb_rec(rv);
      for (int i = 0; i < r->n; i++) { nb_incref(r->vals[i]); set_global(r->keys[i]->data, r->keys[i]->len, r->vals[i]); }
    }
    nb_decref(rv);
    reply_ok(seq, NULL, 0);
  } else if (!strcmp(m->type, "runfile")) {
    /* body: path \0 arg \0 arg ... */
    char *argv[256];
    int argc = dp_split_args(m->body, m->len, argv, 255);
    if (!argc) { reply_err(seq, "DistError", "no script", "no script"); return; }
    nb_vm_set_argv(W.vm, argc, argv);
    char *copy = strdup(argv[0]);
    nb_vm_add_path(W.vm, dirname(copy));
    free(copy);
    arm();
    if (nb_run_file(W.vm, argv[0])) reply_last_error(seq);
    else if (nbD_desync_end()) reply_err(seq, "DistError", nt_error_msg(), nt_error_msg());
    else reply_ok(seq, NULL, 0);
  }
}

/* the ring listener on the first free port of lo..hi (NABLA_PORT_RANGE: a
** firewall opens one range); what dr_listen does, with the port chosen here */
static int listen_in_range(const char *host, int lo, int hi) {
  for (int p = lo; p <= hi; p++) {
    int rc = dr_listen_port(&M.g, host, p);
    if (rc <= 0) return rc;
  }
  char hp[96]; dl_hostport(hp, sizeof hp, host, -1);
  snprintf(M.g.err, sizeof M.g.err, "no free port in NABLA_PORT_RANGE %d-%d on %s", lo, hi, hp);
  return -1;
}

static const char *argval(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}
static int hasarg(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++) if (!strcmp(argv[i], name)) return 1;
  return 0;
}

/* ---- the I/O thread ---- */
/* builds a message for the session with the next counter */
static int to_session(dp_Out *o, const char *type, uint32_t seq, const void *body, size_t len) {
  return dp_build(o, W.key, NULL, 0, type, seq, W.rank, ++IO.ctr, body, len);
}

/* what the VM is doing, for heartbeats: "TYPE COLLECTIVE" ("idle -") */
static void op_text(char *out, size_t n) {
  const char *t = __atomic_load_n(&W.busy_type, __ATOMIC_SEQ_CST);
  const char *c = dr_op;
  snprintf(out, n, "%s %s", t ? t : "idle", c ? c : "-");
}

/* a command or control message from the session */
static void wio_incoming(dp_Msg *m, double *stop_at) {
  if (m->ctr <= IO.rctr) {
    fprintf(stderr, "nabla worker %d: dropped a replayed control message (counter %llu after %llu)\n", W.rank, (unsigned long long)m->ctr, (unsigned long long)IO.rctr);
    return;
  }
  IO.rctr = m->ctr;
  if (!strcmp(m->type, "ping")) return;
  if (!strcmp(m->type, "regroup")) { __atomic_store_n(&nbD_regroup_flag, 1, __ATOMIC_SEQ_CST); return; }   /* elastic: at the next checkpoint */
  if (!strcmp(m->type, "challenge")) {   /* the handshake (see on_hi): hello, echoing it */
    if (IO.hello_sent) return;
    char body[700]; int n = snprintf(body, sizeof body, "%s %.150s", IO.hello, m->body);
    dp_Out o;
    if (n > 0 && n < (int)sizeof body && !to_session(&o, "hello", 0, body, (size_t)n)) { dp_out_send(&o, IO.dealer, 0); IO.hello_sent = 1; }
    return;
  }
  if (!strcmp(m->type, "interrupt")) {
    uint32_t seq = (uint32_t)strtoul(m->body, NULL, 10);
    __atomic_store_n(&W.intr_seq, seq, __ATOMIC_SEQ_CST);
    if (seq && __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST) == seq) nb_vm_interrupt(W.vm);
    return;
  }
  if (!strcmp(m->type, "stop") && __atomic_load_n(&W.busy_seq, __ATOMIC_SEQ_CST)) {
    nb_vm_interrupt(W.vm);                  /* stop what it runs; if it does not, exit anyway */
    if (!*stop_at) *stop_at = nu_mono_s() + 3.0;
  }
  dp_send(IO.pipe, NULL, NULL, 0, m->type, m->seq, m->rank, 0, m->body, m->len);
}

static void *wio_main(void *arg) {
  (void)arg;
  dp_Out pend = { NULL, 0 };
  double last_heard = nu_mono_s(), last_ping = 0, lost_at = 0, stop_at = 0;
  char last_op[96] = "";
  double ping_every = W.hb_s > 0 ? (W.hb_s / 4 < 1.0 ? W.hb_s / 4 : 1.0) : 1.0;
  int quitting = 0; double quit_at = 0;
  for (;;) {
    zmq_pollitem_t it[3] = { { IO.dealer, 0, ZMQ_POLLIN | (pend.n ? ZMQ_POLLOUT : 0), 0 }, { IO.mon, 0, ZMQ_POLLIN, 0 },
                             { IO.pipe, 0, ZMQ_POLLIN, 0 } };
    /* while a message waits for the session, take no more from the main thread */
    int rc = zmq_poll(it, (pend.n || quitting) ? 2 : 3, 100);
    double t = nu_mono_s();
    if (rc < 0 && errno != EINTR) break;
    if (pend.n) dp_out_send(&pend, IO.dealer, ZMQ_DONTWAIT);
    if (!pend.n && !quitting && (it[2].revents & ZMQ_POLLIN)) {
      for (int k = 0; k < 256 && !pend.n; k++) {
        dp_Msg m;
        if (dp_recv(IO.pipe, NULL, 0, 1, &m) != 0) break;
        if (!strcmp(m.type, "quit")) { dp_msg_free(&m); quitting = 1; quit_at = t; break; }
        if (!to_session(&pend, m.type, m.seq, m.body, m.len)) dp_out_send(&pend, IO.dealer, ZMQ_DONTWAIT);
        dp_msg_free(&m);
      }
    }
    if (quitting && (!pend.n || t - quit_at > 1.0)) break;   /* everything sent (or the session is gone) */
    if (it[0].revents & ZMQ_POLLIN) {
      for (int k = 0; k < 256; k++) {
        dp_Msg m;
        int r = dp_recv(IO.dealer, W.key, 0, 1, &m);
        if (r == 1 || r == -1) break;
        if (r < 0) { fprintf(stderr, "nabla worker %d: dropped a control message %s\n", W.rank, r == -3 ? "over the size limit" : "with a bad signature"); continue; }
        last_heard = t;
        if (!lost_at) wio_incoming(&m, &stop_at);
        dp_msg_free(&m);
      }
    }
    /* the session is gone: its connection closed, or it stopped sending heartbeats */
    const char *why = NULL; char whyb[96];
    if (it[1].revents & ZMQ_POLLIN) why = "the session's connection closed";
    else if (W.hb_s > 0 && t - last_heard > W.hb_s) { snprintf(whyb, sizeof whyb, "no heartbeat from the session for %.1f s", t - last_heard); why = whyb; }
    else if (getppid() == 1) why = "orphaned";
    if (why && !lost_at && !quitting) {
      if (it[1].revents & ZMQ_POLLIN) { zmq_msg_t e; zmq_msg_init(&e); while (zmq_msg_recv(&e, IO.mon, ZMQ_DONTWAIT) >= 0) {} zmq_msg_close(&e); }
      if (strcmp(why, "the session's connection closed") != 0)
        fprintf(stderr, "nabla worker %d (pid %d): %s; exiting\n", W.rank, (int)getpid(), why);
      lost_at = t;
      nb_vm_interrupt(W.vm);
      dp_send(IO.pipe, NULL, NULL, 0, "lost", 0, -1, 0, why, strlen(why));
    }
    /* the main thread did not come back to its loop in time: leave without it */
    if ((lost_at && t - lost_at > 3.0) || (stop_at && t > stop_at)) {
      if (!__atomic_load_n(&W.main_done, __ATOMIC_SEQ_CST)) { fflush(stdout); fflush(stderr); _exit(lost_at ? 3 : 0); }
    }
    /* heartbeat: every ping_every seconds, and at once when the op changes */
    if (!lost_at && !quitting) {
      char op[96]; op_text(op, sizeof op);
      if (t - last_ping >= ping_every || strcmp(op, last_op)) {
        if (!pend.n) {
          /* non-blocking: with no session connected a DEALER would block */
          dp_Out p;
          if (!to_session(&p, "ping", 0, op, strlen(op)) && !dp_out_send(&p, IO.dealer, ZMQ_DONTWAIT)) dp_out_free(&p);
          last_ping = t;
          snprintf(last_op, sizeof last_op, "%s", op);
        }
      }
    }
  }
  dp_out_free(&pend);
  return NULL;
}

/* how many GPUs this process may use, without loading CUDA: the entries of
** CUDA_VISIBLE_DEVICES when set, else the /dev/nvidiaN device files */
static int visible_gpus(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (v) {
    int n = 0;
    for (const char *p = v; *p; ) {
      size_t len = strcspn(p, ",");
      if (len && strncmp(p, "-1", len) != 0 && strncmp(p, "NoDevFiles", len) != 0) n++;
      else if (len) break;   /* "-1": nothing after it is visible */
      p += len + (p[len] == ',');
    }
    return n;
  }
  int n = 0;
  for (int i = 0; i < 64; i++) {
    char path[32]; snprintf(path, sizeof path, "/dev/nvidia%d", i);
    if (access(path, F_OK) == 0) n++;
  }
  return n;
}

int nbD_worker_main(int argc, char **argv) {
  const char *ep = argval(argc, argv, "--connect", NULL), *kf = argval(argc, argv, "--key-file", NULL);
  int key_stdin = hasarg(argc, argv, "--key-stdin");
  if (!ep || (!kf && !key_stdin)) {
    fprintf(stderr, "usage: nabla worker --connect tcp://HOST:PORT (--key-file FILE | --key-stdin) [--rank R] [--world N] [--local-rank L]\n"
                    "                    [--timeout-ms MS] [--heartbeat SECONDS] [--bind HOST|auto]\n"
                    "  (rank, local rank and world default to SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS)\n");
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *env_rank = getenv("SLURM_PROCID"), *env_world = getenv("SLURM_NTASKS"), *env_local = getenv("SLURM_LOCALID");
  int rank = atoi(argval(argc, argv, "--rank", env_rank ? env_rank : "0"));
  int world = atoi(argval(argc, argv, "--world", env_world ? env_world : "1"));
  int lrank = atoi(argval(argc, argv, "--local-rank", argval(argc, argv, "--rank", env_local ? env_local : (env_rank ? env_rank : "0"))));
  /* the key: 64 hex characters on stdin (ssh, srun) or in a file only this user can read */
  char hex[130] = "";
  if (key_stdin) {
    size_t n = 0;
    while (n < sizeof hex - 1) {
      ssize_t k = read(0, hex + n, 1);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0 || hex[n] == '\n') break;
      n++;
    }
    hex[n] = 0;
    if (n < 2 * DP_KEYLEN || wire_unhex(hex, W.key, DP_KEYLEN) != 0) {
      fprintf(stderr, "nabla worker: cannot read the session key from standard input\n");
      return 2;
    }
  } else {
    FILE *f = fopen(kf, "r");
    if (!f || !fgets(hex, sizeof hex, f) || wire_unhex(hex, W.key, DP_KEYLEN) != 0) {
      fprintf(stderr, "nabla worker: cannot read the session key from %s\n", kf);
      if (f) fclose(f);
      return 2;
    }
    fclose(f);
  }
  OPENSSL_cleanse(hex, sizeof hex);
  if (rank < 0 || world < 1 || rank >= world) { fprintf(stderr, "nabla worker: rank %d is not in a world of %d\n", rank, world); return 2; }
  /* one GPU per worker: the local rank picks among the visible GPUs, before
  ** anything loads CUDA (NABLA_CUDA_DEVICE set by the user wins) */
  int ngpu = visible_gpus();
  if (ngpu > 0 && !getenv("NABLA_CUDA_DEVICE")) { char d[16]; snprintf(d, sizeof d, "%d", lrank % ngpu); setenv("NABLA_CUDA_DEVICE", d, 1); }
  /* threads: --threads T, or this host's cores divided among the --threads-share
  ** workers the launcher put here (before OpenMP/OpenBLAS start threads) */
  int threads = atoi(argval(argc, argv, "--threads", "0")), share = atoi(argval(argc, argv, "--threads-share", "0"));
  if (threads <= 0 && share > 0 && !getenv("OMP_NUM_THREADS")) { W.threads_shared = 1; threads = cores_per(share); }
  if (threads > 0) set_threads(threads);
  /* the conventional variables: MASTER_ADDR/PORT are the session's control endpoint */
  setenv_int("RANK", rank); setenv_int("WORLD_SIZE", world);
  {
    char host[256] = ""; const char *h = strstr(ep, "://"); h = h ? h + 3 : ep;
    snprintf(host, sizeof host, "%s", h);
    char *colon = strrchr(host, ':');
    if (colon) { *colon = 0; setenv("MASTER_PORT", colon + 1, 1); }
    char *hp = host; size_t hl = strlen(hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') { hp[hl - 1] = 0; hp++; }   /* [v6] */
    dl_unmap_v4(hp);   /* in the family the address has: 127.0.0.1, not ::ffff:127.0.0.1 */
    setenv("MASTER_ADDR", hp, 1);
  }
  W.rank = rank;
  W.hb_s = atof(argval(argc, argv, "--heartbeat", "0"));
  nbD_init();
  W.vm = nb_vm_new(&wsink);
  nbD_self.rank = rank; nbD_self.world = world;
  /* until the session's launchenv says better: what the launcher said */
  set_launch_env(lrank, lrank + 1, 0, 1, 0);
  M.g.rank = rank; M.g.world = world; M.g.listen_fd = -1;
  memcpy(M.g.key, W.key, DP_KEYLEN);
  M.g.timeout_ms = atoi(argval(argc, argv, "--timeout-ms", "300000"));
  M.g.interrupted = nb_vm_interrupt_flag(W.vm);
  /* the ring listener: --bind HOST, or auto: every interface, advertised
  ** as the address this host reaches the session from */
  const char *bind = argval(argc, argv, "--bind", "127.0.0.1");
  char adv[80];
  const char *ifname = getenv("NABLA_SOCKET_IFNAME");
  if (!strcmp(bind, "auto") && ifname && *ifname) {
    /* the interface chosen for the job (as NCCL_SOCKET_IFNAME): listen and advertise there */
    char err[160];
    if (dl_ifname_addr(ifname, adv, sizeof adv, err, sizeof err)) { fprintf(stderr, "nabla worker %d: NABLA_SOCKET_IFNAME: %s\n", rank, err); return 2; }
    bind = adv;
  } else if (!strcmp(bind, "auto")) {
    char host[256] = ""; const char *h = strstr(ep, "://"); h = h ? h + 3 : ep;
    snprintf(host, sizeof host, "%s", h);
    char *colon = strrchr(host, ':'); if (colon) *colon = 0;
    size_t hl = strlen(host);
    char *hp = host;
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') { hp[hl - 1] = 0; hp++; }   /* [v6] */
    if (dl_route_addr(hp, adv, sizeof adv)) snprintf(adv, sizeof adv, "127.0.0.1");
    /* loopback stays loopback; else every interface of the session's family ("::" takes IPv4 too) */
    bind = !strcmp(adv, "127.0.0.1") || !strcmp(adv, "::1") ? adv : strchr(adv, ':') ? "::" : "0.0.0.0";
  } else snprintf(adv, sizeof adv, "%s", bind);
  int plo = 0, phi = 0; char perr[160];
  int ranged = dl_port_range(getenv("NABLA_PORT_RANGE"), &plo, &phi, perr, sizeof perr);
  if (ranged < 0) { fprintf(stderr, "nabla worker %d: NABLA_PORT_RANGE: %s\n", rank, perr); return 2; }
  if (ranged ? listen_in_range(bind, plo, phi) : dr_listen(&M.g, bind)) { fprintf(stderr, "nabla worker %d: %s\n", rank, M.g.err); return 2; }
  nbD_self.g = &M.g;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  M.ctx = zmq_ctx_new();
  IO.dealer = zmq_socket(M.ctx, ZMQ_DEALER);
  int v6 = 1;   /* the session may be at an IPv6 address ("tcp://[fd00::1]:PORT"); IPv4 works as before */
  zmq_setsockopt(IO.dealer, ZMQ_IPV6, &v6, sizeof v6);
  /* a routing identity nobody can guess (see on_hi) */
  unsigned char ident[16];
  if (RAND_bytes(ident, sizeof ident) != 1) { fprintf(stderr, "nabla worker: no random bytes for the connection identity\n"); return 2; }
  ident[0] |= 1;   /* identities starting with a zero byte are ZeroMQ's own */
  zmq_setsockopt(IO.dealer, ZMQ_ROUTING_ID, ident, sizeof ident);
  dp_limit_socket(IO.dealer);
  if (dp_curve_client(IO.dealer, W.key)) { fprintf(stderr, "nabla worker: this ZeroMQ has no CURVE security (libzmq built without libsodium)\n"); return 2; }
  int linger = 2000;
  zmq_setsockopt(IO.dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_socket_monitor(IO.dealer, "inproc://nabla-dist-monitor", ZMQ_EVENT_DISCONNECTED);
  IO.mon = zmq_socket(M.ctx, ZMQ_PAIR);
  zmq_connect(IO.mon, "inproc://nabla-dist-monitor");
  {
    char merr[200];
    if (dm_open(M.ctx, W.key, rank, world, bind, adv, merr, sizeof merr)) { fprintf(stderr, "nabla worker %d: %s\n", rank, merr); return 2; }
  }
  IO.pipe = zmq_socket(M.ctx, ZMQ_PAIR);
  M.pipe = zmq_socket(M.ctx, ZMQ_PAIR);
  zmq_bind(IO.pipe, "inproc://nabla-worker-pipe");
  zmq_connect(M.pipe, "inproc://nabla-worker-pipe");
  if (zmq_connect(IO.dealer, ep) != 0) { fprintf(stderr, "nabla worker: cannot connect to %s: %s\n", ep, zmq_strerror(errno)); return 2; }
  char hostname[128] = "?";
  gethostname(hostname, sizeof hostname - 1);
  for (char *p = hostname; *p; p++) if (*p == ' ' || *p == '/') *p = '_';
  hostname[60] = 0;   /* room for "/ID" in the hello's 79-character host field */
  char hid[17]; dl_host_id(hid);
  const char *ver = getenv("NABLA_DIST_FAKE_VERSION");   /* tests: pretend to be another version */
  char advp[96]; dl_hostport(advp, sizeof advp, adv, M.g.port);   /* "[v6]:port" */
  snprintf(IO.hello, sizeof IO.hello, "%s %d %d %d %s %s/%s", ver ? ver : nb_version(), (int)getpid(), rank, lrank, advp, hostname, hid);
  dp_send(IO.dealer, W.key, NULL, 0, "hi", 0, rank, ++IO.ctr, NULL, 0);   /* the session answers with a challenge */
  if (pthread_create(&M.io, NULL, wio_main, NULL) == 0) M.io_on = 1;
  else { fprintf(stderr, "nabla worker: cannot start the I/O thread\n"); return 2; }
  /* `dist` is there without an import */
  nb_run(W.vm, "import dist", 11, "<dist>", 0);
  int status = 0;
  for (;;) {
    zmq_pollitem_t it = { M.pipe, 0, ZMQ_POLLIN, 0 };
    int rc = zmq_poll(&it, 1, 1000);
    if (rc < 0) { if (errno == EINTR) continue; status = 3; break; }
    if (!(it.revents & ZMQ_POLLIN)) continue;
    dp_Msg m;
    int r = dp_recv(M.pipe, NULL, 0, 1, &m);
    if (r != 0) continue;
    if (!strcmp(m.type, "lost")) { dp_msg_free(&m); status = 3; break; }
    if (!strcmp(m.type, "stop")) { dp_msg_free(&m); break; }
    if (!strcmp(m.type, "refuse")) { fprintf(stderr, "nabla worker %d: the session refused this worker: %s\n", rank, m.body); dp_msg_free(&m); status = 2; break; }
    static const char *const types[] = { "launchenv", "welcome", "reconnect", "exec", "eval", "call", "set", "runfile", "ncclid", "nccl", "task" };
    const char *ty = NULL;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) if (!strcmp(m.type, types[k])) ty = types[k];
    __atomic_store_n(&W.busy_type, ty, __ATOMIC_SEQ_CST);
    __atomic_store_n(&W.busy_seq, m.seq, __ATOMIC_SEQ_CST);
    handle(&m);
    __atomic_store_n(&W.busy_seq, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&W.busy_type, NULL, __ATOMIC_SEQ_CST);
    dp_msg_free(&m);
    fflush(stdout);
  }
  __atomic_store_n(&W.main_done, 1, __ATOMIC_SEQ_CST);
  dp_send(M.pipe, NULL, NULL, 0, "quit", 0, -1, 0, NULL, 0);   /* to the I/O thread: send what is queued and stop */
  if (M.io_on) pthread_join(M.io, NULL);
  nbD_reducer_shutdown();
  nbD_self.g = NULL;
  dn_close(&M.g);
  dr_close(&M.g);
  if (M.g.listen_fd >= 0) close(M.g.listen_fd);
  free(M.g.fd);
  if (M.addrs) { for (int i = 0; i < world; i++) free(M.addrs[i]); free(M.addrs); }
  nb_vm_free(W.vm);
  dm_close();
  zmq_socket_monitor(IO.dealer, NULL, 0);
  zmq_close(IO.mon);
  int z = 0;
  zmq_setsockopt(M.pipe, ZMQ_LINGER, &z, sizeof z); zmq_setsockopt(IO.pipe, ZMQ_LINGER, &z, sizeof z);
  zmq_close(M.pipe); zmq_close(IO.pipe);
  if (status == 3) zmq_setsockopt(IO.dealer, ZMQ_LINGER, &z, sizeof z);   /* nobody to deliver to */
  zmq_close(IO.dealer);
  zmq_ctx_term(M.ctx);
  return status;
}
