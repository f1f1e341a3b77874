/* test_csv.c — header detection, quoting, CRLF/BOM/blank lines, NaN for
** empty fields, and line:column errors. */
#include "tn.h"
#include "tensor/io/csv.h"
#include "tensor/io/iotypes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void t_csv_header(void) {
  const char *src = "\xEF\xBB\xBF" "x, \"y, z\" ,w\r\n1,2,3\r\n\r\n  4 , -5e-1 ,\"6\"\r\n";
  nt_csv *c = nt_csv_parse(src, strlen(src), 0, "h.csv");
  CHECK(c, "%s", nt_io_error());
  int ok = c->nrows == 2 && c->ncols == 3 && c->names && !strcmp(c->names[0], "x") &&
           !strcmp(c->names[1], "y, z") && !strcmp(c->names[2], "w") &&
           c->data[0] == 1 && c->data[2] == 3 && c->data[3] == 4 && c->data[4] == -0.5 && c->data[5] == 6;
  nt_csv_free(c);
  CHECK(ok, "header file parsed wrong");
}

static void t_csv_noheader(void) {
  const char *src = "1.5;2\n;nan\n-inf;1e3";     /* ';' separated, no final newline, empty -> NaN */
  FILE *f = fopen(tn_path("n.csv"), "w");
  CHECK(f, "fopen");
  fputs(src, f);
  fclose(f);
  nt_csv *c = nt_csv_load(tn_path("n.csv"), ';');
  CHECK(c, "%s", nt_io_error());
  int ok = !c->names && c->nrows == 3 && c->ncols == 2 && c->data[0] == 1.5 && isnan(c->data[2]) &&
           isnan(c->data[3]) && isinf(c->data[4]) && c->data[4] < 0 && c->data[5] == 1000;
  nt_csv_free(c);
  CHECK(ok, "values wrong");
  c = nt_csv_parse("a,b\n", 4, 0, "h");
  CHECK(c && c->nrows == 0 && c->ncols == 2, "header-only: %s", nt_io_error());
  nt_csv_free(c);
}

static void t_csv_errors(void) {
  static const struct { const char *src; const char *want; } bad[] = {
    {"a,b\n1,2\n3,x4\n", "'e.csv':3:3: bad numeric field 'x4'"},
    {"1,2\n3\n", "'e.csv':2:1: ragged row: 1 fields, expected 2"},
    {"1,2\n3,4,5\n", "ragged row: 3 fields"},
    {"a,b\n1,\"2\n", "'e.csv':2:3: unterminated quoted field"},
    {"a,b\n\"1\"x,2\n", "unexpected character after a closing quote"},
    {"a,b\n\"1\"\r2,3\n", "'e.csv':2:4: unexpected character after a closing quote"},   /* a lone CR is not a line end */
    {"", "empty"},
    {"\n\n  \n", "empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    nt_csv *c = nt_csv_parse(bad[i].src, strlen(bad[i].src), 0, "e.csv");
    if (c) nt_csv_free(c);
    CHECK(!c, "case %zu accepted", i);
    CHECK(strstr(nt_io_error(), bad[i].want), "case %zu: '%s' lacks '%s'", i, nt_io_error(), bad[i].want);
  }
  CHECK(!nt_csv_load(tn_path("missing.csv"), 0) && strstr(nt_io_error(), "cannot open"), "missing: %s", nt_io_error());
}

/* A record ends at LF, CRLF or a CR that ends the input; a lone CR before
** other text was taken as CRLF after a quoted field and swallowed the next
** character ("1"\r2,3 read as 1 then ",3"). */
static void t_csv_line_ends(void) {
  const char src[] = "\"1\",\"2\"\r\n3,4\n\"5\",6\r";
  nt_csv *c = nt_csv_parse(src, sizeof src - 1, 0, "cr.csv");
  CHECK(c, "%s", nt_io_error());
  bool ok = c->nrows == 3 && c->ncols == 2 && c->data[0] == 1 && c->data[1] == 2 && c->data[2] == 3 &&
            c->data[3] == 4 && c->data[4] == 5 && c->data[5] == 6;
  nt_csv_free(c);
  CHECK(ok, "values");
}

const tn_test tn_tests_csv[] = {
  {"csv_line_ends", t_csv_line_ends},
  {"csv_header_quotes_crlf_bom", t_csv_header},
  {"csv_noheader_delim_nan", t_csv_noheader},
  {"csv_errors_line_col", t_csv_errors},
  {NULL, NULL},
};
