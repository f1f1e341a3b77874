/*
** fuzz_csv.c — libFuzzer target: the CSV reader (tensor/io/csv.c) with every
** option, and load_csv's column layer (lang/lib/ltio.c: usecols, dtype,
** text columns as lists or category codes).
**
** Input: two option bytes, then the file.
**   byte 0  bits 0-1  delimiter: "," ";" tab "|"
**           bits 2-3  header: auto, none, the first row, auto
**           bits 4-5  na: the default list, {""}, {"x", "-", "?"}, {} (only empty)
**           bit 6     also run load_csv in a VM (a text file over a memfd)
**           bit 7     the delimiter is a space instead
**   byte 1  bits 0-2  load_csv's dtype: f64 f32 f16 bf16 i32 i64 u8 bool
**           bits 3-4  usecols: nil, [0], [1, 0], the header's names reversed
** Checked on every input (abort() when broken):
**   - shape: a text column's numbers are NaN and only text columns hold
**     strings (every byte read, so ASan sees a string past its buffer);
**   - the numbers-only form (opts.text false) accepts the file exactly when
**     the text form finds no text column, and then reads the same table;
**   - round trip: the table written back (every field quoted, numbers with
**     17 digits, missing as "") and read with the header it had gives the
**     same names, column kinds, numbers (bit for bit) and strings;
**   - load_csv: the codes form and the list form agree (categories[code] is
**     the string, -1 where missing), data has one column per numeric column.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_csv -max_total_time=60 tests/fuzz/corpus_csv
*/
#include "fuzz_vm.h"   /* first: it defines _GNU_SOURCE (memfd_create) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tensor/io/csv.h"
#include "tensor/io/iotypes.h"

static const char *const na_custom[] = { "x", "-", "?" };
static const char *const na_empty[] = { "" };

static bool any_text(const nt_csv *c) {
  for (size_t j = 0; j < c->ncols; j++) if (c->is_text[j]) return true;
  return false;
}

static void check_shape(const nt_csv *c, bool text_mode) {
  if (c->ncols == 0 || !c->is_text) abort();
  if (text_mode ? any_text(c) != (c->text != NULL) : c->text != NULL) abort();
  volatile size_t sum = 0;
  if (c->names) for (size_t j = 0; j < c->ncols; j++) sum += strlen(c->names[j]);
  for (size_t i = 0; i < c->nrows; i++)
    for (size_t j = 0; j < c->ncols; j++) {
      double v = c->data[i * c->ncols + j];
      const char *t = c->text ? c->text[i * c->ncols + j] : NULL;
      if (c->is_text[j] && !isnan(v)) abort();   /* a text column's numbers are NaN */
      if (!c->is_text[j] && t) abort();           /* only text columns keep strings */
      if (t) sum += strlen(t);
    }
  (void)sum;
}

static bool same_num(double a, double b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}
static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static bool same_table(const nt_csv *a, const nt_csv *b) {
  if (a->nrows != b->nrows || a->ncols != b->ncols || !a->names != !b->names) return false;
  for (size_t j = 0; j < a->ncols; j++) {
    if (a->is_text[j] != b->is_text[j]) return false;
    if (a->names && strcmp(a->names[j], b->names[j])) return false;
  }
  for (size_t k = 0; k < a->nrows * a->ncols; k++) {
    if (!same_num(a->data[k], b->data[k])) return false;
    if (!same_str(a->text ? a->text[k] : NULL, b->text ? b->text[k] : NULL)) return false;
  }
  return true;
}

/* growable output buffer for the round trip */
typedef struct buf { char *p; size_t n, cap; } buf;
static void put(buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->n + n + 1) * 2;
    char *p = realloc(b->p, nc);
    if (!p) abort();
    b->p = p; b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void put_quoted(buf *b, const char *s) {   /* RFC 4180: "..." with "" for a quote */
  put(b, "\"", 1);
  for (; s && *s; s++) {
    if (*s == '"') put(b, "\"", 1);
    put(b, s, 1);
  }
  put(b, "\"", 1);
}
static void write_table(const nt_csv *c, char delim, buf *b) {
  if (c->names) {
    for (size_t j = 0; j < c->ncols; j++) { if (j) put(b, &delim, 1); put_quoted(b, c->names[j]); }
    put(b, "\n", 1);
  }
  for (size_t i = 0; i < c->nrows; i++) {
    for (size_t j = 0; j < c->ncols; j++) {
      if (j) put(b, &delim, 1);
      size_t k = i * c->ncols + j;
      if (c->is_text[j]) { put_quoted(b, c->text ? c->text[k] : NULL); continue; }
      char num[40] = "";
      if (!isnan(c->data[k])) snprintf(num, sizeof num, "%.17g", c->data[k]);
      put_quoted(b, num);
    }
    put(b, "\n", 1);
  }
}

/* ---- load_csv in a VM ------------------------------------------------------ */
static nb_VM *vm;
static int memfd = -1;
static char fdpath[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  vm = fuzz_vm_new(200000);
  memfd = fuzz_memfd("fuzz_csv", fdpath, sizeof fdpath);
  return 0;
}

static void run_load_csv(const uint8_t *file, size_t len, char delim, int header, int na_mode, uint8_t vmopt) {
  static const char *const dtypes[8] = { "f64", "f32", "f16", "bf16", "i32", "i64", "u8", "bool" };
  static const char *const nas[4] = { "nil", "list(\"\")", "list(\"x\", \"-\", \"?\")", "list()" };
  static const char *const usecols[4] = { "nil", "list(0)", "list(1, 0)", "U" };
  char dl[8];
  if (delim == '\t') snprintf(dl, sizeof dl, "\"\\t\""); else snprintf(dl, sizeof dl, "\"%c\"", delim);
  const char *hd = header < 0 ? "nil" : header ? "true" : "false";
  char args[256], prog[2048];
  snprintf(args, sizeof args, "delim=%s, header=%s, usecols=%s, dtype=\"%s\", na=%s",
           dl, hd, usecols[(vmopt >> 3) & 3], dtypes[vmopt & 7], nas[na_mode]);
  snprintf(prog, sizeof prog,
    "P = \"%s\"\n"
    "U = nil\n"
    "c0 = load_csv(P, delim=%s, header=%s, na=%s).columns\n"
    "if c0 != nil { U = list(); for i in 0..len(c0) { push(U, c0[len(c0) - 1 - i]) } }\n"
    "d = load_csv(P, %s)\n"
    "e = load_csv(P, %s, codes=true)\n"
    "assert(d.data.shape[1] == len(d.numeric), \"data has one column per numeric column\")\n"
    /* keys(): a column named "__next" makes the record an iterator (see the report) */
    "for k in keys(d.text) {\n"
    "  l = d.text[k]; c = e.text[k]; cats = e.categories[k]\n"
    "  assert(len(l) == d.data.shape[0] and c.shape[0] == len(l), \"text column length\")\n"
    "  for i in 0..len(l) {\n"
    "    ci = item(c[i])\n"
    "    if l[i] == nil { assert(ci == -1, \"a missing string has code -1\") }\n"
    "    else { assert(cats[ci] == l[i], \"categories[code] is the string\") }\n"
    "  }\n"
    "}\n"
    "print(d, e)\n",
    fdpath, dl, hd, nas[na_mode], args, args);
  if (fuzz_memfd_set(memfd, file, len)) return;
  fuzz_vm_run_checked(vm, prog);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const char delims[4] = {',', ';', '\t', '|'};
  static const int headers[4] = { -1, 0, 1, -1 };
  uint8_t opt = data[0], vmopt = data[1];
  const char *file = (const char *)data + 2;
  size_t len = size - 2;
  nt_csv_opts o = { .delim = opt & 0x80 ? ' ' : delims[opt & 3], .header = headers[(opt >> 2) & 3], .text = true };
  int na_mode = (opt >> 4) & 3;
  if (na_mode == 1) { o.na = na_empty; o.nna = 1; }
  if (na_mode == 2) { o.na = na_custom; o.nna = 3; }
  if (na_mode == 3) { o.na = na_empty; o.nna = 0; }

  nt_csv *c = nt_csv_parse_opts(file, len, &o, "<fuzz>");
  nt_csv_opts on = o; on.text = false;
  nt_csv *n = nt_csv_parse_opts(file, len, &on, "<fuzz>");
  if (c) check_shape(c, true);
  if (n) check_shape(n, false);
  /* the numbers-only form reads exactly the files without text columns, the same way */
  if ((n != NULL) != (c != NULL && !any_text(c))) abort();
  if (n && !same_table(c, n)) abort();
  if (c) {   /* written back and read again: the same table */
    buf b = {0};
    write_table(c, o.delim, &b);
    nt_csv_opts ro = o; ro.header = c->names != NULL;
    nt_csv *r = nt_csv_parse_opts(b.p ? b.p : "", b.n, &ro, "<round trip>");
    if (!r || !same_table(c, r)) {
      fprintf(stderr, "fuzz_csv: round trip differs (%s)\n%.*s\n", r ? "values" : nt_io_error(), (int)b.n, b.p ? b.p : "");
      abort();
    }
    nt_csv_free(r);
    free(b.p);
  }
  nt_csv_free(c);
  nt_csv_free(n);
  if (opt & 0x40) run_load_csv((const uint8_t *)file, len, o.delim, o.header, na_mode, vmopt);
  return 0;
}
