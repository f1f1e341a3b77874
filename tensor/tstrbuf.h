/*
** tstrbuf.h — a growing string for text the tensor library writes whole
** (generated kernel source, trace files).  An allocation failure sets oom
** and later puts do nothing, so a writer checks once at the end.
*/
#ifndef NT_TSTRBUF_H
#define NT_TSTRBUF_H
#include <stdbool.h>
#include <stddef.h>

typedef struct { char *p; size_t n, cap; bool oom; } nt_StrBuf;

void nt_sb_put(nt_StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
