/*
** lib/lprofile.c — the profiler's builtins (tensor/tprofile.h records):
**
**   p = profile(step, x, y)              # runs step(x, y) under the profiler
**   p.result                             # what step returned
**   p.ops[0]                             # {name, phase, device, kind, calls, self_ms, ...}
**   profile(step, x, trace="step.json")  # and a Chrome trace (chrome://tracing, Perfetto)
**   profile_start(); ...; p = profile_stop()
**   print(profile_table(p, top=10, sort_by="total"))
**
** profile(f, *args) returns {result, ops, wall_ms, self_ms, gpu_ms, events,
** dropped, trace}; ops has one row per (op, phase, device), sorted by sort_by:
** "self" (host self time), "total", "gpu_self", "gpu_total", "calls" or
** "name"; nil picks gpu_self when the GPU was used, else self.  show=true
** (profile's default) prints the top rows — an HTML table in a notebook
** (the sink's rich display), text elsewhere.  An error inside f turns the
** profiler off and propagates.  The %%profile magic (dist/dmagic.c) runs a
** cell between profile_start() and profile_stop(show=true).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/tprofile.h"

typedef enum { BY_SELF, BY_TOTAL, BY_GPU_SELF, BY_GPU_TOTAL, BY_CALLS, BY_NAME, BY_AUTO } SortBy;
static const char *const sort_names[] = { "self", "total", "gpu_self", "gpu_total", "calls", "name" };
static const char *const kind_names[] = { "op", "autograd", "fused" };

static int sort_arg(nb_VM *vm, const char *fname, nb_Value v, SortBy *by) {
  if (v.t == NB_TNIL) { *by = BY_AUTO; return NB_OK; }
  if (v.t == NB_TSTR)
    for (int i = 0; i < 6; i++) if (!strcmp(nb_str(v)->data, sort_names[i])) { *by = (SortBy)i; return NB_OK; }
  return nb_error_kind(vm, "ValueError", "%s: sort_by must be one of \"self\", \"total\", \"gpu_self\", \"gpu_total\", \"calls\", \"name\" or nil, got %s",
                       fname, v.t == NB_TSTR ? nb_str(v)->data : nb_typename(v));
}
static int top_arg(nb_VM *vm, const char *fname, nb_Value v, int *top) {
  if (v.t == NB_TNIL) { *top = 1 << 30; return NB_OK; }
  if (v.t != NB_TNUM || v.u.n < 0 || v.u.n != (double)(int64_t)v.u.n)
    return nb_error_kind(vm, "ValueError", "%s: top must be a non-negative integer or nil", fname);
  *top = v.u.n > 1e9 ? 1 << 30 : (int)v.u.n;
  return NB_OK;
}

/* ---- rows as records ---------------------------------------------------------- */
static double rnum(nb_Rec *r, const char *k) { nb_Value v = nbR_get_cstr(r, k); return v.t == NB_TNUM ? v.u.n : 0; }
static const char *rstr(nb_Rec *r, const char *k) { nb_Value v = nbR_get_cstr(r, k); return v.t == NB_TSTR ? nb_str(v)->data : "?"; }

static int cmp_rows(const void *a, const void *b, void *by) {
  SortBy sort_key = *(const SortBy *)by;
  nb_Rec *x = nb_rec(*(const nb_Value *)a), *y = nb_rec(*(const nb_Value *)b);
  if (sort_key == BY_NAME) return strcmp(rstr(x, "name"), rstr(y, "name"));
  static const char *const field[] = { "self_ms", "total_ms", "gpu_self_ms", "gpu_total_ms", "calls" };
  double u = rnum(x, field[sort_key]), v = rnum(y, field[sort_key]);
  return u > v ? -1 : u < v ? 1 : strcmp(rstr(x, "name"), rstr(y, "name"));
}
/* sorts a list of row records in place (values are records made here or by the user) */
static int sort_rows(nb_VM *vm, const char *fname, nb_List *ops, SortBy by) {
  for (int i = 0; i < ops->n; i++)
    if (ops->items[i].t != NB_TREC) return nb_error_kind(vm, "TypeError", "%s: ops must be a list of records (a profile's rows)", fname);
  qsort_r(ops->items, (size_t)ops->n, sizeof *ops->items, cmp_rows, &by);
  return NB_OK;
}

static nb_Value row_rec(const nt_ProfRow *r, double wall_ms) {
  nb_Rec *o = nbR_new(11);
  nbR_set_cstr(o, "name", nb_strv(nbS_cstr(r->name)));
  nbR_set_cstr(o, "phase", nb_strv(nbS_cstr(r->phase ? "backward" : "forward")));
  nbR_set_cstr(o, "device", nb_strv(nbS_cstr(nt_device_name((nt_Device)r->device))));
  nbR_set_cstr(o, "kind", nb_strv(nbS_cstr(kind_names[r->kind < 3 ? r->kind : 0])));
  nbR_set_cstr(o, "calls", nb_int((double)r->calls));
  nbR_set_cstr(o, "self_ms", nb_flt(r->self_ms));
  nbR_set_cstr(o, "total_ms", nb_flt(r->total_ms));
  nbR_set_cstr(o, "self_pct", nb_flt(wall_ms > 0 ? 100 * r->self_ms / wall_ms : 0));
  nbR_set_cstr(o, "gpu_self_ms", nb_flt(r->gpu_self_ms));
  nbR_set_cstr(o, "gpu_total_ms", nb_flt(r->gpu_total_ms));
  return nb_obj(NB_TREC, o);
}

/* the record profile/profile_stop return; takes nothing, result borrowed */
static int make_record(nb_VM *vm, const char *fname, nt_Profile *p, nb_Value result, SortBy by, nb_Value trace, nb_Value *out) {
  nt_ProfRow *rows; int nrows;
  if (nt_profile_rows(p, &rows, &nrows)) return nbT_err(vm);
  double wall_ms = (double)p->wall_ns / 1e6, self = 0, gpu = 0;
  nb_List *ops;
  if (nbL_new_checked(vm, fname, (size_t)nrows, &ops)) { free(rows); return NB_ERR; }
  for (int i = 0; i < nrows; i++) { nbL_push(ops, row_rec(&rows[i], wall_ms)); self += rows[i].self_ms; gpu += rows[i].gpu_self_ms; }
  free(rows);
  if (by == BY_AUTO) by = p->gpu_ref_ns >= 0 ? BY_GPU_SELF : BY_SELF;
  sort_rows(vm, fname, ops, by);
  nb_Rec *r = nbR_new(10);
  nb_incref(result);
  nbR_set_cstr(r, "result", result);
  nbR_set_cstr(r, "ops", nb_obj(NB_TLIST, ops));
  nbR_set_cstr(r, "wall_ms", nb_flt(wall_ms));
  nbR_set_cstr(r, "self_ms", nb_flt(self));
  nbR_set_cstr(r, "gpu_ms", nb_flt(gpu));
  nbR_set_cstr(r, "gpu", nb_bool(p->gpu_ref_ns >= 0));
  nbR_set_cstr(r, "events", nb_int((double)p->n));
  nbR_set_cstr(r, "dropped", nb_int((double)(p->dropped + p->untimed)));
  nbR_set_cstr(r, "sort_by", nb_strv(nbS_cstr(sort_names[by])));
  nb_incref(trace);
  nbR_set_cstr(r, "trace", trace);
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* ---- the table ---------------------------------------------------------------- */
static void html_escape(nb_Buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '<') nbB_puts(b, "&lt;");
    else if (*s == '>') nbB_puts(b, "&gt;");
    else if (*s == '&') nbB_puts(b, "&amp;");
    else if (*s == '"') nbB_puts(b, "&quot;");
    else nbB_putc(b, *s);
  }
}

/* text (and html when non-NULL) of the top rows of profile record p, sorted by `by` */
static int render(nb_VM *vm, const char *fname, nb_Rec *p, int top, SortBy by, nb_Buf *text, nb_Buf *html) {
  nb_Value opsv = nbR_get_cstr(p, "ops");
  if (opsv.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a profile record (with ops), got a record without them", fname);
  nb_List *ops = nb_list(opsv);
  bool gpu = nb_truthy(nbR_get_cstr(p, "gpu"));
  if (by == BY_AUTO) by = gpu ? BY_GPU_SELF : BY_SELF;
  /* sort a copy: the record's own order stays what it was made with */
  nb_List *s;
  if (nbL_new_checked(vm, fname, (size_t)ops->n, &s)) return NB_ERR;
  for (int i = 0; i < ops->n; i++) { nb_incref(ops->items[i]); nbL_push(s, ops->items[i]); }
  if (sort_rows(vm, fname, s, by)) { nb_decref(nb_obj(NB_TLIST, s)); return NB_ERR; }
  int shown = s->n < top ? s->n : top;
  double wall = rnum(p, "wall_ms");
  nbB_printf(text, "%-34s %-8s %-4s %7s %10s %6s %10s", "op", "phase", "dev", "calls", "self ms", "self%", "total ms");
  if (gpu) nbB_printf(text, " %11s %12s", "gpu self ms", "gpu total ms");
  nbB_putc(text, '\n');
  if (html) {
    nbB_puts(html, "<table class=\"nabla-profile\" style=\"font-family:monospace\"><thead><tr><th style=\"text-align:left\">op</th>"
                   "<th>phase</th><th>dev</th><th>calls</th><th>self ms</th><th>self %</th><th>total ms</th>");
    if (gpu) nbB_puts(html, "<th>gpu self ms</th><th>gpu total ms</th>");
    nbB_puts(html, "</tr></thead><tbody>");
  }
  for (int i = 0; i < shown; i++) {
    nb_Rec *r = nb_rec(s->items[i]);
    const char *name = rstr(r, "name");
    nbB_printf(text, "%-34.34s %-8s %-4s %7.0f %10.3f %5.1f%% %10.3f", name, rstr(r, "phase"), rstr(r, "device"), rnum(r, "calls"),
               rnum(r, "self_ms"), rnum(r, "self_pct"), rnum(r, "total_ms"));
    if (gpu) nbB_printf(text, " %11.3f %12.3f", rnum(r, "gpu_self_ms"), rnum(r, "gpu_total_ms"));
    nbB_putc(text, '\n');
    if (html) {
      nbB_puts(html, "<tr><td style=\"text-align:left\">");
      html_escape(html, name);
      nbB_printf(html, "</td><td>%s</td><td>%s</td><td>%.0f</td><td>%.3f</td><td>%.1f</td><td>%.3f</td>", rstr(r, "phase"),
                 rstr(r, "device"), rnum(r, "calls"), rnum(r, "self_ms"), rnum(r, "self_pct"), rnum(r, "total_ms"));
      if (gpu) nbB_printf(html, "<td>%.3f</td><td>%.3f</td>", rnum(r, "gpu_self_ms"), rnum(r, "gpu_total_ms"));
      nbB_puts(html, "</tr>");
    }
  }
  char foot[400];
  int k = snprintf(foot, sizeof foot, "%d of %d rows by %s; wall %.3f ms, self time in ops %.3f ms (%.1f%%)", shown, s->n,
                   sort_names[by], wall, rnum(p, "self_ms"), wall > 0 ? 100 * rnum(p, "self_ms") / wall : 0);
  if (gpu && k > 0 && (size_t)k < sizeof foot) k += snprintf(foot + k, sizeof foot - (size_t)k, ", GPU %.3f ms", rnum(p, "gpu_ms"));
  if (rnum(p, "dropped") > 0 && k > 0 && (size_t)k < sizeof foot)
    snprintf(foot + k, sizeof foot - (size_t)k, "; %.0f events past the profiler's bounds not timed", rnum(p, "dropped"));
  nbB_printf(text, "%s\n", foot);
  if (html) { nbB_puts(html, "</tbody></table><div style=\"font-family:monospace\">"); html_escape(html, foot); nbB_puts(html, "</div>"); }
  nb_decref(nb_obj(NB_TLIST, s));
  if (nbB_check(vm, fname, text)) return NB_ERR;
  return html ? nbB_check(vm, fname, html) : NB_OK;
}

static int show(nb_VM *vm, const char *fname, nb_Rec *p, int top, SortBy by) {
  nb_Sink *k = nb_vm_sink(vm);
  bool rich = k && k->rich && k->display;
  nb_Buf text = {0}, html = {0};
  int rc = render(vm, fname, p, top, by, &text, rich ? &html : NULL);
  if (!rc) {
    if (rich) {
      nb_MimeItem items[2] = { { "text/plain", nbB_cstr(&text), text.n }, { "text/html", nbB_cstr(&html), html.n } };
      k->display(k, items, 2, NULL, 0);
    } else nbW_write(vm, NB_STDOUT, text.p, text.n);
  }
  nbB_free(&text); nbB_free(&html);
  return rc;
}

/* stops the profile, writes the trace, builds the record, shows it */
static int finish(nb_VM *vm, const char *fname, nb_Value result, int top, SortBy by, nb_Value trace, bool shw, nb_Value *out) {
  nt_Profile *p = nt_profile_stop();
  if (!p) return nbT_err(vm);
  if (trace.t == NB_TSTR && nt_profile_write_trace(p, nb_str(trace)->data)) { nt_profile_free(p); return nbT_err(vm); }
  int rc = make_record(vm, fname, p, result, by, trace, out);
  nt_profile_free(p);
  if (rc) return rc;
  if (shw && show(vm, fname, nb_rec(*out), top, by)) { nb_decref(*out); return NB_ERR; }
  return NB_OK;
}

static int check_opts(nb_VM *vm, const char *fname, nb_Value *args, int *top, SortBy *by) {
  if (top_arg(vm, fname, args[0], top) || sort_arg(vm, fname, args[1], by)) return NB_ERR;
  if (args[2].t != NB_TNIL) NB_ARGSTR(2, "trace");
  return NB_OK;
}

/* profile(f, *args, top, sort_by, trace, show): declared "*args, top, ...", so
** args[0..3] are the keywords and args[4..n) the positional values: f, then f's */
static int b_profile(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "profile";
  if (n < 5) return nb_error_kind(vm, "TypeError", "profile: expected a function to run (profile(f, *args))");
  nb_Value f = args[4];
  if (f.t != NB_TFUNC && f.t != NB_TBUILTIN && f.t != NB_TREC)
    return nb_error_kind(vm, "TypeError", "profile: expected a function to run, got %s", nb_typename(f));
  int top = 20; SortBy by = BY_AUTO;
  if (check_opts(vm, fname, args, &top, &by)) return NB_ERR;
  if (nt_profile_start()) return nbT_err(vm);
  nb_Value r;
  if (nbV_call(vm, f, args + 5, n - 5, &r)) { nt_profile_abort(); return NB_ERR; }
  int rc = finish(vm, fname, r, top, by, args[2], nb_truthy(args[3]), out);
  nb_decref(r);
  return rc;
}

static int b_profile_start(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)args; (void)n;
  if (nt_profile_start()) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}

static int b_profile_stop(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "profile_stop";
  int top = 20; SortBy by = BY_AUTO;
  if (check_opts(vm, fname, args, &top, &by)) return NB_ERR;   /* the profile keeps running: fix the call and stop again */
  return finish(vm, fname, nb_nil(), top, by, args[2], nb_truthy(args[3]), out);
}

static int b_profile_table(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "profile_table";
  NB_ARGREC(0, "p");
  int top = 20; SortBy by = BY_AUTO;
  if (top_arg(vm, fname, args[1], &top) || sort_arg(vm, fname, args[2], &by)) return NB_ERR;
  nb_Buf text = {0};
  int rc = render(vm, fname, nb_rec(args[0]), top, by, &text, NULL);
  if (!rc) rc = nbS_from_buf(vm, fname, &text, out);
  nbB_free(&text);
  return rc;
}

static int b_profile_active(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  *out = nb_bool(nt_profile_active());
  return NB_OK;
}

static nb_Builtin profile_builtins[] = {
  { "profile", b_profile, "*args, top=20, sort_by=nil, trace=nil, show=true",
    "profile(f, *args, top=20, sort_by=nil, trace=nil, show=true): runs f(*args) under the op profiler; returns {result, ops, wall_ms, self_ms, gpu_ms, gpu, events, dropped, sort_by, trace}, ops one row {name, phase, device, kind, calls, self_ms, self_pct, total_ms, gpu_self_ms, gpu_total_ms} per op, phase and device; show prints the top rows; trace=\"f.json\" writes a Chrome trace" },
  { "profile_start", b_profile_start, "",
    "profile_start(): starts the op profiler (profile_stop() ends it); an error if one is running" },
  { "profile_stop", b_profile_stop, "top=20, sort_by=nil, trace=nil, show=false",
    "profile_stop(top=20, sort_by=nil, trace=nil, show=false): stops the profiler and returns profile()'s record (result nil)" },
  { "profile_table", b_profile_table, "p, top=20, sort_by=nil",
    "profile_table(p, top=20, sort_by=nil): the text table of a profile record's top rows, sorted by \"self\", \"total\", \"gpu_self\", \"gpu_total\", \"calls\" or \"name\"" },
  { "profile_active", b_profile_active, "", "profile_active(): whether the op profiler is running" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_profile(void) { nbC_register(profile_builtins); }
