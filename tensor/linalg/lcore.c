/*
** linalg/lcore.c — what the linalg front ends share: op registration,
** argument checks, the column-major copies the kernels work on, running a
** kernel (through the host when a device has none), info errors naming the
** batch element, and small differentiable helpers for the backward formulas.
*/
#include "linternal.h"
#include <pthread.h>

lin_op_ids lin_ops;

static void register_all(void) {
  nt_init();
  lin_ops.getrf = nt_op_register("linalg_getrf");
  lin_ops.getrs = nt_op_register("linalg_getrs");
  lin_ops.potrf = nt_op_register("linalg_potrf");
  lin_ops.trtrs = nt_op_register("linalg_trtrs");
  lin_ops.qr = nt_op_register("linalg_qr");
  lin_ops.syevd = nt_op_register("linalg_syevd");
  lin_ops.gesdd = nt_op_register("linalg_gesdd");
  lin_register_cpu();
  lin_ops.geev = nt_op_register("linalg_geev");
  lin_ops.eig_backward = nt_op_register("linalg_eig_backward");
  lin_register_eig_cpu();
}

void lin_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_all);
}

int lin_check_float(const char *op, const nt_Tensor *a) {
  if (a->dtype != NT_F32 && a->dtype != NT_F64)
    NT_FAIL("%s: expected an f32 or f64 tensor, got %s", op, nt_dtype_name(a->dtype));
  return 0;
}

int lin_check_matrix(const char *op, const nt_Tensor *a, bool square) {
  lin_init();
  if (lin_check_float(op, a)) return -1;
  if (a->ndim < 2) NT_FAIL("%s: expected a matrix or a batch of matrices [..., m, n], got a %dD tensor", op, a->ndim);
  if (square && a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
    char b[96];
    NT_FAIL("%s: expected square matrices, got shape %s", op, nt_shape_str(a->shape, a->ndim, b, sizeof b));
  }
  /* LAPACK's sizes are 32-bit */
  if (a->shape[a->ndim - 1] > INT32_MAX / 2 || a->shape[a->ndim - 2] > INT32_MAX / 2 ||
      a->shape[a->ndim - 1] * a->shape[a->ndim - 2] > INT32_MAX)
    NT_FAIL("%s: a %lld x %lld matrix is larger than LAPACK's 32-bit sizes allow", op,
            (long long)a->shape[a->ndim - 2], (long long)a->shape[a->ndim - 1]);
  return 0;
}

int64_t lin_batch(const nt_Tensor *a) {
  int64_t b = 1;
  for (int i = 0; i < a->ndim - 2; i++) b *= a->shape[i];
  return b;
}

nt_Tensor *lin_colmajor(nt_Tensor *a) {
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *t = nt_transpose(a, -1, -2), *c = t ? nt_clone(t) : NULL;   /* clone: never the caller's memory */
  nt_release(t);
  nt_set_grad_enabled(prev);
  return c;
}

nt_Tensor *lin_rowmajor(nt_Tensor *buf) {
  nt_Tensor *t = nt_transpose(buf, -1, -2), *c = t ? nt_contiguous(t) : NULL;
  nt_release(t);
  return c;
}

nt_Tensor *lin_info_tensor(const int64_t *batch, int nb, nt_Device dev) {
  return nt_zeros(batch, nb, NT_I32, dev);
}

int lin_run(int op, nt_Device dev, nt_KernelArgs *a) {
  a->op = op;
  if (dev == NT_CPU || nt_kernel_table[op][dev]) return nt_dispatch(op, dev, a);
  /* no device kernel: the buffers through the host (every one: the kernel's
  ** outputs are among them), LAPACK, and back */
  nt_Tensor *h[5] = {0}, *d[5] = { a->out, a->in[0], a->in[1], a->in[2], a->in[3] };
  nt_KernelArgs ha = *a;
  int rc = -1;
  for (int i = 0; i < 5; i++)
    if (d[i] && !(h[i] = nt_to_device(d[i], NT_CPU))) goto out;
  ha.out = h[0];
  for (int i = 0; i < 4; i++) ha.in[i] = h[i + 1];
  if (nt_dispatch(op, NT_CPU, &ha)) goto out;
  for (int i = 0; i < 5; i++) {
    nt_Tensor *back = d[i] ? nt_to_device(h[i], dev) : NULL;
    int bad = d[i] && (!back || nt_copy_(d[i], back));
    nt_release(back);
    if (bad) goto out;
  }
  rc = 0;
out:
  for (int i = 0; i < 5; i++) nt_release(h[i]);
  return rc;
}

int lin_check_info(const char *op, nt_Tensor *info, const int64_t *batch, int nb, const char *what) {
  if (info->numel == 0) return 0;
  nt_Tensor *h = info->device == NT_CPU ? nt_retain(info) : nt_to_device(info, NT_CPU);
  if (!h) return -1;
  const int32_t *v = (const int32_t *)nt_base(h);
  int64_t bad = -1;
  for (int64_t i = 0; i < h->numel && bad < 0; i++)
    if (v[i] != 0) bad = i;
  int rc = 0;
  if (bad >= 0) {
    char msg[256], where[160] = "";
    snprintf(msg, sizeof msg, what, (int)v[bad]);
    if (nb > 0) {
      /* the batch element's index, row-major over the batch shape */
      int64_t idx[NT_MAXDIM], r = bad;
      for (int i = nb - 1; i >= 0; i--) { idx[i] = batch[i] ? r % batch[i] : 0; r = batch[i] ? r / batch[i] : 0; }
      int p = snprintf(where, sizeof where, " (batch element [");
      for (int i = 0; i < nb && p < (int)sizeof where - 24; i++) p += snprintf(where + p, sizeof where - (size_t)p, "%s%lld", i ? ", " : "", (long long)idx[i]);
      snprintf(where + p, sizeof where - (size_t)p, "])");
    }
    nt_error_set("%s: %s%s", op, msg, where);
    rc = -1;
  }
  nt_release(h);
  return rc;
}

nt_Tensor *lin_mT(nt_Tensor *a) { return a ? nt_transpose(a, -1, -2) : NULL; }
nt_Tensor *lin_mm(nt_Tensor *a, nt_Tensor *b) { return a && b ? nt_matmul(a, b) : NULL; }

nt_Tensor *lin_eye_like(nt_Tensor *a, int64_t n) { return nt_eye_on(n, n, a->dtype, a->device); }

nt_Tensor *lin_diag(nt_Tensor *a) {
  if (!a) return NULL;
  nt_Tensor *e = lin_eye_like(a, a->shape[a->ndim - 1]), *p = e ? nt_mul(a, e) : NULL;
  nt_Tensor *d = p ? nt_sum(p, (int[]){ -1 }, 1, false) : NULL;
  nt_release(e); nt_release(p);
  return d;
}

nt_Tensor *lin_diag_embed(nt_Tensor *v) {
  if (!v) return NULL;
  nt_Tensor *e = lin_eye_like(v, v->shape[v->ndim - 1]), *u = e ? nt_unsqueeze(v, -1) : NULL;
  nt_Tensor *d = u ? nt_mul(u, e) : NULL;
  nt_release(e); nt_release(u);
  return d;
}

nt_Tensor *lin_finish(nt_Tensor *out, const char *name, nt_BackwardFn fn, nt_Tensor *a, int nsave, nt_Tensor *const *save) {
  if (!out || !nt_needs_grad(1, &a)) return out;
  nt_Node *n = nt_record(out, name, fn, 1, &a);
  if (!n) { nt_release(out); return NULL; }
  for (int i = 0; i < nsave; i++)
    if (nt_node_save(n, save[i]) < 0) { nt_release(out); return NULL; }
  return out;
}

#define BIN_(name, f) \
  nt_Tensor *name(nt_Tensor *a, nt_Tensor *b) { nt_Tensor *r = a && b ? f(a, b) : NULL; nt_release(a); nt_release(b); return r; }
BIN_(lin_add_, nt_add)
BIN_(lin_sub_, nt_sub)
BIN_(lin_mul_, nt_mul)
BIN_(lin_mm_, nt_matmul)
BIN_(lin_div_, nt_div)
