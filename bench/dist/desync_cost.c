/*
** bench/dist/desync_cost.c — the CPU cost of the desync check on shared
** memory (dist/ddesync.c), now that its hash rides in the collective's first
** barrier: describing the call (dd_describe), hashing it and handing it to
** the segment (dd_check -> ds_sig_defer), per all_reduce of a [1024] f32
** tensor.  The barrier it rides in is the collective's own, so this is all
** the check adds; compare with bench/dist/latency.py's 4 KB all_reduce.
**
** A fake one-host group of 2 (no peers: the deferred signature is never
** published, so each call after the first chains onto it; the description's
** copy that a published one would make is timed beside it).
**
** Build and run (after make build):
**   cc -O2 -I. bench/dist/desync_cost.c build/libnabla.a -lm -ldl -fopenmp -pthread -o /tmp/desync_cost && /tmp/desync_cost
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tensor/tensor.h"
#include "dist/ddesync.h"
#include "dist/dshm.h"

/* this process's CPU time: on a shared machine wall time would count the
** slices other processes ran in */
static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(void) {
  nt_init();
  int64_t shape[1] = { 1024 };
  nt_Tensor *x = nt_ones(shape, 1, NT_F32, NT_CPU);
  if (!x) { fprintf(stderr, "%s\n", nt_error_msg()); return 1; }
  int fds[2] = { -1, -1 };
  dr_Group g;
  memset(&g, 0, sizeof g);
  g.rank = 0; g.world = 2; g.fd = fds;
  g.shm = calloc(1, 1 << 16);   /* stands in for the segment's private state: only its signature fields are written */
  ds_enabled = 1;
  char copy[160];
  const int N = 2000000;
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    for (int i = 0; i < N; i++) {
      char d[160];
      dd_describe(d, sizeof d, "all_reduce", "op=sum", x, 0);
      if (dd_check(&g, d)) { fprintf(stderr, "check failed: %s\n", g.err); return 1; }
      size_t k = strnlen(d, sizeof copy - 1);
      memcpy(copy, d, k); copy[k] = 0;
      __asm__ __volatile__("" : : "r"(copy) : "memory");
    }
    double dt = (now() - t0) / N * 1e9;
    if (dt < best) best = dt;
  }
  printf("desync check on shared memory: %.0f ns per call (best of 5 x %d; description \"%s\")\n", best, N, copy);
  nt_release(x);
  return 0;
}
