/*
** tfuse_grad.h — autograd for the lazy fused chains (tfuse_grad.c), called by
** tfuse.c only (and the formulas it borrows from telem.c).
*/
#ifndef NT_TFUSE_GRAD_H
#define NT_TFUSE_GRAD_H
#include "tinternal.h"

/* n is a fused chain's node (its in[] are the chain's inputs, in order) */
bool nt_fuse_chain_node_(const nt_Node *n);
/* After commit: when the chain r (the value `out`) needs a gradient, records
** out's node over orig[0 .. r->nin) -- the tensors the ops were given, with
** their autograd history (r->in are bare headers).  0 (recorded or not
** needed) / -1 + error.  Called before the chain is registered (computable);
** save[k] is set to the buffer where computing the chain must also store op
** k's result (a value the backward reads), or left NULL. */
int nt_fuse_record_grad_(nt_Tensor *out, const nt_Fused *r, nt_Tensor *const *orig, void **save);
/* tautograd.c: bytes a graph holds outside its nodes' in[] and saved[] (a
** chain's save buffers): counted in nt_autograd_stats' held bytes */
void nt_autograd_hold_(int64_t bytes);

/* telem.c: the elementwise ops' backward formulas, for the chains' backward
** (telem.c says more) */
enum { NT_FUSE_GRAD_BINARY, NT_FUSE_GRAD_SCALAR, NT_FUSE_GRAD_UNARY };
int nt_elem_backward_(int kind, nt_Node *n, nt_Tensor *g, nt_Tensor **gin);
void nt_elem_grad_reads_(int kind, int op, bool sfirst, bool *reads_in, bool *reads_out);

/* tfuse_bwd.c: FusedBackward's gradients in ONE tiled pass on the CPU (the
** per-op formulas written out as a program of kernel calls).  1 = gin[]
** filled, 0 = not done here (counted with the reason in fuse_stats(): the
** caller runs the per-op path), -1 + error. */
typedef struct {
  nt_Node *node;                      /* in[] the chain's inputs, saved[0] its value when out_read */
  int nops, nin, ndim;
  const int64_t *shape;               /* the chain's */
  const nt_FuseOp *ops;
  const nt_DType *in_dt;
  nt_Tensor *const *saved;            /* the intermediates the forward stored (NULL: not stored) */
  const bool *need_in, *need_op, *val_op, *val_in;
  bool out_read;
} nt_FuseBwd;
int nt_fuse_bwd_onepass_(const nt_FuseBwd *c, nt_Tensor *g, nt_Tensor **gin);
/* tfuse.c's tile helpers, shared with tfuse_bwd.c: elements [t0, t0+len) of
** a view at the chain's shape into dst; a private contiguous 1-D header */
void nt_fuse_gather_(const nt_Tensor *v, const char *base, int64_t t0, int64_t len, char *dst);
void nt_fuse_tile_hdr_(nt_Tensor *t, nt_Storage *s, void *p, nt_DType dt, int64_t len);
void nt_fuse_tile_set_(nt_Tensor *t, void *p, int64_t len);
/* tfuse.c: compiles (cached) and launches a generated kernel (tfuse_rtc.h)
** over n elements; 0 (*cannot: 1 no compiler here, 2 this source failed,
** said once on stderr) or -1 + error */
int nt_fuse_rtc_launch_(const char *src, int64_t n, const void *args, size_t nbytes, int *cannot);

#endif
