/*
** kint.h — internals shared by the kernel's server (sockets, threads) and
** interpreter (the language side) halves.
*/
#ifndef NABLA_KINT_H
#define NABLA_KINT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <jansson.h>
#include "wire/wire.h"
#include "lang/nabla.h"

typedef struct Kernel {
  void *ctx;
  void *shell, *control, *iopub, *stdin_sock, *hb;
  void *wake_rx, *wake_tx;          /* inproc pair: the control thread wakes the main loop */
  wire_Session ws;
  int ports[5];                     /* shell, iopub, stdin, control, hb */
  char transport[16], ip[256];
  /* io_mu guards the iopub socket, the stream buffer and cur_parent: the
  ** control thread publishes too and flushes stale stream output */
  pthread_mutex_t io_mu;
  char *cur_parent; size_t cur_parent_len;   /* header of the shell request being served */
  nb_VM *vm;
  volatile sig_atomic_t running;    /* a cell is executing */
  volatile sig_atomic_t interrupted;/* an interrupt arrived during the current request */
  atomic_int stop;                  /* shutdown requested */
  int restart;
  int parent_pid;                   /* JPY_PARENT_PID: exit when that process is gone */
  /* shell requests read while aborting queued executes, served afterwards */
  wire_Msg *pending; int npending, cappending;
  pthread_t hb_thread, control_thread;
} Kernel;

/* logging to stderr (Jupyter shows it in the server log) */
void k_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Publishes on iopub with the given parent header (NULL = the current shell
** request's).  content is stolen.  Takes io_mu unless *_locked. */
void k_publish(Kernel *k, const wire_Msg *parent, const char *msg_type, json_t *content);
void k_publish_locked(Kernel *k, const wire_Msg *parent, const char *msg_type, json_t *content);
void k_status(Kernel *k, const wire_Msg *parent, const char *state);
/* Replies to every execute_request already queued on shell with "aborted";
** other queued requests are kept for the main loop. */
void k_abort_queued(Kernel *k);
/* A reply for requests this kernel does not know. */
void k_unknown(Kernel *k, void *sock, const wire_Msg *m);
/* A message wire_recv returned rc for: logged, and when its header is known
** (see wire_decode) and it is a request, answered with an error reply so
** the front end does not wait forever (never a replay).  Frees *m. */
void k_reject(Kernel *k, void *sock, const char *where, wire_Msg *m, int rc, const char *err);

/* interp.c */
void interp_init(Kernel *k);
void interp_free(Kernel *k);
/* Serves one shell request (busy/idle bracketing included). */
void interp_shell(Kernel *k, wire_Msg *m);
/* The kernel_info_reply content (thread-safe). */
json_t *interp_kernel_info(void);
/* The kernel runs without a key: kernel_info's banner says so. */
void interp_set_unauthenticated(int on);
/* Publishes buffered stream output older than the batching interval (control thread timer). */
void interp_tick(Kernel *k);
/* Wakes an input() wait (interrupt/shutdown): async-signal-safe. */

/* JSON string from arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *k_jstr(const char *s, size_t n);

/* install.c */
int kernel_install(int argc, char **argv, int uninstall);

#endif
