// graph.cu — CUDA graphs of the compute stream: what compile (tensor/tcompile.c,
// lang/lib/lcompile.c) captures a training step into and replays.
//
// graph_begin starts capturing the module's one compute stream
// (cudaStreamBeginCapture, thread-local mode) and opens a PRIVATE POOL in the
// caching allocator (allocator.cu, graph.h): every allocation the step makes
// while it is captured comes from the pool's own segments, and blocks freed
// during the capture are reused only by the capture, so a replay writes
// memory that nothing outside the graph holds.  graph_end instantiates the
// graph and launches it once: capturing records the work without running it,
// so this launch IS the call's work (the call stays equivalent to an eager
// one).  graph_launch replays it (one cudaGraphLaunch, counted as one launch
// in cuda.stats()); graph_destroy frees it and gives its pool back.
//
// What cannot be captured never crashes and never records something that
// would replay wrongly: the module's choke points call the gates (graph.h)
// before a host wait, a copy from or to host memory, work on another stream
// or a cudaFree, and the tensor layer calls graph_refuse for what it knows
// cannot replay (collectives, seed() inside the step).  What must change
// between replays is read from device memory written OUTSIDE the graph
// (graph_poke: the device scalars; the random slot the Philox kernels read
// their seed and offset delta from: graph.h).  A kernel file that itself
// copies from host memory or waits inside a step (none does on the step's path once warm: optim.cu uploads its
// table only when the parameter set changes) is stopped by CUDA: the capture
// is invalidated, the op fails, and compile reports the error -- loud, never
// a graph that replays stale host memory.  At a gate the capture ENDS: the work recorded so far is
// instantiated and launched at once, which runs it exactly as the eager calls
// would have, the reason is kept, and the call goes on eagerly.  graph_end
// then returns no graph and the reason ("compile" reports it).
//
// Only one capture at a time, on the interpreter's thread (the caller's
// rule: tensor/tcompile.c).
#include "common.cuh"
#include "cuda/graph.h"
#include <stdio.h>
#include <string>
#include <vector>

namespace ncu {

bool capture_active;
uintptr_t capture_pool_tag;
uint64_t *capture_rng_slot;

namespace {

// ---- device scalars: pokes (graph.h) ----------------------------------------------------------
// Up to kPokes 8-byte writes in one launch; the values travel as the launch
// argument (1 KiB), so no host copy is made and nothing waits.
constexpr int kPokes = 64;
struct Pokes { int n; uint64_t *dst[kPokes]; uint64_t bits[kPokes]; };
__global__ void poke_kernel(Pokes p) {
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) *p.dst[i] = p.bits[i];
}
std::vector<std::pair<uint64_t *, uint64_t>> pending;   // deferred while capturing (distinct dsts)

int launch_pokes(const std::pair<uint64_t *, uint64_t> *w, size_t n) {
  for (size_t lo = 0; lo < n; lo += kPokes) {
    Pokes p;
    p.n = (int)(n - lo < (size_t)kPokes ? n - lo : kPokes);
    for (int i = 0; i < p.n; i++) { p.dst[i] = w[lo + i].first; p.bits[i] = w[lo + i].second; }
    poke_kernel<<<1, 64, 0, stream>>>(p);
    CU(cudaGetLastError());
    count(C_LAUNCHES);
  }
  return 0;
}
// the deferred pokes, just before a captured graph's first launch (never inside it)
int flush_pokes(void) {
  std::vector<std::pair<uint64_t *, uint64_t>> w;
  w.swap(pending);
  return launch_pokes(w.data(), w.size());
}

bool rng_seed_set;                 // the capture's random kernels fixed the slot's seed
uint64_t rng_seed0;
uint64_t *cur_rng;                 // the rng slot of the capture begun last (until graph_end)

uintptr_t next_tag = 16;
uintptr_t cur_tag;                 // the pool of the capture begun last (until graph_end)
bool broken;                       // the capture ended early at a gate
std::string broken_reason;

struct Graph {
  cudaGraphExec_t exec;
  uintptr_t pool;
  uint64_t *rng;                   // {seed, offset delta} its random kernels read (graph.h)
};

// Ends the stream's capture and launches what it recorded.  *out: the
// instantiated graph (kept by the caller), or destroyed here when out is NULL.
int finish_capture(cudaGraphExec_t *out, const char *when) {
  capture_active = false;
  capture_pool_tag = 0;
  capture_rng_slot = nullptr;
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    pending.clear();
    host->error_set("compile: CUDA ended the capture %s with %s (%s): the step's GPU work was not run; "
                    "something outside the module's gates used the stream (run the step eagerly: NABLA_COMPILE=0)",
                    when, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
  }
  cudaGraphExec_t x = nullptr;
  e = cudaGraphInstantiate(&x, g, 0);
  cudaGraphDestroy(g);
  if (e == cudaSuccess && flush_pokes()) { cudaGraphExecDestroy(x); return -1; }
  pending.clear();
  if (e == cudaSuccess) {
    e = cudaGraphLaunch(x, stream);
    if (e == cudaSuccess) count(C_LAUNCHES);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (x) cudaGraphExecDestroy(x);
    host->error_set("compile: launching the captured graph %s failed: %s (%s): the step's GPU work was not run", when,
                    cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
  }
  last_op = "(graph)";
  if (out) *out = x;
  else cudaGraphExecDestroy(x);
  return 0;
}

int break_capture(const char *what) {
  broken = true;
  broken_reason = what;
  return finish_capture(nullptr, "early");
}

}  // namespace

int capture_gate(const char *what) { return capture_active ? break_capture(what) : 0; }

int graph_poke(void *dst, const uint64_t *bits, int n) {
  if (!dst || ((uintptr_t)dst & 7) || n < 1 || n > kPokes) {
    host->error_set("compile: device scalars are 1 to %d aligned 8-byte device values", kPokes);
    return -1;
  }
  std::pair<uint64_t *, uint64_t> w[kPokes];
  for (int i = 0; i < n; i++) w[i] = { (uint64_t *)dst + i, bits[i] };
  if (!capture_active) return launch_pokes(w, (size_t)n);
  return guarded("compile (device scalar)", [&] {
    for (int i = 0; i < n; i++) {
      bool found = false;
      for (auto &q : pending) if (q.first == w[i].first) { q.second = w[i].second; found = true; }
      if (!found) pending.push_back(w[i]);
    }
    return 0;
  });
}

int capture_rng_seed(uint64_t seed) {
  if (!capture_active || !capture_rng_slot) return 0;
  if (!rng_seed_set) {
    rng_seed_set = true;
    rng_seed0 = seed;
    uint64_t v[2] = { seed, 0 };
    return graph_poke(capture_rng_slot, v, 2);
  }
  return seed == rng_seed0 ? 0 : break_capture("random numbers under a second seed (seed() called inside the step)");
}
int capture_gate_copy(cudaMemcpyKind k) {
  if (!capture_active) return 0;
  if (k == cudaMemcpyHostToDevice) return break_capture("a host-to-device copy (a CPU value sent to the GPU inside the step)");
  if (k == cudaMemcpyDeviceToHost) return break_capture("a device-to-host copy (a GPU value read on the host: item, tolist, printing)");
  return 0;
}

// ---- the nt_DeviceApi entries (tensor/tbackend.h) ---------------------------------------------------
static int api_graph_begin(void) {
  if (bind_device()) return -1;
  if (capture_active || cur_tag) { host->error_set("compile: a capture is already in progress (captures do not nest)"); return -1; }
  broken = false;
  broken_reason.clear();
  pending.clear();
  rng_seed_set = false;
  // the random-number slot comes from the general cache, before the capture
  cur_rng = (uint64_t *)dev_alloc(2 * sizeof(uint64_t));
  if (!cur_rng) return -1;
  cur_tag = next_tag++;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) { cur_tag = 0; dev_free(cur_rng); cur_rng = nullptr; CU(e); }
  capture_pool_tag = cur_tag;
  capture_rng_slot = cur_rng;
  capture_active = true;
  return 0;
}

// NULL with reason set when the capture broke (its work ran); NULL with
// reason empty and the error set on failure; else the graph, launched once.
static void *api_graph_end(char *reason, size_t n) {
  if (n) reason[0] = 0;
  if (bind_device()) return nullptr;
  uintptr_t tag = cur_tag;
  uint64_t *rng = cur_rng;
  cur_tag = 0;
  cur_rng = nullptr;
  if (!tag) { host->error_set("compile: no capture in progress"); return nullptr; }
  if (broken || !capture_active) {
    capture_active = false;
    capture_pool_tag = 0;
    capture_rng_slot = nullptr;
    pending.clear();
    if (rng) dev_free(rng);          // stream-ordered: the launched partial graph read it first
    pool_release(tag);
    snprintf(reason, n, "%s", broken ? broken_reason.c_str() : "the capture ended early");
    return nullptr;
  }
  Graph *g = nullptr;
  int rc = guarded("compile", [&] {
    cudaGraphExec_t x = nullptr;
    if (finish_capture(&x, "at its end")) return -1;
    g = new Graph{ x, tag, rng };
    return 0;
  });
  if (rc) {
    if (capture_active) { cudaGraph_t dead = nullptr; capture_active = false; capture_pool_tag = 0; capture_rng_slot = nullptr; if ((cudaStreamEndCapture)(stream, &dead) == cudaSuccess && dead) cudaGraphDestroy(dead); cudaGetLastError(); }
    pending.clear();
    if (rng) dev_free(rng);
    pool_release(tag);
    return nullptr;
  }
  return g;
}

static int api_graph_launch(void *p) {
  if (bind_device()) return -1;
  Graph *g = (Graph *)p;
  if (capture_active) { host->error_set("compile: cannot replay a graph while another step is being captured"); return -1; }
  CU(cudaGraphLaunch(g->exec, stream));
  count(C_LAUNCHES);
  last_op = "(graph)";
  optim_forget_steps();              // its AdamW prologues advanced device step counts
  return 0;
}

// the graph's random slot := {seed, delta}: its Philox kernels then draw at
// (seed, captured offset + delta), what eager would draw now
static int api_graph_set_rng(void *p, uint64_t seed, uint64_t delta) {
  if (bind_device()) return -1;
  Graph *g = (Graph *)p;
  if (!g || !g->rng) { host->error_set("compile: no graph to set the random state of"); return -1; }
  if (capture_active) { host->error_set("compile: cannot set a graph's random state while another step is being captured"); return -1; }
  std::pair<uint64_t *, uint64_t> w[2] = { { g->rng, seed }, { g->rng + 1, delta } };
  return launch_pokes(w, 2);
}
static int api_graph_poke(void *dst, const uint64_t *bits, int n) { return bind_device() ? -1 : graph_poke(dst, bits, n); }

static void api_graph_destroy(void *p) {
  if (!p || bind_device()) return;
  Graph *g = (Graph *)p;
  cudaGraphExecDestroy(g->exec);
  if (g->rng) dev_free(g->rng);
  guarded("compile (graph destroy)", [&] { pool_release(g->pool); return 0; });
  delete g;
}

static int api_graph_refuse(const char *what) { return capture_gate(what); }
static int api_graph_owns(const void *p) { return cur_tag && pool_owns(p, cur_tag); }

void graph_fill_api(nt_DeviceApi *api) {
  api->graph_begin = api_graph_begin;
  api->graph_end = api_graph_end;
  api->graph_launch = api_graph_launch;
  api->graph_destroy = api_graph_destroy;
  api->graph_refuse = api_graph_refuse;
  api->graph_owns = api_graph_owns;
  api->graph_poke = api_graph_poke;
  api->graph_set_rng = api_graph_set_rng;
}

}  // namespace ncu
