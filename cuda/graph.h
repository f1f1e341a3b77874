// graph.h — what graph.cu and allocator.cu share: the private memory pool of
// a graph being captured (private to the CUDA module).
#pragma once
#include <stdint.h>
#include <stddef.h>

#include <cuda_runtime.h>

namespace ncu {

// ---- the gates ------------------------------------------------------------------------------
// While capture_active, the compute stream is recording a graph (compile:
// tensor/tcompile.h).  What cannot be captured calls a gate first: the
// capture ENDS there, the work recorded so far is launched at once (as the
// eager call would have run it), the reason is kept, and the caller goes on
// eagerly.  0, or -1 with the error set when ending the capture failed.
// The module's choke points call them (module.cu: every host wait through
// sync_stream, every host<->device copy of the core, side streams and events,
// pinned memory; allocator.cu: cudaFree); the tensor layer refuses what it
// knows through graph_refuse (random numbers; collectives).
extern bool capture_active;
int capture_gate(const char *what);
int capture_gate_copy(cudaMemcpyKind k);

// Nonzero while a capture is recording: dev_alloc then serves requests from
// this pool only (its own segments, never the general cache), and blocks
// freed during the capture go back to it, so the graph's buffers are never
// handed to work outside the graph while the graph lives.  A tag is never
// a stream's address (small integers).
extern uintptr_t capture_pool_tag;
// The pool's blocks join the general cache: the free ones now, the live ones
// (a graph's outputs still held) when they are freed.  Called when the graph
// is destroyed, or when its capture ended early; later work is ordered after
// every replay by the one stream, so reuse is safe.
void pool_release(uintptr_t tag);
// p is the start of a live block of the pool tagged `tag`
bool pool_owns(const void *p, uintptr_t tag);

}  // namespace ncu
