/*
** lresolve.c — decides where every name lives before anything runs, so the
** evaluator never looks a variable up by name.
**
** Scoping (as in Julia): at top level every name is a global of the module.
** Inside a function, a name assigned anywhere in its body is a local of that
** function — unless it is declared `global x`, or it is already a local of an
** enclosing function, in which case the assignment updates that variable
** (closures keep state that way).  A name only read resolves to the nearest
** enclosing function's local, else to a global.  Blocks open no scopes.
**
** A local that an inner function captures lives in an nb_Cell (V_CELL); the
** inner function reaches it through its capture list (V_CAP).  Since a
** capture can be discovered after earlier uses of the local were resolved,
** uses are recorded and fixed up when the function is finished.
*/
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

typedef struct FS {
  struct FS *parent;
  nb_Proto *proto;            /* NULL: top level of a module */
  nb_Str **locals; bool *is_cell; int nlocals, caplocals;
  nb_Str **globals; int nglobals, capglobals;
  nb_CapDesc *caps; nb_Str **capnames; int ncaps, capcaps;
  nb_Node **uses; int nuses, capuses;   /* N_NAME nodes resolved to a local */
  int loops;
} FS;

typedef struct R { nb_VM *vm; nb_Chunk *c; nb_Module *mod; char *cstack_top; } R;

#define GROW(arr, n, cap) do { if ((n) == (cap)) { (cap) = (cap) ? (cap) * 2 : 8; \
  (arr) = realloc((arr), sizeof(*(arr)) * (size_t)(cap)); if (!(arr)) abort(); } } while (0)

static int find(nb_Str **a, int n, const nb_Str *s) { for (int i = 0; i < n; i++) if (a[i] == s) return i; return -1; }

static int add_local(FS *fs, nb_Str *name) {
  int i = find(fs->locals, fs->nlocals, name);
  if (i >= 0) return i;
  if (fs->nlocals == fs->caplocals) {
    fs->caplocals = fs->caplocals ? fs->caplocals * 2 : 8;
    fs->locals = realloc(fs->locals, sizeof(nb_Str *) * (size_t)fs->caplocals);
    fs->is_cell = realloc(fs->is_cell, sizeof(bool) * (size_t)fs->caplocals);
    if (!fs->locals || !fs->is_cell) abort();
  }
  fs->locals[fs->nlocals] = name; fs->is_cell[fs->nlocals] = false;
  return fs->nlocals++;
}

static bool declared_global(FS *fs, const nb_Str *name) { return find(fs->globals, fs->nglobals, name) >= 0; }

/* Is `name` a local of an enclosing function (stopping at a global declaration)? */
static bool enclosing_local(FS *fs, const nb_Str *name) {
  for (FS *f = fs->parent; f && f->proto; f = f->parent) {
    if (declared_global(f, name)) return false;
    if (find(f->locals, f->nlocals, name) >= 0) return true;
  }
  return false;
}

static int capture(FS *fs, nb_Str *name) {
  int i = find(fs->capnames, fs->ncaps, name);
  if (i >= 0) return i;
  FS *p = fs->parent;
  nb_CapDesc d;
  int slot = find(p->locals, p->nlocals, name);
  if (slot >= 0) { p->is_cell[slot] = true; d.from_cap = 0; d.idx = slot; }
  else { d.from_cap = 1; d.idx = capture(p, name); }
  if (fs->ncaps == fs->capcaps) {
    fs->capcaps = fs->capcaps ? fs->capcaps * 2 : 4;
    fs->caps = realloc(fs->caps, sizeof(nb_CapDesc) * (size_t)fs->capcaps);
    fs->capnames = realloc(fs->capnames, sizeof(nb_Str *) * (size_t)fs->capcaps);
    if (!fs->caps || !fs->capnames) abort();
  }
  fs->caps[fs->ncaps] = d; fs->capnames[fs->ncaps] = name;
  return fs->ncaps++;
}

static void resolve_name(R *r, FS *fs, nb_Node *n) {
  nb_Str *name = n->str;
  if (fs->proto && !declared_global(fs, name)) {
    int slot = find(fs->locals, fs->nlocals, name);
    if (slot >= 0) {
      n->vkind = V_LOCAL; n->idx = slot;
      GROW(fs->uses, fs->nuses, fs->capuses);
      fs->uses[fs->nuses++] = n;
      return;
    }
    if (enclosing_local(fs, name)) { n->vkind = V_CAP; n->idx = capture(fs, name); return; }
  }
  n->vkind = V_GLOBAL;
  n->idx = nbM_global_slot(r->mod, name);
  n->bidx = nbC_lookup(name->data, name->len);
}

/* ---- pass 1 over a function body: global declarations and assigned names */
static void collect_globals(FS *fs, nb_Node *n) {
  if (!n || n->kind == N_FN) return;
  if (n->kind == N_GLOBAL) {
    for (int i = 0; i < n->nkids; i++) {
      GROW(fs->globals, fs->nglobals, fs->capglobals);
      fs->globals[fs->nglobals++] = n->names[i];
    }
    return;
  }
  collect_globals(fs, n->a); collect_globals(fs, n->b); collect_globals(fs, n->c);
  for (int i = 0; i < n->nkids; i++) collect_globals(fs, n->kids[i]);
}

static void assigned(FS *fs, nb_Str *name) {
  if (declared_global(fs, name) || enclosing_local(fs, name)) return;
  add_local(fs, name);
}
static void collect_locals(FS *fs, nb_Node *n) {
  if (!n || n->kind == N_FN) return;
  switch (n->kind) {
  case N_ASSIGN: if (n->a->kind == N_NAME) assigned(fs, n->a->str); break;
  case N_FOR: assigned(fs, n->c->str); break;
  case N_TRY: if (n->c) assigned(fs, n->c->str); break;
  case N_IMPORT: assigned(fs, n->a->str); break;
  default: break;
  }
  if (n->kind == N_ASSIGN && (n->flags & NF_FNDEF)) { collect_locals(fs, n->a); return; }  /* not the body */
  collect_locals(fs, n->a); collect_locals(fs, n->b); collect_locals(fs, n->c);
  for (int i = 0; i < n->nkids; i++) collect_locals(fs, n->kids[i]);
}

/* A block holding one expression (the body of `fn f(x) { x * x }`, the arms
** of an if) is replaced by that expression: one dispatch less per use. */
static nb_Node *unwrap(nb_Node *n) {
  while (n && n->kind == N_BLOCK && !(n->flags & NF_TOPLEVEL) && n->nkids == 1 &&
         ((n->kids[0]->flags & NF_EXPRSTMT) || n->kids[0]->kind == N_IF))
    n = n->kids[0];
  return n;
}

static int walk(R *r, FS *fs, nb_Node *n);

static int resolve_fn(R *r, FS *parent, nb_Proto *pr) {
  FS fs; memset(&fs, 0, sizeof fs);
  fs.parent = parent; fs.proto = pr;
  for (int i = 0; i < pr->nparams; i++) add_local(&fs, pr->params[i]);
  collect_globals(&fs, pr->body);
  for (int i = 0; i < pr->nparams; i++)
    if (declared_global(&fs, pr->params[i])) {
      nb_Node *at = pr->body;
      nbP_syntax_error(r->vm, r->c, at->pos, at->pos + 1, at->line, at->col, "'%s' is a parameter and cannot be declared global", pr->params[i]->data);
      goto fail;
    }
  collect_locals(&fs, pr->body);
  pr->body = unwrap(pr->body);
  for (int i = 0; i < pr->nparams; i++) if (pr->defaults[i] && walk(r, &fs, pr->defaults[i])) goto fail;
  if (walk(r, &fs, pr->body)) goto fail;
  /* fix up: uses of captured locals go through their cell */
  for (int i = 0; i < fs.nuses; i++) if (fs.is_cell[fs.uses[i]->idx]) fs.uses[i]->vkind = V_CELL;
  pr->nlocals = fs.nlocals;
  pr->localnames = fs.locals; fs.locals = NULL;
  pr->ncells = 0;
  for (int i = 0; i < fs.nlocals; i++) if (fs.is_cell[i]) pr->ncells++;
  pr->cellslots = malloc(sizeof(int32_t) * (size_t)(pr->ncells + 1));
  if (!pr->cellslots) abort();
  for (int i = 0, k = 0; i < fs.nlocals; i++) if (fs.is_cell[i]) pr->cellslots[k++] = i;
  pr->ncaps = fs.ncaps; pr->caps = fs.caps; fs.caps = NULL;
  pr->capnames = fs.capnames; fs.capnames = NULL;
  for (int i = 0; i < pr->ncaps; i++) pr->capnames[i]->h.rc++;
  pr->resolved = true;
  free(fs.is_cell); free(fs.globals); free(fs.uses);
  return NB_OK;
fail:
  free(fs.locals); free(fs.is_cell); free(fs.globals); free(fs.caps); free(fs.capnames); free(fs.uses);
  return NB_ERR;
}

static int err_at(R *r, nb_Node *n, const char *msg) {
  return nbP_syntax_error(r->vm, r->c, n->pos, n->end > n->pos ? n->end : n->pos + 1, n->line, n->col, "%s", msg);
}

static int walk(R *r, FS *fs, nb_Node *n) {
  if (!n) return NB_OK;
  if (n->kind == N_IF || n->kind == N_WHILE || n->kind == N_FOR || n->kind == N_NOGRAD || n->kind == N_AUTOCAST) { n->b = unwrap(n->b); n->c = n->kind == N_IF ? unwrap(n->c) : n->c; if (n->kind == N_NOGRAD) n->a = unwrap(n->a); }
  if (r->cstack_top - (char *)__builtin_frame_address(0) > 4 * 1024 * 1024) return err_at(r, n, "code is nested too deeply");
  switch (n->kind) {
  case N_NAME: resolve_name(r, fs, n); return NB_OK;
  case N_FN: return resolve_fn(r, fs, n->proto);
  case N_FOR:
    if (walk(r, fs, n->a)) return NB_ERR;
    resolve_name(r, fs, n->c);
    fs->loops++;
    if (walk(r, fs, n->b)) return NB_ERR;
    fs->loops--;
    return NB_OK;
  case N_WHILE:
    if (walk(r, fs, n->a)) return NB_ERR;
    fs->loops++;
    if (walk(r, fs, n->b)) return NB_ERR;
    fs->loops--;
    return NB_OK;
  case N_BREAK: case N_CONTINUE:
    if (!fs->loops) return err_at(r, n, n->kind == N_BREAK ? "'break' outside a loop" : "'continue' outside a loop");
    return NB_OK;
  case N_RETURN:
    if (!fs->proto) return err_at(r, n, "'return' outside a function");
    return walk(r, fs, n->a);
  case N_GLOBAL:
    if (!fs->proto) return NB_OK;   /* harmless at top level */
    return NB_OK;
  case N_METHOD: {
    /* the method name is also resolved as a variable, for uniform call syntax */
    if (walk(r, fs, n->a)) return NB_ERR;
    nb_Node tmp = *n;
    tmp.kind = N_NAME;
    resolve_name(r, fs, &tmp);
    if (tmp.vkind == V_LOCAL) {
      /* record the real node (not tmp) for the cell fix-up */
      fs->uses[fs->nuses - 1] = n;
    }
    n->vkind = tmp.vkind; n->idx = tmp.idx; n->bidx = tmp.bidx;
    for (int i = 0; i < n->nkids; i++) if (walk(r, fs, n->kids[i])) return NB_ERR;
    return NB_OK;
  }
  case N_TRY:
    if (walk(r, fs, n->a)) return NB_ERR;
    if (n->c) resolve_name(r, fs, n->c);
    return walk(r, fs, n->b);
  default: break;
  }
  if (walk(r, fs, n->a) || walk(r, fs, n->b) || walk(r, fs, n->c)) return NB_ERR;
  for (int i = 0; i < n->nkids; i++) if (walk(r, fs, n->kids[i])) return NB_ERR;
  return NB_OK;
}

/* Resolves a parsed program to run at the top level of `mod`. */
int nbK_resolve(nb_VM *vm, nb_Chunk *c, nb_Node *prog, nb_Module *mod) {
  R r = { vm, c, mod, NULL };
  r.cstack_top = __builtin_frame_address(0);
  FS fs; memset(&fs, 0, sizeof fs);
  int st = walk(&r, &fs, prog);
  free(fs.uses);
  return st;
}

/* Resolves a function expression as if nested in a function whose locals are
** `names` (used to rebuild a deserialized closure with its captured values):
** returns the proto of the first N_FN in prog. */
int nbK_resolve_in_scope(nb_VM *vm, nb_Chunk *c, nb_Node *fnexpr, nb_Module *mod, nb_Str **names, int n, nb_Proto *holder) {
  R r = { vm, c, mod, NULL };
  r.cstack_top = __builtin_frame_address(0);
  FS outer; memset(&outer, 0, sizeof outer);
  FS fs; memset(&fs, 0, sizeof fs);
  fs.parent = &outer; fs.proto = holder;
  for (int i = 0; i < n; i++) add_local(&fs, names[i]);
  int st = walk(&r, &fs, fnexpr);
  /* every captured name is a cell of the holder */
  for (int i = 0; i < fs.nuses; i++) if (fs.is_cell[fs.uses[i]->idx]) fs.uses[i]->vkind = V_CELL;
  free(fs.locals); free(fs.is_cell); free(fs.globals); free(fs.caps); free(fs.capnames); free(fs.uses);
  free(outer.uses);
  return st;
}
