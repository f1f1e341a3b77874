/*
** fuzz_wire.c — libFuzzer target: the Jupyter wire decoder (wire/wire.c).
**
** The input is split into frames at every "\n--\n" (so the fuzzer can build
** multipart messages, delimiters and JSON frames); the first byte picks whether
** the decoder checks signatures (key "fuzz-key") or not.  With signing on, the
** frames after the delimiter are re-signed half of the time so that the JSON
** parsing and field checks behind the signature are reached too.  Every frame
** is a separate heap copy, so ASan catches reads past any frame's end.
**
** Built only with -Dfuzz=true (clang); see tests/fuzz/meson.build.
** Run:  build-fuzz/tests/fuzz/fuzz_wire -max_total_time=60 tests/fuzz/corpus_wire
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

#define MAXF 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0];
  data++; size--;
  wire_Frame frames[MAXF];
  unsigned char *copies[MAXF];
  int n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && n < MAXF; i++) {
    int cut = i == size || (i + 4 <= size && !memcmp(data + i, "\n--\n", 4));
    if (!cut) continue;
    size_t len = i - start;
    copies[n] = malloc(len ? len : 1);
    if (!copies[n]) break;
    if (len) memcpy(copies[n], data + start, len);
    frames[n].data = copies[n]; frames[n].len = len;
    n++;
    if (i == size) break;
    start = i + 4;
    i += 3;   /* past the separator (the loop adds one more) */
  }
  wire_Auth auth;
  char err[256];
  if (mode & 1) wire_auth_init(&auth, (mode & 2) ? "hmac-sha256" : "hmac-sha512", "fuzz-key", err, sizeof err);
  else wire_auth_init(&auth, NULL, "", err, sizeof err);
  char sig[129];
  if ((mode & 5) == 5) {   /* re-sign: the frames after the delimiter become valid */
    for (int d = 0; d + 5 < n; d++) {
      if (frames[d].len == 9 && !memcmp(frames[d].data, "<IDS|MSG>", 9)) {
        wire_sign(&auth, &frames[d + 2], sig);
        frames[d + 1].data = (const unsigned char *)sig; frames[d + 1].len = strlen(sig);
        break;
      }
    }
  }
  wire_Msg m;
  if (wire_decode(&auth, frames, n, &m, err, sizeof err) == WIRE_OK) {
    /* touch what a server would use */
    volatile size_t sum = strlen(m.msg_type) + strlen(m.msg_id) + strlen(m.session) + m.header_len;
    for (int i = 0; i < m.nids; i++) sum += m.ids[i].len ? m.ids[i].data[m.ids[i].len - 1] : 0;
    for (int i = 0; i < m.nbuffers; i++) sum += m.buffers[i].len ? m.buffers[i].data[0] : 0;
    (void)sum;
  }
  wire_msg_free(&m);
  wire_auth_free(&auth);
  for (int i = 0; i < n; i++) free(copies[i]);
  return 0;
}
