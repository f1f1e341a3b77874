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

#endif
