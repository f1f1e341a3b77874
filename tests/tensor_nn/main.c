/* main.c — runs every table of tests/tensor_nn and prints one line per test. */
#include "tn.h"
#include "tensor/tdevice.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char msg[1024];
static int state;            /* 0 running, 1 failed, 2 skipped */
static char tmpdir[64];

void tn_fail(const char *file, int line, const char *fmt, ...) {
  if (state) return;
  const char *base = strrchr(file, '/');
  int k = snprintf(msg, sizeof msg, "%s:%d: ", base ? base + 1 : file, line);
  va_list ap; va_start(ap, fmt);
  vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
  va_end(ap);
  state = 1;
}
void tn_skip(const char *fmt, ...) {
  if (state) return;
  va_list ap; va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  state = 2;
}
bool tn_done(void) { return state != 0; }

const char *tn_path(const char *name) {
  static char ring[8][512];
  static int i;
  char *p = ring[i++ & 7];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
double tn_urand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;   /* xorshift64 */
  return (double)(rng >> 11) * 0x1.0p-53;
}

static void rm_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(tn_path(e->d_name));
  closedir(d);
  rmdir(tmpdir);
}

static const tn_test *const tables[] = {
  tn_tests_safetensors, tn_tests_npy, tn_tests_csv, tn_tests_nn, tn_tests_conv, tn_tests_sort, tn_tests_atomic,
};

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;   /* optional substring filter */
  char cuda_why[768];   /* the CUDA backend this run sees (see tools/gpu-session.sh's kit test) */
  printf("# cuda: %s\n", nt_cuda_available(cuda_why, sizeof cuda_why) == 1 ? "available" : cuda_why);
  strcpy(tmpdir, "/tmp/tensor_nn.XXXXXX");
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  int npass = 0, nfail = 0, nskip = 0;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const tn_test *x = tables[t]; x->name; x++) {
      if (only && !strstr(x->name, only)) continue;
      state = 0; msg[0] = 0;
      x->fn();
      if (state == 1) { printf("FAIL: %s: %s\n", x->name, msg); nfail++; }
      else if (state == 2) { printf("SKIP: %s: %s\n", x->name, msg); nskip++; }
      else { printf("PASS: %s\n", x->name); npass++; }
      fflush(stdout);
    }
  rm_tmpdir();
  fprintf(stderr, "tensor_nn: %d passed, %d failed, %d skipped\n", npass, nfail, nskip);
  return nfail ? 1 : 0;
}
