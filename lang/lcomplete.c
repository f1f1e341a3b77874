/*
** lcomplete.c — questions front ends ask about source text: is it complete
** (the REPL's continuation prompt, Jupyter's is_complete), what completes the
** word at the cursor, and what is the thing at the cursor (inspect).
*/
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

nb_Completeness nb_is_complete(const char *src, const char **indent) {
  if (indent) *indent = "";
  nb_Lexer lx; nbX_init(&lx, src, strlen(src));
  int depth = 0, braces = 0;
  nb_TokKind last = TK_EOF;
  for (;;) {
    nb_Token t = nbX_next(&lx);
    if (t.kind == TK_EOF) break;
    if (t.kind == TK_ERROR) {
      /* a string still open at the end: the next lines may close it (a
      ** one-line string whose line ended is an error now) */
      if (t.unterminated & NB_UNTERMINATED_EOF) return NB_INCOMPLETE;
      return NB_INVALID;
    }
    if (t.kind == TK_LPAREN || t.kind == TK_LBRACKET || t.kind == TK_LBRACE) { depth++; if (t.kind == TK_LBRACE) braces++; }
    if (t.kind == TK_RPAREN || t.kind == TK_RBRACKET || t.kind == TK_RBRACE) { if (--depth < 0) return NB_INVALID; if (t.kind == TK_RBRACE) braces--; }
    if (t.kind != TK_NEWLINE) last = t.kind;
  }
  if (depth > 0) { if (indent) *indent = braces > 0 ? "    " : ""; return NB_INCOMPLETE; }
  (void)last;
  nb_Node *prog;
  /* With no VM bound, the names parsed go to a state of their own, freed
  ** here, so the process table stays as the libraries left it (lvm.h). */
  nb_Global tmp, *bound = nb_state_bound_;
  if (!bound) { memset(&tmp, 0, sizeof tmp); nbO_heap_init(&tmp); nb_state_bound_ = &tmp; }
  nb_Chunk *c = nbP_parse(NULL, src, strlen(src), "<input>", &prog);
  nb_Completeness r = prog ? NB_COMPLETE : (nbP_last_error_at_eof ? NB_INCOMPLETE : NB_INVALID);
  nbP_chunk_release(c);
  if (!bound) { nbO_heap_free(&tmp); nb_state_bound_ = NULL; }
  return r;
}

/* ------------------------------------------------------------ completion */
typedef struct Names { char **v; int n, cap; } Names;
static void add(Names *ns, const char *s, size_t n, const char *prefix, size_t plen) {
  if (n < plen || strncmp(s, prefix, plen) != 0) return;
  for (int i = 0; i < ns->n; i++) if (strlen(ns->v[i]) == n && strncmp(ns->v[i], s, n) == 0) return;
  if (ns->n == ns->cap) { ns->cap = ns->cap ? ns->cap * 2 : 32; ns->v = realloc(ns->v, sizeof(char *) * (size_t)ns->cap); if (!ns->v) abort(); }
  ns->v[ns->n] = strndup(s, n); ns->n++;
}
static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int isid(int c) { return isalnum(c) || c == '_' || c >= 0x80; }

/* the value of a dotted chain of names, looked up without running code */
static bool lookup_chain(nb_VM *vm, const char *s, size_t len, nb_Value *out, nb_Value *tmp) {
  size_t i = 0;
  nb_Value cur = nb_undef();
  while (i < len) {
    size_t st = i;
    while (i < len && isid((unsigned char)s[i])) i++;
    if (i == st) return false;
    if (cur.t == NB_TUNDEF) {
      int g = nbM_global_find(vm->main, s + st, i - st);
      if (g < 0 || vm->main->vals[g].t == NB_TUNDEF) {
        int b = nbC_lookup(s + st, i - st);
        if (b < 0) return false;
        const nb_Builtin *bi = nbC_at(b);
        if (!bi->fn && bi->value) {   /* a made value (the cuda record): keep one for lookups */
          nb_decref(*tmp); *tmp = nb_nil();
          if (bi->value(vm, tmp)) { nb_decref(vm->err); vm->err = nb_nil(); return false; }
          cur = *tmp;
        } else if (!bi->fn) cur = nb_flt(strtod(bi->params, NULL));
        else cur = nb_builtinv(bi);
      } else cur = vm->main->vals[g];
    } else if (cur.t == NB_TREC) {
      nb_Str *k = nbS_new(s + st, i - st);
      int j = nbR_find(cur.u.p, k); nb_decref(nb_strv(k));
      if (j < 0) return false;
      cur = nb_rec(cur)->vals[j];
    } else if (cur.t == NB_TMODULE) {
      int g = nbM_global_find(cur.u.p, s + st, i - st);
      if (g < 0) return false;
      cur = ((nb_Module *)cur.u.p)->vals[g];
    } else return false;
    if (i < len) { if (s[i] != '.') return false; i++; }
  }
  *out = cur;
  return cur.t != NB_TUNDEF;
}

bool nb_lookup_path(nb_VM *vm, const char *path, size_t len, nb_Value *out) {
  nb_state_bind(vm);
  nb_Value tmp = nb_nil(), v;
  bool ok = lookup_chain(vm, path, len, &v, &tmp);
  if (ok) { nb_incref(v); *out = v; }
  nb_decref(tmp);
  return ok;
}

static const char *const tensor_fields[] = { "shape", "dtype", "device", "ndim", "T", "grad", "requires_grad", "item", "tolist", NULL };

void nb_complete(nb_VM *vm, const char *src, int cursor, nb_Completions *out) {
  nb_state_bind(vm);
  memset(out, 0, sizeof *out);
  size_t len = strlen(src);
  if (cursor < 0 || (size_t)cursor > len) cursor = (int)len;
  int start = cursor;
  while (start > 0 && isid((unsigned char)src[start - 1])) start--;
  const char *prefix = src + start; size_t plen = (size_t)(cursor - start);
  Names ns = {0};
  if (start > 0 && src[start - 1] == '.') {
    int cs = start - 1;
    while (cs > 0 && (isid((unsigned char)src[cs - 1]) || src[cs - 1] == '.')) cs--;
    nb_Value v, tmp = nb_nil();
    if (lookup_chain(vm, src + cs, (size_t)(start - 1 - cs), &v, &tmp)) {
      if (v.t == NB_TREC) for (int i = 0; i < nb_rec(v)->n; i++) add(&ns, nb_rec(v)->keys[i]->data, nb_rec(v)->keys[i]->len, prefix, plen);
      if (v.t == NB_TMODULE) { nb_Module *m = v.u.p; for (int i = 0; i < m->n; i++) if (m->vals[i].t != NB_TUNDEF) add(&ns, m->names[i]->data, m->names[i]->len, prefix, plen); }
      if (v.t == NB_TTENSOR) for (int i = 0; tensor_fields[i]; i++) add(&ns, tensor_fields[i], strlen(tensor_fields[i]), prefix, plen);
      /* uniform call syntax: any function can follow a dot */
      if (v.t != NB_TMODULE) for (int i = 0; i < nbC_count(); i++) add(&ns, nbC_at(i)->name, strlen(nbC_at(i)->name), prefix, plen);
    }
    nb_decref(tmp);
  } else {
    for (int i = 0; i < vm->main->n; i++) if (vm->main->vals[i].t != NB_TUNDEF) add(&ns, vm->main->names[i]->data, vm->main->names[i]->len, prefix, plen);
    for (int i = 0; nbX_keywords[i]; i++) add(&ns, nbX_keywords[i], strlen(nbX_keywords[i]), prefix, plen);
    for (int i = 0; i < nbC_count(); i++) add(&ns, nbC_at(i)->name, strlen(nbC_at(i)->name), prefix, plen);
  }
  if (ns.n > 1) qsort(ns.v, (size_t)ns.n, sizeof(char *), cmp);   /* qsort(NULL, 0) is UB */
  out->items = ns.v; out->n = ns.n; out->start = start; out->end = cursor;
}

void nb_completions_free(nb_Completions *c) {
  for (int i = 0; i < c->n; i++) free(c->items[i]);
  free(c->items); c->items = NULL; c->n = 0;
}

/* ------------------------------------------------------------ inspect */
char *nb_inspect(nb_VM *vm, const char *src, int cursor) {
  nb_state_bind(vm);
  size_t len = strlen(src);
  if (cursor < 0 || (size_t)cursor > len) cursor = (int)len;
  int s = cursor, e = cursor;
  while (s > 0 && (isid((unsigned char)src[s - 1]) || src[s - 1] == '.')) s--;
  while ((size_t)e < len && isid((unsigned char)src[e])) e++;
  /* inside a call's parentheses with nothing under the cursor: the callee */
  if (s == e) {
    int k = cursor - 1, d = 0;
    while (k >= 0) { if (src[k] == ')') d++; else if (src[k] == '(') { if (d == 0) break; d--; } k--; }
    if (k <= 0) return NULL;
    e = k; s = k;
    while (s > 0 && (isid((unsigned char)src[s - 1]) || src[s - 1] == '.')) s--;
    if (s == e) return NULL;
  }
  nb_Value v, tmp = nb_nil();
  if (!lookup_chain(vm, src + s, (size_t)(e - s), &v, &tmp)) {
    /* a.f where f is not a field: the function f (uniform call syntax) */
    int d = e - 1; while (d > s && src[d] != '.') d--;
    if (src[d] != '.' || !lookup_chain(vm, src + d + 1, (size_t)(e - d - 1), &v, &tmp)) { nb_decref(tmp); return NULL; }
  }
  nb_Buf b = {0};
  if (v.t == NB_TBUILTIN || v.t == NB_TFUNC) {
    nb_Value docv; extern int nbC_doc_value(nb_VM *, nb_Value, nb_Value *);
    if (nbC_doc_value(vm, v, &docv) == NB_OK && docv.t == NB_TSTR) nbB_add(&b, nb_str(docv)->data, nb_str(docv)->len);
    nb_decref(docv);
  } else if (v.t == NB_TTENSOR) {
    nbT_describe(vm, v, &b);
  } else {
    nbB_printf(&b, "%.*s: %s\n", e - s, src + s, nb_typename(v));
    nb_Buf r = {0}; nb_tostring(&r, v, true);
    if (r.n > 2000) { r.n = 2000; nbB_puts(&b, nbB_cstr(&r)); nbB_puts(&b, "..."); } else nbB_puts(&b, nbB_cstr(&r));
    nbB_free(&r);
  }
  nb_decref(tmp);
  return b.p;
}
