/*
** lerror.c — errors are values: a record {name, message, file, line, col,
** source, trace}.  Raising sets vm->err and returns NB_ERR; the first node
** that sees the error unwinding records where it happened, and each call
** boundary adds a line to the stack trace.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lvm.h"

static int raise_msg(nb_VM *vm, const char *kind, const char *msg) {
  nb_Rec *r = nbR_new(8);
  nbR_set_cstr(r, "name", nb_strv(nbS_cstr(kind)));
  nbR_set_cstr(r, "message", nb_strv(nbS_cstr(msg)));
  return nb_raise(vm, nb_obj(NB_TREC, r));
}

int nb_error_kind(nb_VM *vm, const char *kind, const char *fmt, ...) {
  char msg[1024]; va_list ap;
  va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  return raise_msg(vm, kind, msg);
}
int nb_error(nb_VM *vm, const char *fmt, ...) {
  char msg[1024]; va_list ap;
  va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  return raise_msg(vm, "Error", msg);
}

/* Raises any value: a record with a message is raised as is (re-raise keeps
** its name), anything else becomes the message of an Error. */
int nb_raise(nb_VM *vm, nb_Value v) {
  if (v.t != NB_TREC || nbR_get_cstr(v.u.p, "message").t == NB_TUNDEF) {
    nb_Str *s = nbS_tostr(v);
    nb_decref(v);
    nb_Rec *r = nbR_new(8);
    nbR_set_cstr(r, "name", nb_strv(nbS_cstr("Error")));
    nbR_set_cstr(r, "message", nb_strv(s));
    v = nb_obj(NB_TREC, r);
  } else if (nbR_get_cstr(v.u.p, "name").t == NB_TUNDEF) {
    nbR_set_cstr(v.u.p, "name", nb_strv(nbS_cstr("Error")));
  }
  /* a fresh raise gets a fresh location and trace */
  nb_Rec *r = v.u.p;
  nb_Str *k = nbS_intern("trace", 5); nbR_remove(r, k); nb_decref(nb_strv(k));
  nb_decref(vm->err);
  vm->err = v;
  vm->err_located = false;
  return NB_ERR;
}

bool nbE_catchable(nb_VM *vm) {
  if (vm->err.t != NB_TREC) return true;
  nb_Value n = nbR_get_cstr(vm->err.u.p, "name");
  if (n.t != NB_TSTR) return true;
  return strcmp(nb_str(n)->data, "Interrupted") != 0 && strcmp(nb_str(n)->data, "StepLimit") != 0;
}

/* The source line holding [pos, end) and a caret line under that span. */
void nbE_source_caret(nb_Buf *b, const char *src, size_t len, uint32_t pos, uint32_t end, int line) {
  if (!src || pos > len) return;
  size_t ls = pos, le = pos;
  while (ls > 0 && src[ls - 1] != '\n') ls--;
  while (le < len && src[le] != '\n') le++;
  if (end > le) end = (uint32_t)le;
  if (end <= pos) end = pos + 1;
  char num[16]; int w = snprintf(num, sizeof num, "%d", line);
  nbB_printf(b, " %s | ", num);
  nbB_add(b, src + ls, le - ls);
  nbB_printf(b, "\n %*s | ", w, "");
  for (size_t i = ls; i < pos; i++) nbB_putc(b, src[i] == '\t' ? '\t' : ' ');
  for (size_t i = pos; i < end; i++) nbB_putc(b, '^');
}

static nb_List *trace_list(nb_Rec *r) {
  nb_Value t = nbR_get_cstr(r, "trace");
  if (t.t == NB_TLIST) return t.u.p;
  nb_List *l = nbL_new(4);
  nbR_set_cstr(r, "trace", nb_obj(NB_TLIST, l));
  return l;
}

static void add_trace(nb_Rec *r, const char *fname, nb_Chunk *c, const nb_Node *n) {
  nb_List *l = trace_list(r);
  if (l->n >= 200) return;   /* deep recursion: the first 200 frames say enough */
  nbL_push(l, nb_strv(nbS_fmt("%s at %s:%d:%d", fname, c ? c->filename : "?", n ? n->line : 0, n ? n->col : 0)));
}

void nbE_locate(nb_VM *vm, nb_Chunk *c, const nb_Node *n) {
  vm->err_located = true;
  if (vm->err.t != NB_TREC || !n) return;
  nb_Rec *r = vm->err.u.p;
  nbR_set_cstr(r, "file", nb_strv(nbS_cstr(c ? c->filename : "?")));
  nbR_set_cstr(r, "line", nb_int(n->line));
  nbR_set_cstr(r, "col", nb_int(n->col));
  if (c) {
    nb_Buf b = {0};
    nbE_source_caret(&b, c->src, c->len, n->pos, n->end, n->line);
    nbR_set_cstr(r, "source", nb_strv(nbS_new(b.p ? b.p : "", b.n)));
    nbB_free(&b);
  }
  const nb_Frame *f = vm->frame;
  add_trace(r, f && f->fn ? nbP_proto_name(f->fn->proto) : "<main>", c, n);
}

void nbE_add_frame(nb_VM *vm, const char *fname, nb_Chunk *c, const nb_Node *n) {
  if (vm->err.t == NB_TREC) add_trace(vm->err.u.p, fname, c, n);
}

__thread uint32_t nbP_last_error_pos;
__thread bool nbP_last_error_at_eof;

int nbP_syntax_error(nb_VM *vm, nb_Chunk *c, uint32_t pos, uint32_t end, int line, int col, const char *fmt, ...) {
  char msg[512]; va_list ap;
  va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  nbP_last_error_pos = pos;
  nbP_last_error_at_eof = pos >= c->len;
  if (!vm) return NB_ERR;
  raise_msg(vm, "SyntaxError", msg);
  nb_Rec *r = vm->err.u.p;
  nbR_set_cstr(r, "file", nb_strv(nbS_cstr(c->filename)));
  nbR_set_cstr(r, "line", nb_int(line));
  nbR_set_cstr(r, "col", nb_int(col));
  nb_Buf b = {0};
  nbE_source_caret(&b, c->src, c->len, pos, end, line);
  nbR_set_cstr(r, "source", nb_strv(nbS_new(b.p ? b.p : "", b.n)));
  nbB_free(&b);
  vm->err_located = true;
  return NB_ERR;
}

static const char *field_str(nb_Rec *r, const char *k, const char *dflt) {
  nb_Value v = nbR_get_cstr(r, k);
  return v.t == NB_TSTR ? nb_str(v)->data : dflt;
}

/* Moves vm->err into vm->last (name, message, full report) and clears it. */
void nbE_finish(nb_VM *vm) {
  free(vm->last_name); free(vm->last_msg); free(vm->last_report);
  vm->last_name = vm->last_msg = vm->last_report = NULL;
  if (vm->err.t != NB_TREC) { nb_Value e = vm->err; vm->err = nb_nil(); nb_raise(vm, e); }
  nb_Rec *r = vm->err.u.p;
  const char *name = field_str(r, "name", "Error");
  nb_Str *msgs = NULL;
  nb_Value mv = nbR_get_cstr(r, "message");
  const char *msg = mv.t == NB_TSTR ? nb_str(mv)->data : (msgs = nbS_tostr(mv))->data;
  nb_Buf b = {0};
  nb_Value line = nbR_get_cstr(r, "line"), col = nbR_get_cstr(r, "col");
  if (line.t == NB_TNUM)
    nbB_printf(&b, "%s:%.0f:%.0f: ", field_str(r, "file", "?"), line.u.n, col.t == NB_TNUM ? col.u.n : 0);
  nbB_printf(&b, "%s: %s\n", name, msg);
  const char *src = field_str(r, "source", NULL);
  if (src && *src) nbB_printf(&b, "%s\n", src);
  nb_Value tv = nbR_get_cstr(r, "trace");
  if (tv.t == NB_TLIST && nb_list(tv)->n > 1) {
    nb_List *l = tv.u.p;
    nbB_puts(&b, "stack trace (most recent call last):\n");
    for (int i = l->n - 1; i >= 0; i--) {
      nbB_puts(&b, "  ");
      nb_tostring(&b, l->items[i], false);
      nbB_putc(&b, '\n');
    }
  }
  vm->last_name = strdup(name);
  vm->last_msg = strdup(msg);
  vm->last_report = strdup(b.p ? b.p : "");
  if (msgs) nb_decref(nb_strv(msgs));
  nbB_free(&b);
  vm->last.name = vm->last_name; vm->last.message = vm->last_msg; vm->last.report = vm->last_report;
  nb_decref(vm->err); vm->err = nb_nil(); vm->err_located = false;
}
