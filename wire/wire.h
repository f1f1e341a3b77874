/*
** wire.h — the signed ZeroMQ message codec of the Jupyter messaging protocol
** (version 5.3), used by the Jupyter kernel.  Its signing core (HMAC,
** constant-time checks, replay memory, bounded receive) is sign.h, which
** dist's control protocol (dist/dproto.c) shares.
**
** A message on the wire is a multipart ZeroMQ message:
**     [ident...] "<IDS|MSG>" signature header parent_header metadata content [buffer...]
** The signature is the lower-case hex HMAC of the four JSON frames, keyed by the
** connection file's key with its signature_scheme ("hmac-sha256"); an empty key
** means messages are not signed.  Decoding validates everything (frame count
** and sizes, the signature in constant time, JSON syntax, field presence and
** types) and returns an error code, never crashes, on bad input.
*/
#ifndef NABLA_WIRE_H
#define NABLA_WIRE_H

#include <stddef.h>
#include "wire/sign.h"   /* wire_Frame, and the signing core this codec is built on */

#define WIRE_PROTOCOL_VERSION "5.3"
#define WIRE_DELIM "<IDS|MSG>"
/* limits on what decode accepts */
#define WIRE_MAX_FRAMES 4096
#define WIRE_MAX_BYTES ((size_t)64 << 20)   /* all frames together */
/* ZMQ_MAXMSGSIZE of every socket (wire_limit_socket): ZeroMQ drops a
** connection that announces a bigger frame before buffering any of it.
** Above WIRE_MAX_BYTES so that a request somewhat over the limit can still
** be read far enough (its signature checked on the fly, its content not
** kept) to get an error reply. */
#define WIRE_MAX_FRAME (2 * WIRE_MAX_BYTES)
/* replay protection: signatures seen, in two generations of this many */
#define WIRE_SEEN_GEN 32768

enum {
  WIRE_OK = 0,
  WIRE_ETRUNC,     /* no delimiter, or fewer than the 5 frames after it */
  WIRE_ESIG,       /* signature missing or wrong */
  WIRE_EJSON,      /* a JSON frame does not parse or is not an object */
  WIRE_EFIELD,     /* a required header field is missing or of the wrong type */
  WIRE_ETOOBIG,    /* over WIRE_MAX_FRAMES / WIRE_MAX_BYTES */
  WIRE_ESYS,       /* a ZeroMQ or allocation failure */
  WIRE_EREPLAY,    /* a signature seen before: a replayed message */
};
const char *wire_strerror(int code);

/* Signing key and scheme.  key may be empty (no signing). */
typedef struct wire_Seen wire_Seen;
typedef struct wire_Auth {
  const void *md;              /* EVP_MD*, NULL when not signing */
  void *ctx;                   /* EVP_MAC_CTX* keyed once; duplicated per message */
  unsigned char *key; size_t keylen;
  wire_Seen *seen;             /* signatures seen (wire_auth_reject_replays); NULL: not checked */
} wire_Auth;
/* scheme: "hmac-sha256" (also hmac-sha1/sha224/sha384/sha512) or NULL/"" for
** the default sha256.  Returns 0, or -1 with a message in err. */
int  wire_auth_init(wire_Auth *a, const char *scheme, const char *key, char *err, size_t errlen);
void wire_auth_free(wire_Auth *a);
/* From now on decoding rejects a message whose signature was seen before
** (WIRE_EREPLAY), like jupyter_client; the last 2*WIRE_SEEN_GEN signatures
** are remembered.  Thread-safe.  Returns 0 or -1 (out of memory). */
int  wire_auth_reject_replays(wire_Auth *a);
/* Sets ZMQ_MAXMSGSIZE to WIRE_MAX_FRAME on sock (before bind/connect). */
void wire_limit_socket(void *sock);
/* Writes the hex signature of the frames to hex (2*EVP_MAX_MD_SIZE+1 bytes
** suffice: 129); empty string when not signing. */
void wire_sign(const wire_Auth *a, const wire_Frame f[4], char *hex);

/* Identity of this side of the conversation: the header's session and username. */
typedef struct wire_Session {
  wire_Auth auth;
  char session[40];
  char username[64];
} wire_Session;
/* Fills session with a fresh uuid4 and username from $USER (or "nabla"). */
void wire_session_init(wire_Session *s);

/* A decoded message.  json_t fields are jansson objects owned by the message. */
typedef struct json_t json_t;
typedef struct wire_Msg {
  wire_Frame *ids; int nids;           /* routing identities (copied) */
  json_t *header, *parent, *metadata, *content;
  char *header_raw; size_t header_len; /* the header frame as received: the parent_header of replies */
  wire_Frame *buffers; int nbuffers;   /* copied */
  const char *msg_type, *msg_id, *session;   /* point into header */
} wire_Msg;

/* Decodes the frames of one multipart message.  On failure err gets a
** one-line reason and *out is empty — except when the signature verified
** and the header parsed but the rest did not (bad JSON elsewhere, a NUL
** where none may be, a replay, a message over the limits from wire_recv):
** then ids, header, header_raw, msg_type and msg_id are set so the caller
** can send an error reply (content is NULL).  Free *out either way. */
int  wire_decode(const wire_Auth *a, const wire_Frame *frames, int n, wire_Msg *out, char *err, size_t errlen);
void wire_msg_free(wire_Msg *m);

/* Receives one whole multipart message from sock (blocking; flags may be
** ZMQ_DONTWAIT) and decodes it.  Oversized messages are drained and rejected.
** Returns WIRE_OK, an error code, or WIRE_ESYS with errno set (EAGAIN, ETERM). */
int  wire_recv(void *sock, const wire_Auth *a, wire_Msg *out, int flags, char *err, size_t errlen);

/* Sends a message.  ids/nids: routing identities (a ROUTER reply: the
** request's ids); topic: a PUB topic frame instead (may be NULL);
** parent_raw: the parent's header JSON text (NULL or "" = {}).  content and
** metadata are stolen (metadata may be NULL = {}).  Returns 0 or -1. */
int  wire_send(void *sock, const wire_Session *s, const wire_Frame *ids, int nids, const char *topic,
               const char *parent_raw, size_t parent_len, const char *msg_type,
               json_t *content, json_t *metadata);
/* A reply to msg on a ROUTER socket (same ids, msg's header as parent). */
int  wire_reply(void *sock, const wire_Session *s, const wire_Msg *msg, const char *msg_type, json_t *content);

/* helpers */
void wire_uuid4(char out[37]);
void wire_now_iso(char out[40]);     /* 2024-05-01T12:34:56.123456Z */

#endif
