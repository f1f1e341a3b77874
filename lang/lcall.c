/*
** lcall.c — calls: binding a builtin's arguments to its parameters, entering
** a user function (its frame, keyword and default arguments, captured cells),
** calling any callable value (nbV_call_at), the C entry points nbV_call and
** nbV_call_kw, and making closures.  The VM (lexec.c) enters nabla
** functions itself; builtins, records with __call, and calls from C (a
** builtin's callback, dist/, kernel/) come through here.
**
** The calling convention.  A call's arguments are evaluated straight onto
** the VM stack (vm->stack, above vm->sp), positional ones first, then the
** values of keyword arguments whose names come in kw[]; that window becomes
** the callee's locals, so a call copies nothing.  Whoever is called consumes
** the argument references and puts vm->sp back to base, on success and on
** error alike, and leaves nil in each slot it consumed: no slot of the VM
** stack ever holds a stale reference (one already dropped), so a VM call
** need not clear its callee's temporaries nor the caller's registers after
** the return (lexec.c).  The result is a new reference in *out.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lopcodes.h"

static const char *frame_name(const nb_Frame *f) { return f->fn ? nbP_proto_name(f->fn->proto) : "<main>"; }

/* The parameter of builtin b named name, or -1 (skip: a **kw parameter).
** PyTorch's spellings dim= and keepdim= name the NumPy-style axis= and
** keepdims= parameters of the tensor builtins, and the reverse, so code
** written either way runs. */
static int builtin_param(const nb_Builtin *b, const char *name, int skip) {
  static const char *const alias[][2] = { { "dim", "axis" }, { "keepdim", "keepdims" }, { "axis", "dim" }, { "keepdims", "keepdim" } };
  for (int i = 0; i < b->nparams; i++) if (i != skip && strcmp(b->pnames[i], name) == 0) return i;
  for (size_t a = 0; a < sizeof alias / sizeof alias[0]; a++)
    if (!strcmp(name, alias[a][0]))
      for (int i = 0; i < b->nparams; i++) if (i != skip && strcmp(b->pnames[i], alias[a][1]) == 0) return i;
  return -1;
}

static int call_builtin(nb_VM *vm, const nb_Builtin *b, nb_Value *args, int npos, nb_Str **kw, int nkw, nb_Value *out) {
  if (b->variadic) {
    /* keyword-only params first, then the positional values */
    nb_Value bound[NB_MAX_PARAMS];
    for (int i = 0; i < b->nparams; i++) bound[i] = b->pdefaults[i];
    for (int k = 0; k < nkw; k++) {
      int j = builtin_param(b, kw[k]->data, -1);
      if (j < 0) return nb_error_kind(vm, "TypeError", "%s() got an unexpected keyword argument '%s'", b->name, kw[k]->data);
      bound[j] = args[npos + k];
    }
    int total = b->nparams + npos;
    nb_Value small[32], *all = total <= 32 ? small : malloc(sizeof(nb_Value) * (size_t)total);
    if (!all) return nb_error(vm, "out of memory");
    for (int i = 0; i < b->nparams; i++) all[i] = bound[i];
    for (int i = 0; i < npos; i++) all[b->nparams + i] = args[i];
    int st = b->fn(vm, all, total, out);
    if (all != small) free(all);
    return st;
  }
  /* every parameter given positionally: the arguments are passed where they
  ** are (borrowed, as always; the VM stack above them is free for callbacks) */
  if (npos == b->nparams && nkw == 0 && b->kwrest < 0) return b->fn(vm, args, npos, out);
  if (npos > b->nparams)
    return nb_error_kind(vm, "TypeError", "%s() takes %d argument%s but %d %s given", b->name, b->nparams, b->nparams == 1 ? "" : "s", npos, npos == 1 ? "was" : "were");
  nb_Value bound[NB_MAX_PARAMS];
  bool set[NB_MAX_PARAMS] = {0};
  nb_Rec *rest = NULL;   /* keywords gathered by a **kw parameter */
  for (int i = 0; i < npos; i++) { bound[i] = args[i]; set[i] = true; }
  for (int k = 0; k < nkw; k++) {
    int j = builtin_param(b, kw[k]->data, b->kwrest);
    if (j < 0 && b->kwrest >= 0) {
      if (!rest) rest = nbR_new(nkw);
      nb_incref(args[npos + k]);
      nbR_set(rest, kw[k], args[npos + k]);
      continue;
    }
    if (j < 0) return nb_error_kind(vm, "TypeError", "%s() got an unexpected keyword argument '%s'", b->name, kw[k]->data);
    if (set[j]) { if (rest) nb_decref(nb_obj(NB_TREC, rest)); return nb_error_kind(vm, "TypeError", "%s() got multiple values for argument '%s'", b->name, b->pnames[j]); }
    bound[j] = args[npos + k]; set[j] = true;
  }
  if (b->kwrest >= 0) {
    if (!rest) rest = nbR_new(0);
    bound[b->kwrest] = nb_obj(NB_TREC, rest); set[b->kwrest] = true;
  }
  for (int i = 0; i < b->nparams; i++) if (!set[i]) {
    if (i < b->nrequired) { if (rest) nb_decref(nb_obj(NB_TREC, rest)); return nb_error_kind(vm, "TypeError", "%s() missing argument '%s'", b->name, b->pnames[i]); }
    bound[i] = b->pdefaults[i];
  }
  int st = b->fn(vm, bound, b->nparams, out);
  if (rest) nb_decref(nb_obj(NB_TREC, rest));
  return st;
}

/* Entering a user function.  The window base[0 .. need) becomes the frame's
** locals: parameters first (positional arguments are already in place;
** keyword values are placed by name, compared by pointer since both sides
** are interned), then the other locals, NB_TUNDEF until assigned.  The
** locals that closures capture are boxed into cells before the defaults
** run: the resolver compiled every use of a captured parameter -- in a
** default too (`fn f(a, b = a) { fn g() { a } ... }`) -- as a cell access,
** and a missing parameter's default is stored into its cell.
**
** Recursion is bounded three ways: call depth (max_depth), the C stack of
** this thread (cstack_limit, for calls that come back in through a
** builtin), and the VM stack's size. */
/* boxes the locals of a new frame that closures capture into cells (both
** engines' calls do this before defaults and the body run) */
void nbV_box_cells(const nb_Proto *p, nb_Value *base) {
  for (int i = 0; i < p->ncells; i++) {
    int s = p->cellslots[i];
    nb_Cell *c = nbO_xmalloc(sizeof *c);
    c->h.rc = 1; c->h.type = NB_TCELL; c->v = base[s];
    nbO_track(&c->h);
    base[s] = nb_obj(NB_TCELL, c);
  }
}

/* Binds the arguments at base[0 .. npos+nkw) to p's parameters in place:
** positional ones are already there, keyword values move to their
** parameter's slot, extra positional ones into the *rest list; every other
** slot up to max(nlocals, npos+nkw) becomes NB_TUNDEF.  A parameter left
** unassigned with no default is an error here (one with a default gets it
** in the callee's prologue, lcode.c).  On error every argument is dropped
** and the window holds nil.  Both the VM's calls and call_func bind here. */
int nbV_bind_args(nb_VM *vm, const nb_Proto *p, nb_Value *base, int npos, nb_Str **kw, int nkw) {
  int nargs = npos + nkw;
  int need = p->nlocals > nargs ? p->nlocals : nargs;
  int fixed = p->nparams - p->variadic;   /* parameters before *rest */
  if (npos > fixed && !p->variadic) {
    nb_error_kind(vm, "TypeError", "%s() takes %d argument%s but %d %s given", nbP_proto_name(p), p->nparams, p->nparams == 1 ? "" : "s", npos, npos == 1 ? "was" : "were");
    goto fail_args;
  }
  nb_Value kwv[16];
  if (__builtin_expect(nkw != 0, 0)) {
    if (nkw > 16) { nb_error(vm, "too many keyword arguments"); goto fail_args; }
    memcpy(kwv, base + npos, sizeof(nb_Value) * (size_t)nkw);
  }
  for (int i = npos; i < need; i++) base[i] = nb_undef();
  if (p->variadic) {   /* the positional arguments past the fixed ones become the *rest list */
    int extra = npos > fixed ? npos - fixed : 0;
    nb_List *rest = nbL_new(extra);
    for (int i = 0; i < extra; i++) { nbL_push(rest, base[fixed + i]); base[fixed + i] = nb_undef(); }   /* moved */
    base[fixed] = nb_obj(NB_TLIST, rest);
  }
  for (int k = 0; k < nkw; k++) {
    int j = -1;
    for (int i = 0; i < fixed; i++) if (p->params[i] == kw[k]) { j = i; break; }
    if (j < 0 || base[j].t != NB_TUNDEF) {
      if (j < 0) nb_error_kind(vm, "TypeError", "%s() got an unexpected keyword argument '%s'", nbP_proto_name(p), kw[k]->data);
      else nb_error_kind(vm, "TypeError", "%s() got multiple values for argument '%s'", nbP_proto_name(p), kw[k]->data);
      for (int r = k; r < nkw; r++) nb_decref(kwv[r]);
      goto fail_window;
    }
    base[j] = kwv[k];
  }
  for (int i = 0; i < fixed; i++)
    if (base[i].t == NB_TUNDEF && !p->defaults[i]) {
      nb_error_kind(vm, "TypeError", "%s() missing argument '%s'", nbP_proto_name(p), p->params[i]->data);
      goto fail_window;
    }
  return NB_OK;
fail_args:
  need = nargs;
fail_window:
  for (int i = 0; i < need; i++) { nb_Value v = base[i]; base[i] = nb_nil(); nb_decref(v); }
  return NB_ERR;
}

/* r.name(args) of a record's function field failed to bind its arguments
** (lexec.c): the message names the field and the rule, instead of an
** anonymous function's "anonymous() missing argument 'x'".  got_self: the
** function's first parameter is named self, so the record was passed. */
void nbV_field_call_error(nb_VM *vm, const nb_Str *field, const nb_Proto *p, bool got_self) {
  if (vm->err.t != NB_TREC) return;
  nb_Rec *r = vm->err.u.p;
  nb_Value m = nbR_get_cstr(r, "message");
  if (m.t != NB_TSTR) return;
  const char *msg = nb_str(m)->data, *name = nbP_proto_name(p);
  size_t nl = strlen(name);
  if (!strncmp(msg, name, nl) && !strncmp(msg + nl, "() ", 3)) msg += nl + 3;   /* "f() missing ...": the field says it */
  /* the rule matters where a count is off: a missing argument (self not
  ** taken, or taken and one short) or one too many (the record passed again) */
  bool missing = !strncmp(msg, "missing argument", 16), extra = !strncmp(msg, "takes ", 6);
  const char *note = got_self && (missing || extra)
    ? " (a record's field: its first parameter is named self, so it receives the record; pass the other arguments only)"
    : !got_self && missing ? " (a record's field: a function stored in a record receives the record only when its first parameter is named self)" : "";
  nb_Str *s = nbS_fmt("%s() %s%s", field->data, msg, note);
  nbR_set_cstr(r, "message", nb_strv(s));
}

/* Calls a user function whose arguments sit at base (the top of the VM
** stack): they become its first locals (nbV_bind_args), and its code runs
** from the start, its defaults' prologue.  Consumes the arguments. */
static int call_func(nb_VM *vm, nb_Frame *caller, const nb_Node *site, nb_Func *fn, nb_Value *base, int npos, nb_Str **kw, int nkw, nb_Value *out) {
  nb_Proto *p = fn->proto;
  int nargs = npos + nkw, st = NB_OK;
  int need = p->nlocals > nargs ? p->nlocals : nargs;
  /* the frame address is on the real stack even when ASan moves locals to a fake stack */
  char *here = __builtin_frame_address(0);
  if (vm->depth + vm->nxf >= vm->max_depth || (size_t)(vm->cstack_base - here) > vm->cstack_limit || base + need > vm->stack_end) {
    for (int i = 0; i < nargs; i++) { nb_Value v = base[i]; base[i] = nb_nil(); nb_decref(v); }
    vm->sp = base;
    return nb_error_kind(vm, "RecursionError", "stack overflow (calls nested more than %d deep)", vm->depth + vm->nxf);
  }
  if (nbV_bind_args(vm, p, base, npos, kw, nkw)) { vm->sp = base; return NB_ERR; }
  vm->sp = base + need;
  nb_Frame nf = { base, p->chunk, fn, fn->mod, site, caller };
  vm->depth++;
  vm->frame = &nf;
  nbV_box_cells(p, base);
  nb_Code *code = p->code ? p->code : nbI_proto_code(vm, p);
  st = code ? nbI_exec(vm, &nf, code, base, out) : nbI_proto_error(vm, p);
  vm->depth--;
  vm->frame = caller;
  for (int i = 0; i < need; i++) { nb_Value v = base[i]; base[i] = nb_nil(); nb_decref(v); }
  vm->sp = base;
  if (st == NB_ERR && site && vm->err_located) nbE_add_frame(vm, frame_name(caller), caller->chunk, site);
  return st;
}

/* Calls `callee` with the arguments at base[0 .. npos+nkw) (on the VM stack,
** top at vm->sp).  Consumes them. */
int nbV_call_at(nb_VM *vm, nb_Frame *f, const nb_Node *site, nb_Value callee, nb_Value *base, int npos, nb_Str **kw, int nkw, nb_Value *out) {
  if (callee.t == NB_TFUNC) return call_func(vm, f, site, nb_func(callee), base, npos, kw, nkw, out);
  int st;
  if (callee.t == NB_TBUILTIN) {
    nb_Frame *saved = vm->frame, *saved_bframe = vm->builtin_frame;
    const nb_Node *saved_bsite = vm->builtin_site;
    vm->builtin_frame = f; vm->builtin_site = site;
    st = call_builtin(vm, callee.u.bi, base, npos, kw, nkw, out);
    vm->frame = saved; vm->builtin_frame = saved_bframe; vm->builtin_site = saved_bsite;
    /* an interrupt during one long builtin (a huge sort, a matmul) ends the
    ** cell here even when the builtin finished: its result is dropped */
    if (__builtin_expect(vm->interrupted, 0) && st == NB_OK) { nb_decref(*out); *out = nb_nil(); st = nbV_interrupt_error(vm); }
  } else if (callee.t == NB_TREC && nbR_method_cstr(nb_rec(callee), "__call").t != NB_TUNDEF) {
    /* a record with __call (a model, an optimizer) is callable: r(args)
    ** calls r.__call(r, args), so the function sees its record as self */
    nb_Value fn = nbR_method_cstr(nb_rec(callee), "__call");
    if (vm->sp >= vm->stack_end) { st = nb_error_kind(vm, "RecursionError", "stack overflow"); goto drop; }
    memmove(base + 1, base, sizeof(nb_Value) * (size_t)(npos + nkw));
    base[0] = callee; nb_incref(callee);
    vm->sp++;
    nb_incref(fn);
    st = nbV_call_at(vm, f, site, fn, base, npos + 1, kw, nkw, out);
    nb_decref(fn);
    return st;
  } else {
    st = nb_error_kind(vm, "TypeError", "a %s is not callable", nb_typename(callee));
  }
drop:
  for (int i = 0; i < npos + nkw; i++) { nb_Value v = base[i]; base[i] = nb_nil(); nb_decref(v); }
  vm->sp = base;
  return st;
}

int nbV_call_kw(nb_VM *vm, nb_Value fn, nb_Value *args, int npos, nb_Str **kwnames, int nkw, nb_Value *out) {
  nb_state_bind(vm);   /* an entry point too: dist/ and kernel/ call in from outside a run */
  int n = npos + nkw;
  nb_Value *base = vm->sp;
  if (base + n > vm->stack_end) return nb_error_kind(vm, "RecursionError", "stack overflow");
  for (int i = 0; i < n; i++) { nb_incref(args[i]); base[i] = args[i]; }
  vm->sp = base + n;
  nb_Frame top = { NULL, NULL, NULL, vm->main, NULL, NULL };
  nb_Frame *f = vm->frame ? vm->frame : &top;
  const nb_Node *site = vm->frame && vm->builtin_frame == f && vm->builtin_site ? vm->builtin_site : nbI_frame_call(f);
  return nbV_call_at(vm, f, site, fn, base, npos, kwnames, nkw, out);
}
int nbV_call(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out) {
  return nbV_call_kw(vm, fn, args, nargs, NULL, 0, out);
}

/* --------------------------------------------------------------- f(*xs) */
/* *v (a range or a tensor) as the list of what `for` would visit: numbers,
** or a tensor's items along its first axis; consumes *v */
int nbV_spread_list(nb_VM *vm, nb_Value *v) {
  nb_Value seq = *v;
  *v = nb_nil();
  if (seq.t == NB_TRANGE) {
    nb_Range *r = seq.u.p;
    double len = nbG_range_len(r);
    if (len > 1e7) { nb_decref(seq); return nb_error_kind(vm, "ValueError", "*range: %.0f arguments are too many to spread", len); }
    nb_List *l;
    if (nbL_new_checked(vm, "*range", (size_t)len, &l)) { nb_decref(seq); return NB_ERR; }
    for (double k = 0; k < len; k++) nbL_push(l, nb_numk(r->start + k * r->step, r->kind));
    nb_decref(seq);
    *v = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  if (seq.t == NB_TTENSOR) {
    double len;
    if (nbT_len(vm, seq, &len)) { nb_decref(seq); return NB_ERR; }
    nb_List *l;
    if (nbL_new_checked(vm, "*tensor", (size_t)len, &l)) { nb_decref(seq); return NB_ERR; }
    for (long k = 0; k < (long)len; k++) {
      nb_Value kv = nb_int((double)k), item;
      if (nbT_index(vm, seq, &kv, 1, &item)) { nb_decref(nb_obj(NB_TLIST, l)); nb_decref(seq); return NB_ERR; }
      nbL_push(l, item);
    }
    nb_decref(seq);
    *v = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  if (seq.t == NB_TREC && nbR_method_cstr(nb_rec(seq), "__next").t != NB_TUNDEF) {   /* an iterator, to its end */
    nb_Value next = nbR_method_cstr(nb_rec(seq), "__next");
    nb_List *l = nbL_new(8);
    for (;;) {
      nb_Value item;
      if (l->n >= 10000000) { nb_decref(nb_obj(NB_TLIST, l)); nb_decref(seq); return nb_error_kind(vm, "ValueError", "*iterator: more than 10000000 arguments to spread"); }
      if (nbV_call(vm, next, &seq, 1, &item)) { nb_decref(nb_obj(NB_TLIST, l)); nb_decref(seq); return NB_ERR; }
      if (item.t == NB_TNIL) break;
      nbL_push(l, item);
    }
    nb_decref(seq);
    *v = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  nb_error_kind(vm, "TypeError", "*%s: only a list, a range, a tensor or an iterator can be spread into a call's arguments", nb_typename(seq));
  nb_decref(seq);
  return NB_ERR;
}

/* --------------------------------------------------------------- closures */
void nbV_func_set_code(nb_Func *fn, nb_Code *c) {
  fn->code = c;
  fn->entry = c ? c->code + c->body : NULL;
  fn->fastcall = c ? c->fastcall : -1;
  fn->nregs = c ? c->nregs : 0;
  fn->nlocals = c ? c->nlocals : 0;
}

int nbV_make_closure(nb_VM *vm, nb_Frame *f, nb_Proto *p, nb_Value *out) {
  (void)vm;
  nb_Func *fn = nbO_xmalloc(sizeof(nb_Func) + sizeof(nb_Cell *) * (size_t)p->ncaps);
  fn->h.rc = 1; fn->h.type = NB_TFUNC; fn->proto = p; fn->mod = f->mod; nbV_func_set_code(fn, p->code); fn->ncaps = p->ncaps;
  nbO_track(&fn->h);
  p->chunk->rc++;
  for (int i = 0; i < p->ncaps; i++) {
    nb_Cell *c = p->caps[i].from_cap ? f->fn->caps[p->caps[i].idx] : (nb_Cell *)f->locals[p->caps[i].idx].u.p;
    c->h.rc++;
    fn->caps[i] = c;
  }
  *out = nb_obj(NB_TFUNC, fn);
  return NB_OK;
}

