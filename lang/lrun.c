/*
** lrun.c — running a chunk (nbV_run_program: each REPL line, Jupyter cell,
** script or imported file), and the poll that the VM loop (lexec.c) makes at
** back-edges and calls when vm->poll is set: interrupts, cycle collections,
** the step limit.
*/
#include <stdlib.h>
#include "lopcodes.h"

/* Consumes a pending interrupt: the uncatchable error that ends the cell. */
int nbV_interrupt_error(nb_VM *vm) {
  vm->interrupted = 0;
  vm->poll = vm->step_limit != 0;
  return nb_error_kind(vm, "Interrupted", "interrupted");
}

/* Called at loop iterations and calls when vm->poll is set: an interrupt, a
** cycle collection due (safe here: every value the evaluator and the
** builtins below it hold is counted), the step limit. */
int nbV_poll(nb_VM *vm) {
  if (vm->interrupted) return nbV_interrupt_error(vm);
  /* a small allocation used the memory reserve (lobject.c): stop the program
  ** here, where an error can unwind it, before the next one finds none */
  if (nbO_memory_low_take()) {
    vm->poll = vm->step_limit != 0 || vm->interrupted || nbO_gc_due();
    return nb_error_kind(vm, "MemoryError", "out of memory: a small allocation (a record, a string, a list) used the "
                         "interpreter's reserve; the program was stopped here, and the values it made are intact");
  }
  if (nbO_gc_due()) {
    vm->poll = vm->step_limit != 0;
    if (vm->interrupted) vm->poll = 1;   /* a signal between the test and the store */
    nbO_collect();
  }
  if (vm->step_limit && ++vm->steps > vm->step_limit) return nb_error_kind(vm, "StepLimit", "step limit exceeded");
  return NB_OK;
}

/* Runs a resolved chunk at the top level of mod.  Each REPL line, Jupyter
** cell or imported file is one chunk; the top-level frame has no locals (top-
** level names are the module's globals), so nothing of it needs to outlive
** the chunk.  The frame is saved and restored because an import runs a
** chunk while another is running.  Every function and statement of the
** chunk is compiled before any of it runs, so code past a limit of the
** bytecode is reported as a syntax error would be.  Echo: NB_ECHO shows
** every top-level expression's value (the REPL), NB_ECHO_LAST only the last
** one's, as the cell's result (Jupyter's execute_result). */
int nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags) {
  nbO_reserve_take();   /* given back by the last chunk if it ran out of memory */
  for (int i = 0; i < chunk->nprotos; i++) {
    nb_Proto *p = chunk->protos[i];
    if (p->resolved && !nbI_proto_code(vm, p)) return nbI_proto_error(vm, p);
  }
  nb_Code **codes = calloc((size_t)prog->nkids + 1, sizeof *codes);
  if (!codes) abort();
  int st = NB_OK;
  for (int i = 0; i < prog->nkids && !st; i++) {
    const char *why = NULL; const nb_Node *at = NULL;
    codes[i] = nbI_compile_stmt(vm, chunk, prog->kids[i], &why, &at);
    if (!codes[i]) st = nbI_limit_error(vm, chunk, at, why);
  }
  nb_Frame top = { NULL, chunk, NULL, mod, NULL, NULL };
  nb_Frame *saved = vm->frame;
  vm->frame = &top;
  for (int i = 0; i < prog->nkids && !st; i++) {
    nb_Node *s = prog->kids[i];
    nb_Value v = nb_nil();
    st = nbI_exec(vm, &top, codes[i], vm->sp, &v);
    if (st) break;
    bool show = (s->flags & NF_EXPRSTMT) || s->kind == N_IF || s->kind == N_TRY;
    if (show && v.t != NB_TNIL) {
      if ((flags & NB_ECHO_LAST) && i == prog->nkids - 1) nbW_show(vm, v, true, NULL, false);
      else if (flags & NB_ECHO) nbW_display(vm, v);
    }
    nb_decref(v);
  }
  vm->frame = saved;
  for (int i = 0; i < prog->nkids; i++) nbI_code_free(codes[i]);
  free(codes);
  return st;
}
