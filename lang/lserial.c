/*
** lserial.c — values to bytes and back, so session state can be shipped to
** worker processes.  A function travels as its source text plus the current
** values of the variables it captured; the receiver re-parses the text in a
** scope holding those names.  Globals a function reads resolve in the module
** it was defined in: the receiving VM's main module for functions of the
** session ('C'), or, for a function defined in an imported module such as the
** stdlib's nn or moe ('K' + the module's name, then as 'C'), that module,
** imported on the receiver — so a layer's __call still finds its module's
** helpers there.  Native handles cannot be serialized.
**
** Format: "NBV1" then one value: a tag byte and its payload; integers are
** little-endian u32, numbers IEEE-754 doubles.  Numbers keep their kind:
** 'I' an int, 'E' a float; 'D' (written before numbers had kinds) reads as
** an int when integral.  Ranges: 'H' kind byte, stop-kind byte, three
** doubles; 'G' (older) reads as an int range when start and step are integral.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

#define MAX_DEPTH 200

static void put_u32(nb_Buf *b, uint32_t x) { unsigned char c[4] = { (unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16), (unsigned char)(x >> 24) }; nbB_add(b, (char *)c, 4); }
static void put_f64(nb_Buf *b, double d) { uint64_t u; memcpy(&u, &d, 8); put_u32(b, (uint32_t)u); put_u32(b, (uint32_t)(u >> 32)); }
static void put_str(nb_Buf *b, const char *s, size_t n) { put_u32(b, (uint32_t)n); nbB_add(b, s, n); }

/* Serializing recurses at most MAX_DEPTH levels (deeper: an error).  path
** holds the containers being written: one met again contains itself, an
** error that says so.  Shared parts are written once per reference, so the
** output is bounded too (NB_MAX_STR: it becomes a string). */
static bool on_path(void *const *path, int depth, const void *o) {
  for (int i = 0; i < depth; i++) if (path[i] == o) return true;
  return false;
}
static int ser(nb_VM *vm, nb_Value v, nb_Buf *b, int depth, void **path) {
  if (depth > MAX_DEPTH) return nb_error_kind(vm, "ValueError", "serialize: value is nested more than %d deep", MAX_DEPTH);
  if (b->n > NB_MAX_STR) return nb_error_kind(vm, "ValueError", "serialize: the data would be longer than %zu bytes", NB_MAX_STR);
  if (b->oom) return nbB_check(vm, "serialize", b);
  if ((v.t == NB_TLIST || v.t == NB_TREC || v.t == NB_TFUNC) && on_path(path, depth, v.u.p))
    return nb_error_kind(vm, "ValueError", "serialize: the %s contains itself", nb_typename(v));
  if (v.t == NB_TLIST || v.t == NB_TREC || v.t == NB_TFUNC) path[depth] = v.u.p;
  switch (v.t) {
  case NB_TNIL: nbB_putc(b, 'N'); return NB_OK;
  case NB_TBOOL: nbB_putc(b, v.u.b ? 'T' : 'F'); return NB_OK;
  case NB_TNUM: nbB_putc(b, nb_isfloat(v) ? 'E' : 'I'); put_f64(b, v.u.n); return NB_OK;
  case NB_TSTR: nbB_putc(b, 'S'); put_str(b, nb_str(v)->data, nb_str(v)->len); return NB_OK;
  case NB_TLIST: {
    nb_List *l = v.u.p;
    nbB_putc(b, 'L'); put_u32(b, (uint32_t)l->n);
    for (int i = 0; i < l->n; i++) if (ser(vm, l->items[i], b, depth + 1, path)) return NB_ERR;
    return NB_OK;
  }
  case NB_TREC: {
    nb_Rec *r = v.u.p;
    nbB_putc(b, 'R'); put_u32(b, (uint32_t)r->n);
    for (int i = 0; i < r->n; i++) {
      put_str(b, r->keys[i]->data, r->keys[i]->len);
      if (ser(vm, r->vals[i], b, depth + 1, path)) return NB_ERR;
    }
    return NB_OK;
  }
  case NB_TRANGE: {
    nb_Range *r = v.u.p;
    nbB_putc(b, 'H'); nbB_putc(b, (char)r->kind); nbB_putc(b, (char)r->stopkind);
    put_f64(b, r->start); put_f64(b, r->stop); put_f64(b, r->step); return NB_OK;
  }
  case NB_TBUILTIN: nbB_putc(b, 'B'); put_str(b, v.u.bi->name, strlen(v.u.bi->name)); return NB_OK;
  case NB_TMODULE: { nb_Module *m = v.u.p; nbB_putc(b, 'M'); put_str(b, m->name->data, m->name->len); return NB_OK; }
  case NB_TFUNC: {
    nb_Func *f = v.u.p; nb_Proto *p = f->proto;
    if (f->mod && f->mod != vm->main && f->mod->path) {   /* defined in an imported module */
      nbB_putc(b, 'K'); put_str(b, f->mod->name->data, f->mod->name->len);
    }
    nbB_putc(b, 'C');
    put_str(b, p->chunk->src + p->src_start, p->src_end - p->src_start);
    put_u32(b, (uint32_t)p->ncaps);
    for (int i = 0; i < p->ncaps; i++) {
      put_str(b, p->capnames[i]->data, p->capnames[i]->len);
      nb_Value cv = f->caps[i]->v;
      if (cv.t == NB_TFUNC && cv.u.p == f) { nbB_putc(b, 'Z'); continue; }  /* a local recursive fn refers to itself */
      if (cv.t == NB_TUNDEF) { nbB_putc(b, 'U'); continue; }
      if (ser(vm, cv, b, depth + 1, path)) return NB_ERR;
    }
    return NB_OK;
  }
  case NB_TTENSOR: nbB_putc(b, 'X'); return nbT_serialize(vm, v, b);
  default: return nb_error_kind(vm, "TypeError", "serialize: a %s cannot be serialized", nb_typename(v));
  }
}

int nbZ_serialize(nb_VM *vm, nb_Value v, nb_Buf *out) {
  nb_state_bind(vm);
  void *path[MAX_DEPTH + 2];
  out->checked = true;   /* every caller handles serialize's errors */
  nbB_add(out, "NBV1", 4);
  if (ser(vm, v, out, 0, path)) return NB_ERR;
  if (out->n > NB_MAX_STR) return nb_error_kind(vm, "ValueError", "serialize: the data would be longer than %zu bytes (%zu)", NB_MAX_STR, out->n);
  return nbB_check(vm, "serialize", out);
}

typedef struct Rd { const unsigned char *p, *end; } Rd;
static int bad(nb_VM *vm) { return nb_error_kind(vm, "ValueError", "deserialize: data is truncated or corrupt"); }
static int get_u32(Rd *r, uint32_t *x) {
  if (r->end - r->p < 4) return -1;
  *x = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
  r->p += 4; return 0;
}
static int get_f64(Rd *r, double *d) {
  uint32_t lo, hi;
  if (get_u32(r, &lo) || get_u32(r, &hi)) return -1;
  uint64_t u = (uint64_t)hi << 32 | lo; memcpy(d, &u, 8); return 0;
}
static int get_str(Rd *r, const char **s, uint32_t *n) {
  if (get_u32(r, n) || (size_t)(r->end - r->p) < *n) return -1;
  *s = (const char *)r->p; r->p += *n; return 0;
}

static int des(nb_VM *vm, Rd *r, nb_Value *out, int depth);

/* what `import` accepts: an identifier, never a path ('M' and 'K' import it) */
static bool is_module_name(const char *s, uint32_t n) {
  if (n == 0 || n > 200) return false;
  for (uint32_t i = 0; i < n; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (i && s[i] >= '0' && s[i] <= '9'))) return false;
  return true;
}

/* A function: its text, then each captured name with its value ('U' not yet
** assigned, 'Z' the function itself).  The names are interned in the VM
** bound by nbZ_deserialize, the same table the re-parse interns into, because
** nbK_resolve_in_scope and the self test below compare names by pointer. */
static int des_func(nb_VM *vm, Rd *r, nb_Value *out, int depth, nb_Module *mod) {
  const char *src; uint32_t n, ncaps;
  if (get_str(r, &src, &n) || get_u32(r, &ncaps) || ncaps > 10000) return bad(vm);
  nb_Str **names = calloc(ncaps + 1, sizeof(nb_Str *));
  nb_Value *vals = calloc(ncaps + 1, sizeof(nb_Value));
  if (!names || !vals) abort();
  int st = NB_OK; uint32_t got = 0;
  nb_Str *self = NULL;   /* the captured name that refers to the function itself */
  for (; got < ncaps; got++) {
    const char *cn; uint32_t cl;
    if (get_str(r, &cn, &cl)) { st = bad(vm); break; }
    names[got] = nbS_intern(cn, cl);
    if (r->p < r->end && *r->p == 'U') { r->p++; vals[got] = nb_undef(); continue; }
    if (r->p < r->end && *r->p == 'Z') { r->p++; vals[got] = nb_undef(); self = names[got]; continue; }
    if ((st = des(vm, r, &vals[got], depth + 1))) { nb_decref(nb_strv(names[got])); break; }
  }
  nb_Chunk *c = NULL;
  if (!st) {
    nb_Node *prog;
    c = nbP_parse(vm, src, n, "<deserialized>", &prog);
    nb_Node *fnode = NULL;
    if (prog && prog->nkids == 1) {
      nb_Node *s = prog->kids[0];
      fnode = s->kind == N_FN ? s : (s->kind == N_ASSIGN && s->b->kind == N_FN) ? s->b : NULL;
    }
    if (!prog || !fnode) { if (prog) bad(vm); st = NB_ERR; }
    else {
      nb_Proto holder; memset(&holder, 0, sizeof holder);
      if (nbK_resolve_in_scope(vm, c, fnode, mod, names, (int)ncaps, &holder)) st = NB_ERR;
      else {
        /* the captured variables become cells in a frame the closure is made in */
        nb_Value *cells = calloc(ncaps + 1, sizeof(nb_Value));
        if (!cells) abort();
        for (uint32_t i = 0; i < ncaps; i++) {
          nb_Cell *cell = malloc(sizeof *cell); if (!cell) abort();
          cell->h.rc = 1; cell->h.type = NB_TCELL; cell->v = vals[i]; vals[i] = nb_undef();
          nbO_track(&cell->h);
          cells[i] = nb_obj(NB_TCELL, cell);
        }
        nb_Frame f = { cells, c, NULL, mod, NULL, NULL };
        nbV_make_closure(vm, &f, fnode->proto, out);
        /* a captured self-reference (local recursive function): the cycle it
        ** makes is reclaimed by the cycle collector */
        nb_Func *fn = out->u.p;
        for (int i = 0; i < fn->ncaps; i++)
          if (self && fn->proto->capnames[i] == self && fn->caps[i]->v.t == NB_TUNDEF) { nb_incref(*out); fn->caps[i]->v = *out; }
        for (uint32_t i = 0; i < ncaps; i++) nb_decref(cells[i]);
        free(cells);
      }
    }
    nbP_chunk_release(c);
  }
  for (uint32_t i = 0; i < got; i++) { nb_decref(nb_strv(names[i])); nb_decref(vals[i]); }
  free(names); free(vals);
  return st;
}

static int des(nb_VM *vm, Rd *r, nb_Value *out, int depth) {
  if (depth > MAX_DEPTH) return nb_error_kind(vm, "ValueError", "deserialize: data nested more than %d deep", MAX_DEPTH);
  if (r->p >= r->end) return bad(vm);
  unsigned char tag = *r->p++;
  uint32_t n; const char *s; double d;
  switch (tag) {
  case 'N': *out = nb_nil(); return NB_OK;
  case 'T': *out = nb_bool(true); return NB_OK;
  case 'F': *out = nb_bool(false); return NB_OK;
  case 'I': if (get_f64(r, &d)) return bad(vm); *out = nb_int(d); return NB_OK;
  case 'E': if (get_f64(r, &d)) return bad(vm); *out = nb_flt(d); return NB_OK;
  case 'D': if (get_f64(r, &d)) return bad(vm); *out = d == floor(d) ? nb_int(d) : nb_flt(d); return NB_OK;
  case 'S':
    if (get_str(r, &s, &n)) return bad(vm);
    if (n > NB_MAX_STR) return nbS_too_long(vm, "deserialize", n);   /* a message body can be longer than a string */
    { nb_Str *str; if (nbS_alloc(vm, "deserialize", n, &str)) return NB_ERR;
      memcpy(str->data, s, n); *out = nb_strv(str); }
    return NB_OK;
  case 'L': {
    if (get_u32(r, &n) || n > (uint32_t)(r->end - r->p)) return bad(vm);
    nb_List *l;
    if (nbL_new_checked(vm, "deserialize", n, &l)) return NB_ERR;
    for (uint32_t i = 0; i < n; i++) {
      nb_Value v;
      if (des(vm, r, &v, depth + 1)) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
      nbL_push(l, v);
    }
    *out = nb_obj(NB_TLIST, l); return NB_OK;
  }
  case 'R': {
    if (get_u32(r, &n) || n > (uint32_t)(r->end - r->p)) return bad(vm);
    if (n > NB_MAX_LIST) return nb_error_kind(vm, "ValueError", "deserialize: a record of %u fields is past the limit of %zu", n, NB_MAX_LIST);
    nb_Rec *rec = nbR_new((int)n);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t kl; const char *k; nb_Value v;
      if (get_str(r, &k, &kl)) { nb_decref(nb_obj(NB_TREC, rec)); return bad(vm); }
      nb_Str *key = nbS_intern(k, kl);
      if (des(vm, r, &v, depth + 1)) { nb_decref(nb_strv(key)); nb_decref(nb_obj(NB_TREC, rec)); return NB_ERR; }
      nbR_set(rec, key, v);
      nb_decref(nb_strv(key));
    }
    *out = nb_obj(NB_TREC, rec); return NB_OK;
  }
  case 'G': case 'H': {
    double a, b, c; int k = NB_KINT, sk = NB_KINT;
    if (tag == 'H') {
      if (r->end - r->p < 2 || r->p[0] > NB_KFLOAT || r->p[1] > NB_KFLOAT) return bad(vm);
      k = r->p[0]; sk = r->p[1]; r->p += 2;
    }
    if (get_f64(r, &a) || get_f64(r, &b) || get_f64(r, &c)) return bad(vm);
    if (tag == 'G') { k = a == floor(a) && c == floor(c) ? NB_KINT : NB_KFLOAT; sk = b == floor(b) ? NB_KINT : NB_KFLOAT; }
    *out = nb_obj(NB_TRANGE, nbG_range_k(a, b, c, k, sk)); return NB_OK;
  }
  case 'B': {
    if (get_str(r, &s, &n)) return bad(vm);
    int i = nbC_lookup(s, n);
    if (i < 0) return nb_error_kind(vm, "ValueError", "deserialize: unknown builtin '%.*s'", (int)n, s);
    *out = nb_builtinv(nbC_at(i)); return NB_OK;
  }
  case 'M': {
    if (get_str(r, &s, &n) || !is_module_name(s, n)) return bad(vm);
    nb_Str *name = nbS_new(s, n);
    int st = nbM_import(vm, name, out);
    nb_decref(nb_strv(name));
    return st;
  }
  case 'C': return des_func(vm, r, out, depth, vm->main);
  case 'K': {   /* a function of an imported module: import it here, resolve in it */
    if (get_str(r, &s, &n) || !is_module_name(s, n)) return bad(vm);
    if (r->p >= r->end || *r->p != 'C') return bad(vm);
    r->p++;
    nb_Str *name = nbS_intern(s, n);
    nb_Value mv;
    int st = nbM_import(vm, name, &mv);
    nb_decref(nb_strv(name));
    if (st) return NB_ERR;
    st = des_func(vm, r, out, depth, mv.u.p);
    nb_decref(mv);
    return st;
  }
  case 'X': return nbT_deserialize(vm, &r->p, r->end, out);
  default: return bad(vm);
  }
}

int nbZ_deserialize(nb_VM *vm, const char *data, size_t len, nb_Value *out) {
  nb_state_bind(vm);
  if (len < 4 || memcmp(data, "NBV1", 4) != 0) return nb_error_kind(vm, "ValueError", "deserialize: not nabla serialized data (bad magic)");
  Rd r = { (const unsigned char *)data + 4, (const unsigned char *)data + len };
  if (des(vm, &r, out, 0)) return NB_ERR;
  if (r.p != r.end) { nb_decref(*out); return nb_error_kind(vm, "ValueError", "deserialize: %zu unexpected bytes after the value", (size_t)(r.end - r.p)); }
  return NB_OK;
}
