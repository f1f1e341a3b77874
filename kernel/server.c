/*
** server.c — the kernel's sockets and threads (like xeus's server half):
** what requests mean is core.c's, the language side is interp.c's.
**
** Sockets per the connection file: shell and control ROUTERs, iopub PUB,
** stdin ROUTER, heartbeat REP.  Threads:
**   main       shell requests (the VM runs here, it owns the C stack)
**   heartbeat  echoes every message back
**   control    interrupt/shutdown/kernel_info answered while a cell runs, and a
**              50 ms timer that publishes stream output the cell has not flushed
** Interrupts arrive as interrupt_request on control or as SIGINT (both
** interrupt modes work); both call k_interrupt, which is async-signal-safe.
** Signing and verifying every message is wire/wire.c's (wire_send,
** wire_recv with the session's key).
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include "kernel/kernel.h"
#include "kernel/kint.h"
#include "util/clock.h"
#include "util/dynload.h"

/* The one file-scope variable of the kernel: a signal handler has no other
** way to find its Kernel.  Set while serve() runs. */
static Kernel *g_kernel;

/* ------------------------------------------------------------ publishing */
void k_publish_locked(Kernel *k, const wire_Msg *parent, const char *msg_type, json_t *content) {
  const char *p = parent ? parent->header_raw : k->cur_parent;
  size_t pl = parent ? parent->header_len : k->cur_parent_len;
  if (wire_send(k->iopub, &k->ws, NULL, 0, msg_type, p, pl, msg_type, content, NULL))
    k_log("iopub send (%s) failed: %s", msg_type, zmq_strerror(errno));
}

void k_publish(Kernel *k, const wire_Msg *parent, const char *msg_type, json_t *content) {
  pthread_mutex_lock(&k->io_mu);
  k_publish_locked(k, parent, msg_type, content);
  pthread_mutex_unlock(&k->io_mu);
}

void k_status(Kernel *k, const wire_Msg *parent, const char *state) {
  k_publish(k, parent, "status", json_pack("{s:s}", "execution_state", state));
}

static char *reply_type(const char *msg_type) {
  size_t n = strlen(msg_type);
  char *r = malloc(n + 8);
  if (!r) abort();
  if (n > 8 && !strcmp(msg_type + n - 8, "_request")) { memcpy(r, msg_type, n - 8); strcpy(r + n - 8, "_reply"); }
  else { memcpy(r, msg_type, n); strcpy(r + n, "_reply"); }
  return r;
}

/* an error reply to a request (nothing for other message types) */
static void error_reply(Kernel *k, void *sock, const wire_Msg *m, const char *ename, const char *evalue) {
  size_t n = strlen(m->msg_type);
  if (n <= 8 || strcmp(m->msg_type + n - 8, "_request")) return;
  char *rt = reply_type(m->msg_type);
  wire_reply(sock, &k->ws, m, rt, json_pack("{s:s, s:s, s:o, s:[o]}", "status", "error", "ename", ename,
             "evalue", k_jstr(evalue, strlen(evalue)), "traceback", k_jstr(evalue, strlen(evalue))));
  free(rt);
}

void k_unknown(Kernel *k, void *sock, const wire_Msg *m) {
  k_log("unknown message type '%s' (ignored)", m->msg_type);
  char ev[256]; snprintf(ev, sizeof ev, "unknown message type '%.200s'", m->msg_type);
  error_reply(k, sock, m, "UnknownMessageType", ev);
}

void k_reject(Kernel *k, void *sock, const char *where, wire_Msg *m, int rc, const char *err) {
  k_log("%s: dropped message: %s: %s", where, wire_strerror(rc), err);
  if (m->header && rc != WIRE_EREPLAY) {
    char ev[400]; snprintf(ev, sizeof ev, "the kernel cannot serve this %.100s: %s: %.200s", m->msg_type, wire_strerror(rc), err);
    k_status(k, m, "busy");
    error_reply(k, sock, m, rc == WIRE_ETOOBIG ? "MessageTooBig" : "BadRequest", ev);
    k_status(k, m, "idle");
  }
  wire_msg_free(m);
}

/* ------------------------------------------------------------ interrupts */
void k_interrupt(Kernel *k) {
  k->interrupted = 1;            /* ends an input() wait (k_input polls it) */
  interp_interrupt(k->interp);   /* stops the running cell, if any */
}

static void on_sigint(int sig) {
  (void)sig;
  if (g_kernel) k_interrupt(g_kernel);
}

void k_wake(Kernel *k) { zmq_send(k->wake_tx, "x", 1, ZMQ_DONTWAIT); }

/* ------------------------------------------------------------ stdin */
char *k_input(Kernel *k, const char *prompt, int password) {
  const wire_Msg *req = k->cur_req;
  if (!req) return NULL;
  /* a reply from an earlier, abandoned request must not answer this one */
  for (;;) {
    wire_Msg old; char err[64];
    int rc = wire_recv(k->stdin_sock, &k->ws.auth, &old, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) break;
    if (rc != WIRE_ESYS) wire_msg_free(&old);
  }
  /* the stdin ROUTER reaches the front end by the shell request's identities */
  if (wire_send(k->stdin_sock, &k->ws, req->ids, req->nids, NULL, req->header_raw, req->header_len,
                "input_request", json_pack("{s:o, s:b}", "prompt", k_jstr(prompt, strlen(prompt)), "password", password), NULL)) {
    k_log("stdin: cannot send input_request: %s", zmq_strerror(errno));
    return NULL;
  }
  for (;;) {
    if (k->interrupted || atomic_load(&k->stop)) return NULL;
    zmq_pollitem_t it = { k->stdin_sock, 0, ZMQ_POLLIN, 0 };
    int r = zmq_poll(&it, 1, 50);
    if (r < 0) { if (errno == EINTR) continue; return NULL; }
    if (r == 0) continue;
    wire_Msg m; char err[256];
    int rc = wire_recv(k->stdin_sock, &k->ws.auth, &m, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) { if (errno == EAGAIN || errno == EINTR) continue; return NULL; }
    if (rc != WIRE_OK) { k_log("stdin: dropped message: %s: %s", wire_strerror(rc), err); wire_msg_free(&m); continue; }
    if (strcmp(m.msg_type, "input_reply")) { k_log("stdin: ignored %s", m.msg_type); wire_msg_free(&m); continue; }
    json_t *v = json_object_get(m.content, "value");
    char *r2 = NULL;
    if (json_is_string(v)) {
      size_t n = json_string_length(v);
      r2 = malloc(n + 1);
      if (!r2) abort();
      memcpy(r2, json_string_value(v), n); r2[n] = 0;
    } else k_log("stdin: input_reply without a string value");
    wire_msg_free(&m);
    return r2;
  }
}

/* ------------------------------------------------------------ abort queue */
static void push_pending(Kernel *k, wire_Msg *m) {
  if (k->npending == k->cappending) {
    int cap = k->cappending ? k->cappending * 2 : 8;
    wire_Msg *p = realloc(k->pending, sizeof *p * (size_t)cap);
    if (!p) abort();
    k->pending = p; k->cappending = cap;
  }
  k->pending[k->npending++] = *m;
}

/* Reads shell while the failed cell's reply is held back; runs on the main
** thread, the only one that reads shell. */
void k_abort_queued(Kernel *k) {
  /* a short grace period, like ipykernel's stop_on_error_timeout: requests a
  ** client sent right behind the failing one are still in flight */
  double t0 = nu_mono_ms();
  for (;;) {
    zmq_pollitem_t it = { k->shell, 0, ZMQ_POLLIN, 0 };
    long waited = (long)(nu_mono_ms() - t0);
    int r = zmq_poll(&it, 1, waited >= 5 ? 0 : 5 - waited);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    wire_Msg m; char err[256];
    int rc = wire_recv(k->shell, &k->ws.auth, &m, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) break;
    if (rc != WIRE_OK) { k_reject(k, k->shell, "shell", &m, rc, err); continue; }
    if (!strcmp(m.msg_type, "execute_request")) {
      k_status(k, &m, "busy");
      wire_reply(k->shell, &k->ws, &m, "execute_reply", json_pack("{s:s}", "status", "aborted"));
      k_status(k, &m, "idle");
      wire_msg_free(&m);
    } else push_pending(k, &m);
  }
}

/* ------------------------------------------------------------ threads */
static void *hb_main(void *arg) {
  Kernel *k = arg;
  for (;;) {
    zmq_msg_t m; zmq_msg_init(&m);
    if (zmq_msg_recv(&m, k->hb, 0) < 0) {
      int e = errno; zmq_msg_close(&m);
      if (e == EINTR || e == EAGAIN) continue;
      break;   /* ETERM: shutting down */
    }
    int more = zmq_msg_more(&m);
    if (zmq_msg_send(&m, k->hb, more ? ZMQ_SNDMORE : 0) < 0) zmq_msg_close(&m);
  }
  zmq_close(k->hb);
  return NULL;
}

static void *control_main(void *arg) {
  Kernel *k = arg;
  for (;;) {
    zmq_pollitem_t it = { k->control, 0, ZMQ_POLLIN, 0 };
    int r = zmq_poll(&it, 1, 25);
    if (r < 0) { if (errno == EINTR) continue; break; }
    kcore_tick(k);
    if (k->parent_pid > 1 && getppid() != k->parent_pid && !atomic_load(&k->stop)) {
      /* the process that started us is gone: nobody can shut us down */
      k_log("parent process %d exited; shutting down", k->parent_pid);
      atomic_store(&k->stop, 1);
      k_interrupt(k);
      k_wake(k);
    }
    if (r == 0) continue;
    wire_Msg m; char err[256];
    int rc = wire_recv(k->control, &k->ws.auth, &m, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) { if (errno == EAGAIN || errno == EINTR) continue; break; }
    if (rc != WIRE_OK) { k_reject(k, k->control, "control", &m, rc, err); continue; }
    kcore_control(k, &m);
    wire_msg_free(&m);
  }
  zmq_close(k->control);
  zmq_close(k->wake_tx);
  return NULL;
}

/* ------------------------------------------------------------ setup */
static int read_connection(Kernel *k, const char *path) {
  json_error_t je;
  json_t *c = json_load_file(path, 0, &je);
  if (!c) { k_log("cannot read connection file %s: %s (line %d)", path, je.text, je.line); return -1; }
  int rc = -1;
  if (!json_is_object(c)) { k_log("%s: not a JSON object", path); goto done; }
  json_t *v = json_object_get(c, "transport");
  snprintf(k->transport, sizeof k->transport, "%s", json_is_string(v) ? json_string_value(v) : "tcp");
  v = json_object_get(c, "ip");
  snprintf(k->ip, sizeof k->ip, "%s", json_is_string(v) ? json_string_value(v) : "127.0.0.1");
  static const char *names[5] = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
  for (int i = 0; i < 5; i++) {
    v = json_object_get(c, names[i]);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535) {
      k_log("%s: %s missing or not a port number", path, names[i]); goto done;
    }
    k->ports[i] = (int)json_integer_value(v);
  }
  json_t *key = json_object_get(c, "key"), *scheme = json_object_get(c, "signature_scheme");
  char err[256];
  if (wire_auth_init(&k->ws.auth, json_is_string(scheme) ? json_string_value(scheme) : NULL,
                     json_is_string(key) ? json_string_value(key) : "", err, sizeof err)) {
    k_log("%s: %s", path, err); goto done;
  }
  if (!k->ws.auth.md) {
    k_log("WARNING: %s has no key: messages are NOT authenticated, and anyone who can reach "
          "these ports can run code as this user. Give the connection file a \"key\".", path);
    k->unauthenticated = 1;
  } else if (wire_auth_reject_replays(&k->ws.auth)) { k_log("out of memory"); goto done; }
  rc = 0;
done:
  json_decref(c);
  return rc;
}

/* What a client without the key can make the kernel hold.  ZeroMQ queues
** every connection's messages until the kernel reads them, and its
** high-water marks count messages, not bytes: the installed default let one
** stranger park 1,000 messages of up to 128 MiB per socket (300 unsigned
** 4 MB messages sent to stdin while idle cost 1.2 GB).  So each socket gets
** both a message count (the high-water mark: past it ZeroMQ stops reading the
** connection and TCP pushes back on the sender) and a frame size sized to
** what its real traffic needs; their product bounds the bytes one connection
** can park (docs/distributed.md, Security).  Legitimate clients lose nothing:
** what does not fit waits in the client's own queue. */
typedef struct { int type, port_index; const char *what; int64_t max_frame; int hwm; } SocketSpec;
static const SocketSpec socket_specs[5] = {
  /* execute_request code and comm buffers can be big: the wire's own limits
  ** (WIRE_MAX_BYTES per message, larger ones read frame by frame and refused) */
  { ZMQ_ROUTER, 0, "shell",     (int64_t)WIRE_MAX_FRAME, 8 },
  /* a subscriber that never reads gets at most this many messages queued,
  ** each at most STREAM_MAX (core.c) for stream output; then ZeroMQ drops
  ** that subscriber's messages, as for any slow subscriber */
  { ZMQ_PUB,    1, "iopub",     (int64_t)1 << 20, 512 },
  /* input_reply values a person typed */
  { ZMQ_ROUTER, 2, "stdin",     (int64_t)1 << 20, 2 },
  /* interrupt, shutdown, kernel_info, debug requests */
  { ZMQ_ROUTER, 3, "control",   (int64_t)1 << 20, 8 },
  /* heartbeats are a few bytes, echoed */
  { ZMQ_REP,    4, "heartbeat", (int64_t)64 << 10, 8 },
};

static void *make_socket(Kernel *k, const SocketSpec *sp) {
  void *s = zmq_socket(k->ctx, sp->type);
  const char *what = sp->what;
  int port = k->ports[sp->port_index];
  if (!s) { k_log("zmq_socket(%s): %s", what, zmq_strerror(errno)); return NULL; }
  int linger = 1000; zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  /* ZMQ_ROUTER_HANDOVER stays off: a new connection never takes over the
  ** routing identity (and so the replies) of a connected client */
  /* (replies keep ZeroMQ's default send mark: they are the kernel's own,
  ** small, and a reply dropped at a full mark would hang a front end) */
  if (sp->type == ZMQ_PUB) zmq_setsockopt(s, ZMQ_SNDHWM, &sp->hwm, sizeof sp->hwm);
  else zmq_setsockopt(s, ZMQ_RCVHWM, &sp->hwm, sizeof sp->hwm);
  wire_limit_frame(s, sp->max_frame);
  char ep[400];
  if (!strcmp(k->transport, "ipc")) snprintf(ep, sizeof ep, "ipc://%s-%d", k->ip, port);
  else snprintf(ep, sizeof ep, "%s://%s:%d", k->transport, k->ip, port);
  if (zmq_bind(s, ep) != 0) { k_log("cannot bind %s socket to %s: %s", what, ep, zmq_strerror(errno)); zmq_close(s); return NULL; }
  return s;
}

static int serve(const char *conn_path) {
  Kernel *k = calloc(1, sizeof *k);
  if (!k) return 1;
  wire_session_init(&k->ws);
  pthread_mutex_init(&k->io_mu, NULL);
  int st = 1;
  if (read_connection(k, conn_path)) goto out_free;
  k->ctx = zmq_ctx_new();
  if (!(k->shell = make_socket(k, &socket_specs[0]))) goto out_ctx;
  if (!(k->iopub = make_socket(k, &socket_specs[1]))) goto out_ctx;
  if (!(k->stdin_sock = make_socket(k, &socket_specs[2]))) goto out_ctx;
  if (!(k->control = make_socket(k, &socket_specs[3]))) goto out_ctx;
  if (!(k->hb = make_socket(k, &socket_specs[4]))) goto out_ctx;
  /* a ZeroMQ socket belongs to one thread: the control thread cannot touch
  ** shell, so after a shutdown request it wakes the main loop's poll through
  ** this inproc pair instead */
  k->wake_rx = zmq_socket(k->ctx, ZMQ_PAIR);
  k->wake_tx = zmq_socket(k->ctx, ZMQ_PAIR);
  char wake_ep[64]; snprintf(wake_ep, sizeof wake_ep, "inproc://nabla-wake-%p", (void *)k);
  zmq_bind(k->wake_rx, wake_ep); zmq_connect(k->wake_tx, wake_ep);
  int zero = 0;
  zmq_setsockopt(k->wake_rx, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(k->wake_tx, ZMQ_LINGER, &zero, sizeof zero);

  kcore_init(k);   /* before the threads: control interrupts the interpreter */
  const char *pp = getenv("JPY_PARENT_PID");
  if (pp && atoi(pp) > 1 && atoi(pp) == (int)getppid()) k->parent_pid = atoi(pp);

  /* helper threads never take SIGINT: it lands on the main thread */
  sigset_t all, old;
  sigemptyset(&all); sigaddset(&all, SIGINT); sigaddset(&all, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_create(&k->hb_thread, NULL, hb_main, k);
  pthread_create(&k->control_thread, NULL, control_main, k);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  g_kernel = k;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  k_status(k, NULL, "starting");
  while (!atomic_load(&k->stop)) {
    /* requests k_abort_queued read while it looked for executes to abort
    ** come first: they were sent earlier than anything still on the socket */
    if (k->npending) {
      wire_Msg m = k->pending[0];
      memmove(k->pending, k->pending + 1, sizeof *k->pending * (size_t)--k->npending);
      kcore_shell(k, &m);
      wire_msg_free(&m);
      continue;
    }
    zmq_pollitem_t it[2] = { { k->shell, 0, ZMQ_POLLIN, 0 }, { k->wake_rx, 0, ZMQ_POLLIN, 0 } };
    int r = zmq_poll(it, 2, -1);
    if (r < 0) { if (errno == EINTR) continue; k_log("poll: %s", zmq_strerror(errno)); break; }
    if (it[1].revents & ZMQ_POLLIN) { char b[8]; zmq_recv(k->wake_rx, b, sizeof b, ZMQ_DONTWAIT); }
    if (!(it[0].revents & ZMQ_POLLIN)) continue;
    wire_Msg m; char err[256];
    int rc = wire_recv(k->shell, &k->ws.auth, &m, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) { if (errno == EAGAIN || errno == EINTR) continue; k_log("shell: %s", err); break; }
    if (rc != WIRE_OK) { k_reject(k, k->shell, "shell", &m, rc, err); continue; }
    kcore_shell(k, &m);
    wire_msg_free(&m);
  }
  st = 0;
  g_kernel = NULL;
  signal(SIGINT, SIG_DFL);
  /* ETERM wakes the helper threads, which close their sockets */
  zmq_ctx_shutdown(k->ctx);
  pthread_join(k->hb_thread, NULL);
  pthread_join(k->control_thread, NULL);
  k->hb = k->control = k->wake_tx = NULL;
  kcore_free(k);
out_ctx:
  for (int i = 0; i < k->npending; i++) wire_msg_free(&k->pending[i]);
  free(k->pending);
  void *socks[] = { k->shell, k->iopub, k->stdin_sock, k->control, k->hb, k->wake_rx, k->wake_tx };
  for (size_t i = 0; i < sizeof socks / sizeof *socks; i++) if (socks[i]) zmq_close(socks[i]);
  if (k->ctx) zmq_ctx_term(k->ctx);
out_free:
  wire_auth_free(&k->ws.auth);
  free(k->cur_parent);
  pthread_mutex_destroy(&k->io_mu);
  free(k);
  return st;
}

static const char kernel_usage[] =
  "usage: nabla kernel -f CONNECTION_FILE\n"
  "       nabla kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME] [--interrupt-mode message|signal]\n"
  "       nabla kernel uninstall [--user | --sys-prefix | --prefix DIR] [--name NAME]\n";

int kernel_main(int argc, char **argv) {
  /* argv[0] is "kernel" */
  if (argc >= 2 && !strcmp(argv[1], "install")) return kernel_install(argc - 2, argv + 2, 0);
  if (argc >= 2 && !strcmp(argv[1], "uninstall")) return kernel_install(argc - 2, argv + 2, 1);
  const char *conn = NULL;
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "-f") || !strcmp(argv[i], "--connection-file")) && i + 1 < argc) conn = argv[++i];
    else if (!strncmp(argv[i], "--connection-file=", 18)) conn = argv[i] + 18;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(kernel_usage, stdout); return 0; }
    else { fprintf(stderr, "nabla kernel: unknown argument %s\n%s", argv[i], kernel_usage); return 2; }
  }
  if (!conn) { fputs(kernel_usage, stderr); return 2; }
  /* a library a cell may need that is missing would kill the kernel at its
  ** first use, with the notebook's state: refuse to start instead */
  if (nb_dynlib_require_all()) return 127;
  return serve(conn);
}
