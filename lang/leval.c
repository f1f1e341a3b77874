/*
** leval.c — the evaluator: a compact walker over the resolved syntax tree
** (expressions, statements, loops, blocks, programs).  Calls are in lcall.c,
** operators and indexing on values in lops.c.
**
** The status protocol.  Every eval returns a status (NB_OK, NB_ERR, NB_BREAK,
** NB_CONTINUE, NB_RETURN) and writes its value, a new reference, to *out.
** Control flow is these return codes, never longjmp: each C frame on the way
** out drops what it holds, so an error, a `return` or a `break` leaks nothing
** and needs no unwinding machinery.  NB_RETURN carries its value in vm->ret
** (call_func takes it); NB_BREAK/NB_CONTINUE stop at the nearest loop (the
** resolver rejects them outside one).  Only NB_OK leaves a value in *out.
**
** References.  Operands are evaluated into locals, used, then dropped;
** helpers (nbV_binop, nbV_index, ...) borrow their operands and return new
** references.  A value stored into a variable or a container moves its
** reference there (nb_store), so `x = f()` costs no count traffic.
**
** Variables.  The resolver turned names into places: V_LOCAL a slot of the
** frame's window of vm->stack, V_CELL a slot holding an nb_Cell (a local that
** a closure captured), V_CAP the function's own capture list, V_GLOBAL the
** module's value array.  Nothing is looked up by name at run time.
**
** Errors carry a location.  nb_error* builds the error value; the first node
** that sees NB_ERR come up calls fail(), which points the error at itself
** unless a deeper node already did (vm->err_located), so the caret lands on
** the innermost expression that failed.  call_func adds a stack-trace entry
** per user-function frame on the way out.
**
** Poll points.  Loop iterations and calls test vm->poll, one flag that stands
** for "something needs the evaluator's attention": an interrupt, a cycle
** collection due, or a step limit.  Collection runs only there, where every
** live value is held by a counted reference.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lopcodes.h"

#define TRY(x) do { int st_ = (x); if (st_) return st_; } while (0)

static int eval(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out);
static inline int eval_leaf(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out);

/* An error raised while evaluating n: point at n unless a deeper node already
** did.  Returns NB_ERR so callers can write `return fail(vm, f, n)`. */
static int fail(nb_VM *vm, nb_Frame *f, const nb_Node *n) {
  if (!vm->err_located) nbE_locate(vm, f->chunk, n);
  return NB_ERR;
}

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
  if (nbO_gc_due()) {
    vm->poll = vm->step_limit != 0;
    if (vm->interrupted) vm->poll = 1;   /* a signal between the test and the store */
    nbO_collect();
  }
  if (vm->step_limit && ++vm->steps > vm->step_limit) return nb_error_kind(vm, "StepLimit", "step limit exceeded");
  return NB_OK;
}
#define POLL(vm, f, n) do { if (__builtin_expect((vm)->poll, 0) && nbV_poll(vm)) return fail(vm, f, n); } while (0)

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
    /* An unassigned global slot falls back to the builtin of that name
    ** (bidx, found by the resolver).  A program's own definition, in this
    ** line or a later one, fills the slot and so shadows the builtin. */
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
    if (v.t != NB_TLIST && nbV_spread_list(vm, &v)) {
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
  if (__builtin_expect(vm->poll, 0) && nbV_poll(vm)) { nb_decref(callee); return fail(vm, f, n); }
  nb_Value *base = vm->sp;
  int npos;
  int st = push_args(vm, f, n, base, &npos);
  if (st) { nb_decref(callee); return st; }
  st = nbV_call_at(vm, f, n, callee, base, npos, n->names ? n->names + n->npos : NULL, n->nkids - n->npos, out);
  nb_decref(callee);
  return st ? fail(vm, f, n) : NB_OK;
}

/* a.f(args): a field f of a record or member of a module is called as is;
** otherwise f is looked up like a variable and called as f(a, args). */
static int eval_method(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) {
  nb_Value recv, callee;
  TRY(eval(vm, f, n->a, &recv));
  if (__builtin_expect(vm->poll, 0) && nbV_poll(vm)) { nb_decref(recv); return fail(vm, f, n); }
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
  st = nbV_call_at(vm, f, n, callee, base, npos + self, n->names ? n->names + n->npos : NULL, n->nkids - n->npos, out);
  nb_decref(callee);
  return st ? fail(vm, f, n) : NB_OK;
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
      st = (cur.t == NB_TNUM && v.t == NB_TNUM) ? (r = nbV_num_arith(n->op, cur, v), NB_OK) : nbV_binop(vm, n->op, cur, v, &r);
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
    st = t->kind == N_INDEX ? nbV_index(vm, obj, idx, nidx, &cur) : nbV_get_field(vm, obj, t->str, &cur);
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
  st = t->kind == N_INDEX ? nbV_set_index(vm, obj, idx, nidx, v) : nbV_set_field(vm, obj, t->str, v);
  nb_decref(v);
  if (st) st = fail(vm, f, n);
cleanup:
  for (int i = 0; i < nidx; i++) nb_decref(idx[i]);
  nb_decref(obj);
  return st;
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
      if (vm->poll && nbV_poll(vm)) { st = fail(vm, f, n); break; }
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
      if (vm->poll && nbV_poll(vm)) { st = fail(vm, f, n); break; }
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
      if (vm->poll && nbV_poll(vm)) { nb_decref(item); st = fail(vm, f, n); break; }
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
/* A block's value is its last statement's, when that is an expression (or an
** if/try, which are expressions too): `fn f(x) { y = x * 2; y + 1 }`.  Other
** statements (assignments, loops) give nil. */
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
      /* the result's tag: NB_TNUM, a float when either is (see nbV_num_arith) */
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

/* for lcall.c: a function's defaults and body (a sibling call: no extra frame) */
int nbV_eval(nb_VM *vm, nb_Frame *f, nb_Node *n, nb_Value *out) { return eval(vm, f, n, out); }

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
    st = nbV_get_field(vm, obj, n->str, out);
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
    /* The error came back through every C frame in between, and each put back
    ** what it changed; a builtin that failed half-way through calling back into
    ** nabla code may not have, so the handler starts from the state saved
    ** here.  Interrupts and step limits are not catchable (nbE_catchable). */
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
/* Runs a resolved chunk at the top level of mod.  Each REPL line, Jupyter
** cell or imported file is one chunk; the top-level frame has no locals (top-
** level names are the module's globals), so nothing of it needs to outlive
** the chunk.  The frame is saved and restored because an import runs a
** chunk while another is running.  Echo: NB_ECHO shows every top-level
** expression's value (the REPL), NB_ECHO_LAST only the last one's, as the
** cell's result (Jupyter's execute_result). */
int nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags) {
  nb_Frame top = { NULL, chunk, NULL, mod, NULL, NULL };
  nb_Frame *saved = vm->frame;
  vm->frame = &top;
  int st = NB_OK;
  for (int i = 0; i < prog->nkids; i++) {
    nb_Node *s = prog->kids[i];
    nb_Value v = nb_nil();
    /* each top-level statement runs on the VM when the compiler supports
    ** all of it (lcode.c), else on this walker */
    nb_Code *code = NULL;
    if (nbI_enabled()) {
      const char *why = NULL;
      code = nbI_compile_stmt(vm, chunk, s, &why);
      if (code) nbI_count_compiled(); else nbI_count_fallback(why);
    }
    if (code) { st = nbI_exec(vm, &top, code, vm->sp, &v); nbI_code_free(code); }
    else st = eval(vm, &top, s, &v);
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
