/*
** csv.h — CSV reader (RFC 4180 quoting), numbers and text columns.
**
** Every row must have the same number of fields (a ragged row is an error
** naming its line).  Header (opts.header -1, auto): the first row is a
** header when one of its fields is text over a column of numbers, or when
** all of its fields are text; 0/1 say so.  A column is text when one of its
** data fields is neither a number nor missing: its strings are kept (NULL
** for a missing one) and its numbers are NaN.  Missing: empty, or one of
** opts.na (default NA N/A null NULL None NaN nan -NaN -nan), read as NaN.
** nt_csv_parse/nt_csv_load are the numbers-only form (opts.text false:
** a text field is an error, only an empty field is missing).  Fields may be quoted
** ("a, b" with "" for a quote).  A numeric field is anything strtod accepts
** in full (surrounding blanks allowed, so "nan" and "inf" work); an empty
** field reads as NaN (a missing value).  Blank lines are skipped, CRLF and a
** UTF-8 BOM are accepted.  A NUL byte in a field is an error (it would cut
** the field short).  Errors give line:column (1-based, bytes).
*/
#ifndef NT_IO_CSV_H
#define NT_IO_CSV_H

#include <stdbool.h>
#include <stddef.h>

typedef struct nt_csv {
  size_t nrows, ncols;
  char **names;        /* ncols header names, or NULL when there was no header */
  double *data;        /* nrows * ncols, row-major; NaN where missing or in a text column */
  unsigned char *is_text;   /* ncols: whether the column holds text */
  char **text;         /* nrows * ncols: a text column's strings (NULL: missing), or NULL (no text column) */
} nt_csv;

typedef struct nt_csv_opts {
  char delim;                 /* 0: ',' */
  int header;                 /* -1 auto, 0 none, 1 the first row */
  bool text;                  /* text columns allowed (else an error) */
  const char *const *na;      /* missing-value spellings (NULL: the default list); blanks trimmed first */
  size_t nna;
} nt_csv_opts;
nt_csv *nt_csv_parse_opts(const char *buf, size_t len, const nt_csv_opts *o, const char *label);
nt_csv *nt_csv_load_opts(const char *path, const nt_csv_opts *o);

/* delim: the field separator, 0 for ','. */
nt_csv *nt_csv_load(const char *path, char delim);
nt_csv *nt_csv_parse(const char *buf, size_t len, char delim, const char *label);
void    nt_csv_free(nt_csv *c);

#endif
