/*
** dmagic.c — the magics, one implementation for both front ends (the REPL
** and the Jupyter kernel), so they mean and print the same everywhere:
**
**   %time STMT      runs STMT (showing its value) and prints "Wall time: …"
**   %timeit STMT    runs STMT in loops (about 0.2 s a run, 7 runs) and prints
**                   IPython's "… ± … per loop (mean ± std. dev. of 7 runs,
**                   N loops each)"; the builtin timeit(f) does the measuring
**   %who            the global variables
**   %help NAME, ?NAME, NAME?    the signature and documentation of NAME
**   %all EXPR       EXPR's value on every worker;  %%all: the cell on every worker
**   %reset          forgets the globals;  %load FILE  runs a file
**   %dis NAME       the bytecode of the function NAME (a global or a.b path)
**   %%profile [OPTS]  runs the cell under the op profiler and shows its top
**                   ops (lang/lib/lprofile.c); OPTS are profile_stop's
**                   keywords (top=10, sort_by="total", trace="t.json"); the
**                   record is kept in _profile.  %profile STMT: one statement
** Output goes through the VM's sink (terminal, iopub).  Help text can go to
** a callback instead (the kernel's pager payload).  nbD_all_cell is the one
** parser of `%%all` cells: the magic below runs them, the REPL uses it to
** collect one line by line, the kernel to group its output by rank.
*/
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dinternal.h"
#include "dist/dist.h"
#include "util/clock.h"
#include "tensor/tprofile.h"

static void out_text(nb_VM *vm, int stream, const char *s) {
  nb_Sink *k = nb_vm_sink(vm);
  if (k && k->write) k->write(k, stream, s, strlen(s));
}

/* "12.3 ms", "4.56 µs" (IPython's units and 3 significant digits) */
static void fmt_dur(char *b, size_t n, double s) {
  static const char *const unit[] = { "s", "ms", "µs", "ns" };
  int u = 0;
  while (u < 3 && s < 1 && s > 0) { s *= 1000; u++; }
  snprintf(b, n, "%.3g %s", s, unit[u]);
}

/* timeit(f, repeat=7, number=nil, show=false): calls f() number times per run
** (nil: the smallest power of 10 taking >= 0.2 s), repeat runs; returns
** {mean, std, best, loops, runs} in seconds per call; show prints the line
** %timeit prints. */
static int b_timeit(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "timeit";
  nb_Value f = args[0];
  if (f.t != NB_TFUNC && f.t != NB_TBUILTIN && f.t != NB_TREC)
    return nb_error_kind(vm, "TypeError", "timeit: expected a function of no arguments, got %s", nb_typename(f));
  double repeat = 7, number = 0;
  if (args[1].t != NB_TNIL && (args[1].t != NB_TNUM || (repeat = args[1].u.n) < 1 || repeat > 1000))
    return nb_error_kind(vm, "ValueError", "%s: repeat must be a number in 1..1000", fname);
  if (args[2].t != NB_TNIL && (args[2].t != NB_TNUM || (number = args[2].u.n) < 1 || number > 1e9))
    return nb_error_kind(vm, "ValueError", "%s: number must be a number in 1..1e9", fname);
  nb_Value r;
  /* one call first: errors surface at once, and lazy setup is not timed */
  double t0 = nu_mono_s();
  if (nbV_call(vm, f, NULL, 0, &r)) return NB_ERR;
  nb_decref(r);
  double first = nu_mono_s() - t0;
  if (number == 0) {
    number = 1;
    double per = first > 0 ? first : 1e-9;
    while (number * per < 0.2 && number < 1e9) {   /* calibrate by powers of 10 */
      t0 = nu_mono_s();
      for (double i = 0; i < number; i++) { if (nbV_call(vm, f, NULL, 0, &r)) return NB_ERR; nb_decref(r); }
      double dt = nu_mono_s() - t0;
      if (dt >= 0.2) break;
      number *= 10;
    }
  }
  double sum = 0, sq = 0, best = INFINITY;
  for (int k = 0; k < (int)repeat; k++) {
    t0 = nu_mono_s();
    for (double i = 0; i < number; i++) { if (nbV_call(vm, f, NULL, 0, &r)) return NB_ERR; nb_decref(r); }
    double per = (nu_mono_s() - t0) / number;
    sum += per; sq += per * per; if (per < best) best = per;
  }
  double mean = sum / repeat, var = repeat > 1 ? (sq - repeat * mean * mean) / (repeat - 1) : 0;
  double sd = var > 0 ? sqrt(var) : 0;
  if (nb_truthy(args[3])) {
    char a[32], b[32], line[256];
    fmt_dur(a, sizeof a, mean); fmt_dur(b, sizeof b, sd);
    snprintf(line, sizeof line, "%s ± %s per loop (mean ± std. dev. of %d run%s, %.0f loop%s each)\n", a, b,
             (int)repeat, repeat == 1 ? "" : "s", number, number == 1 ? "" : "s");
    out_text(vm, NB_STDOUT, line);
  }
  nb_Rec *rec = nbR_new(5);
  nbR_set_cstr(rec, "mean", nb_flt(mean));
  nbR_set_cstr(rec, "std", nb_flt(sd));
  nbR_set_cstr(rec, "best", nb_flt(best));
  nbR_set_cstr(rec, "loops", nb_int(number));
  nbR_set_cstr(rec, "runs", nb_int(repeat));
  *out = nb_obj(NB_TREC, rec);
  return NB_OK;
}

static nb_Builtin magic_builtins[] = {
  { "timeit", b_timeit, "f, repeat=7, number=nil, show=false",
    "timeit(f, repeat=7, number=nil, show=false): times f() — number calls per run (nil: a power of 10 taking >= 0.2 s), repeat runs — and returns {mean, std, best, loops, runs} in seconds per call; show=true prints it as %timeit does" },
  { NULL, NULL, NULL, NULL }
};
void nbD_magic_init(void) { nbC_register(magic_builtins); }

/* trims spaces and newlines at both ends: [*s, *s + *n) */
static void trim(const char **s, size_t *n) {
  while (*n && isspace((unsigned char)**s)) { (*s)++; (*n)--; }
  while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

static bool is_name(const char *s, size_t n) {
  if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (size_t i = 0; i < n; i++) if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.')) return false;
  return true;
}

bool nbD_all_cell(const char *code, size_t len, const char **body, size_t *body_len) {
  const char *s = code; size_t n = len;
  trim(&s, &n);
  if (n < 5 || strncmp(s, "%%all", 5) || !(n == 5 || s[5] == '\n' || s[5] == '\r' || s[5] == ' ')) return false;
  /* the body starts on the next line: text after %%all on its own line is ignored */
  const char *b = s + 5; size_t bn = n - 5;
  while (bn && *b != '\n') { b++; bn--; }
  if (body) *body = b;
  if (body_len) *body_len = bn;
  return true;
}

static int run_src(nb_VM *vm, const char *src, size_t n, const char *name, int flags) { return nb_run(vm, src, n, name, flags); }

/* "%%profile" alone or followed by a space or a line break: *opts gets the
** rest of that line, *body the lines after it */
static bool profile_cell(const char *s, size_t n, const char **opts, size_t *on, const char **body, size_t *bn) {
  if (n < 9 || strncmp(s, "%%profile", 9) || !(n == 9 || s[9] == '\n' || s[9] == '\r' || s[9] == ' ')) return false;
  const char *o = s + 9, *e = memchr(o, '\n', n - 9);
  if (!e) e = s + n;
  *opts = o; *on = (size_t)(e - o);
  trim(opts, on);
  *body = e; *bn = (size_t)(s + n - e);
  return true;
}

bool nbD_cell_magic(const char *code, size_t len) {
  const char *s = code; size_t n = len, on, bn; const char *o, *b;
  trim(&s, &n);
  return nbD_all_cell(s, n, NULL, NULL) || profile_cell(s, n, &o, &on, &b, &bn);
}

/* %%profile / %profile: the code between profile_start() and
** `_profile = profile_stop(show=true, OPTS)`.  An error in the code or in OPTS
** switches the profiler off and is the magic's error. */
static int profile_magic(nb_VM *vm, const char *opts, size_t on, const char *body, size_t bn, const char *name, int echo) {
  if (run_src(vm, "profile_start()", 15, name, 0)) return 1;
  int st = run_src(vm, body, bn, name, echo);
  if (!st) {
    size_t m = on + 64;
    char *c = malloc(m);
    if (!c) abort();
    int k = snprintf(c, m, "_profile = profile_stop(show=true%s%.*s)\n", on ? ", " : "", (int)on, opts);
    st = run_src(vm, c, (size_t)k, "<%%profile options>", 0);
    free(c);
  }
  if (nt_profile_active()) nt_profile_abort();
  return st ? 1 : 0;
}

int nbD_magic(nb_VM *vm, const char *code, size_t len, int echo, int *status, nbD_HelpFn help_cb, void *ud) {
  const char *s = code; size_t n = len;
  trim(&s, &n);
  *status = 0;
  /* ?name, name? */
  if (n > 1 && !memchr(s, '\n', n) && (s[0] == '?' || s[n - 1] == '?')) {
    const char *nm = s[0] == '?' ? s + 1 : s; size_t nn = n - 1;
    trim(&nm, &nn);
    if (!is_name(nm, nn)) return 0;
    char *topic = strndup(nm, nn);
    char *doc = nb_inspect(vm, topic, (int)nn);
    char *text = NULL;
    if (doc) { text = doc; }
    else { size_t m = nn + 32; text = malloc(m); if (text) snprintf(text, m, "no help for '%s'", topic); }
    if (help_cb) help_cb(ud, text ? text : "");
    else { out_text(vm, NB_STDOUT, text ? text : ""); out_text(vm, NB_STDOUT, "\n"); }
    free(text); free(topic);
    return 1;
  }
  if (n < 2 || s[0] != '%') return 0;
  /* %%all: the rest of the cell on every worker */
  const char *body; size_t bn;
  if (nbD_all_cell(s, n, &body, &bn)) {
    char *c = nbD_magic_code(body, bn, 0);
    if (!c) abort();
    *status = run_src(vm, c, strlen(c), "<%%all>", 0) ? 1 : 0;
    free(c);
    return 1;
  }
  const char *popts, *pbody; size_t pon, pbn;
  if (profile_cell(s, n, &popts, &pon, &pbody, &pbn)) { *status = profile_magic(vm, popts, pon, pbody, pbn, "<%%profile>", echo); return 1; }
  if (memchr(s, '\n', n)) return 0;   /* the line magics are one line */
  const char *w = s + 1; size_t wn = strcspn(w, " \t");
  if (wn > n - 1) wn = n - 1;
  const char *arg = w + wn; size_t an = n - 1 - wn;
  trim(&arg, &an);
#define IS(word) (wn == strlen(word) && !strncmp(w, word, wn))
  if (IS("time")) {
    if (!an) { out_text(vm, NB_STDERR, "%time: needs a statement (%time STMT runs it and prints the wall time)\n"); *status = 2; return 1; }
    double t0 = nu_mono_s();
    int st = run_src(vm, arg, an, "<%time>", echo);
    double dt = nu_mono_s() - t0;
    if (!st) { char b[32], line[64]; fmt_dur(b, sizeof b, dt); snprintf(line, sizeof line, "Wall time: %s\n", b); out_text(vm, NB_STDOUT, line); }
    *status = st ? 1 : 0;
  } else if (IS("timeit")) {
    if (!an) { out_text(vm, NB_STDERR, "%timeit: needs a statement (%timeit STMT times it in loops)\n"); *status = 2; return 1; }
    size_t m = an + 64;
    char *c = malloc(m);
    if (!c) abort();
    int k = snprintf(c, m, "timeit(fn() {\n%.*s\n}, show=true)\n", (int)an, arg);
    /* the statement's own line numbers stay right in errors: it starts on line 2 of "<%timeit>" */
    *status = run_src(vm, c, (size_t)k, "<%timeit>", 0) ? 1 : 0;
    free(c);
  } else if (IS("profile")) {
    if (!an) { out_text(vm, NB_STDERR, "%profile: needs a statement (%profile STMT runs it under the op profiler; %%profile profiles a cell)\n"); *status = 2; return 1; }
    *status = profile_magic(vm, "", 0, arg, an, "<%profile>", echo);
  } else if (IS("who")) {
    char *g = nb_globals_list(vm);
    out_text(vm, NB_STDOUT, g && *g ? g : "(no variables)\n");
    free(g);
  } else if (IS("help")) {
    if (!an) {
      out_text(vm, NB_STDOUT,
               "Magics: %time STMT  %timeit STMT  %who  %help NAME (or ?NAME, NAME?)  %dis NAME  %profile STMT  %reset  %load FILE  %quit (the REPL)\n"
               "A cell starting with %%profile [top=N, sort_by=..., trace=FILE] runs under the op profiler (the record: _profile).\n"
               "Workers (import dist; dist.start(n)): %all EXPR shows EXPR on every worker; a cell starting with\n"
               "%%all runs on every worker.\n");
      return 1;
    }
    char *q = malloc(an + 2);
    if (!q) return 0;
    q[0] = '?'; memcpy(q + 1, arg, an); q[an + 1] = 0;
    int r = nbD_magic(vm, q, an + 1, echo, status, help_cb, ud);
    free(q);
    if (!r) { out_text(vm, NB_STDERR, "%help: expects a name\n"); *status = 2; }
  } else if (IS("all")) {
    if (!an) { out_text(vm, NB_STDERR, "%all: needs an expression (%all EXPR shows its value on every worker)\n"); *status = 2; return 1; }
    char *c = nbD_magic_code(arg, an, 1);
    if (!c) return 0;
    *status = run_src(vm, c, strlen(c), "<%all>", echo) ? 1 : 0;
    free(c);
  } else if (IS("dis")) {
    nb_Value fn;
    if (!an || !is_name(arg, an)) { out_text(vm, NB_STDERR, "%dis: needs a function's name (%dis NAME prints its bytecode)\n"); *status = 2; return 1; }
    if (!nb_lookup_path(vm, arg, an, &fn)) {
      char line[160];
      snprintf(line, sizeof line, "%%dis: no variable named '%.*s'\n", (int)(an > 100 ? 100 : an), arg);
      out_text(vm, NB_STDERR, line);
      *status = 2;
      return 1;
    }
    nb_Buf b = {0};
    if (nb_disassemble_value(vm, fn, &b)) {
      nb_Value e = nb_error_value(vm), m = e.t == NB_TREC ? nbR_get_cstr(nb_rec(e), "message") : nb_undef();
      out_text(vm, NB_STDERR, "%dis: ");
      out_text(vm, NB_STDERR, m.t == NB_TSTR ? nb_str(m)->data : "error");
      out_text(vm, NB_STDERR, "\n");
      nb_error_clear(vm);
      *status = 2;
    } else {
      nbB_add(&b, "", 1);
      out_text(vm, NB_STDOUT, b.p);
    }
    nbB_free(&b);
    nb_decref(fn);
  } else if (IS("reset")) {
    nb_reset(vm);
  } else if (IS("load")) {
    if (!an) { out_text(vm, NB_STDERR, "%load: needs a file name\n"); *status = 2; return 1; }
    char *path = strndup(arg, an);
    *status = path && nb_run_file(vm, path) ? 1 : 0;
    free(path);
  } else {
    char line[160];
    snprintf(line, sizeof line, "unknown magic %%%.*s (try %%help)\n", (int)(wn > 60 ? 60 : wn), w);
    out_text(vm, NB_STDERR, line);
    *status = 2;
  }
#undef IS
  return 1;
}
