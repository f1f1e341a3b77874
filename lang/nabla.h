/*
** nabla.h — the embedding API of the language core.
** Front ends (repl/, kernel/, dist/ workers) and tests use only this header:
** create a VM with an output sink, run source in it, ask it about source
** (is_complete, completion, inspect), and read the last error.
** Code that adds builtins (lang/lib/, dist/) uses nbapi.h, which includes
** this one; neither exposes the VM's layout (lvm.h is the core's own).
*/
#ifndef NABLA_H
#define NABLA_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef struct nb_VM nb_VM;

/* ---- output sink -------------------------------------------------------
** Everything the interpreter shows goes through one of these: print and
** stderr text, rich display bundles, clear_output and input().  The terminal,
** the Jupyter iopub channel and the worker→session link each implement it.
*/
enum { NB_STDOUT = 1, NB_STDERR = 2 };

typedef struct nb_MimeItem { const char *mime; const char *data; size_t len; } nb_MimeItem;

typedef struct nb_Sink nb_Sink;
struct nb_Sink {
  void (*write)(nb_Sink *s, int stream, const char *data, size_t len);
  /* a rich value: items[0] is always text/plain.  display_id may be NULL;
  ** update != 0 replaces an earlier display with the same id. */
  void (*display)(nb_Sink *s, const nb_MimeItem *items, int nitems, const char *display_id, int update);
  void (*clear)(nb_Sink *s, int wait);
  /* reads one line for input(); returns a malloc'd string or NULL when input
  ** is not available (the builtin then raises a clear error). */
  char *(*input)(nb_Sink *s, const char *prompt, int password);
  void *ud;
  /* the value of a chunk's last expression under NB_ECHO_LAST (Jupyter's
  ** execute_result); NULL: it goes to display() like any other value */
  void (*result)(nb_Sink *s, const nb_MimeItem *items, int nitems);
  /* display() renders rich output that an update replaces in place (a
  ** Jupyter front end): progress() then draws one display it updates,
  ** where a terminal gets a redrawn line */
  int rich;
};

/* A sink that writes to the process's stdout/stderr (used by scripts and tests). */
nb_Sink *nb_stdio_sink(void);

/* ---- VM ----------------------------------------------------------------- */
nb_VM *nb_vm_new(nb_Sink *sink);
void   nb_vm_free(nb_VM *vm);
void   nb_vm_set_sink(nb_VM *vm, nb_Sink *sink);
nb_Sink *nb_vm_sink(nb_VM *vm);
/* script arguments, visible to programs as the global `argv` */
void   nb_vm_set_argv(nb_VM *vm, int argc, char **argv);
/* extra module search directory (the script's own directory) */
void   nb_vm_add_path(nb_VM *vm, const char *dir);
/* 0 = unlimited.  When exceeded, running code stops with "step limit exceeded"
** (used by the fuzzer so `while true {}` is not a hang). */
void   nb_vm_set_step_limit(nb_VM *vm, uint64_t steps);
/* Async-signal-safe: ask the running code to stop with an "interrupted" error
** at its next loop iteration or call.  Any thread or a signal handler may call it. */
void   nb_vm_interrupt(nb_VM *vm);

/* ---- running code ------------------------------------------------------- */
enum {
  NB_ECHO = 1,        /* show the value of each top-level expression statement */
  NB_ECHO_LAST = 2,   /* show only the value of the last statement (Jupyter's execute_result) */
};

/* Runs `src` as a chunk of the main module.  Returns 0 on success, 1 when an
** uncaught error stopped it (see nb_last_error), 2 on a syntax error.  Echoed
** values go to the sink through display(). */
int nb_run(nb_VM *vm, const char *src, size_t len, const char *filename, int flags);
int nb_run_file(nb_VM *vm, const char *path);

typedef struct nb_ErrorInfo {
  const char *name;       /* "SyntaxError", "TypeError", "Interrupted", ... */
  const char *message;    /* one line */
  const char *report;     /* the full multi-line report: location, source line with caret, stack trace */
} nb_ErrorInfo;
/* The last uncaught error, valid until the next nb_run; NULL after a success. */
const nb_ErrorInfo *nb_last_error(nb_VM *vm);

/* ---- asking about source (shared by the REPL and the Jupyter kernel) ---- */
typedef enum { NB_COMPLETE, NB_INCOMPLETE, NB_INVALID } nb_Completeness;
/* For NB_INCOMPLETE, *indent (if non-NULL) gets a suggested indent string (static). */
nb_Completeness nb_is_complete(const char *src, const char **indent);

typedef struct nb_Completions {
  char **items; int n;
  int start, end;   /* byte offsets in the source that the completions replace */
} nb_Completions;
void nb_complete(nb_VM *vm, const char *src, int cursor, nb_Completions *out);
void nb_completions_free(nb_Completions *c);

/* Documentation text for the name/expression at cursor; malloc'd or NULL. */
char *nb_inspect(nb_VM *vm, const char *src, int cursor);

/* Names of user globals (for %who), malloc'd, newline separated. */
char *nb_globals_list(nb_VM *vm);
/* Drops all user globals (for %reset). */
void nb_reset(nb_VM *vm);
const char *nb_version(void);
/* the bytecode of src's statements and functions (nabla --dis): malloc'd
** text, or NULL after a syntax error (nb_last_error) */
char *nb_disassemble(nb_VM *vm, const char *src, size_t len, const char *filename);
/* where `import` finds the standard library (process-wide) */
void nb_set_stdlib_dir(const char *dir);

#endif
