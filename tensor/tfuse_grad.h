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
/* tfuse.c's tiling, shared with tfuse_bwd.c: where rows allow (rows: true),
** tiles never straddle a row (the chain's last axis) in a way a row operand
** would have to be gathered for: long rows are cut into per_row equal chunks,
** short rows go whole, several per tile; else flat tiles.  chunk: the
** longest tile. */
typedef struct { int64_t n, D, chunk, per_row, ntiles; bool rows; } nt_FuseTiles;
void nt_fuse_tiles_(nt_FuseTiles *t, const int64_t *shape, int nd, int64_t n, int64_t tile);
void nt_fuse_tile_at_(const nt_FuseTiles *t, int64_t j, int64_t *t0, int64_t *len);
/* how a tile reads an operand (its view at the chain's shape): DIRECT
** (contiguous there: base + t0), ROW (within-row tiles, unit stride along the
** row: a pointer into it, nt_fuse_view_off_), ONCE (whole-row tiles, constant
** down the leading axes: every tile holds the same values, gathered once per
** worker), GATHER (per tile) */
enum { NT_FUSE_DIRECT, NT_FUSE_ROW, NT_FUSE_ONCE, NT_FUSE_GATHER };
int nt_fuse_in_kind_(const nt_FuseTiles *t, const nt_Tensor *view);
int64_t nt_fuse_view_off_(const nt_Tensor *view, int64_t t0);   /* element t0's offset, in elements */
/* the tile [t0, t0 + len) of an operand read as `kind`: a pointer into it
** (DIRECT, ROW) or its scratch (ONCE: filled when the worker started; GATHER:
** gathered now); nt_fuse_in_scratch_: whether the kind needs that scratch */
char *nt_fuse_in_tile_(int kind, const nt_Tensor *view, const char *base, int64_t t0, int64_t len, char *scratch);
static inline bool nt_fuse_in_scratch_(int kind) { return kind == NT_FUSE_ONCE || kind == NT_FUSE_GATHER; }
/* tfuse.c: compiles (cached) and launches a generated kernel (tfuse_rtc.h)
** over n elements; 0 (*cannot: 1 no compiler here, 2 this source failed,
** said once on stderr) or -1 + error */
int nt_fuse_rtc_launch_(const char *src, int64_t n, const void *args, size_t nbytes, int *cannot);

#endif
