/*
** core.c — the kernel core (like xeus's xkernel_core): what the Jupyter
** protocol says about every request, independent of the language.
**
**  - Dispatch: one table per channel maps msg_type to a handler.  Shell
**    requests run on the main thread, one at a time, in arrival order;
**    control requests run on the control thread, so they are answered while a
**    cell runs on shell (that is what control is for: interrupt, shutdown,
**    kernel_info as a liveness check).  A *_request type that is not in the
**    table gets an error reply (k_unknown), not silence, since a client waits
**    for a reply; other unknown messages are logged.
**  - Busy/idle bracketing: every request, whatever its type, is wrapped in
**    status "busy" ... "idle" on iopub under its own header.  Clients take
**    "idle" with a request's header as "all output of that request has been
**    published" (jupyter_client waits for it before it reads the reply's
**    output), so nothing of a request may be published after its idle.
**  - Parent headers: output published while a shell request is served
**    carries that request's header (cur_parent), which is how a front end
**    routes output to the cell that made it.  Outside a request (cur_parent
**    NULL) the interpreter's output is dropped: no cell would show it.
**  - Abort of queued executes: when a cell fails and its request has
**    stop_on_error (the default), the execute_requests already queued behind
**    it are answered "aborted" before its reply is sent (k_abort_queued), as
**    ipykernel does: "run all" must stop at the first error, and what a
**    client sends after seeing the reply must not be aborted.
**  - Interrupt: interrupt_request arrives on control (interrupt_mode
**    "message") or as SIGINT ("signal"); both end in k_interrupt, which
**    stops the running cell and any input() wait.  On shell, where no cell
**    can be running while it is served, it is only acknowledged.
**  - The output path: the interpreter publishes through interp_Out; here its
**    stdout/stderr text is batched (at most one stream message per ~50 ms,
**    flushed by the writer when the batch is that old and by the control
**    thread's timer while a cell computes) and always flushed before any
**    other output, so order is kept.
*/
#include <stdlib.h>
#include <string.h>
#include "kernel/kint.h"
#include "lang/nabla.h"
#include "util/clock.h"

#define STREAM_INTERVAL 0.05     /* seconds between stream messages */
#define STREAM_MAX (64u << 10)   /* publish at once beyond this many bytes (and so
                                    ** iopub's send mark bounds a non-reading subscriber's queue: server.c) */

/* ------------------------------------------------------------ output path */
static void stream_flush_locked(Kernel *k, int force) {
  KBuf *b = &k->stream;
  if (!b->n) return;
  /* a timed flush never ends a message inside a UTF-8 character */
  size_t n = force ? b->n : k_utf8_complete_prefix(b->p, b->n);
  if (!n) return;
  json_t *c = json_pack("{s:s, s:o}", "name", k->stream_id == NB_STDERR ? "stderr" : "stdout", "text", k_jstr(b->p, n));
  k_publish_locked(k, NULL, "stream", c);
  memmove(b->p, b->p + n, b->n - n);
  b->n -= n;
  k->stream_since = b->n ? nu_mono_s() : 0;
}

static void out_flush(void *ud) {
  Kernel *k = ud;
  if (!k->cur_parent) return;   /* nothing is batched outside a request */
  pthread_mutex_lock(&k->io_mu);
  stream_flush_locked(k, 1);
  pthread_mutex_unlock(&k->io_mu);
}

static void out_stream(void *ud, int stream, const char *data, size_t len) {
  Kernel *k = ud;
  if (!k->cur_parent) return;   /* only the main thread changes it */
  pthread_mutex_lock(&k->io_mu);
  if (k->stream.n && k->stream_id != stream) stream_flush_locked(k, 1);   /* one stream per message */
  if (!k->stream.n) k->stream_since = nu_mono_s();
  k->stream_id = stream;
  kbuf_add(&k->stream, data, len);
  if (nu_mono_s() - k->stream_since >= STREAM_INTERVAL || k->stream.n >= STREAM_MAX) stream_flush_locked(k, 0);
  pthread_mutex_unlock(&k->io_mu);
}

void kcore_tick(Kernel *k) {
  pthread_mutex_lock(&k->io_mu);
  if (k->stream.n && k->cur_parent && nu_mono_s() - k->stream_since >= STREAM_INTERVAL) stream_flush_locked(k, 0);
  pthread_mutex_unlock(&k->io_mu);
}

static void out_publish(void *ud, const char *msg_type, json_t *content) {
  Kernel *k = ud;
  pthread_mutex_lock(&k->io_mu);
  if (k->cur_parent) k_publish_locked(k, NULL, msg_type, content);
  else json_decref(content);
  pthread_mutex_unlock(&k->io_mu);
}

static char *out_input(void *ud, const char *prompt, int password) { return k_input(ud, prompt, password); }

static void out_record(void *ud, int count, const char *code, size_t len, const char *value_text) {
  Kernel *k = ud;
  khist_store(&k->hist, count, code, len, value_text);
}

/* ------------------------------------------------------------ handlers */
typedef void (*Handler)(Kernel *k, void *sock, wire_Msg *m);

/* thread-safe: the control thread answers it while a cell runs */
static json_t *kernel_info(const Kernel *k) {
  char banner[400];
  snprintf(banner, sizeof banner, "Nabla %s: an array language with tensors and autograd%s", nb_version(),
           k->unauthenticated ? "\nWARNING: this kernel runs without a key: its messages are not authenticated, and anyone"
                                " who can reach its ports can run code as you." : "");
  /* help_links stays empty until the project has a documentation URL (docs/ is in the repository) */
  return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:[],"
                   " s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s}}",
                   "status", "ok", "protocol_version", WIRE_PROTOCOL_VERSION, "implementation", "nabla",
                   "implementation_version", nb_version(), "banner", banner, "debugger", 0,
                   "help_links",
                   "language_info", "name", "nabla", "version", nb_version(), "mimetype", "text/x-nabla",
                   "file_extension", ".nbl", "pygments_lexer", "text", "codemirror_mode", "python",
                   "nbconvert_exporter", "script");
}

static void h_kernel_info(Kernel *k, void *sock, wire_Msg *m) { wire_reply(sock, &k->ws, m, "kernel_info_reply", kernel_info(k)); }

static void h_execute(Kernel *k, void *sock, wire_Msg *m) {
  int abort_queue = 0;
  k->interrupted = 0;   /* an interrupt meant for an earlier request does not stop this one */
  json_t *reply = interp_execute(k->interp, m->content, &abort_queue);
  /* before the reply: what a client sends after seeing it must not be aborted */
  if (abort_queue) k_abort_queued(k);
  wire_reply(sock, &k->ws, m, "execute_reply", reply);
}

static void h_complete(Kernel *k, void *sock, wire_Msg *m) { wire_reply(sock, &k->ws, m, "complete_reply", interp_complete(k->interp, m->content)); }
static void h_inspect(Kernel *k, void *sock, wire_Msg *m) { wire_reply(sock, &k->ws, m, "inspect_reply", interp_inspect(k->interp, m->content)); }
static void h_is_complete(Kernel *k, void *sock, wire_Msg *m) { wire_reply(sock, &k->ws, m, "is_complete_reply", interp_is_complete(k->interp, m->content)); }
static void h_history(Kernel *k, void *sock, wire_Msg *m) { wire_reply(sock, &k->ws, m, "history_reply", khist_request(&k->hist, m->content)); }

static void h_comm_info(Kernel *k, void *sock, wire_Msg *m) {
  wire_reply(sock, &k->ws, m, "comm_info_reply", json_pack("{s:s, s:{}}", "status", "ok", "comms"));
}

/* no comm targets: tell the frontend the comm is closed */
static void h_comm_open(Kernel *k, void *sock, wire_Msg *m) {
  (void)sock;
  json_t *id = json_object_get(m->content, "comm_id");
  const char *tn = json_string_value(json_object_get(m->content, "target_name"));
  k_log("comm_open for unknown target '%s': closing it", tn ? tn : "?");
  if (json_is_string(id)) k_publish(k, m, "comm_close", json_pack("{s:O, s:{}}", "comm_id", id, "data"));
}

/* comm_msg, comm_close: no comm is ever open; they need no reply */
static void h_comm_other(Kernel *k, void *sock, wire_Msg *m) { (void)k; (void)sock; k_log("%s for an unknown comm (ignored)", m->msg_type); }

static void h_connect(Kernel *k, void *sock, wire_Msg *m) {
  wire_reply(sock, &k->ws, m, "connect_reply",
             json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "status", "ok", "shell_port", k->ports[0], "iopub_port", k->ports[1],
                       "stdin_port", k->ports[2], "control_port", k->ports[3], "hb_port", k->ports[4]));
}

/* the reply goes to the requester and, on iopub, to every other front end
** of this kernel; the main loop ends when it next checks stop */
static void h_shutdown(Kernel *k, void *sock, wire_Msg *m) {
  k->restart = json_is_true(json_object_get(m->content, "restart"));
  wire_reply(sock, &k->ws, m, "shutdown_reply", json_pack("{s:s, s:b}", "status", "ok", "restart", k->restart));
  k_publish(k, m, "shutdown_reply", json_pack("{s:s, s:b}", "status", "ok", "restart", k->restart));
  atomic_store(&k->stop, 1);
}

/* on control a cell may be running, and the main loop may be asleep in its poll */
static void h_control_shutdown(Kernel *k, void *sock, wire_Msg *m) {
  h_shutdown(k, sock, m);
  k_interrupt(k);
  k_wake(k);
}

/* on shell nothing runs while it is served: only acknowledged */
static void h_shell_interrupt(Kernel *k, void *sock, wire_Msg *m) {
  wire_reply(sock, &k->ws, m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
}

static void h_control_interrupt(Kernel *k, void *sock, wire_Msg *m) {
  k_interrupt(k);
  h_shell_interrupt(k, sock, m);
}

typedef struct Route { const char *msg_type; Handler fn; } Route;

static const Route shell_routes[] = {
  { "execute_request", h_execute },
  { "kernel_info_request", h_kernel_info },
  { "complete_request", h_complete },
  { "inspect_request", h_inspect },
  { "is_complete_request", h_is_complete },
  { "history_request", h_history },
  { "comm_info_request", h_comm_info },
  { "comm_open", h_comm_open },
  { "comm_msg", h_comm_other },
  { "comm_close", h_comm_other },
  { "connect_request", h_connect },
  { "shutdown_request", h_shutdown },
  { "interrupt_request", h_shell_interrupt },
  { NULL, NULL }
};

/* what control serves while shell is busy; everything else belongs on shell */
static const Route control_routes[] = {
  { "kernel_info_request", h_kernel_info },
  { "interrupt_request", h_control_interrupt },
  { "shutdown_request", h_control_shutdown },
  { NULL, NULL }
};

static void dispatch(Kernel *k, void *sock, const Route *routes, wire_Msg *m) {
  k_status(k, m, "busy");
  const Route *r = routes;
  while (r->msg_type && strcmp(r->msg_type, m->msg_type)) r++;
  if (r->fn) r->fn(k, sock, m);
  else k_unknown(k, sock, m);
  k_status(k, m, "idle");
}

void kcore_shell(Kernel *k, wire_Msg *m) {
  /* the request's header becomes the parent of everything published until its idle */
  pthread_mutex_lock(&k->io_mu);
  free(k->cur_parent);
  k->cur_parent = strdup(m->header_raw);
  k->cur_parent_len = m->header_len;
  pthread_mutex_unlock(&k->io_mu);
  k->cur_req = m;
  dispatch(k, k->shell, shell_routes, m);
  k->cur_req = NULL;
  pthread_mutex_lock(&k->io_mu);
  free(k->cur_parent); k->cur_parent = NULL; k->cur_parent_len = 0;
  pthread_mutex_unlock(&k->io_mu);
}

void kcore_control(Kernel *k, wire_Msg *m) { dispatch(k, k->control, control_routes, m); }

/* ------------------------------------------------------------ lifetime */
void kcore_init(Kernel *k) {
  interp_Out out = { .ud = k, .stream = out_stream, .flush = out_flush, .publish = out_publish,
                     .input = out_input, .record = out_record };
  k->interp = interp_new(&out);
}

void kcore_free(Kernel *k) {
  interp_free(k->interp);
  k->interp = NULL;
  khist_free(&k->hist);
  free(k->stream.p);
  k->stream = (KBuf){0};
}
