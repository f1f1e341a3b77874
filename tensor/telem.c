/*
** telem.c — front ends of the elementwise ops (type promotion, broadcasting,
** output allocation, dispatch) and their backward functions; also casts,
** clone/contiguous, to_device.  (copy_/fill_ and in-place autograd: tinplace.c)
*/
#include "tinternal.h"
#include "complex.h"
#include "tfuse_grad.h"
#include "tdevice.h"
#include "tprofile.h"
#include <stdlib.h>

/* ---- a tiny arena for backward formulas --------------------------------
** Backward code composes public ops; every temporary goes into the arena and
** is released at the end, and NULL (an error) propagates through. */
typedef struct { nt_Tensor *t[32]; int n; } Arena;
static nt_Tensor *A(Arena *ar, nt_Tensor *x) {
  if (x && ar->n == 32) { nt_release(x); nt_error_set("internal: backward arena overflow"); return NULL; }
  if (x) ar->t[ar->n++] = x;
  return x;
}
static void arena_free(Arena *ar) { for (int i = 0; i < ar->n; i++) nt_release(ar->t[i]); ar->n = 0; }
static nt_Tensor *keep(nt_Tensor *x) { return nt_retain(x); }   /* result escapes the arena */
/* functions, not macros: arguments are evaluated exactly once */
static nt_Tensor *B2_(Arena *ar, int op, nt_Tensor *x, nt_Tensor *y) { return x && y ? A(ar, nt_binary(op, x, y)) : NULL; }
static nt_Tensor *BS_(Arena *ar, int op, nt_Tensor *x, double s, int fl) { return x ? A(ar, nt_binary_scalar_ex(op, x, s, fl)) : NULL; }
static nt_Tensor *U1_(Arena *ar, int op, nt_Tensor *x) { return x ? A(ar, nt_unary(op, x)) : NULL; }
#define B2(op, x, y) B2_(ar, op, x, y)
#define BS(op, x, s) BS_(ar, op, x, s, NT_SCALAR_FLOAT)
#define SB(op, s, x) BS_(ar, op, x, s, NT_SCALAR_FLOAT | NT_SCALAR_FIRST)
static nt_Tensor *W_(Arena *ar, nt_Tensor *c, nt_Tensor *x, nt_Tensor *y) { return c && x && y ? A(ar, nt_where(c, x, y)) : NULL; }
static nt_Tensor *ZERO_(Arena *ar, nt_Tensor *like) { return like ? A(ar, nt_zeros_like(like)) : NULL; }
#define U1(op, x) U1_(ar, op, x)
#define WHERE(c, x, y) W_(ar, c, x, y)
#define ZEROS_LIKE(x) ZERO_(ar, x)

static bool same_shape(const nt_Tensor *a, const nt_Tensor *b) {
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* ---- binary --------------------------------------------------------------- */
static bool is_predicate(int op) { return op >= NT_OP_EQ && op <= NT_OP_LOGICAL_OR; }

/* dtype the kernel computes in, given the promoted dtype */
static nt_DType compute_dtype(int op, nt_DType d) {
  if (op == NT_OP_DIV && !nt_dtype_is_float(d)) return NT_DEFAULT_FLOAT;   /* true division */
  /* bool + bool and bool * bool stay bool (logical or / and, like torch); the
  ** other arithmetic on bools computes in i64 */
  if (d == NT_BOOL && op <= NT_OP_MOD && op != NT_OP_ADD && op != NT_OP_MUL) return NT_DEFAULT_INT;
  return d;
}

static int binary_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  Arena arena = {0}, *ar = &arena;
  nt_Tensor *a = n->in[0], *b = n->in[1];
  switch ((int)n->iarg[0]) {
    case NT_OP_ADD:   /* a half input's gradient may come written already (nt_node_take_half_grad) */
      for (int k = 0; k < 2; k++) {
        nt_Tensor *h = nt_node_needs(n, k) ? nt_node_take_half_grad(n, g, n->in[k]->dtype) : NULL;
        gin[k] = h ? h : keep(g);
      }
      nt_node_drop_half_grad(n);
      return 0;
    case NT_OP_SUB: gin[0] = keep(g); gin[1] = nt_neg(g); return gin[1] ? 0 : -1;
    case NT_OP_MUL:
      if (nt_node_needs(n, 0)) gin[0] = nt_mul(g, b);
      if (nt_node_needs(n, 1)) gin[1] = nt_mul(g, a);
      break;
    case NT_OP_DIV:
      if (nt_node_needs(n, 0)) gin[0] = nt_div(g, b);
      if (nt_node_needs(n, 1)) gin[1] = keep(U1(NT_OP_NEG, B2(NT_OP_DIV, B2(NT_OP_MUL, g, a), B2(NT_OP_MUL, b, b))));
      break;
    case NT_OP_POW: {
      nt_Tensor *out = n->saved[0];
      if (nt_node_needs(n, 0))  /* b * a^(b-1) */
        gin[0] = keep(B2(NT_OP_MUL, g, B2(NT_OP_MUL, b, B2(NT_OP_POW, a, BS(NT_OP_SUB, b, 1)))));
      if (nt_node_needs(n, 1)) { /* a^b ln a, taken as 0 where a == 0 */
        nt_Tensor *t = B2(NT_OP_MUL, g, B2(NT_OP_MUL, out, U1(NT_OP_LOG, a)));
        nt_Tensor *z = BS(NT_OP_EQ, a, 0), *zero = t ? A(ar, nt_zeros_like(t)) : NULL;
        gin[1] = z && zero ? nt_where(z, zero, t) : NULL;
      }
      break;
    }
    case NT_OP_MAXIMUM: case NT_OP_MINIMUM: {
      /* torch's rule (derivatives.yaml): where(a == b, g/2, g), then 0 where
      ** the input loses (a < b for maximum's a).  A NaN on either side loses
      ** no comparison, so both inputs get g; the zero is selected, not g * 0
      ** (an inf or NaN g gives the loser 0) */
      bool mx = n->iarg[0] == NT_OP_MAXIMUM;
      nt_Tensor *split = WHERE(B2(NT_OP_EQ, a, b), BS(NT_OP_MUL, g, 0.5), g), *zero = ZEROS_LIKE(split);
      if (nt_node_needs(n, 0)) gin[0] = keep(WHERE(B2(mx ? NT_OP_LT : NT_OP_GT, a, b), zero, split));
      if (nt_node_needs(n, 1)) gin[1] = keep(WHERE(B2(mx ? NT_OP_GT : NT_OP_LT, a, b), zero, split));
      break;
    }
    case NT_OP_MOD:   /* a - b*floor(a/b) */
      if (nt_node_needs(n, 0)) gin[0] = keep(g);
      if (nt_node_needs(n, 1)) gin[1] = keep(U1(NT_OP_NEG, B2(NT_OP_MUL, g, B2(NT_OP_FLOORDIV, a, b))));
      break;
    default: break;   /* floordiv: zero gradient almost everywhere */
  }
  arena_free(ar);
  for (int k = 0; k < 2; k++) if (nt_node_needs(n, k) && !gin[k] && n->iarg[0] != NT_OP_FLOORDIV) return -1;
  return 0;
}

static const char *bin_names[] = {
  "AddBackward", "SubBackward", "MulBackward", "DivBackward", "PowBackward", "FloorDivBackward",
  "ModBackward", "MaximumBackward", "MinimumBackward" };

/* Small f32/f64 + - * / outside autograd -- an interpreted loop's tiny
** tensors (bench/tensor/small_op): straight to the loop the kernel runs
** (nt_arith_f32/f64: the same bits), without the general path's promotion,
** broadcasting, fusion check and dispatch, into a block from the small-block
** cache.  small_arith(op, t): t qualifies (both operands must, with one
** dtype and shape); small_run: the result, or NULL + error. */
static bool small_arith(int op, const nt_Tensor *t) {
  return op >= NT_OP_ADD && op <= NT_OP_DIV && (t->dtype == NT_F32 || t->dtype == NT_F64) && t->device == NT_CPU &&
         (t->flags & NT_T_CONTIG) && !t->requires_grad && t->numel * (t->dtype == NT_F32 ? 4 : 8) <= NT_INLINE_BYTES;
}
static nt_Tensor *small_run(int op, nt_Tensor *a, nt_Tensor *b, double s, bool first) {
  nt_Tensor *out = nt_empty_small_(a, a->dtype);
  if (!out) return NULL;
  const void *pa = nt_base(a), *pb = b ? nt_base(b) : NULL;
  void *po = out->storage->data;   /* (fresh: no hook to run) */
  int tok = nt_prof_on_ ? nt_prof_begin_(nt_op_name(op), NT_PROF_OP, NT_CPU) : -1;   /* an op the profiler sees (tprofile.h) */
  if (a->dtype == NT_F32) nt_arith_f32(op, pa, pb, s, first, po, a->numel);
  else nt_arith_f64(op, pa, pb, s, first, po, a->numel);
  if (tok >= 0) nt_prof_end_(tok);
  return out;
}

/* An arithmetic op of an f32 tensor and an f16/bf16 one on CUDA: the kernel reads
** each in its stored dtype and computes in f32 (cuda/elementwise.cu binary_mixed):
** the values of the cast then the op, without the cast's kernel and its
** temporary (autocast's f32 residual stream plus a bf16 branch).  The result
** dtype is the promotion's, as everywhere; the CPU casts first. */
static bool half_f32(nt_DType x) { return x == NT_F16 || x == NT_BF16; }
static bool mixed_ok(int op, const nt_Tensor *a, const nt_Tensor *b, nt_DType cd) {
  return a->device == NT_CUDA && op <= NT_OP_MINIMUM && cd == NT_F32 &&
         ((a->dtype == NT_F32 && half_f32(b->dtype)) || (half_f32(a->dtype) && b->dtype == NT_F32));
}

nt_Tensor *nt_binary(int op, nt_Tensor *a, nt_Tensor *b) {
  if (nt_dtype_is_complex(a->dtype) || nt_dtype_is_complex(b->dtype)) return nt_complex_binary(op, a, b);
  if (small_arith(op, a) && b->dtype == a->dtype && small_arith(op, b) && same_shape(a, b)) return small_run(op, a, b, 0, false);
  if (!NT_OP_IS_BINARY(op)) NT_FAIL_NULL("%s is not a binary op", nt_op_name(op));
  if (op == NT_OP_POW) NT_AUTOCAST(NT_AUTOCAST_F32, nt_binary(op, ac_[0], ac_[1]), a, b);
  if (a->device != b->device && (a->ndim == 0 || b->ndim == 0)) {   /* a CPU scalar joins the other's device */
    nt_Tensor *ts[2] = { a, b }, *moved[2];
    if (nt_move_cpu_scalars(2, ts, moved)) return NULL;
    nt_Tensor *r = moved[0] || moved[1] ? nt_binary(op, ts[0], ts[1]) : NULL;
    nt_release(moved[0]); nt_release(moved[1]);
    if (r || moved[0] || moved[1]) return r;
  }
  if (a->device != b->device)
    NT_FAIL_NULL("%s: expected all tensors on the same device, got %s and %s", nt_op_name(op),
                 nt_device_name(a->device), nt_device_name(b->device));
  nt_DType cd = compute_dtype(op, nt_result_type(a, b));
  nt_DType od = is_predicate(op) ? NT_BOOL : cd;
  {   /* recorded into a lazy chain (tfuse.c) when it pays */
    nt_Tensor *fo = NULL;
    int fr = nt_fuse_binary(op, a, b, cd, &fo);
    if (fr) return fr > 0 ? fo : NULL;
  }
  int64_t shape[NT_MAXDIM];
  int nd;
  nt_Tensor va, vb, *ca = a, *cb = b, *out = NULL;
  bool mixed = mixed_ok(op, a, b, cd);   /* the CUDA kernel reads each operand as stored */
  if (!mixed && a->dtype != cd && !(ca = nt_to_dtype(a, cd))) return NULL;
  if (!mixed && b->dtype != cd && !(cb = nt_to_dtype(b, cd))) goto done;
  nt_KernelArgs args;
  args.op = op;
  if (same_shape(a, b)) {
    out = nt_empty(a->shape, a->ndim, od, a->device);
    args.in[0] = ca; args.in[1] = cb;
  } else {
    if (nt_broadcast_shapes(nt_op_name(op), a->shape, a->ndim, b->shape, b->ndim, shape, &nd)) goto done;
    out = nt_empty(shape, nd, od, a->device);
    nt_bcast_view(&va, ca, shape, nd); nt_bcast_view(&vb, cb, shape, nd);
    args.in[0] = &va; args.in[1] = &vb;
  }
  if (!out) goto done;
  args.out = out; args.nin = 2;
  if (nt_dispatch(op, a->device, &args)) { nt_release(out); out = NULL; goto done; }
  if (op <= NT_OP_MINIMUM && nt_needs_grad(2, (nt_Tensor *[]){ a, b })) {
    nt_Node *n = nt_record(out, bin_names[op], binary_backward, 2, (nt_Tensor *[]){ a, b });
    if (!n || (n->iarg[0] = op, op == NT_OP_POW && nt_node_save(n, out) < 0)) { nt_release(out); out = NULL; }
    else if (op == NT_OP_ADD || op == NT_OP_SUB) {   /* values not read */
      nt_node_unchecked(n, 0); nt_node_unchecked(n, 1);
      if (op == NT_OP_ADD && same_shape(a, b)) n->flags |= NT_NODE_SUM;
    }
  }
done:
  if (ca != a) nt_release(ca);
  if (cb != b && cb) nt_release(cb);
  return out;
}

/* Scalar on one side: iarg[0] = op, iarg[1] = scalar_first, s[0] = scalar */
static int binary_scalar_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  Arena arena = {0}, *ar = &arena;
  nt_Tensor *x = n->in[0];
  double s = n->s[0];
  bool first = n->iarg[1];
  switch ((int)n->iarg[0]) {
    case NT_OP_ADD: gin[0] = keep(g); break;
    case NT_OP_SUB: gin[0] = first ? nt_neg(g) : keep(g); break;
    case NT_OP_MUL: gin[0] = nt_binary_scalar_ex(NT_OP_MUL, g, s, NT_SCALAR_FLOAT); break;
    case NT_OP_DIV:
      if (!first) gin[0] = nt_binary_scalar_ex(NT_OP_DIV, g, s, NT_SCALAR_FLOAT);
      else gin[0] = keep(U1(NT_OP_NEG, BS(NT_OP_MUL, B2(NT_OP_DIV, g, B2(NT_OP_MUL, x, x)), s)));   /* -s/x^2 */
      break;
    case NT_OP_POW:
      if (!first) gin[0] = keep(B2(NT_OP_MUL, g, BS(NT_OP_MUL, BS(NT_OP_POW, x, s - 1), s)));   /* s x^(s-1) */
      else gin[0] = keep(BS(NT_OP_MUL, B2(NT_OP_MUL, g, n->saved[0]), log(s)));              /* s^x ln s */
      break;
    case NT_OP_MAXIMUM: case NT_OP_MINIMUM: {   /* binary_backward's rule with b = s */
      nt_Tensor *split = WHERE(BS(NT_OP_EQ, x, s), BS(NT_OP_MUL, g, 0.5), g);
      gin[0] = keep(WHERE(BS(n->iarg[0] == NT_OP_MAXIMUM ? NT_OP_LT : NT_OP_GT, x, s), ZEROS_LIKE(split), split));
      break;
    }
    case NT_OP_MOD:
      if (!first) gin[0] = keep(g);
      else return arena_free(ar), 0;
      break;
    default: return 0;
  }
  arena_free(ar);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_binary_scalar_ex(int op, nt_Tensor *t, double s, int flags) {
  if (nt_dtype_is_complex(t->dtype)) return nt_complex_binary_scalar(op, t, s, flags & NT_SCALAR_FIRST);
  /* (a float tensor's op with any scalar computes in its own dtype) */
  if (small_arith(op, t)) return small_run(op, t, NULL, s, flags & NT_SCALAR_FIRST);
  if (!NT_OP_IS_BINARY(op)) NT_FAIL_NULL("%s is not a binary op", nt_op_name(op));
  if (op == NT_OP_POW) NT_AUTOCAST(NT_AUTOCAST_F32, nt_binary_scalar_ex(op, ac_[0], s, flags), t);
  bool isf = (flags & NT_SCALAR_FLOAT) ? true : (flags & NT_SCALAR_INT) ? false : (s != floor(s) || !isfinite(s));
  bool first = flags & NT_SCALAR_FIRST;
  nt_DType cd = compute_dtype(op, nt_promote_scalar(t->dtype, isf));
  nt_DType od = is_predicate(op) ? NT_BOOL : cd;
  if (op == NT_OP_POW && !first && !nt_dtype_is_float(cd) && s < 0)   /* torch and NumPy refuse it too */
    NT_FAIL_NULL("pow: integers to negative integer powers are not allowed (got %s ** %lld; use a float tensor)",
                 nt_dtype_name(t->dtype), (long long)s);
  {
    nt_Tensor *fo = NULL;
    int fr = nt_fuse_scalar(op, t, s, first, cd, &fo);
    if (fr) return fr > 0 ? fo : NULL;
  }
  nt_Tensor *ct = t;
  if (t->dtype != cd && !(ct = nt_to_dtype(t, cd))) return NULL;
  nt_Tensor *out = nt_empty(t->shape, t->ndim, od, t->device);
  if (out) {
    nt_KernelArgs args;
    args.op = op; args.out = out; args.in[0] = ct; args.in[1] = NULL; args.nin = 1;
    args.s[0] = s; args.iarg[0] = first; args.niarg = 1;
    if (nt_dispatch(op, t->device, &args)) { nt_release(out); out = NULL; }
  }
  if (out && op <= NT_OP_MINIMUM && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, bin_names[op], binary_scalar_backward, 1, &t);
    if (!n) { nt_release(out); out = NULL; }
    else {
      n->iarg[0] = op; n->iarg[1] = first; n->s[0] = s;
      /* x's values are read only by these (the rest scale g by the scalar) */
      if (!(op == NT_OP_POW || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM || (op == NT_OP_DIV && first))) nt_node_unchecked(n, 0);
      if (op == NT_OP_POW && first && nt_node_save(n, out) < 0) { nt_release(out); out = NULL; }
    }
  }
  if (ct != t) nt_release(ct);
  return out;
}

nt_Tensor *nt_binary_scalar(int op, nt_Tensor *t, double s, bool scalar_first) {
  return nt_binary_scalar_ex(op, t, s, scalar_first ? NT_SCALAR_FIRST : 0);
}

#define BIN(name, OP) nt_Tensor *nt_##name(nt_Tensor *a, nt_Tensor *b) { return nt_binary(OP, a, b); }
BIN(add, NT_OP_ADD) BIN(sub, NT_OP_SUB) BIN(mul, NT_OP_MUL) BIN(div, NT_OP_DIV) BIN(pow, NT_OP_POW)
BIN(floordiv, NT_OP_FLOORDIV) BIN(mod, NT_OP_MOD) BIN(maximum, NT_OP_MAXIMUM) BIN(minimum, NT_OP_MINIMUM)
BIN(eq, NT_OP_EQ) BIN(ne, NT_OP_NE) BIN(lt, NT_OP_LT) BIN(le, NT_OP_LE) BIN(gt, NT_OP_GT) BIN(ge, NT_OP_GE)
BIN(logical_and, NT_OP_LOGICAL_AND) BIN(logical_or, NT_OP_LOGICAL_OR)

/* ---- unary ---------------------------------------------------------------- */
/* ops that keep integer dtypes (everything else computes in floats) */
static bool int_ok(int op) {
  return op == NT_OP_NEG || op == NT_OP_ABS || op == NT_OP_SIGN || op == NT_OP_RELU || op == NT_OP_SQUARE ||
         op == NT_OP_FLOOR || op == NT_OP_CEIL || op == NT_OP_ROUND || op == NT_OP_CLAMP;
}

/* unary ops autocast computes in f32 (PyTorch's float32 list) */
static bool f32_under_autocast(int op) {
  return op == NT_OP_EXP || op == NT_OP_EXPM1 || op == NT_OP_LOG || op == NT_OP_LOG1P || op == NT_OP_LOG2 ||
         op == NT_OP_RECIPROCAL || op == NT_OP_RSQRT || op == NT_OP_TAN;
}

/* The activations whose composed backward below takes 3 to 11 passes have a
** one-pass kernel, op "unary_grad" (iarg[0] = the forward op; in = {g, the
** saved y or x}; CPU kernel in tcpu_elem.c), used when the device has it and
** g and the saved tensor are contiguous and of one float dtype and shape:
** f32/f64, and on CUDA also f16/bf16 (computed in float: an autocast MLP's
** gelu backward; the CPU kernel is f32/f64 only).  NULL without an error
** when it does not apply. */
static bool has_fused_grad(int op) {
  return op == NT_OP_TANH || op == NT_OP_SIGMOID || op == NT_OP_SILU || op == NT_OP_GELU || op == NT_OP_GELU_TANH;
}
static bool fused_grad_dtype(const nt_Tensor *t) {
  return t->dtype == NT_F32 || t->dtype == NT_F64 || (t->device == NT_CUDA && (t->dtype == NT_F16 || t->dtype == NT_BF16));
}
static nt_Tensor *fused_unary_grad(int op, nt_Tensor *g, nt_Tensor *in) {
  static int grad_op = -1;
  if (grad_op < 0) grad_op = nt_op_register("unary_grad");
  nt_Tensor *ops[2] = { g, in };
  if (!has_fused_grad(op) || !in || grad_op < 0 || !nt_kernel_table[grad_op][in->device] || g->device != in->device ||
      g->dtype != in->dtype || !fused_grad_dtype(in) || !same_shape(g, in) || !nt_all_contig(2, ops))
    return NULL;
  nt_Tensor *dx = nt_empty(in->shape, in->ndim, in->dtype, in->device);
  nt_KernelArgs ka = {.op = grad_op, .out = dx, .in = {g, in}, .nin = 2, .iarg = {op}, .niarg = 1};
  if (dx && in->numel && nt_dispatch(grad_op, in->device, &ka)) { nt_release(dx); return NULL; }
  return dx;
}

static int unary_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  Arena arena = {0}, *ar = &arena;
  nt_Tensor *x = n->in[0], *y = n->saved[0], *r = NULL;
  int op = (int)n->iarg[0];
  if (has_fused_grad(op) && (gin[0] = fused_unary_grad(op, g, op == NT_OP_TANH || op == NT_OP_SIGMOID ? y : x)))
    return 0;
  switch (op) {
    case NT_OP_NEG: r = U1(NT_OP_NEG, g); break;
    case NT_OP_EXP: r = B2(NT_OP_MUL, g, y); break;
    case NT_OP_EXPM1: r = B2(NT_OP_MUL, g, BS(NT_OP_ADD, y, 1)); break;
    case NT_OP_LOG: r = B2(NT_OP_DIV, g, x); break;
    case NT_OP_LOG2: r = BS(NT_OP_DIV, B2(NT_OP_DIV, g, x), M_LN2); break;
    case NT_OP_LOG1P: r = B2(NT_OP_DIV, g, BS(NT_OP_ADD, x, 1)); break;
    case NT_OP_SQRT: r = BS(NT_OP_MUL, B2(NT_OP_DIV, g, y), 0.5); break;
    case NT_OP_RSQRT: r = BS(NT_OP_MUL, B2(NT_OP_MUL, g, B2(NT_OP_MUL, y, B2(NT_OP_MUL, y, y))), -0.5); break;
    case NT_OP_ABS: r = B2(NT_OP_MUL, g, U1(NT_OP_SIGN, x)); break;
    case NT_OP_SIGN: case NT_OP_FLOOR: case NT_OP_CEIL: case NT_OP_ROUND: r = A(ar, nt_zeros_like(g)); break;
    case NT_OP_TANH: r = B2(NT_OP_MUL, g, SB(NT_OP_SUB, 1, B2(NT_OP_MUL, y, y))); break;
    case NT_OP_SIGMOID: r = B2(NT_OP_MUL, g, B2(NT_OP_MUL, y, SB(NT_OP_SUB, 1, y))); break;
    case NT_OP_RELU:   /* torch's threshold_backward: where(y <= 0, 0, g); a NaN input (y NaN) gets g, and a
                       ** NaN or inf g gives 0 where y <= 0 (selected, not g * 0) */
      r = WHERE(BS(NT_OP_LE, y, 0), ZEROS_LIKE(g), g); break;
    case NT_OP_SILU: { /* s + x s (1 - s) */
      nt_Tensor *s = U1(NT_OP_SIGMOID, x);
      r = B2(NT_OP_MUL, g, B2(NT_OP_ADD, s, B2(NT_OP_MUL, B2(NT_OP_MUL, x, s), SB(NT_OP_SUB, 1, s))));
      break; }
    case NT_OP_GELU: { /* Phi(x) + x phi(x) */
      nt_Tensor *cdf = BS(NT_OP_MUL, BS(NT_OP_ADD, U1(NT_OP_ERF, BS(NT_OP_MUL, x, M_SQRT1_2)), 1), 0.5);
      nt_Tensor *pdf = BS(NT_OP_MUL, U1(NT_OP_EXP, BS(NT_OP_MUL, B2(NT_OP_MUL, x, x), -0.5)), 0.3989422804014327);
      r = B2(NT_OP_MUL, g, B2(NT_OP_ADD, cdf, B2(NT_OP_MUL, x, pdf)));
      break; }
    case NT_OP_GELU_TANH: { /* u = c(x + 0.044715 x^3); 0.5(1+tanh u) + 0.5 x (1-tanh^2 u) c (1 + 3*0.044715 x^2) */
      const double c = 0.7978845608028654;
      nt_Tensor *x2 = B2(NT_OP_MUL, x, x);
      nt_Tensor *u = BS(NT_OP_MUL, B2(NT_OP_ADD, x, BS(NT_OP_MUL, B2(NT_OP_MUL, x2, x), 0.044715)), c);
      nt_Tensor *t = U1(NT_OP_TANH, u);
      nt_Tensor *d1 = BS(NT_OP_MUL, BS(NT_OP_ADD, t, 1), 0.5);
      nt_Tensor *du = BS(NT_OP_MUL, BS(NT_OP_ADD, BS(NT_OP_MUL, x2, 3 * 0.044715), 1), c);
      nt_Tensor *d2 = B2(NT_OP_MUL, BS(NT_OP_MUL, x, 0.5), B2(NT_OP_MUL, SB(NT_OP_SUB, 1, B2(NT_OP_MUL, t, t)), du));
      r = B2(NT_OP_MUL, g, B2(NT_OP_ADD, d1, d2));
      break; }
    case NT_OP_SIN: r = B2(NT_OP_MUL, g, U1(NT_OP_COS, x)); break;
    case NT_OP_COS: r = U1(NT_OP_NEG, B2(NT_OP_MUL, g, U1(NT_OP_SIN, x))); break;
    case NT_OP_TAN: r = B2(NT_OP_MUL, g, BS(NT_OP_ADD, B2(NT_OP_MUL, y, y), 1)); break;
    case NT_OP_RECIPROCAL: r = U1(NT_OP_NEG, B2(NT_OP_MUL, g, B2(NT_OP_MUL, y, y))); break;
    case NT_OP_SQUARE: r = BS(NT_OP_MUL, B2(NT_OP_MUL, g, x), 2); break;
    case NT_OP_ERF: r = BS(NT_OP_MUL, B2(NT_OP_MUL, g, U1(NT_OP_EXP, U1(NT_OP_NEG, B2(NT_OP_MUL, x, x)))), 1.1283791670955126); break;
    case NT_OP_CLAMP: { /* pass where lo <= x <= hi, else 0 selected (torch's where: a NaN g outside gives 0) */
      nt_Tensor *zero = ZEROS_LIKE(g);
      r = g;
      if (n->s[0] == n->s[0]) r = WHERE(BS(NT_OP_GE, x, n->s[0]), r, zero);
      if (n->s[1] == n->s[1]) r = WHERE(BS(NT_OP_LE, x, n->s[1]), r, zero);
      break; }
    default: break;
  }
  gin[0] = keep(r);
  arena_free(ar);
  return gin[0] ? 0 : -1;
}

/* what unary_backward reads: the output y (saved) and/or the input x */
static bool unary_reads_out(int op) {
  return op == NT_OP_EXP || op == NT_OP_EXPM1 || op == NT_OP_SQRT || op == NT_OP_RSQRT || op == NT_OP_TANH ||
         op == NT_OP_SIGMOID || op == NT_OP_TAN || op == NT_OP_RECIPROCAL || op == NT_OP_RELU;
}
static bool unary_reads_in(int op) {
  return !unary_reads_out(op) && op != NT_OP_NEG && op != NT_OP_SIGN && op != NT_OP_FLOOR && op != NT_OP_CEIL &&
         op != NT_OP_ROUND;
}

static const char *unary_name(int op) {
  static const char *names[] = {
    "NegBackward", "ExpBackward", "LogBackward", "Log1pBackward", "SqrtBackward", "RsqrtBackward", "AbsBackward",
    "SignBackward", "TanhBackward", "SigmoidBackward", "ReluBackward", "GeluBackward", "GeluBackward",
    "SiluBackward", "SinBackward", "CosBackward", "LogicalNotBackward", "FloorBackward", "CeilBackward",
    "RoundBackward", "ReciprocalBackward", "SquareBackward", "Expm1Backward", "Log2Backward", "TanBackward",
    "ErfBackward", "ClampBackward" };
  return names[op - NT_OP_NEG];
}

nt_Tensor *nt_unary_scalar_op(int op, nt_Tensor *t, double s0, double s1) {
  if (nt_dtype_is_complex(t->dtype)) return nt_complex_unary(op, t);
  if (!NT_OP_IS_UNARY(op)) NT_FAIL_NULL("%s is not a unary op", nt_op_name(op));
  if (f32_under_autocast(op)) NT_AUTOCAST(NT_AUTOCAST_F32, nt_unary_scalar_op(op, ac_[0], s0, s1), t);
  nt_DType cd = t->dtype, od;
  if (op == NT_OP_LOGICAL_NOT) od = NT_BOOL;
  else {
    if (cd == NT_BOOL) cd = int_ok(op) ? NT_DEFAULT_INT : NT_DEFAULT_FLOAT;
    else if (!int_ok(op) && !nt_dtype_is_float(cd)) cd = NT_DEFAULT_FLOAT;
    /* clamp of an integer tensor with a non-integral bound promotes like
    ** tensor OP float-scalar (torch: clamp(int, min=2.5) is f32) */
    if (op == NT_OP_CLAMP && !nt_dtype_is_float(cd) &&
        ((s0 == s0 && (s0 != floor(s0) || !isfinite(s0))) || (s1 == s1 && (s1 != floor(s1) || !isfinite(s1)))))
      cd = NT_DEFAULT_FLOAT;
    od = cd;
    nt_Tensor *fo = NULL;
    int fr = nt_fuse_unary(op, t, s0, s1, cd, &fo);
    if (fr) return fr > 0 ? fo : NULL;
  }
  nt_Tensor *ct = t;
  if (op != NT_OP_LOGICAL_NOT && t->dtype != cd && !(ct = nt_to_dtype(t, cd))) return NULL;
  /* (a small CPU result: a cached block, without nt_empty's shape checks -- t's shape passed them) */
  nt_Tensor *out = t->device == NT_CPU && t->numel * (int64_t)nt_dtype_size(od) <= NT_INLINE_BYTES ? nt_empty_small_(t, od)
                                                                                                   : nt_empty(t->shape, t->ndim, od, t->device);
  if (out) {
    nt_KernelArgs args;
    args.op = op; args.out = out; args.in[0] = ct; args.nin = 1; args.s[0] = s0; args.s[1] = s1;
    if (nt_dispatch(op, t->device, &args)) { nt_release(out); out = NULL; }
  }
  if (out && op != NT_OP_LOGICAL_NOT && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, unary_name(op), unary_backward, 1, &t);
    if (!n) { nt_release(out); out = NULL; }
    else {
      n->iarg[0] = op; n->s[0] = s0; n->s[1] = s1;
      if (!unary_reads_in(op)) nt_node_unchecked(n, 0);
      if (unary_reads_out(op) && nt_node_save(n, out) < 0) { nt_release(out); out = NULL; }
    }
  }
  if (ct != t) nt_release(ct);
  return out;
}

nt_Tensor *nt_unary(int op, nt_Tensor *t) { return nt_unary_scalar_op(op, t, NAN, NAN); }

#define UN(name, OP) nt_Tensor *nt_##name(nt_Tensor *t) { return nt_unary(OP, t); }
UN(neg, NT_OP_NEG) UN(exp, NT_OP_EXP) UN(log, NT_OP_LOG) UN(log1p, NT_OP_LOG1P) UN(sqrt, NT_OP_SQRT)
UN(rsqrt, NT_OP_RSQRT) UN(abs, NT_OP_ABS) UN(sign, NT_OP_SIGN) UN(tanh, NT_OP_TANH) UN(sigmoid, NT_OP_SIGMOID)
UN(relu, NT_OP_RELU) UN(silu, NT_OP_SILU) UN(sin, NT_OP_SIN) UN(cos, NT_OP_COS) UN(logical_not, NT_OP_LOGICAL_NOT)
nt_Tensor *nt_gelu(nt_Tensor *t, bool tanh_approx) { return nt_unary(tanh_approx ? NT_OP_GELU_TANH : NT_OP_GELU, t); }
nt_Tensor *nt_clamp(nt_Tensor *t, double lo, double hi) { return nt_unary_scalar_op(NT_OP_CLAMP, t, lo, hi); }

/* The fused chains' backward (tfuse_grad.c) runs THESE formulas, one op of
** the chain at a time, through a node built for the op: one piece of code for
** the derivatives, so fused gradients are the unfused ones bit for bit.
** kind: NT_FUSE_GRAD_BINARY (in {a, b}, saved {out} for pow),
** NT_FUSE_GRAD_SCALAR (in {x}, iarg {op, scalar_first}, s[0], saved {out}
** for s ** x), NT_FUSE_GRAD_UNARY (in {x}, s[0..1], saved {y}).
** nt_elem_grad_reads_: whether the formula reads the inputs' values / the
** output's (what the chain must recompute or save). */
int nt_elem_backward_(int kind, nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  return kind == NT_FUSE_GRAD_BINARY ? binary_backward(n, g, gin)
       : kind == NT_FUSE_GRAD_SCALAR ? binary_scalar_backward(n, g, gin) : unary_backward(n, g, gin);
}
void nt_elem_grad_reads_(int kind, int op, bool sfirst, bool *reads_in, bool *reads_out) {
  if (kind == NT_FUSE_GRAD_UNARY) { *reads_in = unary_reads_in(op); *reads_out = unary_reads_out(op); return; }
  if (kind == NT_FUSE_GRAD_SCALAR) {   /* (as nt_binary_scalar_ex's unchecked marks) */
    *reads_in = op == NT_OP_POW || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM || (op == NT_OP_DIV && sfirst);
    *reads_out = op == NT_OP_POW && sfirst;
    return;
  }
  *reads_in = op == NT_OP_MUL || op == NT_OP_DIV || op == NT_OP_POW || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM ||
              op == NT_OP_MOD;
  *reads_out = op == NT_OP_POW;
}

/* ---- where ---------------------------------------------------------------- */
static int where_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *c = n->in[0], *z = nt_zeros_like(g);
  if (!z) return -1;
  if (nt_node_needs(n, 1)) gin[1] = nt_where(c, g, z);
  if (nt_node_needs(n, 2)) gin[2] = nt_where(c, z, g);
  nt_release(z);
  return (nt_node_needs(n, 1) && !gin[1]) || (nt_node_needs(n, 2) && !gin[2]) ? -1 : 0;
}

nt_Tensor *nt_where(nt_Tensor *cond, nt_Tensor *a, nt_Tensor *b) {
  nt_Tensor *ts[3] = { cond, a, b }, *moved[3];
  if (nt_move_cpu_scalars(3, ts, moved)) return NULL;
  if (moved[0] || moved[1] || moved[2]) {   /* a CPU scalar joined the others' device */
    nt_Tensor *r = nt_where(ts[0], ts[1], ts[2]);
    for (int i = 0; i < 3; i++) nt_release(moved[i]);
    return r;
  }
  if (nt_check_same_device("where", 3, ts)) return NULL;
  int64_t s1[NT_MAXDIM], s2[NT_MAXDIM];
  int n1, n2;
  if (nt_broadcast_shapes("where", a->shape, a->ndim, b->shape, b->ndim, s1, &n1) ||
      nt_broadcast_shapes("where", cond->shape, cond->ndim, s1, n1, s2, &n2)) return NULL;
  nt_DType od = nt_result_type(a, b);
  {   /* recorded into a lazy chain (tfuse.c) when it pays */
    nt_Tensor *fo = NULL;
    int fr = nt_fuse_where(cond, a, b, od, &fo);
    if (fr) return fr > 0 ? fo : NULL;
  }
  nt_Tensor *cc = cond, *ca = a, *cb = b, *out = NULL;
  if (cond->dtype != NT_BOOL && !(cc = nt_to_dtype(cond, NT_BOOL))) return NULL;
  if (a->dtype != od && !(ca = nt_to_dtype(a, od))) goto done;
  if (b->dtype != od && !(cb = nt_to_dtype(b, od))) goto done;
  out = nt_empty(s2, n2, od, a->device);
  if (!out) goto done;
  nt_Tensor vc, va, vb;
  nt_bcast_view(&vc, cc, s2, n2); nt_bcast_view(&va, ca, s2, n2); nt_bcast_view(&vb, cb, s2, n2);
  nt_KernelArgs args;
  args.op = NT_OP_WHERE; args.out = out; args.in[0] = &vc; args.in[1] = &va; args.in[2] = &vb; args.nin = 3;
  if (nt_dispatch(NT_OP_WHERE, a->device, &args)) { nt_release(out); out = NULL; goto done; }
  if (nt_needs_grad(2, ts + 1) && !nt_record(out, "WhereBackward", where_backward, 3, (nt_Tensor *[]){ cc, a, b })) {
    nt_release(out); out = NULL;
  }
done:
  if (cc != cond) nt_release(cc);
  if (ca != a && ca) nt_release(ca);
  if (cb != b && cb) nt_release(cb);
  return out;
}

/* ---- casts, clones ------------------------------------------------------------- */
static int identity_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  (void)n;
  gin[0] = nt_retain(g);   /* the engine casts to the input's dtype */
  return 0;
}

/* plain copy into a fresh contiguous tensor of dtype dt (no autograd) */
static nt_Tensor *copy_as(nt_Tensor *t, nt_DType dt) {
  nt_Tensor *out = nt_empty(t->shape, t->ndim, dt, t->device);
  if (!out) return NULL;
  nt_KernelArgs args;
  args.op = NT_OP_COPY; args.out = out; args.in[0] = t; args.nin = 1;
  if (nt_dispatch(NT_OP_COPY, t->device, &args)) { nt_release(out); return NULL; }
  return out;
}

nt_Tensor *nt_to_dtype(nt_Tensor *t, nt_DType dt) {
  if ((unsigned)dt >= NT_NDTYPES) NT_FAIL_NULL("invalid dtype %d", (int)dt);
  if (t->dtype == dt) return nt_retain(t);
  if (nt_dtype_is_complex(t->dtype) || nt_dtype_is_complex(dt)) return nt_complex_to_dtype(t, dt);
  nt_Tensor *out = copy_as(t, dt);
  if (out && nt_dtype_is_float(dt) && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, "ToDtypeBackward", identity_backward, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    nt_node_unchecked(n, 0);
  }
  return out;
}

nt_Tensor *nt_clone(nt_Tensor *t) {
  if (nt_dtype_is_complex(t->dtype)) return nt_complex_clone(t);   /* through the real view: any device */
  nt_Tensor *out = copy_as(t, t->dtype);
  if (out && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, "CloneBackward", identity_backward, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    nt_node_unchecked(n, 0);
  }
  return out;
}

nt_Tensor *nt_contiguous(nt_Tensor *t) {
  return (t->flags & NT_T_CONTIG) ? nt_retain(t) : nt_clone(t);
}

static int to_device_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  gin[0] = nt_to_device(g, n->in[0]->device);
  return gin[0] ? 0 : -1;
}

nt_Tensor *nt_to_device(nt_Tensor *t, nt_Device dev) {
  if (t->device == dev) return nt_retain(t);
  /* every host read of device values (tolist, item, print, save, serialize) comes here */
  if (nt_dev_check(t, dev == NT_CPU ? "reading the values of a cuda tensor" : "copy between devices")) return NULL;
  const nt_Allocator *al = nt_allocator(dev == NT_CPU ? t->device : dev);
  if (!al || !nt_allocator(dev)) NT_FAIL_NULL("%s", nt_device_unavailable_msg(dev == NT_CPU ? t->device : dev));
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *c = nt_contiguous(t);
  nt_set_grad_enabled(prev);
  if (!c) return NULL;
  nt_Tensor *out = nt_empty(t->shape, t->ndim, t->dtype, dev);
  if (out && al->memcpy(out->storage->data, dev, nt_base(c), t->device, (size_t)t->numel * nt_dtype_size(t->dtype))) {
    nt_release(out); out = NULL;
  }
  /* host values copied up are right whatever a kernel of this epoch does:
  ** usable even if the epoch ends in a GPU data error (nt_dev_check) */
  if (out && t->device == NT_CPU) out->storage->dev_epoch = 0;
  nt_release(c);
  if (out && nt_needs_grad(1, &t)) {
    nt_Node *n = nt_record(out, "ToDeviceBackward", to_device_backward, 1, &t);
    if (!n) { nt_release(out); return NULL; }
    nt_node_unchecked(n, 0);
  }
  return out;
}
