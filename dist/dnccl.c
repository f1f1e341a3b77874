/*
** dnccl.c — the "nccl" backend (see dnccl.h).
**
** Every function mirrors its dr_* twin in dring.c on device memory:
**   all_reduce      ncclAllReduce in place
**   reduce_scatter  equal chunks: ncclReduceScatter in place (recv = buf + r*chunk);
**                   uneven chunks (rows that do not split evenly): an all_reduce of
**                   the whole buffer, which leaves every chunk reduced
**   all_gather      equal chunks: ncclAllGather in place (send = buf + r*chunk);
**                   uneven: one ncclBroadcast per rank's chunk, all in one group
**   broadcast       ncclBroadcast in place (bytes)
**   sendrecv        ncclSend/ncclRecv in one group, on the WORLD communicator
** Reductions run in the dtype the caller gives (DR_F32/F64/I32/I64, as the
** ring).  Byte counters count what the ring would move, so dist.bytes()
** reads the same on either backend.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tensor/tensor.h"
#include "tensor/tdevice.h"
#include "dist/dnccl.h"
#include "dist/dgroup.h"

static void op_restore(const char *const *prev) { dr_op = *prev; }
#define DN_OP(name) const char *dn_prev_op_ __attribute__((cleanup(op_restore))) = dr_op; dr_op = dn_prev_op_ ? dn_prev_op_ : (name)

/* the module's error (nt_error_msg) becomes the group's */
static int fail_nt(dr_Group *g) {
  const char *m = nt_error_msg();
  snprintf(g->err, sizeof g->err, "%s", m && *m ? m : "NCCL operation failed");
  g->broken = 1;
  return -1;
}
static int check(dr_Group *g) {
  if (g->broken) {
    char prev[sizeof g->err];
    memcpy(prev, g->err, sizeof prev);
    snprintf(g->err, sizeof g->err, "the collective group is broken by an earlier failure (%.400s); the session reconnects it", prev);
    return -1;
  }
  if (!g->nccl_world) { snprintf(g->err, sizeof g->err, "the NCCL backend is not active"); g->broken = 1; return -1; }
  return 0;
}

static nt_DType dt_of(int dtype) {
  switch (dtype) {
  case DR_F32: return NT_F32;
  case DR_F64: return NT_F64;
  case DR_I32: return NT_I32;
  default: return NT_I64;
  }
}
static int op_of(int op) { return op == DR_MAX ? NT_COMM_MAX : op == DR_MIN ? NT_COMM_MIN : NT_COMM_SUM; }

/* ------------------------------------------------------------ lifecycle */
int dn_probe(char *out, size_t n) {
  char why[600] = "";
  /* cheap first: no NVIDIA device files means no GPU (and no 200 ms module load) */
  if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/nvidia0", F_OK) != 0 && access("/dev/dxg", F_OK) != 0 &&
      !getenv("NABLA_NCCL_PROBE_ANYWAY")) {
    snprintf(out, n, "no GPU here (no /dev/nvidia* device files)");
    return 0;
  }
  if (!nt_cuda_comm_available(why, sizeof why)) { snprintf(out, n, "%s", why); return 0; }
  char bus[64] = "?", host[128] = "?";
  if (nt_cuda_device_id(bus, sizeof bus)) { snprintf(out, n, "cannot identify the GPU: %s", nt_error_msg()); return 0; }
  gethostname(host, sizeof host - 1);
  for (char *p = host; *p; p++) if (*p == ' ') *p = '_';
  snprintf(out, n, "%s %s %s", host, bus, nt_cuda_comm_version());
  return 1;
}

int dn_world_init(dr_Group *g, const unsigned char *id) {
  DN_OP("nccl init");
  dn_close(g);
  nt_CudaComm *c = nt_cuda_comm_init(id, g->world, g->rank, g->timeout_ms, g->interrupted);
  if (!c) return fail_nt(g);
  g->nccl_world = g->nccl = c;
  return 0;
}

void dn_close(dr_Group *g) {
  nbD_group_nccl_reset();          /* sub-groups' communicators first: they share the GPU's resources */
  if (g->nccl_world) nt_cuda_comm_abort(g->nccl_world);
  g->nccl_world = g->nccl = NULL;
}

/* The communicator a collective of g runs on: the world's, or the
** sub-group's, made now if this is the group's first NCCL collective. */
static nt_CudaComm *coll_comm(dr_Group *g) {
  if (g->nccl) return g->nccl;
  if (!g->group_id) { snprintf(g->err, sizeof g->err, "no NCCL communicator for the world group"); g->broken = 1; return NULL; }
  DN_OP("nccl group init");
  unsigned char id[NT_COMM_ID_BYTES];
  memset(id, 0, sizeof id);
  if (g->rank == 0 && nt_cuda_comm_unique_id(id)) { fail_nt(g); return NULL; }
  /* rank 0 of the group may have failed above: the others then wait here
  ** until the session interrupts them (its error reaches the session first) */
  if (dr_broadcast(g, id, sizeof id, 0)) return NULL;
  nt_CudaComm *c = nt_cuda_comm_init(id, g->world, g->rank, g->timeout_ms, g->interrupted);
  if (!c) { fail_nt(g); return NULL; }
  nbD_group_nccl_set(g->group_id, c);
  g->nccl = c;
  return c;
}

/* ------------------------------------------------------------ collectives */
/* what a ring all_reduce of count elements would move (dist.bytes() reads the same on either backend) */
static void count_all_reduce(dr_Group *g, size_t count, int dtype) {
  uint64_t moved = (uint64_t)(2.0 * (g->world - 1) / g->world * (double)(count * dr_esize(dtype)));
  g->bytes_sent += moved; g->bytes_recv += moved;
}

int dn_all_reduce(dr_Group *g, void *dbuf, size_t count, int dtype, int op) {
  DN_OP("all_reduce");
  if (check(g)) return -1;
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  if (!count) return 0;
  if (nt_cuda_comm_all_reduce(c, dbuf, count, dt_of(dtype), op_of(op))) return fail_nt(g);
  count_all_reduce(g, count, dtype);
  return 0;
}

int dn_all_reduce_async(dr_Group *g, void *dbuf, size_t count, int dtype) {
  DN_OP("all_reduce");
  if (check(g)) return -1;
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  if (!count) return 0;
  if (nt_cuda_comm_all_reduce_async(c, dbuf, count, dt_of(dtype), NT_COMM_SUM)) return fail_nt(g);
  count_all_reduce(g, count, dtype);
  return 0;
}

int dn_join(dr_Group *g) {
  DN_OP("all_reduce");
  if (check(g)) return -1;
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  return nt_cuda_comm_join(c) ? fail_nt(g) : 0;
}

static int equal_counts(const size_t *counts, int w) {
  for (int i = 1; i < w; i++) if (counts[i] != counts[0]) return 0;
  return 1;
}

int dn_reduce_scatter(dr_Group *g, void *dbuf, const size_t *counts, int dtype, int op) {
  DN_OP("reduce_scatter");
  if (check(g)) return -1;
  int w = g->world, r = g->rank;
  size_t total = 0, es = dr_esize(dtype);
  for (int i = 0; i < w; i++) total += counts[i];
  if (!equal_counts(counts, w)) return dn_all_reduce(g, dbuf, total, dtype, op);
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  if (!counts[0]) return 0;
  char *b = dbuf;
  if (nt_cuda_comm_reduce_scatter(c, b, b + (size_t)r * counts[0] * es, counts[0], dt_of(dtype), op_of(op))) return fail_nt(g);
  g->bytes_sent += (total - counts[r]) * es; g->bytes_recv += (total - counts[r]) * es;
  return 0;
}

int dn_all_gather(dr_Group *g, void *dbuf, const size_t *counts, size_t esize) {
  DN_OP("all_gather");
  if (check(g)) return -1;
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  int w = g->world, r = g->rank;
  size_t total = 0;
  for (int i = 0; i < w; i++) total += counts[i];
  if (!total) return 0;
  char *b = dbuf;
  if (equal_counts(counts, w)) {
    if (nt_cuda_comm_all_gather(c, b + (size_t)r * counts[0] * esize, b, counts[0] * esize)) return fail_nt(g);
  } else {
    /* all_gatherv: every rank's chunk broadcast from it, fused in one group */
    if (nt_cuda_comm_group_start()) return fail_nt(g);
    int st = 0;
    size_t off = 0;
    for (int i = 0; i < w; i++) {
      if (counts[i] && !st) st = nt_cuda_comm_broadcast(c, b + off * esize, counts[i] * esize, i);
      off += counts[i];
    }
    if (nt_cuda_comm_group_end(c) || st) return fail_nt(g);
  }
  g->bytes_sent += (uint64_t)counts[r] * esize * (uint64_t)(w - 1);
  g->bytes_recv += (total - counts[r]) * esize;
  return 0;
}

int dn_broadcast(dr_Group *g, void *dbuf, size_t nbytes, int src) {
  DN_OP("broadcast");
  if (check(g)) return -1;
  nt_CudaComm *c = coll_comm(g);
  if (!c) return -1;
  if (!nbytes) return 0;
  if (nt_cuda_comm_broadcast(c, dbuf, nbytes, src)) return fail_nt(g);
  if (g->rank == src) g->bytes_sent += nbytes; else g->bytes_recv += nbytes;
  return 0;
}

int dn_sendrecv(dr_Group *g, int dst, const void *sbuf, size_t sn, int src, void *rbuf, size_t rn) {
  DN_OP("send/recv");
  if (check(g)) return -1;
  if (dst < 0) sn = 0;
  if (src < 0) rn = 0;
  if (!sn && !rn) return 0;
  /* point to point needs no group communicator: the world's, with world ranks */
  nt_CudaComm *c = g->nccl_world;
  int wdst = sn ? (g->world_rank ? g->world_rank[dst] : dst) : -1;
  int wsrc = rn ? (g->world_rank ? g->world_rank[src] : src) : -1;
  if (nt_cuda_comm_group_start()) return fail_nt(g);
  int st = 0;
  if (sn) st = nt_cuda_comm_send(c, sbuf, sn, wdst);
  if (rn && !st) st = nt_cuda_comm_recv(c, rbuf, rn, wsrc);
  if (nt_cuda_comm_group_end(c) || st) return fail_nt(g);
  g->bytes_sent += sn; g->bytes_recv += rn;
  return 0;
}
