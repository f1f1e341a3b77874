/*
** tshadow.h — low-precision shadows of parameters under autocast (the cache
** in tautocast.c; llm.c and Apex keep such bf16 copies of f32 master weights).
**
** Under autocast("bf16"), every op that multiplies by an f32 weight needs its
** bf16 copy.  Casting at every call is one kernel per weight per use; instead
** the copy of a PARAMETER (a leaf tensor that requires grad) is cached, keyed
** by its storage, offset, shape, strides and the low dtype, and valid only
** while the storage's version counter is the one it was cast at.  Every write
** of a tensor bumps that counter (in-place ops, copy_, load_state, the
** optimizers), so a shadow can never be stale: a write by anything but the
** optimizer makes the next use cast again, and the optimizers (toptim.c)
** write the shadow in the same kernel as the weight and then mark it fresh.
** A new tensor assigned in the weight's place has another storage: a miss.
**
** The cache belongs to the thread (like the autocast state), holds a view of
** each weight's storage (so an address cannot be reused under a live entry)
** and drops the entries whose weight nobody else holds at every cast through
** it (so a dropped model's memory goes at the next autocast cast of a
** parameter, or nt_shadow_clear).  At most NT_SHADOW_MAX entries; beyond
** that, casts are not cached.
*/
#ifndef NT_TSHADOW_H
#define NT_TSHADOW_H

#include "tensor.h"

#define NT_SHADOW_MAX 4096

/* t in dtype dt, without autograd: the cached shadow when t is a parameter
** (refreshed if stale), else a fresh cast; t itself when it has dtype dt.
** New reference, or NULL + error. */
nt_Tensor *nt_shadow_get(nt_Tensor *t, nt_DType dt);
/* The shadow of p (any low dtype) when it is fresh, else NULL (borrowed). */
nt_Tensor *nt_shadow_fresh(const nt_Tensor *p);
/* After a kernel wrote p and its fresh shadow s (from nt_shadow_fresh, before
** p's version was bumped) with the same values: the shadow is fresh at p's
** new version, and s's own version is bumped (a graph that saved it fails). */
void nt_shadow_written(const nt_Tensor *p, nt_Tensor *s);
/* Drops every entry of this thread's cache (tests; freeing memory). */
void nt_shadow_clear(void);
/* Entries, and casts done by nt_shadow_get (hits are free), for tests. */
void nt_shadow_stats(int64_t *entries, int64_t *casts);

#endif
