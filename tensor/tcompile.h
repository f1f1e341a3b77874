/*
** tcompile.h — CUDA graphs of a step's GPU work, for compile (lang/lib/lcompile.c):
** capture the work a call issues on the compute stream, replay it.  tcompile.c
** over the CUDA module's graph entries (cuda/graph.cu).
**
**  nt_graph_begin()        starts capturing this thread's GPU work; allocations
**                          come from the graph's private pool.  0, or -1 + error
**                          (no CUDA, a capture already running)
**  nt_graph_end(reason, n) ends the capture.  Returns the graph, whose work has
**                          been launched once (capturing records work without
**                          running it: this launch is the call's work).  NULL
**                          with reason non-empty: the capture ended early at
**                          something that cannot be captured (a host wait, a
**                          host copy, random numbers, ...), whose work all ran
**                          eagerly; NULL with reason empty: failure, error set
**  nt_graph_replay(g)      one graph launch on the compute stream
**  nt_graph_free(g)        frees it and its pool (NULL-safe)
**  nt_graph_capturing()    a capture is running on this thread
** While capturing, every device tensor an op reads or writes that was not
** allocated by the capture (parameters, optimizer state, input buffers) is
** retained by the graph, so its memory cannot be freed and reused by other
** work while the graph may replay into it.
*/
#ifndef NT_TCOMPILE_H
#define NT_TCOMPILE_H

#include <stdbool.h>
#include <stddef.h>
#include "tensor.h"

typedef struct nt_Graph nt_Graph;
int nt_graph_begin(void);
nt_Graph *nt_graph_end(char *reason, size_t n);
int nt_graph_replay(nt_Graph *g);
void nt_graph_free(nt_Graph *g);
bool nt_graph_capturing(void);
/* number of external device tensors g keeps alive (tests) */
int nt_graph_externals(const nt_Graph *g);

/* internal (tdevice.c): set while capturing; the dispatch hook */
struct nt_KernelArgs;
extern bool nt_graph_capturing_;
int nt_graph_on_dispatch_(int op, const struct nt_KernelArgs *a);
/* trandom.c: how many times the generator's state was set (seed(), a restore) */
uint64_t nt_rng_resets_(void);
/* tdevice.c: the module's graph entries (NULL-safe forwards; -1 + error without CUDA) */
int nt_cuda_graph_begin(void);
void *nt_cuda_graph_end(char *reason, size_t n);
int nt_cuda_graph_launch(void *g);
void nt_cuda_graph_destroy(void *g);
int nt_cuda_graph_refuse(const char *what);
bool nt_cuda_graph_owns(const void *p);
int nt_cuda_graph_poke(void *dst, const uint64_t *bits, int n);
int nt_cuda_graph_set_rng(void *g, uint64_t seed, uint64_t delta);

/* Device scalars: t (a contiguous f64 tensor of n <= 64 elements) := v[0..n)
** in stream order.  On the CPU a plain store; on CUDA a tiny kernel (the
** values its launch argument: no host copy, no wait), and while a step is being captured the
** write is deferred to just before the graph's launch and is NOT part of the
** graph -- a replay leaves t as the host last set it (compile's replay hooks
** set it before each replay: a schedule's learning rate).  0 or -1 + error. */
int nt_device_scalar_set(nt_Tensor *t, const double *v, int n);

#endif
