/*
** interp.h — the kernel's interpreter (xeus's "interpreter" half): the
** language side of execute, complete, inspect and is_complete, and the VM's
** output sink.  It knows nothing of sockets, signing or the current request:
** it takes a request's content, returns the reply's content, and publishes
** everything else (streams, displays, results, errors) through the callbacks
** it is given (interp_Out, implemented by the kernel core in core.c).  So the
** language side can be read, and tested, without the server.
**
** Threads: everything runs on the thread that serves shell requests (the VM
** owns its C stack), except interp_interrupt, which is async-signal-safe.
*/
#ifndef NABLA_INTERP_H
#define NABLA_INTERP_H

#include <stddef.h>
#include <jansson.h>

typedef struct Interp Interp;

/* How the interpreter reaches the front end; ud is passed back to each.
** Publishing happens only while a request is being served (the receiver
** drops it otherwise), in the order of the calls. */
typedef struct interp_Out {
  void *ud;
  /* stdout/stderr text (stream is NB_STDOUT or NB_STDERR); the receiver may
  ** batch it, so it is flushed before any other output */
  void (*stream)(void *ud, int stream, const char *data, size_t len);
  void (*flush)(void *ud);                      /* publishes the batched text */
  /* an iopub message (content stolen) under the served request's header */
  void (*publish)(void *ud, const char *msg_type, json_t *content);
  /* input(): a line from the front end, malloc'd; NULL when it cannot answer
  ** (interrupt, shutdown, a broken stdin channel) */
  char *(*input)(void *ud, const char *prompt, int password);
  /* a cell to keep in the history: its execution count, code and the text of
  ** its value (NULL when it had none) */
  void (*record)(void *ud, int count, const char *code, size_t len, const char *value_text);
} interp_Out;

/* A VM whose sink publishes through out (copied). */
Interp *interp_new(const interp_Out *out);
void interp_free(Interp *ip);

/* Stops the code the VM is running, if any; async-signal-safe (SIGINT,
** the control thread's interrupt_request). */
void interp_interrupt(Interp *ip);

/* The replies' contents (new references).  interp_execute sets *abort_queue
** when the cell failed and asked to stop on error: the caller aborts the
** queued executes before it sends the reply. */
json_t *interp_execute(Interp *ip, json_t *content, int *abort_queue);
json_t *interp_complete(Interp *ip, json_t *content);
json_t *interp_inspect(Interp *ip, json_t *content);
json_t *interp_is_complete(Interp *ip, json_t *content);

#endif
