/*
** ktext.h — text helpers of the Jupyter kernel: JSON strings from arbitrary
** bytes, UTF-8 character boundaries and code point offsets (the protocol
** counts cursor positions in code points, the language in bytes), the
** growable byte buffer the output paths use, and the kernel's log.  No dependency on the rest of
** kernel/, so the interpreter, the core and the server all use it.
*/
#ifndef NABLA_KTEXT_H
#define NABLA_KTEXT_H

#include <stddef.h>
#include <jansson.h>

/* Logging to stderr (Jupyter shows it in the server log). */
void k_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growable byte buffer, always NUL-terminated once written to. */
typedef struct KBuf { char *p; size_t n, cap; } KBuf;
void kbuf_add(KBuf *b, const char *s, size_t n);   /* aborts when memory runs out */

/* JSON string from arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *k_jstr(const char *s, size_t n);

/* How many bytes of s[0..n) end on a character boundary (holds back a split
** sequence, so a stream message never ends inside a character). */
size_t k_utf8_complete_prefix(const char *s, size_t n);

/* Code points <-> byte offsets in s[0..n) (invalid bytes count as one). */
size_t k_cp_to_byte(const char *s, size_t n, long cp);
long k_byte_to_cp(const char *s, size_t n, size_t b);

#endif
