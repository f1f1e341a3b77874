/*
** sign.h — the signing core of nabla's two signed ZeroMQ protocols: the
** Jupyter messages of the kernel (wire/wire.c) and the session<->worker
** control messages of dist/ (dist/dproto.c).
**
** Why a module of its own: both protocols sign frames with an HMAC, check a
** hex signature in constant time, remember what was seen to reject replays
** and receive a multipart message without ever keeping more than a bound.
** That logic was written twice (once per protocol); here it is written once,
** below both dist/ and kernel/, so the two cannot drift apart.  What differs
** between the protocols (the frame layout, the header, which frames are
** signed, the limits) stays in wire.c and dproto.c.
**
** Depends on OpenSSL (EVP_MAC) and ZeroMQ only; no other folder of nabla.
*/
#ifndef NABLA_WIRE_SIGN_H
#define NABLA_WIRE_SIGN_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct wire_Frame { const unsigned char *data; size_t len; } wire_Frame;

/* ------------------------------------------------------------ HMAC */
/* A keyed HMAC context (an EVP_MAC_CTX) for the digest ("SHA256", "SHA1",
** ...), keyed once and duplicated per message, so that threads can sign at
** once.  NULL on failure. */
void *wire_mac_new(const char *digest, const void *key, size_t keylen);
void  wire_mac_free(void *ctx);
/* The HMAC of the frames in order (frames with no data count as empty);
** mac: EVP_MAX_MD_SIZE (64) bytes suffice.  0 or -1. */
int   wire_mac(void *ctx, const wire_Frame *f, int n, unsigned char *mac, unsigned *maclen);
/* One-shot HMAC-SHA256 of the concatenation of n parts (out: 32 bytes).
** 0 or -1. */
int   wire_hmac_sha256(const void *key, size_t keylen, const void *const *parts, const size_t *lens, int n, unsigned char out[32]);

/* ------------------------------------------------------------ signatures as text */
/* n bytes -> 2n lower-case hex characters and a NUL */
void wire_hex(const unsigned char *in, size_t n, char *out);
/* 2n hex characters (either case) -> n bytes: 0, or -1 on a non-hex character */
int  wire_unhex(const char *in, unsigned char *out, size_t n);
/* Whether the hex text (either case) is exactly the n-byte mac, compared in
** constant time (no early exit on the first wrong character). */
int  wire_sig_matches(const unsigned char *hex, size_t hexlen, const unsigned char *mac, unsigned n);
/* constant-time comparison: 1 when equal */
int  wire_equal(const void *a, const void *b, size_t n);

/* ------------------------------------------------------------ replays */
/* The signatures seen, in two generations of `gen` entries: memory is fixed
** and the last gen..2*gen signatures are known.  Thread-safe. */
typedef struct wire_Seen wire_Seen;
wire_Seen *wire_seen_new(int gen);
void       wire_seen_free(wire_Seen *s);
/* 1 when mac was seen before; else 0, and it is recorded. */
int        wire_seen_check(wire_Seen *s, const unsigned char *mac, unsigned n);

/* ------------------------------------------------------------ bounds */
/* Sets ZMQ_MAXMSGSIZE (before bind/connect): ZeroMQ drops a connection that
** announces a bigger frame before buffering any of it. */
void wire_limit_frame(void *sock, int64_t max);

/* One multipart message as received, its frames kept up to a bound. */
typedef struct wire_Parts {
  zmq_msg_t *p; int n;   /* the frames kept (the first ones, in order) */
  int frames;            /* how many frames the message had */
  size_t bytes;          /* and bytes */
  int over;              /* it passed maxf frames or maxbytes: the rest was dropped */
  int nomem;             /* no memory to keep a frame: the rest was dropped */
  int cap;
} wire_Parts;
/* Called for every frame of a message over the limit, in order, from the
** moment it is known to be over (the frames kept so far first): what the
** caller needs of it (a signature computed on the fly) without keeping it. */
typedef void (*wire_OverFn)(void *ud, int idx, const void *data, size_t len);
/* Receives one whole message from sock (flags, e.g. ZMQ_DONTWAIT, apply to
** its first frame), keeping at most maxf frames and maxbytes bytes; the rest
** of a bigger one is received and dropped frame by frame (each is at most
** ZMQ_MAXMSGSIZE).  0 (free with wire_parts_close), or -1 with errno when a
** receive failed (nothing is kept then). */
int  wire_recv_parts(void *sock, int flags, int maxf, size_t maxbytes, wire_Parts *r, wire_OverFn over, void *ud);
void wire_parts_close(wire_Parts *r);

#endif
