/*
** fuzz_dproto.c — libFuzzer target: the dist control protocol (dist/dproto.c)
** and the parsing of the bodies its commands carry.
**
** The input is split into frames at every "\n--\n", as in fuzz_wire.c.  The
** first byte is the mode: bit 0 checks signatures (the fixed key below) or
** not (an inproc pipe), bit 1 puts a routing identity first (the session's
** ROUTER side), bit 2 re-signs the header and body frames so that what lies
** behind the signature is reached, bits 3-5 the worker's world size (1-8)
** for `welcome`.  A decoded message goes where dist.c would send it: the
** handshake's `hello` parser, `welcome`'s world and address list, `runfile`'s
** argument split, `interrupt`'s sequence number.  Every frame is a separate
** heap copy, so ASan catches reads past any frame's end.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_dproto -max_total_time=60 tests/fuzz/corpus_dproto
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dproto.h"

#define MAXF 64

static const unsigned char KEY[DP_KEYLEN] = "nabla-fuzz-key-nabla-fuzz-key-!";

/* touches every byte so that a bad pointer or length shows under ASan */
static void touch(const char *p, size_t n) {
  volatile unsigned char sum = 0;
  for (size_t i = 0; i < n; i++) sum += (unsigned char)p[i];
  (void)sum;
}

static void dispatch(dp_Msg *m, int world) {
  touch(m->type, strlen(m->type));
  touch(m->body, m->len + 1);   /* NUL-terminated */
  if (!strcmp(m->type, "hello")) {
    dp_Hello h;
    if (!dp_parse_hello(m->body, &h)) { touch(h.addr, strlen(h.addr)); touch(h.mac, strlen(h.mac)); }
  } else if (!strcmp(m->type, "welcome")) {
    dp_Welcome w;
    if (!dp_parse_welcome(m->body, m->len, world, &w)) {
      for (int i = 0; i < w.world; i++) {
        touch(w.addrs[i], strlen(w.addrs[i]));
        const char *colon = strrchr(w.addrs[i], ':');   /* what dr_connect reads */
        if (colon) (void)atoi(colon + 1);
      }
      dp_welcome_free(&w);
    }
  } else if (!strcmp(m->type, "runfile")) {
    char *argv[256];
    int argc = dp_split_args(m->body, m->len, argv, 255);
    for (int i = 0; i < argc; i++) touch(argv[i], strlen(argv[i]));
  } else if (!strcmp(m->type, "interrupt")) {
    (void)strtoul(m->body, NULL, 10);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0];
  data++; size--;
  const void *frames[MAXF]; size_t lens[MAXF];
  char *copies[MAXF];
  int n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && n < MAXF; i++) {
    int cut = i == size || (i + 4 <= size && !memcmp(data + i, "\n--\n", 4));
    if (!cut) continue;
    size_t len = i - start;
    copies[n] = malloc(len ? len : 1);
    if (!copies[n]) break;
    if (len) memcpy(copies[n], data + start, len);
    frames[n] = copies[n]; lens[n] = len;
    n++;
    if (i == size) break;
    start = i + 4;
    i += 3;   /* past the separator (the loop adds one more) */
  }
  int keyed = mode & 1, has_ident = (mode >> 1) & 1, world = ((mode >> 3) & 7) + 1;
  char sig[65];
  int d = has_ident ? 1 : 0;
  if ((mode & 5) == 5 && n >= d + 3 && lens[d + 1] == 64) {   /* re-sign: header and body frames */
    const void *parts[MAXF]; size_t plens[MAXF];
    int np = 0;
    for (int i = d + 2; i < n; i++) { parts[np] = frames[i]; plens[np] = lens[i]; np++; }
    unsigned char mac[32];
    wire_hmac_sha256(KEY, DP_KEYLEN, parts, plens, np, mac);
    wire_hex(mac, 32, sig);
    frames[d + 1] = sig;
  }
  dp_Msg m;
  if (dp_decode(keyed ? KEY : NULL, frames, lens, n, has_ident, &m) == 0) dispatch(&m, world);
  dp_msg_free(&m);
  for (int i = 0; i < n; i++) free(copies[i]);
  return 0;
}
