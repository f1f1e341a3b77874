/*
** lib/ltio.c — tensors to and from files: save/load (safetensors, a pytree
** with its metadata), load_npz/load_npy/save_npy (NumPy) and load_csv.
** Long reads poll the VM's interrupt flag.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "tensor/io/iotypes.h"
#include "tensor/io/safetensors.h"
#include "tensor/io/npy.h"
#include "tensor/io/csv.h"

/* ------------------------------------------------------------ builtins: files
** save(path, tree): nested records/lists of tensors as safetensors, keys
** flattened with dots (like a PyTorch state_dict: "layers.0.w").  Numbers,
** strings and bools in the tree go to the metadata ("nabla:num:key", ...) so
** optimizer state round-trips; functions are code, not state, and are skipped.
** The write is atomic (temp file, fsync, rename). */
typedef struct SaveCtx {
  nt_io_array *arr; int n, cap; char **mk, **mv; int nm, capm; nt_Tensor **hold; int nhold;
  IdMap saved;   /* tensor -> the name it was saved under (a tie is saved once) */
} SaveCtx;
static void save_free(SaveCtx *s) {
  for (size_t i = 0; i < s->saved.cap; i++) if (s->saved.key[i]) free(s->saved.val[i]);
  nbT_idmap_free(&s->saved);
  for (int i = 0; i < s->n; i++) free(s->arr[i].name);
  for (int i = 0; i < s->nm; i++) { free(s->mk[i]); free(s->mv[i]); }
  for (int i = 0; i < s->nhold; i++) nt_release(s->hold[i]);
  free(s->arr); free(s->mk); free(s->mv); free(s->hold);
}
/* metadata entry "nabla:<kind>:<key>" = value (numbers, strings, bools, nil, empty boxes) */
static void add_meta(SaveCtx *s, const char *kind, const char *name, const char *value) {
  if (s->nm == s->capm) { s->capm = s->capm ? s->capm * 2 : 8; s->mk = realloc(s->mk, sizeof(char *) * (size_t)s->capm); s->mv = realloc(s->mv, sizeof(char *) * (size_t)s->capm); if (!s->mk || !s->mv) abort(); }
  nb_Buf k = {0};
  nbB_printf(&k, "nabla:%s:%s", kind, name);
  s->mk[s->nm] = strdup(nbB_cstr(&k)); s->mv[s->nm] = strdup(value); s->nm++;
  nbB_free(&k);
}
static int save_walk(nb_VM *vm, SaveCtx *s, nb_Value v, nb_Buf *key, int depth) {
  if (depth > MAX_TREE_DEPTH) return nb_error_kind(vm, "ValueError", "save: tree nested too deeply (or contains itself)");
  size_t mark = key->n;
  if ((v.t == NB_TREC || v.t == NB_TLIST) && (v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n) == 0 && mark) {
    /* an empty container keeps its place */
    add_meta(s, "box", nbB_cstr(key), v.t == NB_TREC ? "rec" : "list");
    return NB_OK;
  }
  if (v.t == NB_TREC || v.t == NB_TLIST) {
    int cnt = v.t == NB_TREC ? nb_rec(v)->n : nb_list(v)->n;
    for (int i = 0; i < cnt; i++) {
      key->n = mark;
      if (mark) nbB_putc(key, '.');
      if (v.t == NB_TREC) {
        nb_Str *k = nb_rec(v)->keys[i];
        nb_Value fv = nb_rec(v)->vals[i];
        /* a record's functions (a model's __call) are code, not state: not saved */
        if (fv.t == NB_TFUNC || fv.t == NB_TBUILTIN || fv.t == NB_TMODULE) continue;
        if (memchr(k->data, '.', k->len)) return nb_error_kind(vm, "ValueError", "save: record key \"%s\" contains a '.', which is the path separator", k->data);
        nbB_add(key, k->data, k->len);
      } else nbB_printf(key, "%d", i);
      nbB_cstr(key);
      if (save_walk(vm, s, v.t == NB_TREC ? nb_rec(v)->vals[i] : nb_list(v)->items[i], key, depth + 1)) return NB_ERR;
    }
    key->n = mark; if (key->p) key->p[mark] = 0;
    return NB_OK;
  }
  const char *name = nbB_cstr(key);
  if (v.t == NB_TTENSOR) {
    if (!*name) return nb_error_kind(vm, "ValueError", "save: a bare tensor needs a name; save a record like {x: t}");
    /* a tensor at several places (tied weights) is written once; the other
    ** places are recorded as aliases of that name, and load() puts the one
    ** tensor back at each of them (as safetensors' torch helpers dedupe) */
    bool found;
    void **slot = nbT_idmap_slot(&s->saved, T(v), &found);
    if (!slot) return nb_error(vm, "out of memory");
    if (found) { add_meta(s, "alias", name, (const char *)*slot); return NB_OK; }
    *slot = strdup(name);
    nt_Tensor *c = nt_contiguous(T(v));
    if (c && c->device != NT_CPU) { nt_Tensor *h = nt_to_device(c, NT_CPU); nt_release(c); c = h; }
    if (!c) return nbT_err(vm);
    if (s->n == s->cap) { s->cap = s->cap ? s->cap * 2 : 16; s->arr = realloc(s->arr, sizeof(nt_io_array) * (size_t)s->cap); s->hold = realloc(s->hold, sizeof(nt_Tensor *) * (size_t)s->cap); if (!s->arr || !s->hold) abort(); }
    s->hold[s->nhold++] = c;
    nt_io_array *a = &s->arr[s->n++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name); a->dtype = (nt_io_dtype)c->dtype; a->ndim = c->ndim;
    for (int i = 0; i < c->ndim; i++) a->shape[i] = c->shape[i];
    a->data = nt_data_ptr(c); a->nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
    return NB_OK;
  }
  /* in a list, a function keeps its place as nil (a record's are left out above) */
  const char *kind = v.t == NB_TNUM ? "num" : v.t == NB_TSTR ? "str" : v.t == NB_TBOOL ? "bool" : "nil";
  nb_Buf val = {0};
  if (v.t == NB_TNUM || v.t == NB_TSTR || v.t == NB_TBOOL) nb_tostring(&val, v, false);
  add_meta(s, kind, name, nbB_cstr(&val));
  nbB_free(&val);
  return NB_OK;
}
static int b_save(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save";
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: path must be a string", fname);
  if (args[1].t != NB_TREC && args[1].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "save: expected a record (or list) of tensors, got %s", nb_typename(args[1]));
  SaveCtx s; memset(&s, 0, sizeof s);
  nb_Buf key = {0};
  int st = save_walk(vm, &s, args[1], &key, 0);
  nbB_free(&key);
  if (!st && nt_st_save(nb_str(args[0])->data, s.arr, (size_t)s.n, (const char *const *)s.mk, (const char *const *)s.mv, (size_t)s.nm))
    st = nb_error_kind(vm, "IOError", "%s", nt_io_error());
  save_free(&s);
  *out = nb_nil();
  return st;
}

/* ---- load: the nested record in linear time
** A file may hold hundreds of thousands of tensors in one record, whose own
** lookup is a linear scan (400k tensors took 27 s).  Keys are interned, so a
** (record, key) pair names a field: one hash table over all pairs finds a
** field in O(1), and new fields are appended without a scan.
**
** The table indexes records by address without holding them, so nothing it
** indexes may be freed while it lives: a field is set once and never
** replaced (a replaced record would be freed, and a record allocated later
** at its address would find the dead one's fields: a crafted file's heap
** corruption).  So every path of the file is bound once: a second binding of
** a path (a metadata entry at a tensor's name, or at a path that already
** holds a record) is an error, and so is a path under a leaf (a tensor, a
** value or an empty box saved as such) — in any order of the entries. */
typedef struct Field { nb_Rec *rec; nb_Str *key; int index; bool leaf; } Field;
typedef struct Fields { Field *slots; size_t cap, n; } Fields;

static size_t field_hash(const nb_Rec *r, const nb_Str *k) {
  uint64_t h = (uint64_t)(uintptr_t)r * 0x9E3779B97F4A7C15u ^ (uint64_t)(uintptr_t)k * 0xC2B2AE3D27D4EB4Fu;
  return (size_t)(h ^ (h >> 31));
}
static Field *field_slot(Fields *f, const nb_Rec *r, const nb_Str *k) {   /* the pair's slot, or an empty one */
  size_t i = field_hash(r, k) & (f->cap - 1);
  while (f->slots[i].rec && (f->slots[i].rec != r || f->slots[i].key != k)) i = (i + 1) & (f->cap - 1);
  return &f->slots[i];
}
static void fields_reserve(Fields *f) {   /* keeps the table at most half full */
  if (2 * (f->n + 1) <= f->cap) return;
  Fields g = { calloc(f->cap ? 2 * f->cap : 64, sizeof(Field)), f->cap ? 2 * f->cap : 64, f->n };
  if (!g.slots) abort();
  for (size_t i = 0; i < f->cap; i++) if (f->slots[i].rec) *field_slot(&g, f->slots[i].rec, f->slots[i].key) = f->slots[i];
  free(f->slots);
  *f = g;
}
/* rec.key = v, a new field (takes v's reference and the new reference `key`);
** returns the field's index, or -1 (v and key dropped) when rec already has
** the field: fields are never replaced (above) */
static int field_add(Fields *f, nb_Rec *rec, nb_Str *key, nb_Value v, bool leaf) {
  fields_reserve(f);
  Field *sl = field_slot(f, rec, key);
  if (sl->rec) { nb_decref(v); nb_decref(nb_strv(key)); return -1; }
  if (rec->n == rec->cap) {
    int cap = rec->cap ? 2 * rec->cap : 4;
    nb_Str **k = realloc(rec->keys, sizeof(nb_Str *) * (size_t)cap);
    if (k) rec->keys = k;
    nb_Value *vs = k ? realloc(rec->vals, sizeof(nb_Value) * (size_t)cap) : NULL;
    if (!vs) abort();
    rec->vals = vs; rec->cap = cap;
  }
  rec->keys[rec->n] = key; rec->vals[rec->n] = v;
  *sl = (Field){ rec, key, rec->n, leaf };
  f->n++;
  return rec->n++;
}

/* Puts v at the dotted path in the nested record root (creating records).
** The depth is bounded like save's, so nothing built here or walked later
** (listify, printing, freeing) recurses deeper than MAX_TREE_DEPTH. */
static int tree_put(nb_VM *vm, Fields *f, nb_Rec *root, const char *path, nb_Value v) {
  int depth = 0;
  for (const char *d = strchr(path, '.'); d; d = strchr(d + 1, '.'))
    if (++depth > MAX_TREE_DEPTH) {
      nb_decref(v);
      return nb_error_kind(vm, "ValueError", "load: key \"%.60s...\" is nested more than %d levels deep", path, MAX_TREE_DEPTH);
    }
  nb_Rec *cur = root;
  const char *p = path;
  for (;;) {
    const char *dot = strchr(p, '.');
    nb_Str *k = nbS_intern(p, dot ? (size_t)(dot - p) : strlen(p));
    if (!dot) {
      if (field_add(f, cur, k, v, true) < 0)
        return nb_error_kind(vm, "ValueError", "load: the file gives \"%.200s\" twice (a tensor or metadata entry already put a value or record there)", path);
      return NB_OK;
    }
    Field *sl = (fields_reserve(f), field_slot(f, cur, k));
    int i;
    if (!sl->rec) i = field_add(f, cur, nbS_intern_str(k), nb_obj(NB_TREC, nbR_new(0)), false);
    else if (sl->leaf || cur->vals[sl->index].t != NB_TREC) i = -1;
    else i = sl->index;
    nb_decref(nb_strv(k));
    if (i < 0) { nb_decref(v); return nb_error_kind(vm, "ValueError", "load: key \"%.200s\" is under \"%.*s\", which the file saves as a value", path, (int)(dot - path), path); }
    cur = cur->vals[i].u.p;
    p = dot + 1;
  }
}
/* The file's tensors by name, for its ties (nabla:alias:): open addressing
** over indices into the set, so resolving n ties is linear, not n^2. */
typedef struct NameIndex { size_t *slot; size_t cap; } NameIndex;   /* slot: index + 1, 0 = empty */
static size_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603u;   /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return (size_t)(h ^ (h >> 29));
}
static bool name_index_build(NameIndex *ix, const nt_io_set *set) {
  ix->cap = 16;
  while (ix->cap < 2 * set->n + 2) ix->cap *= 2;
  if (!(ix->slot = calloc(ix->cap, sizeof *ix->slot))) return false;
  for (size_t j = 0; j < set->n; j++) {
    size_t i = name_hash(set->arrays[j].name) & (ix->cap - 1);
    while (ix->slot[i]) i = (i + 1) & (ix->cap - 1);
    ix->slot[i] = j + 1;
  }
  return true;
}
static long name_index_find(const NameIndex *ix, const nt_io_set *set, const char *name) {
  for (size_t i = name_hash(name) & (ix->cap - 1); ix->slot[i]; i = (i + 1) & (ix->cap - 1))
    if (!strcmp(set->arrays[ix->slot[i] - 1].name, name)) return (long)(ix->slot[i] - 1);
  return -1;
}
/* records whose keys are exactly 0..n-1 (in any order) were lists when saved */
static nb_Value listify(nb_Value v) {
  if (v.t != NB_TREC) return v;
  nb_Rec *r = v.u.p;
  for (int i = 0; i < r->n; i++) r->vals[i] = listify(r->vals[i]);
  if (r->n == 0) return v;
  int *pos = malloc(sizeof(int) * (size_t)r->n);
  if (!pos) return v;
  for (int i = 0; i < r->n; i++) pos[i] = -1;
  for (int i = 0; i < r->n; i++) {
    char *end; const char *k = r->keys[i]->data;
    long j = strtol(k, &end, 10);
    if (!*k || *end || (k[0] == '0' && k[1]) || j < 0 || j >= r->n || pos[j] >= 0) { free(pos); return v; }
    pos[j] = i;
  }
  nb_List *l = nbL_new(r->n);
  for (int j = 0; j < r->n; j++) { nbL_push(l, r->vals[pos[j]]); r->vals[pos[j]] = nb_nil(); }
  free(pos);
  nb_decref(v);
  return nb_obj(NB_TLIST, l);
}
/* An interrupt (Ctrl-C, the kernel's interrupt_request) stops a long load
** the way the evaluator's poll does: clear the flag, raise Interrupted. */
static int load_interrupted(nb_VM *vm) {
  return nb_vm_interrupted(vm) ? nbV_interrupt_error(vm) : 0;
}
/* The readers poll the VM's interrupt flag while they run (nt_io_set_interrupt). */
#define READ_INTERRUPTIBLY(vm, call) (nt_io_set_interrupt(nb_vm_interrupt_flag(vm)), read_done(call))
static void *read_done(void *result) { nt_io_set_interrupt(NULL); return result; }
static int read_failed(nb_VM *vm) {
  return nb_vm_interrupted(vm) ? load_interrupted(vm) : nb_error_kind(vm, "IOError", "%s", nt_io_error());
}
/* The file's arrays (and, for load, its metadata's values, boxes and ties) as
** one record: nested by the dotted names for load, flat for load_npz.  The
** records are built here, by this file only, so the (record, key) table
** above indexes all of them until they are done. */
static int set_to_record(nb_VM *vm, nt_io_set *set, bool nested, nb_Value *out) {
  nb_Rec *root = nbR_new((int)set->n);
  Fields f = {0};
  NameIndex names = {0};
  int st = NB_OK;
  nt_Tensor **loaded = calloc(set->n + 1, sizeof *loaded);   /* borrowed: root holds them */
  if (!loaded) { nb_decref(nb_obj(NB_TREC, root)); return nb_error(vm, "out of memory"); }
  for (size_t i = 0; i < set->n && !st; i++) {
    nt_io_array *a = &set->arrays[i];
    if ((i & 1023) == 0 && (st = load_interrupted(vm))) break;
    nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
    if (!t) { st = nbT_err(vm); break; }
    loaded[i] = t;
    nb_Value tv = nb_obj(NB_TTENSOR, t);
    if (nested) st = tree_put(vm, &f, root, a->name, tv);
    else if (field_add(&f, root, nbS_intern(a->name, strlen(a->name)), tv, true) < 0)
      st = nb_error_kind(vm, "ValueError", "load_npz: two arrays are named \"%.200s\"", a->name);
  }
  for (size_t i = 0; nested && i < set->nmeta && !st; i++) {
    if ((i & 1023) == 0 && (st = load_interrupted(vm))) break;
    const char *k = set->meta_keys[i], *val = set->meta_values[i];
    if (strncmp(k, "nabla:", 6) != 0) continue;
    const char *kind = k + 6, *colon = strchr(kind, ':');
    if (!colon) continue;
    nb_Value v;
    if (!strncmp(kind, "num:", 4)) v = nb_parsenum(val, NULL);   /* "3" an int, "3.0" a float (as printed) */
    else if (!strncmp(kind, "str:", 4)) v = nb_strv(nbS_cstr(val));
    else if (!strncmp(kind, "bool:", 5)) v = nb_bool(!strcmp(val, "true"));
    else if (!strncmp(kind, "nil:", 4)) v = nb_nil();
    else if (!strncmp(kind, "box:", 4)) v = !strcmp(val, "rec") ? nb_obj(NB_TREC, nbR_new(0)) : nb_obj(NB_TLIST, nbL_new(0));
    else if (!strncmp(kind, "alias:", 6)) {   /* a tie: the tensor saved under val */
      if (!names.slot && !name_index_build(&names, set)) { st = nb_error(vm, "out of memory"); break; }
      long j = name_index_find(&names, set, val);
      if (j < 0) { st = nb_error_kind(vm, "ValueError", "load: %.200s is saved as a tie to \"%.100s\", which the file does not have", colon + 1, val); break; }
      v = nb_obj(NB_TTENSOR, nt_retain(loaded[j]));
    }
    else continue;
    st = tree_put(vm, &f, root, colon + 1, v);
  }
  free(loaded);
  free(f.slots);
  free(names.slot);
  if (st) { nb_decref(nb_obj(NB_TREC, root)); return NB_ERR; }
  *out = nested ? listify(nb_obj(NB_TREC, root)) : nb_obj(NB_TREC, root);
  return NB_OK;
}
/* load and load_npz: a file of named arrays as a record (load: nested by
** the dotted names, as save wrote them) */
static int load_set(nb_VM *vm, const char *fname, nb_Value path, nt_io_set *(*load)(const char *), bool nested, nb_Value *out) {
  if (path.t != NB_TSTR) return nb_error_kind(vm, "TypeError", "%s: path must be a string", fname);
  nt_io_set *set = READ_INTERRUPTIBLY(vm, load(nb_str(path)->data));
  if (!set) return read_failed(vm);
  int st = set_to_record(vm, set, nested, out);
  nt_io_set_free(set);
  return st;
}
static int b_load(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return load_set(vm, "load", args[0], nt_st_load, true, out); }
/* load_npz(path, skipped=false): the supported arrays; with skipped, also
** the members left out: {arrays, skipped: [{name, reason}]} */
static int b_load_npz(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  bool want = false;
  if (nbV_truthy(vm, args[1], &want)) return NB_ERR;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npz: path must be a string");
  nt_io_set *set = READ_INTERRUPTIBLY(vm, nt_npz_load(nb_str(args[0])->data));
  if (!set) return read_failed(vm);
  nb_Value arrays;
  int st = set_to_record(vm, set, false, &arrays);
  if (!st && want) {
    nb_List *l = nbL_new((int)set->nskipped);
    for (size_t i = 0; i < set->nskipped; i++) {
      nb_Rec *e = nbR_new(2);
      nbR_set_cstr(e, "name", nb_strv(nbS_cstr(set->skipped[i])));
      nbR_set_cstr(e, "reason", nb_strv(nbS_cstr(set->skipped_why[i])));
      nbL_push(l, nb_obj(NB_TREC, e));
    }
    nb_Rec *r = nbR_new(2);
    nbR_set_cstr(r, "arrays", arrays);
    nbR_set_cstr(r, "skipped", nb_obj(NB_TLIST, l));
    arrays = nb_obj(NB_TREC, r);
  }
  nt_io_set_free(set);
  if (!st) *out = arrays;
  return st;
}
static int b_load_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_npy: path must be a string");
  nt_io_set *set = READ_INTERRUPTIBLY(vm, nt_npy_load(nb_str(args[0])->data));
  if (!set) return read_failed(vm);
  nt_io_array *a = &set->arrays[0];
  nt_Tensor *t = nt_from_buffer(a->data, (nt_DType)a->dtype, a->shape, a->ndim, (nt_DType)a->dtype);
  nt_io_set_free(set);
  return nbT_ret(vm, t, out);
}
static int b_save_npy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "save_npy"; Tmp tp = {0};
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "save_npy: path must be a string");
  TENSOR_ARG(x, 1, "x");
  nt_Tensor *c = nt_contiguous(x);
  if (c && c->device != NT_CPU) { nt_Tensor *h = nt_to_device(c, NT_CPU); nt_release(c); c = h; }   /* the file gets the values */
  if (!c) { nbT_tmp_free(&tp); return nbT_err(vm); }
  nt_io_array a; memset(&a, 0, sizeof a);
  a.name = (char *)""; a.dtype = (nt_io_dtype)c->dtype; a.ndim = c->ndim;
  for (int i = 0; i < c->ndim; i++) a.shape[i] = c->shape[i];
  a.data = nt_data_ptr(c); a.nbytes = (size_t)c->numel * nt_dtype_size(c->dtype);
  int rc = nt_npy_save(nb_str(args[0])->data, &a);
  nt_release(c); nbT_tmp_free(&tp);
  if (rc) return nb_error_kind(vm, "IOError", "%s", nt_io_error());
  *out = nb_nil();
  return NB_OK;
}
/* load_csv(path, delim=",", header=nil, usecols=nil, dtype="f64", na=nil, codes=false)
** → {columns, data, numeric, text[, categories]} (see the table's doc and
** docs/stdlib.md): data holds the selected numeric columns as [rows, k];
** text columns come back as lists of strings (nil where missing), or with
** codes as i64 category codes (-1 where missing) over sorted categories. */
static int csv_col_name(const nt_csv *c, size_t j, nb_Value *out) {
  *out = c->names ? nb_strv(nbS_cstr(c->names[j])) : nb_strv(nbS_fmt("%zu", j));
  return NB_OK;
}
/* whether the integer dtype dt holds v exactly (v a whole number): a value
** beyond its range is an error, never wrapped (u8 300 -> 44) or saturated
** (i32 1e10 -> 2^31-1); bool holds 0 and 1.  The reader parses numbers as
** doubles, so an i64 beyond 2^53 may already be rounded (2^53+1 reads as
** 2^53): refused too, as load_json does, never silently off by one. */
#define CSV_EXACT_INT 9007199254740992.0   /* 2^53 */
static bool csv_int_fits(double v, nt_DType dt) {
  switch (dt) {
  case NT_U8: return v >= 0 && v <= 255;
  case NT_BOOL: return v == 0 || v == 1;
  case NT_I32: return v >= -2147483648.0 && v <= 2147483647.0;
  default: return fabs(v) < CSV_EXACT_INT;   /* i64: 2^53 itself may be 2^53+1 rounded */
  }
}
static const char *csv_int_hint(nt_DType dt) {
  return dt == NT_BOOL ? "bool holds 0 and 1" : dt == NT_I64 ? "beyond 2^53 a number may be rounded: read it as text or f64"
                                                             : "use a wider dtype";
}
static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }
/* the text column j: a list of strings, or codes + categories */
static int csv_text_col(nb_VM *vm, const nt_csv *c, size_t j, bool codes, nb_Value *out, nb_Value *cats) {
  const char *fname = "load_csv";
  if (!codes) {
    nb_List *l;
    if (nbL_new_checked(vm, fname, c->nrows, &l)) return NB_ERR;
    for (size_t i = 0; i < c->nrows; i++) {
      const char *t = c->text[i * c->ncols + j];
      nbL_push(l, t ? nb_strv(nbS_cstr(t)) : nb_nil());
    }
    *out = nb_obj(NB_TLIST, l);
    return NB_OK;
  }
  char **u = malloc((c->nrows + 1) * sizeof *u);
  if (!u) return nb_memory_error(vm, fname, c->nrows * sizeof *u);
  size_t nu = 0;
  for (size_t i = 0; i < c->nrows; i++) if (c->text[i * c->ncols + j]) u[nu++] = c->text[i * c->ncols + j];
  qsort(u, nu, sizeof *u, cmp_str);
  size_t k = 0;
  for (size_t i = 0; i < nu; i++) if (k == 0 || strcmp(u[k - 1], u[i])) u[k++] = u[i];
  nu = k;
  int64_t shape[1] = { (int64_t)c->nrows };
  nt_Tensor *t = nt_empty(shape, 1, NT_I64, NT_CPU);
  if (!t) { free(u); return nbT_err(vm); }
  int64_t *d = nt_data_ptr(t);
  for (size_t i = 0; i < c->nrows; i++) {
    const char *s = c->text[i * c->ncols + j];
    char **hit = s ? bsearch(&s, u, nu, sizeof *u, cmp_str) : NULL;
    d[i] = hit ? (int64_t)(hit - u) : -1;
  }
  nb_List *l;
  if (nbL_new_checked(vm, fname, nu, &l)) { free(u); nt_release(t); return NB_ERR; }
  for (size_t i = 0; i < nu; i++) nbL_push(l, nb_strv(nbS_cstr(u[i])));
  free(u);
  *out = nb_obj(NB_TTENSOR, t);
  *cats = nb_obj(NB_TLIST, l);
  return NB_OK;
}
static int b_load_csv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "load_csv";
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "load_csv: path must be a string");
  nt_csv_opts o = { .delim = 0, .header = -1, .text = true, .na = NULL, .nna = 0 };
  if (args[1].t == NB_TSTR) { if (nb_str(args[1])->len != 1) return nb_error_kind(vm, "ValueError", "load_csv: delim must be one character"); o.delim = nb_str(args[1])->data[0]; }
  else if (args[1].t != NB_TNIL) return nb_arg_type_error(vm, fname, "delim", "a one-character string", args[1]);
  if (args[2].t == NB_TBOOL) o.header = args[2].u.b;
  else if (args[2].t != NB_TNIL) return nb_arg_type_error(vm, fname, "header", "true, false or nil (auto)", args[2]);
  nt_DType dt;
  if (nbT_dtype_arg(vm, fname, args[4], NT_F64, &dt)) return NB_ERR;
  bool codes = false;
  if (nbV_truthy(vm, args[6], &codes)) return NB_ERR;
  const char **na = NULL;
  if (args[5].t == NB_TLIST) {
    nb_List *l = nb_list(args[5]);
    na = malloc(sizeof *na * (size_t)(l->n + 1));
    if (!na) return nb_memory_error(vm, fname, sizeof *na * (size_t)(l->n + 1));
    for (int i = 0; i < l->n; i++) {
      if (l->items[i].t != NB_TSTR) { free(na); return nb_error_kind(vm, "TypeError", "load_csv: na must be a list of strings (item %d is a %s)", i, nb_typename(l->items[i])); }
      na[i] = nb_str(l->items[i])->data;
    }
    o.na = na; o.nna = (size_t)l->n;
  } else if (args[5].t != NB_TNIL) return nb_arg_type_error(vm, fname, "na", "a list of strings", args[5]);
  nt_csv *c = READ_INTERRUPTIBLY(vm, nt_csv_load_opts(nb_str(args[0])->data, &o));
  free(na);
  if (!c) return read_failed(vm);
  /* the selected columns, in the order given */
  size_t nsel = c->ncols, *sel = malloc(sizeof *sel * (c->ncols + 1));
  int st = NB_OK;
  if (!sel) { nt_csv_free(c); return nb_memory_error(vm, fname, sizeof *sel * c->ncols); }
  for (size_t j = 0; j < c->ncols; j++) sel[j] = j;
  if (args[3].t == NB_TLIST) {
    nb_List *l = nb_list(args[3]);
    free(sel);
    sel = malloc(sizeof *sel * (size_t)(l->n + 1));
    if (!sel) { nt_csv_free(c); return nb_memory_error(vm, fname, sizeof *sel * (size_t)l->n); }
    nsel = 0;
    for (int i = 0; i < l->n && !st; i++) {
      nb_Value u = l->items[i];
      size_t j = c->ncols;
      if (u.t == NB_TSTR) {
        for (size_t k = 0; c->names && k < c->ncols; k++) if (!strcmp(c->names[k], nb_str(u)->data)) { j = k; break; }
        if (j == c->ncols) st = nb_error_kind(vm, "ValueError", "load_csv: usecols names column \"%s\", which %s does not have", nb_str(u)->data, c->names ? "the header" : "a file without a header");
      } else if (u.t == NB_TNUM && nbT_num_isint(u) && u.u.n >= 0 && u.u.n < (double)c->ncols) j = (size_t)u.u.n;
      else st = nb_error_kind(vm, "ValueError", "load_csv: usecols item %d must be a column name or an index in 0..%zu", i, c->ncols - 1);
      for (size_t k = 0; k < nsel && !st; k++) if (sel[k] == j) st = nb_error_kind(vm, "ValueError", "load_csv: usecols gives column %zu twice", j);
      if (!st) sel[nsel++] = j;
    }
  } else if (args[3].t != NB_TNIL) st = nb_arg_type_error(vm, fname, "usecols", "a list of names or indices", args[3]);
  size_t nnum = 0;
  for (size_t k = 0; k < nsel; k++) nnum += !c->is_text[sel[k]];
  double *num = st ? NULL : malloc(sizeof(double) * (c->nrows * nnum + 1));
  if (!st && !num) st = nb_memory_error(vm, fname, sizeof(double) * c->nrows * nnum);
  nb_Rec *r = nbR_new(5);
  nb_List *cols = c->names ? nbL_new((int)nsel) : NULL, *numl = nbL_new((int)nnum);
  nb_Rec *text = nbR_new(0), *cats = codes ? nbR_new(0) : NULL;
  size_t q = 0;
  for (size_t k = 0; k < nsel && !st; k++) {
    size_t j = sel[k];
    nb_Value name;
    csv_col_name(c, j, &name);
    if (cols) { nb_incref(name); nbL_push(cols, name); }
    if (!c->is_text[j]) {
      bool intdt = dt == NT_I32 || dt == NT_I64 || dt == NT_U8 || dt == NT_BOOL;
      for (size_t i = 0; i < c->nrows && !st; i++) {
        double v = c->data[i * c->ncols + j];
        if (intdt && (isnan(v) || v != floor(v)))
          st = nb_error_kind(vm, "ValueError", "load_csv: column %s row %zu is %s, which dtype %s cannot hold (use a float dtype)",
                             nb_str(name)->data, i + 1, isnan(v) ? "missing" : "not an integer", nt_dtype_name(dt));
        else if (intdt && !csv_int_fits(v, dt))
          st = nb_error_kind(vm, "ValueError", "load_csv: column %s row %zu is %.17g, beyond the range of dtype %s (%s)",
                             nb_str(name)->data, i + 1, v, nt_dtype_name(dt), csv_int_hint(dt));
        num[i * nnum + q] = v;
      }
      q++;
      nbL_push(numl, name);
      continue;
    }
    nb_Value tv, cv = nb_nil();
    if ((st = csv_text_col(vm, c, j, codes, &tv, &cv))) { nb_decref(name); break; }
    /* a header may repeat a name: the second "a" is "a.1" (as pandas), never a silently replaced column */
    nb_Str *key = nbS_cstr(nb_str(name)->data);
    for (int dup = 1; nbR_find_cstr(text, key->data) >= 0; dup++) { nb_decref(nb_strv(key)); key = nbS_fmt("%s.%d", nb_str(name)->data, dup); }
    nbR_set_cstr(text, key->data, tv);
    if (cats) nbR_set_cstr(cats, key->data, cv);
    nb_decref(nb_strv(key));
    nb_decref(name);
  }
  nt_Tensor *t = NULL;
  if (!st) {
    int64_t shape[2] = { (int64_t)c->nrows, (int64_t)nnum };
    t = nt_from_buffer(num, NT_F64, shape, 2, dt);
    if (!t) st = nbT_err(vm);
  }
  free(num); free(sel);
  nt_csv_free(c);
  nbR_set_cstr(r, "columns", cols ? nb_obj(NB_TLIST, cols) : nb_nil());
  nbR_set_cstr(r, "data", t ? nb_obj(NB_TTENSOR, t) : nb_nil());
  nbR_set_cstr(r, "numeric", nb_obj(NB_TLIST, numl));
  nbR_set_cstr(r, "text", nb_obj(NB_TREC, text));
  if (cats) nbR_set_cstr(r, "categories", nb_obj(NB_TREC, cats));
  if (st) { nb_decref(nb_obj(NB_TREC, r)); return NB_ERR; }
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
/* ------------------------------------------------------------ the table */
static nb_Builtin io_builtins[] = {
  { "save", b_save, "path, tree", "save(path, tree): writes a record of tensors as safetensors (atomic)" },
  { "load", b_load, "path", "load(path): reads a safetensors file into a nested record" },
  { "load_npz", b_load_npz, "path, skipped=false", "load_npz(path, skipped=false): a record of the arrays in a NumPy .npz; skipped: {arrays, skipped: [{name, reason}]} (unsupported dtypes)" },
  { "load_npy", b_load_npy, "path", "load_npy(path): the array in a NumPy .npy" },
  { "save_npy", b_save_npy, "path, x", "save_npy(path, x): writes a NumPy .npy (atomic)" },
  { "load_csv", b_load_csv, "path, delim=nil, header=nil, usecols=nil, dtype=nil, na=nil, codes=false", "load_csv(path, delim=\",\", header=nil, usecols=nil, dtype=\"f64\", na=nil, codes=false): {columns, data [rows, numeric cols], numeric, text[, categories]}" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_io(void) { nbC_register(io_builtins); }
