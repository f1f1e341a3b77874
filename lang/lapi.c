/*
** lapi.c — the parts of the extension API (nbapi.h) that need the VM's
** layout: interrupt polling, the pending error, protected calls, the main
** module's globals, argument errors and per-VM library data.  They exist so
** that lang/lib/ and dist/ never include lvm.h: each is a few lines over
** nb_VM's fields, and none is on a hot path (the hot accessors are the
** static inline value functions of lobject.h).
*/
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

/* ------------------------------------------------------------ interrupts */
bool nb_vm_interrupted(nb_VM *vm) { return vm->interrupted != 0; }
/* poll stays set while a step limit is on: the evaluator counts steps only
** when poll is set (nb_vm_set_step_limit) */
void nb_vm_clear_interrupt(nb_VM *vm) { vm->interrupted = 0; vm->poll = vm->step_limit != 0; }
volatile sig_atomic_t *nb_vm_interrupt_flag(nb_VM *vm) { return &vm->interrupted; }

/* ------------------------------------------------------------ errors */
nb_Value nb_error_value(nb_VM *vm) { return vm->err; }
void nb_error_clear(nb_VM *vm) { nb_decref(vm->err); vm->err = nb_nil(); vm->err_located = false; }

int nb_arg_type_error(nb_VM *vm, const char *fname, const char *param, const char *expected, nb_Value got) {
  return nb_error_kind(vm, "TypeError", "%s: expected %s for '%s', got %s", fname, expected, param, nb_typename(got));
}

/* ------------------------------------------------------------ calls */
/* A failed call leaves the frames it pushed: the evaluator unwinds them as
** the error travels up to a `try` or the top level.  A caller outside the
** evaluator (a backward pass run by the tensor layer) has no such unwinding
** above it, so the stack is put back here, as `try` does. */
int nb_pcall(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out) {
  int depth = vm->depth; nb_Value *sp = vm->sp; nb_Frame *frame = vm->frame;
  int st = nbV_call(vm, fn, args, nargs, out);
  if (st != NB_OK) { vm->depth = depth; vm->sp = sp; vm->frame = frame; }
  return st;
}

/* ------------------------------------------------------------ globals */
int nb_global_find(nb_VM *vm, const char *name, size_t len) { return nbM_global_find(vm->main, name, len); }
int nb_global_slot(nb_VM *vm, nb_Str *name) { return nbM_global_slot(vm->main, name); }
nb_Value *nb_global_at(nb_VM *vm, int slot) { return &vm->main->vals[slot]; }
int nb_module_globals(struct nb_Module *m, nb_Value **vals) { *vals = m->vals; return m->n; }

/* ------------------------------------------------------------ library data */
/* The blocks hang off vm->tensor_state (the slot the VM keeps for its
** libraries) as one handle, so nb_vm_free releases them with the VM without
** knowing any library.  A handful of libraries: a linear search is enough. */
typedef struct LibData { int n; struct { const void *key; void *block; } e[]; } LibData;
static void libdata_free(void *p) {
  LibData *d = p;
  for (int i = 0; i < d->n; i++) free(d->e[i].block);
  free(d);
}
void *nb_vm_libdata(nb_VM *vm, const void *key, size_t size) {
  nb_Handle *h = vm->tensor_state.t == NB_THANDLE ? vm->tensor_state.u.p : NULL;
  LibData *d = h ? h->ptr : NULL;
  for (int i = 0; d && i < d->n; i++) if (d->e[i].key == key) return d->e[i].block;
  int n = d ? d->n : 0;
  LibData *nd = realloc(d, sizeof *nd + sizeof nd->e[0] * (size_t)(n + 1));
  void *block = calloc(1, size ? size : 1);
  if (!nd || !block) abort();
  nd->n = n + 1; nd->e[n].key = key; nd->e[n].block = block;
  if (h) h->ptr = nd;
  else nb_store(&vm->tensor_state, nb_obj(NB_THANDLE, nbH_new("libdata", nd, libdata_free)));
  return block;
}

/* ---- warnings: once per call site ------------------------------------------
** A builtin's warning (a loss broadcasting its operands, ...) is written to
** stderr as "file:line:col: Kind: message" the first time a given call site
** gives that message, as Python's default warning filter does (per location
** and text).  The sites already warned are a per-VM set of hashes; past
** WARN_CAP distinct ones every warning is written (never silently dropped). */
#define WARN_CAP 4096
typedef struct WarnSet { int n; uint64_t h[WARN_CAP]; } WarnSet;
static const char warn_key = 0;
static uint64_t warn_hash(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;   /* FNV-1a */
  return h;
}
void nb_warn(nb_VM *vm, const char *kind, const char *fmt, ...) {
  char msg[1024], line[1400];
  va_list ap;
  va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  const nb_Frame *f = vm->builtin_frame;
  const nb_Node *site = vm->builtin_site;
  if (f && site && site != NB_CALL_LAZY && f->chunk)
    snprintf(line, sizeof line, "%s:%d:%d: %s: %s\n", f->chunk->filename ? f->chunk->filename : "<input>", site->line, site->col, kind, msg);
  else snprintf(line, sizeof line, "%s: %s\n", kind, msg);
  uint64_t h = warn_hash(line, 1469598103934665603ull) | 1;   /* 0 marks an empty slot */
  WarnSet *w = nb_vm_libdata(vm, &warn_key, sizeof *w);
  if (w->n < WARN_CAP * 3 / 4) {
    size_t i = h % WARN_CAP;
    while (w->h[i] && w->h[i] != h) i = (i + 1) % WARN_CAP;
    if (w->h[i] == h) return;
    w->h[i] = h; w->n++;
  }
  nbW_write(vm, NB_STDERR, line, strlen(line));
}
