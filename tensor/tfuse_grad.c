/*
** tfuse_grad.c — fusion through autograd: a lazy chain (tfuse.c) whose
** inputs require grad is recorded anyway, as ONE autograd node
** ("FusedBackward") over the chain's inputs.  Extending a chain that has such
** a node extends the node too (tfuse.c maps the inlined chain's inputs through
** its node), so `relu(x @ w + b) * s` is one node, not four.
**
** Backward: the derivative of each op of the chain is the formula the
** unfused op uses (telem.c's binary_backward, binary_scalar_backward,
** unary_backward, run through nt_elem_backward_ on a node built for the op,
** on the stack), composed in reverse order: gop[k] is the gradient of op k's
** result, seeded with g at the last op; each formula's gradients accumulate
** into its operands (an intermediate's gop, or an input's gin).  A cast (the
** chain's NT_OP_COPY) passes g converted to its source's dtype, as the
** engine converts ToDtypeBackward's; comparisons pass nothing; where passes
** g to the branch it selected, 0 to the other (telem.c's where_backward).  So the
** gradients are the unfused ones bit for bit (NaN payloads included) except
** where one value gets 3+ contributions, summed here in reverse op order
** (the engine's order may differ: rounding only).  That is the fallback:
** first tfuse_bwd.c writes the same formulas out as one tiled pass (CPU) or
** one generated kernel (CUDA, tfuse_codegen_bwd.c), bit for bit these.
**
** Save or recompute (by bytes): a formula that reads an intermediate's value
** (mul reads the other operand, tanh its output, ...) gets it from a buffer
** the node holds (Chain.saved), which the forward's tiles write as they
** compute that op (tfuse.c's Record.save: one more store stream, no extra
** pass) -- the same bytes the unfused graph holds for that value, never more,
** and only for values some needed formula reads (values(): `x * 2 + 1`
** saves nothing, and its input is not version-checked, as unfused).  The
** chain's own output is saved as unfused saves it (a detached alias).  A cast
** (NT_OP_COPY) is recomputed from its source instead: saving it would hold a
** second copy of a value the node holds already.  Recomputing everything was
** the first version: free in bytes, but 5-7 extra passes over memory in the
** backward of a 12-op chain (bench/results/2026-11-29-fuse28.md), more than
** the fused forward saved.  A chain read by nobody before its backward runs
** is computed first (Chain.out), so the buffers are always written.
**
** Double backward: the engine runs every backward with grad mode off, so a
** gradient of a gradient is the engine's clear error, fused or not.
*/
#include "tfuse_grad.h"
#include <stdlib.h>

typedef struct {
  int nops, nin, ndim;
  int64_t shape[NT_MAXDIM];          /* the chain's */
  nt_FuseOp ops[NT_FUSE_MAXOPS];
  nt_DType in_dt[NT_FUSE_MAXIN];
  nt_Tensor *saved[NT_FUSE_MAXOPS];   /* intermediates the forward's tiles store (NULL: not read, or a cast) */
  nt_Tensor *out;                     /* the chain's value (a detached alias) while some are saved */
} Chain;

static int64_t bytes_of(const nt_Tensor *t) { return t ? t->numel * (int64_t)nt_dtype_size(t->dtype) : 0; }

/* (the graph is freed: its save buffers leave autograd_stats' held bytes) */
static void chain_free(void *p) {
  Chain *c = p;
  for (int k = 0; k < c->nops; k++) { nt_autograd_hold_(-bytes_of(c->saved[k])); nt_release(c->saved[k]); }
  nt_release(c->out);
  free(c);
}

static int fused_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin);

bool nt_fuse_chain_node_(const nt_Node *n) { return n && n->backward == fused_backward; }

static bool is_cmp(int op) { return op >= NT_OP_EQ && op <= NT_OP_GE; }
static int kind_of(const nt_FuseOp *o) {
  return o->nsrc == 2 ? NT_FUSE_GRAD_BINARY : o->scalar ? NT_FUSE_GRAD_SCALAR : NT_FUSE_GRAD_UNARY;
}
static nt_DType ref_dtype(const Chain *c, int ref) { return ref >= 0 ? c->in_dt[ref] : (nt_DType)c->ops[-1 - ref].dtype; }

/* need_op[k]: op k's result depends on an input that gets a gradient (through
** differentiable ops: a comparison's bools, or a cast to an integer, do not) */
static void needs(const Chain *c, const bool *need_in, bool *need_op) {
  for (int k = 0; k < c->nops; k++) {
    const nt_FuseOp *o = &c->ops[k];
    need_op[k] = false;
    if (is_cmp(o->op) || !nt_dtype_is_float((nt_DType)o->dtype)) continue;
    for (int j = 0; j < o->nsrc; j++) need_op[k] |= o->src[j] >= 0 ? need_in[o->src[j]] : need_op[-1 - o->src[j]];
  }
}

static void mark(int ref, bool *val_op, bool *val_in) {
  if (ref >= 0) val_in[ref] = true; else val_op[-1 - ref] = true;
}

/* which values the needed formulas read: val_op[k] (op k's result, to be
** recomputed), val_in[i] (input i's values: version-checked), *out_read (the
** last op's result: saved) */
static void values(const Chain *c, const bool *need_op, bool *val_op, bool *val_in, bool *out_read) {
  memset(val_op, 0, sizeof(bool) * NT_FUSE_MAXOPS);
  memset(val_in, 0, sizeof(bool) * NT_FUSE_MAXIN);
  *out_read = false;
  for (int k = c->nops - 1; k >= 0; k--) {   /* consumers first: op k's readers are all after it */
    const nt_FuseOp *o = &c->ops[k];
    if (need_op[k] && o->op == NT_OP_WHERE) mark(o->src[0], val_op, val_in);   /* (where reads its condition only) */
    else if (need_op[k] && o->op != NT_OP_COPY) {
      bool ri, ro;
      nt_elem_grad_reads_(kind_of(o), o->op, o->sfirst, &ri, &ro);
      if (ri) for (int j = 0; j < o->nsrc; j++) mark(o->src[j], val_op, val_in);
      if (ro) { if (k == c->nops - 1) *out_read = true; else val_op[k] = true; }
    }
    /* a cast is recomputed from its operand; any other value is saved by the
    ** forward's tiles, so its operands are not needed for it (marking them
    ** saved the mul and add ahead of a tanh too: 2 buffers too many) */
    if (val_op[k] && o->op == NT_OP_COPY) mark(o->src[0], val_op, val_in);
  }
}

int nt_fuse_record_grad_(nt_Tensor *out, const nt_Fused *r, nt_Tensor *const *orig, void **save) {
  if (!nt_dtype_is_float((nt_DType)r->ops[r->nops - 1].dtype) || !nt_needs_grad(r->nin, orig)) return 0;
  Chain *c = calloc(1, sizeof *c);
  if (!c) { nt_error_oom(sizeof *c); return -1; }
  c->nops = r->nops; c->nin = r->nin; c->ndim = r->ndim;
  memcpy(c->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim);
  memcpy(c->ops, r->ops, sizeof(nt_FuseOp) * (size_t)r->nops);
  bool need_in[NT_FUSE_MAXIN], need_op[NT_FUSE_MAXOPS], val_op[NT_FUSE_MAXOPS], val_in[NT_FUSE_MAXIN], out_read;
  for (int i = 0; i < r->nin; i++) { c->in_dt[i] = r->in[i]->dtype; need_in[i] = orig[i]->requires_grad; }
  needs(c, need_in, need_op);
  if (!need_op[c->nops - 1]) { free(c); return 0; }   /* (no gradient reaches the value: as unfused, no node) */
  values(c, need_op, val_op, val_in, &out_read);
  nt_Node *n = nt_record(out, "FusedBackward", fused_backward, r->nin, orig);
  if (!n) { free(c); return -1; }
  n->ctx = c; n->ctx_free = chain_free;
  for (int i = 0; i < r->nin; i++) if (!val_in[i]) nt_node_unchecked(n, i);
  if (out_read && nt_node_save(n, out) < 0) return -1;
  /* the intermediates the formulas read: stored by the forward's tiles (a
  ** cast is recomputed from its source instead: see the top comment) */
  for (int k = 0; k + 1 < c->nops; k++) {
    if (!val_op[k] || c->ops[k].op == NT_OP_COPY) continue;
    /* (on the chain's device: a CUDA chain's generated kernel stores into it) */
    if (!(c->saved[k] = nt_empty(r->shape, r->ndim, (nt_DType)c->ops[k].dtype, r->in[0]->device))) return -1;
    save[k] = nt_base(c->saved[k]);   /* (fresh, contiguous) */
    nt_autograd_hold_(bytes_of(c->saved[k]));   /* held by the graph like a saved tensor */
    if (!c->out && !(c->out = nt_detach(out))) return -1;
  }
  return 0;
}

/* op k's result computed again by the eager front ends (the tiles ran the same kernels) */
static nt_Tensor *replay(const nt_FuseOp *o, nt_Tensor *x, nt_Tensor *y) {
  if (o->op == NT_OP_WHERE) NT_FAIL_NULL("internal: a fused where's value is saved, never recomputed");
  if (o->op == NT_OP_COPY) return nt_to_dtype(x, (nt_DType)o->dtype);
  if (o->nsrc == 2) return nt_binary(o->op, x, y);
  if (o->scalar)
    return nt_binary_scalar_ex(o->op, x, o->s[0], (o->sfirst ? NT_SCALAR_FIRST : 0) |
                                                     (nt_dtype_is_float(x->dtype) ? NT_SCALAR_FLOAT : NT_SCALAR_INT));
  return nt_unary_scalar_op(o->op, x, o->s[0], o->s[1]);
}

static bool same_shape(const nt_Tensor *a, const nt_Tensor *b) {
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

static nt_Tensor *value_of(nt_Node *n, nt_Tensor **vals, int ref) { return ref >= 0 ? n->in[ref] : vals[-1 - ref]; }

/* *slot += g (both new references; g is taken) */
static int accumulate(nt_Tensor **slot, nt_Tensor *g) {
  if (!*slot) { *slot = g; return 0; }
  nt_Tensor *s = nt_add(*slot, g);
  nt_release(*slot); nt_release(g);
  *slot = s;
  return s ? 0 : -1;
}

static int fused_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  const Chain *c = n->ctx;
  bool need_in[NT_FUSE_MAXIN], need_op[NT_FUSE_MAXOPS], val_op[NT_FUSE_MAXOPS], val_in[NT_FUSE_MAXIN], out_read;
  for (int i = 0; i < c->nin; i++) need_in[i] = nt_node_needs(n, i);
  needs(c, need_in, need_op);
  values(c, need_op, val_op, val_in, &out_read);
  nt_Tensor *vals[NT_FUSE_MAXOPS] = {0}, *gop[NT_FUSE_MAXOPS] = {0}, *gi[NT_FUSE_MAXIN] = {0};
  int rc = -1, last = c->nops - 1;
  /* the saved values are written when the chain is computed: compute it if
  ** nothing has read it yet */
  if (c->out && nt_settle_storage_(c->out->storage)) return -1;
  {   /* one tiled pass where the formulas allow (tfuse_bwd.c), else op by op below */
    nt_FuseBwd fb = { n, c->nops, c->nin, c->ndim, c->shape, c->ops, c->in_dt, c->saved, need_in, need_op, val_op, val_in, out_read };
    int one = nt_fuse_bwd_onepass_(&fb, g, gin);
    if (one) return one > 0 ? 0 : -1;
  }
  for (int k = 0; k < last; k++) {
    const nt_FuseOp *o = &c->ops[k];
    if (val_op[k] && c->saved[k]) vals[k] = nt_retain(c->saved[k]);
    else if (val_op[k] && !(vals[k] = replay(o, value_of(n, vals, o->src[0]), o->nsrc == 2 ? value_of(n, vals, o->src[1]) : NULL)))
      goto done;
  }
  if (out_read) vals[last] = nt_retain(n->saved[0]);
  gop[last] = nt_retain(g);
  for (int k = last; k >= 0; k--) {
    const nt_FuseOp *o = &c->ops[k];
    if (!gop[k] || !need_op[k]) continue;
    nt_Tensor *gs[3] = { NULL, NULL, NULL };
    if (o->op == NT_OP_COPY) {
      if (!(gs[0] = nt_to_dtype(gop[k], ref_dtype(c, o->src[0])))) goto done;
    } else if (o->op == NT_OP_WHERE) {   /* telem.c's where_backward: g where selected, 0 elsewhere (a NaN g unselected gives 0) */
      nt_Tensor *cond = value_of(n, vals, o->src[0]), *z = nt_zeros_like(gop[k]);
      for (int j = 1; j < 3 && z; j++) {
        int r = o->src[j];
        if ((r >= 0 ? need_in[r] : need_op[-1 - r]) && !(gs[j] = j == 1 ? nt_where(cond, gop[k], z) : nt_where(cond, z, gop[k]))) {
          nt_release(gs[1]); nt_release(z); goto done;
        }
      }
      nt_release(z);
      if (!z) goto done;
    } else {
      /* the node the unfused op would have recorded, as its formula reads it */
      nt_Node sn;
      memset(&sn, 0, sizeof sn);
      sn.name = n->name; sn.nin = o->nsrc; sn.in = sn.inl; sn.edge = sn.edl; sn.refcount = 1;
      for (int j = 0; j < o->nsrc; j++) {
        int r = o->src[j];
        nt_Tensor *v = value_of(n, vals, r);
        sn.inl[j] = v ? v : gop[k];   /* (a value the formula does not read: values() says which) */
        sn.edl[j].grad = r >= 0 ? need_in[r] : need_op[-1 - r];
        sn.edl[j].fn = n;             /* (nt_node_needs: an edge with history) */
      }
      sn.iarg[0] = o->op; sn.iarg[1] = o->sfirst; sn.niarg = 2;
      sn.s[0] = o->s[0]; sn.s[1] = o->s[1];
      if (vals[k]) { sn.saved[0] = vals[k]; sn.nsaved = 1; }
      if (nt_elem_backward_(kind_of(o), &sn, gop[k], gs)) { nt_release(gs[0]); nt_release(gs[1]); goto done; }
    }
    for (int j = 0; j < o->nsrc; j++) {
      if (!gs[j]) continue;
      int r = o->src[j];
      bool nd = r >= 0 ? need_in[r] : need_op[-1 - r];
      if (!nd) { nt_release(gs[j]); continue; }
      /* an input's share is summed to its shape first, as the engine sums each
      ** unfused node's: the same bits for the common two-contribution case */
      if (r >= 0 && !same_shape(gs[j], n->in[r])) {
        nt_Tensor *red = nt_sum_to_shape(gs[j], n->in[r]->shape, n->in[r]->ndim);
        nt_release(gs[j]);
        if (!(gs[j] = red)) { for (int m = j + 1; m < o->nsrc; m++) nt_release(gs[m]); goto done; }
      }
      if (accumulate(r >= 0 ? &gi[r] : &gop[-1 - r], gs[j])) { for (int m = j + 1; m < o->nsrc; m++) nt_release(gs[m]); goto done; }
    }
  }
  for (int i = 0; i < c->nin; i++) { gin[i] = gi[i]; gi[i] = NULL; }
  rc = 0;
done:
  for (int k = 0; k < c->nops; k++) { nt_release(vals[k]); nt_release(gop[k]); }
  for (int i = 0; i < c->nin; i++) nt_release(gi[i]);
  return rc;
}
