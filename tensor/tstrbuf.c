/*
** tstrbuf.c — nt_StrBuf: formatted appends with geometric growth.
*/
#include "tstrbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void nt_sb_put(nt_StrBuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; return; }
    if (b->p && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->n + (size_t)k + 1) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) { b->oom = true; return; }
    b->p = q; b->cap = cap;
  }
}
