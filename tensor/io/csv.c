/*
** csv.c — numeric CSV reader (see csv.h).  One pass: split a record into
** fields (unquoting into a scratch buffer), then either keep it as the header
** or convert every field with strtod into the growing row-major buffer.
*/
#include "csv.h"
#include "iointernal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct field { size_t off, len; size_t line, col; } field;

typedef struct rec {
  field *f; size_t n, cap;
  char *txt; size_t tlen, tcap;       /* unquoted text of all fields, NUL-separated */
} rec;

static int push_char(rec *r, char c) {
  if (r->tlen == r->tcap) {
    size_t nc = r->tcap ? r->tcap * 2 : 256;
    char *t = realloc(r->txt, nc);
    if (!t) return nio_error("csv: out of memory");
    r->txt = t; r->tcap = nc;
  }
  r->txt[r->tlen++] = c;
  return 0;
}

static int push_field(rec *r, size_t off, size_t line, size_t col) {
  if (r->n == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 16;
    field *f = realloc(r->f, nc * sizeof *f);
    if (!f) return nio_error("csv: out of memory");
    r->f = f; r->cap = nc;
  }
  r->f[r->n++] = (field){off, r->tlen - off, line, col};
  return push_char(r, 0);
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

/* A line ends at "\n", "\r\n" or a "\r" that ends the input; a lone "\r"
** inside a line is an ordinary character. */
static bool at_eol(const char *b, size_t p, size_t len) {
  return b[p] == '\n' || (b[p] == '\r' && (p + 1 >= len || b[p + 1] == '\n'));
}
static size_t past_eol(const char *b, size_t p, size_t len) {
  return b[p] == '\r' && p + 1 < len ? p + 2 : p + 1;
}

/* Field text -> double.  Empty -> NaN.  false if not a number. */
static bool to_num(const char *s, double *v) {
  while (is_blank(*s)) s++;
  if (!*s) { *v = NAN; return true; }
  char *end;
  *v = strtod(s, &end);
  if (end == s) return false;
  while (is_blank(*end)) end++;
  return *end == 0;
}

/* Fields are NUL-terminated text for strtod, so a NUL byte in one would cut
** it short ("1\0999" was read as 1): refused, naming the line and column
** (NumPy's loadtxt refuses such a field too: "could not convert string"). */
static void nul_error(const char *L, size_t line, size_t col) {
  nio_error("csv: '%s':%zu:%zu: NUL byte in a field (not a text CSV file?)", L, line, col);
}

void nt_csv_free(nt_csv *c) {
  if (!c) return;
  if (c->names) for (size_t i = 0; i < c->ncols; i++) free(c->names[i]);
  free(c->names); free(c->data); free(c);
}

nt_csv *nt_csv_parse(const char *b, size_t len, char delim, const char *L) {
  if (!delim) delim = ',';
  if (!L) L = "<buffer>";
  rec r = {0};
  nt_csv *c = nio_calloc(1, sizeof *c);
  size_t cap = 0;
  if (!c) return NULL;
  size_t p = 0, line = 1, line_start = 0;
  bool first = true;
  if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) p = line_start = 3;

  while (p < len) {
    /* skip blank lines (only blanks before the line break) */
    size_t q = p;
    while (q < len && is_blank(b[q]) && b[q] != delim) q++;
    if (q >= len) break;
    if (at_eol(b, q, len)) {
      p = past_eol(b, q, len);
      line++; line_start = p;
      continue;
    }
    /* one record */
    if ((line & 1023) == 0 && nio_interrupted("csv", L)) goto fail;
    r.n = 0; r.tlen = 0;
    size_t rec_line = line;
    for (;;) {
      size_t off = r.tlen, fline = line, fcol = p - line_start + 1;
      size_t s = p;
      while (s < len && is_blank(b[s]) && b[s] != delim) s++;
      if (s < len && b[s] == '"') {
        size_t qline = line, qcol = s - line_start + 1;
        p = s + 1;
        for (;;) {
          if (p >= len) {
            nio_error("csv: '%s':%zu:%zu: unterminated quoted field", L, qline, qcol); goto fail;
          }
          if (b[p] == '"') {
            if (p + 1 < len && b[p + 1] == '"') { if (push_char(&r, '"')) goto fail; p += 2; continue; }
            p++;
            break;
          }
          if (b[p] == '\n') { line++; line_start = p + 1; }
          if (!b[p]) { nul_error(L, line, p - line_start + 1); goto fail; }
          if (push_char(&r, b[p++])) goto fail;
        }
        while (p < len && is_blank(b[p]) && b[p] != delim) p++;
        if (p < len && b[p] != delim && !at_eol(b, p, len)) {
          nio_error("csv: '%s':%zu:%zu: unexpected character after a closing quote", L, line, p - line_start + 1);
          goto fail;
        }
      } else {
        while (p < len && b[p] != delim && !at_eol(b, p, len)) {
          if (!b[p]) { nul_error(L, line, p - line_start + 1); goto fail; }
          if (push_char(&r, b[p++])) goto fail;
        }
      }
      if (push_field(&r, off, fline, fcol)) goto fail;
      if (p < len && b[p] == delim) { p++; continue; }
      /* end of record */
      if (p < len) { p = past_eol(b, p, len); line++; line_start = p; }
      break;
    }

    if (first) {
      first = false;
      c->ncols = r.n;
      bool header = false;
      double v;
      for (size_t i = 0; i < r.n; i++) header |= !to_num(r.txt + r.f[i].off, &v);
      if (header) {
        c->names = nio_calloc(r.n, sizeof(char *));
        if (!c->names) goto fail;
        for (size_t i = 0; i < r.n; i++) {
          const char *t = r.txt + r.f[i].off;
          size_t n = r.f[i].len;
          while (n && is_blank(*t)) { t++; n--; }          /* trim: names are identifiers */
          while (n && is_blank(t[n - 1])) n--;
          if (!(c->names[i] = nio_strndup(t, n))) goto fail;
        }
        continue;
      }
    }
    if (r.n != c->ncols) {
      nio_error("csv: '%s':%zu:1: ragged row: %zu fields, expected %zu", L, rec_line, r.n, c->ncols);
      goto fail;
    }
    if ((c->nrows + 1) * c->ncols > cap) {
      size_t nc = cap ? cap * 2 : 1024;
      while (nc < (c->nrows + 1) * c->ncols) nc *= 2;
      double *d = realloc(c->data, nc * sizeof *d);
      if (!d) { nio_error("csv: '%s': out of memory", L); goto fail; }
      c->data = d; cap = nc;
    }
    for (size_t i = 0; i < r.n; i++)
      if (!to_num(r.txt + r.f[i].off, &c->data[c->nrows * c->ncols + i])) {
        nio_error("csv: '%s':%zu:%zu: bad numeric field '%.40s'", L, r.f[i].line, r.f[i].col, r.txt + r.f[i].off);
        goto fail;
      }
    c->nrows++;
  }
  if (first) { nio_error("csv: '%s': no data (empty file)", L); goto fail; }
  if (!c->data && !(c->data = nio_malloc(sizeof(double)))) goto fail;   /* header only: 0 rows */
  free(r.f); free(r.txt);
  return c;
fail:
  free(r.f); free(r.txt);
  nt_csv_free(c);
  return NULL;
}

nt_csv *nt_csv_load(const char *path, char delim) {
  size_t len;
  char *buf = nio_read_file("csv", path, &len, NULL);
  if (!buf) return NULL;
  nt_csv *c = nt_csv_parse(buf, len, delim, path);
  free(buf);
  return c;
}
