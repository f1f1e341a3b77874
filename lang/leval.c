/*
** leval.c — the evaluator: a compact walker over the resolved syntax tree.
**
** Every eval returns a status (NB_OK, NB_ERR, NB_BREAK, NB_CONTINUE,
** NB_RETURN) and writes its value, a new reference, to *out.  Variables were
** turned into slots by the resolver: locals live in a window of vm->stack,
** captured ones in cells, globals in the module's array.  A call evaluates
** its arguments straight into the window that becomes the callee's locals.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

#define TRY(x) do { int st_ = (x); if (st_) return st_; } while (0)

static int eval(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out);
static inline int eval_leaf(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out);

/* An error raised while evaluating n: point at n unless a deeper node already did. */
static int fail(nb_VM *vm, nb_Frame *f, const nb_Node *n) {
  if (!vm->err_located) nbE_locate(vm, f->chunk, n);
  return NB_ERR;
}

static const char *frame_name(const nb_Frame *f) { return f->fn ? nbP_proto_name(f->fn->proto) : "<main>"; }

/* Consumes a pending interrupt: the uncatchable error that ends the cell. */
int nbV_interrupt_error(nb_VM *vm) {
  vm->interrupted = 0;
  vm->poll = vm->step_limit != 0;
  return nb_error_kind(vm, "Interrupted", "interrupted");
}

/* Called at loop iterations and calls when vm->poll is set: an interrupt, a
** cycle collection due (safe here: every value the evaluator and the
** builtins below it hold is counted), the step limit. */
static int poll_vm(nb_VM *vm) {
  if (vm->interrupted) return nbV_interrupt_error(vm);
  if (nbO_gc_due()) {
    vm->poll = vm->step_limit != 0;
    if (vm->interrupted) vm->poll = 1;   /* a signal between the test and the store */
    nbO_collect();
  }
  if (vm->step_limit && ++vm->steps > vm->step_limit) return nb_error_kind(vm, "StepLimit", "step limit exceeded");
  return NB_OK;
}
#define POLL(vm, f, n) do { if (__builtin_expect((vm)->poll, 0) && poll_vm(vm)) return fail(vm, f, n); } while (0)

/* --------------------------------------------------------------- names */
static int undefined(nb_VM *vm, nb_Frame *f, const nb_Node *n, bool global) {
  if (global) nb_error_kind(vm, "NameError", "undefined variable '%s'", n->str->data);
  else nb_error_kind(vm, "NameError", "variable '%s' is used before it is assigned", n->str->data);
  return fail(vm, f, n);
}

static inline int load_var(nb_VM *vm, nb_Frame *f, const nb_Node *n, nb_Value *out) {
  nb_Value v;
  switch (n->vkind) {
  case V_LOCAL: v = f->locals[n->idx]; break;
  case V_CELL: v = ((nb_Cell *)f->locals[n->idx].u.p)->v; break;
  case V_CAP: v = f->fn->caps[n->idx]->v; break;
  default:
    v = f->mod->vals[n->idx];
    if (v.t == NB_TUNDEF) {
      if (n->bidx >= 0) {
        const nb_Builtin *b = nbC_at(n->bidx);
        if (!b->fn) {   /* a named value: pi, inf, nan; the cuda namespace */
          if (b->value) return b->value(vm, out) ? fail(vm, f, n) : NB_OK;
          *out = nb_flt(strtod(b->params, NULL)); return NB_OK;   /* floats, as Python's math.pi */
        }
        *out = nb_builtinv(b); return NB_OK;
      }
      return undefined(vm, f, n, true);
    }
    nb_incref(v); *out = v; return NB_OK;
  }
  if (v.t == NB_TUNDEF) return undefined(vm, f, n, false);
  nb_incref(v); *out = v;
  return NB_OK;
}

static void store_var(nb_Frame *f, const nb_Node *n, nb_Value v) {
  switch (n->vkind) {
  case V_LOCAL: nb_store(&f->locals[n->idx], v); break;
  case V_CELL: nb_store(&((nb_Cell *)f->locals[n->idx].u.p)->v, v); break;
  case V_CAP: nb_store(&f->fn->caps[n->idx]->v, v); break;
  default: nb_store(&f->mod->vals[n->idx], v); break;
  }
}

/* --------------------------------------------------------------- calls */
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

/* Calls a user function whose arguments sit at vm->sp[-(npos+nkw)..]: they
** become the first locals.  Consumes the argument references. */
static int call_func(nb_VM *vm, nb_Frame *caller, const nb_Node *site, nb_Func *fn, nb_Value *base, int npos, nb_Str **kw, int nkw, nb_Value *out) {
  nb_Proto *p = fn->proto;
  int nargs = npos + nkw, st = NB_OK;
  int need = p->nlocals > nargs ? p->nlocals : nargs;
  /* the frame address is on the real stack even when ASan moves locals to a fake stack */
  char *here = __builtin_frame_address(0);
  if (vm->depth >= vm->max_depth || (size_t)(vm->cstack_base - here) > vm->cstack_limit || base + need > vm->stack_end) {
    for (int i = 0; i < nargs; i++) nb_decref(base[i]);
    vm->sp = base;
    return nb_error_kind(vm, "RecursionError", "stack overflow (calls nested more than %d deep)", vm->depth);
  }
  int fixed = p->nparams - p->variadic;   /* parameters before *rest */
  if (npos > fixed && !p->variadic) {
    for (int i = 0; i < nargs; i++) nb_decref(base[i]);
    vm->sp = base;
    return nb_error_kind(vm, "TypeError", "%s() takes %d argument%s but %d %s given", nbP_proto_name(p), p->nparams, p->nparams == 1 ? "" : "s", npos, npos == 1 ? "was" : "were");
  }
  nb_Value kwv[16];
  if (__builtin_expect(nkw != 0, 0)) {
    if (nkw > 16) { for (int i = 0; i < nargs; i++) nb_decref(base[i]); vm->sp = base; return nb_error(vm, "too many keyword arguments"); }
    memcpy(kwv, base + npos, sizeof(nb_Value) * (size_t)nkw);
  }

  for (int i = npos; i < need; i++) base[i] = nb_undef();
  if (p->variadic) {   /* the positional arguments past the fixed ones become the *rest list */
    int extra = npos > fixed ? npos - fixed : 0;
    nb_List *rest = nbL_new(extra);
    for (int i = 0; i < extra; i++) { nbL_push(rest, base[fixed + i]); base[fixed + i] = nb_undef(); }   /* moved */
    base[fixed] = nb_obj(NB_TLIST, rest);
  }
  vm->sp = base + need;
  nb_Frame nf = { base, p->chunk, fn, fn->mod, site, caller };
  for (int k = 0; k < nkw; k++) {
    int j = -1;
    for (int i = 0; i < fixed; i++) if (p->params[i] == kw[k]) { j = i; break; }
    if (j < 0 || base[j].t != NB_TUNDEF) {
      if (j < 0) nb_error_kind(vm, "TypeError", "%s() got an unexpected keyword argument '%s'", nbP_proto_name(p), kw[k]->data);
      else nb_error_kind(vm, "TypeError", "%s() got multiple values for argument '%s'", nbP_proto_name(p), kw[k]->data);
      for (int r = k; r < nkw; r++) nb_decref(kwv[r]);
      st = NB_ERR; goto done;
    }
    base[j] = kwv[k];
  }
  vm->depth++;
  vm->frame = &nf;
  for (int i = 0; i < p->nparams; i++) if (base[i].t == NB_TUNDEF) {
    if (!p->defaults[i]) {
      nb_error_kind(vm, "TypeError", "%s() missing argument '%s'", nbP_proto_name(p), p->params[i]->data);
      st = NB_ERR; goto out;
    }
    nb_Value d;
    if ((st = eval(vm, &nf, p->defaults[i], &d))) goto out;
    base[i] = d;
  }
  for (int i = 0; i < p->ncells; i++) {
    int s = p->cellslots[i];
    nb_Cell *c = malloc(sizeof *c);
    if (!c) abort();
    c->h.rc = 1; c->h.type = NB_TCELL; c->v = base[s];
    nbO_track(&c->h);
    base[s] = nb_obj(NB_TCELL, c);
  }
  st = eval(vm, &nf, p->body, out);
  if (st == NB_RETURN) { *out = vm->ret; vm->ret = nb_nil(); st = NB_OK; }
  else if (st == NB_BREAK || st == NB_CONTINUE) st = NB_OK;   /* resolver forbids; defensive */
out:
  vm->depth--;
  vm->frame = caller;
done:
  for (int i = 0; i < need; i++) nb_decref(base[i]);
  vm->sp = base;
  if (st == NB_ERR && site && vm->err_located) nbE_add_frame(vm, frame_name(caller), caller->chunk, site);
  return st;
}

/* Calls `callee` with the arguments at base[0 .. npos+nkw) (on the VM stack,
** top at vm->sp).  Consumes them. */
static int call_at(nb_VM *vm, nb_Frame *f, const nb_Node *site, nb_Value callee, nb_Value *base, int npos, nb_Str **kw, int nkw, nb_Value *out) {
  if (callee.t == NB_TFUNC) return call_func(vm, f, site, nb_func(callee), base, npos, kw, nkw, out);
  int st;
  if (callee.t == NB_TBUILTIN) {
    nb_Frame *saved = vm->frame;
    st = call_builtin(vm, callee.u.bi, base, npos, kw, nkw, out);
    vm->frame = saved;
    /* an interrupt during one long builtin (a huge sort, a matmul) ends the
    ** cell here even when the builtin finished: its result is dropped */
    if (__builtin_expect(vm->interrupted, 0) && st == NB_OK) { nb_decref(*out); *out = nb_nil(); st = nbV_interrupt_error(vm); }
  } else if (callee.t == NB_TREC && nbR_find_cstr(nb_rec(callee), "__call") >= 0) {
    /* a record with __call (a model, an optimizer) is callable: r(args)
    ** calls r.__call(r, args), so the function sees its record as self */
    nb_Value fn = nbR_get_cstr(nb_rec(callee), "__call");
    if (vm->sp >= vm->stack_end) { st = nb_error_kind(vm, "RecursionError", "stack overflow"); goto drop; }
    memmove(base + 1, base, sizeof(nb_Value) * (size_t)(npos + nkw));
    base[0] = callee; nb_incref(callee);
    vm->sp++;
    nb_incref(fn);
    st = call_at(vm, f, site, fn, base, npos + 1, kw, nkw, out);
    nb_decref(fn);
    return st;
  } else {
    st = nb_error_kind(vm, "TypeError", "a %s is not callable", nb_typename(callee));
  }
drop:
  for (int i = 0; i < npos + nkw; i++) nb_decref(base[i]);
  vm->sp = base;
  return st;
}

int nbV_call_kw(nb_VM *vm, nb_Value fn, nb_Value *args, int npos, nb_Str **kwnames, int nkw, nb_Value *out) {
  int n = npos + nkw;
  nb_Value *base = vm->sp;
  if (base + n > vm->stack_end) return nb_error_kind(vm, "RecursionError", "stack overflow");
  for (int i = 0; i < n; i++) { nb_incref(args[i]); base[i] = args[i]; }
  vm->sp = base + n;
  nb_Frame top = { NULL, NULL, NULL, vm->main, NULL, NULL };
  nb_Frame *f = vm->frame ? vm->frame : &top;
  return call_at(vm, f, f->call, fn, base, npos, kwnames, nkw, out);
}
int nbV_call(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out) {
  return nbV_call_kw(vm, fn, args, nargs, NULL, 0, out);
}

/* evaluates call arguments onto the stack */
/* *v (a range or a tensor) as the list of what `for` would visit: numbers,
** or a tensor's items along its first axis; consumes *v */
static int spread_list(nb_VM *vm, nb_Value *v) {
  nb_Value seq = *v;
  *v = nb_nil();
  if (seq.t == NB_TRANGE) {
    nb_Range *r = seq.u.p;
    double len = nbG_range_len(r);
    if (len > 1e7) { nb_decref(seq); return nb_error_kind(vm, "ValueError", "*range: %.0f arguments are too many to spread", len); }
    nb_List *l = nbL_new((int)len);
    for (double k = 0; k < len; k++) nbL_push(l, nb_numk(r->start + k * r->step, r->kind));
    nb_decref(seq);
    *v = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  if (seq.t == NB_TTENSOR) {
    double len;
    if (nbT_len(vm, seq, &len)) { nb_decref(seq); return NB_ERR; }
    nb_List *l = nbL_new((int)len);
    for (long k = 0; k < (long)len; k++) {
      nb_Value kv = nb_int((double)k), item;
      if (nbT_index(vm, seq, &kv, 1, &item)) { nb_decref(nb_obj(NB_TLIST, l)); nb_decref(seq); return NB_ERR; }
      nbL_push(l, item);
    }
    nb_decref(seq);
    *v = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  if (seq.t == NB_TREC && nbR_find_cstr(nb_rec(seq), "__next") >= 0) {   /* an iterator, to its end */
    nb_Value next = nbR_get_cstr(nb_rec(seq), "__next");
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

/* Pushes a call's arguments; *npos gets the number of positional ones,
** which a spread argument f(*xs) makes known only now. */
static int push_args(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *base, int *npos) {
  *npos = n->npos;
  for (int i = 0; i < n->nkids; i++) {
    if (vm->sp >= vm->stack_end) {
      nb_error_kind(vm, "RecursionError", "stack overflow");
      goto fail;
    }
    nb_Value v;
    nb_Node *k = n->kids[i];
    int st = eval_leaf(vm, f, k->kind == N_SPREAD ? k->a : k, &v);
    if (st) { for (nb_Value *p = base; p < vm->sp; p++) nb_decref(*p); vm->sp = base; return st; }
    if (k->kind != N_SPREAD) { *vm->sp++ = v; continue; }
    if (v.t != NB_TLIST && spread_list(vm, &v)) {
      for (nb_Value *p = base; p < vm->sp; p++) nb_decref(*p);
      vm->sp = base;
      return fail(vm, f, k);
    }
    nb_List *l = nb_list(v);
    if (vm->stack_end - vm->sp < l->n + 1) { nb_decref(v); nb_error_kind(vm, "RecursionError", "stack overflow (spreading %d arguments)", l->n); goto fail; }
    for (int j = 0; j < l->n; j++) { nb_incref(l->items[j]); *vm->sp++ = l->items[j]; }
    *npos += l->n - 1;
    nb_decref(v);
  }
  return NB_OK;
fail:
  for (nb_Value *p = base; p < vm->sp; p++) nb_decref(*p);
  vm->sp = base;
  return fail(vm, f, n);
}

static int eval_call(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  nb_Value callee;
  if (n->a->kind == N_NAME) TRY(load_var(vm, f, n->a, &callee));
  else TRY(eval(vm, f, n->a, &callee));
  if (__builtin_expect(vm->poll, 0) && poll_vm(vm)) { nb_decref(callee); return fail(vm, f, n); }
  nb_Value *base = vm->sp;
  int npos;
  int st = push_args(vm, f, n, base, &npos);
  if (st) { nb_decref(callee); return st; }
  st = call_at(vm, f, n, callee, base, npos, n->names ? n->names + n->npos : NULL, n->nkids - n->npos, out);
  nb_decref(callee);
  return st ? fail(vm, f, n) : NB_OK;
}

/* a.f(args): a field f of a record or member of a module is called as is;
** otherwise f is looked up like a variable and called as f(a, args). */
static int eval_method(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  nb_Value recv, callee;
  TRY(eval(vm, f, n->a, &recv));
  if (__builtin_expect(vm->poll, 0) && poll_vm(vm)) { nb_decref(recv); return fail(vm, f, n); }
  int self = 1, i;
  if (recv.t == NB_TREC && (i = nbR_find(nb_rec(recv), n->str)) >= 0) {
    callee = nb_rec(recv)->vals[i]; nb_incref(callee); self = 0;
  } else if (recv.t == NB_TMODULE && (i = nbM_global_find(recv.u.p, n->str->data, n->str->len)) >= 0 && ((nb_Module *)recv.u.p)->vals[i].t != NB_TUNDEF) {
    callee = ((nb_Module *)recv.u.p)->vals[i]; nb_incref(callee); self = 0;
  } else {
    nb_Node tmp = *n; tmp.kind = N_NAME;
    if (load_var(vm, f, &tmp, &callee)) {
      nb_decref(recv);
      nb_decref(vm->err); vm->err = nb_nil(); vm->err_located = false;
      nb_error_kind(vm, "NameError", "a %s has no method '%s' (no field, and no function of that name)", nb_typename(recv) , n->str->data);
      return fail(vm, f, n);
    }
  }
  nb_Value *base = vm->sp;
  if (self) *vm->sp++ = recv; else nb_decref(recv);
  int npos;
  int st = push_args(vm, f, n, vm->sp, &npos);
  if (st) { if (self) { nb_decref(recv); vm->sp = base; } nb_decref(callee); return st; }
  st = call_at(vm, f, n, callee, base, npos + self, n->names ? n->names + n->npos : NULL, n->nkids - n->npos, out);
  nb_decref(callee);
  return st ? fail(vm, f, n) : NB_OK;
}

/* --------------------------------------------------------------- operators */
static int type_error2(nb_VM *vm, const char *op, nb_Value a, nb_Value b) {
  return nb_error_kind(vm, "TypeError", "unsupported operand types for %s: %s and %s", op, nb_typename(a), nb_typename(b));
}
static const char *opname(int op) {
  static const char *const names[] = { "+", "-", "*", "/", "%", "**", "@", "==", "!=", "<", "<=", ">", ">=", "//" };
  return op >= 0 && op < OP_NONE ? names[op] : "?";
}

/* x // y as Python's float floor division: the quotient rounded down, exact
** where floor(x / y) would round (fmod-based, as CPython). */
static double floor_div(double x, double y) {
  if (y == 0) return floor(x / y);   /* inf or nan, as / gives */
  double mod = fmod(x, y), div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return copysign(0.0, x / y);
  double f = floor(div);
  return div - f > 0.5 ? f + 1.0 : f;
}

/* Arithmetic on two numbers with Python's kinds: int op int is an int for
** + - * // % and ** with a non-negative exponent; / is always a float; a float
** operand makes a float (or-ing the kinds: NB_KFLOAT is 1, NB_KINT 0). */
static inline nb_Value num_arith(int op, nb_Value a, nb_Value b) {
  double x = a.u.n, y = b.u.n;
  nb_Value r; r.t = NB_TNUM; r.kind = a.kind | b.kind;
  switch (op) {
  case OP_ADD: r.u.n = x + y; return r;
  case OP_SUB: r.u.n = x - y; return r;
  case OP_MUL: r.u.n = x * y; return r;
  case OP_DIV: return nb_flt(x / y);
  case OP_IDIV: r.u.n = floor_div(x, y); return r;
  case OP_MOD: { double m = fmod(x, y); if (m != 0 && ((m < 0) != (y < 0))) m += y; r.u.n = m; return r; }  /* floored, like Python */
  case OP_POW: r.u.n = pow(x, y); if (y < 0) r.kind = NB_KFLOAT; return r;
  default: return nb_flt(NAN);
  }
}

static int str_cmp(const nb_Str *a, const nb_Str *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->data, b->data, n);
  return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

int nbV_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) {
  if (a.t == NB_TTENSOR || b.t == NB_TTENSOR) return nbT_binop(vm, op, a, b, out);
  if (a.t == NB_TNUM && b.t == NB_TNUM) {
    double x = a.u.n, y = b.u.n;
    switch (op) {
    case OP_EQ: *out = nb_bool(x == y); return NB_OK;
    case OP_NE: *out = nb_bool(x != y); return NB_OK;
    case OP_LT: *out = nb_bool(x < y); return NB_OK;
    case OP_LE: *out = nb_bool(x <= y); return NB_OK;
    case OP_GT: *out = nb_bool(x > y); return NB_OK;
    case OP_GE: *out = nb_bool(x >= y); return NB_OK;
    case OP_MATMUL: return type_error2(vm, "@", a, b);
    default: *out = num_arith(op, a, b); return NB_OK;
    }
  }
  if (op == OP_EQ || op == OP_NE) { bool e; if (nbO_equal(vm, a, b, &e)) return NB_ERR; *out = nb_bool(op == OP_EQ ? e : !e); return NB_OK; }
  if (a.t == NB_TSTR && b.t == NB_TSTR) {
    if (op == OP_ADD) {
      nb_Str *x = a.u.p, *y = b.u.p;
      if ((size_t)x->len + y->len > NB_MAX_STR) return nbS_too_long(vm, "string +", (size_t)x->len + y->len);
      nb_Str *s = nbS_new(NULL, 0);
      s = realloc(s, sizeof(nb_Str) + x->len + y->len + 1);
      if (!s) abort();
      memcpy(s->data, x->data, x->len); memcpy(s->data + x->len, y->data, y->len);
      s->len = x->len + y->len; s->data[s->len] = 0; s->hash = nbS_hash(s->data, s->len);
      *out = nb_strv(s); return NB_OK;
    }
    int c = str_cmp(a.u.p, b.u.p);
    switch (op) {
    case OP_LT: *out = nb_bool(c < 0); return NB_OK;
    case OP_LE: *out = nb_bool(c <= 0); return NB_OK;
    case OP_GT: *out = nb_bool(c > 0); return NB_OK;
    case OP_GE: *out = nb_bool(c >= 0); return NB_OK;
    default: break;
    }
  }
  if (a.t == NB_TLIST && b.t == NB_TLIST && op == OP_ADD) {
    nb_List *x = a.u.p, *y = b.u.p;
    if ((size_t)x->n + (size_t)y->n > NB_MAX_LIST) return nbL_too_long(vm, "list +", (size_t)x->n + (size_t)y->n);
    nb_List *l = nbL_new(x->n + y->n);
    for (int i = 0; i < x->n; i++) { nb_incref(x->items[i]); nbL_push(l, x->items[i]); }
    for (int i = 0; i < y->n; i++) { nb_incref(y->items[i]); nbL_push(l, y->items[i]); }
    *out = nb_obj(NB_TLIST, l); return NB_OK;
  }
  if (a.t == NB_TSTR && b.t != NB_TSTR && op == OP_ADD)
    return nb_error_kind(vm, "TypeError", "cannot add string and %s (use interpolation: \"...{x}\")", nb_typename(b));
  return type_error2(vm, opname(op), a, b);
}

int nbV_truthy(nb_VM *vm, nb_Value v, bool *out) {
  if (v.t == NB_TTENSOR) return nbT_truthy(vm, v, out);
  *out = nb_truthy(v);
  return NB_OK;
}

/* --------------------------------------------------------------- indexing */
static int to_index(nb_VM *vm, nb_Value v, double len, const char *what, long *out) {
  if (v.t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s index must be a number, got %s", what, nb_typename(v));
  double d = v.u.n;
  if (d != floor(d)) return nb_error_kind(vm, "TypeError", "%s index must be an integer, got %g", what, d);
  double k = d < 0 ? d + len : d;
  if (k < 0 || k >= len) {
    char b[40]; nb_fmtnum(b, sizeof b, d);
    return nb_error_kind(vm, "IndexError", "index %s is out of range for %s of length %.0f", b, what, len);
  }
  *out = (long)k;
  return NB_OK;
}

/* Python slice semantics: NaN in the range means "absent". */
/* a slice bound or step as a long: past +-(len + 1) every value acts the same,
** and converting a larger double (1e300) to long is undefined */
static long clamp_bound(double x, long len) {
  double lim = (double)len + 1;
  return x > lim ? len + 1 : x < -lim ? -(len + 1) : (long)x;
}
static int slice_bounds(nb_VM *vm, const nb_Range *r, long len, long *start, long *step, long *count) {
  double st = isnan(r->step) ? 1 : r->step;
  if (st == 0 || st != floor(st)) return nb_error_kind(vm, "ValueError", "slice step must be a non-zero integer");
  long s = clamp_bound(st, len);
  double lo = r->start, hi = r->stop;
  long b, e;
  if (isnan(lo)) b = s > 0 ? 0 : len - 1;
  else { b = clamp_bound(floor(lo), len); if (b < 0) b += len; if (b < 0) b = s > 0 ? 0 : -1; if (b >= len) b = s > 0 ? len : len - 1; }
  if (isnan(hi)) e = s > 0 ? len : -1;
  else { e = clamp_bound(floor(hi), len); if (e < 0) e += len; if (e < 0) e = s > 0 ? 0 : -1; if (e >= len) e = s > 0 ? len : len - 1; }
  long c = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e - s - 1) / (-s) : 0);
  *start = b; *step = s; *count = c;
  return NB_OK;
}

int nbV_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value *out) {
  if (obj.t == NB_TTENSOR) return nbT_index(vm, obj, idx, nidx, out);
  if (nidx != 1) return nb_error_kind(vm, "TypeError", "a %s takes one index, got %d", nb_typename(obj), nidx);
  nb_Value i = idx[0];
  long k;
  switch (obj.t) {
  case NB_TLIST: {
    nb_List *l = obj.u.p;
    if (i.t == NB_TRANGE) {
      long b, s, c;
      TRY(slice_bounds(vm, i.u.p, l->n, &b, &s, &c));
      nb_List *r = nbL_new((int)c);
      for (long j = 0; j < c; j++) { nb_Value v = l->items[b + j * s]; nb_incref(v); nbL_push(r, v); }
      *out = nb_obj(NB_TLIST, r); return NB_OK;
    }
    TRY(to_index(vm, i, l->n, "list", &k));
    *out = l->items[k]; nb_incref(*out); return NB_OK;
  }
  case NB_TSTR: {
    nb_Str *s = obj.u.p;
    if (i.t == NB_TRANGE) {
      long b, st, c;
      TRY(slice_bounds(vm, i.u.p, s->len, &b, &st, &c));
      char *tmp = malloc((size_t)c + 1); if (!tmp) abort();
      for (long j = 0; j < c; j++) tmp[j] = s->data[b + j * st];
      *out = nb_strv(nbS_new(tmp, (size_t)c)); free(tmp); return NB_OK;
    }
    TRY(to_index(vm, i, s->len, "string", &k));
    *out = nb_strv(nbS_new(s->data + k, 1)); return NB_OK;
  }
  case NB_TREC: {
    if (i.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "record keys are strings, got %s", nb_typename(i));
    int j = nbR_find(obj.u.p, i.u.p);
    if (j < 0) return nb_error_kind(vm, "KeyError", "record has no field \"%s\"", nb_str(i)->data);
    *out = nb_rec(obj)->vals[j]; nb_incref(*out); return NB_OK;
  }
  case NB_TRANGE: {
    nb_Range *r = obj.u.p;
    TRY(to_index(vm, i, nbG_range_len(r), "range", &k));
    *out = nb_numk(r->start + (double)k * r->step, r->kind); return NB_OK;
  }
  default:
    return nb_error_kind(vm, "TypeError", "a %s cannot be indexed", nb_typename(obj));
  }
}

static int set_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value v) {
  if (obj.t == NB_TTENSOR) return nbT_setindex(vm, obj, idx, nidx, v);
  if (nidx != 1) return nb_error_kind(vm, "TypeError", "a %s takes one index, got %d", nb_typename(obj), nidx);
  long k;
  if (obj.t == NB_TLIST) {
    nb_List *l = obj.u.p;
    if (idx[0].t == NB_TRANGE) return nb_error_kind(vm, "TypeError", "assignment to a list slice is not supported");
    TRY(to_index(vm, idx[0], l->n, "list", &k));
    nb_incref(v); nb_store(&l->items[k], v); return NB_OK;
  }
  if (obj.t == NB_TREC) {
    if (idx[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "record keys are strings, got %s", nb_typename(idx[0]));
    nb_incref(v); nbR_set(obj.u.p, idx[0].u.p, v); return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "a %s does not support item assignment", nb_typename(obj));
}

static int eval_indices(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *idx) {
  for (int i = 0; i < n->nkids; i++) {
    nb_Node *k = n->kids[i];
    int st = NB_OK;
    if (k->kind == N_SLICE) {
      double part[3] = { NAN, NAN, NAN };
      nb_Node *ps[3] = { k->a, k->b, k->c };
      for (int j = 0; j < 3 && !st; j++) if (ps[j]) {
        nb_Value v;
        if ((st = eval(vm, f, ps[j], &v))) break;
        if (v.t == NB_TNIL) continue;
        if (v.t != NB_TNUM) { nb_decref(v); nb_error_kind(vm, "TypeError", "slice bounds must be numbers, got %s", nb_typename(v)); st = fail(vm, f, ps[j]); break; }
        part[j] = v.u.n;
      }
      if (!st) idx[i] = nb_obj(NB_TRANGE, nbG_range(part[0], part[1], part[2]));
    } else st = eval(vm, f, k, &idx[i]);
    if (st) { for (int j = 0; j < i; j++) nb_decref(idx[j]); return st; }
  }
  return NB_OK;
}

static int get_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value *out) {
  if (obj.t == NB_TREC) {
    int i = nbR_find(obj.u.p, name);
    if (i < 0) return nb_error_kind(vm, "KeyError", "record has no field '%s'", name->data);
    *out = nb_rec(obj)->vals[i]; nb_incref(*out); return NB_OK;
  }
  if (obj.t == NB_TMODULE) {
    nb_Module *m = obj.u.p;
    int i = nbM_global_find(m, name->data, name->len);
    if (i < 0 || m->vals[i].t == NB_TUNDEF) return nb_error_kind(vm, "NameError", "module %s has no member '%s'", m->name->data, name->data);
    *out = m->vals[i]; nb_incref(*out); return NB_OK;
  }
  if (obj.t == NB_TTENSOR) return nbT_field(vm, obj, name, out);
  if (obj.t == NB_TSTR && strcmp(name->data, "len") == 0) { *out = nb_int(nb_str(obj)->len); return NB_OK; }
  return nb_error_kind(vm, "TypeError", "a %s has no field '%s'", nb_typename(obj), name->data);
}

static int set_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value v) {
  if (obj.t == NB_TREC) { nb_incref(v); nbR_set(obj.u.p, name, v); return NB_OK; }
  if (obj.t == NB_TTENSOR) return nbT_setfield(vm, obj, name, v);
  if (obj.t == NB_TMODULE) {
    nb_Module *m = obj.u.p;
    int i = nbM_global_slot(m, name);
    nb_incref(v); nb_store(&m->vals[i], v); return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "cannot set field '%s' on a %s", name->data, nb_typename(obj));
}

/* --------------------------------------------------------------- assignment */
/* the spelling of an update operator, for messages */
static const char *update_name(int op) {
  switch (op) {
  case OP_ADD: return "+="; case OP_SUB: return "-="; case OP_MUL: return "*=";
  case OP_DIV: return "/="; case OP_IDIV: return "//="; default: return "update";
  }
}

/* Assignment.  `target op= v` computes target op v and stores it back, except
** where the target holds a tensor: then the tensor itself is updated in place
** (nbT_update), as in PyTorch, so that every alias sees it.  A tensor reached
** by indexing a tensor (x[i] += v) keeps the read-modify-write through x, which
** already writes into x. */
static int eval_assign(nb_VM *vm, nb_Frame *f, nb_Node *n) {
  nb_Node *t = n->a;
  nb_Value v, cur;
  if (t->kind == N_NAME) {
    TRY(eval(vm, f, n->b, &v));
    if (n->op != OP_NONE) {
      int st = load_var(vm, f, t, &cur);
      if (st) { nb_decref(v); return st; }
      if (cur.t == NB_TTENSOR) {
        st = nbT_update(vm, n->op, update_name(n->op), cur, v);
        nb_decref(cur); nb_decref(v);
        return st ? fail(vm, f, n) : NB_OK;
      }
      nb_Value r;
      st = (cur.t == NB_TNUM && v.t == NB_TNUM) ? (r = num_arith(n->op, cur, v), NB_OK) : nbV_binop(vm, n->op, cur, v, &r);
      nb_decref(cur); nb_decref(v);
      if (st) return fail(vm, f, n);
      v = r;
    }
    store_var(f, t, v);
    return NB_OK;
  }
  nb_Value obj;
  TRY(eval(vm, f, t->a, &obj));
  nb_Value idx[8]; int nidx = 0, st;
  if (t->kind == N_INDEX) {
    if (t->nkids > 8) { nb_decref(obj); nb_error_kind(vm, "IndexError", "too many indices (%d)", t->nkids); return fail(vm, f, t); }
    if ((st = eval_indices(vm, f, t, idx))) { nb_decref(obj); return st; }
    nidx = t->nkids;
  }
  if ((st = eval(vm, f, n->b, &v))) goto cleanup;
  if (n->op != OP_NONE) {
    st = t->kind == N_INDEX ? nbV_index(vm, obj, idx, nidx, &cur) : get_field(vm, obj, t->str, &cur);
    if (st) { nb_decref(v); st = fail(vm, f, n); goto cleanup; }
    if (cur.t == NB_TTENSOR && !(t->kind == N_INDEX && obj.t == NB_TTENSOR)) {
      st = nbT_update(vm, n->op, update_name(n->op), cur, v);
      nb_decref(cur); nb_decref(v);
      if (st) st = fail(vm, f, n);
      goto cleanup;
    }
    nb_Value r;
    st = nbV_binop(vm, n->op, cur, v, &r);
    nb_decref(cur); nb_decref(v);
    if (st) { st = fail(vm, f, n); goto cleanup; }
    v = r;
  }
  st = t->kind == N_INDEX ? set_index(vm, obj, idx, nidx, v) : set_field(vm, obj, t->str, v);
  nb_decref(v);
  if (st) st = fail(vm, f, n);
cleanup:
  for (int i = 0; i < nidx; i++) nb_decref(idx[i]);
  nb_decref(obj);
  return st;
}

/* --------------------------------------------------------------- closures */
int nbV_make_closure(nb_VM *vm, nb_Frame *f, nb_Proto *p, nb_Value *out) {
  (void)vm;
  nb_Func *fn = malloc(sizeof(nb_Func) + sizeof(nb_Cell *) * (size_t)p->ncaps);
  if (!fn) abort();
  fn->h.rc = 1; fn->h.type = NB_TFUNC; fn->proto = p; fn->mod = f->mod; fn->ncaps = p->ncaps;
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

/* --------------------------------------------------------------- loops */
static int loop_body(nb_VM *vm, nb_Frame *f, nb_Node *body) {
  nb_Value v;
  int st = eval(vm, f, body, &v);
  if (st == NB_OK) nb_decref(v);
  return st;
}

static int eval_for(nb_VM *vm, nb_Frame *f, nb_Node *n) {
  nb_Node *var = n->c, *it = n->a;
  int st;
  if (it->kind == N_RANGE) {   /* numeric loop without making a range object */
    nb_Value a, b;
    TRY(eval(vm, f, it->a, &a));
    if ((st = eval(vm, f, it->b, &b))) { nb_decref(a); return st; }
    if (a.t != NB_TNUM || b.t != NB_TNUM) {
      nb_error_kind(vm, "TypeError", "range bounds must be numbers, got %s and %s", nb_typename(a), nb_typename(b));
      nb_decref(a); nb_decref(b); return fail(vm, f, it);
    }
    double lo = a.u.n, hi = b.u.n;
    uint32_t kind = a.kind;   /* lo, lo+1, ...: ints unless lo is a float */
    for (double x = lo; x < hi; x += 1) {
      POLL(vm, f, n);
      store_var(f, var, nb_numk(x, kind));
      st = loop_body(vm, f, n->b);
      if (st == NB_BREAK) break;
      if (st == NB_CONTINUE) continue;
      if (st) return st;
    }
    return NB_OK;
  }
  nb_Value seq;
  TRY(eval(vm, f, it, &seq));
  st = NB_OK;
  if (seq.t == NB_TREC && nbR_find_cstr(nb_rec(seq), "__next") >= 0) {
    /* an iterator: a record whose __next(self) returns the next item, or nil
    ** at the end (Lua's rule: nil is never an item) — progress(), lines() */
    nb_Value next = nbR_get_cstr(nb_rec(seq), "__next");
    nb_incref(next);
    for (;;) {
      nb_Value item;
      if (vm->poll && poll_vm(vm)) { st = fail(vm, f, n); break; }
      if ((st = nbV_call(vm, next, &seq, 1, &item))) { st = fail(vm, f, it); break; }
      if (item.t == NB_TNIL) break;
      store_var(f, var, item);
      st = loop_body(vm, f, n->b);
      if (st == NB_BREAK) { st = NB_OK; break; }
      if (st == NB_CONTINUE) { st = NB_OK; continue; }
      if (st) break;
    }
    nb_decref(next);
    nb_decref(seq);
    return st;
  }
  switch (seq.t) {
  case NB_TRANGE: {
    nb_Range *r = seq.u.p;
    double len = nbG_range_len(r);
    for (double k = 0; k < len; k++) {
      if (vm->poll && poll_vm(vm)) { st = fail(vm, f, n); break; }
      store_var(f, var, nb_numk(r->start + k * r->step, r->kind));
      st = loop_body(vm, f, n->b);
      if (st == NB_BREAK) { st = NB_OK; break; }
      if (st == NB_CONTINUE) { st = NB_OK; continue; }
      if (st) break;
    }
    break;
  }
  case NB_TLIST: case NB_TSTR: case NB_TREC: case NB_TTENSOR: {
    for (long k = 0;; k++) {
      nb_Value item;
      if (seq.t == NB_TLIST) { if (k >= nb_list(seq)->n) break; item = nb_list(seq)->items[k]; nb_incref(item); }
      else if (seq.t == NB_TSTR) { if (k >= (long)nb_str(seq)->len) break; item = nb_strv(nbS_new(nb_str(seq)->data + k, 1)); }
      else if (seq.t == NB_TREC) { if (k >= nb_rec(seq)->n) break; item = nb_strv(nb_rec(seq)->keys[k]); nb_incref(item); }
      else {
        double len;
        if ((st = nbT_len(vm, seq, &len))) { st = fail(vm, f, it); break; }
        if (k >= (long)len) break;
        nb_Value kv = nb_int((double)k);
        if ((st = nbT_index(vm, seq, &kv, 1, &item))) { st = fail(vm, f, it); break; }
      }
      if (vm->poll && poll_vm(vm)) { nb_decref(item); st = fail(vm, f, n); break; }
      store_var(f, var, item);
      st = loop_body(vm, f, n->b);
      if (st == NB_BREAK) { st = NB_OK; break; }
      if (st == NB_CONTINUE) { st = NB_OK; continue; }
      if (st) break;
    }
    break;
  }
  default:
    nb_error_kind(vm, "TypeError", "cannot iterate over a %s", nb_typename(seq));
    st = fail(vm, f, it);
  }
  nb_decref(seq);
  return st;
}

/* --------------------------------------------------------------- blocks */
static int eval_block(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  nb_Value v = nb_nil();
  for (int i = 0; i < n->nkids; i++) {
    nb_decref(v); v = nb_nil();
    nb_Node *s = n->kids[i];
    int st = eval(vm, f, s, &v);
    if (st) return st;
    if (!(s->flags & NF_EXPRSTMT) && s->kind != N_IF && s->kind != N_TRY) { nb_decref(v); v = nb_nil(); }
  }
  *out = v;
  return NB_OK;
}

static int eval_list(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  nb_List *l = nbL_new(n->nkids);
  bool numeric = n->nkids > 0, nested = n->nkids > 0;
  for (int i = 0; i < n->nkids; i++) {
    nb_Value v;
    int st = eval(vm, f, n->kids[i], &v);
    if (st) { nb_decref(nb_obj(NB_TLIST, l)); return st; }
    if (v.t != NB_TNUM && v.t != NB_TBOOL) numeric = false;
    if (!(v.t == NB_TTENSOR && n->kids[i]->kind == N_LIST)) nested = false;
    nbL_push(l, v);
  }
  nb_Value lv = nb_obj(NB_TLIST, l);
  if (numeric || nested) {
    int st = nbT_literal(vm, lv, out);
    nb_decref(lv);
    return st ? fail(vm, f, n) : NB_OK;
  }
  *out = lv;
  return NB_OK;
}

/* --------------------------------------------------------------- eval
** The hot node kinds are handled in eval() itself, which keeps a small stack
** frame; the rest go to eval_cold().  Leaves (numbers, locals) are evaluated
** inline by EVAL so the common `n - 1` does not recurse at all. */
static int eval_cold(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) __attribute__((noinline));

/* An arithmetic result's tag (t and kind) is written as one 8-byte word: an
** assignment or a call that reads the value whole right after would stall
** on a tag written as two 4-byte halves (loop.nbl: 14% slower).  Operand
** kinds are read as 32-bit fields, which forward from any store. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tag word puts t in its low half");
static inline void put_num(nb_Value *out, uint64_t tag, double x) { memcpy(out, &tag, sizeof tag); out->u.n = x; }
/* a number literal: the parser put its kind in idx (measured: storing it
** as fields is as fast here as a prebuilt tag word) */
#define NUM_LIT(n, out) (*(out) = nb_numk((n)->num, (uint32_t)(n)->idx))

static inline int eval_leaf(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  if (n->kind == N_NUM) { NUM_LIT(n, out); return NB_OK; }
  if (n->kind == N_NAME && n->vkind == V_LOCAL) {
    nb_Value v = f->locals[n->idx];
    if (__builtin_expect(v.t != NB_TUNDEF, 1)) { nb_incref(v); *out = v; return NB_OK; }
  }
  return eval(vm, f, n, out);
}
#define EVAL(n, out) eval_leaf(vm, f, (n), (out))

static int eval(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  int st;
  switch ((nb_NodeKind)n->kind) {
  case N_NUM: NUM_LIT(n, out); return NB_OK;
  case N_NAME: return load_var(vm, f, n, out);
  case N_BINARY: {
    nb_Value a, b;
    TRY(EVAL(n->a, &a));
    if ((st = EVAL(n->b, &b))) { nb_decref(a); return st; }
    if (a.t == NB_TNUM && b.t == NB_TNUM) {
      double x = a.u.n, y = b.u.n;
      /* the result's tag: NB_TNUM, a float when either is (see num_arith) */
#define TAG ((uint64_t)NB_TNUM | (uint64_t)(a.kind | b.kind) << 32)
      switch (n->op) {
      case OP_ADD: put_num(out, TAG, x + y); return NB_OK;
      case OP_SUB: put_num(out, TAG, x - y); return NB_OK;
      case OP_MUL: put_num(out, TAG, x * y); return NB_OK;
      case OP_DIV: *out = nb_flt(x / y); return NB_OK;
      case OP_LT: *out = nb_bool(x < y); return NB_OK;
      case OP_LE: *out = nb_bool(x <= y); return NB_OK;
      case OP_GT: *out = nb_bool(x > y); return NB_OK;
      case OP_GE: *out = nb_bool(x >= y); return NB_OK;
      case OP_EQ: *out = nb_bool(x == y); return NB_OK;
      case OP_NE: *out = nb_bool(x != y); return NB_OK;
      default: break;
      }
#undef TAG
    }
    st = nbV_binop(vm, n->op, a, b, out);
    nb_decref(a); nb_decref(b);
    return st ? fail(vm, f, n) : NB_OK;
  }
  case N_CALL: return eval_call(vm, f, n, out);
  case N_IF: {
    nb_Value c; bool t;
    TRY(EVAL(n->a, &c));
    if (c.t == NB_TBOOL) t = c.u.b;
    else {
      st = nbV_truthy(vm, c, &t);
      nb_decref(c);
      if (st) return fail(vm, f, n->a);
    }
    if (t) return eval(vm, f, n->b, out);
    if (n->c) return eval(vm, f, n->c, out);
    *out = nb_nil(); return NB_OK;
  }
  case N_BLOCK:
    if (n->nkids == 1 && ((n->kids[0]->flags & NF_EXPRSTMT) || n->kids[0]->kind == N_IF)) return eval(vm, f, n->kids[0], out);
    return eval_block(vm, f, n, out);
  case N_ASSIGN:
    if (n->a->kind == N_NAME && n->op == OP_NONE && n->b->kind != N_FN) {
      nb_Value v;
      TRY(EVAL(n->b, &v));
      store_var(f, n->a, v);
      *out = nb_nil();
      return NB_OK;
    }
    return eval_cold(vm, f, n, out);
  case N_RETURN:
    *out = nb_nil();
    if (n->a) TRY(EVAL(n->a, &vm->ret)); else vm->ret = nb_nil();
    return NB_RETURN;
  default:
    return eval_cold(vm, f, n, out);
  }
}

static int eval_cold(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  int st;
  switch (n->kind) {
  case N_ASSIGN:
    if (n->b->kind == N_FN && n->a->kind == N_NAME && n->op == OP_NONE) {   /* fn name(...) */
      TRY(nbV_make_closure(vm, f, n->b->proto, out));
      store_var(f, n->a, *out); *out = nb_nil();
      return NB_OK;
    }
    *out = nb_nil();
    return eval_assign(vm, f, n);
  case N_STR: *out = nb_strv(n->str); n->str->h.rc++; return NB_OK;
  case N_NIL: *out = nb_nil(); return NB_OK;
  case N_TRUE: *out = nb_bool(true); return NB_OK;
  case N_FALSE: *out = nb_bool(false); return NB_OK;
  case N_INTERP: {
    nb_Buf b = {0};
    for (int i = 0; i < n->nkids; i++) {
      nb_Node *k = n->kids[i];
      if (k->kind == N_STR) { nbB_add(&b, k->str->data, k->str->len); continue; }
      nb_Value v;
      if ((st = eval(vm, f, k, &v))) { nbB_free(&b); return st; }
      nb_tostring(&b, v, false);
      nb_decref(v);
      if (b.n > NB_MAX_STR) break;
    }
    st = nbS_from_buf(vm, "string interpolation", &b, out);
    nbB_free(&b);
    return st ? fail(vm, f, n) : NB_OK;
  }
  case N_LIST: return eval_list(vm, f, n, out);
  case N_REC: {
    nb_Rec *r = nbR_new(n->nkids);
    for (int i = 0; i < n->nkids; i++) {
      nb_Value v;
      if ((st = eval(vm, f, n->kids[i], &v))) { nb_decref(nb_obj(NB_TREC, r)); return st; }
      nbR_set(r, n->names[i], v);
    }
    *out = nb_obj(NB_TREC, r);
    return NB_OK;
  }
  case N_NEG: {
    nb_Value a;
    TRY(eval(vm, f, n->a, &a));
    if (a.t == NB_TNUM) { *out = nb_numk(-a.u.n, a.kind); return NB_OK; }
    if (a.t == NB_TTENSOR) { st = nbT_neg(vm, a, out); nb_decref(a); return st ? fail(vm, f, n) : NB_OK; }
    nb_error_kind(vm, "TypeError", "cannot negate a %s", nb_typename(a));
    nb_decref(a);
    return fail(vm, f, n);
  }
  case N_NOT: {
    nb_Value a; bool t;
    TRY(eval(vm, f, n->a, &a));
    st = nbV_truthy(vm, a, &t); nb_decref(a);
    if (st) return fail(vm, f, n);
    *out = nb_bool(!t); return NB_OK;
  }
  case N_AND: case N_OR: {
    nb_Value a; bool t;
    TRY(eval(vm, f, n->a, &a));
    if ((st = nbV_truthy(vm, a, &t))) { nb_decref(a); return fail(vm, f, n->a); }
    if ((n->kind == N_AND) != t) { *out = a; return NB_OK; }
    nb_decref(a);
    return eval(vm, f, n->b, out);
  }
  case N_RANGE: {
    nb_Value a, b;
    TRY(eval(vm, f, n->a, &a));
    if ((st = eval(vm, f, n->b, &b))) { nb_decref(a); return st; }
    if (a.t != NB_TNUM || b.t != NB_TNUM) {
      nb_error_kind(vm, "TypeError", "range bounds must be numbers, got %s and %s", nb_typename(a), nb_typename(b));
      nb_decref(a); nb_decref(b); return fail(vm, f, n);
    }
    *out = nb_obj(NB_TRANGE, nbG_range_k(a.u.n, b.u.n, 1, a.kind, b.kind));
    return NB_OK;
  }
  case N_METHOD: return eval_method(vm, f, n, out);
  case N_INDEX: {
    nb_Value obj, idx[8];
    TRY(eval(vm, f, n->a, &obj));
    if (n->nkids > 8) { nb_decref(obj); nb_error_kind(vm, "IndexError", "too many indices (%d)", n->nkids); return fail(vm, f, n); }
    if ((st = eval_indices(vm, f, n, idx))) { nb_decref(obj); return st; }
    st = nbV_index(vm, obj, idx, n->nkids, out);
    for (int i = 0; i < n->nkids; i++) nb_decref(idx[i]);
    nb_decref(obj);
    return st ? fail(vm, f, n) : NB_OK;
  }
  case N_SLICE:
    nb_error_kind(vm, "SyntaxError", "a slice (a:b) is only allowed inside [ ]");
    return fail(vm, f, n);
  case N_FIELD: {
    nb_Value obj;
    TRY(eval(vm, f, n->a, &obj));
    st = get_field(vm, obj, n->str, out);
    nb_decref(obj);
    return st ? fail(vm, f, n) : NB_OK;
  }
  case N_FN: return nbV_make_closure(vm, f, n->proto, out);
  case N_WHILE: {
    *out = nb_nil();
    for (;;) {
      POLL(vm, f, n);
      nb_Value c; bool t;
      TRY(eval(vm, f, n->a, &c));
      st = nbV_truthy(vm, c, &t); nb_decref(c);
      if (st) return fail(vm, f, n->a);
      if (!t) break;
      st = loop_body(vm, f, n->b);
      if (st == NB_BREAK) break;
      if (st == NB_CONTINUE) continue;
      if (st) return st;
    }
    return NB_OK;
  }
  case N_FOR: *out = nb_nil(); return eval_for(vm, f, n);
  case N_BREAK: *out = nb_nil(); return NB_BREAK;
  case N_CONTINUE: *out = nb_nil(); return NB_CONTINUE;
  case N_RETURN:
    *out = nb_nil();
    if (n->a) TRY(eval(vm, f, n->a, &vm->ret)); else vm->ret = nb_nil();
    return NB_RETURN;
  case N_TRY: {
    int depth = vm->depth;
    nb_Value *sp = vm->sp;
    st = eval(vm, f, n->a, out);
    if (st != NB_ERR || !nbE_catchable(vm)) return st;
    vm->depth = depth; vm->sp = sp; vm->frame = f;
    nb_Value e = vm->err; vm->err = nb_nil(); vm->err_located = false;
    if (n->c) store_var(f, n->c, e); else nb_decref(e);
    return eval(vm, f, n->b, out);
  }
  case N_IMPORT: {
    nb_Value m;
    *out = nb_nil();
    if (nbM_import(vm, n->str, &m)) return fail(vm, f, n);
    store_var(f, n->a, m);
    return NB_OK;
  }
  case N_GLOBAL: *out = nb_nil(); return NB_OK;
  case N_NOGRAD: {
    /* a value: `fn predict(x) = no_grad { model(x) }`.  The previous mode
    ** comes back on every way out (errors, return, break are return codes),
    ** also when the block runs with grad already off (checkpoint). */
    vm->grad_disabled++;
    bool prev = nbT_swap_grad_enabled(false);
    st = eval(vm, f, n->a, out);
    vm->grad_disabled--;
    nbT_swap_grad_enabled(prev);
    return st;
  }
  case N_AUTOCAST: {
    /* autocast("bf16") { ... }: mixed precision for the block (a value too) */
    nb_Value arg;
    int dt;
    *out = nb_nil();
    TRY(eval(vm, f, n->a, &arg));
    st = nbT_autocast_arg(vm, arg, &dt);
    nb_decref(arg);
    if (st) return fail(vm, f, n->a);
    int prev = nbT_swap_autocast(dt);
    st = eval(vm, f, n->b, out);
    nbT_swap_autocast(prev);
    return st;
  }
  }
  nb_error(vm, "internal error: unknown node kind %d", n->kind);
  return fail(vm, f, n);
}

/* --------------------------------------------------------------- programs */
int nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags) {
  nb_Frame top = { NULL, chunk, NULL, mod, NULL, NULL };
  nb_Frame *saved = vm->frame;
  vm->frame = &top;
  int st = NB_OK;
  for (int i = 0; i < prog->nkids; i++) {
    nb_Node *s = prog->kids[i];
    nb_Value v = nb_nil();
    st = eval(vm, &top, s, &v);
    if (st) break;
    bool show = (s->flags & NF_EXPRSTMT) || s->kind == N_IF || s->kind == N_TRY;
    if (show && v.t != NB_TNIL) {
      if ((flags & NB_ECHO_LAST) && i == prog->nkids - 1) nbW_show(vm, v, true, NULL, false);
      else if (flags & NB_ECHO) nbW_display(vm, v);
    }
    nb_decref(v);
  }
  vm->frame = saved;
  return st;
}
