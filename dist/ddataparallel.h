/* ddataparallel.h — gradient averaging overlapping backward (dist.data_parallel; ddataparallel.c) */
#ifndef DIST_DDATAPARALLEL_H
#define DIST_DDATAPARALLEL_H
#include "dist/dinternal.h"

/* Lays out params (in reverse, buckets of at most bucket_bytes) for averaging
** over `group` (0 = world) and installs the autograd hooks; replaces an
** earlier registration.  Its id (> 0), or -1 + nt error. */
int  nbD_reducer_register(nt_Tensor **params, int n, size_t bucket_bytes, int group);
/* ZeRO stage 2: reduce-scatter into per-layout shards (ddataparallel.c); returns an id (> 0) or -1 */
int  nbD_reducer_register_shards(nt_Tensor **params, const int *counts, const int64_t *chunks, const int *rdts, int nl,
                                 size_t bucket_bytes, int group);
int  nbD_reducer_take_shards(unsigned id, nt_Tensor **out);   /* 1: out filled; 0: nothing (or not id's); -1 */
void nbD_reducer_zero_shards(unsigned id);
int  nbD_reducer_shard_count(void);
void nbD_reducer_clear(void);               /* hooks off, layout dropped */
void nbD_reducer_shutdown(void);            /* and the thread stopped (worker exit) */
int  nbD_reducer_set_sync(int on);          /* returns the previous setting */
int  nbD_reducer_syncing(void);            /* 0 inside dist.no_sync (stage 3's per-unit copies skip those passes) */
void nbD_reducer_drain(void);               /* every bucket handed to the thread is reduced */
int  nbD_reducer_on_device(void);           /* 1: the buckets are CUDA buffers reduced by NCCL */
void nbD_reducer_stats(int64_t *nparams, int64_t *nbuckets, int64_t *passes, int64_t *overlapped, int64_t *total);
void nbD_reducer_init(void);
void nbD_reducer_builtins_init(void);       /* ddpbuiltins.c: the builtins that only call this API */
void nbD_reducer_drop_host(unsigned id);    /* offload's host copies of registration id dropped (z.zero_grad) */
void nbD_zero_drain(void);                  /* dzero.c: stage 3's prefetching gathers finished */
void nbD_zero_shutdown(void);               /* and dropped */
/* dzero.c, offload="optimizer"'s per-bucket copies (the reducer issues them):
** n bytes device->host on the side stream after the compute stream's work
** (during: issued while backward runs, for the counters); the host waits for
** them; the compute stream waits for them; whether they are switched off */
int  nbD_offload_copy_d2h(void *dst, const void *src, size_t n, int during);
int  nbD_offload_host_wait(void);
int  nbD_offload_device_wait(void);
int  nbD_offload_after_backward(void);
void nbD_offload_count_host(size_t n);      /* bytes of a shard that was host memory already (the ring) */
#endif
