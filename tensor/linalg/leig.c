/*
** linalg/leig.c — linalg.eig / eigvals of real (non-symmetric) matrices:
** complex results (c64 for f32, c128 for f64) from geev, and torch's
** linalg_eig_backward run as a kernel with complex arithmetic (the kernels
** and their buffers: leigkern.c, linternal.h).  One node per output
** (linalg.h says why); eigvals' node keeps the eigenvectors its gradient
** needs.
**
** A device without the geev kernel is an error naming the op, never a
** silent trip through the host (lin_run would take one); the backward on a
** device without its kernel (CUDA) is the same math composed from that
** device's own ops (leigcomp.c), with the same info codes and errors.
*/
#include "linternal.h"
#include "tensor/complex.h"
#include <math.h>

static int eig_kernel_on(const char *op, const char *what, int kop, nt_Device dev) {
  if (dev == NT_CPU || nt_kernel_table[kop][dev]) return 0;
  NT_FAIL("%s: the %s is not available on %s (this device's module has no %s kernel): move the tensor to the CPU",
          op, what, nt_device_name(dev), nt_op_name(kop));
}

/* torch's check: sum(A * 0) is NaN exactly when A has an inf or a NaN */
static int eig_check_finite(const char *op, nt_Tensor *a) {
  nt_Tensor *z = nt_binary_scalar_ex(NT_OP_MUL, a, 0, NT_SCALAR_FLOAT), *s = z ? nt_sum(z, NULL, 0, false) : NULL;
  double v = 0;
  int rc = s && !nt_item(s, &v) ? 0 : -1;
  nt_release(z); nt_release(s);
  if (!rc && isnan(v)) NT_FAIL("%s: input tensor should not contain infs or NaNs", op);
  return rc;
}

/* a contiguous real view [..., 2] of z as complex_dt (a real z: imag 0) */
static nt_Tensor *eig_pairs(nt_Tensor *z, nt_DType complex_dt) {
  nt_Tensor *c = z->dtype == complex_dt ? nt_retain(z) : nt_complex_to_dtype(z, complex_dt);
  nt_Tensor *r = c ? nt_view_as_real(c) : NULL, *k = r ? nt_contiguous(r) : NULL;
  nt_release(c); nt_release(r);
  return k;
}

static const char *eig_back_what(int code) {
  switch (code) {
  case 1: return "the eigenvectors are specified up to multiplication by e^{i phi}, and the loss depends on that phase, "
                 "so its gradient is ill-defined (use a function of the eigenvectors that is invariant to each one's phase, e.g. of abs(V))";
  case 2: return "the gradient through the eigenvectors is undefined: the matrix has repeated eigenvalues (only the eigenvalues' gradient is defined there)";
  default: return "the eigenvector matrix is singular (the matrix is defective): the gradient is undefined";
  }
}

/* gA from one output's gradient: vecs 0: g is gL, 1: g is gV */
static int eig_backward_part(nt_Node *nd, nt_Tensor *g, int vecs, nt_Tensor **gin) {
  const char *op = "linalg.eig (backward)";
  nt_Tensor *l = nd->saved[0], *v = nd->saved[1];
  int nb = l->ndim - 1;
  int64_t n = l->shape[nb], sa[NT_MAXDIM];
  memcpy(sa, l->shape, sizeof(int64_t) * (size_t)nb);
  sa[nb] = sa[nb + 1] = n;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *lr = NULL, *vr = NULL, *gr = NULL, *ga = NULL, *info = NULL;
  int rc;
  if (l->device != NT_CPU && !nt_kernel_table[lin_ops.eig_backward][l->device] && l->numel) {
    rc = lin_eig_backward_composed(l, v, g, vecs, &ga, &info);
  } else {
    lr = eig_pairs(l, l->dtype), vr = lr ? eig_pairs(v, l->dtype) : NULL, gr = vr ? eig_pairs(g, l->dtype) : NULL;
    ga = gr ? nt_empty(sa, nb + 2, nt_complex_part_dtype(l->dtype), l->device) : NULL;
    info = ga ? lin_info_tensor(l->shape, nb, l->device) : NULL;
    nt_KernelArgs k = { .out = ga, .in = { lr, vr, gr, info }, .nin = 4, .iarg = { vecs }, .niarg = 1 };
    rc = info ? lin_run(lin_ops.eig_backward, l->device, &k) : -1;
  }
  if (!rc && info->numel) {
    /* the first nonzero code names the message; lin_check_info finds that element again */
    nt_Tensor *h = nt_to_device(info, NT_CPU);
    const int32_t *p = h ? (const int32_t *)nt_base(h) : NULL;
    int code = 0;
    for (int64_t i = 0; p && i < h->numel && !code; i++) code = p[i];
    rc = !h ? -1 : lin_check_info(op, info, l->shape, nb, eig_back_what(code));
    nt_release(h);
  }
  nt_set_grad_enabled(prev);
  nt_release(lr); nt_release(vr); nt_release(gr); nt_release(info);
  if (rc) { nt_release(ga); return -1; }
  gin[0] = ga;
  return 0;
}
static int eigl_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return eig_backward_part(n, g, 0, gin); }
static int eigv_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) { return eig_backward_part(n, g, 1, gin); }

int nt_linalg_eig(nt_Tensor *a, nt_Tensor **w_out, nt_Tensor **v_out) {
  const char *op = v_out ? "linalg.eig" : "linalg.eigvals";
  *w_out = NULL;
  if (v_out) *v_out = NULL;
  if (lin_check_matrix(op, a, true) || eig_kernel_on(op, "forward", lin_ops.geev, a->device)) return -1;
  bool grad = nt_needs_grad(1, &a), vecs = v_out || grad;
  int nb = a->ndim - 2;
  int64_t n = a->shape[nb + 1], sw[NT_MAXDIM + 1], sv[NT_MAXDIM + 1];
  if (a->ndim + 1 > NT_MAXDIM) NT_FAIL("%s: a %dD input leaves no room for the (re, im) axis (at most %dD)", op, a->ndim, NT_MAXDIM - 1);
  memcpy(sw, a->shape, sizeof(int64_t) * (size_t)nb); memcpy(sv, sw, sizeof(int64_t) * (size_t)nb);
  sw[nb] = n; sw[nb + 1] = 2;
  sv[nb] = n; sv[nb + 1] = n; sv[nb + 2] = 2;   /* column-major: [..., vector, entry, (re, im)] */
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *buf = NULL, *wb = NULL, *vb = NULL, *info = NULL, *w = NULL, *v = NULL, *vt = NULL, *vc = NULL;
  int rc = -1;
  if (eig_check_finite(op, a) || !(buf = lin_colmajor(a)) || !(wb = nt_empty(sw, nb + 2, a->dtype, a->device)) ||
      (vecs && !(vb = nt_empty(sv, nb + 3, a->dtype, a->device))) || !(info = lin_info_tensor(a->shape, nb, a->device)))
    goto out;
  nt_KernelArgs k = { .out = wb, .in = { buf, vb, info }, .nin = 3 };
  if (lin_run(lin_ops.geev, a->device, &k) ||
      lin_check_info(op, info, a->shape, nb, "the eigenvalue algorithm (QR) did not converge (info %d)"))
    goto out;
  if (!(w = nt_view_as_complex(wb))) goto out;
  if (vecs && (!(vt = nt_transpose(vb, -2, -3)) || !(vc = nt_contiguous(vt)) || !(v = nt_view_as_complex(vc)))) goto out;
  rc = 0;
out:
  nt_set_grad_enabled(prev);
  nt_release(buf); nt_release(wb); nt_release(vb); nt_release(info); nt_release(vt); nt_release(vc);
  if (!rc && grad) {
    nt_Tensor *outs[2] = { w, v_out ? v : NULL };
    nt_BackwardFn fns[2] = { eigl_backward, eigv_backward };
    for (int i = 0; i < 2 && !rc; i++) {
      if (!outs[i]) continue;
      nt_Node *nd = nt_record(outs[i], i ? "LinalgEigBackward(V)" : "LinalgEigBackward(L)", fns[i], 1, &a);
      if (!nd || nt_node_save(nd, w) < 0 || nt_node_save(nd, v) < 0) rc = -1;
    }
  }
  if (rc || !v_out) nt_release(v);
  if (rc) { nt_release(w); return -1; }
  *w_out = w;
  if (v_out) *v_out = v;
  return 0;
}
