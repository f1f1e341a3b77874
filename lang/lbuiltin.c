/*
** lbuiltin.c — the one table of builtins (name, C function, parameters with
** keyword names and defaults, one-line doc) that evaluation, completion,
** %help and Jupyter inspect all read: registration, the name index and the
** parameter parser.  The builtins themselves live in libraries (lib/lbase.c
** for the language's own, lib/lt*.c for tensors, dist/ for collectives),
** each registering its tables with nbC_register; a later registration of a
** name replaces the earlier one.
**
** Thread rule: the table and index are process-wide and written only while
** the process starts, before the first VM exists (nbC_freeze, called by
** nb_vm_new, closes registration; a later nbC_register aborts).  After that
** they are read-only, so the threads that run VMs read them without a lock.
** They are not per-VM because every VM of a process sees the same builtins
** and the tables they point to are static.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

/* ------------------------------------------------------------ the table */
static const nb_Builtin **table; static int ntable, captable;
static bool frozen;   /* set by the first nb_vm_new: no registration after it */
static int32_t *bindex; static int bcap;   /* open addressing: name -> table index */

/* sized for the ~900 builtins a process registers, so that registration
** seldom rehashes everything */
#define BINDEX_MIN 2048

static void reindex(void) {
  free(bindex);
  bcap = BINDEX_MIN; while (bcap < ntable * 2 + 2) bcap *= 2;
  bindex = malloc(sizeof(int32_t) * (size_t)bcap);
  if (!bindex) abort();
  for (int i = 0; i < bcap; i++) bindex[i] = -1;
  for (int i = 0; i < ntable; i++) {
    uint32_t h = nbS_hash(table[i]->name, strlen(table[i]->name)) & (uint32_t)(bcap - 1);
    while (bindex[h] >= 0) h = (h + 1) & (uint32_t)(bcap - 1);
    bindex[h] = i;
  }
}

/* the slot of name (len bytes, hash h) in the index: its entry, or the empty
** slot where it would go */
static uint32_t bslot(const char *name, size_t len, uint32_t h) {
  h &= (uint32_t)(bcap - 1);
  while (bindex[h] >= 0) {
    const char *n = table[bindex[h]]->name;
    if (strncmp(n, name, len) == 0 && n[len] == 0) return h;
    h = (h + 1) & (uint32_t)(bcap - 1);
  }
  return h;
}

int nbC_lookup(const char *name, size_t len) {
  if (!bindex) return -1;
  return bindex[bslot(name, len, nbS_hash(name, len))];
}
const nb_Builtin *nbC_at(int idx) { return idx >= 0 && idx < ntable ? table[idx] : NULL; }
int nbC_count(void) { return ntable; }
const char *nbC_name(const nb_Builtin *b) { return b->name; }

/* Parameter names: NUL-terminated copies that live as long as the process,
** packed into chunks (the call path compares them with strcmp, so they need
** not be interned, and interning ~650 names was a third of registering the
** builtins at every start). */
typedef struct NameChunk { struct NameChunk *next; size_t used; char data[4096 - 2 * sizeof(size_t)]; } NameChunk;
static NameChunk *names;   /* newest first; never freed */

static const char *param_name(const char *s, size_t n) {
  if (n >= sizeof names->data) { fprintf(stderr, "nabla: a builtin parameter name of %zu bytes\n", n); abort(); }
  if (!names || sizeof names->data - names->used < n + 1) {
    NameChunk *c = malloc(sizeof *c);
    if (!c) abort();
    c->next = names; c->used = 0; names = c;
  }
  char *p = names->data + names->used;
  memcpy(p, s, n); p[n] = 0;
  names->used += n + 1;
  return p;
}

/* "x, axis=nil, keepdims=false" or "*shape, dtype=nil" */
static void parse_params(nb_Builtin *b) {
  b->nparams = 0; b->nrequired = 0; b->variadic = false; b->kwrest = -1;
  const char *s = b->params ? b->params : "";
  bool seen_default = false;
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    bool rest = s[0] == '*' && s[1] == '*';
    if (rest) s += 2;
    else if (*s == '*') { b->variadic = true; s++; while (*s && *s != ',') s++; continue; }
    const char *st = s;
    while (*s && *s != '=' && *s != ',') s++;
    size_t n = (size_t)(s - st);
    while (n && st[n - 1] == ' ') n--;
    int i = b->nparams++;
    if (i >= NB_MAX_PARAMS) { fprintf(stderr, "nabla: builtin %s has too many parameters\n", b->name); abort(); }
    b->pnames[i] = param_name(st, n);
    b->pdefaults[i] = nb_nil();
    if (rest) { b->kwrest = i; continue; }
    if (*s == '=') {
      s++;
      const char *d = s;
      if (*d == '"' || *d == '\'') {
        char q = *d++; const char *e = strchr(d, q);
        size_t dn = e ? (size_t)(e - d) : strlen(d);
        b->pdefaults[i] = nb_strv(nbS_intern(d, dn));
        s = e ? e + 1 : d + dn;
      } else {
        while (*s && *s != ',') s++;
        size_t dn = (size_t)(s - d);
        char tmp[64]; if (dn >= sizeof tmp) dn = sizeof tmp - 1;
        memcpy(tmp, d, dn); tmp[dn] = 0;
        if (!strcmp(tmp, "nil")) b->pdefaults[i] = nb_nil();
        else if (!strcmp(tmp, "true")) b->pdefaults[i] = nb_bool(true);
        else if (!strcmp(tmp, "false")) b->pdefaults[i] = nb_bool(false);
        else b->pdefaults[i] = nb_parsenum(tmp, NULL);
      }
      seen_default = true;
    } else if (!seen_default && !b->variadic) b->nrequired = i + 1;
  }
}

/* A table registered while VMs run would be written while other threads
** read the index: loud, at once, rather than a rare race. */
static void late_registration(const nb_Builtin *t, const char *who) {
  fprintf(stderr, "nabla: %s(%s...) after the first VM was created: builtins are registered at start-up (see nbapi.h)\n", who, t->name ? t->name : "");
  abort();
}

/* Builtins reached only as values (record members like cuda.available), not by name. */
void nbC_prepare(nb_Builtin *t) {
  if (frozen) late_registration(t, "nbC_prepare");
  for (; t->name; t++) if (t->fn) parse_params(t);
}

void nbC_freeze(void) { frozen = true; }

void nbC_register(nb_Builtin *t) {
  if (frozen) late_registration(t, "nbC_register");
  for (; t->name; t++) {
    if (t->fn) parse_params(t);   /* fn == NULL: a named constant whose value is the params text */
    size_t len = strlen(t->name);
    uint32_t h = nbS_hash(t->name, len);   /* once: for the lookup and the insertion */
    if (!bindex) reindex();
    uint32_t j = bslot(t->name, len, h);
    if (bindex[j] >= 0) { table[bindex[j]] = t; continue; }
    if (ntable == captable) {
      captable = captable ? captable * 2 : 1024;
      table = realloc(table, sizeof(*table) * (size_t)captable);
      if (!table) abort();
    }
    table[ntable++] = t;
    if (ntable * 2 + 2 > bcap) reindex();
    else bindex[j] = ntable - 1;
  }
}

/* ------------------------------------------------------------ doc */
int nbC_doc_value(nb_VM *vm, nb_Value f, nb_Value *out) {
  (void)vm;
  if (f.t == NB_TBUILTIN) { *out = nb_strv(nbS_fmt("%s(%s)\n%s", f.u.bi->name, f.u.bi->params ? f.u.bi->params : "", f.u.bi->doc ? f.u.bi->doc : "")); return NB_OK; }
  if (f.t == NB_TFUNC) {
    nb_Proto *p = nb_func(f)->proto; nb_Buf b = {0};
    nbB_printf(&b, "%s(", nbP_proto_name(p));
    for (int i = 0; i < p->nparams; i++) {
      if (i) nbB_puts(&b, ", ");
      if (p->variadic && i == p->nparams - 1) nbB_putc(&b, '*');
      nbB_puts(&b, p->params[i]->data);
      if (p->defaults[i]) { nbB_putc(&b, '='); nbB_add(&b, p->chunk->src + p->defaults[i]->pos, p->defaults[i]->end - p->defaults[i]->pos); }
    }
    nbB_putc(&b, ')');
    if (p->doc) nbB_printf(&b, "\n%s", p->doc->data);
    *out = nb_strv(nbS_new(b.p, b.n)); nbB_free(&b);
    return NB_OK;
  }
  *out = nb_nil();
  return NB_OK;
}
