/*
** ktext.c — the kernel's text helpers (see ktext.h): the protocol is JSON, so
** every byte string the language produces must become valid UTF-8, and
** cursor positions must be converted between code points and bytes.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel/ktext.h"

void k_log(const char *fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[nabla kernel] %s\n", buf);
  fflush(stderr);
}

void kbuf_add(KBuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) abort();
    b->p = p; b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n; b->p[b->n] = 0;
}

/* length of the valid UTF-8 sequence at s (1..4), or 0 when invalid/truncated */
static int utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int len; unsigned min;
  if ((c & 0xe0) == 0xc0) { len = 2; min = 0x80; c &= 0x1f; }
  else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; c &= 0x0f; }
  else if ((c & 0xf8) == 0xf0) { len = 4; min = 0x10000; c &= 0x07; }
  else return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) { if ((s[i] & 0xc0) != 0x80) return 0; c = (c << 6) | (s[i] & 0x3f); }
  /* overlong forms, beyond U+10FFFF and surrogates are invalid too */
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  return len;
}

json_t *k_jstr(const char *s, size_t n) {
  /* jansson validates UTF-8: the common case costs one pass */
  json_t *j = json_stringn(s ? s : "", s ? n : 0);
  if (j) return j;
  KBuf b = {0};
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    int l = utf8_len(u + i, n - i);
    if (l) { kbuf_add(&b, s + i, (size_t)l); i += (size_t)l; }
    else { kbuf_add(&b, "\xef\xbf\xbd", 3); i++; }
  }
  j = json_stringn(b.p ? b.p : "", b.n);
  free(b.p);
  return j ? j : json_string("");
}

size_t k_utf8_complete_prefix(const char *s, size_t n) {
  size_t i = n, k = 0;
  while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) { i--; k++; }
  if (i == 0) return n;
  unsigned c = (unsigned char)s[i - 1];
  int need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
  if (need > 1 && (size_t)need > k + 1) return i - 1;   /* the last character is not complete yet */
  return n;
}

size_t k_cp_to_byte(const char *s, size_t n, long cp) {
  size_t i = 0;
  while (cp > 0 && i < n) {
    int l = utf8_len((const unsigned char *)s + i, n - i);
    i += l ? (size_t)l : 1; cp--;
  }
  return i;
}

long k_byte_to_cp(const char *s, size_t n, size_t b) {
  long cp = 0; size_t i = 0;
  if (b > n) b = n;
  while (i < b) { int l = utf8_len((const unsigned char *)s + i, n - i); i += l ? (size_t)l : 1; cp++; }
  return cp;
}
