/*
** lstate.c — the interpreter's global state (nb_Global, lvm.h) and its
** per-thread binding.  This file exists so that the core keeps no mutable
** file-scope state: what the heap, the intern table and the module search
** need lives in the state of the VM that owns it, and the functions that take
** no VM find it through the binding.  The rules (which entry points bind,
** which threads may touch what) are written once, in lvm.h.
*/
#include <stdlib.h>
#include "lvm.h"

/* The state of the VM last entered on this thread (NULL: none). */
_Thread_local nb_Global *nb_state_bound_;

/* The process state (see lvm.h): used by a thread with no VM bound, and its
** intern table is the one every VM's table falls back to.  Static storage,
** so what it holds stays reachable until exit; never freed.  Initialized as
** nbO_heap_init would. */
static nb_Global process = {
  .gc_head = { .gc_prev = &process.gc_head, .gc_next = &process.gc_head },
  .gc_count_limit = NB_GC_MIN_COUNT, .gc_stress = -1,
};

nb_Global *nb_state_process(void) { return &process; }

nb_Global *nb_state_new(nb_VM *owner) {
  nb_Global *g = calloc(1, sizeof *g);
  if (!g) abort();
  g->vm = owner;
  nbO_heap_init(g);
  return g;
}

void nb_state_free(nb_Global *g) {
  if (!g) return;
  nbO_heap_free(g);
  free(g->stdlib_dir);
  free(g);
}

void nb_state_bind(nb_VM *vm) { nb_state_bound_ = vm ? vm->g : NULL; }
