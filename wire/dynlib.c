/*
** dynlib.c — libzmq and libcrypto, loaded on first use.
**
** Only workers, `nabla run`, the Jupyter kernel and dist's handshakes use
** ZeroMQ and OpenSSL, yet linking them made every process pay for them at
** start: the dynamic loader mapped 17 more libraries (libzmq pulls
** libstdc++, krb5, libsodium, libpgm, libnorm, ...) and performed ~5,800
** symbol relocations (libcrypto's 3,377 and libstdc++'s 1,666 among them:
** data relocations that lazy binding cannot defer), about three quarters of
** a plain script's startup (bench/results/2026-11-26-vm5.md).  So the
** executable does not link them: this file defines the entry points the
** code uses, each resolving its real one with dlopen/dlsym on its first
** call (the way tensor/tblas.c loads OpenBLAS), so callers are unchanged.
** The loader, the missing-library error and the thread safety (dist's I/O
** and comm threads call zmq_* too) are util/dynload.h's.
*/
#include "util/dynload.h"
#include <zmq.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#ifndef NABLA_ZMQ_LIB
#define NABLA_ZMQ_LIB "libzmq.so.5"
#endif
#ifndef NABLA_CRYPTO_LIB
#define NABLA_CRYPTO_LIB "libcrypto.so.3"
#endif

NB_DYNLIB(zmq_lib, NABLA_ZMQ_LIB, "ZeroMQ (Debian package libzmq5), used by workers and the Jupyter kernel")
NB_DYNLIB(crypto_lib, NABLA_CRYPTO_LIB, "OpenSSL's libcrypto (Debian package libssl3), used by workers and the Jupyter kernel")

#define Z(RT, NAME, PARAMS, ARGS) NB_SHIM(zmq_lib, RT, NAME, PARAMS, ARGS)
#define O(RT, NAME, PARAMS, ARGS) NB_SHIM(crypto_lib, RT, NAME, PARAMS, ARGS)

Z(void *, zmq_ctx_new, (void), ())
Z(int, zmq_ctx_shutdown, (void *c), (c))
Z(int, zmq_ctx_term, (void *c), (c))
Z(void *, zmq_socket, (void *c, int type), (c, type))
Z(int, zmq_close, (void *s), (s))
Z(int, zmq_bind, (void *s, const char *addr), (s, addr))
Z(int, zmq_connect, (void *s, const char *addr), (s, addr))
Z(int, zmq_setsockopt, (void *s, int opt, const void *v, size_t n), (s, opt, v, n))
Z(int, zmq_getsockopt, (void *s, int opt, void *v, size_t *n), (s, opt, v, n))
Z(int, zmq_socket_monitor, (void *s, const char *addr, int events), (s, addr, events))
Z(int, zmq_send, (void *s, const void *buf, size_t len, int flags), (s, buf, len, flags))
Z(int, zmq_recv, (void *s, void *buf, size_t len, int flags), (s, buf, len, flags))
Z(int, zmq_poll, (zmq_pollitem_t *items, int n, long timeout), (items, n, timeout))
Z(int, zmq_msg_init, (zmq_msg_t *m), (m))
Z(int, zmq_msg_init_size, (zmq_msg_t *m, size_t size), (m, size))
Z(int, zmq_msg_close, (zmq_msg_t *m), (m))
Z(void *, zmq_msg_data, (zmq_msg_t *m), (m))
Z(size_t, zmq_msg_size, (const zmq_msg_t *m), (m))
Z(int, zmq_msg_more, (const zmq_msg_t *m), (m))
Z(int, zmq_msg_send, (zmq_msg_t *m, void *s, int flags), (m, s, flags))
Z(int, zmq_msg_recv, (zmq_msg_t *m, void *s, int flags), (m, s, flags))
Z(const char *, zmq_strerror, (int e), (e))
Z(int, zmq_has, (const char *cap), (cap))
Z(char *, zmq_z85_encode, (char *dest, const uint8_t *data, size_t size), (dest, data, size))
Z(int, zmq_curve_public, (char *pub, const char *sec), (pub, sec))

O(int, RAND_bytes, (unsigned char *buf, int num), (buf, num))
O(int, CRYPTO_memcmp, (const void *a, const void *b, size_t len), (a, b, len))
O(int, EVP_EncodeBlock, (unsigned char *t, const unsigned char *f, int n), (t, f, n))
O(EVP_MAC *, EVP_MAC_fetch, (OSSL_LIB_CTX *ctx, const char *alg, const char *props), (ctx, alg, props))
O(EVP_MAC_CTX *, EVP_MAC_CTX_new, (EVP_MAC *mac), (mac))
O(EVP_MAC_CTX *, EVP_MAC_CTX_dup, (const EVP_MAC_CTX *src), (src))
O(int, EVP_MAC_init, (EVP_MAC_CTX *c, const unsigned char *key, size_t keylen, const OSSL_PARAM params[]), (c, key, keylen, params))
O(int, EVP_MAC_update, (EVP_MAC_CTX *c, const unsigned char *data, size_t len), (c, data, len))
O(int, EVP_MAC_final, (EVP_MAC_CTX *c, unsigned char *out, size_t *outl, size_t outsize), (c, out, outl, outsize))
O(const char *, EVP_MD_get0_name, (const EVP_MD *md), (md))
O(OSSL_PARAM, OSSL_PARAM_construct_utf8_string, (const char *key, char *buf, size_t bsize), (key, buf, bsize))
O(OSSL_PARAM, OSSL_PARAM_construct_end, (void), ())
O(const EVP_MD *, EVP_md5, (void), ())
O(const EVP_MD *, EVP_sha1, (void), ())
O(const EVP_MD *, EVP_sha224, (void), ())
O(const EVP_MD *, EVP_sha256, (void), ())
O(const EVP_MD *, EVP_sha384, (void), ())
O(const EVP_MD *, EVP_sha512, (void), ())

NB_SHIMV(crypto_lib, EVP_MAC_CTX_free, (EVP_MAC_CTX *c), (c))
NB_SHIMV(crypto_lib, EVP_MAC_free, (EVP_MAC *mac), (mac))
NB_SHIMV(crypto_lib, OPENSSL_cleanse, (void *p, size_t len), (p, len))
