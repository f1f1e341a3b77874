/*
** adaptivemax.c — F.adaptive_max_pool2d with return_indices: a forward
** kernel on each device (CPU here, CUDA in cuda/layers.cu); the backward is
** composed (scatter_add of the gradient at the saved argmax positions), so it
** runs on both devices and is itself differentiable.
**
** x contiguous [P, H, W] (P = N*C); output window (oh, ow) covers rows
** [floor(oh H / Ho), ceil((oh+1) H / Ho)) and the same for columns (torch's
** adaptive windows).  y [P, Ho, Wo] is the window's max (NaN wins, as torch's),
** idx [P, Ho, Wo] i64 the flat position h*W + w of the first maximum.
**
** Kernel arguments (both devices): "adaptive_max_pool2d" out y; in = {x, idx};
** iarg = {P, H, W, Ho, Wo}.
*/
#include <pthread.h>
#include "nninternal.h"
#include "layers.h"

static int op_amp = -1;

#define AMP_T(T)                                                                                  \
  static void amp_##T(const T *x, T *y, int64_t *ix, int64_t P, int64_t H, int64_t W, int64_t Ho, int64_t Wo) { \
    _Pragma("omp parallel for if (P * H * W > NT_OMP_THRESHOLD)")                                  \
    for (int64_t p = 0; p < P; p++)                                                               \
      for (int64_t oh = 0; oh < Ho; oh++) {                                                       \
        int64_t h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho;                              \
        for (int64_t ow = 0; ow < Wo; ow++) {                                                     \
          int64_t w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo, best = h0 * W + w0;        \
          T m = x[p * H * W + best];                                                              \
          for (int64_t h = h0; h < h1; h++)                                                       \
            for (int64_t w = w0; w < w1; w++) {                                                   \
              T v = x[p * H * W + h * W + w];                                                     \
              if (m == m && (v > m || v != v)) { m = v; best = h * W + w; }                       \
            }                                                                                     \
          y[(p * Ho + oh) * Wo + ow] = m;                                                         \
          ix[(p * Ho + oh) * Wo + ow] = best;                                                     \
        }                                                                                         \
      }                                                                                           \
  }
AMP_T(float)
AMP_T(double)

static int k_amp(const nt_KernelArgs *a) {
  int64_t P = a->iarg[0], H = a->iarg[1], W = a->iarg[2], Ho = a->iarg[3], Wo = a->iarg[4];
  int64_t *ix = (int64_t *)nt_base(a->in[1]);
  if (a->out->dtype == NT_F32) amp_float((const float *)nt_base(a->in[0]), (float *)nt_base(a->out), ix, P, H, W, Ho, Wo);
  else amp_double((const double *)nt_base(a->in[0]), (double *)nt_base(a->out), ix, P, H, W, Ho, Wo);
  return 0;
}

static void register_amp(void) {
  nt_nn_init();
  op_amp = nt_op_register("adaptive_max_pool2d");
  nt_register_kernel(op_amp, NT_CPU, k_amp);
}

/* node: in = {x as [P, H*W]}; saved = {idx [P, Ho*Wo]}: dx = scatter_add(0, 1, idx, g) */
static int amp_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *x = nd->in[0], *idx = nd->saved[0];
  nt_Tensor *gc = nt_to_dtype(gout, x->dtype);
  nt_Tensor *g = gc ? nt_reshape(gc, idx->shape, idx->ndim) : NULL;
  nt_Tensor *z = g ? nt_zeros(x->shape, x->ndim, x->dtype, x->device) : NULL;
  gin[0] = z ? nt_scatter_add(z, 1, idx, g) : NULL;
  nt_release(gc); nt_release(g); nt_release(z);
  return gin[0] ? 0 : -1;
}

int nt_adaptive_max_pool2d(nt_Tensor *x0, const int64_t *out, nt_Tensor **y_out, nt_Tensor **idx_out) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_amp);
  const char *op = "adaptive_max_pool2d";
  char s[128];
  *y_out = NULL;
  if (idx_out) *idx_out = NULL;
  if (x0->ndim != 3 && x0->ndim != 4) NT_FAIL("%s: expected a 3D or 4D input, got %s", op, nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  int64_t H = x0->shape[x0->ndim - 2], W = x0->shape[x0->ndim - 1], Ho = out[0], Wo = out[1], P = 1;
  for (int i = 0; i < x0->ndim - 2; i++) P *= x0->shape[i];
  if (H < 1 || W < 1) NT_FAIL("%s: the spatial axes of input %s must not be empty", op, nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (Ho < 1 || Wo < 1 || Ho > ((int64_t)1 << 26) || Wo > ((int64_t)1 << 26))
    NT_FAIL("%s: output_size must be positive (and not huge), got (%lld, %lld)", op, (long long)Ho, (long long)Wo);
  if (!nt_kernel_table[op_amp][x0->device]) NT_FAIL("%s: no kernel on %s", op, nt_device_name(x0->device));
  nt_Tensor *xf = nn_compute_float(op, x0);
  nt_Tensor *xc = xf ? nt_contiguous(xf) : NULL;
  nt_release(xf);
  nt_Tensor *x = xc ? nt_reshape(xc, (int64_t[]){P, H * W}, 2) : NULL;
  nt_release(xc);
  if (!x) return -1;
  nt_Tensor *y = nt_empty((int64_t[]){P, Ho * Wo}, 2, x->dtype, x->device);
  nt_Tensor *ix = nt_empty((int64_t[]){P, Ho * Wo}, 2, NT_I64, x->device);
  nt_KernelArgs ka = {.op = op_amp, .out = y, .in = {x, ix}, .nin = 2, .iarg = {P, H, W, Ho, Wo}, .niarg = 5};
  if (!y || !ix || (P && nt_dispatch(ka.op, x->device, &ka))) goto fail;
  nt_Node *nd;
  y = nn_finish(y, "AdaptiveMaxPool2DBackward", amp_backward, 1, &x, &nd);
  if (!y || (nd && nt_node_save(nd, ix) < 0)) goto fail;
  int64_t shape[NT_MAXDIM];
  memcpy(shape, x0->shape, sizeof(int64_t) * (size_t)x0->ndim);
  shape[x0->ndim - 2] = Ho;
  shape[x0->ndim - 1] = Wo;
  nt_Tensor *yr = nt_reshape(y, shape, x0->ndim), *ir = nt_reshape(ix, shape, x0->ndim);
  nt_release(y); nt_release(ix); nt_release(x);
  *y_out = nn_cast_back(yr, x0->dtype);
  if (!*y_out || !ir) { nt_release(*y_out); nt_release(ir); *y_out = NULL; return -1; }
  if (idx_out) *idx_out = ir;
  else nt_release(ir);
  return 0;
fail:
  nt_release(x); nt_release(y); nt_release(ix);
  return -1;
}
