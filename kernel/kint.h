/*
** kint.h — internals shared by the kernel's parts, split as xeus splits its
** kernels:
**   server.c    sockets, threads, signing (through wire/wire.h), the stdin
**               channel, interrupts, the abort of queued executes
**   core.c      the kernel core: the dispatch tables (msg_type -> handler)
**               for shell and control, busy/idle bracketing, the parent
**               header, the output path the interpreter publishes through
**   interp.c    the interpreter: the language side (interp.h; it does not
**               include this header)
**   history.c   history_request and the history file
**   ktext.c     UTF-8/JSON text helpers and the log (ktext.h)
** All of a kernel's state hangs off its Kernel: no file-scope state except
** server.c's pointer for the SIGINT handler.
*/
#ifndef NABLA_KINT_H
#define NABLA_KINT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <jansson.h>
#include "wire/wire.h"
#include "kernel/interp.h"
#include "kernel/ktext.h"

/* The history (history.c); main thread only. */
typedef struct HEntry { int session, line; char *input, *output; } HEntry;
typedef struct HBlock HBlock;  /* history.c: the arena the entries' text lives in */
typedef struct KHistory {
  int loaded, session;      /* loaded from the file at first use */
  HEntry *e; int n, cap;
  HBlock *text;             /* the entries' input and output strings */
  size_t bytes;             /* their text in all (what compaction bounds) */
  char *path;               /* NULL: kept in memory only */
} KHistory;

typedef struct Kernel {
  void *ctx;
  void *shell, *control, *iopub, *stdin_sock, *hb;
  void *wake_rx, *wake_tx;          /* inproc pair: the control thread wakes the main loop */
  wire_Session ws;
  int ports[5];                     /* shell, iopub, stdin, control, hb */
  char transport[16], ip[256];
  int unauthenticated;              /* no key: kernel_info's banner says so (set before the threads) */
  /* io_mu guards the iopub socket, the stream buffer and cur_parent: the
  ** control thread publishes too and flushes stale stream output */
  pthread_mutex_t io_mu;
  char *cur_parent; size_t cur_parent_len;   /* header of the shell request being served */
  const wire_Msg *cur_req;          /* that request (main thread: input_request goes to its sender) */
  /* stdout/stderr text not yet published (under io_mu): one stream at a time, so order is kept */
  KBuf stream; int stream_id; double stream_since;
  Interp *interp;
  KHistory hist;
  volatile sig_atomic_t interrupted;/* an interrupt arrived during the current request */
  atomic_int stop;                  /* shutdown requested */
  int restart;
  int parent_pid;                   /* JPY_PARENT_PID: exit when that process is gone */
  /* shell requests read while aborting queued executes, served afterwards */
  wire_Msg *pending; int npending, cappending;
  pthread_t hb_thread, control_thread;
} Kernel;

/* ---- server.c */
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
/* Stops the running cell and any input() wait: async-signal-safe. */
void k_interrupt(Kernel *k);
/* Wakes the main loop (after a shutdown request); control thread only. */
void k_wake(Kernel *k);
/* Asks the sender of the current shell request for a line on stdin;
** malloc'd, NULL on interrupt, shutdown or a broken channel. */
char *k_input(Kernel *k, const char *prompt, int password);

/* ---- core.c */
void kcore_init(Kernel *k);       /* creates the interpreter */
void kcore_free(Kernel *k);
/* Serves one shell / control request (busy/idle bracketing included). */
void kcore_shell(Kernel *k, wire_Msg *m);
void kcore_control(Kernel *k, wire_Msg *m);
/* Publishes stream output older than the batching interval (control thread timer). */
void kcore_tick(Kernel *k);

/* ---- history.c */
void khist_store(KHistory *h, int line, const char *in, size_t inlen, const char *out);
json_t *khist_request(KHistory *h, json_t *content);   /* the history_reply content */
void khist_free(KHistory *h);

/* ---- install.c */
int kernel_install(int argc, char **argv, int uninstall);

#endif
