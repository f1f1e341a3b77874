/*
** csv.h — numeric CSV reader.
**
** Every row must have the same number of fields.  The first row is taken as
** a header when any of its fields is not a number.  Fields may be quoted
** ("a, b" with "" for a quote).  A numeric field is anything strtod accepts
** in full (surrounding blanks allowed, so "nan" and "inf" work); an empty
** field reads as NaN (a missing value).  Blank lines are skipped, CRLF and a
** UTF-8 BOM are accepted.  A NUL byte in a field is an error (it would cut
** the field short).  Errors give line:column (1-based, bytes).
*/
#ifndef NT_IO_CSV_H
#define NT_IO_CSV_H

#include <stddef.h>

typedef struct nt_csv {
  size_t nrows, ncols;
  char **names;        /* ncols header names, or NULL when there was no header */
  double *data;        /* nrows * ncols, row-major */
} nt_csv;

/* delim: the field separator, 0 for ','. */
nt_csv *nt_csv_load(const char *path, char delim);
nt_csv *nt_csv_parse(const char *buf, size_t len, char delim, const char *label);
void    nt_csv_free(nt_csv *c);

#endif
