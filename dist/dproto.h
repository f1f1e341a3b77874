/*
** dproto.h — the session<->worker control protocol of dist/, built on the
** signing core that the kernel's Jupyter codec shares (wire/sign.h).
**
** A message is a ZeroMQ multipart message, Jupyter style:
**   [identity]  (only on the session's ROUTER side)
**   "<NBDIST>"  delimiter
**   signature   hex HMAC-SHA256 over the header and body frames, keyed with
**               the per-session random key
**   header      "TYPE SEQ RANK CTR" (ASCII)
**   body        bytes (serialized values, source text, ...), split into
**               frames of at most DP_MAX_FRAME bytes (none when empty)
** A message whose signature does not verify is dropped by the receiver (and
** logged); nothing in it is looked at.  CTR is the sender's message counter,
** strictly increasing on a connection: the receiver drops a message whose
** counter it has seen (a replay).  Every dist socket sets ZMQ_MAXMSGSIZE to
** DP_MAX_FRAME, so ZeroMQ itself drops a connection that announces a bigger
** frame before buffering it, and dp_recv stops keeping frames once a message
** passes DP_MAX_MSG / DP_MAX_FRAMES.
*/
#ifndef DIST_DPROTO_H
#define DIST_DPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include "wire/sign.h"

#define DP_KEYLEN 32
#define DP_MAX_FRAME ((size_t)16 << 20)                     /* per frame: ZMQ_MAXMSGSIZE */
#define DP_MAX_MSG   ((size_t)8 << 30)                      /* a whole message */
#define DP_MAX_FRAMES ((int)(DP_MAX_MSG / DP_MAX_FRAME) + 5)

typedef struct dp_Msg {
  char ident[64]; size_t identlen;   /* ROUTER side: the peer's identity */
  char type[32];
  uint32_t seq;
  int rank;
  uint64_t ctr;                      /* the sender's message counter */
  char *body; size_t len;            /* malloc'd, NUL-terminated (len excludes the NUL) */
} dp_Msg;

/* A message built and not (completely) sent yet. */
typedef struct dp_Out { zmq_msg_t *fr; int n; } dp_Out;

/* Builds the frames of one message into *o (ident NULL on the DEALER side;
** key NULL: an unsigned message for an inproc pipe).  Returns 0 or -1. */
int  dp_build(dp_Out *o, const unsigned char *key, const char *ident, size_t identlen,
              const char *type, uint32_t seq, int rank, uint64_t ctr, const void *body, size_t len);
/* Sends *o: 1 when sent (or dropped after a socket error), 0 when the socket
** would block (ZMQ_DONTWAIT in flags; *o is kept: try again). */
int  dp_out_send(dp_Out *o, void *sock, int flags);
void dp_out_free(dp_Out *o);

/* Builds and sends one message (blocking).  Returns 0 or -1. */
int dp_send(void *sock, const unsigned char *key, const char *ident, size_t identlen,
            const char *type, uint32_t seq, int rank, uint64_t ctr, const void *body, size_t len);
/* Receives one message (non-blocking when dontwait; key NULL: an inproc pipe,
** not verified).  Returns 0 with *m filled, 1 when nothing is waiting, -1 on
** a socket error, -2 for a message that was malformed or whose signature did
** not verify, -3 for one over the size limits (m->ident is set for both). */
int dp_recv(void *sock, const unsigned char *key, int has_ident, int dontwait, dp_Msg *m);
void dp_msg_free(dp_Msg *m);
/* Parses and verifies already received frames (the fuzz target's entry). */
int dp_decode(const unsigned char *key, const void *const *frames, const size_t *lens, int nf, int has_ident, dp_Msg *m);

/* The bodies of the handshake and of `welcome` and `runfile`, parsed (pure
** functions: the fuzz target reaches them without sockets). */
typedef struct dp_Hello {
  char ver[64], addr[80], host[80], ts[24], mac[72];
  int pid, rank, lrank;
} dp_Hello;
/* "VERSION PID RANK LOCAL_RANK HOST:PORT HOSTNAME T MAC": 0, or -1 when it does not parse */
int  dp_parse_hello(const char *body, dp_Hello *h);
typedef struct dp_Welcome {
  int world, timeout_ms; unsigned gen; char backend[16];
  char **addrs;                      /* world malloc'd "host:port" strings */
} dp_Welcome;
/* "WORLD TIMEOUT GEN BACKEND\n" then one address per line; world must be
** the worker's.  0, or -1 (nothing allocated). */
int  dp_parse_welcome(const char *body, size_t len, int world, dp_Welcome *w);
void dp_welcome_free(dp_Welcome *w);
/* runfile's "path\0arg\0...": at most max pointers into body; returns the count */
int  dp_split_args(char *body, size_t len, char **argv, int max);

/* Sets the limits above on a dist socket (before bind/connect). */
void dp_limit_socket(void *sock);
/*
** ZeroMQ's CURVE security on the control connection, with both key pairs
** derived from the session key: a peer without it does not know the
** session's public key, so its CURVE HELLO cannot be opened and ZeroMQ
** drops the connection in the handshake — before it takes a single
** message frame (it buffers whole multipart messages, whatever their
** frame count, so this is what bounds a message from a peer without the
** key).  The traffic is encrypted too.  0, or -1 when ZeroMQ lacks CURVE.
*/
int dp_curve_server(void *sock, const unsigned char key[DP_KEYLEN]);
int dp_curve_client(void *sock, const unsigned char key[DP_KEYLEN]);

/* HMAC-SHA256, hex and constant-time comparisons: wire/sign.h
** (wire_hmac_sha256, wire_hex, wire_unhex, wire_equal). */

#endif
