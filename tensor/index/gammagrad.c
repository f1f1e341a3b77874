/*
** index/gammagrad.c — the reparameterised Gamma and Dirichlet samplers:
** torch's _standard_gamma_grad and _dirichlet_grad as one registered op
** ("gamma_grad", a CPU kernel here and a CUDA one in cuda/distributions.cu,
** both over the shared element math of index/gammamath.h), and the autograd
** nodes that make standard_gamma and sample_dirichlet differentiable in
** their concentration, as torch's _standard_gamma / _sample_dirichlet are:
**   x = standard_gamma(a):  da = g * dx/da(a, x)                          (torch's formula)
**   x = sample_dirichlet(a) [..., K]: x_i = G_i / sum G,  with
**       t = sum_K a,  d_i = dirichlet_grad(x_i, a_i, t),
**       da_i = d_i * (g_i - sum_j x_j g_j)                                 (torch's _dirichlet_backward)
** The gradients are the implicit ones (samples held at fixed quantiles), not
** a differentiation through the rejection loop, which has none.
** The same op computes the regularised incomplete gamma functions igamma =
** P(a, x) and igammac = Q(a, x) (torch.special.gammainc / gammaincc; the
** Gamma distribution's cdf), differentiable in x as torch's.
** Op layout: out [n] f64; in = {a, b[, c]} contiguous f64 of out's shape;
** iarg[0] = GG_GAMMA (in = {alpha, x}), GG_DIRICHLET (in = {x, alpha, total}),
** GG_IGAMMA or GG_IGAMMAC (in = {a, x}).
*/
#include "ixinternal.h"
#include "gammamath.h"
#include <pthread.h>

enum { GG_GAMMA = 0, GG_DIRICHLET = 1, GG_IGAMMA = 2, GG_IGAMMAC = 3 };   /* nt_gm_eval's kinds */
static int op_gamma_grad = -1;

static int k_gamma_grad(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  double *o = (double *)nt_base(a->out);
  const double *p = (const double *)nt_base(a->in[0]), *q = (const double *)nt_base(a->in[1]);
  const double *r = a->nin > 2 ? (const double *)nt_base(a->in[2]) : NULL;
  int kind = (int)a->iarg[0];
  const int64_t step = NT_CHUNK / 64;   /* an element is up to thousands of steps (igamma): poll often */
  for (int64_t s = 0; s < n; s += step) {
    if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    int64_t e = n - s < step ? n : s + step;
    for (int64_t i = s; i < e; i++) o[i] = nt_gm_eval(kind, p[i], q[i], r ? r[i] : 0);
  }
  return 0;
}

static void register_once(void) {
  nt_init();
  op_gamma_grad = nt_op_register("gamma_grad");
  nt_register_kernel(op_gamma_grad, NT_CPU, k_gamma_grad);
}

/* the op over n inputs broadcast together, computed in f64, cast to their float result type */
static nt_Tensor *gamma_grad(const char *name, int kind, nt_Tensor *const *in, int n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_once);
  int64_t shape[NT_MAXDIM];
  int nd = 0;
  nt_DType dt = in[0]->dtype;
  for (int k = 0; k < n; k++) {
    if (in[k]->device != in[0]->device) NT_FAIL_NULL("%s: inputs on different devices", name);
    if (!nt_dtype_is_float(in[k]->dtype)) NT_FAIL_NULL("%s: inputs must be floating tensors, got %s", name, nt_dtype_name(in[k]->dtype));
    if (!k) { nd = in[0]->ndim; memcpy(shape, in[0]->shape, sizeof(int64_t) * (size_t)nd); continue; }
    int64_t prev[NT_MAXDIM];   /* nt_broadcast_shapes' output must not alias its input */
    memcpy(prev, shape, sizeof(int64_t) * (size_t)nd);
    if (nt_broadcast_shapes(name, prev, nd, in[k]->shape, in[k]->ndim, shape, &nd)) return NULL;
    dt = nt_promote(dt, in[k]->dtype);
  }
  nt_KernelArgs ka = {.op = op_gamma_grad, .nin = n, .iarg = {kind}, .niarg = 1};
  int rc = 0;
  for (int k = 0; k < n && !rc; k++) {
    nt_Tensor *d = nt_to_dtype(in[k], NT_F64), *b = d ? nt_broadcast_to(d, shape, nd) : NULL;
    ka.in[k] = b ? nt_contiguous(b) : NULL;
    nt_release(d); nt_release(b);
    rc = ka.in[k] ? 0 : -1;
  }
  nt_Tensor *out = rc ? NULL : nt_empty(shape, nd, NT_F64, in[0]->device);
  ka.out = out;
  if (out && out->numel && nt_dispatch(op_gamma_grad, out->device, &ka)) { nt_release(out); out = NULL; }
  for (int k = 0; k < n; k++) nt_release(ka.in[k]);
  return out ? X_dtype(out, dt) : NULL;
}

nt_Tensor *nt_standard_gamma_grad(nt_Tensor *alpha, nt_Tensor *x) {
  bool g = nt_set_grad_enabled(false);   /* torch: not differentiable itself */
  nt_Tensor *r = gamma_grad("standard_gamma_grad", GG_GAMMA, (nt_Tensor *[]){ alpha, x }, 2);
  nt_set_grad_enabled(g);
  return r;
}

nt_Tensor *nt_dirichlet_grad(nt_Tensor *x, nt_Tensor *alpha, nt_Tensor *total) {
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *r = gamma_grad("dirichlet_grad", GG_DIRICHLET, (nt_Tensor *[]){ x, alpha, total }, 3);
  nt_set_grad_enabled(g);
  return r;
}

/* ---- igamma / igammac: d P / d x = e^-x x^(a-1) / Gamma(a) = -d Q / d x (torch's formula, NaN
** where it is: x = 0 with a <= 1); d / d a is an error, as torch ("not implemented") ---- */
static int igamma_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *a = nd->in[0], *x = nd->in[1];
  if (nd->edge[0].grad) NT_FAIL("%s: the derivative in a is not implemented (as torch); detach a", nd->iarg[0] == GG_IGAMMA ? "igamma" : "igammac");
  /* exp((a - 1) log x - x - lgamma(a)) */
  nt_Tensor *e = X_sub(X_sub(X_mul(nt_binary_scalar_ex(NT_OP_SUB, a, 1, NT_SCALAR_FLOAT), nt_log(x)), nt_retain(x)), nt_lgamma(a));
  nt_Tensor *d = X_un(NT_OP_EXP, e);
  if (d && nd->iarg[0] == GG_IGAMMAC) d = X_un(NT_OP_NEG, d);
  gin[0] = NULL;
  gin[1] = X_mul(d, nt_retain(gout));
  return gin[1] ? 0 : -1;
}

static nt_Tensor *igamma_op(const char *name, int kind, nt_Tensor *a, nt_Tensor *x) {
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *r = gamma_grad(name, kind, (nt_Tensor *[]){ a, x }, 2);
  nt_set_grad_enabled(g);
  nt_Tensor *in[2] = { a, x };
  if (!r || !nt_needs_grad(2, in)) return r;
  nt_Node *nd = nt_record(r, kind == GG_IGAMMA ? "IgammaBackward" : "IgammacBackward", igamma_backward, 2, in);
  if (!nd) { nt_release(r); return NULL; }
  nd->iarg[0] = kind; nd->niarg = 1;
  return r;
}
nt_Tensor *nt_igamma(nt_Tensor *a, nt_Tensor *x) { return igamma_op("igamma", GG_IGAMMA, a, x); }
nt_Tensor *nt_igammac(nt_Tensor *a, nt_Tensor *x) { return igamma_op("igammac", GG_IGAMMAC, a, x); }

/* ---- autograd: in[0] alpha, saved[0] the sample -------------------------------------------- */
static int standard_gamma_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *d = nt_standard_gamma_grad(nd->in[0], nd->saved[0]);
  gin[0] = d ? X_mul(d, nt_retain(gout)) : NULL;
  return gin[0] ? 0 : -1;
}

static int dirichlet_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *a = nd->in[0], *x = nd->saved[0];
  int last = -1;
  nt_Tensor *tot = nt_sum(a, &last, 1, true);
  nt_Tensor *d = tot ? nt_dirichlet_grad(x, a, tot) : NULL;
  nt_Tensor *xg = X_sum(nt_mul(x, gout), -1, true);
  gin[0] = X_mul(d, X_sub(nt_retain(gout), xg));
  nt_release(tot);
  return gin[0] ? 0 : -1;
}

/* y (a sample drawn with grad off) gets a node to alpha when alpha needs a gradient */
static nt_Tensor *attach(nt_Tensor *y, nt_Tensor *alpha, const char *name, nt_BackwardFn fn) {
  if (!y || !nt_needs_grad(1, &alpha)) return y;
  nt_Node *nd = nt_record(y, name, fn, 1, &alpha);
  if (!nd || nt_node_save(nd, y) < 0) { nt_release(y); return NULL; }
  return y;
}

nt_Tensor *ix_gamma_attach_grad(nt_Tensor *y, nt_Tensor *alpha) {
  return attach(y, alpha, "StandardGammaBackward", standard_gamma_backward);
}

nt_Tensor *nt_sample_dirichlet(nt_Tensor *alpha) {
  if (alpha->ndim < 1) NT_FAIL_NULL("sample_dirichlet: concentration must have at least one dimension (the last is the event)");
  bool g = nt_set_grad_enabled(false);
  nt_Tensor *ad = nt_detach(alpha);
  nt_Tensor *gm = ad ? nt_sample_gamma(ad) : NULL;
  nt_release(ad);
  nt_Tensor *s = gm ? X_sum(nt_retain(gm), -1, true) : NULL;   /* X_div releases gm either way */
  nt_Tensor *y = X_div(gm, s);
  nt_set_grad_enabled(g);
  return attach(y, alpha, "DirichletBackward", dirichlet_backward);
}
