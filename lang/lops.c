/*
** lops.c — what operators, indexing and field access do to values once the
** evaluator has them: arithmetic and comparison (nbV_binop), truthiness,
** a[i] and slices, r.field and m.member, and their assignments.  Tensors are
** handed to ltensor.c (nbT_*).  Nothing here walks the
** syntax tree, so the functions also serve builtins (sorted, ...).  Each takes
** borrowed operands and returns a new reference in *out.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

#define TRY(x) do { int st_ = (x); if (st_) return st_; } while (0)

/* ------------------------------------------------------------ operators */
static int type_error2(nb_VM *vm, const char *op, nb_Value a, nb_Value b) {
  return nb_error_kind(vm, "TypeError", "unsupported operand types for %s: %s and %s", op, nb_typename(a), nb_typename(b));
}
static const char *opname(int op) {
  static const char *const names[] = { "+", "-", "*", "/", "%", "**", "@", "==", "!=", "<", "<=", ">", ">=", "//", "&", "|", "^", "<<", ">>" };
  return op >= 0 && op < OP_NONE ? names[op] : "?";
}

static int str_cmp(const nb_Str *a, const nb_Str *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->data, b->data, n);
  return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

/* ---- bitwise operators: & | ^ << >> ~ on ints (Python's), & | ^ on two bools.
** An int is a double (exact to 2^53): & | ^ ~ work on its two's complement as
** an int64, so an operand must lie within [-2^63, 2^63) (else OverflowError);
** a result beyond 2^53 is rounded as any int result is.  Shifts are exact on
** the double: x << n is x * 2^n (OverflowError past the double's range), x >> n
** is floor(x / 2^n) (-1 or 0 once n passes every bit); a negative count is a
** ValueError, as in Python.  Floats, strings and mixed bool/int are TypeErrors;
** tensors are not supported yet (the tensor op table has no bitwise ops). */
static const char *kindname(nb_Value v) {
  return v.t == NB_TNUM ? (nb_isfloat(v) ? "float" : "int") : v.t == NB_TBOOL ? "bool" : nb_typename(v);
}
static int to_i64(nb_VM *vm, const char *op, nb_Value v, int64_t *out) {
  double d = v.u.n;
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
    char b[40]; nb_fmtnum(b, sizeof b, d);
    return nb_error_kind(vm, "OverflowError", "%s needs ints within [-2**63, 2**63), got %s", op, b);
  }
  *out = (int64_t)d;
  return NB_OK;
}
int nbV_bitop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) {
  const char *name = opname(op);
  if (a.t == NB_TBOOL && b.t == NB_TBOOL && (op == OP_BAND || op == OP_BOR || op == OP_BXOR)) {
    *out = nb_bool(op == OP_BAND ? (a.u.b && b.u.b) : op == OP_BOR ? (a.u.b || b.u.b) : (a.u.b != b.u.b));
    return NB_OK;
  }
  if (a.t == NB_TTENSOR || b.t == NB_TTENSOR)
    return nb_error_kind(vm, "TypeError", "bitwise %s is not supported on tensors yet (operands: %s and %s)", name, kindname(a), kindname(b));
  if (!nb_isint(a) || !nb_isint(b))
    return nb_error_kind(vm, "TypeError", "unsupported operand types for %s: %s and %s (bitwise operators need ints)", name, kindname(a), kindname(b));
  double x = a.u.n, n = b.u.n;
  if (op == OP_SHL || op == OP_SHR) {
    if (n < 0) return nb_error_kind(vm, "ValueError", "negative shift count (%s %.0f)", name, n);
    if (x == 0) { *out = nb_int(0); return NB_OK; }
    if (op == OP_SHR) {   /* |x| < 2**1024: past 1024 bits all of it is out (and x / 2**n would underflow to -0) */
      *out = nb_int(n > 1024 ? (x < 0 ? -1 : 0) : floor(ldexp(x, -(int)n)));
      return NB_OK;
    }
    double r = n > 2100 ? INFINITY : ldexp(x, (int)n);
    if (isinf(r)) {
      char b1[40]; nb_fmtnum(b1, sizeof b1, x);
      return nb_error_kind(vm, "OverflowError", "%s << %.0f is too large for a number (beyond 2**1024)", b1, n);
    }
    *out = nb_int(r);
    return NB_OK;
  }
  int64_t i = 0, j = 0;
  if (to_i64(vm, name, a, &i) || to_i64(vm, name, b, &j)) return NB_ERR;
  *out = nb_int((double)(op == OP_BAND ? (i & j) : op == OP_BOR ? (i | j) : (i ^ j)));
  return NB_OK;
}
int nbV_bnot(nb_VM *vm, nb_Value a, nb_Value *out) {
  if (!nb_isint(a)) {
    if (a.t == NB_TTENSOR) return nb_error_kind(vm, "TypeError", "bitwise ~ is not supported on tensors yet");
    return nb_error_kind(vm, "TypeError", "bad operand type for unary ~: %s (bitwise operators need ints%s)", kindname(a), a.t == NB_TBOOL ? "; use 'not' for a bool" : "");
  }
  int64_t i = 0;
  if (to_i64(vm, "~", a, &i)) return NB_ERR;
  *out = nb_int((double)~i);
  return NB_OK;
}

int nbV_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) {
  if (op >= OP_BAND && op <= OP_SHR) return nbV_bitop(vm, op, a, b, out);
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
    default: *out = nbV_num_arith(op, a, b); return NB_OK;
    }
  }
  if (op == OP_EQ || op == OP_NE) { bool e; if (nbO_equal(vm, a, b, &e)) return NB_ERR; *out = nb_bool(op == OP_EQ ? e : !e); return NB_OK; }
  if (a.t == NB_TSTR && b.t == NB_TSTR) {
    if (op == OP_ADD) {
      nb_Str *x = a.u.p, *y = b.u.p;
      nb_Str *s;
      TRY(nbS_alloc(vm, "string +", (size_t)x->len + y->len, &s));
      memcpy(s->data, x->data, x->len); memcpy(s->data + x->len, y->data, y->len);
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
    nb_List *l;
    TRY(nbL_new_checked(vm, "list +", (size_t)x->n + (size_t)y->n, &l));
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

/* ------------------------------------------------------------ indexing */
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
      nb_List *r;
      TRY(nbL_new_checked(vm, "list slice", (size_t)c, &r));
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
      nb_Str *r;
      TRY(nbS_alloc(vm, "string slice", (size_t)c, &r));
      for (long j = 0; j < c; j++) r->data[j] = s->data[b + j * st];
      *out = nb_strv(r); return NB_OK;
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

int nbV_set_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value v) {
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

int nbV_get_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value *out) {
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

int nbV_set_field(nb_VM *vm, nb_Value obj, nb_Str *name, nb_Value v) {
  if (obj.t == NB_TREC) { nb_incref(v); nbR_set(obj.u.p, name, v); return NB_OK; }
  if (obj.t == NB_TTENSOR) return nbT_setfield(vm, obj, name, v);
  if (obj.t == NB_TMODULE) {
    nb_Module *m = obj.u.p;
    int i = nbM_global_slot(m, name);
    nb_incref(v); nb_store(&m->vals[i], v); return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "cannot set field '%s' on a %s", name->data, nb_typename(obj));
}

