/*
** lib/lbase.c — the base library: the builtins every program has without an
** import (print, len, str, lists, records, strings, math, time, errors,
** serialize), as Lua's lbaselib.c.  It is a library like the others: it
** uses only the public API (nbapi.h) and registers its table from
** nbopen_base; the table mechanism itself is lang/lbuiltin.c.
*/
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/stat.h>
#include "lang/nbapi.h"
#include "lang/ltvalue.h"   /* len() and fields of tensors */
#include "lang/lib/nblib.h"
#include "util/clock.h"
#include "tensor/tensor.h"   /* nt_set_num_threads */

/* ------------------------------------------------------------ helpers */

static nb_Value ret_str(const char *s, size_t n) { return nb_strv(nbS_new(s, n)); }

/* ------------------------------------------------------------ output */
/* print, eprint, write: the values' text (sep between, end after) to stream */
static int write_values(nb_VM *vm, const char *fname, int stream, nb_Value *args, int n, const char *sep, const char *end, nb_Value *out) {
  nb_Buf b = NB_BUF_CHECKED;
  for (int i = 0; i < n && b.n <= NB_MAX_STR && !b.oom; i++) { if (i) nbB_puts(&b, sep); nb_tostring(&b, args[i], false); }
  nbB_puts(&b, end);
  if (nbB_check(vm, fname, &b)) { nbB_free(&b); return NB_ERR; }
  nbW_write(vm, stream, b.p, b.n);
  nbB_free(&b);
  *out = nb_nil();
  return NB_OK;
}
static int b_print(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { return write_values(vm, "print", NB_STDOUT, args, n, " ", "\n", out); }
static int b_eprint(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { return write_values(vm, "eprint", NB_STDERR, args, n, " ", "\n", out); }
static int b_write(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { return write_values(vm, "write", NB_STDOUT, args, n, "", "", out); }
/* display(x, ..., display_id=nil, update=false): args[0..1] are the keywords */
static int b_display(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "display";
  if (args[0].t != NB_TNIL) NB_ARGSTR(0, "display_id");
  if (nb_truthy(args[1]) && args[0].t == NB_TNIL) return nb_error_kind(vm, "ValueError", "display: update=true needs a display_id");
  for (int i = 2; i < n; i++) nbW_show(vm, args[i], false, args[0].t == NB_TSTR ? nb_str(args[0])->data : NULL, nb_truthy(args[1]));
  *out = nb_nil();
  return NB_OK;
}
static int b_clear_output(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Sink *s = nb_vm_sink(vm);
  if (s && s->clear) s->clear(s, nb_truthy(args[0]));
  *out = nb_nil();
  return NB_OK;
}
static int b_input(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "input";
  if (args[0].t != NB_TNIL) NB_ARGSTR(0, "prompt");
  nb_Sink *s = nb_vm_sink(vm);
  char *line = s && s->input ? s->input(s, args[0].t == NB_TSTR ? nb_str(args[0])->data : "", nb_truthy(args[1])) : NULL;
  if (!line && nb_vm_interrupted(vm)) return nbV_interrupt_error(vm);
  if (!line) return nb_error_kind(vm, "IOError", "input: no input is available here (stdin is closed or the front end does not allow input)");
  *out = nb_strv(nbS_cstr(line));
  free(line);
  return NB_OK;
}

/* ------------------------------------------------------------ values */
static int b_len(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Value v = args[0];
  switch (v.t) {
  case NB_TSTR: *out = nb_int(nb_str(v)->len); return NB_OK;
  case NB_TLIST: *out = nb_int(nb_list(v)->n); return NB_OK;
  case NB_TREC: *out = nb_int(nb_rec(v)->n); return NB_OK;
  case NB_TRANGE: *out = nb_int(nbG_range_len(v.u.p)); return NB_OK;
  case NB_TTENSOR: { double l; if (nbT_len(vm, v, &l)) return NB_ERR; *out = nb_int(l); return NB_OK; }
  default: return nb_error_kind(vm, "TypeError", "len: a %s has no length", nb_typename(v));
  }
}
static int b_type(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)n;
  *out = nb_strv(nbS_cstr(nb_typename(args[0])));
  return NB_OK;
}
static int text_of(nb_VM *vm, const char *fname, nb_Value v, bool quote, nb_Value *out) {
  if (v.t == NB_TSTR && !quote) { nb_incref(v); *out = v; return NB_OK; }
  nb_Buf b = NB_BUF_CHECKED; nb_tostring(&b, v, quote);
  int st = nbS_from_buf(vm, fname, &b, out);
  nbB_free(&b);
  return st;
}
static int b_str(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return text_of(vm, "str", args[0], false, out); }
static int b_repr(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return text_of(vm, "repr", args[0], true, out); }
static int b_num(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Value v = args[0];
  if (v.t == NB_TNUM) { *out = v; return NB_OK; }
  if (v.t == NB_TBOOL) { *out = nb_int(v.u.b); return NB_OK; }
  if (v.t == NB_TTENSOR) {
    nb_Str *k = nbS_intern("item", 4);
    int st = nbT_field(vm, v, k, out);
    nb_decref(nb_strv(k));
    return st;
  }
  if (v.t == NB_TSTR) {
    const char *s = nb_str(v)->data; char *end;
    while (isspace((unsigned char)*s)) s++;
    nb_Value d = nb_parsenum(s, &end);   /* "3" an int, "3.0" a float */
    while (isspace((unsigned char)*end)) end++;
    if (end == s || *end) return nb_error_kind(vm, "ValueError", "num: \"%s\" is not a number", nb_str(v)->data);
    *out = d; return NB_OK;
  }
  return nb_error_kind(vm, "TypeError", "num: cannot convert a %s to a number", nb_typename(v));
}
static int b_int(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (b_num(vm, args, n, out)) return NB_ERR;
  *out = nb_int(out->t == NB_TBOOL ? out->u.b : trunc(out->u.n));   /* a bool tensor's item is a bool */
  return NB_OK;
}
static int b_bool(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; bool t;
  if (nbV_truthy(vm, args[0], &t)) return NB_ERR;
  *out = nb_bool(t); return NB_OK;
}

static int b_push(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "push";
  NB_ARGLIST(0, "list");
  nb_List *l = args[0].u.p;
  /* a list's room never passes NB_MAX_LIST: the checks only when it grows */
  if (l->n == l->cap && nbL_reserve(vm, fname, l, (size_t)l->n + 1)) return NB_ERR;
  nb_incref(args[1]);
  nbL_push(args[0].u.p, args[1]);
  *out = args[0]; nb_incref(*out);
  return NB_OK;
}
static int b_pop(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "pop";
  NB_ARGLIST(0, "list");
  nb_List *l = args[0].u.p;
  if (l->n == 0) return nb_error_kind(vm, "IndexError", "pop: the list is empty");
  long k = l->n - 1;
  if (args[1].t != NB_TNIL) {
    NB_ARGNUM(1, "index");
    double d = args[1].u.n; if (d < 0) d += l->n;
    if (d < 0 || d >= l->n || d != floor(d)) return nb_error_kind(vm, "IndexError", "pop: index %g is out of range for list of length %d", args[1].u.n, l->n);
    k = (long)d;
  }
  *out = l->items[k];
  memmove(l->items + k, l->items + k + 1, sizeof(nb_Value) * (size_t)(l->n - k - 1));
  l->n--;
  return NB_OK;
}
static int b_insert(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "insert";
  NB_ARGLIST(0, "list"); NB_ARGNUM(1, "index");
  nb_List *l = args[0].u.p;
  double d = args[1].u.n; if (d < 0) d += l->n;
  if (d < 0 || d > l->n || d != floor(d)) return nb_error_kind(vm, "IndexError", "insert: index %g is out of range for list of length %d", args[1].u.n, l->n);
  if (nbL_reserve(vm, fname, l, (size_t)l->n + 1)) return NB_ERR;
  nb_incref(args[2]);
  nbL_push(l, nb_nil());
  memmove(l->items + (long)d + 1, l->items + (long)d, sizeof(nb_Value) * (size_t)(l->n - 1 - (long)d));
  l->items[(long)d] = args[2];
  *out = nb_nil();
  return NB_OK;
}
static int b_range(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "range";
  NB_ARGNUM(0, "start");
  double a = 0, b = args[0].u.n, s = 1;
  uint32_t kind = NB_KINT, stopkind = args[0].kind;   /* the values' kind: start's or step's float */
  if (args[1].t != NB_TNIL) { NB_ARGNUM(1, "stop"); a = args[0].u.n; b = args[1].u.n; kind = args[0].kind; stopkind = args[1].kind; }
  if (args[2].t != NB_TNIL) { NB_ARGNUM(2, "step"); s = args[2].u.n; kind |= args[2].kind; }
  if (s == 0 || isnan(s)) return nb_error_kind(vm, "ValueError", "range: step must not be zero");
  *out = nb_obj(NB_TRANGE, nbG_range_k(a, b, s, (int)kind, (int)stopkind));
  return NB_OK;
}
static int b_list(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  nb_List *l;
  if (n == 0) { *out = nb_obj(NB_TLIST, nbL_new(0)); return NB_OK; }
  if (n > 1) {  /* list(1, 2, 3): a list even though all are numbers */
    l = nbL_new(n);
    for (int i = 0; i < n; i++) { nb_incref(args[i]); nbL_push(l, args[i]); }
    *out = nb_obj(NB_TLIST, l); return NB_OK;
  }
  nb_Value v = args[0];
  switch (v.t) {
  case NB_TLIST: {
    nb_List *s = v.u.p;
    if (nbL_new_checked(vm, "list", (size_t)s->n, &l)) return NB_ERR;
    for (int i = 0; i < s->n; i++) { nb_incref(s->items[i]); nbL_push(l, s->items[i]); }
    break;
  }
  case NB_TRANGE: {
    nb_Range *r = v.u.p; double len = nbG_range_len(r);
    if (len > 1e8) return nb_error_kind(vm, "ValueError", "list: range too long (%.0f elements)", len);
    if (nbL_new_checked(vm, "list", (size_t)len, &l)) return NB_ERR;
    for (double k = 0; k < len; k++) nbL_push(l, nb_numk(r->start + k * r->step, r->kind));
    break;
  }
  case NB_TSTR: {
    nb_Str *s = v.u.p;
    if (nbL_new_checked(vm, "list", s->len, &l)) return NB_ERR;
    for (uint32_t i = 0; i < s->len; i++) nbL_push(l, ret_str(s->data + i, 1));
    break;
  }
  case NB_TREC: {
    nb_Rec *r = v.u.p; l = nbL_new(r->n);
    for (int i = 0; i < r->n; i++) { nb_incref(nb_strv(r->keys[i])); nbL_push(l, nb_strv(r->keys[i])); }
    break;
  }
  case NB_TTENSOR: {
    nb_Str *k = nbS_intern("tolist", 6);
    int st = nbT_field(vm, v, k, out);
    nb_decref(nb_strv(k));
    return st;
  }
  default:
    l = nbL_new(1); nb_incref(v); nbL_push(l, v);
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_keys(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "keys";
  NB_ARGREC(0, "record");
  nb_Rec *r = args[0].u.p; nb_List *l = nbL_new(r->n);
  for (int i = 0; i < r->n; i++) { nb_incref(nb_strv(r->keys[i])); nbL_push(l, nb_strv(r->keys[i])); }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_values(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "values";
  NB_ARGREC(0, "record");
  nb_Rec *r = args[0].u.p; nb_List *l = nbL_new(r->n);
  for (int i = 0; i < r->n; i++) { nb_incref(r->vals[i]); nbL_push(l, r->vals[i]); }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_has(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "has";
  NB_ARGREC(0, "record"); NB_ARGSTR(1, "key");
  *out = nb_bool(nbR_find(args[0].u.p, args[1].u.p) >= 0);
  return NB_OK;
}
static int b_remove(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "remove";
  NB_ARGREC(0, "record"); NB_ARGSTR(1, "key");
  *out = nb_bool(nbR_remove(args[0].u.p, args[1].u.p));
  return NB_OK;
}
static int b_contains(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Value c = args[0], x = args[1];
  if (c.t == NB_TLIST) {
    for (int i = 0; i < nb_list(c)->n; i++) {
      bool e;
      if (nbO_equal(vm, nb_list(c)->items[i], x, &e)) return NB_ERR;
      if (e) { *out = nb_bool(true); return NB_OK; }
    }
    *out = nb_bool(false); return NB_OK;
  }
  if (c.t == NB_TSTR && x.t == NB_TSTR) { *out = nb_bool(memmem(nb_str(c)->data, nb_str(c)->len, nb_str(x)->data, nb_str(x)->len) != NULL); return NB_OK; }
  if (c.t == NB_TREC && x.t == NB_TSTR) { *out = nb_bool(nbR_find(c.u.p, x.u.p) >= 0); return NB_OK; }
  return nb_error_kind(vm, "TypeError", "contains: cannot search a %s for a %s", nb_typename(c), nb_typename(x));
}
static int b_copy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Value v = args[0];
  if (v.t == NB_TREC) {
    nb_Rec *r = v.u.p, *c = nbR_new(r->n);
    for (int i = 0; i < r->n; i++) { nb_incref(r->vals[i]); nbR_set(c, r->keys[i], r->vals[i]); }
    *out = nb_obj(NB_TREC, c); return NB_OK;
  }
  if (v.t == NB_TLIST) return b_list(vm, args, 1, out);
  nb_incref(v); *out = v;
  return NB_OK;
}

/* calls fn(x) for every element, collecting results (map) or filtering */
static int b_map(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "map";
  NB_ARGLIST(0, "list");
  nb_List *s = args[0].u.p, *l = nbL_new(s->n);
  for (int i = 0; i < s->n; i++) {
    nb_Value r;
    if (nbV_call(vm, args[1], &s->items[i], 1, &r)) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
    nbL_push(l, r);
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_filter(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "filter";
  NB_ARGLIST(0, "list");
  nb_List *s = args[0].u.p, *l = nbL_new(0);
  for (int i = 0; i < s->n; i++) {
    nb_Value r; bool t;
    if (nbV_call(vm, args[1], &s->items[i], 1, &r)) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
    int st = nbV_truthy(vm, r, &t); nb_decref(r);
    if (st) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
    if (t) { nb_incref(s->items[i]); nbL_push(l, s->items[i]); }
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* merge sort: stable, and a comparison error (or an error in key) stops it cleanly */
typedef struct SortCtx { nb_VM *vm; int err; bool reverse; } SortCtx;
static bool less(SortCtx *c, nb_Value a, nb_Value b) {
  if (c->err) return false;
  nb_Value r;
  if (nbV_binop(c->vm, OP_LT, c->reverse ? b : a, c->reverse ? a : b, &r)) { c->err = 1; return false; }
  bool t = nb_truthy(r); nb_decref(r);
  return t;
}
static void msort(SortCtx *c, nb_Value *k, nb_Value *v, nb_Value *tk, nb_Value *tv, int n) {
  if (n < 2) return;
  int h = n / 2;
  msort(c, k, v, tk, tv, h); msort(c, k + h, v + h, tk, tv, n - h);
  int i = 0, j = h, o = 0;
  while (i < h && j < n) { if (less(c, k[j], k[i])) { tk[o] = k[j]; tv[o++] = v[j++]; } else { tk[o] = k[i]; tv[o++] = v[i++]; } }
  while (i < h) { tk[o] = k[i]; tv[o++] = v[i++]; }
  while (j < n) { tk[o] = k[j]; tv[o++] = v[j++]; }
  memcpy(k, tk, sizeof(nb_Value) * (size_t)n); memcpy(v, tv, sizeof(nb_Value) * (size_t)n);
}
static int b_sorted(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sorted";
  NB_ARGLIST(0, "list");
  nb_List *s = args[0].u.p;
  int m = s->n;
  nb_Value *keys = malloc(sizeof(nb_Value) * (size_t)(m + 1) * 4);
  if (!keys) return nb_error(vm, "sorted: out of memory");
  nb_Value *vals = keys + m, *tk = vals + m, *tv = tk + m;
  for (int i = 0; i < m; i++) {
    vals[i] = s->items[i];
    if (args[1].t != NB_TNIL) {
      if (nbV_call(vm, args[1], &s->items[i], 1, &keys[i])) { for (int j = 0; j < i; j++) nb_decref(keys[j]); free(keys); return NB_ERR; }
    } else { keys[i] = s->items[i]; nb_incref(keys[i]); }
  }
  SortCtx c = { vm, 0, nb_truthy(args[2]) };
  msort(&c, keys, vals, tk, tv, m);
  for (int i = 0; i < m; i++) nb_decref(keys[i]);
  if (c.err) { free(keys); return NB_ERR; }
  nb_List *l = nbL_new(m);
  for (int i = 0; i < m; i++) { nb_incref(vals[i]); nbL_push(l, vals[i]); }
  free(keys);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_reversed(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "reversed";
  NB_ARGLIST(0, "list");
  nb_List *s = args[0].u.p, *l = nbL_new(s->n);
  for (int i = s->n - 1; i >= 0; i--) { nb_incref(s->items[i]); nbL_push(l, s->items[i]); }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_enumerate(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "enumerate";
  NB_ARGLIST(0, "list");
  nb_List *s = args[0].u.p, *l = nbL_new(s->n);
  for (int i = 0; i < s->n; i++) {
    nb_List *p = nbL_new(2);
    nbL_push(p, nb_int(i)); nb_incref(s->items[i]); nbL_push(p, s->items[i]);
    nbL_push(l, nb_obj(NB_TLIST, p));
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_zip(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "zip";
  int m = -1;
  for (int i = 0; i < n; i++) { NB_ARGLIST(i, "lists"); if (m < 0 || nb_list(args[i])->n < m) m = nb_list(args[i])->n; }
  if (m < 0) m = 0;
  nb_List *l = nbL_new(m);
  for (int k = 0; k < m; k++) {
    nb_List *p = nbL_new(n);
    for (int i = 0; i < n; i++) { nb_Value v = nb_list(args[i])->items[k]; nb_incref(v); nbL_push(p, v); }
    nbL_push(l, nb_obj(NB_TLIST, p));
  }
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* ------------------------------------------------------------ strings */
static int b_join(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "join";
  NB_ARGLIST(0, "list"); NB_ARGSTR(1, "sep");
  nb_List *l = args[0].u.p; nb_Buf b = NB_BUF_CHECKED;
  /* strings (the usual items): the length is known before building */
  size_t total = l->n ? (size_t)(l->n - 1) * nb_str(args[1])->len : 0;
  for (int i = 0; i < l->n; i++) total += l->items[i].t == NB_TSTR ? nb_str(l->items[i])->len : 0;
  if (total > NB_MAX_STR) return nbS_too_long(vm, fname, total);
  for (int i = 0; i < l->n && b.n <= NB_MAX_STR; i++) { if (i) nbB_add(&b, nb_str(args[1])->data, nb_str(args[1])->len); nb_tostring(&b, l->items[i], false); }
  int st = nbS_from_buf(vm, fname, &b, out);
  nbB_free(&b);
  return st;
}
/* split(s, sep=nil): on runs of whitespace, or on every sep */
/* the pieces of str split on sp (NULL: whitespace runs), pushed on l, or
** only counted when l is NULL; returns their number */
static size_t split_walk(const nb_Str *str, const nb_Str *sp, nb_List *l) {
  size_t count = 0;
  if (!sp) {
    uint32_t i = 0;
    while (i < str->len) {
      while (i < str->len && isspace((unsigned char)str->data[i])) i++;
      uint32_t st = i;
      while (i < str->len && !isspace((unsigned char)str->data[i])) i++;
      if (i > st) { count++; if (l) nbL_push(l, ret_str(str->data + st, i - st)); }
    }
    return count;
  }
  const char *p = str->data, *end = str->data + str->len;
  for (;;) {
    const char *q = memmem(p, (size_t)(end - p), sp->data, sp->len);
    count++;
    if (!q) { if (l) nbL_push(l, ret_str(p, (size_t)(end - p))); return count; }
    if (l) nbL_push(l, ret_str(p, (size_t)(q - p)));
    p = q + sp->len;
  }
}
int nbS_split(nb_VM *vm, nb_Value s, nb_Value sep, nb_Value *out) {
  const char *fname = "split";
  if (s.t != NB_TSTR) return nb_arg_type_error(vm, fname, "string", "a string", s);
  if (sep.t != NB_TNIL && (sep.t != NB_TSTR || nb_str(sep)->len == 0)) return nb_error_kind(vm, "ValueError", "split: separator must be a non-empty string");
  nb_Str *str = s.u.p, *sp = sep.t == NB_TSTR ? sep.u.p : NULL;
  /* a long string may have too many pieces for the limit or for memory:
  ** count them and take the list's room before making any */
  nb_List *l;
  if (nbL_new_checked(vm, fname, str->len > 65536 ? split_walk(str, sp, NULL) : 0, &l)) return NB_ERR;
  split_walk(str, sp, l);
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_split(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return nbS_split(vm, args[0], args[1], out); }
/* upper, lower: a copy with each byte mapped (ASCII letters; other bytes,
** UTF-8 ones included, as they are) */
static int map_bytes(nb_VM *vm, const char *fname, nb_Value *args, int (*f)(int), nb_Value *out) {
  NB_ARGSTR(0, "s");
  nb_Str *src = nb_str(args[0]), *s;
  if (nbS_alloc(vm, fname, src->len, &s)) return NB_ERR;
  for (uint32_t i = 0; i < s->len; i++) s->data[i] = (char)f((unsigned char)src->data[i]);
  *out = nb_strv(s); return NB_OK;
}
static int b_upper(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return map_bytes(vm, "upper", args, toupper, out); }
static int b_lower(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return map_bytes(vm, "lower", args, tolower, out); }
static int b_strip(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "strip"; NB_ARGSTR(0, "s");
  const char *p = nb_str(args[0])->data, *e = p + nb_str(args[0])->len;
  while (p < e && isspace((unsigned char)*p)) p++;
  while (e > p && isspace((unsigned char)e[-1])) e--;
  *out = ret_str(p, (size_t)(e - p)); return NB_OK;
}
static int b_replace(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "replace"; NB_ARGSTR(0, "s"); NB_ARGSTR(1, "old"); NB_ARGSTR(2, "new");
  nb_Str *s = args[0].u.p, *o = args[1].u.p, *w = args[2].u.p;
  if (o->len == 0) return nb_error_kind(vm, "ValueError", "replace: the string to replace is empty");
  nb_Buf b = NB_BUF_CHECKED; const char *p = s->data, *end = s->data + s->len;
  for (;;) {
    const char *q = memmem(p, (size_t)(end - p), o->data, o->len);
    if (!q) { nbB_add(&b, p, (size_t)(end - p)); break; }
    nbB_add(&b, p, (size_t)(q - p)); nbB_add(&b, w->data, w->len);
    p = q + o->len;
    if (b.n > NB_MAX_STR) break;
  }
  int st = nbS_from_buf(vm, fname, &b, out);
  nbB_free(&b); return st;
}
static int b_startswith(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "startswith"; NB_ARGSTR(0, "s"); NB_ARGSTR(1, "prefix");
  nb_Str *s = args[0].u.p, *p = args[1].u.p;
  *out = nb_bool(p->len <= s->len && memcmp(s->data, p->data, p->len) == 0); return NB_OK;
}
static int b_endswith(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "endswith"; NB_ARGSTR(0, "s"); NB_ARGSTR(1, "suffix");
  nb_Str *s = args[0].u.p, *p = args[1].u.p;
  *out = nb_bool(p->len <= s->len && memcmp(s->data + s->len - p->len, p->data, p->len) == 0); return NB_OK;
}
static int b_find(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "find"; NB_ARGSTR(0, "s"); NB_ARGSTR(1, "sub");
  nb_Str *s = args[0].u.p, *p = args[1].u.p;
  const char *q = memmem(s->data, s->len, p->data, p->len);
  *out = nb_int(q ? (double)(q - s->data) : -1); return NB_OK;
}
/* fmt(x, ".3f"): printf-style formatting of one number */
#define FMT_MAX_FIELD 1000
static bool fmt_fields_too_big(nb_VM *vm, const char *spec) {
  const char *p = spec + strspn(spec, "+- #0");
  for (int field = 0; field < 2; field++) {   /* width, then .precision */
    if (field == 1) { if (*p != '.') break; p++; }
    char *e; unsigned long long v = strtoull(p, &e, 10);
    if (e != p && v > FMT_MAX_FIELD) {
      nb_error_kind(vm, "ValueError", "fmt: %s %llu in spec \"%s\" is too large (at most %d)", field ? "precision" : "width", v, spec, FMT_MAX_FIELD);
      return true;
    }
    p = e;
  }
  return false;
}
static int b_fmt(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "fmt"; NB_ARGNUM(0, "x"); NB_ARGSTR(1, "spec");
  const char *spec = nb_str(args[1])->data;
  size_t L = strlen(spec);
  if (L == 0 || L > 20 || !strchr("fgeEdx%", spec[L - 1]) || strspn(spec, "0123456789.+- #") != L - 1)
    return nb_error_kind(vm, "ValueError", "fmt: bad format spec \"%s\" (examples: \".3f\", \"8.2e\", \"d\", \".1%%\")", spec);
  /* width and precision: each at most FMT_MAX_FIELD digits' worth, checked
  ** before printf sees them ("%.2147483647f" took 10 GB and half a minute) */
  if (fmt_fields_too_big(vm, spec)) return NB_ERR;
  char f[32], buf[2 * FMT_MAX_FIELD + 400];
  if (spec[L - 1] == 'd' || spec[L - 1] == 'x') { snprintf(f, sizeof f, "%%%.*sll%c", (int)(L - 1), spec, spec[L - 1]); double x = args[0].u.n; long long i = x != x ? 0 : x >= 9.2e18 ? LLONG_MAX : x <= -9.2e18 ? LLONG_MIN : (long long)x; snprintf(buf, sizeof buf, f, i); }
  else if (spec[L - 1] == '%') { snprintf(f, sizeof f, "%%%.*sf%%%%", (int)(L - 1), spec); snprintf(buf, sizeof buf, f, args[0].u.n * 100); }
  else { snprintf(f, sizeof f, "%%%s", spec); snprintf(buf, sizeof buf, f, args[0].u.n); }
  *out = nb_strv(nbS_cstr(buf));
  return NB_OK;
}
static int b_ord(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "ord"; NB_ARGSTR(0, "c");
  if (nb_str(args[0])->len == 0) return nb_error_kind(vm, "ValueError", "ord: empty string");
  *out = nb_int((unsigned char)nb_str(args[0])->data[0]); return NB_OK;
}
static int b_chr(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "chr"; NB_ARGNUM(0, "code");
  double c = args[0].u.n;
  if (c < 0 || c > 255 || c != floor(c)) return nb_error_kind(vm, "ValueError", "chr: code %g is not a byte (0..255)", c);
  char ch = (char)(int)c;
  *out = ret_str(&ch, 1); return NB_OK;
}

/* ------------------------------------------------------------ operations */
/* flush(): what print and write have buffered goes out now (stdout is
** line-buffered on a terminal, block-buffered to a file or pipe unless
** nabla -u / NABLA_UNBUFFERED=1) */
static int b_flush(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  fflush(stdout); fflush(stderr);
  *out = nb_nil(); return NB_OK;
}
/* the CPU threads of the tensor kernels and OpenBLAS, as torch.set_num_threads */
#define MAX_THREADS 4096
static int b_set_num_threads(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "set_num_threads"; NB_ARGNUM(0, "n");
  double t = args[0].u.n;
  if (t != floor(t) || t < 1 || t > MAX_THREADS)
    return nb_error_kind(vm, "ValueError", "set_num_threads: n must be an integer from 1 to %d, got %g", MAX_THREADS, t);
  nt_set_num_threads((int)t);
  *out = nb_nil(); return NB_OK;
}
static int b_num_threads(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  *out = nb_int(nt_num_threads()); return NB_OK;
}
/* what each library runs with (tests check set_num_threads reaches them all) */
static int b_thread_counts(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  int omp, blas, dnnl;
  nt_thread_counts(&omp, &blas, &dnnl);
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "openmp", nb_int(omp));
  nbR_set_cstr(r, "openblas", nb_int(blas));
  nbR_set_cstr(r, "onednn", nb_int(dnnl));
  *out = nb_obj(NB_TREC, r); return NB_OK;
}

/* ------------------------------------------------------------ numbers */
/* MAKE: nb_int (floor, ceil: integers, as Python's math.floor) or nb_flt */
#define MATH1(NAME, EXPR, MAKE) \
  static int b_##NAME(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { \
    (void)n; const char *fname = #NAME; NB_ARGNUM(0, "x"); double x = args[0].u.n; *out = MAKE(EXPR); return NB_OK; }
MATH1(floor, floor(x), nb_int)
MATH1(ceil, ceil(x), nb_int)
/* round(x): an int; round(x, digits): x's kind (Python's rule), half away from zero */
static int b_round(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "round";
  if (args[1].t != NB_TNIL && args[2].t != NB_TNIL) return nb_error_kind(vm, "TypeError", "round: give digits or decimals, not both");
  nb_Value digits = args[1].t != NB_TNIL ? args[1] : args[2];   /* decimals=: torch's name for digits */
  if (args[0].t == NB_TTENSOR) return nbT_round(vm, args[0], digits, out);   /* torch.round: half to even (ltops.c) */
  NB_ARGNUM(0, "x");
  if (digits.t == NB_TNIL) { *out = nb_int(round(args[0].u.n)); return NB_OK; }
  if (digits.t != NB_TNUM) return nb_arg_type_error(vm, fname, "digits", "a number", digits);
  double x = args[0].u.n, d = digits.u.n, p = pow(10, d), r;
  /* past a double's ~17 significant digits rounding keeps x (Python); here
  ** 10^d or x * 10^d would overflow to inf and inf / inf give nan */
  if (d > 0 && !isfinite(x * p)) r = x;
  else if (p == 0) r = copysign(0.0, x);   /* digits so negative 10^d is 0 */
  else r = round(x * p) / p;
  *out = nb_numk(r, args[0].kind); return NB_OK;
}
static int b_isnan_(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "isnan"; NB_ARGNUM(0, "x"); *out = nb_bool(isnan(args[0].u.n)); return NB_OK;
}

/* ------------------------------------------------------------ control */
static int b_error(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; (void)out;
  nb_Value v = args[0];
  if (v.t == NB_TREC) {   /* re-raise: a copy, so the caught value stays as it was */
    nb_Value c; b_copy(vm, &v, 1, &c);
    return nb_raise(vm, c);
  }
  nb_incref(v);
  return nb_raise(vm, v);
}
static int b_assert(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; bool t;
  if (nbV_truthy(vm, args[0], &t)) return NB_ERR;
  if (!t) {
    if (args[1].t == NB_TNIL) return nb_error_kind(vm, "AssertionError", "assertion failed");
    nb_Str *s = nbS_tostr(args[1]);
    nb_error_kind(vm, "AssertionError", "%s", s->data);
    nb_decref(nb_strv(s));
    return NB_ERR;
  }
  *out = nb_nil();
  return NB_OK;
}
static int b_time(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_flt(nu_wall_s()); return NB_OK; }
static int b_clock(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_flt(nu_mono_s()); return NB_OK; }
static int b_doc(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return nbC_doc_value(vm, args[0], out); }
static int b_serialize(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nb_Buf b = {0};
  /* the string is a second copy of the buffer: a checked allocation */
  int st = nbZ_serialize(vm, args[0], &b) || nbS_from_buf(vm, "serialize", &b, out);
  nbB_free(&b);
  return st ? NB_ERR : NB_OK;
}
static int b_deserialize(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "deserialize"; NB_ARGSTR(0, "data");
  return nbZ_deserialize(vm, nb_str(args[0])->data, nb_str(args[0])->len, out);
}

static int b_getenv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "getenv"; NB_ARGSTR(0, "name");
  const char *v = getenv(nb_str(args[0])->data);
  if (v) *out = nb_strv(nbS_cstr(v)); else { *out = args[1]; nb_incref(*out); }
  return NB_OK;
}
static int b_exists(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "exists"; NB_ARGSTR(0, "path");
  *out = nb_bool(access(nb_str(args[0])->data, F_OK) == 0);
  return NB_OK;
}
static int b_mkdir(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "mkdir"; NB_ARGSTR(0, "path");
  /* like mkdir -p: each parent, then the path.  The walk starts past the
  ** first character, so an empty path (mkdir("") read past its copy) is
  ** refused first, as is one a NUL byte would cut short. */
  const nb_Str *path = nb_str(args[0]);
  if (path->len == 0) return nb_error_kind(vm, "ValueError", "mkdir: the path is empty");
  if (strlen(path->data) != path->len) return nb_error_kind(vm, "ValueError", "mkdir: the path contains a NUL byte");
  char *p = strdup(path->data);
  if (!p) return nb_error(vm, "out of memory");
  for (char *s = p + 1; *s; s++) if (*s == '/') { *s = 0; mkdir(p, 0777); *s = '/'; }
  int rc = mkdir(p, 0777);
  int err = errno;
  free(p);
  if (rc != 0 && err != EEXIST) return nb_error_kind(vm, "IOError", "mkdir: cannot create %s: %s", nb_str(args[0])->data, strerror(err));
  *out = nb_nil();
  return NB_OK;
}
MATH1(asin, asin(x), nb_flt)
MATH1(acos, acos(x), nb_flt)
MATH1(atan, atan(x), nb_flt)
static int b_atan2(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "atan2"; NB_ARGNUM(0, "y"); NB_ARGNUM(1, "x");
  *out = nb_flt(atan2(args[0].u.n, args[1].u.n)); return NB_OK;
}

static nb_Builtin core[] = {
  { "pi", NULL, "3.141592653589793", "pi: the constant 3.14159..." },
  { "inf", NULL, "inf", "inf: positive infinity" },
  { "nan", NULL, "nan", "nan: not a number" },
  { "getenv", b_getenv, "name, default=nil", "getenv(name, default=nil): an environment variable" },
  { "exists", b_exists, "path", "exists(path): whether a file or directory exists" },
  { "mkdir", b_mkdir, "path", "mkdir(path): creates a directory and its parents (no error if it exists)" },
  { "asin", b_asin, "x", "asin(x): arc sine of a number" },
  { "acos", b_acos, "x", "acos(x): arc cosine of a number" },
  { "atan", b_atan, "x", "atan(x): arc tangent of a number" },
  { "atan2", b_atan2, "y, x", "atan2(y, x): the angle of the point (x, y)" },
  { "print", b_print, "*args", "print(a, b, ...): writes the values separated by spaces and a newline" },
  { "eprint", b_eprint, "*args", "eprint(a, b, ...): like print, to standard error" },
  { "write", b_write, "*args", "write(a, ...): writes the values with no separator or newline" },
  { "display", b_display, "*args, display_id=nil, update=false", "display(x, display_id=nil, update=false): shows a value richly (HTML/plots in notebooks); update=true replaces the display with that id" },
  { "clear_output", b_clear_output, "wait=false", "clear_output(wait=false): clears the cell's output (wait: when the next output arrives)" },
  { "input", b_input, "prompt=nil, password=false", "input(prompt, password=false): reads a line from the user" },
  { "len", b_len, "x", "len(x): the length of a string, list, record, range or a tensor's first axis" },
  { "type", b_type, "x", "type(x): the type name of x as a string" },
  { "str", b_str, "x", "str(x): x as a string, as print shows it" },
  { "repr", b_repr, "x", "repr(x): x as source-like text (strings quoted)" },
  { "num", b_num, "x", "num(x): converts a string, bool or one-element tensor to a number (\"3\" an int, \"3.5\" a float; a tensor's item)" },
  { "int", b_int, "x", "int(x): converts to an int, truncating toward zero" },
  { "bool", b_bool, "x", "bool(x): the truth value of x" },
  { "push", b_push, "list, x", "push(xs, x): appends x to the list xs and returns xs" },
  { "pop", b_pop, "list, index=nil", "pop(xs, i=last): removes and returns an element of xs" },
  { "insert", b_insert, "list, index, x", "insert(xs, i, x): inserts x before position i" },
  { "range", b_range, "start, stop=nil, step=nil", "range(stop) or range(start, stop, step=1): a lazy range of numbers" },
  { "list", b_list, "*items", "list(x): a new list from a list, range, string, record (keys) or tensor; list(a, b, ...) of its arguments" },
  { "keys", b_keys, "record", "keys(r): the field names of a record, in order" },
  { "values", b_values, "record", "values(r): the field values of a record, in order" },
  { "has", b_has, "record, key", "has(r, key): whether record r has the field key" },
  { "remove", b_remove, "record, key", "remove(r, key): deletes a field; returns whether it existed" },
  { "contains", b_contains, "container, x", "contains(c, x): x in a list, substring of a string, or key of a record" },
  { "copy", b_copy, "x", "copy(x): a shallow copy of a list or record" },
  { "map", b_map, "list, f", "map(xs, f): [f(x) for each x]" },
  { "filter", b_filter, "list, f", "filter(xs, f): the elements x of xs for which f(x) is true" },
  { "sorted", b_sorted, "list, key=nil, reverse=false", "sorted(xs, key=nil, reverse=false): a sorted copy (stable)" },
  { "reversed", b_reversed, "list", "reversed(xs): a reversed copy" },
  { "enumerate", b_enumerate, "list", "enumerate(xs): [[0, x0], [1, x1], ...]" },
  { "zip", b_zip, "*lists", "zip(a, b, ...): [[a0, b0], [a1, b1], ...] up to the shortest" },
  { "join", b_join, "list, sep=''", "join(xs, sep=\"\"): the elements as strings joined with sep" },
  { "split", b_split, "s, sep=nil", "split(s, sep=nil): splits a string on sep (or on whitespace)" },
  { "upper", b_upper, "s", "upper(s): upper-case copy" },
  { "lower", b_lower, "s", "lower(s): lower-case copy" },
  { "strip", b_strip, "s", "strip(s): without leading and trailing whitespace" },
  { "replace", b_replace, "s, old, new", "replace(s, old, new): every old replaced by new" },
  { "startswith", b_startswith, "s, prefix", "startswith(s, prefix)" },
  { "endswith", b_endswith, "s, suffix", "endswith(s, suffix)" },
  { "find", b_find, "s, sub", "find(s, sub): byte offset of the first sub in s, or -1" },
  { "fmt", b_fmt, "x, spec", "fmt(x, spec): formats a number printf-style, e.g. fmt(pi, \".3f\")" },
  { "ord", b_ord, "c", "ord(c): the byte value of the first character" },
  { "chr", b_chr, "code", "chr(code): a one-byte string" },
  { "floor", b_floor, "x", "floor(x): the largest integer <= x (an int)" },
  { "ceil", b_ceil, "x", "ceil(x): the smallest integer >= x (an int)" },
  { "round", b_round, "x, digits=nil, decimals=nil", "round(x, digits=nil): rounds half away from zero; an int, or with digits a number of x's kind; a tensor as torch.round(x, decimals=digits) (half to EVEN, same dtype, zero gradient); decimals= is digits' torch name" },
  { "isnan", b_isnan_, "x", "isnan(x): whether x is not a number" },
  { "error", b_error, "x", "error(x): raises an error with message x (or re-raises a caught error record)" },
  { "assert", b_assert, "cond, message=nil", "assert(cond, message): raises AssertionError when cond is false" },
  { "time", b_time, "", "time(): seconds since the Unix epoch" },
  { "clock", b_clock, "", "clock(): a monotonic clock in seconds, for timing" },
  { "doc", b_doc, "f", "doc(f): the signature and documentation of a function" },
  { "serialize", b_serialize, "x", "serialize(x): x as a byte string (functions as source plus captured values)" },
  { "deserialize", b_deserialize, "data", "deserialize(s): the value serialize produced" },
  { "flush", b_flush, "", "flush(): writes out what print has buffered (standard output to a file or pipe is buffered unless nabla -u or NABLA_UNBUFFERED=1)" },
  { "set_num_threads", b_set_num_threads, "n", "set_num_threads(n): the CPU threads tensor kernels and OpenBLAS use (as torch.set_num_threads)" },
  { "num_threads", b_num_threads, "", "num_threads(): the CPU threads tensor kernels use" },
  { "thread_counts", b_thread_counts, "", "thread_counts(): {openmp, openblas, onednn}: the threads each CPU library runs with now (onednn: its last primitive's, 0 before any)" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_base(void) {
  nbC_register(core);
}
