/*
** lobject.c — strings, lists, records, refcount release, printing, equality.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <malloc.h>
#include "lobject.h"
#include "lvm.h"
#include "tensor/tensor.h"

/* ---------------------------------------------------------------- the reserve
** A small allocation that fails deep inside the interpreter (a record, a
** short string, a list's header) has no caller that could report it.  So the
** process keeps a reserve of address space (mapped, never touched: no RSS):
** the first such failure gives it back and retries, so the allocation
** succeeds, and marks memory as low; the VM's next poll (a loop back-edge or
** a call: lrun.c) raises MemoryError, which unwinds the program with its
** values intact.  The reserve is taken again when the next chunk (REPL line,
** cell, script) starts (nbO_reserve_take); a failure while it is gone still
** stops the process: by then nothing could report it.  Process-wide, like
** malloc; the flag is the only state another thread could see. */
#define RESERVE_BYTES ((size_t)32 << 20)
static void *reserve;
static volatile sig_atomic_t memory_low;

static void *reserve_map(void) {
  void *p = mmap(NULL, RESERVE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
void nbO_reserve_take(void) {
  if (reserve) return;
  /* memory a program freed after running out sits in malloc's bins, still
  ** counted against an address-space limit: hand it back first */
  if (!(reserve = reserve_map()) && malloc_trim(0)) reserve = reserve_map();
}
bool nbO_memory_low_take(void) {
  if (!memory_low) return false;
  memory_low = 0;
  return true;
}
static bool reserve_release(void) {
  if (!reserve) return false;
  munmap(reserve, RESERVE_BYTES);
  reserve = NULL;
  memory_low = 1;
  nb_Global *g = nb_G();
  if (g && g->gc_poll) *g->gc_poll = 1;
  return true;
}

static __attribute__((noreturn)) void out_of_memory(void) { fputs("nabla: out of memory\n", stderr); abort(); }
void *nbO_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p && reserve_release()) p = malloc(n ? n : 1);
  if (!p) out_of_memory();
  return p;
}
void *nbO_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q && reserve_release()) q = realloc(p, n ? n : 1);
  if (!q) out_of_memory();
  return q;
}
void *nbO_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p && reserve_release()) p = calloc(n ? n : 1, size ? size : 1);
  if (!p) out_of_memory();
  return p;
}
#define xmalloc nbO_xmalloc
#define xrealloc nbO_xrealloc

/* ---------------------------------------------------------------- buffers */
void nbB_add(nb_Buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = b->checked ? realloc(b->p, cap) : xrealloc(b->p, cap);
    if (!p) { b->oom = true; return; }
    b->p = p; b->cap = cap;
  }
  memcpy(b->p + b->n, s, n); b->n += n; b->p[b->n] = 0;
}
void nbB_puts(nb_Buf *b, const char *s) { nbB_add(b, s, strlen(s)); }
void nbB_putc(nb_Buf *b, char c) { nbB_add(b, &c, 1); }
void nbB_printf(nb_Buf *b, const char *fmt, ...) {
  char tmp[256]; va_list ap;
  va_start(ap, fmt); int n = vsnprintf(tmp, sizeof tmp, fmt, ap); va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) { nbB_add(b, tmp, (size_t)n); return; }
  char *big = b->checked ? malloc((size_t)n + 1) : xmalloc((size_t)n + 1);
  if (!big) { b->oom = true; return; }
  va_start(ap, fmt); vsnprintf(big, (size_t)n + 1, fmt, ap); va_end(ap);
  nbB_add(b, big, (size_t)n); free(big);
}
char *nbB_cstr(nb_Buf *b) { if (!b->p) nbB_add(b, "", 0); return b->p ? b->p : (char *)""; }
void nbB_free(nb_Buf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; b->oom = false; }   /* stays checked */

/* ---------------------------------------------------------------- strings */
uint32_t nbS_hash(const char *s, size_t len) {   /* FNV-1a */
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
  return h;
}

/* a string of len bytes, its data unwritten but the final NUL, hashed on
** first use (nbS_hashof) so its writer has nothing to finish; NULL when the
** memory is not there */
static nb_Str *str_alloc(size_t len) {
  /* every length input controls is checked against NB_MAX_STR before it
  ** gets here (nbS_from_buf, nbS_too_long): past it is a bug, never a
  ** string whose 32-bit length silently wrapped */
  if (len > NB_MAX_STR) { fprintf(stderr, "nabla: internal error: a string of %zu bytes\n", len); abort(); }
  nb_Str *str = malloc(sizeof(nb_Str) + len + 1);
  if (!str) return NULL;
  str->h.rc = 1; str->h.type = NB_TSTR;
  str->len = (uint32_t)len; str->interned = false; str->hashed = false;
  str->data[len] = 0;
  return str;
}
int nbS_alloc(nb_VM *vm, const char *op, size_t len, nb_Str **out) {
  if (len > NB_MAX_STR) return nbS_too_long(vm, op, len);
  if (!(*out = str_alloc(len))) return nb_memory_error(vm, op, sizeof(nb_Str) + len + 1);
  return NB_OK;
}

nb_Str *nbS_new(const char *s, size_t len) {
  nb_Str *str = str_alloc(len);
  if (!str && reserve_release()) str = str_alloc(len);
  if (!str) out_of_memory();
  if (len) memcpy(str->data, s, len);
  return str;
}
nb_Str *nbS_cstr(const char *s) { return nbS_new(s, strlen(s)); }

int nbS_too_long(nb_VM *vm, const char *op, size_t len) {
  return nb_error_kind(vm, "ValueError", "%s: a string of %zu bytes or more is past the limit of %zu bytes", op, len, NB_MAX_STR);
}
int nb_memory_error(nb_VM *vm, const char *op, size_t bytes) {
  nbO_memory_low_take();   /* one error for one exhaustion: this one reports it */
  return nb_error_kind(vm, "MemoryError", "%s: out of memory allocating %zu bytes", op, bytes);
}
int nbB_check(nb_VM *vm, const char *op, const nb_Buf *b) {
  /* a buffer cut at the limit may also have failed to grow: the limit first,
  ** as a program past it fails the same way on any machine */
  if (b->n > NB_MAX_STR) return nbS_too_long(vm, op, b->n);
  if (b->oom) return nb_memory_error(vm, op, b->cap ? b->cap * 2 : 64);
  return NB_OK;
}
int nbS_from_buf(nb_VM *vm, const char *op, const nb_Buf *b, nb_Value *out) {
  nb_Str *s;
  if (nbB_check(vm, op, b) || nbS_alloc(vm, op, b->n, &s)) return NB_ERR;
  if (b->n) memcpy(s->data, b->p, b->n);
  *out = nb_strv(s);
  return NB_OK;
}
int nbL_too_long(nb_VM *vm, const char *op, size_t n) {
  return nb_error_kind(vm, "ValueError", "%s: a list of %zu items or more is past the limit of %zu items", op, n, NB_MAX_LIST);
}
int nbL_reserve(nb_VM *vm, const char *op, nb_List *l, size_t n) {
  if (n > NB_MAX_LIST) return nbL_too_long(vm, op, n);
  if (!nbL_try_reserve(l, n)) return nb_memory_error(vm, op, sizeof(nb_Value) * n);
  return NB_OK;
}
int nbL_new_checked(nb_VM *vm, const char *op, size_t n, nb_List **out) {
  nb_List *l = nbL_new(0);
  if (nbL_reserve(vm, op, l, n)) { nb_decref(nb_obj(NB_TLIST, l)); return NB_ERR; }
  *out = l;
  return NB_OK;
}
nb_Str *nbS_fmt(const char *fmt, ...) {
  nb_Buf b = {0}; char tmp[512]; va_list ap;
  va_start(ap, fmt); int n = vsnprintf(tmp, sizeof tmp, fmt, ap); va_end(ap);
  if (n >= 0 && (size_t)n < sizeof tmp) return nbS_new(tmp, (size_t)n);
  char *big = xmalloc((size_t)n + 1);
  va_start(ap, fmt); vsnprintf(big, (size_t)n + 1, fmt, ap); va_end(ap);
  nb_Str *s = nbS_new(big, (size_t)n); free(big); (void)b;
  return s;
}

/* The intern table: open addressing over interned strings, which it keeps
** alive (one reference each).  It belongs to the global state of the VM bound
** to this thread (nb_G(), lvm.h): names are compared by pointer (record keys,
** the resolver's scopes, keyword arguments), which is sound only among strings
** of one table, so values of one VM must not be handed to another.  A miss
** in a VM's table looks in the process table (the builtins' names, interned
** before any VM) before adding the string, so a text is in one table only.
** A VM's table goes with its VM (nbO_heap_free); a string that outlives it
** stops being "interned" and compares by content again. */
/* Full: a VM's table first lets go of the strings only it holds (every
** other holder of an interned string owns a reference), so a program that
** keeps making new keys (records used as dictionaries over a stream of
** words) keeps the table within four times its live strings instead of
** growing for ever; then it is rebuilt, at most a quarter full.  The process
** table is never swept: builtins keep its names without references. */
static void intern_grow(nb_Global *g) {
  size_t live = g->icount;
  if (g != nb_state_process())
    for (size_t i = 0; i < g->icap; i++) {
      nb_Str *e = g->itab[i];
      if (e && e->h.rc == 1) { free(e); g->itab[i] = NULL; live--; }
    }
  size_t ncap = g->icap ? g->icap : 1024;
  while ((live + 1) * 4 > ncap) ncap *= 2;
  nb_Str **nt = nbO_xcalloc(ncap, sizeof *nt);
  for (size_t i = 0; i < g->icap; i++) if (g->itab[i]) {
    size_t j = g->itab[i]->hash & (ncap - 1);
    while (nt[j]) j = (j + 1) & (ncap - 1);
    nt[j] = g->itab[i];
  }
  free(g->itab); g->itab = nt; g->icap = ncap; g->icount = live;
}

/* the slot of s in g's table: its string, or the empty slot it would take */
static size_t intern_slot(const nb_Global *g, const char *s, size_t len, uint32_t h) {
  size_t j = h & (g->icap - 1);
  while (g->itab[j]) {
    nb_Str *e = g->itab[j];
    if (e->hash == h && e->len == len && memcmp(e->data, s, len) == 0) break;
    j = (j + 1) & (g->icap - 1);
  }
  return j;
}

nb_Str *nbS_intern(const char *s, size_t len) {
  nb_Global *g = nb_G(), *pg = nb_state_process();
  if ((g->icount + 1) * 2 > g->icap) intern_grow(g);
  uint32_t h = nbS_hash(s, len);
  size_t j = intern_slot(g, s, len, h);
  nb_Str *e = g->itab[j];
  if (!e && g != pg && pg->icount) e = pg->itab[intern_slot(pg, s, len, h)];
  if (e) { e->h.rc++; return e; }
  nb_Str *n = nbS_new(s, len);
  n->hash = h; n->hashed = true;
  n->interned = true; n->h.rc++;  /* one for the table */
  g->itab[j] = n; g->icount++;
  return n;
}
nb_Str *nbS_intern_str(nb_Str *s) {
  if (s->interned) { s->h.rc++; return s; }
  return nbS_intern(s->data, s->len);
}
static void intern_free(nb_Global *g) {
  for (size_t i = 0; i < g->icap; i++) if (g->itab[i]) {
    nb_Str *s = g->itab[i];
    if (--s->h.rc == 0) free(s);
    else s->interned = false;   /* still held (a value that outlived its VM): an ordinary string now */
  }
  free(g->itab); g->itab = NULL; g->icap = g->icount = 0;
}
void nbS_intern_free_all(void) { intern_free(nb_G()); }

/* ---------------------------------------------------------------- lists */
nb_List *nbL_new(int cap) {
  nb_List *l = xmalloc(sizeof *l);
  l->h.rc = 1; l->h.type = NB_TLIST; l->n = 0; l->cap = cap > 0 ? cap : 0;
  nbO_track(&l->h);
  l->items = l->cap ? xmalloc(sizeof(nb_Value) * (size_t)l->cap) : NULL;
  return l;
}
bool nbL_try_reserve(nb_List *l, size_t n) {
  if (n <= (size_t)l->cap) return true;
  /* input-controlled growth is checked against NB_MAX_LIST (nbL_reserve);
  ** the room stays within it too, so a list with room to spare is within it */
  if (n > (size_t)INT32_MAX) { fputs("nabla: internal error: a list past 2^31 items\n", stderr); abort(); }
  size_t lim = n <= NB_MAX_LIST ? NB_MAX_LIST : n, old = (size_t)l->cap;
  size_t cap = old ? old * 2 : 4;
  if (cap < n) cap = n;
  if (cap > lim) cap = lim;
  nb_Value *items = realloc(l->items, sizeof(nb_Value) * cap);
  if (!items) {
    /* no room to double: a quarter more (still geometric), or exactly n for one large request */
    size_t less = n > old + 1 ? n : old + old / 4;
    if (less < n) less = n;
    if (less > lim) less = lim;
    if (less < cap) items = realloc(l->items, sizeof(nb_Value) * (cap = less));
  }
  if (!items) return false;
  l->items = items; l->cap = (int)cap;
  return true;
}
void nbL_push(nb_List *l, nb_Value v) {
  if (l->n == l->cap && !nbL_try_reserve(l, (size_t)l->n + 1) && !(reserve_release() && nbL_try_reserve(l, (size_t)l->n + 1))) out_of_memory();
  l->items[l->n++] = v;
}

/* ---------------------------------------------------------------- records */
nb_Rec *nbR_new(int cap) {
  nb_Rec *r = xmalloc(sizeof *r);
  r->h.rc = 1; r->h.type = NB_TREC; r->n = 0; r->cap = cap > 0 ? cap : 0;
  r->index = NULL; r->icap = r->indexed = 0;
  nbO_track(&r->h);
  r->keys = r->cap ? xmalloc(sizeof(nb_Str *) * (size_t)r->cap) : NULL;
  r->vals = r->cap ? xmalloc(sizeof(nb_Value) * (size_t)r->cap) : NULL;
  return r;
}
/* A record used as a dictionary (a vocabulary of 50,000 words) must not
** search its keys one by one: past REC_INDEX_MIN keys it gets a hash index,
** open addressing over the keys' own hashes, each entry a key's position + 1
** (0: empty), at most half full.  The index is a cache of the key array: the
** first lookup that needs it builds it, later ones add the keys appended
** since (`indexed` of them are in it, so code that appends to keys directly,
** ltio's loader, stays covered), and removing a key (positions shift) drops
** it.  Without the memory for it, lookups go on searching one by one. */
#define REC_INDEX_MIN 16

static void rec_index_drop(nb_Rec *r) { free(r->index); r->index = NULL; r->icap = r->indexed = 0; }
static void rec_index_put(nb_Rec *r, int pos) {
  uint32_t mask = (uint32_t)r->icap - 1, i = nbS_hashof(r->keys[pos]) & mask;
  while (r->index[i]) i = (i + 1) & mask;
  r->index[i] = pos + 1;
}
/* brings the index up to the keys; false when there is none (too few keys,
** or no memory for it) */
static bool rec_index_sync(nb_Rec *r) {
  if (r->n <= REC_INDEX_MIN) return false;
  if (r->indexed == r->n) return true;
  if (r->n < r->indexed) rec_index_drop(r);   /* cleared by the cycle collector */
  if ((size_t)r->n * 2 > (size_t)r->icap) {   /* grow (or build): room for twice as many keys again */
    size_t cap = 64;
    while (cap < (size_t)r->n * 4) cap *= 2;
    int32_t *ix = calloc(cap, sizeof *ix);
    if (!ix) return false;
    free(r->index); r->index = ix; r->icap = (int)cap; r->indexed = 0;
  }
  for (; r->indexed < r->n; r->indexed++) rec_index_put(r, r->indexed);
  return true;
}
/* the position of the key with these bytes, -1 if none; str: the key as a
** string (its hash is used; an interned one is compared by pointer, as
** record keys are interned), or NULL */
static int rec_find(const nb_Rec *cr, const char *s, size_t len, const nb_Str *str) {
  nb_Rec *r = (nb_Rec *)cr;   /* the index is a cache: finding may build it */
  const nb_Str *interned = str && str->interned ? str : NULL;
  if (rec_index_sync(r)) {
    uint32_t mask = (uint32_t)r->icap - 1, hash = str ? nbS_hashof(str) : nbS_hash(s, len);
    for (uint32_t i = hash & mask; r->index[i]; i = (i + 1) & mask) {
      const nb_Str *k = r->keys[r->index[i] - 1];
      if (interned ? k == interned : nbS_hashof(k) == hash && k->len == len && memcmp(k->data, s, len) == 0) return r->index[i] - 1;
    }
    return -1;
  }
  if (interned) {
    for (int i = 0; i < r->n; i++) if (r->keys[i] == interned) return i;
    return -1;
  }
  for (int i = 0; i < r->n; i++)
    if (r->keys[i]->len == len && memcmp(r->keys[i]->data, s, len) == 0) return i;
  return -1;
}
int nbR_find(const nb_Rec *r, const nb_Str *key) {
  return rec_find(r, key->data, key->len, key);
}
int nbR_find_cstr(const nb_Rec *r, const char *key) {
  return rec_find(r, key, strlen(key), NULL);
}
void nbR_set(nb_Rec *r, nb_Str *key, nb_Value v) {
  int i = nbR_find(r, key);
  if (i >= 0) { nb_store(&r->vals[i], v); return; }
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 4;
    r->keys = xrealloc(r->keys, sizeof(nb_Str *) * (size_t)r->cap);
    r->vals = xrealloc(r->vals, sizeof(nb_Value) * (size_t)r->cap);
  }
  r->keys[r->n] = nbS_intern_str(key);
  r->vals[r->n] = v;
  r->n++;
}
void nbR_set_cstr(nb_Rec *r, const char *key, nb_Value v) {
  nb_Str *k = nbS_intern(key, strlen(key));
  nbR_set(r, k, v);
  nb_decref(nb_strv(k));
}
nb_Value nbR_get_cstr(const nb_Rec *r, const char *key) {
  int i = nbR_find_cstr(r, key);
  return i >= 0 ? r->vals[i] : nb_undef();
}
static bool is_code(nb_Value v) { return v.t == NB_TFUNC || v.t == NB_TBUILTIN; }
nb_Value nbR_method_cstr(const nb_Rec *r, const char *key) {
  nb_Value v = nbR_get_cstr(r, key);
  /* one level of callable record (compile's {__call}, a progress bar's set): no recursion on data */
  if (is_code(v) || (v.t == NB_TREC && is_code(nbR_get_cstr(nb_rec(v), "__call")))) return v;
  return nb_undef();
}
bool nbR_remove(nb_Rec *r, const nb_Str *key) {
  int i = nbR_find(r, key);
  if (i < 0) return false;
  nb_decref(nb_strv(r->keys[i])); nb_decref(r->vals[i]);
  memmove(r->keys + i, r->keys + i + 1, sizeof(nb_Str *) * (size_t)(r->n - i - 1));
  memmove(r->vals + i, r->vals + i + 1, sizeof(nb_Value) * (size_t)(r->n - i - 1));
  r->n--;
  rec_index_drop(r);
  return true;
}

nb_Range *nbG_range_k(double start, double stop, double step, int kind, int stopkind) {
  nb_Range *r = xmalloc(sizeof *r);
  r->h.rc = 1; r->h.type = NB_TRANGE; r->start = start; r->stop = stop; r->step = step;
  r->kind = (uint8_t)kind; r->stopkind = (uint8_t)stopkind;
  return r;
}
nb_Range *nbG_range(double start, double stop, double step) { return nbG_range_k(start, stop, step, NB_KINT, NB_KINT); }
double nbG_range_len(const nb_Range *r) {
  double n = ceil((r->stop - r->start) / r->step);
  return n > 0 ? n : 0;
}

nb_Handle *nbH_new(const char *kind, void *ptr, void (*finalize)(void *)) {
  nb_Handle *h = xmalloc(sizeof *h);
  h->h.rc = 1; h->h.type = NB_THANDLE; h->kind = kind; h->ptr = ptr; h->finalize = finalize;
  return h;
}

/* ---------------------------------------------------------------- freeing
** Freeing is iterative: a released container pushes its children on a
** pending stack (nb_Global.pending) instead of recursing, so dropping a list
** nested a million deep cannot overflow the C stack.  The stack belongs to
** the bound state only as scratch space: any state's stack can drain any
** value, which is what makes a wrong binding harmless here. */
static void untrack(nb_Obj *o);
static void push_pending(nb_Global *g, nb_Value v) {
  if (g->npending == g->cappending) {
    size_t cap = g->cappending ? g->cappending * 2 : 64;
    nb_Value *p = realloc(g->pending, sizeof(nb_Value) * cap);
    if (!p) {
      /* out of memory (freeing is how a program that filled it gets it
      ** back): the dead object's own header links it instead, its collector
      ** links being unused once it is untracked; its type is in the header */
      untrack(v.u.o);
      v.u.o->gc_next = g->pending_overflow; g->pending_overflow = v.u.o;
      return;
    }
    g->pending = p; g->cappending = cap;
  }
  g->pending[g->npending++] = v;
}
static bool pop_pending(nb_Global *g, nb_Value *v) {
  if (g->npending) { *v = g->pending[--g->npending]; return true; }
  nb_Obj *o = g->pending_overflow;
  if (!o) return false;
  g->pending_overflow = o->gc_next;
  *v = nb_obj(o->type, o);
  return true;
}
static void drop_child(nb_Global *g, nb_Value v) {
  if (!nb_isobj(v)) return;
  if (v.t == NB_TTENSOR) { nbO_release_tensor(v.u.p); return; }
  if (--v.u.o->rc == 0) push_pending(g, v);
}

static void free_one(nb_Global *g, nb_Value v) {
  if (v.t == NB_TLIST || v.t == NB_TREC || v.t == NB_TFUNC || v.t == NB_TCELL) untrack(v.u.o);
  switch (v.t) {
  case NB_TSTR: free(v.u.p); break;
  case NB_TLIST: {
    nb_List *l = v.u.p;
    for (int i = 0; i < l->n; i++) drop_child(g, l->items[i]);
    free(l->items); free(l); break;
  }
  case NB_TREC: {
    nb_Rec *r = v.u.p;
    for (int i = 0; i < r->n; i++) { drop_child(g, nb_strv(r->keys[i])); drop_child(g, r->vals[i]); }
    free(r->keys); free(r->vals); free(r->index); free(r); break;
  }
  case NB_TFUNC: {
    nb_Func *f = v.u.p;
    for (int i = 0; i < f->ncaps; i++) drop_child(g, nb_obj(NB_TCELL, f->caps[i]));
    nbP_proto_release(f->proto);   /* f->mod is a weak reference: the VM owns modules */
    free(f); break;
  }
  case NB_TCELL: { nb_Cell *c = v.u.p; drop_child(g, c->v); free(c); break; }
  case NB_TRANGE: free(v.u.p); break;
  case NB_TMODULE: nbM_free(v.u.p); break;
  case NB_THANDLE: { nb_Handle *h = v.u.p; if (h->finalize) h->finalize(h->ptr); free(h); break; }
  default: break;
  }
}

void nbO_free(nb_Value v) {
  nb_Global *g = nb_G();
  push_pending(g, v);
  if (g->freeing) return;      /* an outer nbO_free is draining the stack */
  g->freeing = 1;
  for (nb_Value d; pop_pending(g, &d);) free_one(g, d);
  g->freeing = 0;
  if (g->cappending > 4096) { free(g->pending); g->pending = NULL; g->cappending = 0; }
}

/* ---------------------------------------------------------------- printing */
const char *nb_typename(nb_Value v) {
  switch (v.t) {
  case NB_TNIL: return "nil"; case NB_TBOOL: return "bool"; case NB_TNUM: return "number";
  case NB_TSTR: return "string"; case NB_TLIST: return "list"; case NB_TREC: return "record";
  case NB_TFUNC: case NB_TBUILTIN: return "function"; case NB_TMODULE: return "module";
  case NB_TRANGE: return "range"; case NB_TTENSOR: return "tensor";
  case NB_THANDLE: return ((nb_Handle *)v.u.p)->kind;
  default: return "undefined";
  }
}

int nb_fmtnum(char *buf, size_t size, double x) {
  if (isnan(x)) return snprintf(buf, size, "nan");
  if (isinf(x)) return snprintf(buf, size, x > 0 ? "inf" : "-inf");
  if (x == 0) return snprintf(buf, size, "0");   /* an int has no -0 */
  if (fabs(x) < 9007199254740992.0 && x == (double)(long long)x) return snprintf(buf, size, "%lld", (long long)x);
  int n = 0;
  for (int prec = 1; prec <= 17; prec++) {
    n = snprintf(buf, size, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  return n;
}

/* Python's repr of a float: the shortest round-trip digits, exponent form
** from 1e16 up and below 1e-4 (as %g at that precision), and a ".0" on
** integral values so a float never reads as an int. */
int nb_fmtflt(char *buf, size_t size, double x) {
  if (isnan(x)) return snprintf(buf, size, "nan");
  if (isinf(x)) return snprintf(buf, size, x > 0 ? "inf" : "-inf");
  if (x == 0) return snprintf(buf, size, signbit(x) ? "-0.0" : "0.0");
  if (fabs(x) < 1e16 && x == floor(x)) return snprintf(buf, size, "%.0f.0", x);
  return nb_fmtnum(buf, size, x);
}
int nb_fmtval(char *buf, size_t size, nb_Value v) {
  return nb_isfloat(v) ? nb_fmtflt(buf, size, v.u.n) : nb_fmtnum(buf, size, v.u.n);
}

nb_Value nb_parsenum(const char *s, char **end) {
  char *e;
  double d = strtod(s, &e);
  if (end) *end = e;
  bool hex = false, isfloat = false;
  for (const char *p = s; p < e; p++) {
    char c = *p;
    if (c == 'x' || c == 'X') hex = true;
    else if (c == '.' || c == 'i' || c == 'I' || c == 'n' || c == 'N' || (!hex && (c == 'e' || c == 'E')) || (hex && (c == 'p' || c == 'P'))) isfloat = true;
  }
  return nb_numk(d, isfloat ? NB_KFLOAT : NB_KINT);
}

static void quote_str(nb_Buf *b, const nb_Str *s) {
  nbB_putc(b, '"');
  for (uint32_t i = 0; i < s->len; i++) {
    unsigned char c = (unsigned char)s->data[i];
    switch (c) {
    case '"': nbB_puts(b, "\\\""); break;
    case '\\': nbB_puts(b, "\\\\"); break;
    case '\n': nbB_puts(b, "\\n"); break;
    case '\t': nbB_puts(b, "\\t"); break;
    case '\r': nbB_puts(b, "\\r"); break;
    case '{': nbB_puts(b, "\\{"); break;
    default:
      if (c < 32 || c == 127) nbB_printf(b, "\\x%02x", c); else nbB_putc(b, (char)c);
    }
  }
  nbB_putc(b, '"');
}

static bool is_ident(const nb_Str *s) {
  if (s->len == 0) return false;
  for (uint32_t i = 0; i < s->len; i++) {
    char c = s->data[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

/* Printing recurses, at most MAX_PRINT_DEPTH levels (deeper: [...]).  A list
** or record among its own ancestors (a value that contains itself) prints as
** [...] / {...} at once, as Python's repr, instead of unfolding 64 levels
** (exponentially many lines when it holds itself twice); past NB_MAX_STR bytes
** of text nothing more is added (callers that make a string report it). */
#define MAX_PRINT_DEPTH 64
static bool on_path(const void *const *path, int depth, const void *o) {
  for (int i = 0; i < depth; i++) if (path[i] == o) return true;
  return false;
}
static void tostr(nb_Buf *b, nb_Value v, bool quote, int depth, const void **path);

static bool is_tree(nb_Value v) { return v.t == NB_TLIST || v.t == NB_TREC; }
static bool has_container(nb_Value v) {
  if (v.t == NB_TLIST) { nb_List *l = v.u.p; for (int i = 0; i < l->n; i++) if (is_tree(l->items[i])) return true; }
  if (v.t == NB_TREC) { nb_Rec *r = v.u.p; for (int i = 0; i < r->n; i++) if (is_tree(r->vals[i])) return true; }
  return false;
}

/* A model (a record with __call) prints as its structure, as torch prints a
** module: tensors as dtype[shape] (and their device and requires_grad), the
** __call function left out, one field per line where a field holds layers.
** Printing a tensor itself still shows its values.  path: as tostr's. */
static void model_str(nb_Buf *b, nb_Value v, int depth, int indent, const void **path) {
  if (b->n > NB_MAX_STR) return;
  if (v.t == NB_TTENSOR) {
    const nt_Tensor *t = v.u.p;
    char shp[256];
    nbB_printf(b, "%s%s", nt_dtype_name(t->dtype), nt_shape_str(t->shape, t->ndim, shp, sizeof shp));
    if (t->device != NT_CPU) nbB_printf(b, " %s", nt_device_name(t->device));
    if (t->requires_grad) nbB_puts(b, " requires_grad");
    return;
  }
  if (v.t != NB_TREC && v.t != NB_TLIST) { tostr(b, v, true, depth, path); return; }
  if (depth > MAX_PRINT_DEPTH || on_path(path, depth, v.u.p)) { nbB_puts(b, v.t == NB_TLIST ? "[...]" : "{...}"); return; }
  path[depth] = v.u.p;
  bool multi = has_container(v), rec = v.t == NB_TREC;
  int n = rec ? ((nb_Rec *)v.u.p)->n : ((nb_List *)v.u.p)->n, shown = 0;
  nbB_putc(b, rec ? '{' : '[');
  for (int i = 0; i < n && b->n <= NB_MAX_STR; i++) {
    nb_Str *k = rec ? ((nb_Rec *)v.u.p)->keys[i] : NULL;
    nb_Value x = rec ? ((nb_Rec *)v.u.p)->vals[i] : ((nb_List *)v.u.p)->items[i];
    if (k && k->len == 6 && !memcmp(k->data, "__call", 6)) continue;
    if (multi) { nbB_putc(b, '\n'); for (int j = 0; j < indent + 1; j++) nbB_puts(b, "  "); }
    else if (shown) nbB_puts(b, ", ");
    if (k) { if (is_ident(k)) nbB_add(b, k->data, k->len); else quote_str(b, k); nbB_puts(b, ": "); }
    model_str(b, x, depth + 1, indent + 1, path);
    if (multi) nbB_putc(b, ',');
    shown++;
  }
  if (multi) { nbB_putc(b, '\n'); for (int j = 0; j < indent; j++) nbB_puts(b, "  "); }
  nbB_putc(b, rec ? '}' : ']');
}

static void tostr(nb_Buf *b, nb_Value v, bool quote, int depth, const void **path) {
  char num[40];
  if (b->n > NB_MAX_STR) return;
  switch (v.t) {
  case NB_TNIL: nbB_puts(b, "nil"); break;
  case NB_TBOOL: nbB_puts(b, v.u.b ? "true" : "false"); break;
  case NB_TNUM: nb_fmtval(num, sizeof num, v); nbB_puts(b, num); break;
  case NB_TSTR: if (quote) quote_str(b, v.u.p); else nbB_add(b, nb_str(v)->data, nb_str(v)->len); break;
  case NB_TLIST: {
    nb_List *l = v.u.p;
    if (depth > MAX_PRINT_DEPTH || on_path(path, depth, l)) { nbB_puts(b, "[...]"); break; }
    path[depth] = l;
    nbB_putc(b, '[');
    for (int i = 0; i < l->n && b->n <= NB_MAX_STR; i++) { if (i) nbB_puts(b, ", "); tostr(b, l->items[i], true, depth + 1, path); }
    nbB_putc(b, ']'); break;
  }
  case NB_TREC: {
    nb_Rec *r = v.u.p;
    if (depth > MAX_PRINT_DEPTH || on_path(path, depth, r)) { nbB_puts(b, "{...}"); break; }
    if (nbR_method_cstr(r, "__call").t != NB_TUNDEF) { model_str(b, v, depth, depth, path); break; }
    path[depth] = r;
    nbB_putc(b, '{');
    for (int i = 0; i < r->n && b->n <= NB_MAX_STR; i++) {
      if (i) nbB_puts(b, ", ");
      if (is_ident(r->keys[i])) nbB_add(b, r->keys[i]->data, r->keys[i]->len); else quote_str(b, r->keys[i]);
      nbB_puts(b, ": ");
      tostr(b, r->vals[i], true, depth + 1, path);
    }
    nbB_putc(b, '}'); break;
  }
  case NB_TFUNC: nbB_printf(b, "<fn %s>", nbP_proto_name(nb_func(v)->proto)); break;
  case NB_TBUILTIN: nbB_printf(b, "<builtin %s>", nbC_name(v.u.bi)); break;
  case NB_TMODULE: nbB_printf(b, "<module %s>", nbM_name(v.u.p)); break;
  case NB_TRANGE: {
    nb_Range *r = v.u.p; char a[40], c[40];
    nb_fmtval(a, sizeof a, nb_numk(r->start, r->kind)); nb_fmtval(c, sizeof c, nb_numk(r->stop, r->stopkind));
    if (r->step == 1) nbB_printf(b, "%s..%s", a, c);
    else { char s[40]; nb_fmtval(s, sizeof s, nb_numk(r->step, r->kind)); nbB_printf(b, "range(%s, %s, %s)", a, c, s); }
    break;
  }
  case NB_TTENSOR: nbT_format(b, v.u.p); break;
  case NB_THANDLE: nbB_printf(b, "<%s>", ((nb_Handle *)v.u.p)->kind); break;
  default: nbB_puts(b, "<undefined>"); break;
  }
}
void nb_tostring(nb_Buf *b, nb_Value v, bool quote) {
  const void *path[MAX_PRINT_DEPTH + 2];
  tostr(b, v, quote, 0, path);
}

/* 1: equal, 0: not, -1: two distinct lists (or records) of one length,
** whose items decide */
static int eq_shallow(nb_Value a, nb_Value b) {
  if (a.t != b.t) return 0;
  switch (a.t) {
  case NB_TNIL: case NB_TUNDEF: return 1;
  case NB_TBOOL: return a.u.b == b.u.b;
  case NB_TNUM: return a.u.n == b.u.n;
  case NB_TBUILTIN: return a.u.bi == b.u.bi;
  case NB_TSTR: {
    nb_Str *x = a.u.p, *y = b.u.p;
    return x == y || (x->len == y->len && (!x->hashed || !y->hashed || x->hash == y->hash) && memcmp(x->data, y->data, x->len) == 0);
  }
  case NB_TLIST: return a.u.p == b.u.p ? 1 : nb_list(a)->n == nb_list(b)->n ? -1 : 0;
  case NB_TREC: return a.u.p == b.u.p ? 1 : nb_rec(a)->n == nb_rec(b)->n ? -1 : 0;
  case NB_TRANGE: {
    nb_Range *x = a.u.p, *y = b.u.p;
    return x->start == y->start && x->stop == y->stop && x->step == y->step;
  }
  default: return a.u.p == b.u.p;
  }
}

/* Equality of nested lists and records without recursion: a stack with one
** frame per level being compared (the pair and the next item), so a list
** nested a million deep compares in bounded C stack.  Two distinct values
** nested deeper than NB_MAX_NEST -- values that contain themselves are
** infinitely deep -- are an error rather than a guess. */
typedef struct EqFrame { nb_Value a, b; int i; } EqFrame;
int nbO_equal(nb_VM *vm, nb_Value a, nb_Value b, bool *out) {
  int r = eq_shallow(a, b);
  if (r >= 0) { *out = r; return NB_OK; }
  EqFrame *st = xmalloc(sizeof *st * 16); size_t n = 0, cap = 16;
  st[n++] = (EqFrame){ a, b, 0 };
  *out = true;
  while (n) {
    EqFrame *fr = &st[n - 1];
    nb_Value x, y;
    if (fr->a.t == NB_TLIST) {
      if (fr->i == nb_list(fr->a)->n) { n--; continue; }
      x = nb_list(fr->a)->items[fr->i]; y = nb_list(fr->b)->items[fr->i];
    } else {
      nb_Rec *ra = fr->a.u.p, *rb = fr->b.u.p;
      if (fr->i == ra->n) { n--; continue; }
      int j = nbR_find(rb, ra->keys[fr->i]);
      if (j < 0) { *out = false; break; }
      x = ra->vals[fr->i]; y = rb->vals[j];
    }
    fr->i++;
    r = eq_shallow(x, y);
    if (r == 0) { *out = false; break; }
    if (r > 0) continue;
    if (n >= NB_MAX_NEST) {
      free(st);
      return nb_error_kind(vm, "RecursionError", "==: values nested more than %d deep (or containing themselves)", NB_MAX_NEST);
    }
    if (n == cap) { cap *= 2; st = xrealloc(st, sizeof *st * cap); }
    st[n++] = (EqFrame){ x, y, 0 };
  }
  free(st);
  return NB_OK;
}

bool nb_truthy(nb_Value v) {
  switch (v.t) {
  case NB_TNIL: case NB_TUNDEF: return false;
  case NB_TBOOL: return v.u.b;
  case NB_TNUM: return v.u.n != 0;
  case NB_TSTR: return nb_str(v)->len != 0;
  case NB_TLIST: return nb_list(v)->n != 0;
  default: return true;
  }
}

/* ---------------------------------------------------------------- cycles
** The tracked containers of a state form a circular list through their
** headers (nb_Global.gc_head); gc_count is its length.  An object unlinks
** itself (untrack) without knowing its state, so only the count depends on
** the binding being the object's own VM. */

/* When to collect.  By count, as CPython: containers tracked past twice the
** survivors of the last collection (+10,000).  By bytes: a record holding a
** 4 MB tensor is one small container, so a loop making a self-referencing
** one per step would grow by gigabytes before the count moved; tensor storage
** allocated since the last collection past max(64 MB, the tensor bytes alive
** after it) makes one due too (nt_set_pressure_hook).  Either way collection
** is only *requested*: the owning VM's poll flag is raised and the evaluator
** collects at its next poll point (a loop iteration or a call), where every
** value it holds is counted, never in the middle of building an object. */
#define GC_MIN_BYTES ((size_t)64 << 20)

void nbO_heap_init(nb_Global *g) {
  g->gc_head.gc_prev = g->gc_head.gc_next = &g->gc_head;
  g->gc_count = 0;
  g->gc_count_limit = NB_GC_MIN_COUNT;
  g->gc_stress = -1;
}

/* Tears down what nb_vm_free left: by then the VM has dropped its values and
** collected, so what is still tracked is held from outside the VM (a leak,
** or a process-wide table); it is unlinked, not freed, so the list head can
** go.  The intern table goes too (see nbS_intern). */
void nbO_heap_free(nb_Global *g) {
  nb_Obj *o = g->gc_head.gc_next;
  while (o != &g->gc_head) { nb_Obj *n = o->gc_next; o->gc_prev = o->gc_next = NULL; o->gcflags = 0; o = n; }
  g->gc_head.gc_prev = g->gc_head.gc_next = &g->gc_head;
  g->gc_count = 0;
  intern_free(g);
  free(g->pending); g->pending = NULL; g->npending = g->cappending = 0;
}

/* tensor/'s pressure hook has no argument: it runs on the thread allocating
** the tensor, which is the thread running the VM (the thread rule, lvm.h), so
** the bound state is the one to ask. */
static void gc_request(void) {
  nb_Global *g = nb_G();
  g->gc_due = true;
  if (g->gc_poll) *g->gc_poll = 1;
}
/* NABLA_GC_STRESS=1 (for tests): a collection due after every new container
** and tensor, so every poll point collects -- what makes a value held
** without a count show up under ASan */
static void gc_rearm(nb_Global *g) {
  if (g->gc_stress < 0) { const char *e = getenv("NABLA_GC_STRESS"); g->gc_stress = e && *e == '1'; }
  g->gc_due = false;
  g->gc_count_limit = g->gc_stress ? 0 : 2 * g->gc_count + NB_GC_MIN_COUNT;
  size_t live = nt_storage_bytes();
  nt_set_pressure_hook(gc_request, g->gc_stress ? 1 : live > GC_MIN_BYTES ? live : GC_MIN_BYTES);
}
/* The first attach (the VM's first run) arms the thresholds. */
void nbO_gc_attach(volatile sig_atomic_t *poll) {
  nb_Global *g = nb_G();
  if (!g->gc_armed) { g->gc_armed = true; gc_rearm(g); }
  g->gc_poll = poll;
  if (g->gc_due && poll) *poll = 1;
}
bool nbO_gc_due(void) { return nb_G()->gc_due; }

void nbO_track(nb_Obj *o) {
  nb_Global *g = nb_G();
  o->gcflags = 1;
  o->gc_next = g->gc_head.gc_next; o->gc_prev = &g->gc_head;
  g->gc_head.gc_next->gc_prev = o; g->gc_head.gc_next = o;
  if (++g->gc_count > g->gc_count_limit && !g->gc_due) gc_request();
}
static void untrack(nb_Obj *o) {
  if (!o->gcflags) return;
  o->gc_prev->gc_next = o->gc_next; o->gc_next->gc_prev = o->gc_prev;
  o->gcflags = 0; nb_G()->gc_count--;
}
size_t nbO_tracked(void) { return nb_G()->gc_count; }

static bool is_container(nb_Value v) { return (v.t == NB_TLIST || v.t == NB_TREC || v.t == NB_TFUNC || v.t == NB_TCELL) && v.u.o->gcflags; }

/* calls fn on every container child of o */
static void each_child(nb_Obj *o, void (*fn)(nb_Obj *child, void *ud), void *ud) {
  switch (o->type) {
  case NB_TLIST: { nb_List *l = (nb_List *)o; for (int i = 0; i < l->n; i++) if (is_container(l->items[i])) fn(l->items[i].u.o, ud); break; }
  case NB_TREC: { nb_Rec *r = (nb_Rec *)o; for (int i = 0; i < r->n; i++) if (is_container(r->vals[i])) fn(r->vals[i].u.o, ud); break; }
  case NB_TFUNC: { nb_Func *f = (nb_Func *)o; for (int i = 0; i < f->ncaps; i++) fn(&f->caps[i]->h, ud); break; }
  case NB_TCELL: { nb_Cell *c = (nb_Cell *)o; if (is_container(c->v)) fn(c->v.u.o, ud); break; }
  default: break;
  }
}
static void sub_ref(nb_Obj *c, void *ud) { (void)ud; c->gc_refs--; }
/* The collector's work lists grow with the heap; when memory has run out
** (a program that filled it with objects is the usual reason a collection is
** due) growing one fails, and the collection is abandoned whole: nothing is
** freed that was not proven unreachable, and the program goes on. */
typedef struct Stack { nb_Obj **v; size_t n, cap; bool failed; } Stack;
static void spush(Stack *s, nb_Obj *o) {
  if (s->failed) return;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 256;
    nb_Obj **v = realloc(s->v, sizeof(nb_Obj *) * cap);
    if (!v) { s->failed = true; return; }
    s->v = v; s->cap = cap;
  }
  s->v[s->n++] = o;
}
/* gc_refs > 0 after subtracting internal references: reachable from outside.
** Marking uses gc_refs = INT32_MIN as "reached". */
#define REACHED INT32_MIN
static void mark(nb_Obj *c, void *ud) { if (c->gc_refs != REACHED) { c->gc_refs = REACHED; spush(ud, c); } }

static void clear_children(nb_Obj *o) {
  switch (o->type) {
  case NB_TLIST: { nb_List *l = (nb_List *)o; int n = l->n; l->n = 0; for (int i = 0; i < n; i++) nb_decref(l->items[i]); break; }
  case NB_TREC: { nb_Rec *r = (nb_Rec *)o; int n = r->n; r->n = 0; for (int i = 0; i < n; i++) { nb_decref(nb_strv(r->keys[i])); nb_decref(r->vals[i]); } break; }
  case NB_TFUNC: { nb_Func *f = (nb_Func *)o; int n = f->ncaps; f->ncaps = 0; for (int i = 0; i < n; i++) nb_decref(nb_obj(NB_TCELL, f->caps[i])); break; }
  case NB_TCELL: { nb_Cell *c = (nb_Cell *)o; nb_Value v = c->v; c->v = nb_nil(); nb_decref(v); break; }
  default: break;
  }
}

size_t nbO_collect(void) {
  nb_Global *g = nb_G();
  nb_Obj *o;
  for (o = g->gc_head.gc_next; o != &g->gc_head; o = o->gc_next) o->gc_refs = o->rc;
  for (o = g->gc_head.gc_next; o != &g->gc_head; o = o->gc_next) each_child(o, sub_ref, NULL);
  Stack st = {0};
  for (o = g->gc_head.gc_next; o != &g->gc_head; o = o->gc_next) if (o->gc_refs > 0) { o->gc_refs = REACHED; spush(&st, o); }
  while (st.n && !st.failed) { nb_Obj *x = st.v[--st.n]; each_child(x, mark, &st); }
  /* everything not reached is garbage held only by cycles */
  Stack dead = {0};
  if (!st.failed)
    for (o = g->gc_head.gc_next; o != &g->gc_head; o = o->gc_next) if (o->gc_refs != REACHED) spush(&dead, o);
  if (st.failed || dead.failed) { free(st.v); free(dead.v); gc_rearm(g); return 0; }
  for (size_t i = 0; i < dead.n; i++) dead.v[i]->rc++;          /* keep alive while clearing */
  for (size_t i = 0; i < dead.n; i++) clear_children(dead.v[i]);
  for (size_t i = 0; i < dead.n; i++) nb_decref(nb_obj(dead.v[i]->type, dead.v[i]));
  size_t n = dead.n;
  free(st.v); free(dead.v);
  gc_rearm(g);
  return n;
}
