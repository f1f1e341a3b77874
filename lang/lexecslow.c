/*
** lexecslow.c — the VM's out-of-line work: what an instruction does past
** the fast case that lexec.c's loop runs inline.  Unassigned variables and
** globals that fall back to builtins; operators on anything but two numbers
** (lops.c does the work); `x op= v`; list, record and string literals;
** indexing, fields and slices past the inline cases; ranges; the block
** stack of try/no_grad/autocast; the argument lists of f(*xs).  Kept out of
** the loop's file so that the loop stays small (and its hot paths are what
** the compiler optimises); none of these runs on fib's or a numeric loop's
** path.  The register conventions are lopcodes.h's.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lexec.h"

int nbI_undefined(nb_VM *vm, const nb_Node *n, bool global) {
  if (global) return nb_error_kind(vm, "NameError", "undefined variable '%s'", n->str->data);
  return nb_error_kind(vm, "NameError", "variable '%s' is used before it is assigned", n->str->data);
}

int nbI_get_global_slow(nb_VM *vm, const nb_Node *n, nb_Value *out) {
  if (n->bidx >= 0) {   /* an unassigned global falls back to the builtin (as load_var) */
    const nb_Builtin *b = nbC_at(n->bidx);
    if (!b->fn) {
      if (b->value) return b->value(vm, out);
      *out = nb_flt(strtod(b->params, NULL)); return NB_OK;
    }
    *out = nb_builtinv(b); return NB_OK;
  }
  return nbI_undefined(vm, n, true);
}

int nbI_get_global_into(nb_VM *vm, const nb_Node *n, nb_Value *dst) {
  nb_Value v;
  int st = nbI_get_global_slow(vm, n, &v);
  if (!st) nb_store(dst, v);
  return st;
}

/* an operator's result into R[dst]; written into a named local it is stored,
** so a lazy tensor is settled (ltvalue.h) */
static int put_result(nb_VM *vm, nb_Value *R, int nlocals, int dst, nb_Value r) {
  nb_store(&R[dst], r);
  return dst < nlocals && r.t == NB_TTENSOR ? nbT_settle(vm, r) : NB_OK;
}

/* a binary operator on anything but two numbers; operands read in place
** from a local may be unassigned (reported in order: a, then b) */
int nbI_binop_slow(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int op, int a, int b, int dst) {
  if (R[a].t == NB_TUNDEF) { int st = nbI_undefined(vm, n->a, false); nbE_locate(vm, vm->frame->chunk, n->a); return st; }
  if (R[b].t == NB_TUNDEF) { int st = nbI_undefined(vm, n->b, false); nbE_locate(vm, vm->frame->chunk, n->b); return st; }
  nb_Value r;
  int st;
  if (R[a].t == NB_TNUM && R[b].t == NB_TNUM && (op == OP_MOD || op == OP_POW || op == OP_IDIV)) { r = nbV_num_arith(op, R[a], R[b]); st = NB_OK; }
  else st = nbV_binop(vm, op, R[a], R[b], &r);
  drop(R, a, nlocals);
  if (b != a) drop(R, b, nlocals);
  if (st && n->c) nbE_locate(vm, vm->frame->chunk, n->c);   /* a bitwise operator's error: at the operator */
  if (st) return st;
  return put_result(vm, R, nlocals, dst, r);   /* y = x * 2 + 1: stored */
}

static int kop(int bc) {
  static const int ops[] = { OP_ADD, OP_SUB, OP_MUL, OP_DIV,
                             OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,   /* EQKJ .. GEKJ */
                             OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };
  return ops[bc - BC_ADDK];
}
/* R[a] op K, not two numbers (bc: the instruction, ADDK .. GEK) */
int nbI_binop_k(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int bc, int a, nb_Value k, int dst) {
  int op = kop(bc);
  if (R[a].t == NB_TUNDEF) { int st = nbI_undefined(vm, n->a, false); nbE_locate(vm, vm->frame->chunk, n->a); return st; }
  nb_Value r;
  int st = nbV_binop(vm, op, R[a], k, &r);
  drop(R, a, nlocals);
  if (st) return st;
  return put_result(vm, R, nlocals, dst, r);
}

static const char *update_name(int op) {
  switch (op) {
  case OP_ADD: return "+="; case OP_SUB: return "-="; case OP_MUL: return "*=";
  case OP_DIV: return "/="; case OP_IDIV: return "//="; case OP_BAND: return "&="; case OP_BOR: return "|=";
  case OP_BXOR: return "^="; case OP_SHL: return "<<="; case OP_SHR: return ">>="; default: return "update";
  }
}

/* R[a] op= R[b] for `x op= v`: a tensor is updated in place (nbT_update).
** R[a] is the variable itself when it is a local (else a temporary that the
** next instruction stores back); R[b] may be a local read in place.  Either
** local may be unassigned: the error names it, the value's first (the
** language evaluates the value before it reads the target). */
int nbI_update(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int a, int b) {
  int st;
  if (R[b].t == NB_TUNDEF && b < nlocals) { st = nbI_undefined(vm, n->b, false); nbE_locate(vm, vm->frame->chunk, n->b); return st; }
  if (R[a].t == NB_TUNDEF && a < nlocals) { st = nbI_undefined(vm, n->a, false); nbE_locate(vm, vm->frame->chunk, n->a); drop(R, b, nlocals); return st; }
  nb_Value cur = R[a], v = R[b];
  if (b >= nlocals) R[b] = nb_nil(); else nb_incref(v);   /* v: our reference either way */
  if (n->op >= OP_BAND) { nb_Value r; st = nbV_bitop(vm, n->op, cur, v, &r); if (!st) nb_store(&R[a], r); }
  else if (cur.t == NB_TTENSOR) {
    st = nbT_update(vm, n->op, update_name(n->op), cur, v);
    if (!st && a < nlocals) st = nbT_settle(vm, cur);   /* a variable's value: computed, as SETL would */
  }
  else if (cur.t == NB_TNUM && v.t == NB_TNUM) { R[a] = nbV_num_arith(n->op, cur, v); st = NB_OK; }
  else { nb_Value r; st = nbV_binop(vm, n->op, cur, v, &r); if (!st) { nb_store(&R[a], r); if (r.t == NB_TTENSOR) st = nbT_settle(vm, r); } }
  nb_decref(v);
  return st;
}

/* Literals from their items (moved out of items[], which holds nil after):
** the registers after the literal's, or a list's items for a long one. */
/* whether a NF_RAWLIST literal stays a list: its callee is the builtin tensor */
static bool stays_raw(const nb_Node *n, const nb_Value *R) {
  if (!(n->flags & NF_RAWLIST) || !R) return false;
  nb_Value f = R[n->bidx];
  return f.t == NB_TBUILTIN && strcmp(f.u.bi->name, "tensor") == 0;
}

static int make_list(nb_VM *vm, const nb_Node *n, nb_Value *items, const nb_Value *R, nb_Value *out) {
  nb_List *l = nbL_new(n->nkids);
  bool numeric = n->nkids > 0, nested = n->nkids > 0;
  for (int i = 0; i < n->nkids; i++) {
    nb_Value v = items[i]; items[i] = nb_nil();
    if (v.t != NB_TNUM && v.t != NB_TBOOL) numeric = false;
    if (!(v.t == NB_TTENSOR && n->kids[i]->kind == N_LIST)) nested = false;
    nbL_push(l, v);
  }
  nb_Value lv = nb_obj(NB_TLIST, l);
  if ((numeric || nested) && !stays_raw(n, R)) {   /* [1, 2], [[1, 2], [3, 4]]: a tensor */
    nb_Value t;
    int st = nbT_literal(vm, lv, &t);
    nb_decref(lv);
    if (st) return st;
    lv = t;
  }
  *out = lv;
  return NB_OK;
}

static void make_rec(const nb_Node *n, nb_Value *items, nb_Value *out) {
  nb_Rec *r = nbR_new(n->nkids);
  for (int i = 0; i < n->nkids; i++) { nbR_set(r, n->names[i], items[i]); items[i] = nb_nil(); }
  *out = nb_obj(NB_TREC, r);
}

/* a string interpolation; items: the values of its non-literal parts, or
** (dense) one slot per part */
static int interp(nb_VM *vm, const nb_Node *n, nb_Value *items, bool dense, nb_Value *out) {
  nb_Buf b = NB_BUF_CHECKED;
  int j = 0;
  for (int i = 0; i < n->nkids; i++) {
    nb_Node *k = n->kids[i];
    if (k->kind == N_STR) { nbB_add(&b, k->str->data, k->str->len); if (dense) j++; continue; }
    nb_Value v = items[j]; items[j++] = nb_nil();
    if (b.n <= NB_MAX_STR) nb_tostring(&b, v, false);
    nb_decref(v);
  }
  int st = nbS_from_buf(vm, "string interpolation", &b, out);
  nbB_free(&b);
  return st;
}

static int literal(nb_VM *vm, const nb_Node *n, nb_Value *items, bool dense, const nb_Value *R, nb_Value *out) {
  switch (n->kind) {
  case N_LIST: return make_list(vm, n, items, R, out);
  case N_REC: make_rec(n, items, out); return NB_OK;
  default: return interp(vm, n, items, dense, out);
  }
}
/* a literal's items are stored in it: lazy tensors among them are settled */
static int settle_items(nb_VM *vm, const nb_Node *n, const nb_Value *items, int count) {
  if (n->kind == N_LIST || n->kind == N_REC)
    for (int i = 0; i < count; i++)
      if (items[i].t == NB_TTENSOR && nbT_settle(vm, items[i])) return NB_ERR;
  return NB_OK;
}
int nbI_literal_regs(nb_VM *vm, const nb_Node *n, nb_Value *R, int a) {
  nb_Value v;
  if (settle_items(vm, n, &R[a + 1], n->nkids)) return NB_ERR;
  int st = literal(vm, n, &R[a + 1], true, R, &v);
  if (!st) nb_store(&R[a], v);
  return st;
}
/* LITEND: the list R[a] of a long literal's items */
int nbI_literal_list(nb_VM *vm, const nb_Node *n, nb_Value *R, int a) {
  if (settle_items(vm, n, nb_list(R[a])->items, nb_list(R[a])->n)) return NB_ERR;
  nb_Value lv = R[a], v;
  R[a] = nb_nil();
  nb_List *l = nb_list(lv);
  int st = literal(vm, n, l->items, false, R, &v);
  l->n = 0;   /* its items were moved out */
  nb_decref(lv);
  if (!st) nb_store(&R[a], v);
  return st;
}

/* FAIL: the errors the language raises when such code runs */
int nbI_fail_op(nb_VM *vm, const nb_Node *n, nb_Value *R, int a) {
  if (n->kind == N_INDEX) { clear_regs(R, a, a + 1); return nb_error_kind(vm, "IndexError", "too many indices (%d)", n->nkids); }
  return nb_error_kind(vm, "SyntaxError", "a slice (a:b) is only allowed inside [ ]");
}

int nbI_make_range(nb_VM *vm, nb_Value *R, int dst, int b) {
  nb_Value x = R[b], y = R[b + 1];
  if (x.t != NB_TNUM || y.t != NB_TNUM) {
    nb_error_kind(vm, "TypeError", "range bounds must be numbers, got %s and %s", nb_typename(x), nb_typename(y));
    clear_regs(R, b, b + 2);
    return NB_ERR;
  }
  nb_store(&R[dst], nb_obj(NB_TRANGE, nbG_range_k(x.u.n, y.u.n, 1, x.kind, y.kind)));
  return NB_OK;
}

int nbI_get_index(nb_VM *vm, const nb_Node *n, nb_Value *R, int dst, int b) {
  nb_Value r;
  int st = nbV_index(vm, R[b], &R[b + 1], n->nkids, &r);
  clear_regs(R, b, b + 1 + n->nkids);
  if (!st) nb_store(&R[dst], r);
  return st;
}

/* GETIL/SETIL/GETIT/SETIT past the inline list case: R[o] (the object) and R[k] (the
** one index) are each a local read in place or a temporary, consumed here;
** either local may be unassigned (the object's error first, as its read
** came first) */
static int index1_undef(nb_VM *vm, const nb_Node *t, const nb_Value *R, int nlocals, int o, int k) {
  const nb_Node *at = R[o].t == NB_TUNDEF ? t->a : k < nlocals && R[k].t == NB_TUNDEF ? t->kids[0] : NULL;
  if (!at) return NB_OK;
  int st = nbI_undefined(vm, at, false);
  nbE_locate(vm, vm->frame->chunk, at);
  return st;
}
int nbI_get_index1(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int dst, int o, int k) {
  nb_Value r;
  int st = index1_undef(vm, n, R, nlocals, o, k);
  if (!st) st = nbV_index(vm, R[o], &R[k], 1, &r);
  drop(R, k, nlocals);
  drop(R, o, nlocals);
  if (!st) nb_store(&R[dst], r);
  return st;
}
int nbI_set_index1(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int o, int k, int v) {
  int st = index1_undef(vm, n->a, R, nlocals, o, k);
  if (!st) st = nbV_set_index(vm, R[o], &R[k], 1, R[v]);
  drop(R, k, nlocals);
  drop(R, o, nlocals);
  clear_regs(R, v, v + 1);
  return st;
}
/* SETILK: the value a constant (borrowed) */
int nbI_set_index1k(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int o, int k, nb_Value v) {
  int st = index1_undef(vm, n->a, R, nlocals, o, k);
  if (!st) st = nbV_set_index(vm, R[o], &R[k], 1, v);
  drop(R, k, nlocals);
  return st;
}
int nbI_set_index(nb_VM *vm, const nb_Node *n, nb_Value *R, int a, int b) {
  int st = nbV_set_index(vm, R[a], &R[a + 1], n->a->nkids, R[b]);
  clear_regs(R, a, a + 1 + n->a->nkids);
  clear_regs(R, b, b + 1);
  return st;
}

/* the slow paths of GETF/SETF (not a record, a missing field); b may be a
** local read in place (unassigned: the local's error) */
int nbI_get_field(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int dst, int b) {
  if (R[b].t == NB_TUNDEF) { int st = nbI_undefined(vm, n->a, false); nbE_locate(vm, vm->frame->chunk, n->a); return st; }
  nb_Value r;
  int st = nbV_get_field(vm, R[b], n->str, &r);
  drop(R, b, nlocals);
  if (!st) nb_store(&R[dst], r);
  return st;
}

int nbI_set_field(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int a, int b) {
  if (R[a].t == NB_TUNDEF) { int st = nbI_undefined(vm, n->a->a, false); nbE_locate(vm, vm->frame->chunk, n->a->a); clear_regs(R, b, b + 1); return st; }
  int st = nbV_set_field(vm, R[a], n->a->str, R[b]);
  drop(R, a, nlocals); clear_regs(R, b, b + 1);
  return st;
}

int nbI_negate(nb_VM *vm, nb_Value *R, int nlocals, int dst, int b) {
  nb_Value a = R[b], r;
  int st = NB_OK;
  if (a.t == NB_TNUM) r = nb_numk(-a.u.n, a.kind);
  else if (a.t == NB_TTENSOR) st = nbT_neg(vm, a, &r);
  else st = nb_error_kind(vm, "TypeError", "cannot negate a %s", nb_typename(a));
  clear_regs(R, b, b + 1);
  return st ? st : put_result(vm, R, nlocals, dst, r);
}

/* x.name op= v, x[i...] op= v (eval_assign's rule: a tensor read from a
** field, or from an index of a non-tensor, is updated in place) */
int nbI_update_x(nb_VM *vm, const nb_Node *n, nb_Value *R, int a, int b) {
  const nb_Node *t = n->a;
  int nidx = t->kind == N_INDEX ? t->nkids : 0;
  nb_Value obj = R[a], v = R[b], cur;
  int st = t->kind == N_INDEX ? nbV_index(vm, obj, &R[a + 1], nidx, &cur) : nbV_get_field(vm, obj, t->str, &cur);
  if (!st) {
    if (cur.t == NB_TTENSOR && !(t->kind == N_INDEX && obj.t == NB_TTENSOR) && n->op < OP_BAND) {
      st = nbT_update(vm, n->op, update_name(n->op), cur, v);
      nb_decref(cur);
    } else {
      nb_Value r;
      st = nbV_binop(vm, n->op, cur, v, &r);
      nb_decref(cur);
      if (!st) {
        st = t->kind == N_INDEX ? nbV_set_index(vm, obj, &R[a + 1], nidx, r) : nbV_set_field(vm, obj, t->str, r);
        nb_decref(r);
      }
    }
  }
  clear_regs(R, a, a + 1 + nidx);
  clear_regs(R, b, b + 1);
  return st;
}

int nbI_make_slice(nb_VM *vm, const nb_Node *k, nb_Value *R, int dst, int b) {
  double part[3] = { NAN, NAN, NAN };
  const nb_Node *ps[3] = { k->a, k->b, k->c };
  int st = NB_OK;
  for (int j = 0; j < 3 && !st; j++) {
    nb_Value v = R[b + j];
    if (v.t == NB_TNIL) continue;
    if (v.t != NB_TNUM) { nb_error_kind(vm, "TypeError", "slice bounds must be numbers, got %s", nb_typename(v)); nbE_locate(vm, vm->frame->chunk, ps[j]); st = NB_ERR; break; }
    part[j] = v.u.n;
  }
  clear_regs(R, b, b + 3);
  if (!st) nb_store(&R[dst], nb_obj(NB_TRANGE, nbG_range(part[0], part[1], part[2])));
  return st;
}

void nbI_push_handler(nb_VM *vm, const nb_Instr *pc, int reg, int kind, int saved) {
  if (vm->nxh == vm->capxh) {
    vm->capxh = vm->capxh ? vm->capxh * 2 : 16;
    vm->xh = realloc(vm->xh, sizeof *vm->xh * (size_t)vm->capxh);
    if (!vm->xh) abort();
  }
  vm->xh[vm->nxh++] = (nb_Handler){ pc, reg, vm->nxf, vm->depth, kind, saved };
}

/* pops the newest entry of the block stack, putting back a block's mode */
void nbI_pop_block(nb_VM *vm) {
  nb_Handler *h = &vm->xh[--vm->nxh];
  if (h->kind == NB_H_NOGRAD) { vm->grad_disabled--; nbT_swap_grad_enabled(h->saved != 0); }
  else if (h->kind == NB_H_AUTOCAST) nbT_swap_autocast(h->saved);
}

int nbI_enter_autocast(nb_VM *vm, nb_Value *R, int a) {
  int dt;
  int st = nbT_autocast_arg(vm, R[a], &dt);
  clear_regs(R, a, a + 1);
  if (st) return st;
  nbI_push_handler(vm, NULL, 0, NB_H_AUTOCAST, nbT_swap_autocast(dt));
  return NB_OK;
}

/* ARGPUSH/ARGSPREAD: the argument R[b] onto the list R[a] */
int nbI_arg_push(nb_VM *vm, nb_Value *R, int a, int b, bool spread) {
  nb_Value v = R[b];
  R[b] = nb_nil();
  nb_List *l = nb_list(R[a]);
  if (!spread) { nbL_push(l, v); return NB_OK; }
  if (v.t != NB_TLIST && nbV_spread_list(vm, &v)) return NB_ERR;
  nb_List *items = nb_list(v);
  if (nbL_reserve(vm, "*spread", l, (size_t)l->n + (size_t)items->n)) { nb_decref(v); return NB_ERR; }
  for (int j = 0; j < items->n; j++) { nb_incref(items->items[j]); nbL_push(l, items->items[j]); }
  nb_decref(v);
  return NB_OK;
}

