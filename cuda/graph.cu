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
// cannot replay (random numbers: their Philox offsets are launch arguments;
// collectives).  A kernel file that itself copies from host memory or waits
// inside a step (none does on the step's path once warm: optim.cu uploads its
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

namespace ncu {

bool capture_active;
uintptr_t capture_pool_tag;

namespace {

uintptr_t next_tag = 16;
uintptr_t cur_tag;                 // the pool of the capture begun last (until graph_end)
bool broken;                       // the capture ended early at a gate
std::string broken_reason;

struct Graph {
  cudaGraphExec_t exec;
  uintptr_t pool;
};

// Ends the stream's capture and launches what it recorded.  *out: the
// instantiated graph (kept by the caller), or destroyed here when out is NULL.
int finish_capture(cudaGraphExec_t *out, const char *when) {
  capture_active = false;
  capture_pool_tag = 0;
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    host->error_set("compile: CUDA ended the capture %s with %s (%s): the step's GPU work was not run; "
                    "something outside the module's gates used the stream (run the step eagerly: NABLA_COMPILE=0)",
                    when, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
  }
  cudaGraphExec_t x = nullptr;
  e = cudaGraphInstantiate(&x, g, 0);
  cudaGraphDestroy(g);
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
  cur_tag = next_tag++;
  CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capture_pool_tag = cur_tag;
  capture_active = true;
  return 0;
}

// NULL with reason set when the capture broke (its work ran); NULL with
// reason empty and the error set on failure; else the graph, launched once.
static void *api_graph_end(char *reason, size_t n) {
  if (n) reason[0] = 0;
  if (bind_device()) return nullptr;
  uintptr_t tag = cur_tag;
  cur_tag = 0;
  if (!tag) { host->error_set("compile: no capture in progress"); return nullptr; }
  if (broken || !capture_active) {
    capture_active = false;
    capture_pool_tag = 0;
    pool_release(tag);
    snprintf(reason, n, "%s", broken ? broken_reason.c_str() : "the capture ended early");
    return nullptr;
  }
  Graph *g = nullptr;
  int rc = guarded("compile", [&] {
    cudaGraphExec_t x = nullptr;
    if (finish_capture(&x, "at its end")) return -1;
    g = new Graph{ x, tag };
    return 0;
  });
  if (rc) {
    if (capture_active) { cudaGraph_t dead = nullptr; capture_active = false; capture_pool_tag = 0; if ((cudaStreamEndCapture)(stream, &dead) == cudaSuccess && dead) cudaGraphDestroy(dead); cudaGetLastError(); }
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
  return 0;
}

static void api_graph_destroy(void *p) {
  if (!p || bind_device()) return;
  Graph *g = (Graph *)p;
  cudaGraphExecDestroy(g->exec);
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
}

}  // namespace ncu
