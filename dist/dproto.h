/*
** dproto.h — the session<->worker control protocol of dist/.
**
** A message is a ZeroMQ multipart message, Jupyter style:
**   [identity]  (only on the session's ROUTER side)
**   "<NBDIST>"  delimiter
**   signature   hex HMAC-SHA256 over the header and body frames, keyed with
**               the per-session random key
**   header      "TYPE SEQ RANK" (ASCII)
**   body        bytes (serialized values, source text, ...)
** A message whose signature does not verify is dropped by the receiver (and
** logged); nothing in it is looked at.  This small interface is meant to be
** backed by dist/wire.c (the kernel's signed codec) once both agree on the
** frame layout; callers only see dp_send/dp_recv.
*/
#ifndef DIST_DPROTO_H
#define DIST_DPROTO_H

#include <stddef.h>
#include <stdint.h>

#define DP_KEYLEN 32

typedef struct dp_Msg {
  char ident[64]; size_t identlen;   /* ROUTER side: the peer's identity */
  char type[32];
  uint32_t seq;
  int rank;
  char *body; size_t len;            /* malloc'd, NUL-terminated (len excludes the NUL) */
} dp_Msg;

/* Sends one message.  ident NULL on the DEALER side.  Returns 0 or -1. */
int dp_send(void *sock, const unsigned char key[DP_KEYLEN], const char *ident, size_t identlen,
            const char *type, uint32_t seq, int rank, const void *body, size_t len);
/* Receives one message (non-blocking when dontwait).  Returns 0 with *m
** filled, 1 when nothing is waiting, -1 on a socket error, -2 for a message
** that was malformed or whose signature did not verify (m->ident is set). */
int dp_recv(void *sock, const unsigned char key[DP_KEYLEN], int has_ident, int dontwait, dp_Msg *m);
void dp_msg_free(dp_Msg *m);

/* HMAC-SHA256 of the concatenation of n parts (out: 32 bytes). */
void dp_hmac(const unsigned char key[DP_KEYLEN], const void *const *parts, const size_t *lens, int n, unsigned char out[32]);
/* key <-> 64 hex characters */
void dp_hex(const unsigned char *in, size_t n, char *out);
int  dp_unhex(const char *in, unsigned char *out, size_t n);
/* constant-time comparison */
int  dp_equal(const void *a, const void *b, size_t n);

#endif
