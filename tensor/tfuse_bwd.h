/*
** tfuse_bwd.h — a fused chain's backward as a program of elementwise kernel
** calls over slots (tfuse_bwd.c builds it and runs it in CPU tiles;
** tfuse_codegen_bwd.c writes it as one CUDA kernel).  Internal to tensor/.
*/
#ifndef NT_TFUSE_BWD_H
#define NT_TFUSE_BWD_H
#include "tinternal.h"

#define NT_BWD_MAXSLOT 160
#define NT_BWD_MAXEXT 24

enum { NT_BWD_EXT, NT_BWD_OP };

/* one eager op of a formula: op (the kernel table's id; -1 zeros, and the
** op "unary_grad") over src[0 .. nsrc) slots, as the eager front end would
** dispatch it */
typedef struct {
  int op;
  nt_DType dt;         /* the result's dtype */
  int nsrc, src[3];
  double s[2];
  int64_t iarg;        /* scalar ops: scalar_first; unary_grad: the forward op */
  int niarg;           /* 1: a binary op with the scalar s[0] */
} nt_BwdCall;

typedef struct {
  int nslot, nops;
  /* a slot: an external tensor's values (g, an input, a saved value) or a
  ** call's result; contig: contiguous at the chain's shape */
  struct { int kind, ext; nt_DType dt; bool contig; } slot[NT_BWD_MAXSLOT];
  nt_BwdCall call[NT_BWD_MAXSLOT];   /* the call computing slot i (kind NT_BWD_OP) */
  nt_Tensor *ext[NT_BWD_MAXEXT];     /* borrowed */
  int next;
  nt_Device device;
  const int64_t *shape;              /* the chain's */
  int ndim;
  int64_t numel;
  const char *why;                   /* set: cannot be written out (static text) */
} nt_BwdProg;

/* The kernel `nabla_fused(long long n, FuseArgs a)` computing p in one pass,
** storing slot s into outs[s] (full-shape, contiguous) where outs[s] is set.
** *args (malloc'd, *nbytes) is its argument block with the device addresses
** filled in.  A malloc'd string, or NULL + error. */
char *nt_fuse_codegen_bwd(const nt_BwdProg *p, nt_Tensor *const *outs, void **args, size_t *nbytes);

#endif
