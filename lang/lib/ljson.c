/*
** lib/ljson.c — JSON through jansson (loaded on first use, tensor/io/iolibs.c):
**   load_json(path)              the file's value
**   save_json(path, v, indent=2) atomically (nt_atomic_write)
**   json_parse(s) / json_format(v, indent=nil)   the same on strings
** (stdlib/json.nbl: json.read, json.write, json.parse, json.format).
**
** Mapping: object <-> record (keys in file order; a repeated key keeps its
** last value, as Python's json does), array <-> list, string <-> string
** (UTF-8, \u0000 allowed), true/false <-> bool, null <-> nil, an integer <->
** an int number, a real <-> a float number.  Writing also takes tensors (as
** nested lists) and ranges (as lists).
**
** Bounds and errors: a file or string over MAX_JSON_BYTES is refused before
** it is parsed; nesting deeper than MAX_JSON_DEPTH is refused (jansson stops
** at 2048, this at MAX_JSON_DEPTH, both without unbounded recursion); a
** syntax error, bad UTF-8, an integer beyond int64 or a real beyond a
** double's range names the file, line, column and byte offset (jansson's
** position); an integer that a number (a double) cannot hold exactly
** (beyond 2^53) names its place ($.a[3]): never silently rounded.  Writing
** refuses NaN and infinities (not JSON), strings that are not UTF-8, and
** functions or handles, naming the place.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/io/atomicfile.h"
#include "tensor/io/iotypes.h"

#define MAX_JSON_BYTES ((size_t)1 << 30)
#define MAX_JSON_DEPTH 512

/* a place in the value for messages: "$", "$.key", "$[3]" (truncated when long) */
typedef struct Path { char s[256]; size_t n; } Path;
static size_t path_push_key(Path *p, const char *k) {
  size_t mark = p->n;
  int w = snprintf(p->s + p->n, sizeof p->s - p->n, ".%s", k);
  p->n = w < 0 ? p->n : p->n + (size_t)w >= sizeof p->s ? sizeof p->s - 1 : p->n + (size_t)w;
  return mark;
}
static size_t path_push_index(Path *p, size_t i) {
  size_t mark = p->n;
  int w = snprintf(p->s + p->n, sizeof p->s - p->n, "[%zu]", i);
  p->n = w < 0 ? p->n : p->n + (size_t)w >= sizeof p->s ? sizeof p->s - 1 : p->n + (size_t)w;
  return mark;
}
static void path_pop(Path *p, size_t mark) { p->n = mark; p->s[mark] = 0; }

/* ---------------------------------------------------------------- reading */
static int to_value(nb_VM *vm, const char *fname, const char *label, json_t *j, Path *path, int depth, nb_Value *out) {
  if (depth > MAX_JSON_DEPTH)
    return nb_error_kind(vm, "ValueError", "%s: %s: nested more than %d levels deep at %s", fname, label, MAX_JSON_DEPTH, path->s);
  switch (json_typeof(j)) {
  case JSON_NULL: *out = nb_nil(); return NB_OK;
  case JSON_TRUE: *out = nb_bool(true); return NB_OK;
  case JSON_FALSE: *out = nb_bool(false); return NB_OK;
  case JSON_REAL: *out = nb_flt(json_real_value(j)); return NB_OK;
  case JSON_INTEGER: {
    json_int_t v = json_integer_value(j);
    /* compared as integers: 2^53 itself is exact, 2^53 + 1 would round to it */
    if (v > (json_int_t)1 << 53 || v < -((json_int_t)1 << 53))
      return nb_error_kind(vm, "ValueError", "%s: %s: the integer %lld at %s is beyond 2^53, which a number cannot hold exactly (write it as a string)",
                           fname, label, (long long)v, path->s);
    *out = nb_int((double)v);
    return NB_OK;
  }
  case JSON_STRING: {
    size_t n = json_string_length(j);
    if (n > NB_MAX_STR) return nbS_too_long(vm, fname, n);
    *out = nb_strv(nbS_new(json_string_value(j), n));
    return NB_OK;
  }
  case JSON_ARRAY: {
    size_t n = json_array_size(j);
    nb_List *l;
    if (nbL_new_checked(vm, fname, n, &l)) return NB_ERR;
    nb_Value lv = nb_obj(NB_TLIST, l);
    for (size_t i = 0; i < n; i++) {
      if ((i & 4095) == 4095 && nb_vm_interrupted(vm)) { nb_decref(lv); return nbV_interrupt_error(vm); }
      size_t mark = path_push_index(path, i);
      nb_Value v;
      if (to_value(vm, fname, label, json_array_get(j, i), path, depth + 1, &v)) { nb_decref(lv); return NB_ERR; }
      path_pop(path, mark);
      nbL_push(l, v);   /* takes v's reference */
    }
    *out = lv;
    return NB_OK;
  }
  case JSON_OBJECT: {
    nb_Rec *r = nbR_new((int)json_object_size(j));
    nb_Value rv = nb_obj(NB_TREC, r);
    for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
      const char *k = json_object_iter_key(it);
      size_t mark = path_push_key(path, k);
      nb_Value v;
      if (to_value(vm, fname, label, json_object_iter_value(it), path, depth + 1, &v)) { nb_decref(rv); return NB_ERR; }
      path_pop(path, mark);
      nbR_set_cstr(r, k, v);
    }
    *out = rv;
    return NB_OK;
  }
  }
  return nb_error_kind(vm, "ValueError", "%s: %s: unknown JSON type at %s", fname, label, path->s);
}

static int parse(nb_VM *vm, const char *fname, const char *label, const char *buf, size_t len, nb_Value *out) {
  if (len > MAX_JSON_BYTES)
    return nb_error_kind(vm, "ValueError", "%s: %s has %zu bytes, more than the %zu a JSON document may have", fname, label, len, MAX_JSON_BYTES);
  json_error_t e;
  json_t *j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
  if (!j)
    return nb_error_kind(vm, "ValueError", "%s: %s:%d:%d: %s (byte %d)", fname, label, e.line, e.column, e.text, e.position);
  Path p = { "$", 1 };
  int st = to_value(vm, fname, label, j, &p, 0, out);
  json_decref(j);
  return st;
}

static int b_load_json(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *path; char *data; size_t len;
  if (nblib_path_arg(vm, "load_json", args[0], &path) || nblib_slurp(vm, "load_json", path, &data, &len)) return NB_ERR;
  char label[300];
  snprintf(label, sizeof label, "'%s'", path);
  int st = parse(vm, "load_json", label, data, len, out);
  free(data);
  return st;
}

static int b_json_parse(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "json_parse";
  NB_ARGSTR(0, "s");
  return parse(vm, fname, "<string>", nb_str(args[0])->data, nb_str(args[0])->len, out);
}

/* ---------------------------------------------------------------- writing */
static int to_json(nb_VM *vm, const char *fname, nb_Value v, Path *path, int depth, json_t **out) {
  if (depth > MAX_JSON_DEPTH)
    return nb_error_kind(vm, "ValueError", "%s: nested more than %d levels deep at %s (or the value contains itself)", fname, MAX_JSON_DEPTH, path->s);
  json_t *j = NULL;
  switch (v.t) {
  case NB_TNIL: j = json_null(); break;
  case NB_TBOOL: j = v.u.b ? json_true() : json_false(); break;
  case NB_TNUM:
    if (!isfinite(v.u.n)) return nb_error_kind(vm, "ValueError", "%s: %s at %s is not valid JSON (write it as a string or null)", fname, isnan(v.u.n) ? "NaN" : "an infinity", path->s);
    if (!nb_isfloat(v) && fabs(v.u.n) < 9.2e18) j = json_integer((json_int_t)v.u.n);
    else j = json_real(v.u.n);
    break;
  case NB_TSTR:
    j = json_stringn(nb_str(v)->data, nb_str(v)->len);
    if (!j) return nb_error_kind(vm, "ValueError", "%s: the string at %s is not valid UTF-8", fname, path->s);
    break;
  case NB_TTENSOR: case NB_TRANGE: {
    nb_Value l;
    int st;
    if (v.t == NB_TTENSOR) st = nbT_tolist(vm, T(v), &l);
    else {
      nb_Range *r = v.u.p;
      double cnt = nbG_range_len(r);
      nb_List *ll;
      if ((st = nbL_new_checked(vm, fname, (size_t)cnt, &ll)) == NB_OK) {
        for (double k = 0; k < cnt; k++) nbL_push(ll, nb_numk(r->start + k * r->step, r->kind));
        l = nb_obj(NB_TLIST, ll);
      }
    }
    if (st) return NB_ERR;
    st = to_json(vm, fname, l, path, depth, out);
    nb_decref(l);
    return st;
  }
  case NB_TLIST: {
    nb_List *l = nb_list(v);
    j = json_array();
    for (int i = 0; i < l->n; i++) {
      size_t mark = path_push_index(path, (size_t)i);
      json_t *e;
      if (to_json(vm, fname, l->items[i], path, depth + 1, &e)) { json_decref(j); return NB_ERR; }
      path_pop(path, mark);
      json_array_append_new(j, e);
    }
    break;
  }
  case NB_TREC: {
    nb_Rec *r = nb_rec(v);
    j = json_object();
    for (int i = 0; i < r->n; i++) {
      nb_Str *k = r->keys[i];
      size_t mark = path_push_key(path, k->data);
      if (strlen(k->data) != k->len) { json_decref(j); return nb_error_kind(vm, "ValueError", "%s: the key at %s contains a NUL byte", fname, path->s); }
      json_t *e;
      if (to_json(vm, fname, r->vals[i], path, depth + 1, &e)) { json_decref(j); return NB_ERR; }
      if (json_object_set_new(j, k->data, e)) { json_decref(j); return nb_error_kind(vm, "ValueError", "%s: the key at %s is not valid UTF-8", fname, path->s); }
      path_pop(path, mark);
    }
    break;
  }
  default:
    return nb_error_kind(vm, "TypeError", "%s: a %s at %s cannot be written as JSON", fname, nb_typename(v), path->s);
  }
  if (!j) return nb_error(vm, "%s: out of memory", fname);
  *out = j;
  return NB_OK;
}

static int indent_arg(nb_VM *vm, const char *fname, nb_Value v, size_t *flags) {
  *flags = JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17);
  if (v.t == NB_TNIL) { *flags |= JSON_COMPACT; return NB_OK; }
  int64_t ind;
  if (nbT_int_arg(vm, fname, "indent", v, &ind)) return NB_ERR;
  if (ind < 0 || ind > 31) return nb_error_kind(vm, "ValueError", "%s: indent must be in 0..31, got %lld", fname, (long long)ind);
  *flags |= JSON_INDENT(ind);
  return NB_OK;
}

/* the text of v, or NB_ERR; *text malloc'd (free) */
static int format(nb_VM *vm, const char *fname, nb_Value v, nb_Value indent, char **text) {
  size_t flags;
  if (indent_arg(vm, fname, indent, &flags)) return NB_ERR;
  Path p = { "$", 1 };
  json_t *j;
  if (to_json(vm, fname, v, &p, 0, &j)) return NB_ERR;
  *text = json_dumps(j, flags);
  json_decref(j);
  if (!*text) return nb_error(vm, "%s: out of memory", fname);
  return NB_OK;
}

static int b_json_format(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; char *s;
  if (format(vm, "json_format", args[0], args[1], &s)) return NB_ERR;
  *out = nb_strv(nbS_new(s, strlen(s)));
  free(s);
  return NB_OK;
}

static int b_save_json(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *path; char *s;
  if (nblib_path_arg(vm, "save_json", args[0], &path) || format(vm, "save_json", args[1], args[2], &s)) return NB_ERR;
  struct iovec iov[2] = { { s, strlen(s) }, { (void *)"\n", 1 } };
  int rc = nt_atomic_write("save_json", path, iov, 2);
  free(s);
  if (rc) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  *out = nb_nil();
  return NB_OK;
}

static nb_Builtin json_builtins[] = {
  { "load_json", b_load_json, "path", "load_json(path): the JSON file's value (objects as records, arrays as lists)" },
  { "save_json", b_save_json, "path, v, indent=2", "save_json(path, v, indent=2): writes v as JSON (atomic); indent=nil: compact" },
  { "json_parse", b_json_parse, "s", "json_parse(s): the value of a JSON text" },
  { "json_format", b_json_format, "v, indent=nil", "json_format(v, indent=nil): v as JSON text (compact, or indented by indent spaces)" },
  { NULL, NULL, NULL, NULL }
};
void nbopen_json(void) { nbC_register(json_builtins); }
