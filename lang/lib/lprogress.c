/*
** lib/lprogress.c — progress(iterable, total=nil, desc="", every=0.1): a live
** progress bar around any loop, as tqdm.
**
**   bar = progress(batches, desc="epoch 1")
**   for b in bar { loss = step(b); bar.set(loss=loss.item()) }
**
** The bar is an iterator record (for calls its __next until nil): it hands
** out the items of a list, range, string, tensor (first axis) or another
** iterator, counts them, and redraws at most every `every` seconds and once
** at the end: count, percent and bar when the total is known, rate, elapsed,
** ETA, and the postfix set with bar.set(name=value, ...).
**
** Where it draws is the sink's business: a rich sink (Jupyter) gets one
** display_data and then update_display_data on the same display_id, so the
** notebook shows ONE output updated in place; a terminal gets one line
** redrawn with '\r'; anything else (a pipe, a log file, a worker) gets a
** plain line at most every 10 seconds and one at the end.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "util/clock.h"

static double num_field(nb_Rec *r, const char *k) {
  nb_Value v = nbR_get_cstr(r, k);
  return v.t == NB_TNUM ? v.u.n : 0;
}
static void set_num(nb_Rec *r, const char *k, double x, bool isint) { nbR_set_cstr(r, k, isint ? nb_int(x) : nb_flt(x)); }

/* "1:02:03" or "02:03" */
static void fmt_time(nb_Buf *b, double s) {
  if (!(s >= 0) || s > 1e8) { nbB_puts(b, "?"); return; }
  long t = (long)(s + 0.5), h = t / 3600, m = t / 60 % 60, sec = t % 60;
  if (h) nbB_printf(b, "%ld:%02ld:%02ld", h, m, sec); else nbB_printf(b, "%02ld:%02ld", m, sec);
}

/* the one-line text of the bar; style: 'u' unicode blocks, 'a' ASCII, 0 no
** bar (the HTML form draws a <progress> element instead) */
static void render_text(nb_Rec *self, nb_Buf *b, char style) {
  bool unicode = style == 'u';
  double n = num_field(self, "n"), total = num_field(self, "total"), t0 = num_field(self, "_t0");
  nb_Value desc = nbR_get_cstr(self, "desc"), post = nbR_get_cstr(self, "postfix");
  double el = nu_mono_s() - t0, rate = el > 0 ? n / el : 0;
  if (desc.t == NB_TSTR && nb_str(desc)->len) nbB_printf(b, "%s: ", nb_str(desc)->data);
  bool known = nbR_get_cstr(self, "total").t == NB_TNUM && total > 0;
  if (known) {
    double frac = n / total > 1 ? 1 : n / total;
    nbB_printf(b, style ? "%3d%%|" : "%d%% ", (int)floor(frac * 100));
    enum { W = 24 };
    double cells = frac * W;
    int full = (int)cells;
    static const char *const part[] = { "", "\u258f", "\u258e", "\u258d", "\u258c", "\u258b", "\u258a", "\u2589" };
    for (int i = 0; style && i < W; i++) {
      if (i < full) nbB_puts(b, unicode ? "\u2588" : "#");
      else if (i == full && unicode && (int)((cells - full) * 8)) nbB_puts(b, part[(int)((cells - full) * 8)]);
      else nbB_putc(b, unicode ? ' ' : '.');
    }
    nbB_printf(b, style ? "| %.0f/%.0f [" : "%.0f/%.0f [", n, total);
    fmt_time(b, el);
    nbB_putc(b, '<');
    fmt_time(b, rate > 0 ? (total - n) / rate : -1);
  } else {
    nbB_printf(b, "%.0f [", n);
    fmt_time(b, el);
  }
  if (rate >= 1 || rate == 0) nbB_printf(b, ", %.2fit/s", rate);
  else nbB_printf(b, ", %.2fs/it", 1 / rate);
  if (post.t == NB_TREC) {
    nb_Rec *p = post.u.p;
    for (int i = 0; i < p->n; i++) {
      nbB_printf(b, ", %s=", p->keys[i]->data);
      nb_Value v = p->vals[i];
      if (v.t == NB_TNUM && nb_isfloat(v)) nbB_printf(b, "%.4g", v.u.n);
      else nb_tostring(b, v, false);
    }
  }
  nbB_putc(b, ']');
}

static void html_escape(nb_Buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '<') nbB_puts(b, "&lt;"); else if (*s == '>') nbB_puts(b, "&gt;"); else if (*s == '&') nbB_puts(b, "&amp;");
    else nbB_putc(b, *s);
  }
}

/* draws the bar; final: the loop is over (always drawn; a terminal line ends) */
static void render(nb_VM *vm, nb_Rec *self, bool final) {
  nb_Sink *k = nb_vm_sink(vm);
  if (!k) return;
  double t = nu_mono_s();
  double last = num_field(self, "_drawn"), every = num_field(self, "every");
  bool first = nbR_get_cstr(self, "_shown").t != NB_TBOOL;
  if (k->rich && k->display) {
    if (!final && !first && t - last < every) return;
    nb_Buf txt = {0}, html = {0}, plain = {0};
    render_text(self, &txt, 'u');
    render_text(self, &plain, 0);
    double n = num_field(self, "n"), total = num_field(self, "total");
    bool known = nbR_get_cstr(self, "total").t == NB_TNUM && total > 0;
    nbB_puts(&html, "<div class=\"nabla-progress\" style=\"font-family:monospace\">");
    if (known) nbB_printf(&html, "<progress value=\"%.0f\" max=\"%.0f\" style=\"width:20em;vertical-align:middle\"></progress> ", n, total);
    html_escape(&html, nbB_cstr(&plain));
    nbB_puts(&html, "</div>");
    nb_MimeItem items[2] = { { "text/plain", nbB_cstr(&txt), txt.n }, { "text/html", nbB_cstr(&html), html.n } };
    nb_Value id = nbR_get_cstr(self, "_id");
    k->display(k, items, 2, nb_str(id)->data, !first);
    nbB_free(&txt); nbB_free(&html); nbB_free(&plain);
  } else if (isatty(STDOUT_FILENO) && k == nb_stdio_sink()) {
    if (!final && !first && t - last < every) return;
    nb_Buf line = {0};
    nbB_putc(&line, '\r');
    render_text(self, &line, 'u');
    nbB_puts(&line, "\033[K");   /* clear what a longer earlier line left */
    if (final) nbB_putc(&line, '\n');
    k->write(k, NB_STDOUT, line.p, line.n);
    fflush(stdout);
    nbB_free(&line);
  } else {
    if (!final && (first || t - last < 10)) { if (first) set_num(self, "_drawn", t, false); nbR_set_cstr(self, "_shown", nb_bool(true)); return; }
    nb_Buf line = {0};
    render_text(self, &line, 'a');
    nbB_putc(&line, '\n');
    k->write(k, NB_STDOUT, line.p, line.n);
    nbB_free(&line);
  }
  set_num(self, "_drawn", t, false);
  nbR_set_cstr(self, "_shown", nb_bool(true));
}

/* the k-th item of seq (k counts from 0); *end when there is none */
static int next_item(nb_VM *vm, nb_Rec *self, nb_Value seq, double k, nb_Value *item, bool *end) {
  *end = false;
  switch (seq.t) {
  case NB_TLIST:
    if (k >= nb_list(seq)->n) { *end = true; return NB_OK; }
    *item = nb_list(seq)->items[(long)k]; nb_incref(*item); return NB_OK;
  case NB_TSTR:
    if (k >= (double)nb_str(seq)->len) { *end = true; return NB_OK; }
    *item = nb_strv(nbS_new(nb_str(seq)->data + (long)k, 1)); return NB_OK;
  case NB_TRANGE: {
    nb_Range *r = seq.u.p;
    if (k >= nbG_range_len(r)) { *end = true; return NB_OK; }
    *item = nb_numk(r->start + k * r->step, r->kind); return NB_OK;
  }
  case NB_TTENSOR: {
    double len;
    if (nbT_len(vm, seq, &len)) return NB_ERR;
    if (k >= len) { *end = true; return NB_OK; }
    nb_Value kv = nb_int(k);
    return nbT_index(vm, seq, &kv, 1, item);
  }
  case NB_TREC: {
    nb_Value next = nbR_method_cstr(nb_rec(seq), "__next");
    if (next.t == NB_TUNDEF) break;
    if (nbV_call(vm, next, &seq, 1, item)) return NB_ERR;
    if (item->t == NB_TNIL) *end = true;
    return NB_OK;
  }
  default: break;
  }
  (void)self;
  return nb_error_kind(vm, "TypeError", "progress: cannot iterate over a %s (a list, range, string, tensor or iterator is needed)", nb_typename(seq));
}

static int b_progress_next(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "progress: __next needs the bar");
  nb_Rec *self = args[0].u.p;
  *out = nb_nil();
  if (nbR_get_cstr(self, "_done").t == NB_TBOOL) return NB_OK;
  double k = num_field(self, "_i");
  if (k == 0 && nbR_get_cstr(self, "_shown").t != NB_TBOOL) { set_num(self, "_t0", nu_mono_s(), false); render(vm, self, false); }
  bool end;
  nb_Value item = nb_nil();
  if (next_item(vm, self, nbR_get_cstr(self, "_seq"), k, &item, &end)) return NB_ERR;
  set_num(self, "n", k, true);   /* items finished: the one handed out now is running */
  if (end) {
    nbR_set_cstr(self, "_done", nb_bool(true));
    render(vm, self, true);
    return NB_OK;
  }
  set_num(self, "_i", k + 1, true);
  render(vm, self, false);
  *out = item;
  return NB_OK;
}

/* bar.set(loss=..., acc=...): the postfix shown after the counters */
static int b_progress_set(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  /* bar.set is a callable record {__call, bar} (a record's function field is
  ** called without self, so the bar travels in it) */
  nb_Value barv = args[0].t == NB_TREC ? nbR_get_cstr(nb_rec(args[0]), "bar") : nb_nil();
  if (barv.t != NB_TREC) return nb_error_kind(vm, "TypeError", "progress: set needs the bar");
  nb_Rec *self = barv.u.p, *kw = args[1].u.p;
  nb_Value post = nbR_get_cstr(self, "postfix");
  if (post.t != NB_TREC) { post = nb_obj(NB_TREC, nbR_new(kw->n)); nbR_set_cstr(self, "postfix", post); }
  for (int i = 0; i < kw->n; i++) {
    nb_Value v = kw->vals[i];
    if (v.t == NB_TTENSOR && T(v)->numel == 1) { double d; if (nt_item(T(v), &d)) return nbT_err(vm); v = nb_flt(d); }
    else nb_incref(v);
    nb_incref(nb_strv(kw->keys[i]));
    nbR_set(nb_rec(post), kw->keys[i], v);
    nb_decref(nb_strv(kw->keys[i]));
  }
  if (nbR_get_cstr(self, "_shown").t == NB_TBOOL && nbR_get_cstr(self, "_done").t != NB_TBOOL) render(vm, self, false);
  *out = nb_nil();
  return NB_OK;
}

static nb_Builtin member_builtins[] = {
  { "__progress_next", b_progress_next, "self", "internal: the next item of a progress bar" },
  { "__progress_set", b_progress_set, "self, **kw", "bar.set(name=value, ...): the values shown after the counters" },
  { NULL, NULL, NULL, NULL }
};

static int b_progress(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "progress";
  nb_Value seq = args[0];
  double total = NAN, every = 0.1;
  if (args[1].t != NB_TNIL && nbT_num_arg(vm, fname, "total", args[1], &total)) return NB_ERR;
  if (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "every", args[3], &every)) return NB_ERR;
  if (args[2].t != NB_TNIL && args[2].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "progress: desc must be a string, got %s", nb_typename(args[2]));
  if (!(every >= 0)) return nb_error_kind(vm, "ValueError", "progress: every must be >= 0 seconds, got %g", every);
  if (isnan(total)) {   /* the length when the iterable has one */
    if (seq.t == NB_TLIST) total = nb_list(seq)->n;
    else if (seq.t == NB_TSTR) total = (double)nb_str(seq)->len;
    else if (seq.t == NB_TRANGE) total = nbG_range_len(seq.u.p);
    else if (seq.t == NB_TTENSOR) { if (nbT_len(vm, seq, &total)) return NB_ERR; }
    else if (!(seq.t == NB_TREC && nbR_method_cstr(nb_rec(seq), "__next").t != NB_TUNDEF))
      return nb_error_kind(vm, "TypeError", "progress: cannot iterate over a %s (a list, range, string, tensor or iterator is needed)", nb_typename(seq));
  }
  static unsigned long counter;   /* process-wide (ids must differ across VMs too); atomic: VMs may run on several threads */
  char id[64];
  snprintf(id, sizeof id, "nabla-progress-%d-%lu", (int)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
  nb_Rec *r = nbR_new(12);
  nbR_set_cstr(r, "__next", nb_builtinv(&member_builtins[0]));
  nb_Rec *set = nbR_new(2);
  nbR_set_cstr(set, "__call", nb_builtinv(&member_builtins[1]));
  nb_incref(nb_obj(NB_TREC, r));
  nbR_set_cstr(set, "bar", nb_obj(NB_TREC, r));   /* a cycle the collector reclaims */
  nbR_set_cstr(r, "set", nb_obj(NB_TREC, set));
  nbR_set_cstr(r, "n", nb_int(0));
  nbR_set_cstr(r, "total", isnan(total) ? nb_nil() : nb_int(total));
  nb_incref(args[2]);
  nbR_set_cstr(r, "desc", args[2].t == NB_TSTR ? args[2] : nb_strv(nbS_cstr("")));
  nbR_set_cstr(r, "every", nb_flt(every));
  nbR_set_cstr(r, "postfix", nb_nil());
  nb_incref(seq);
  nbR_set_cstr(r, "_seq", seq);
  nbR_set_cstr(r, "_i", nb_int(0));
  nbR_set_cstr(r, "_t0", nb_flt(nu_mono_s()));
  nbR_set_cstr(r, "_id", nb_strv(nbS_cstr(id)));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static nb_Builtin progress_builtins[] = {
  { "progress", b_progress, "iterable, total=nil, desc=\"\", every=0.1",
    "progress(iterable, total=nil, desc=\"\", every=0.1): iterates like iterable and shows a live bar (count, percent, rate, elapsed, ETA and what bar.set(loss=...) sets), redrawn at most every `every` seconds: one output updated in place in Jupyter, one redrawn line in a terminal, occasional plain lines elsewhere" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_progress(void) {
  nbC_prepare(member_builtins);
  nbC_register(progress_builtins);
}
