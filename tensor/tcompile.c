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
** What is refused (the capture ends there, its work so far runs, the call
** goes on eagerly, and the reason reaches compiled.stats()): random numbers,
** whose Philox seed and offset are launch arguments a graph would freeze
** (every replay would draw the same dropout mask).  The module refuses the
** rest (host waits and copies, side streams, cudaFree: cuda/graph.cu).
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
};

static nt_Graph *cur;        /* the capture in progress (one at a time, this thread) */

bool nt_graph_capturing(void) { return nt_graph_capturing_; }

int nt_graph_begin(void) {
  if (cur) NT_FAIL("compile: a capture is already running (captures do not nest)");
  nt_Graph *g = calloc(1, sizeof *g);
  if (!g) NT_FAIL("compile: out of memory");
  if (nt_cuda_graph_begin()) { free(g); return -1; }
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
  g->dev = nt_cuda_graph_end(reason, n);
  if (!g->dev) { release_ext(g); free(g); return NULL; }
  return g;
}

int nt_graph_replay(nt_Graph *g) {
  if (!g) NT_FAIL("compile: no graph to replay");
  return nt_cuda_graph_launch(g->dev);
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
  if (op == NT_OP_RANDOM)
    return nt_cuda_graph_refuse("random numbers (dropout, rand, randn): their Philox offsets are launch arguments, "
                                "which a replay would repeat (per-replay offsets on the device are not built yet)");
  for (int i = 0; i < a->nin && i < 4; i++) keep(a->in[i]);
  keep(a->out);
  return 0;
}
