/*
** csv.c — CSV reader (see csv.h).  Two passes over the text through one
** record reader (fields unquoted into a scratch buffer): the first finds the
** shape and which columns hold text, the second fills the numbers (and the
** text columns' strings), so a numeric file never keeps its text.
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
  if (c->text) for (size_t i = 0; i < c->nrows * c->ncols; i++) free(c->text[i]);
  free(c->names); free(c->data); free(c->is_text); free(c->text); free(c);
}

/* ---- the record reader: both passes read the file through it ------------- */
typedef struct reader {
  const char *b, *L; size_t len, p, line, line_start; char delim;
} reader;

/* The next record's fields into r: 1, 0 at the end, -1 on error.  *rec_line
** is the line the record starts on.  Blank lines are skipped. */
static int next_record(reader *d, rec *r, size_t *rec_line) {
  const char *b = d->b; size_t len = d->len; char delim = d->delim;
  size_t p = d->p;
  for (;;) {   /* skip blank lines (only blanks before the line break) */
    size_t q = p;
    while (q < len && is_blank(b[q]) && b[q] != delim) q++;
    if (q >= len) { d->p = len; return 0; }
    if (!at_eol(b, q, len)) break;
    p = past_eol(b, q, len);
    d->line++; d->line_start = p;
  }
  if ((d->line & 1023) == 0 && nio_interrupted("csv", d->L)) return -1;
  r->n = 0; r->tlen = 0;
  *rec_line = d->line;
  for (;;) {
    size_t off = r->tlen, fline = d->line, fcol = p - d->line_start + 1;
    size_t s = p;
    while (s < len && is_blank(b[s]) && b[s] != delim) s++;
    if (s < len && b[s] == '"') {
      size_t qline = d->line, qcol = s - d->line_start + 1;
      p = s + 1;
      for (;;) {
        if (p >= len) return nio_error("csv: '%s':%zu:%zu: unterminated quoted field", d->L, qline, qcol);
        if (b[p] == '"') {
          if (p + 1 < len && b[p + 1] == '"') { if (push_char(r, '"')) return -1; p += 2; continue; }
          p++;
          break;
        }
        if (b[p] == '\n') { d->line++; d->line_start = p + 1; }
        if (!b[p]) { nul_error(d->L, d->line, p - d->line_start + 1); return -1; }
        if (push_char(r, b[p++])) return -1;
      }
      while (p < len && is_blank(b[p]) && b[p] != delim) p++;
      if (p < len && b[p] != delim && !at_eol(b, p, len))
        return nio_error("csv: '%s':%zu:%zu: unexpected character after a closing quote", d->L, d->line, p - d->line_start + 1);
    } else {
      while (p < len && b[p] != delim && !at_eol(b, p, len)) {
        if (!b[p]) { nul_error(d->L, d->line, p - d->line_start + 1); return -1; }
        if (push_char(r, b[p++])) return -1;
      }
    }
    if (push_field(r, off, fline, fcol)) return -1;
    if (p < len && b[p] == delim) { p++; continue; }
    if (p < len) { p = past_eol(b, p, len); d->line++; d->line_start = p; }   /* end of record */
    break;
  }
  d->p = p;
  return 1;
}

/* a missing value: empty (after trimming blanks) or one of the NA spellings */
static bool is_na(const char *s, const nt_csv_opts *o) {
  while (is_blank(*s)) s++;
  size_t n = strlen(s);
  while (n && is_blank(s[n - 1])) n--;
  if (n == 0) return true;
  static const char *const dflt[] = { "NA", "N/A", "null", "NULL", "None", "NaN", "nan", "-NaN", "-nan" };
  const char *const *na = o && o->na ? o->na : dflt;
  size_t nna = o && o->na ? o->nna : sizeof dflt / sizeof dflt[0];
  for (size_t i = 0; i < nna; i++) if (strlen(na[i]) == n && !memcmp(na[i], s, n)) return true;
  return false;
}

/* numeric field: NA -> NaN (1), a number (1), text (0) */
static bool field_num(const char *s, const nt_csv_opts *o, double *v) {
  if (is_na(s, o)) { *v = NAN; return true; }
  return to_num(s, v);
}

static char *trimmed_dup(const char *t, size_t n) {
  while (n && is_blank(*t)) { t++; n--; }
  while (n && is_blank(t[n - 1])) n--;
  return nio_strndup(t, n);
}

nt_csv *nt_csv_parse_opts(const char *b, size_t len, const nt_csv_opts *o, const char *L) {
  char delim = o && o->delim ? o->delim : ',';
  int header = o ? o->header : -1;
  bool text_ok = o && o->text;
  if (!L) L = "<buffer>";
  size_t bom = len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  rec r = {0};
  nt_csv *c = nio_calloc(1, sizeof *c);
  if (!c) return NULL;
  bool *row0_text = NULL, *rest_text = NULL, *rest_num = NULL;

  /* pass 1: the shape, and which columns hold text (rows after the first
  ** and the first apart, for the header's detection) */
  reader d = { b, L, len, bom, 1, bom, delim };
  size_t nrec = 0, rl;
  int got;
  while ((got = next_record(&d, &r, &rl)) == 1) {
    if (nrec == 0) {
      c->ncols = r.n;
      row0_text = nio_calloc(r.n, 1); rest_text = nio_calloc(r.n, 1); rest_num = nio_calloc(r.n, 1);
      if (!row0_text || !rest_text || !rest_num) goto fail;
    } else if (r.n != c->ncols) {
      nio_error("csv: '%s':%zu:1: ragged row: %zu fields, expected %zu", L, rl, r.n, c->ncols);
      goto fail;
    }
    for (size_t i = 0; i < r.n; i++) {
      double v;
      const char *t = r.txt + r.f[i].off;
      bool num = field_num(t, o, &v);
      if (nrec == 0) row0_text[i] = !num;
      else if (!num) rest_text[i] = true;
      else if (!is_na(t, o)) rest_num[i] = true;
    }
    nrec++;
  }
  if (got < 0) goto fail;
  if (nrec == 0) { nio_error("csv: '%s': no data (empty file)", L); goto fail; }
  if (header < 0) {
    /* auto: a header when some column is text in the first row only (a name
    ** over numbers), or when the whole first row is text and non-empty */
    bool any_name_over_numbers = false, all_text = true;
    for (size_t i = 0; i < c->ncols; i++) {
      if (row0_text[i] && !rest_text[i] && (rest_num[i] || nrec == 1)) any_name_over_numbers = true;
      if (!row0_text[i]) all_text = false;
    }
    header = any_name_over_numbers || all_text;
  }
  c->nrows = nrec - (header ? 1 : 0);
  c->is_text = nio_calloc(c->ncols, 1);
  size_t cells;
  if (!c->is_text || !nio_mul_ok(c->nrows, c->ncols, &cells)) goto fail;
  bool any_text = false;
  for (size_t i = 0; i < c->ncols; i++) {
    c->is_text[i] = rest_text[i] || (!header && row0_text[i]);
    any_text |= c->is_text[i];
  }
  if (!(c->data = nio_malloc((cells ? cells : 1) * sizeof(double)))) goto fail;
  if (any_text && text_ok && !(c->text = nio_calloc(cells ? cells : 1, sizeof(char *)))) goto fail;

  /* pass 2: the values */
  d = (reader){ b, L, len, bom, 1, bom, delim };
  size_t row = 0;
  for (size_t k = 0; (got = next_record(&d, &r, &rl)) == 1; k++) {
    if (k == 0 && header) {
      if (!(c->names = nio_calloc(c->ncols, sizeof(char *)))) goto fail;
      for (size_t i = 0; i < r.n; i++)   /* trimmed: names are identifiers */
        if (!(c->names[i] = trimmed_dup(r.txt + r.f[i].off, r.f[i].len))) goto fail;
      continue;
    }
    for (size_t i = 0; i < r.n; i++) {
      const char *t = r.txt + r.f[i].off;
      double *v = &c->data[row * c->ncols + i];
      if (!c->is_text[i]) { field_num(t, o, v); continue; }
      if (!text_ok) {   /* numbers only: the column's first text field is the error */
        if (field_num(t, o, v)) continue;
        nio_error("csv: '%s':%zu:%zu: bad numeric field '%.40s'", L, r.f[i].line, r.f[i].col, t);
        goto fail;
      }
      *v = NAN;
      if (!is_na(t, o) && !(c->text[row * c->ncols + i] = nio_strndup(t, r.f[i].len))) goto fail;
    }
    row++;
  }
  if (got < 0) goto fail;
  free(r.f); free(r.txt); free(row0_text); free(rest_text); free(rest_num);
  return c;
fail:
  free(r.f); free(r.txt); free(row0_text); free(rest_text); free(rest_num);
  nt_csv_free(c);
  return NULL;
}

nt_csv *nt_csv_parse(const char *b, size_t len, char delim, const char *L) {
  nt_csv_opts o = { .delim = delim, .header = -1, .text = false, .na = (const char *const[]){ "" }, .nna = 1 };
  return nt_csv_parse_opts(b, len, &o, L);
}

nt_csv *nt_csv_load_opts(const char *path, const nt_csv_opts *o) {
  size_t len;
  char *buf = nio_read_file("csv", path, &len, NULL);
  if (!buf) return NULL;
  nt_csv *c = nt_csv_parse_opts(buf, len, o, path);
  free(buf);
  return c;
}

nt_csv *nt_csv_load(const char *path, char delim) {
  size_t len;
  char *buf = nio_read_file("csv", path, &len, NULL);
  if (!buf) return NULL;
  nt_csv *c = nt_csv_parse(buf, len, delim, path);
  free(buf);
  return c;
}
