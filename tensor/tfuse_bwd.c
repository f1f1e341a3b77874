/*
** tfuse_bwd.c — the backward of a fused chain (tfuse_grad.c's FusedBackward)
** as ONE pass over memory (issue 28).
**
** The per-op backward (tfuse_grad.c) runs each op's derivative formula with
** the eager ops: a 12-op chain's backward is ~30 full-size passes and as many
** temporaries.  Here the same formulas are written out, op for op, as a
** PROGRAM of elementwise kernel calls over slots (nt_fuse_bwd_onepass_): a slot is g, an
** input's values, a value the forward saved, zeros, or one kernel call's
** result.  The program then runs in tiles of TILE elements (bwd_run): per
** tile, the slots' tiles are loaded (pointed into when contiguous at the
** chain's shape, else gathered: tfuse.c's gather), each call runs the SAME
** CPU kernel the eager op runs (the op table's, on contiguous tile headers,
** as tfuse.c's forward tiles), and the slots that are input gradients are
** stored into their full-shape buffers: one store stream per gradient,
** nothing else leaves the cache.  On CUDA the same program is written as
** ONE generated kernel (tfuse_codegen_bwd.c), compiled and cached like the
** forward chains' (tfuse.c's nt_fuse_rtc_launch_): one launch.
**
** Bit for bit the per-op path: the program is the formulas of telem.c
** (binary_backward, binary_scalar_backward, unary_backward) in the same
** order, with the same scalars, in the same dtypes (f16/bf16 values rounded
** where the eager op stores them: the same kernels do it), accumulated in the
** per-op path's order (reverse op order, operands left to right).  The
** one-pass kernel "unary_grad" (tanh, sigmoid, silu, gelu on f32/f64) is used
** exactly where telem.c uses it: both operands contiguous at the chain's
** shape (g from the engine may be an expanded view: then the composed
** formula, as unfused).  A second copy of the formulas, kept honest by
** tests/numerics/test_fuse_autograd.py (fused == unfused bits for every op
** that joins chains).
**
** Broadcast inputs: each share of an input whose shape is not the chain's is
** its own output, summed to the input's shape with nt_sum_to_shape and then
** added, as the per-op path does (sum each share, then add): the same bits,
** for one extra reduction per share.  (Accumulating full-size first and
** summing once would save the reductions but round differently.)
**
** Not written out here (the per-op path runs them, counted in
** fuse_stats().backward_fallbacks with the last reason): pow (its formula
** runs pow and log on operands the eager op may see strided), silu/gelu in
** f16/bf16, and on the CPU a transcendental formula (sin, cos, erf, ...) of an
** input that is strided or broadcast (the eager op would run libm there, the
** tiles SLEEF).
*/
#include "tfuse_grad.h"
#include "tfuse_bwd.h"
#include "tfuse_rtc.h"
#include <stdio.h>
#include <stdlib.h>

#define TILE 1024
#define MAXSLOT NT_BWD_MAXSLOT
#define MAXEXT NT_BWD_MAXEXT
#define S_EXT NT_BWD_EXT
#define S_OP NT_BWD_OP
typedef nt_BwdCall BCall;
typedef nt_BwdProg Prog;

static bool full_contig(const nt_Tensor *t, const int64_t *shape, int nd) {
  return (t->flags & NT_T_CONTIG) && t->ndim == nd && !memcmp(t->shape, shape, sizeof(int64_t) * (size_t)nd);
}

static int new_slot(Prog *p, int kind, nt_DType dt, bool contig) {
  if (p->why) return -1;
  if (p->nslot == MAXSLOT) { p->why = "the backward program is too long"; return -1; }
  int i = p->nslot++;
  p->slot[i].kind = kind; p->slot[i].dt = dt; p->slot[i].contig = contig; p->slot[i].ext = -1;
  return i;
}

static int ext(Prog *p, nt_Tensor *t) {
  for (int i = 0; i < p->nslot; i++)
    if (p->slot[i].kind == S_EXT && p->ext[p->slot[i].ext] == t) return i;
  if (p->next == MAXEXT) { p->why = "too many tensors for one backward pass"; return -1; }
  int s = new_slot(p, S_EXT, t->dtype, full_contig(t, p->shape, p->ndim));
  if (s < 0) return -1;
  p->ext[p->next] = t;
  p->slot[s].ext = p->next++;
  return s;
}

static int call(Prog *p, int op, nt_DType dt, int nsrc, int a, int b, int c, double s0, int64_t iarg, int niarg) {
  if (p->why) return -1;
  if (a < 0 || (nsrc > 1 && b < 0) || (nsrc > 2 && c < 0)) {   /* (never silently short of a term) */
    p->why = "internal: a value a formula reads is missing";
    return -1;
  }
  int i = new_slot(p, S_OP, dt, true);
  if (i < 0) return -1;
  BCall *k = &p->call[i];
  k->op = op; k->dt = dt; k->nsrc = nsrc; k->src[0] = a; k->src[1] = b; k->src[2] = c;
  k->s[0] = s0; k->s[1] = 0; k->iarg = iarg; k->niarg = niarg;
  p->nops++;
  return i;
}

/* the eager ops the formulas compose (telem.c's B2, BS, SB, U1, WHERE, ZEROS_LIKE) */
static nt_DType dt_of(const Prog *p, int s) { return s >= 0 ? p->slot[s].dt : NT_F32; }
static bool is_cmp(int op) { return op >= NT_OP_EQ && op <= NT_OP_GE; }
static int B2(Prog *p, int op, int x, int y) { return call(p, op, is_cmp(op) ? NT_BOOL : dt_of(p, x), 2, x, y, 0, 0, 0, 0); }
static int BS(Prog *p, int op, int x, double s) { return call(p, op, is_cmp(op) ? NT_BOOL : dt_of(p, x), 1, x, 0, 0, s, 0, 1); }
static int SB(Prog *p, int op, double s, int x) { return call(p, op, dt_of(p, x), 1, x, 0, 0, s, 1, 1); }
static int ZEROS(Prog *p, int like) { return like < 0 ? -1 : call(p, -1, dt_of(p, like), 1, like, 0, 0, 0, 0, 0); }
static int WHERE(Prog *p, int c, int x, int y) { return call(p, NT_OP_WHERE, dt_of(p, x), 3, c, x, y, 0, 0, 0); }

/* ops whose contiguous CPU kernel differs from the strided one (SLEEF against
** libm; tfuse.c's contig_only_unary) */
static bool contig_only(int op) {
  return op == NT_OP_EXP || op == NT_OP_LOG || op == NT_OP_LOG1P || op == NT_OP_EXPM1 || op == NT_OP_TANH ||
         op == NT_OP_ERF || op == NT_OP_SIN || op == NT_OP_COS || op == NT_OP_SIGMOID || op == NT_OP_SILU ||
         op == NT_OP_GELU || op == NT_OP_GELU_TANH;
}
static int U1(Prog *p, int op, int x) {
  if (x >= 0 && p->device == NT_CPU && contig_only(op) && !p->slot[x].contig && !p->why)
    p->why = "a transcendental formula on a strided or broadcast input";
  int i = call(p, op, dt_of(p, x), 1, x, 0, 0, 0, 0, 0);
  if (i >= 0) p->call[i].s[0] = p->call[i].s[1] = NAN;   /* (nt_unary's) */
  return i;
}

static int unary_grad_op(void) {
  static int id = -1;
  if (id < 0) id = nt_op_register("unary_grad");
  return id;
}

/* telem.c's unary_backward on slots: g (gop), x (the operand's values), y (the result's) */
static int unary_formula(Prog *p, const nt_FuseOp *o, int g, int x, int y) {
  int op = o->op;
  bool one_pass = op == NT_OP_TANH || op == NT_OP_SIGMOID || op == NT_OP_SILU || op == NT_OP_GELU || op == NT_OP_GELU_TANH;
  if (one_pass) {   /* fused_unary_grad's conditions: contiguous, one shape, f32/f64 on the CPU */
    int v = op == NT_OP_TANH || op == NT_OP_SIGMOID ? y : x;
    nt_DType d = dt_of(p, v);
    bool dt_ok = d == NT_F32 || d == NT_F64 || (p->device == NT_CUDA && (d == NT_F16 || d == NT_BF16));
    if (g >= 0 && v >= 0 && p->slot[g].contig && p->slot[v].contig && dt_of(p, g) == d && dt_ok &&
        nt_kernel_table[unary_grad_op()][p->device])
      return call(p, unary_grad_op(), d, 2, g, v, 0, 0, op, 1);
  }
  switch (op) {
    case NT_OP_NEG: return U1(p, NT_OP_NEG, g);
    case NT_OP_EXP: return B2(p, NT_OP_MUL, g, y);
    case NT_OP_EXPM1: return B2(p, NT_OP_MUL, g, BS(p, NT_OP_ADD, y, 1));
    case NT_OP_LOG: return B2(p, NT_OP_DIV, g, x);
    case NT_OP_LOG2: return BS(p, NT_OP_DIV, B2(p, NT_OP_DIV, g, x), M_LN2);
    case NT_OP_LOG1P: return B2(p, NT_OP_DIV, g, BS(p, NT_OP_ADD, x, 1));
    case NT_OP_SQRT: return BS(p, NT_OP_MUL, B2(p, NT_OP_DIV, g, y), 0.5);
    case NT_OP_RSQRT: return BS(p, NT_OP_MUL, B2(p, NT_OP_MUL, g, B2(p, NT_OP_MUL, y, B2(p, NT_OP_MUL, y, y))), -0.5);
    case NT_OP_ABS: return B2(p, NT_OP_MUL, g, U1(p, NT_OP_SIGN, x));
    case NT_OP_SIGN: case NT_OP_FLOOR: case NT_OP_CEIL: case NT_OP_ROUND: return ZEROS(p, g);
    case NT_OP_TANH: return B2(p, NT_OP_MUL, g, SB(p, NT_OP_SUB, 1, B2(p, NT_OP_MUL, y, y)));
    case NT_OP_SIGMOID: return B2(p, NT_OP_MUL, g, B2(p, NT_OP_MUL, y, SB(p, NT_OP_SUB, 1, y)));
    case NT_OP_RELU: return WHERE(p, BS(p, NT_OP_LE, y, 0), ZEROS(p, g), g);
    case NT_OP_SIN: return B2(p, NT_OP_MUL, g, U1(p, NT_OP_COS, x));
    case NT_OP_COS: return U1(p, NT_OP_NEG, B2(p, NT_OP_MUL, g, U1(p, NT_OP_SIN, x)));
    case NT_OP_TAN: return B2(p, NT_OP_MUL, g, BS(p, NT_OP_ADD, B2(p, NT_OP_MUL, y, y), 1));
    case NT_OP_RECIPROCAL: return U1(p, NT_OP_NEG, B2(p, NT_OP_MUL, g, B2(p, NT_OP_MUL, y, y)));
    case NT_OP_SQUARE: return BS(p, NT_OP_MUL, B2(p, NT_OP_MUL, g, x), 2);
    case NT_OP_ERF:
      return BS(p, NT_OP_MUL, B2(p, NT_OP_MUL, g, U1(p, NT_OP_EXP, U1(p, NT_OP_NEG, B2(p, NT_OP_MUL, x, x)))), 1.1283791670955126);
    case NT_OP_CLAMP: {   /* g where lo <= x <= hi, else the selected zero */
      int zero = ZEROS(p, g), r = g;
      if (o->s[0] == o->s[0]) r = WHERE(p, BS(p, NT_OP_GE, x, o->s[0]), r, zero);
      if (o->s[1] == o->s[1]) r = WHERE(p, BS(p, NT_OP_LE, x, o->s[1]), r, zero);
      return r;
    }
    default:
      if (!p->why) p->why = "an op whose derivative is not written out for one pass (silu, gelu in f16/bf16)";
      return -1;
  }
}

/* telem.c's binary_scalar_backward */
static int scalar_formula(Prog *p, const nt_FuseOp *o, int g, int x) {
  double s = o->s[0];
  switch (o->op) {
    case NT_OP_ADD: return g;
    case NT_OP_SUB: return o->sfirst ? U1(p, NT_OP_NEG, g) : g;
    case NT_OP_MUL: return BS(p, NT_OP_MUL, g, s);
    case NT_OP_DIV:
      if (!o->sfirst) return BS(p, NT_OP_DIV, g, s);
      return U1(p, NT_OP_NEG, BS(p, NT_OP_MUL, B2(p, NT_OP_DIV, g, B2(p, NT_OP_MUL, x, x)), s));
    case NT_OP_MAXIMUM: case NT_OP_MINIMUM: {   /* binary_formula's rule with b = s */
      int split = WHERE(p, BS(p, NT_OP_EQ, x, s), BS(p, NT_OP_MUL, g, 0.5), g);
      return WHERE(p, BS(p, o->op == NT_OP_MAXIMUM ? NT_OP_LT : NT_OP_GT, x, s), ZEROS(p, split), split);
    }
    case NT_OP_MOD: return o->sfirst ? -1 : g;   /* (s % x: no gradient, as unfused) */
    case NT_OP_FLOORDIV: return -1;              /* zero almost everywhere: none, as unfused */
    default:
      if (!p->why) p->why = "an op whose derivative is not written out for one pass (pow)";
      return -1;
  }
}

/* telem.c's binary_backward: gs[0], gs[1] for the operands that need one */
static void binary_formula(Prog *p, const nt_FuseOp *o, int g, int a, int b, const bool *nd, int *gs) {
  switch (o->op) {
    case NT_OP_ADD: gs[0] = gs[1] = g; return;
    case NT_OP_SUB: gs[0] = g; if (nd[1]) gs[1] = U1(p, NT_OP_NEG, g); return;
    case NT_OP_MUL:
      if (nd[0]) gs[0] = B2(p, NT_OP_MUL, g, b);
      if (nd[1]) gs[1] = B2(p, NT_OP_MUL, g, a);
      return;
    case NT_OP_DIV:
      if (nd[0]) gs[0] = B2(p, NT_OP_DIV, g, b);
      if (nd[1]) gs[1] = U1(p, NT_OP_NEG, B2(p, NT_OP_DIV, B2(p, NT_OP_MUL, g, a), B2(p, NT_OP_MUL, b, b)));
      return;
    case NT_OP_MAXIMUM: case NT_OP_MINIMUM: {   /* torch's rule: g split on ties, the selected zero where it loses */
      bool mx = o->op == NT_OP_MAXIMUM;
      int split = WHERE(p, B2(p, NT_OP_EQ, a, b), BS(p, NT_OP_MUL, g, 0.5), g), zero = ZEROS(p, split);
      if (nd[0]) gs[0] = WHERE(p, B2(p, mx ? NT_OP_LT : NT_OP_GT, a, b), zero, split);
      if (nd[1]) gs[1] = WHERE(p, B2(p, mx ? NT_OP_GT : NT_OP_LT, a, b), zero, split);
      return;
    }
    case NT_OP_MOD:   /* a - b floor(a / b) */
      if (nd[0]) gs[0] = g;
      if (nd[1]) gs[1] = U1(p, NT_OP_NEG, B2(p, NT_OP_MUL, g, B2(p, NT_OP_FLOORDIV, a, b)));
      return;
    case NT_OP_FLOORDIV: return;   /* zero almost everywhere: none, as unfused */
    default:
      if (!p->why) p->why = "an op whose derivative is not written out for one pass (pow)";
  }
}

/* an input's gradient: full-shape shares accumulate in the program; a
** broadcast input's shares are outputs of their own (summed after the pass) */
typedef struct {
  int acc;                       /* full shape: the accumulated slot (-1: none yet) */
  int share[NT_FUSE_MAXOPS * 2], nshare;
} InGrad;

static int accumulate(Prog *p, int acc, int s) { return acc < 0 ? s : B2(p, NT_OP_ADD, acc, s); }

/* ---- the tiled run ------------------------------------------------------------ */
static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static bool fast_call(const BCall *k) {
  return k->op >= NT_OP_ADD && k->op <= NT_OP_DIV && (k->dt == NT_F32 || k->dt == NT_F64);
}

/* outs[s]: the full-shape buffer slot s is stored into, or NULL */
static int bwd_run(Prog *p, nt_Tensor **outs) {
  nt_Tensor views[MAXEXT];
  const char *base[MAXEXT];
  int kind[MAXEXT];
  nt_FuseTiles tl;   /* (tfuse.c's row-aligned tiles: a row operand is pointed into, or gathered once) */
  nt_fuse_tiles_(&tl, p->shape, p->ndim, p->numel, TILE);
  for (int e = 0; e < p->next; e++) {
    nt_Tensor *t = p->ext[e];
    const char *d = nt_base(t);   /* (settles a lazy g before any tile reads it) */
    nt_bcast_view(&views[e], t, p->shape, p->ndim);
    base[e] = d;
    kind[e] = nt_fuse_in_kind_(&tl, &views[e]);
  }
  /* scratch: a tile per gathered input and per call not stored to an output */
  size_t off[MAXSLOT], per = 0;
  for (int s = 0; s < p->nslot; s++) {
    off[s] = per;
    bool need = p->slot[s].kind == S_EXT ? nt_fuse_in_scratch_(kind[p->slot[s].ext]) : !outs[s];
    if (need) per += round64((size_t)tl.chunk * nt_dtype_size(p->slot[s].dt));
  }
  if (!per) per = 64;
  void *obase[MAXSLOT];
  for (int s = 0; s < p->nslot; s++) obase[s] = outs[s] ? nt_base(outs[s]) : NULL;
  int64_t n = p->numel, ntiles = tl.ntiles;
  bool par = n > NT_OMP_THRESHOLD;
  int failed = 0, oom = 0;
  _Pragma("omp parallel if (par) reduction(|: failed, oom)")
  {
    char *sc = aligned_alloc(64, per);
    nt_Tensor *th = calloc(MAXSLOT, sizeof(nt_Tensor));
    nt_Storage *sh = calloc(MAXSLOT, sizeof(nt_Storage));
    if (!sc || !th || !sh) oom = 1;
    else
      for (int s = 0; s < p->nslot; s++) {
        nt_fuse_tile_hdr_(&th[s], &sh[s], NULL, p->slot[s].dt, 0);
        int e = p->slot[s].ext;   /* the operands every tile reads the same: once */
        if (p->slot[s].kind == S_EXT && kind[e] == NT_FUSE_ONCE) nt_fuse_gather_(&views[e], base[e], 0, tl.chunk, sc + off[s]);
      }
    _Pragma("omp for schedule(static)")
    for (int64_t j = 0; j < ntiles; j++) {
      if (!sc || !th || !sh) continue;
      int64_t t0, len;
      nt_fuse_tile_at_(&tl, j, &t0, &len);
      for (int s = 0; s < p->nslot; s++) {
        size_t es = nt_dtype_size(p->slot[s].dt);
        char *ptr;
        if (p->slot[s].kind == S_EXT) {
          int e = p->slot[s].ext;
          nt_fuse_tile_set_(&th[s], nt_fuse_in_tile_(kind[e], &views[e], base[e], t0, len, sc + off[s]), len);
          continue;
        }
        ptr = obase[s] ? (char *)obase[s] + (size_t)t0 * es : sc + off[s];
        nt_fuse_tile_set_(&th[s], ptr, len);
        const BCall *k = &p->call[s];
        if (k->op < 0) { memset(ptr, 0, (size_t)len * es); continue; }   /* zeros_like: all-zero bits */
        nt_Tensor *x = &th[k->src[0]], *y = k->nsrc > 1 ? &th[k->src[1]] : NULL;
        if (fast_call(k)) {   /* (nt_arith_*: the loops k_binary runs; the tiles never overlap) */
          const void *xp = x->storage->data, *yp = y ? y->storage->data : NULL;
          if (k->dt == NT_F32) nt_arith_f32(k->op, xp, yp, k->s[0], k->iarg, (float *)ptr, len);
          else nt_arith_f64(k->op, xp, yp, k->s[0], k->iarg, (double *)ptr, len);
          continue;
        }
        nt_KernelArgs a;
        memset(&a, 0, sizeof a);
        a.op = k->op; a.out = &th[s]; a.nin = k->nsrc;
        for (int m = 0; m < k->nsrc; m++) a.in[m] = &th[k->src[m]];
        a.s[0] = k->s[0]; a.s[1] = k->s[1];
        a.iarg[0] = k->iarg; a.niarg = k->niarg;
        nt_Kernel kf = nt_kernel_table[k->op][NT_CPU];
        if (!kf || kf(&a)) failed = 1;
      }
    }
    free(sc); free(th); free(sh);
  }
  (void)par;
  if (oom) { nt_error_set("out of memory for the fused backward's tiles"); return -1; }
  if (failed) { nt_error_set("internal: a kernel of the fused backward failed"); return -1; }
  return 0;
}

/* ---- on CUDA: one generated kernel (tfuse_codegen_bwd.c) ---------------------
** 1 launched, 0 cannot compile here (the caller runs op by op), -1 + error */
static int run_cuda(Prog *p, nt_Tensor **outs) {
  for (int e = 0; e < p->next; e++) (void)nt_base(p->ext[e]);   /* (settled before their addresses are taken) */
  void *args = NULL;
  size_t nb = 0;
  char *src = nt_fuse_codegen_bwd(p, outs, &args, &nb);
  if (!src) return -1;
  int cannot = 0;
  int rc = nt_fuse_rtc_launch_(src, p->numel, args, nb, &cannot);
  free(src); free(args);
  return rc < 0 ? -1 : cannot ? 0 : 1;
}

/* ---- counters ----------------------------------------------------------------- */
static int64_t nfused, nfallback;
static const char *last_why;
void nt_fuse_bwd_stats(int64_t *fused, int64_t *fallbacks, const char **why) {
  *fused = __atomic_load_n(&nfused, __ATOMIC_RELAXED);
  *fallbacks = __atomic_load_n(&nfallback, __ATOMIC_RELAXED);
  *why = __atomic_load_n(&last_why, __ATOMIC_RELAXED);
}
static int fallback(const char *why) {
  __atomic_add_fetch(&nfallback, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&last_why, why, __ATOMIC_RELAXED);
  return 0;
}

int nt_fuse_bwd_onepass_(const nt_FuseBwd *c, nt_Tensor *g, nt_Tensor **gin) {
  nt_Node *n = c->node;
  nt_Device dev = n->in[0]->device;
  static int off = -1;   /* NABLA_FUSE_BWD=0: always op by op (benchmarks, bisecting) */
  if (off < 0) { const char *e = getenv("NABLA_FUSE_BWD"); off = e && !strcmp(e, "0"); }
  if (off) return fallback("NABLA_FUSE_BWD=0");
  if (g->dtype != (nt_DType)c->ops[c->nops - 1].dtype || g->device != dev) return fallback("a gradient of another dtype or device");
  if (g->ndim != c->ndim || memcmp(g->shape, c->shape, sizeof(int64_t) * (size_t)c->ndim))
    return fallback("a gradient of another shape");
  Prog *p = calloc(1, sizeof *p);
  if (!p) { nt_error_oom(sizeof *p); return -1; }
  p->device = dev; p->shape = c->shape; p->ndim = c->ndim; p->numel = nt_shape_numel(c->shape, c->ndim);
  int val[NT_FUSE_MAXOPS], inval[NT_FUSE_MAXIN], gop[NT_FUSE_MAXOPS];
  InGrad ig[NT_FUSE_MAXIN];
  for (int i = 0; i < c->nin; i++) { inval[i] = c->val_in[i] ? ext(p, n->in[i]) : -1; ig[i].acc = -1; ig[i].nshare = 0; }
  int last = c->nops - 1;
  /* the values the formulas read: saved by the forward, or a cast recomputed */
  for (int k = 0; k < c->nops; k++) {
    const nt_FuseOp *o = &c->ops[k];
    val[k] = gop[k] = -1;
    if (k == last) { if (c->out_read) val[k] = ext(p, n->saved[0]); }
    else if (c->val_op[k] && c->saved[k]) val[k] = ext(p, c->saved[k]);
    else if (c->val_op[k]) {   /* a cast: its source's values converted (tfuse_grad.c's replay) */
      int src = o->src[0] >= 0 ? inval[o->src[0]] : val[-1 - o->src[0]];
      val[k] = call(p, NT_OP_COPY, (nt_DType)o->dtype, 1, src, 0, 0, 0, 0, 0);
    }
  }
  gop[last] = ext(p, g);
  for (int k = last; k >= 0 && !p->why; k--) {
    const nt_FuseOp *o = &c->ops[k];
    if (gop[k] < 0 || !c->need_op[k]) continue;
    int gs[3] = { -1, -1, -1 };   /* (where has three operands) */
    bool nd[3] = { false, false, false };
    for (int j = 0; j < o->nsrc; j++) nd[j] = o->src[j] >= 0 ? c->need_in[o->src[j]] : c->need_op[-1 - o->src[j]];
    int v[3] = { -1, -1, -1 };
    for (int j = 0; j < o->nsrc; j++) v[j] = o->src[j] >= 0 ? inval[o->src[j]] : val[-1 - o->src[j]];
    if (o->op == NT_OP_WHERE) {   /* telem.c's where_backward: g where selected, 0 elsewhere */
      if (v[0] < 0) { p->why = "internal: a fused where's condition was not kept"; break; }
      int z = ZEROS(p, gop[k]);
      if (nd[1]) gs[1] = WHERE(p, v[0], gop[k], z);
      if (nd[2]) gs[2] = WHERE(p, v[0], z, gop[k]);
    } else if (o->op == NT_OP_COPY) gs[0] = call(p, NT_OP_COPY, o->src[0] >= 0 ? c->in_dt[o->src[0]] : (nt_DType)c->ops[-1 - o->src[0]].dtype,
                                          1, gop[k], 0, 0, 0, 0, 0);
    else if (o->nsrc == 2) binary_formula(p, o, gop[k], v[0], v[1], nd, gs);
    else if (o->scalar) gs[0] = scalar_formula(p, o, gop[k], v[0]);
    else gs[0] = unary_formula(p, o, gop[k], v[0], val[k]);
    for (int j = 0; j < o->nsrc && !p->why; j++) {
      if (!nd[j] || gs[j] < 0) continue;
      int r = o->src[j];
      if (r < 0) { gop[-1 - r] = accumulate(p, gop[-1 - r], gs[j]); continue; }
      if (n->in[r]->ndim == c->ndim && !memcmp(n->in[r]->shape, c->shape, sizeof(int64_t) * (size_t)c->ndim))
        ig[r].acc = accumulate(p, ig[r].acc, gs[j]);
      else ig[r].share[ig[r].nshare++] = gs[j];
    }
  }
  if (p->why) { const char *w = p->why; free(p); return fallback(w); }
  /* the outputs: each gradient slot that is a call gets a full-shape buffer */
  nt_Tensor *outs[MAXSLOT] = { 0 };
  int rc = -1;
  for (int i = 0; i < c->nin; i++) {
    int list[NT_FUSE_MAXOPS * 2 + 1], m = 0;
    if (ig[i].acc >= 0) list[m++] = ig[i].acc;
    for (int q = 0; q < ig[i].nshare; q++) list[m++] = ig[i].share[q];
    for (int q = 0; q < m; q++) {
      int s = list[q];
      if (p->slot[s].kind == S_OP && !outs[s] && !(outs[s] = nt_empty(c->shape, c->ndim, p->slot[s].dt, dev))) goto done;
    }
  }
  if (p->nops && dev == NT_CPU && bwd_run(p, outs)) goto done;
  if (p->nops && dev == NT_CUDA) {
    int r = run_cuda(p, outs);
    if (r < 0) goto done;
    if (r == 0) {   /* no compiler here, or this source failed: op by op */
      for (int s = 0; s < p->nslot; s++) nt_release(outs[s]);
      free(p);
      return fallback("the CUDA module cannot compile the fused backward here");
    }
  }
  /* each input's gradient: the slot's tensor, or its shares each summed to
  ** the input's shape, then added in order (the per-op path's accumulate) */
  for (int i = 0; i < c->nin; i++) {
    nt_Tensor *acc = NULL;
    for (int q = -1; q < ig[i].nshare; q++) {
      int s = q < 0 ? ig[i].acc : ig[i].share[q];
      if (s < 0) continue;
      nt_Tensor *t = p->slot[s].kind == S_OP ? outs[s] : p->ext[p->slot[s].ext];
      nt_Tensor *r = q < 0 ? nt_retain(t) : nt_sum_to_shape(t, n->in[i]->shape, n->in[i]->ndim);
      if (!r) { nt_release(acc); goto done; }
      if (!acc) acc = r;
      else { nt_Tensor *sum = nt_add(acc, r); nt_release(acc); nt_release(r); if (!(acc = sum)) goto done; }
    }
    gin[i] = acc;
  }
  __atomic_add_fetch(&nfused, 1, __ATOMIC_RELAXED);
  rc = 1;
done:
  if (rc < 0) for (int i = 0; i < c->nin; i++) { nt_release(gin[i]); gin[i] = NULL; }
  for (int s = 0; s < p->nslot; s++) nt_release(outs[s]);
  free(p);
  return rc;
}
