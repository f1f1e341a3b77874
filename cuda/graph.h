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
// knows through graph_refuse (collectives; seed() inside a step).
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

// ---- device scalars (what a replay must see change: compile's "device-side scalars") ----
// graph_poke: the n (<= 64) 8-byte words at dst (device memory) become
// bits[0..n) in stream order.  Outside a capture: one tiny kernel now (the
// values are its launch argument: no host copy, no wait).  While capturing:
// deferred -- the write runs just before the captured graph's (first)
// launch, NOT inside the graph, so a replay never rewrites it; the last poke
// of a word wins.  -1 + error.
int graph_poke(void *dst, const uint64_t *bits, int n);
// While capturing: the graph's random-number slot {seed, offset delta}
// (device memory): the Philox kernels read their seed and add the delta to
// their offset from it, so each replay draws what eager would (tcompile.c
// writes the slot before each replay).  NULL when not capturing.
extern uint64_t *capture_rng_slot;
// a random kernel captured with this seed: 0, or -1 after ending the
// capture at a gate when the seed differs from the step's first one
int capture_rng_seed(uint64_t seed);
// optim.cu: a replay advanced device step counts the host cannot see
void optim_forget_steps(void);

}  // namespace ncu
