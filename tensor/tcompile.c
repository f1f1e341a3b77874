/*
** tcompile.c — CUDA graphs for compile (tcompile.h): a capture session on this
** thread, the tensors it must keep alive, the ops it refuses.
**
** Why keep tensors alive: a graph replays into the addresses it captured.  A
** parameter or an optimizer moment the step reads was allocated outside the
** capture; if it were freed (a model rebuilt, a state dropped) its block
** could go to other work while the graph may still replay into it -- a
** silent wrong value.  So while capturing, the dispatch hook retains every
** device tensor an op touches whose storage is not from the capture's pool.
**
** Random numbers (dropout): the generator (trandom.c) is a host (seed,
** offset) pair advanced by every draw.  A captured Philox kernel reads its
** seed and an offset DELTA from the graph's random slot (cuda/graph.cu), so
** before each replay this file writes {current seed, current offset - the
** offset at capture} there and advances the host offset by what the
** captured call drew: replay k draws exactly what the k-th eager call would,
** and the generator is left where eager leaves it.
**
** The module refuses what a graph cannot hold (host waits and copies, side
** streams, cudaFree: cuda/graph.cu); the capture ends there, its work so far
** runs, the call goes on eagerly, and the reason reaches compiled.stats().
*/
#include "tinternal.h"
#include "tbackend.h"
#include "tcompile.h"
#include "textend.h"
#include <stdlib.h>
#include <string.h>

bool nt_graph_capturing_;

struct nt_Graph {
  void *dev;                 /* the module's graph */
  nt_Tensor **ext;           /* retained external tensors */
  int next, cap;
  uint64_t rng_off0;         /* the generator's offset when the capture began */
  uint64_t rng_resets0;      /* nt_rng_resets_() then */
  uint64_t rng_drawn;        /* offsets the captured call advanced it by (0: no random numbers) */
};

static nt_Graph *cur;        /* the capture in progress (one at a time, this thread) */

bool nt_graph_capturing(void) { return nt_graph_capturing_; }

int nt_graph_begin(void) {
  if (cur) NT_FAIL("compile: a capture is already running (captures do not nest)");
  nt_Graph *g = calloc(1, sizeof *g);
  if (!g) NT_FAIL("compile: out of memory");
  if (nt_cuda_graph_begin()) { free(g); return -1; }
  uint64_t seed;
  nt_rng_get_state(&seed, &g->rng_off0);
  g->rng_resets0 = nt_rng_resets_();
  cur = g;
  nt_graph_capturing_ = true;
  return 0;
}

static void release_ext(nt_Graph *g) {
  for (int i = 0; i < g->next; i++) nt_release(g->ext[i]);
  free(g->ext);
  g->ext = NULL; g->next = g->cap = 0;
}

nt_Graph *nt_graph_end(char *reason, size_t n) {
  if (n) reason[0] = 0;
  nt_Graph *g = cur;
  if (!g) { nt_error_set("compile: no capture is running"); return NULL; }
  cur = NULL;
  nt_graph_capturing_ = false;
  uint64_t seed, off;
  nt_rng_get_state(&seed, &off);
  g->rng_drawn = off - g->rng_off0;
  /* a replay can only continue the generator's sequence, not repeat a reset */
  if (nt_rng_resets_() != g->rng_resets0)   /* ends the capture: graph_end below reports the reason */
    (void)nt_cuda_graph_refuse("the random generator's state set inside the step (seed(), or a checkpointed segment's restore)");
  g->dev = nt_cuda_graph_end(reason, n);
  if (!g->dev) { release_ext(g); free(g); return NULL; }
  return g;
}

int nt_graph_replay(nt_Graph *g) {
  if (!g) NT_FAIL("compile: no graph to replay");
  if (g->rng_drawn) {           /* draw what the eager call would draw now, and advance as it would */
    uint64_t seed, off;
    nt_rng_get_state(&seed, &off);
    if (nt_cuda_graph_set_rng(g->dev, seed, off - g->rng_off0)) return -1;
    if (nt_cuda_graph_launch(g->dev)) return -1;
    nt_rng_set_state(seed, off + g->rng_drawn);
    return 0;
  }
  return nt_cuda_graph_launch(g->dev);
}

int nt_device_scalar_set(nt_Tensor *t, const double *v, int n) {
  if (n < 1 || n > 64) NT_FAIL("set_device_scalar: 1 to 64 values, got %d", n);
  if (!t || t->dtype != NT_F64 || t->numel != n || !(t->flags & NT_T_CONTIG))
    NT_FAIL("set_device_scalar: expected a contiguous f64 tensor of %d elements, got %s of %lld", n,
            t ? nt_dtype_name(t->dtype) : "nothing", t ? (long long)t->numel : 0LL);
  if (t->storage->device == NT_CPU) { memcpy(nt_base(t), v, sizeof *v * (size_t)n); nt_bump_version(t); return 0; }
  if (nt_dev_check(t, "set_device_scalar")) return -1;
  uint64_t bits[64];
  memcpy(bits, v, sizeof *v * (size_t)n);
  if (nt_cuda_graph_poke(nt_base(t), bits, n)) return -1;
  nt_bump_version(t);
  return 0;
}

void nt_graph_free(nt_Graph *g) {
  if (!g) return;
  nt_cuda_graph_destroy(g->dev);
  release_ext(g);
  free(g);
}

int nt_graph_externals(const nt_Graph *g) { return g ? g->next : 0; }

static void keep(nt_Tensor *t) {
  if (!t || t->storage->device == NT_CPU || !cur) return;
  for (int i = 0; i < cur->next; i++) if (cur->ext[i]->storage == t->storage) return;
  if (nt_cuda_graph_owns(t->storage->data)) return;   /* the capture's own buffer */
  if (cur->next == cur->cap) {
    int nc = cur->cap ? 2 * cur->cap : 32;
    nt_Tensor **p = realloc(cur->ext, (size_t)nc * sizeof *p);
    if (!p) { nt_cuda_graph_refuse("out of host memory tracking the step's tensors"); return; }
    cur->ext = p; cur->cap = nc;
  }
  /* a view header of its own: op inputs may be stack views (nt_bcast_view) */
  nt_Tensor *v = nt_view_of(t);
  if (!v) { nt_cuda_graph_refuse("out of host memory tracking the step's tensors"); return; }
  cur->ext[cur->next++] = v;
}

int nt_graph_on_dispatch_(int op, const nt_KernelArgs *a) {
  if (!cur) return 0;
  (void)op;
  for (int i = 0; i < a->nin && i < 4; i++) keep(a->in[i]);
  keep(a->out);
  return 0;
}
