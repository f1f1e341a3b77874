/*
** lib/ltops.c — the tensor builtins of math and structure: creation, elementwise
** math (numbers too), reductions (lists too), linear algebra, shape ops,
** conversions, nn ops, and the cuda device record.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ltensor.h"
#include "tensor/nn/nn.h"
#include "tensor/tdevice.h"
#include "tensor/tcpualloc.h"
#include "tensor/tfuse_rtc.h"

/* ------------------------------------------------------------ builtins: creation */

static int finish_creation(nb_VM *vm, nt_Tensor *t, nb_Value requires_grad, nb_Value *out) {
  if (!t) return nbT_err(vm);
  if (nb_truthy(requires_grad) && nt_set_requires_grad(t, true)) { nt_release(t); return nbT_err(vm); }
  *out = nb_obj(NB_TTENSOR, t);
  return NB_OK;
}

/* tensor(x, dtype=nil, device=nil, requires_grad=false) */
static int b_tensor(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "tensor";
  nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  bool have = args[1].t != NB_TNIL;
  if (nbT_dtype_arg(vm, fname, args[1], NT_F32, &dt) || nbT_device_arg(vm, fname, args[2], &dev)) return NB_ERR;
  nt_Tensor *t = NULL;
  nb_Value x = args[0];
  if (x.t == NB_TTENSOR) t = have ? nt_to_dtype(T(x), dt) : nt_clone(T(x));
  else if (x.t == NB_TLIST) { if (nbT_from_list(vm, x, dt, have, &t)) return NB_ERR; }
  else if (x.t == NB_TNUM || x.t == NB_TBOOL) {
    double d = x.t == NB_TNUM ? x.u.n : x.u.b;
    t = nt_scalar(d, have ? dt : x.t == NB_TBOOL ? NT_BOOL : nbT_num_isint(x) ? NT_I64 : NT_F32);   /* tensor(3) i64, tensor(3.0) f32 */
  } else return nb_error_kind(vm, "TypeError", "tensor: cannot make a tensor from a %s", nb_typename(x));
  if (t && t->device != dev) { nt_Tensor *d = nt_to_device(t, dev); nt_release(t); t = d; }
  return finish_creation(vm, t, args[3], out);
}

/* zeros/ones/empty/rand/randn(*shape, dtype=nil, device=nil, requires_grad=false):
** args[0..2] are the keywords, shape values follow. */
typedef nt_Tensor *(*ShapeCtor)(const int64_t *, int, nt_DType, nt_Device);
static int shape_ctor(nb_VM *vm, const char *fname, ShapeCtor fn, nb_Value *args, int n, nb_Value *out) {
  int64_t shape[NT_MAXDIM]; int nd;
  nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (nbT_dtype_arg(vm, fname, args[0], NT_F32, &dt) || nbT_device_arg(vm, fname, args[1], &dev)) return NB_ERR;
  if (nbT_shape_arg(vm, fname, args + 3, n - 3, shape, &nd)) return NB_ERR;
  return finish_creation(vm, fn(shape, nd, dt, dev), args[2], out);
}
static int b_zeros(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "zeros", nt_zeros, a, n, o); }
static int b_ones(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "ones", nt_ones, a, n, o); }
static int b_empty(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "empty", nt_empty, a, n, o); }
static int b_rand(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "rand", nt_rand, a, n, o); }
static int b_randn(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { return shape_ctor(vm, "randn", nt_randn, a, n, o); }

/* whether a scalar argument counts as an integer for dtype inference */
static bool scalar_isint(nb_Value v) {
  if (v.t == NB_TNUM) return nbT_num_isint(v);
  if (v.t == NB_TTENSOR) return !nt_dtype_is_float(T(v)->dtype);
  return v.t == NB_TBOOL;
}

/* full(shape, value, dtype=nil, device=nil, requires_grad=false): the dtype
** follows value as torch.full's does: bool, i64 for an int, else f32 */
static int b_full(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "full";
  int64_t shape[NT_MAXDIM]; int nd; double v; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (nbT_ints_arg(vm, fname, "shape", args[0], shape, NT_MAXDIM, &nd) || nbT_num_arg(vm, fname, "value", args[1], &v)) return NB_ERR;
  nt_DType dflt = args[1].t == NB_TBOOL ? NT_BOOL : args[1].t == NB_TTENSOR ? T(args[1])->dtype : scalar_isint(args[1]) ? NT_I64 : NT_F32;
  if (nbT_dtype_arg(vm, fname, args[2], dflt, &dt) || nbT_device_arg(vm, fname, args[3], &dev)) return NB_ERR;
  return finish_creation(vm, nt_full(shape, nd, v, dt, dev), args[4], out);
}
/* normal(mean, std, shape, dtype=nil, device=nil, requires_grad=false) */
static int b_normal(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "normal";
  int64_t shape[NT_MAXDIM]; int nd; double m, s; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (nbT_num_arg(vm, fname, "mean", args[0], &m) || nbT_num_arg(vm, fname, "std", args[1], &s)) return NB_ERR;
  if (nbT_ints_arg(vm, fname, "shape", args[2], shape, NT_MAXDIM, &nd)) return NB_ERR;
  if (nbT_dtype_arg(vm, fname, args[3], NT_F32, &dt) || nbT_device_arg(vm, fname, args[4], &dev)) return NB_ERR;
  return finish_creation(vm, nt_normal(shape, nd, m, s, dt, dev), args[5], out);
}
/* randint(low, high, shape, dtype="i64", device=nil) */
static int b_randint(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "randint";
  int64_t lo, hi, shape[NT_MAXDIM]; int nd; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (nbT_int_arg(vm, fname, "low", args[0], &lo) || nbT_int_arg(vm, fname, "high", args[1], &hi)) return NB_ERR;
  if (nbT_ints_arg(vm, fname, "shape", args[2], shape, NT_MAXDIM, &nd)) return NB_ERR;
  if (nbT_dtype_arg(vm, fname, args[3], NT_I64, &dt) || nbT_device_arg(vm, fname, args[4], &dev)) return NB_ERR;
  return nbT_ret(vm, nt_randint(lo, hi, shape, nd, dt, dev), out);
}
static int b_randperm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "randperm";
  int64_t k; nt_DType dt = NT_F32; nt_Device dev = NT_CPU;
  if (nbT_int_arg(vm, fname, "n", args[0], &k) || nbT_dtype_arg(vm, fname, args[1], NT_I64, &dt) || nbT_device_arg(vm, fname, args[2], &dev)) return NB_ERR;
  return nbT_ret(vm, nt_randperm(k, dt, dev), out);
}
static int b_seed(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "seed";
  int64_t s;
  if (nbT_int_arg(vm, fname, "seed", args[0], &s)) return NB_ERR;
  nt_seed((uint64_t)s);
  *out = nb_nil();
  return NB_OK;
}
/* rng_state(device=nil) / set_rng_state(state, device=nil): the Philox
** generator's state as an i64 tensor [seed, offset] (the bit patterns of two
** uint64: a tensor keeps them exact where a number would round past 2^53),
** for checkpoints (torch.get_rng_state / set_rng_state).  One counter-based
** generator serves every device (a CUDA tensor draws the numbers the CPU
** would), so the state is the same whichever device is named; the argument
** is checked and kept for torch's per-device spelling. */
static int b_rng_state(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nt_Device dev;
  if (args[0].t != NB_TNIL && nbT_device_arg(vm, "rng_state", args[0], &dev)) return NB_ERR;
  uint64_t st[2];
  nt_rng_get_state(&st[0], &st[1]);
  int64_t two = 2;
  return nbT_ret(vm, nt_from_buffer(st, NT_I64, &two, 1, NT_I64), out);
}
static int b_set_rng_state(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nt_Device dev;
  if (args[1].t != NB_TNIL && nbT_device_arg(vm, "set_rng_state", args[1], &dev)) return NB_ERR;
  if (args[0].t != NB_TTENSOR) return nb_arg_type_error(vm, "set_rng_state", "state", "a tensor from rng_state()", args[0]);
  nt_Tensor *t = T(args[0]);
  if (t->dtype != NT_I64 || t->ndim != 1 || t->shape[0] != 2) {
    char a[64];
    return nb_error_kind(vm, "ValueError", "set_rng_state: expected the i64 tensor of shape [2] that rng_state() returns, got %s %s",
                         nt_dtype_name(t->dtype), nt_shape_str(t->shape, t->ndim, a, sizeof a));
  }
  uint64_t st[2];
  if (nt_to_host(t, st, NT_I64)) return nbT_err(vm);
  nt_rng_set_state(st[0], st[1]);
  *out = nb_nil();
  return NB_OK;
}
/* arange(start, stop=nil, step=1, dtype=nil, device=nil) */
static int b_arange(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "arange";
  double a = 0, b, s = 1; nt_DType dt = NT_F32;
  if (nbT_num_arg(vm, fname, "start", args[0], &b)) return NB_ERR;
  if (args[1].t != NB_TNIL) { a = b; if (nbT_num_arg(vm, fname, "stop", args[1], &b)) return NB_ERR; }
  if (args[2].t != NB_TNIL && nbT_num_arg(vm, fname, "step", args[2], &s)) return NB_ERR;
  /* torch.arange: i64 when every given bound and the step are ints */
  bool isint = scalar_isint(args[0]) && (args[1].t == NB_TNIL || scalar_isint(args[1])) && (args[2].t == NB_TNIL || scalar_isint(args[2]));
  if (nbT_dtype_arg(vm, fname, args[3], isint ? NT_I64 : NT_F32, &dt)) return NB_ERR;
  nt_Device dev;
  if (nbT_device_arg(vm, fname, args[4], &dev)) return NB_ERR;   /* made there: no copy up from the host */
  return nbT_ret(vm, nt_arange_on(a, b, s, dt, dev), out);
}
static int b_linspace(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linspace";
  double a, b; int64_t k; nt_DType dt = NT_F32;
  if (nbT_num_arg(vm, fname, "start", args[0], &a) || nbT_num_arg(vm, fname, "stop", args[1], &b) || nbT_int_arg(vm, fname, "num", args[2], &k)) return NB_ERR;
  if (nbT_dtype_arg(vm, fname, args[3], NT_F32, &dt)) return NB_ERR;
  nt_Device dev;
  if (nbT_device_arg(vm, fname, args[4], &dev)) return NB_ERR;   /* made there: no copy up from the host */
  return nbT_ret(vm, nt_linspace_on(a, b, k, dt, dev), out);
}
static int b_eye(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "eye";
  int64_t a, b; nt_DType dt = NT_F32;
  if (nbT_int_arg(vm, fname, "n", args[0], &a)) return NB_ERR;
  b = a;
  if (args[1].t != NB_TNIL && nbT_int_arg(vm, fname, "m", args[1], &b)) return NB_ERR;
  if (nbT_dtype_arg(vm, fname, args[2], NT_F32, &dt)) return NB_ERR;
  nt_Device dev;
  if (nbT_device_arg(vm, fname, args[3], &dev)) return NB_ERR;   /* made there: no copy up from the host */
  return nbT_ret(vm, nt_eye_on(a, b, dt, dev), out);
}
/* zeros_like / ones_like / full_like / rand_like / randn_like (x, dtype=nil) */
static int like(nb_VM *vm, const char *fname, int kind, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  nt_DType dt = NT_F32;
  if (nbT_dtype_arg(vm, fname, args[1], x->dtype, &dt)) { nbT_tmp_free(&tp); return NB_ERR; }
  nt_Tensor *r = NULL;
  switch (kind) {
  case 0: r = nt_zeros(x->shape, x->ndim, dt, x->device); break;
  case 1: r = nt_ones(x->shape, x->ndim, dt, x->device); break;
  case 2: r = nt_rand(x->shape, x->ndim, dt, x->device); break;
  case 3: r = nt_randn(x->shape, x->ndim, dt, x->device); break;
  }
  DONE(r);
}
static int b_zeros_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "zeros_like", 0, a, o); }
static int b_ones_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "ones_like", 1, a, o); }
static int b_rand_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "rand_like", 2, a, o); }
static int b_randn_like(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return like(vm, "randn_like", 3, a, o); }
static int b_full_like(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "full_like"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  double v; nt_DType dt = NT_F32;
  if (nbT_num_arg(vm, fname, "value", args[1], &v) || nbT_dtype_arg(vm, fname, args[2], x->dtype, &dt)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_full(x->shape, x->ndim, v, dt, x->device));
}

/* ------------------------------------------------------------ builtins: elementwise */
/* One entry per unary op: numbers get the C function, tensors the op.
** kind: the kind of the result for a number: U_FLT always a float (sqrt(4)
** is 2.0, as math.sqrt), U_INT always an int (floor, ceil, as math.floor),
** U_KEEP the argument's kind (abs, sign, relu, neg). */
enum { U_FLT, U_INT, U_KEEP };
typedef struct UnaryDef { const char *name; int op; double (*num)(double); int kind; } UnaryDef;
static double relu_d(double x) { return x > 0 ? x : 0; }
static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }
static double sign_d(double x) { return (x > 0) - (x < 0); }
static double rsqrt_d(double x) { return 1 / sqrt(x); }
static double silu_d(double x) { return x / (1 + exp(-x)); }
static double neg_d(double x) { return -x; }
static const UnaryDef unary_defs[] = {
  { "exp", NT_OP_EXP, exp, U_FLT }, { "log", NT_OP_LOG, log, U_FLT }, { "log1p", NT_OP_LOG1P, log1p, U_FLT },
  { "sqrt", NT_OP_SQRT, sqrt, U_FLT }, { "rsqrt", NT_OP_RSQRT, rsqrt_d, U_FLT }, { "abs", NT_OP_ABS, fabs, U_KEEP },
  { "sign", NT_OP_SIGN, sign_d, U_KEEP }, { "neg", NT_OP_NEG, neg_d, U_KEEP }, { "tanh", NT_OP_TANH, tanh, U_FLT },
  { "sigmoid", NT_OP_SIGMOID, sigmoid_d, U_FLT }, { "relu", NT_OP_RELU, relu_d, U_KEEP }, { "silu", NT_OP_SILU, silu_d, U_FLT },
  { "sin", NT_OP_SIN, sin, U_FLT }, { "cos", NT_OP_COS, cos, U_FLT }, { "floor", NT_OP_FLOOR, floor, U_INT },
  { "ceil", NT_OP_CEIL, ceil, U_INT }, { "tan", NT_OP_TAN, tan, U_FLT }, { "erf", NT_OP_ERF, erf, U_FLT },
  { "expm1", NT_OP_EXPM1, expm1, U_FLT }, { "log2", NT_OP_LOG2, log2, U_FLT },
};
#define NUNARY ((int)(sizeof unary_defs / sizeof unary_defs[0]))
static int unary(nb_VM *vm, int k, nb_Value *args, nb_Value *out) {
  const UnaryDef *d = &unary_defs[k];
  const char *fname = d->name;
  if (args[0].t == NB_TNUM) {
    double r = d->num(args[0].u.n);
    *out = d->kind == U_FLT ? nb_flt(r) : d->kind == U_INT ? nb_int(r) : nb_numk(r, args[0].kind);
    return NB_OK;
  }
  Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  DONE(nt_unary(d->op, x));
}
#define UNARY_FN(i) static int b_unary##i(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return unary(vm, i, a, o); }
UNARY_FN(0) UNARY_FN(1) UNARY_FN(2) UNARY_FN(3) UNARY_FN(4) UNARY_FN(5) UNARY_FN(6) UNARY_FN(7) UNARY_FN(8) UNARY_FN(9)
UNARY_FN(10) UNARY_FN(11) UNARY_FN(12) UNARY_FN(13) UNARY_FN(14) UNARY_FN(15) UNARY_FN(16) UNARY_FN(17) UNARY_FN(18) UNARY_FN(19)
static nb_CFunc const unary_fns[] = { b_unary0, b_unary1, b_unary2, b_unary3, b_unary4, b_unary5, b_unary6, b_unary7, b_unary8, b_unary9,
  b_unary10, b_unary11, b_unary12, b_unary13, b_unary14, b_unary15, b_unary16, b_unary17, b_unary18, b_unary19 };

/* round(tensor, digits), trunc, frac: torch.round(x, decimals=d) (half to
** even: rint), torch.trunc (toward zero), torch.frac (x - trunc(x), the sign
** of x).  Composed of existing ops, so every device has them and autograd
** follows: round and trunc have a zero gradient (their pieces do), frac the
** identity's (torch's).  A digits round scales first, as torch does in the
** tensor's dtype: rint(x * 10^d) / 10^d, and rint(x / 10^-d) * 10^-d for d < 0. */
#define MAX_ROUND_DIGITS 300   /* 10^d stays a finite double */
int nbT_round(nb_VM *vm, nb_Value tv, nb_Value digits, nb_Value *out) {
  nt_Tensor *x = T(tv);
  if (digits.t == NB_TNIL) return nbT_ret(vm, nt_unary(NT_OP_ROUND, x), out);
  int64_t d;
  if (nbT_int_arg(vm, "round", "digits", digits, &d)) return NB_ERR;
  if (!nt_dtype_is_float(x->dtype)) return nb_error_kind(vm, "TypeError", "round: digits needs a floating tensor, got %s (as torch.round's decimals)", nt_dtype_name(x->dtype));
  if (d > MAX_ROUND_DIGITS || d < -MAX_ROUND_DIGITS) return nb_error_kind(vm, "ValueError", "round: digits must be in [-%d, %d], got %lld", MAX_ROUND_DIGITS, MAX_ROUND_DIGITS, (long long)d);
  double p = pow(10, (double)(d < 0 ? -d : d));
  nt_Tensor *s = nt_binary_scalar_ex(d < 0 ? NT_OP_DIV : NT_OP_MUL, x, p, NT_SCALAR_FLOAT);
  nt_Tensor *r = s ? nt_unary(NT_OP_ROUND, s) : NULL;
  nt_Tensor *y = r ? nt_binary_scalar_ex(d < 0 ? NT_OP_MUL : NT_OP_DIV, r, p, NT_SCALAR_FLOAT) : NULL;
  nt_release(s); nt_release(r);
  return nbT_ret(vm, y, out);
}
/* toward zero: ceil below 0, floor elsewhere (NaN: floor keeps it) */
static nt_Tensor *trunc_t(nt_Tensor *x) {
  if (!nt_dtype_is_float(x->dtype)) return nt_clone(x);
  nt_Tensor *neg = nt_binary_scalar_ex(NT_OP_LT, x, 0, NT_SCALAR_INT);
  nt_Tensor *c = neg ? nt_unary(NT_OP_CEIL, x) : NULL, *f = c ? nt_unary(NT_OP_FLOOR, x) : NULL;
  nt_Tensor *r = f ? nt_where(neg, c, f) : NULL;
  nt_release(neg); nt_release(c); nt_release(f);
  return r;
}
static int b_trunc(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "trunc"; Tmp tp = {0};
  if (args[0].t == NB_TNUM) { *out = nb_int(trunc(args[0].u.n)); return NB_OK; }   /* math.trunc: an int */
  TENSOR_ARG(x, 0, "x");
  DONE(trunc_t(x));
}
static int b_frac(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "frac"; Tmp tp = {0};
  if (args[0].t == NB_TNUM) { double v = args[0].u.n; *out = nb_flt(v - trunc(v)); return NB_OK; }
  TENSOR_ARG(x, 0, "x");
  if (!nt_dtype_is_float(x->dtype)) { nbT_tmp_free(&tp); return nb_error_kind(vm, "TypeError", "frac: expected a floating tensor, got %s (as torch.frac)", nt_dtype_name(x->dtype)); }
  nt_Tensor *t = trunc_t(x), *r = t ? nt_sub(x, t) : NULL;
  nt_release(t);
  DONE(r);
}

static int b_gelu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gelu"; Tmp tp = {0};
  bool tanh_approx = args[1].t == NB_TSTR && !strcmp(nb_str(args[1])->data, "tanh");
  if (args[1].t != NB_TNIL && !(args[1].t == NB_TSTR && (tanh_approx || !strcmp(nb_str(args[1])->data, "none"))))
    return nb_error_kind(vm, "ValueError", "gelu: approximate must be \"none\" or \"tanh\"");
  TENSOR_ARG(x, 0, "x");
  DONE(nt_gelu_fused(x, tanh_approx));
}
static int b_clamp(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "clamp"; Tmp tp = {0};
  double lo = NAN, hi = NAN;
  if (args[1].t != NB_TNIL && nbT_num_arg(vm, fname, "min", args[1], &lo)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_num_arg(vm, fname, "max", args[2], &hi)) return NB_ERR;
  if (args[0].t == NB_TNUM) {   /* a float when x or a given bound is (torch.clamp's promotion) */
    double x = args[0].u.n; if (!isnan(lo) && x < lo) x = lo; if (!isnan(hi) && x > hi) x = hi;
    bool flt = nb_isfloat(args[0]) || (args[1].t != NB_TNIL && !scalar_isint(args[1])) || (args[2].t != NB_TNIL && !scalar_isint(args[2]));
    *out = nb_numk(x, flt ? NB_KFLOAT : NB_KINT); return NB_OK;
  }
  TENSOR_ARG(x, 0, "x");
  DONE(nt_clamp(x, lo, hi));
}
static int binary2(nb_VM *vm, const char *fname, int op, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  if (args[0].t == NB_TNUM && args[1].t == NB_TNUM) {
    if (op == NT_OP_POW) return nbV_binop(vm, OP_POW, args[0], args[1], out);   /* as the ** operator */
    double a = args[0].u.n, b = args[1].u.n;
    *out = nb_numk(op == NT_OP_MAXIMUM ? fmax(a, b) : fmin(a, b), args[0].kind | args[1].kind);   /* promoted, as torch.maximum */
    return NB_OK;
  }
  if (args[0].t == NB_TTENSOR && (args[1].t == NB_TNUM || args[1].t == NB_TBOOL)) {
    double s = args[1].t == NB_TNUM ? args[1].u.n : args[1].u.b;
    bool isint = scalar_isint(args[1]) && !(op == NT_OP_POW && s < 0);   /* as the ** operator */
    return nbT_ret(vm, nt_binary_scalar_ex(op, T(args[0]), s, isint ? NT_SCALAR_INT : NT_SCALAR_FLOAT), out);
  }
  TENSOR_ARG(a, 0, "a");
  TENSOR_ARG(b, 1, "b");
  DONE(nt_binary(op, a, b));
}
static int b_maximum(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "maximum", NT_OP_MAXIMUM, a, o); }
static int b_minimum(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "minimum", NT_OP_MINIMUM, a, o); }
static int b_pow(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return binary2(vm, "pow", NT_OP_POW, a, o); }
static nt_DType where_scalar_dtype(nb_Value s, const nt_Tensor *other) {
  return !nbT_num_isint(s) && !nt_dtype_is_float(other->dtype) ? NT_F32 : other->dtype;
}
static int b_where(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "where"; Tmp tp = {0};
  TENSOR_ARG(c, 0, "cond");
  /* a scalar branch takes the other branch's dtype; a float scalar beside an
  ** integer tensor makes the result f32 (torch.where's promotion) */
  nt_Tensor *a, *b;
  if (args[1].t == NB_TNUM && args[2].t == NB_TTENSOR) { a = nbT_tmp_keep(&tp, nt_scalar(args[1].u.n, where_scalar_dtype(args[1], T(args[2])))); b = T(args[2]); }
  else if (args[2].t == NB_TNUM && args[1].t == NB_TTENSOR) { a = T(args[1]); b = nbT_tmp_keep(&tp, nt_scalar(args[2].u.n, where_scalar_dtype(args[2], T(args[1])))); }
  else { a = nbT_arg(vm, &tp, fname, "a", args[1]); if (!a) { nbT_tmp_free(&tp); return NB_ERR; } b = nbT_arg(vm, &tp, fname, "b", args[2]); if (!b) { nbT_tmp_free(&tp); return NB_ERR; } }
  if (!a || !b) { nbT_tmp_free(&tp); return nbT_err(vm); }
  DONE(nt_where(c, a, b));
}

/* ------------------------------------------------------------ builtins: reductions */
typedef struct RedDef { const char *name; int op; } RedDef;
static const RedDef red_defs[] = {
  { "sum", NT_OP_SUM }, { "mean", NT_OP_MEAN }, { "prod", NT_OP_PROD }, { "max", NT_OP_MAX }, { "min", NT_OP_MIN },
  { "logsumexp", NT_OP_LOGSUMEXP }, { "any", NT_OP_ANY }, { "all", NT_OP_ALL },
};
/* keepdims must be a bool (or nil): sum(1, 2, 3) would otherwise take the 3
** as keepdims=true and silently return 3 */
static int keepdims_arg(nb_VM *vm, const char *fname, nb_Value v) {
  if (v.t == NB_TBOOL || v.t == NB_TNIL) return NB_OK;
  return nb_error_kind(vm, "TypeError", "%s: keepdims must be a bool, got %s", fname, nb_typename(v));
}
/* sum of a list adds its elements; max/min of two numbers compares them */
static int reduce_list(nb_VM *vm, int op, nb_Value list, nb_Value *out) {
  nb_List *l = list.u.p;
  if (op != NT_OP_SUM && op != NT_OP_MAX && op != NT_OP_MIN && op != NT_OP_MEAN) return nb_error_kind(vm, "TypeError", "cannot reduce a list with this function");
  if (l->n == 0) { if (op == NT_OP_SUM) { *out = nb_int(0); return NB_OK; } return nb_error_kind(vm, "ValueError", "reduction of an empty list"); }
  nb_Value acc = l->items[0]; nb_incref(acc);
  for (int i = 1; i < l->n; i++) {
    nb_Value r;
    if (op == NT_OP_SUM || op == NT_OP_MEAN) { if (nbV_binop(vm, OP_ADD, acc, l->items[i], &r)) { nb_decref(acc); return NB_ERR; } }
    else {
      nb_Value c;
      if (nbV_binop(vm, op == NT_OP_MAX ? OP_GT : OP_LT, l->items[i], acc, &c)) { nb_decref(acc); return NB_ERR; }
      bool t; int st = nbV_truthy(vm, c, &t); nb_decref(c);
      if (st) { nb_decref(acc); return NB_ERR; }
      r = t ? l->items[i] : acc; nb_incref(r);
    }
    nb_decref(acc); acc = r;
  }
  if (op == NT_OP_MEAN) { nb_Value r; int st = nbV_binop(vm, OP_DIV, acc, nb_int(l->n), &r); nb_decref(acc); if (st) return NB_ERR; acc = r; }
  *out = acc;
  return NB_OK;
}
static int reduce(nb_VM *vm, int k, nb_Value *args, nb_Value *out) {
  const char *fname = red_defs[k].name; int op = red_defs[k].op;
  Tmp tp = {0};
  if (args[0].t == NB_TNUM && args[1].t == NB_TNUM && (op == NT_OP_MAX || op == NT_OP_MIN)) {
    /* max(a, b) and max(a, b, c) of numbers: the one chosen, kind and all
    ** (Python's max; a third number is not keepdims), NaN skipped as fmax does */
    int k = 0, n = args[2].t == NB_TNUM ? 3 : 2;
    if (n == 2 && keepdims_arg(vm, fname, args[2])) return NB_ERR;
    for (int j = 1; j < n; j++) {
      double a = args[k].u.n, b = args[j].u.n;
      if (isnan(a) || (op == NT_OP_MAX ? b > a : b < a)) k = j;
    }
    *out = args[k]; return NB_OK;
  }
  /* max/min take (x, other, keepdims, axis): a tensor given positionally
  ** (or as other=) is the elementwise maximum/minimum (torch.max(a, other));
  ** a number or list there is the reduction's axis (max(x, 1)); axis= is
  ** always the axis, whatever it is (axis=[0, 1] is a tensor literal) */
  nb_Value axis = args[1];
  if (op == NT_OP_MAX || op == NT_OP_MIN) {
    if (args[3].t != NB_TNIL) {
      if (args[1].t != NB_TNIL)
        return nb_error_kind(vm, "TypeError", "%s: give the reduction's axis or an elementwise other, not both", fname);
      axis = args[3];
    } else if (args[1].t == NB_TTENSOR) {
      if (nb_truthy(args[2]))
        return nb_error_kind(vm, "TypeError", "%s(a, b) with a tensor b is the elementwise %s and takes no keepdims; for a reduction give the axis as axis= (%s(x, axis=[0, 1]))",
                             fname, op == NT_OP_MAX ? "maximum" : "minimum", fname);
      return binary2(vm, fname, op == NT_OP_MAX ? NT_OP_MAXIMUM : NT_OP_MINIMUM, args, out);
    }
  }
  if (keepdims_arg(vm, fname, args[2])) return NB_ERR;
  if (args[0].t == NB_TLIST) {
    nb_List *l = args[0].u.p; bool allnum = true;
    for (int i = 0; i < l->n; i++) if (l->items[i].t != NB_TNUM) allnum = false;
    if (!allnum || l->n == 0) return reduce_list(vm, op, args[0], out);
  }
  int axes[NT_MAXDIM], na;
  if (nbT_axes_arg(vm, fname, axis, axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_reduce(op, x, na ? axes : NULL, na, nb_truthy(args[2])));
}
#define RED_FN(i) static int b_red##i(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return reduce(vm, i, a, o); }
RED_FN(0) RED_FN(1) RED_FN(2) RED_FN(3) RED_FN(4) RED_FN(5) RED_FN(6) RED_FN(7)
static nb_CFunc const red_fns[] = { b_red0, b_red1, b_red2, b_red3, b_red4, b_red5, b_red6, b_red7 };

static int varstd(nb_VM *vm, const char *fname, bool is_std, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  int axes[NT_MAXDIM], na; int corr = 1;
  if (keepdims_arg(vm, fname, args[2])) return NB_ERR;
  if (nbT_axes_arg(vm, fname, args[1], axes, &na)) return NB_ERR;
  if (args[3].t != NB_TNIL && nbT_intc_arg(vm, fname, "correction", args[3], &corr)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(is_std ? nt_std(x, na ? axes : NULL, na, corr, nb_truthy(args[2])) : nt_var(x, na ? axes : NULL, na, corr, nb_truthy(args[2])));
}
static int b_var(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return varstd(vm, "var", false, a, o); }
static int b_std(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return varstd(vm, "std", true, a, o); }
static int argminmax(nb_VM *vm, const char *fname, bool is_max, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  int a = 0;
  if (keepdims_arg(vm, fname, args[2])) return NB_ERR;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &a)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  const int *ap = args[1].t == NB_TNIL ? NULL : &a;
  DONE(is_max ? nt_argmax(x, ap, nb_truthy(args[2])) : nt_argmin(x, ap, nb_truthy(args[2])));
}
static int b_argmax(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return argminmax(vm, "argmax", true, a, o); }
static int b_argmin(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return argminmax(vm, "argmin", false, a, o); }

/* ------------------------------------------------------------ builtins: linear algebra */
static int b_matmul(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "matmul"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_matmul(a, b)); }
static int b_dot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "dot"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_dot(a, b)); }
static int b_outer(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "outer"; Tmp tp = {0}; TENSOR_ARG(a, 0, "a"); TENSOR_ARG(b, 1, "b"); DONE(nt_outer(a, b)); }

/* ------------------------------------------------------------ builtins: shape */
static int b_reshape(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "reshape"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (n < 2) return nb_error_kind(vm, "TypeError", "reshape(x, shape): missing the shape");
  if (n == 2 && (args[1].t == NB_TLIST || args[1].t == NB_TTENSOR)) { if (nbT_ints_arg(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR; }
  else {
    if (n - 1 > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "reshape: too many dimensions");
    for (int i = 1; i < n; i++) if (nbT_int_arg(vm, fname, "shape", args[i], &shape[i - 1])) return NB_ERR;
    nd = n - 1;
  }
  TENSOR_ARG(x, 0, "x");
  DONE(nt_reshape(x, shape, nd));
}
static int b_permute(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "permute"; Tmp tp = {0};
  int64_t p[NT_MAXDIM]; int np; int perm[NT_MAXDIM];
  if (n == 2) { if (nbT_ints_arg(vm, fname, "dims", args[1], p, NT_MAXDIM, &np)) return NB_ERR; }
  else { if (n - 1 > NT_MAXDIM) return nb_error_kind(vm, "ValueError", "permute: too many axes"); for (int i = 1; i < n; i++) if (nbT_int_arg(vm, fname, "dims", args[i], &p[i - 1])) return NB_ERR; np = n - 1; }
  for (int i = 0; i < np; i++) if (nbT_narrow_int(vm, fname, "dims", p[i], &perm[i])) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_permute(x, perm, np));
}
static int b_transpose(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "transpose"; Tmp tp = {0};
  int a = -2, b = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis0", args[1], &a)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis1", args[2], &b)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  if (x->ndim < 2 && args[1].t == NB_TNIL) DONE(nt_retain(x));
  DONE(nt_transpose(x, a, b));
}
static int b_squeeze(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "squeeze"; Tmp tp = {0};
  int a = NT_ALL_AXES;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &a)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_squeeze(x, a));
}
static int b_unsqueeze(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "unsqueeze"; Tmp tp = {0};
  int a;
  if (nbT_intc_arg(vm, fname, "axis", args[1], &a)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_unsqueeze(x, a));
}
static int b_flatten(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "flatten"; Tmp tp = {0};
  int a = 0, b = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "start", args[1], &a)) return NB_ERR;
  if (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "end", args[2], &b)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_flatten(x, a, b));
}
static int b_expand(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "expand"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (nbT_ints_arg(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_expand(x, shape, nd));
}
static int b_broadcast_to(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "broadcast_to"; Tmp tp = {0};
  int64_t shape[NT_MAXDIM]; int nd;
  if (nbT_ints_arg(vm, fname, "shape", args[1], shape, NT_MAXDIM, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_broadcast_to(x, shape, nd));
}
static int b_contiguous(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "contiguous"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_contiguous(x)); }
static int b_clone(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "clone"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_clone(x)); }
static int b_detach(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "detach"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_detach(x)); }

/* a list of tensors from a list value */
static int tensor_list(nb_VM *vm, Tmp *tp, const char *fname, nb_Value v, nt_Tensor ***out, int *n) {
  if (v.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of tensors, got %s", fname, nb_typename(v));
  nb_List *l = v.u.p;
  if (l->n == 0) return nb_error_kind(vm, "ValueError", "%s: the list of tensors is empty", fname);
  nt_Tensor **ts = malloc(sizeof(nt_Tensor *) * (size_t)l->n);
  if (!ts) return nb_error(vm, "out of memory");
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].t != NB_TTENSOR) { free(ts); return nb_error_kind(vm, "TypeError", "%s: element %d is a %s, not a tensor", fname, i, nb_typename(l->items[i])); }
    ts[i] = T(l->items[i]);
  }
  (void)tp;
  *out = ts; *n = l->n;
  return NB_OK;
}
static int cat_stack(nb_VM *vm, const char *fname, bool stack, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; nt_Tensor **ts = NULL; int k = 0; int ax = 0;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  if (tensor_list(vm, &tp, fname, args[0], &ts, &k)) return NB_ERR;
  nt_Tensor *r = stack ? nt_stack(ts, k, ax) : nt_concat(ts, k, ax);
  free(ts);
  return nbT_ret(vm, r, out);
}
static int b_concat(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cat_stack(vm, "concat", false, a, o); }
static int b_stack(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cat_stack(vm, "stack", true, a, o); }
static int pieces(nb_VM *vm, nt_Tensor **ps, int k, nb_Value *out) {
  if (k < 0) return nbT_err(vm);
  nb_List *l = nbL_new(k);
  for (int i = 0; i < k; i++) nbL_push(l, nb_obj(NB_TTENSOR, ps[i]));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
/* split(x, size_or_sizes, axis=0); strings split as text */
static int b_split_t(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "split"; Tmp tp = {0};
  if (args[0].t == NB_TSTR) return nbS_split(vm, args[0], args[1], out);
  int64_t sizes[1024]; int ax = 0, ns;
  if (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[2], &ax)) return NB_ERR;
  if (args[1].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "split(x, size_or_sizes, axis=0): missing the size of the pieces");
  TENSOR_ARG(x, 0, "x");
  int axn = ax < 0 ? ax + x->ndim : ax;
  if (axn < 0 || axn >= x->ndim) { int st_ = nb_error_kind(vm, "IndexError", "split: axis %d is out of range for a tensor of dimension %d", ax, x->ndim); nbT_tmp_free(&tp); return st_; }
  if (args[1].t == NB_TNUM) {
    int64_t sz; if (nbT_int_arg(vm, fname, "size", args[1], &sz)) { nbT_tmp_free(&tp); return NB_ERR; }
    if (sz <= 0) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "split: size must be positive"); }
    int64_t len = x->shape[axn]; ns = 0;
    for (int64_t s = 0; s < len && ns < 1024; s += sz) sizes[ns++] = len - s < sz ? len - s : sz;
  } else if (nbT_ints_arg(vm, fname, "sizes", args[1], sizes, 1024, &ns)) { nbT_tmp_free(&tp); return NB_ERR; }
  nt_Tensor *ps[1024];
  int k = nt_split(x, sizes, ns, ax, ps);
  nbT_tmp_free(&tp);
  return pieces(vm, ps, k, out);
}
static int b_chunk(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "chunk"; Tmp tp = {0};
  int64_t c; int ax = 0;
  if (nbT_int_arg(vm, fname, "chunks", args[1], &c) || (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[2], &ax))) return NB_ERR;
  if (c <= 0 || c > 1024) return nb_error_kind(vm, "ValueError", "chunk: chunks must be in 1..1024");
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *ps[1024];
  int k = nt_chunk(x, (int)c, ax, ps);
  nbT_tmp_free(&tp);
  return pieces(vm, ps, k, out);
}
static int b_flip(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "flip"; Tmp tp = {0};
  int axes[NT_MAXDIM], na;
  if (nbT_axes_arg(vm, fname, args[1], axes, &na)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  if (na == 0) { for (int i = 0; i < x->ndim; i++) axes[i] = i; na = x->ndim; }
  DONE(nt_flip(x, axes, na));
}
static int b_repeat(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "repeat"; Tmp tp = {0};
  int64_t reps[NT_MAXDIM]; int nr;
  if (nbT_ints_arg(vm, fname, "reps", args[1], reps, NT_MAXDIM, &nr)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(nt_repeat(x, reps, nr));
}
static int trilu(nb_VM *vm, const char *fname, bool upper, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int64_t k = 0;
  if (args[1].t != NB_TNIL && nbT_int_arg(vm, fname, "k", args[1], &k)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(upper ? nt_triu(x, k) : nt_tril(x, k));
}
static int b_tril(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return trilu(vm, "tril", false, a, o); }
static int b_triu(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return trilu(vm, "triu", true, a, o); }

/* ------------------------------------------------------------ builtins: conversion */
/* a model (a record or list of tensors) converted in place: model.to(...),
** model.double(), ... reach these builtins (a method a record does not have
** is the function of that name called with it) */
static int tree_to(nb_VM *vm, const char *fname, nb_Value tree, const char *target, nb_Value *out) {
  bool is_dev = !strcmp(target, "cpu") || !strncmp(target, "cuda", 4);
  nt_Device dev = NT_CPU; nt_DType dt = NT_F32;
  nb_Value tv = nb_strv(nbS_cstr(target));
  int st = is_dev ? nbT_device_arg(vm, fname, tv, &dev) : nbT_dtype_arg(vm, fname, tv, NT_F32, &dt);
  nb_decref(tv);
  if (st || nbT_tree_to(vm, tree, is_dev, dev, dt)) return NB_ERR;
  nb_incref(tree); *out = tree;
  return NB_OK;
}
static int b_to(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "to"; Tmp tp = {0};
  if (args[1].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "to: expected a dtype or device name, got %s", nb_typename(args[1]));
  if (args[0].t == NB_TREC || args[0].t == NB_TLIST) return tree_to(vm, fname, args[0], nb_str(args[1])->data, out);
  TENSOR_ARG(x, 0, "x");
  const char *s = nb_str(args[1])->data;
  if (!strcmp(s, "cpu") || !strncmp(s, "cuda", 4)) { nt_Device d; nbT_device_arg(vm, fname, args[1], &d); DONE(d == x->device ? nt_retain(x) : nt_to_device(x, d)); }
  nt_DType dt = NT_F32;
  if (nbT_dtype_arg(vm, fname, args[1], NT_F32, &dt)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_to_dtype(x, dt));
}
/* double(x), half(x), bfloat16(x): torch's Tensor.double()/Module.double()
** spellings of to(x, "f64"/"f16"/"bf16"), for a tensor or a model */
static int cast_to(nb_VM *vm, const char *fname, const char *dtname, nb_Value x, nb_Value *out) {
  if (x.t == NB_TREC || x.t == NB_TLIST) return tree_to(vm, fname, x, dtname, out);
  if (x.t != NB_TTENSOR) return nb_arg_type_error(vm, fname, "x", "a tensor or a model", x);
  nt_DType dt = NT_F32;
  nb_Value tv = nb_strv(nbS_cstr(dtname));
  int st = nbT_dtype_arg(vm, fname, tv, NT_F32, &dt);
  nb_decref(tv);
  if (st) return NB_ERR;
  return nbT_ret(vm, T(x)->dtype == dt ? nt_retain(T(x)) : nt_to_dtype(T(x), dt), out);
}
static int b_double(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cast_to(vm, "double", "f64", a[0], o); }
static int b_half(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cast_to(vm, "half", "f16", a[0], o); }
static int b_bfloat16(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return cast_to(vm, "bfloat16", "bf16", a[0], o); }
static int b_cuda(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "cuda"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(nt_to_device(x, NT_CUDA)); }
static int b_cpu(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "cpu"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); DONE(x->device == NT_CPU ? nt_retain(x) : nt_to_device(x, NT_CPU)); }
/* float(x): a number, bool or numeric string as a float (Python's float);
** a tensor as f32 */
static int b_float(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "float"; Tmp tp = {0};
  nb_Value v = args[0];
  if (v.t == NB_TNUM) { *out = nb_flt(v.u.n); return NB_OK; }
  if (v.t == NB_TBOOL) { *out = nb_flt(v.u.b); return NB_OK; }
  if (v.t == NB_TREC || v.t == NB_TLIST) return tree_to(vm, fname, v, "f32", out);   /* model.float() */
  if (v.t == NB_TSTR) {
    const char *s = nb_str(v)->data; char *end;
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    double d = strtod(s, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == s || *end) return nb_error_kind(vm, "ValueError", "float: \"%s\" is not a number", nb_str(v)->data);
    *out = nb_flt(d); return NB_OK;
  }
  if (v.t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "float: cannot convert a %s to a float", nb_typename(v));
  TENSOR_ARG(x, 0, "x");
  DONE(nt_to_dtype(x, NT_F32));
}
static int b_item(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "item";
  if (args[0].t == NB_TNUM) { *out = args[0]; return NB_OK; }
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", fname, nb_typename(args[0]));
  nb_Str *k = nbS_intern("item", 4); int st = nbT_field(vm, args[0], k, out); nb_decref(nb_strv(k)); return st;
}
static int b_tolist(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "tolist";
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor, got %s", fname, nb_typename(args[0]));
  return nbT_tolist(vm, T(args[0]), out);
}
static int b_numel(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "numel"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); *out = nb_int((double)x->numel); nbT_tmp_free(&tp); return NB_OK; }
static int b_is_tensor(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)n; *out = nb_bool(args[0].t == NB_TTENSOR); return NB_OK; }
static int b_set_default_device(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; nt_Device d;
  if (args[0].t == NB_TNIL) return nb_error_kind(vm, "TypeError", "set_default_device: expected \"cpu\" or \"cuda\"");
  if (nbT_device_arg(vm, "set_default_device", args[0], &d)) return NB_ERR;
  nbT_set_default_device(vm, d);
  *out = nb_nil();
  return NB_OK;
}

/* ------------------------------------------------------------ builtins: nn ops */
static int b_softmax(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "softmax"; Tmp tp = {0}; int ax = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_softmax(x, ax));
}
static int b_log_softmax(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "log_softmax"; Tmp tp = {0}; int ax = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_log_softmax(x, ax));
}
static int b_cross_entropy(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cross_entropy"; Tmp tp = {0};
  int64_t ig = -100; double ls = 0;
  if (args[2].t != NB_TNIL && nbT_int_arg(vm, fname, "ignore_index", args[2], &ig)) return NB_ERR;
  if (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "label_smoothing", args[3], &ls)) return NB_ERR;
  TENSOR_ARG(x, 0, "logits"); TENSOR_ARG(t, 1, "targets");
  DONE(nt_cross_entropy(x, t, ig, ls));
}
/* A loss of input and target (pred/target) of different shapes broadcasts
** them (mse_loss(pred [N, 1], y [N]) is an [N, N] mean): legal, and almost
** always a bug, so torch warns; so do we, once per call site. */
void nbT_warn_loss_shapes(nb_VM *vm, const char *fname, const nt_Tensor *input, const nt_Tensor *target) {
  if (input->ndim == target->ndim && !memcmp(input->shape, target->shape, sizeof(int64_t) * (size_t)input->ndim)) return;
  char a[128], b[128];
  nb_warn(vm, "UserWarning", "%s: using a target size (%s) that is different to the input size (%s). This will likely lead to incorrect "
          "results due to broadcasting. Please ensure they have the same size.", fname,
          nt_shape_str(target->shape, target->ndim, b, sizeof b), nt_shape_str(input->shape, input->ndim, a, sizeof a));
}
/* l1_loss(input, target, reduction="mean"): torch's F.l1_loss, |input - target|
** reduced ("mean", "sum" or "none"), composed of differentiable ops (abs's
** gradient at 0 is 0, as torch's sign) */
static int b_l1_loss(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "l1_loss"; Tmp tp = {0};
  const char *red = args[2].t == NB_TSTR ? nb_str(args[2])->data : args[2].t == NB_TNIL ? "mean" : "";
  if (strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none"))
    return nb_error_kind(vm, "ValueError", "l1_loss: reduction must be \"mean\", \"sum\" or \"none\"");
  TENSOR_ARG(a, 0, "input"); TENSOR_ARG(b, 1, "target");
  nbT_warn_loss_shapes(vm, fname, a, b);
  nt_Tensor *d = nt_sub(a, b), *e = d ? nt_abs(d) : NULL, *r = NULL;
  nt_release(d);
  if (e) r = !strcmp(red, "none") ? nt_retain(e) : !strcmp(red, "sum") ? nt_sum(e, NULL, 0, false) : nt_mean(e, NULL, 0, false);
  nt_release(e);
  DONE(r);
}
static int b_mse_loss(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "mse_loss"; Tmp tp = {0};
  TENSOR_ARG(a, 0, "input"); TENSOR_ARG(b, 1, "target");
  nbT_warn_loss_shapes(vm, fname, a, b);
  DONE(nt_mse_loss(a, b));
}
static int b_layer_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "layer_norm"; Tmp tp = {0}; double eps = 1e-5;
  if (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "eps", args[3], &eps)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *w = NULL, *b = NULL;
  if (args[1].t != NB_TNIL && !(w = nbT_arg(vm, &tp, fname, "weight", args[1]))) { nbT_tmp_free(&tp); return NB_ERR; }
  if (args[2].t != NB_TNIL && !(b = nbT_arg(vm, &tp, fname, "bias", args[2]))) { nbT_tmp_free(&tp); return NB_ERR; }
  nt_DType ydt = NT_F32;   /* dtype=nil: the input's */
  if (args[4].t != NB_TNIL && nbT_dtype_arg(vm, fname, args[4], NT_F32, &ydt)) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_layer_norm_to(x, w, b, eps, args[4].t == NB_TNIL ? -1 : (int)ydt));
}
static int b_dropout(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "dropout"; Tmp tp = {0}; double p = 0.5;
  if (args[1].t != NB_TNIL && nbT_num_arg(vm, fname, "p", args[1], &p)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_dropout(x, p, args[2].t == NB_TNIL ? true : nb_truthy(args[2])));
}
static int b_embedding(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "embedding"; Tmp tp = {0}; TENSOR_ARG(w, 0, "weight"); TENSOR_ARG(i, 1, "idx"); DONE(nt_embedding(w, i)); }
static int b_one_hot(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "one_hot"; Tmp tp = {0}; int64_t c = -1;
  if (args[1].t != NB_TNIL && nbT_int_arg(vm, fname, "num_classes", args[1], &c)) return NB_ERR;
  TENSOR_ARG(i, 0, "idx"); DONE(nt_one_hot(i, c));
}
static int b_take(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "take"; Tmp tp = {0}; int ax = 0;
  if (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[2], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 1, "idx"); DONE(nt_take(x, i, ax));
}
static int b_index_select(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "index_select"; Tmp tp = {0}; int ax;
  if (nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); DONE(nt_index_select(x, ax, i));
}
static int b_gather(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "gather"; Tmp tp = {0}; int ax;
  if (nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); DONE(nt_gather(x, ax, i));
}
static int b_scatter_add(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "scatter_add"; Tmp tp = {0}; int ax;
  if (nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(i, 2, "idx"); TENSOR_ARG(s, 3, "src"); DONE(nt_scatter_add(x, ax, i, s));
}
static int b_index_put(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "index_put"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  int st = nbT_index_put(vm, x, args[1], args[2], nb_truthy(args[3]), out);
  nbT_tmp_free(&tp);
  return st;
}
static int b_masked_select(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; const char *fname = "masked_select"; Tmp tp = {0}; TENSOR_ARG(x, 0, "x"); TENSOR_ARG(m, 1, "mask"); DONE(nt_masked_select(x, m)); }
static int pair(nb_VM *vm, const char *fname, const char *what, nb_Value v, int dflt, int *a, int *b) {
  if (v.t == NB_TNIL) { *a = *b = dflt; return NB_OK; }
  int64_t p[2]; int k;
  if (nbT_ints_arg(vm, fname, what, v, p, 2, &k)) return NB_ERR;
  if (nbT_narrow_int(vm, fname, what, p[0], a) || nbT_narrow_int(vm, fname, what, k == 2 ? p[1] : p[0], b)) return NB_ERR;
  return NB_OK;
}
static int b_linear(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "linear"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(w, 1, "weight");
  nt_Tensor *b = NULL;
  if (args[2].t != NB_TNIL && !(b = nbT_arg(vm, &tp, fname, "bias", args[2]))) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_linear(x, w, b));
}
static int pool(nb_VM *vm, const char *fname, bool is_max, nb_Value *args, nb_Value *out) {
  Tmp tp = {0}; int kh, kw, sh, sw, ph, pw;
  if (pair(vm, fname, "kernel", args[1], 2, &kh, &kw)) return NB_ERR;
  if (args[2].t == NB_TNIL) { sh = kh; sw = kw; } else if (pair(vm, fname, "stride", args[2], 1, &sh, &sw)) return NB_ERR;
  if (pair(vm, fname, "padding", args[3], 0, &ph, &pw)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  DONE(is_max ? nt_max_pool2d(x, kh, kw, sh, sw, ph, pw) : nt_avg_pool2d(x, kh, kw, sh, sw, ph, pw));
}
static int b_max_pool2d(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return pool(vm, "max_pool2d", true, a, o); }
static int b_avg_pool2d(nb_VM *vm, nb_Value *a, int n, nb_Value *o) { (void)n; return pool(vm, "avg_pool2d", false, a, o); }
static int two(nb_VM *vm, int rc, nt_Tensor *a, nt_Tensor *b, nb_Value *out) {
  if (rc < 0) return nbT_err(vm);
  nb_List *l = nbL_new(2);
  nbL_push(l, nb_obj(NB_TTENSOR, a)); nbL_push(l, nb_obj(NB_TTENSOR, b));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}
/* add_layer_norm(x, r, weight=nil, bias=nil, eps=1e-5) -> [x + r, layer_norm(x + r)]: one fused op */
static int b_add_layer_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "add_layer_norm"; Tmp tp = {0}; double eps = 1e-5;
  if (args[4].t != NB_TNIL && nbT_num_arg(vm, fname, "eps", args[4], &eps)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); TENSOR_ARG(r, 1, "r");
  nt_Tensor *w = NULL, *b = NULL, *s = NULL, *y = NULL;
  if (args[2].t != NB_TNIL && !(w = nbT_arg(vm, &tp, fname, "weight", args[2]))) { nbT_tmp_free(&tp); return NB_ERR; }
  if (args[3].t != NB_TNIL && !(b = nbT_arg(vm, &tp, fname, "bias", args[3]))) { nbT_tmp_free(&tp); return NB_ERR; }
  nt_DType ydt = NT_F32;   /* dtype=nil: the sum's */
  if (args[5].t != NB_TNIL && nbT_dtype_arg(vm, fname, args[5], NT_F32, &ydt)) { nbT_tmp_free(&tp); return NB_ERR; }
  int rc = nt_add_layer_norm_to(x, r, w, b, eps, args[5].t == NB_TNIL ? -1 : (int)ydt, &s, &y);
  nbT_tmp_free(&tp);
  return two(vm, rc, s, y, out);
}
static int b_sort(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "sort"; Tmp tp = {0}; int ax = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *v = NULL, *i = NULL;
  int rc = nt_sort(x, ax, nb_truthy(args[2]), &v, &i);
  nbT_tmp_free(&tp);
  return two(vm, rc, v, i, out);
}
static int b_argsort(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "argsort"; Tmp tp = {0}; int ax = -1;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_argsort(x, ax, nb_truthy(args[2])));
}
static int b_topk(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "topk"; Tmp tp = {0}; int64_t k; int ax = -1;
  if (nbT_int_arg(vm, fname, "k", args[1], &k) || (args[2].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[2], &ax))) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *v = NULL, *i = NULL;
  int rc = nt_topk(x, k, ax, args[3].t == NB_TNIL ? true : nb_truthy(args[3]), &v, &i);
  nbT_tmp_free(&tp);
  return two(vm, rc, v, i, out);
}
static int b_cumsum(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "cumsum"; Tmp tp = {0}; int ax = 0;
  if (args[1].t != NB_TNIL && nbT_intc_arg(vm, fname, "axis", args[1], &ax)) return NB_ERR;
  TENSOR_ARG(x, 0, "x"); DONE(nt_cumsum(x, ax));
}
static int b_sdpa(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "scaled_dot_product_attention"; Tmp tp = {0}; double scale = NAN, dropout = 0;
  if (args[5].t != NB_TNIL && nbT_num_arg(vm, fname, "scale", args[5], &scale)) return NB_ERR;
  if (args[6].t != NB_TNIL && nbT_num_arg(vm, fname, "dropout", args[6], &dropout)) return NB_ERR;
  TENSOR_ARG(q, 0, "q"); TENSOR_ARG(k, 1, "k"); TENSOR_ARG(v, 2, "v");
  nt_Tensor *mask = NULL;
  if (args[3].t != NB_TNIL && !(mask = nbT_arg(vm, &tp, fname, "mask", args[3]))) { nbT_tmp_free(&tp); return NB_ERR; }
  DONE(nt_sdpa(q, k, v, mask, nb_truthy(args[4]), scale, dropout));
}
static int b_attention_qkv(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "attention_qkv"; Tmp tp = {0}; double scale = NAN; int64_t heads;
  if (nbT_int_arg(vm, fname, "heads", args[1], &heads)) return NB_ERR;
  if (args[3].t != NB_TNIL && nbT_num_arg(vm, fname, "scale", args[3], &scale)) return NB_ERR;
  TENSOR_ARG(qkv, 0, "qkv");
  DONE(nt_attention_qkv(qkv, heads, args[2].t == NB_TNIL ? true : nb_truthy(args[2]), scale));
}

/* ------------------------------------------------------------ builtins: cuda
** `cuda` is a record: callable (`cuda(x)`, `x.cuda()` moves x to the GPU)
** and a namespace (`cuda.available()`, `cuda.memory()`, ...). */
static int b_cuda_available(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; char r[256]; *out = nb_bool(nt_cuda_available(r, sizeof r)); return NB_OK; }
static int b_cuda_reason(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n; char r[512] = "";
  *out = nt_cuda_available(r, sizeof r) ? nb_nil() : nb_strv(nbS_cstr(r));
  return NB_OK;
}
static int b_cuda_device_count(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; *out = nb_int(nt_cuda_device_count()); return NB_OK; }
static int b_cuda_device_name(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)args; (void)n; char name[300];
  if (nt_cuda_device_name(name, sizeof name)) return nbT_err(vm);
  *out = nb_strv(nbS_cstr(name));
  return NB_OK;
}
static int b_cuda_synchronize(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)args; (void)n; if (nt_cuda_synchronize()) return nbT_err(vm); *out = nb_nil(); return NB_OK; }
static int b_cuda_memory(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n; size_t a = 0, c = 0, p = 0;
  nt_cuda_memory(&a, &c, &p);
  nb_Rec *r = nbR_new(3);
  nbR_set_cstr(r, "allocated", nb_int((double)a)); nbR_set_cstr(r, "cached", nb_int((double)c)); nbR_set_cstr(r, "peak", nb_int((double)p));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
/* cuda.stats(): the CUDA module's counters (tdevice.h nt_CudaStats) as a
** record; by_op holds the ops that issued GPU work, "(no op)" the work
** outside any op (copies between host and device). */
static int b_cuda_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)args; (void)n;
  static nt_CudaStats s;                 /* 4 KiB: not on the stack; the VM is single-threaded */
  if (nt_cuda_stats(&s)) return nbT_err(vm);
  static const char *const names[] = { "launches", "gemms", "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memsets", "syncs", "mallocs", "frees", "alloc_requests" };
  const int64_t *f = &s.launches;
  nb_Rec *r = nbR_new(11), *ops = nbR_new(8);
  for (int i = 0; i < 10; i++) nbR_set_cstr(r, names[i], nb_int((double)f[i]));
  for (int i = 0; i < NT_CUDA_STATS_OPS; i++)
    if (s.by_op[i]) nbR_set_cstr(ops, i == NT_CUDA_STATS_OPS - 1 ? "(no op)" : nt_op_name(i), nb_int((double)s.by_op[i]));
  nbR_set_cstr(r, "by_op", nb_obj(NB_TREC, ops));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_cuda_reset_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; nt_cuda_reset_stats(); *out = nb_nil(); return NB_OK; }
/* fuse_stats(): lazy elementwise chains (tensor.h) pending now, computed and
** dropped unread so far: for tests and tuning */
static int b_fuse_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n; int64_t p = 0, f = 0, d = 0;
  nt_fuse_stats(&p, &f, &d);
  nb_Rec *r = nbR_new(12);
  nbR_set_cstr(r, "pending", nb_int((double)p)); nbR_set_cstr(r, "forced", nb_int((double)f)); nbR_set_cstr(r, "dropped", nb_int((double)d));
  /* CUDA chains: one generated kernel each (cuda_fused), op by op (cuda_unfused), compiles */
  int64_t cf = 0, cu = 0, cc = 0, ch = 0; double cs = 0;
  nt_fuse_cuda_stats(&cf, &cu, &cc, &ch, &cs);
  nbR_set_cstr(r, "cuda_fused", nb_int((double)cf)); nbR_set_cstr(r, "cuda_unfused", nb_int((double)cu));
  nbR_set_cstr(r, "compiles", nb_int((double)cc)); nbR_set_cstr(r, "compile_hits", nb_int((double)ch));
  nbR_set_cstr(r, "compile_seconds", nb_flt(cs));
  /* FusedBackward: one fused pass (backward_fused) or op by op (backward_fallbacks, the last reason) */
  int64_t bf = 0, bb = 0; const char *bw = NULL;
  nt_fuse_bwd_stats(&bf, &bb, &bw);
  nbR_set_cstr(r, "backward_fused", nb_int((double)bf)); nbR_set_cstr(r, "backward_fallbacks", nb_int((double)bb));
  nbR_set_cstr(r, "backward_fallback_reason", bw ? nb_strv(nbS_cstr(bw)) : nb_nil());
  nbR_set_cstr(r, "cuda_vec", nb_int((double)nt_fuse_cuda_vec_launches()));   /* of cuda_fused: the vector path */
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
/* settle(x): a lazy tensor computed now (tensor.h); x itself */
static int b_settle(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t == NB_TTENSOR && nbT_settle(vm, args[0])) return NB_ERR;
  *out = args[0]; nb_incref(*out);
  return NB_OK;
}
/* cuda.attention_backend(): which attention backend runs on the GPU and why
** (tensor/tdevice.h nt_cuda_attention_backend; docs/cuda.md "Attention backends") */
static int b_cuda_attention_backend(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)args; (void)n; nt_AttentionBackend ab;
  if (nt_cuda_attention_backend(&ab)) return nbT_err(vm);
  nb_Rec *r = nbR_new(6);
  nbR_set_cstr(r, "backend", nb_strv(nbS_cstr(ab.backend)));
  nbR_set_cstr(r, "reason", ab.reason[0] ? nb_strv(nbS_cstr(ab.reason)) : nb_nil());
  nbR_set_cstr(r, "last_fallback", ab.last[0] ? nb_strv(nbS_cstr(ab.last)) : nb_nil());
  nbR_set_cstr(r, "cudnn_version", ab.cudnn_version ? nb_int((double)ab.cudnn_version) : nb_nil());
  nbR_set_cstr(r, "nondeterministic", nb_bool(ab.nondeterministic));
  nbR_set_cstr(r, "plans", nb_int((double)ab.plans));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_cuda_empty_cache(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)vm; (void)args; (void)n; nt_cuda_empty_cache(); *out = nb_nil(); return NB_OK; }
static int b_cuda_move(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; nb_Value a[1] = { args[1] }; return b_cuda(vm, a, 1, out); }
static nb_Builtin cuda_members[] = {
  { "cuda.__call", b_cuda_move, "self, x", "cuda(x): x on the GPU" },
  { "cuda.available", b_cuda_available, "", "cuda.available(): whether CUDA tensors can be made here" },
  { "cuda.unavailable_reason", b_cuda_reason, "", "cuda.unavailable_reason(): why CUDA cannot be used (nil when it can)" },
  { "cuda.device_count", b_cuda_device_count, "", "cuda.device_count(): number of visible GPUs" },
  { "cuda.synchronize", b_cuda_synchronize, "", "cuda.synchronize(): waits for queued GPU work; raises a pending asynchronous error" },
  { "cuda.memory", b_cuda_memory, "", "cuda.memory(): {allocated, cached, peak} bytes of the caching allocator" },
  { "cuda.empty_cache", b_cuda_empty_cache, "", "cuda.empty_cache(): returns cached GPU blocks to the driver" },
  { "cuda.device_name", b_cuda_device_name, "", "cuda.device_name(): the GPU's name (\"... (emulated on the CPU)\" under NABLA_CUDA_EMULATE)" },
  { "cuda.attention_backend", b_cuda_attention_backend, "", "cuda.attention_backend(): {backend, reason, last_fallback, cudnn_version, nondeterministic, plans}: \"cudnn\" where cuDNN's fused attention runs, else why not" },
  { "cuda.stats", b_cuda_stats, "", "cuda.stats(): {launches, gemms, memcpy_h2d, memcpy_d2h, memcpy_d2d, memsets, syncs, mallocs, frees, alloc_requests, by_op: {op: GPU operations}} since load or cuda.reset_stats()" },
  { "cuda.reset_stats", b_cuda_reset_stats, "", "cuda.reset_stats(): zeroes the counters of cuda.stats()" },
  { NULL, NULL, NULL, NULL }
};
/* a record of builtins named "PREFIX.X" (cuda.*, cpu.*), each under X */
static int members_record(nb_Builtin *members, size_t prefix_len, nb_Value *out) {
  int nm = 0;
  while (members[nm].name) nm++;
  nb_Rec *r = nbR_new(nm);
  for (int i = 0; i < nm; i++) nbR_set_cstr(r, members[i].name + prefix_len, nb_builtinv(&members[i]));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int cuda_value(nb_VM *vm, nb_Value *out) { (void)vm; return members_record(cuda_members, 5, out); }

/* cpu.memory(): the CPU allocator's big-block cache (tensor/tcpualloc.h: blocks of 4 MiB and
** more, kept after free for reuse) and the process's resident set; cpu.empty_cache() gives
** the cached blocks and glibc's free heap pages back to the system, as torch.cuda.empty_cache
** does for the GPU's cache */
static int b_cpu_memory(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  nt_CpuCacheStats cs;
  nt_cpu_cache_stats(&cs);
  long pages = 0, rss = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) { if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = -1; fclose(f); }
  nb_Rec *r = nbR_new(8);
  nbR_set_cstr(r, "cached", nb_int((double)cs.cached_bytes)); nbR_set_cstr(r, "cached_blocks", nb_int((double)cs.cached_blocks));
  nbR_set_cstr(r, "cache_limit", nb_int((double)cs.limit_bytes)); nbR_set_cstr(r, "live_big", nb_int((double)cs.live_bytes));
  nbR_set_cstr(r, "hits", nb_int((double)cs.hits)); nbR_set_cstr(r, "misses", nb_int((double)cs.misses));
  nbR_set_cstr(r, "evictions", nb_int((double)cs.evictions));
  nbR_set_cstr(r, "rss", rss < 0 ? nb_nil() : nb_int((double)rss * (double)sysconf(_SC_PAGESIZE)));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}
static int b_cpu_empty_cache(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)vm; (void)args; (void)n;
  *out = nb_int((double)nt_cpu_empty_cache());
  return NB_OK;
}
static int b_cpu_move(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; nb_Value a[1] = { args[1] }; return b_cpu(vm, a, 1, out); }
static nb_Builtin cpu_members[] = {
  { "cpu.__call", b_cpu_move, "self, x", "cpu(x): x on the CPU" },
  { "cpu.memory", b_cpu_memory, "", "cpu.memory(): {cached, cached_blocks, cache_limit, live_big, hits, misses, evictions, rss}: bytes of the CPU allocator's cache of big blocks (>= 4 MiB) and of the process's resident memory" },
  { "cpu.empty_cache", b_cpu_empty_cache, "", "cpu.empty_cache(): gives the cached big CPU blocks (and glibc's free heap pages) back to the system; returns the cache's bytes released" },
  { NULL, NULL, NULL, NULL }
};
static int cpu_value(nb_VM *vm, nb_Value *out) { (void)vm; return members_record(cpu_members, 4, out); }
static int b_set_matmul_precision(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "set_matmul_precision: expected \"highest\", \"high\" or \"tf32\"");
  if (nt_set_matmul_precision(nb_str(args[0])->data)) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}

/* ------------------------------------------------------------ the table */
#define KW_CREATE "*shape, dtype=nil, device=nil, requires_grad=false"
static nb_Builtin ops_builtins[] = {
  { "tensor", b_tensor, "x, dtype=nil, device=nil, requires_grad=false", "tensor(x, dtype=nil, device=nil, requires_grad=false): a tensor from a number, (nested) list or tensor (copied); without dtype as torch.tensor: ints i64, floats f32, bools bool" },
  { "zeros", b_zeros, KW_CREATE, "zeros(*shape, dtype=\"f32\", device=nil, requires_grad=false): a tensor of zeros; zeros(2, 3) or zeros([2, 3])" },
  { "ones", b_ones, KW_CREATE, "ones(*shape, dtype=\"f32\", ...): a tensor of ones" },
  { "empty", b_empty, KW_CREATE, "empty(*shape, dtype=\"f32\", ...): an uninitialized tensor" },
  { "rand", b_rand, KW_CREATE, "rand(*shape, dtype=\"f32\", ...): uniform [0, 1) from the Philox generator (see seed)" },
  { "randn", b_randn, KW_CREATE, "randn(*shape, dtype=\"f32\", ...): standard normal from the Philox generator" },
  { "full", b_full, "shape, value, dtype=nil, device=nil, requires_grad=false", "full(shape, value, dtype=nil): a tensor filled with value; without dtype as torch.full: bool, i64 for an int value, else f32" },
  { "normal", b_normal, "mean, std, shape, dtype=nil, device=nil, requires_grad=false", "normal(mean, std, shape): normal samples" },
  { "randint", b_randint, "low, high, shape, dtype=nil, device=nil", "randint(low, high, shape, dtype=\"i64\"): uniform integers in [low, high)" },
  { "randperm", b_randperm, "n, dtype=nil, device=nil", "randperm(n): a random permutation of 0..n-1" },
  { "seed", b_seed, "seed", "seed(n): reseeds the random generator (reproducible runs)" },
  { "rng_state", b_rng_state, "device=nil", "rng_state(device=nil): the random generator's state, an i64 tensor [seed, offset] to save (torch.get_rng_state); one generator serves every device" },
  { "set_rng_state", b_set_rng_state, "state, device=nil", "set_rng_state(state, device=nil): restores a state from rng_state(): the draws that follow repeat exactly (an exact resume)" },
  { "arange", b_arange, "start, stop=nil, step=nil, dtype=nil, device=nil", "arange(stop) or arange(start, stop, step=1): evenly spaced values in [start, stop); i64 when all are ints, else f32" },
  { "linspace", b_linspace, "start, stop, num, dtype=nil, device=nil", "linspace(start, stop, num): num values from start to stop inclusive" },
  { "eye", b_eye, "n, m=nil, dtype=nil, device=nil", "eye(n, m=n): identity matrix" },
  { "zeros_like", b_zeros_like, "x, dtype=nil", "zeros_like(x): zeros of x's shape, dtype and device" },
  { "ones_like", b_ones_like, "x, dtype=nil", "ones_like(x): ones of x's shape, dtype and device" },
  { "rand_like", b_rand_like, "x, dtype=nil", "rand_like(x): uniform samples of x's shape" },
  { "randn_like", b_randn_like, "x, dtype=nil", "randn_like(x): normal samples of x's shape" },
  { "full_like", b_full_like, "x, value, dtype=nil", "full_like(x, value): x's shape filled with value" },
  { "gelu", b_gelu, "x, approximate=nil", "gelu(x, approximate=\"none\"|\"tanh\"): Gaussian error linear unit" },
  { "trunc", b_trunc, "x", "trunc(x): rounds toward zero; a number gives an int, a tensor keeps its dtype (torch.trunc, zero gradient)" },
  { "frac", b_frac, "x", "frac(x): x - trunc(x), with x's sign (torch.frac; gradient 1)" },
  { "clamp", b_clamp, "x, min=nil, max=nil", "clamp(x, min=nil, max=nil): limits values to [min, max]" },
  { "maximum", b_maximum, "a, b", "maximum(a, b): elementwise maximum (broadcasting)" },
  { "minimum", b_minimum, "a, b", "minimum(a, b): elementwise minimum (broadcasting)" },
  { "pow", b_pow, "a, b", "pow(a, b): a ** b elementwise" },
  { "where", b_where, "cond, a, b", "where(cond, a, b): a where cond is true, else b (broadcasting)" },
  { "var", b_var, "x, axis=nil, keepdims=false, correction=1", "var(x, axis=nil, keepdims=false, correction=1): variance (unbiased by default)" },
  { "std", b_std, "x, axis=nil, keepdims=false, correction=1", "std(x, axis=nil, keepdims=false, correction=1): standard deviation" },
  { "argmax", b_argmax, "x, axis=nil, keepdims=false", "argmax(x, axis=nil): index of the maximum (flattened when axis is nil)" },
  { "argmin", b_argmin, "x, axis=nil, keepdims=false", "argmin(x, axis=nil): index of the minimum" },
  { "matmul", b_matmul, "a, b", "matmul(a, b) or a @ b: matrix product with batch broadcasting (BLAS)" },
  { "dot", b_dot, "a, b", "dot(a, b): inner product of two vectors" },
  { "outer", b_outer, "a, b", "outer(a, b): outer product of two vectors" },
  { "reshape", b_reshape, "*args", "reshape(x, shape): same data, new shape (one -1 is inferred); a view when possible" },
  { "permute", b_permute, "*args", "permute(x, dims): reorders axes, e.g. permute(x, [2, 0, 1])" },
  { "transpose", b_transpose, "x, axis0=nil, axis1=nil", "transpose(x, a=-2, b=-1): swaps two axes (a view)" },
  { "squeeze", b_squeeze, "x, axis=nil", "squeeze(x, axis=nil): removes size-1 axes" },
  { "unsqueeze", b_unsqueeze, "x, axis", "unsqueeze(x, axis): inserts a size-1 axis" },
  { "flatten", b_flatten, "x, start=nil, end=nil", "flatten(x, start=0, end=-1): merges axes start..end" },
  { "expand", b_expand, "x, shape", "expand(x, shape): broadcasts size-1 axes (a view; -1 keeps a size)" },
  { "broadcast_to", b_broadcast_to, "x, shape", "broadcast_to(x, shape): NumPy broadcast (a view)" },
  { "contiguous", b_contiguous, "x", "contiguous(x): x, copied to row-major layout if needed" },
  { "clone", b_clone, "x", "clone(x): a copy (differentiable)" },
  { "detach", b_detach, "x", "detach(x): the same data, cut from the autograd graph" },
  { "concat", b_concat, "tensors, axis=0", "concat(ts, axis=0): joins tensors along an existing axis" },
  { "stack", b_stack, "tensors, axis=0", "stack(ts, axis=0): joins tensors along a new axis" },
  { "split", b_split_t, "x, size=nil, axis=nil", "split(x, size_or_sizes, axis=0): pieces along an axis; split(s, sep) splits a string" },
  { "chunk", b_chunk, "x, chunks, axis=nil", "chunk(x, n, axis=0): n nearly equal pieces" },
  { "flip", b_flip, "x, axis=nil", "flip(x, axis=nil): reverses the order along axes (all when nil)" },
  { "repeat", b_repeat, "x, reps", "repeat(x, reps): tiles x (NumPy tile / torch repeat)" },
  { "tril", b_tril, "x, k=0", "tril(x, k=0): lower triangle of the last two axes" },
  { "triu", b_triu, "x, k=0", "triu(x, k=0): upper triangle of the last two axes" },
  { "to", b_to, "x, target", "to(x, \"f64\" | \"cuda\" | ...): converts dtype or moves to a device; on a model (model.to(...)) every tensor in place, as nn.to" },
  { .name = "cuda", .doc = "cuda(x) moves x to the GPU; cuda.available(), cuda.device_count(), cuda.synchronize(), cuda.memory(), cuda.empty_cache()", .value = cuda_value },
  { "set_matmul_precision", b_set_matmul_precision, "precision", "set_matmul_precision(\"highest\" | \"high\" | \"tf32\"): f32 matmuls on TF32 tensor cores when \"high\"/\"tf32\" (GPU)" },
  { .name = "cpu", .doc = "cpu(x) moves x to the CPU; cpu.memory(), cpu.empty_cache()", .value = cpu_value },
  { "float", b_float, "x", "float(x): a number, bool or numeric string as a float; a tensor as f32; a model's floating tensors cast to f32 in place (model.float())" },
  { "double", b_double, "x", "double(x): x as f64 (torch's .double()); a model's floating tensors cast in place (model.double())" },
  { "half", b_half, "x", "half(x): x as f16; a model's floating tensors cast in place (model.half())" },
  { "bfloat16", b_bfloat16, "x", "bfloat16(x): x as bf16; a model's floating tensors cast in place (model.bfloat16())" },
  { "item", b_item, "x", "item(x): the number in a one-element tensor" },
  { "tolist", b_tolist, "x", "nbT_tolist(x): nested lists of numbers" },
  { "numel", b_numel, "x", "numel(x): number of elements" },
  { "settle", b_settle, "x", "settle(x): computes x now if it is a lazy elementwise result (values are otherwise computed by the statement that stores or returns them, or when first read); returns x" },
  { "fuse_stats", b_fuse_stats, "", "fuse_stats(): {pending, forced, dropped} counts of lazy fused elementwise chains (NABLA_FUSE=0 turns fusion off)" },
  { "is_tensor", b_is_tensor, "x", "is_tensor(x): whether x is a tensor" },
  { "set_default_device", b_set_default_device, "device", "set_default_device(\"cuda\"): where creation functions put tensors by default" },
  { "softmax", b_softmax, "x, axis=-1", "softmax(x, axis=-1): exp(x) / sum(exp(x)), numerically stable" },
  { "log_softmax", b_log_softmax, "x, axis=-1", "log_softmax(x, axis=-1): x - logsumexp(x), numerically stable" },
  { "cross_entropy", b_cross_entropy, "logits, targets, ignore_index=-100, label_smoothing=0", "cross_entropy(logits [N, C], targets [N] ints): mean negative log-likelihood (fused, stable)" },
  { "mse_loss", b_mse_loss, "input, target", "mse_loss(a, b): mean squared error (different shapes broadcast, with torch's warning once per call site)" },
  { "l1_loss", b_l1_loss, "input, target, reduction=\"mean\"", "l1_loss(input, target, reduction=\"mean\"|\"sum\"|\"none\"): mean absolute error (torch's F.l1_loss; different shapes warn as mse_loss)" },
  { "layer_norm", b_layer_norm, "x, weight=nil, bias=nil, eps=1e-5, dtype=nil", "layer_norm(x, weight=nil, bias=nil, eps=1e-5, dtype=nil): normalizes the last axis; dtype: the output's (f32 statistics; e.g. autocast_dtype() for the bf16 linear after it)" },
  { "add_layer_norm", b_add_layer_norm, "x, r, weight=nil, bias=nil, eps=1e-5, dtype=nil", "add_layer_norm(x, r, weight=nil, bias=nil, eps=1e-5, dtype=nil): [x + r, layer_norm(x + r)] in one fused op (the residual stream and its normalisation); dtype: the normalised output's (nil: the sum's)" },
  { "dropout", b_dropout, "x, p=0.5, training=true", "dropout(x, p=0.5, training=true): zeroes elements with probability p, scales by 1/(1-p)" },
  { "embedding", b_embedding, "weight, idx", "embedding(weight [V, D], idx): rows of weight for integer idx" },
  { "one_hot", b_one_hot, "idx, num_classes=-1", "one_hot(idx, num_classes): i64 one-hot encoding" },
  { "take", b_take, "x, idx, axis=0", "take(x, idx, axis=0): elements/rows at integer idx" },
  { "index_select", b_index_select, "x, axis, idx", "index_select(x, axis, idx): slices along axis at 1-D idx" },
  { "gather", b_gather, "x, axis, idx", "gather(x, axis, idx): out[i][j] = x[i][idx[i][j]] (axis=1)" },
  { "scatter_add", b_scatter_add, "x, axis, idx, src", "scatter_add(x, axis, idx, src): x with src added at idx (a copy)" },
  { "index_put", b_index_put, "x, idx, v, accumulate=false", "index_put(x, idx, v, accumulate=false): a copy of x with x[idx] = v (accumulate: += v, repeated indices add up); idx is a tensor or a list of index entries ([0, t], [\"...\", t], [rows, cols]); differentiable" },
  { "masked_select", b_masked_select, "x, mask", "masked_select(x, mask): 1-D tensor of x where mask" },
  { "linear", b_linear, "x, weight, bias=nil", "linear(x [..., in], weight [out, in], bias=nil): x @ weight.T + bias as one op (torch's F.linear; one BLAS call on the CPU, bias added inside it)" },
  { "max_pool2d", b_max_pool2d, "x, kernel=2, stride=nil, padding=0", "max_pool2d(x, kernel=2, stride=kernel, padding=0)" },
  { "avg_pool2d", b_avg_pool2d, "x, kernel=2, stride=nil, padding=0", "avg_pool2d(x, kernel=2, stride=kernel, padding=0)" },
  { "sort", b_sort, "x, axis=-1, descending=false", "sort(x, axis=-1, descending=false): [values, indices]" },
  { "argsort", b_argsort, "x, axis=-1, descending=false", "argsort(x, axis=-1, descending=false): indices that sort x" },
  { "topk", b_topk, "x, k, axis=-1, largest=true", "topk(x, k, axis=-1, largest=true): [values, indices] of the k largest" },
  { "cumsum", b_cumsum, "x, axis=0", "cumsum(x, axis=0): running sum" },
  { "scaled_dot_product_attention", b_sdpa, "q, k, v, mask=nil, causal=false, scale=nil, dropout=0", "scaled_dot_product_attention(q [..., T, d], k [..., S, d], v [..., S, dv], mask=nil, causal=false, scale=1/sqrt(d), dropout=0): softmax(scale q k^T + mask) v as one fused op (torch semantics; mask: bool, true = attend, or float added to the scores, broadcast to [..., T, S]; causal: query i sees keys j <= i; dropout on the probabilities); saves only the row logsumexp for backward" },
  { "attention_qkv", b_attention_qkv, "qkv, heads, causal=true, scale=nil", "attention_qkv(qkv [B, T, 3C], heads, causal=true, scale=1/sqrt(C/heads)): multi-head attention over a packed qkv (q, k, v = its thirds, each split into heads) -> [B, T, C]; the same as chunking, permuting the heads to [B, H, T, hd] and scaled_dot_product_attention, without copies (the gradient is one packed [B, T, 3C])" },
  { NULL, NULL, NULL, NULL }
};

/* The elementwise and reduction tables are generated from the *_defs lists
** once, by nbT_register_ops at start-up; like every builtin table they are
** read-only once the first VM exists (nbapi.h), so VMs share them. */
static nb_Builtin unary_builtins[NUNARY + 1];
static nb_Builtin red_builtins[sizeof red_defs / sizeof red_defs[0] + 1];
static char unary_docs[NUNARY][96], red_docs[sizeof red_defs / sizeof red_defs[0]][320];

void nbT_register_ops(void) {
  for (int i = 0; i < NUNARY; i++) {
    snprintf(unary_docs[i], sizeof unary_docs[i], "%s(x): elementwise %s of a tensor or number", unary_defs[i].name, unary_defs[i].name);
    unary_builtins[i] = (nb_Builtin){ unary_defs[i].name, unary_fns[i], "x", unary_docs[i] };
  }
  int nr = (int)(sizeof red_defs / sizeof red_defs[0]);
  for (int i = 0; i < nr; i++) {
    bool minmax = red_defs[i].op == NT_OP_MAX || red_defs[i].op == NT_OP_MIN;
    if (minmax)
      snprintf(red_docs[i], sizeof red_docs[i], "%s(x, other=nil, keepdims=false, axis=nil): over axes (all when nil; a number or list in other's place is the axis, axis= always is); "
               "with a tensor other, the elementwise %s (torch.%s(a, other)); also works on a list and on numbers", red_defs[i].name,
               red_defs[i].op == NT_OP_MAX ? "maximum" : "minimum", red_defs[i].name);
    else
      snprintf(red_docs[i], sizeof red_docs[i], "%s(x, axis=nil, keepdims=false): %s over axes (all when nil); also works on a list", red_defs[i].name, red_defs[i].name);
    red_builtins[i] = (nb_Builtin){ red_defs[i].name, red_fns[i], minmax ? "x, other=nil, keepdims=false, axis=nil" : "x, axis=nil, keepdims=false", red_docs[i] };
  }
  nbC_register(unary_builtins);
  nbC_register(red_builtins);
  nbC_register(ops_builtins);
  nbC_prepare(cuda_members);
  nbC_prepare(cpu_members);
}
