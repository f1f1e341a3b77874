/*
** tcpu_misc.c — CPU kernels for arange/linspace fills and tril/triu.
*/
#include "tinternal.h"

static int k_arange(const nt_KernelArgs *a) {
  nt_Tensor *t = a->out;
  size_t es = nt_dtype_size(t->dtype);
  char *p = nt_base(t);
  double s = a->s[0], d = a->s[1];
  switch (t->dtype) {
    case NT_F32: for (int64_t i = 0; i < t->numel; i++) ((float *)p)[i] = (float)(s + (double)i * d); break;
    case NT_F64: for (int64_t i = 0; i < t->numel; i++) ((double *)p)[i] = s + (double)i * d; break;
    case NT_I64: for (int64_t i = 0; i < t->numel; i++) ((int64_t *)p)[i] = (int64_t)(s + (double)i * d); break;
    default: for (int64_t i = 0; i < t->numel; i++) nt_store_from_double(p + i * (int64_t)es, t->dtype, s + (double)i * d);
  }
  return 0;
}

/* out = in masked to the lower (upper) triangle of the last two axes:
** keep (r, c) when c - r <= k (tril) or c - r >= k (triu). */
static int k_tril(const nt_KernelArgs *a) {
  nt_Tensor *o = a->out, *x = a->in[0];
  int nd = o->ndim;
  int64_t R = o->shape[nd - 2], C = o->shape[nd - 1], k = a->iarg[0];
  bool upper = a->iarg[1];
  size_t es = nt_dtype_size(o->dtype);
  /* in is contiguous (front end), so matrices are consecutive blocks */
  int64_t nmat = (R * C != 0) ? o->numel / (R * C) : 0;
  char *po = nt_base(o), *px = nt_base(x);
  for (int64_t m = 0; m < nmat; m++)
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < C; c++) {
        int64_t off = ((m * R + r) * C + c) * (int64_t)es;
        bool keep = upper ? c - r >= k : c - r <= k;
        if (keep) memcpy(po + off, px + off, es); else memset(po + off, 0, es);
      }
  return 0;
}

void nt_cpu_register_misc(void) {
  nt_register_kernel(NT_OP_ARANGE, NT_CPU, k_arange);
  nt_register_kernel(NT_OP_TRIL, NT_CPU, k_tril);
  extern void nt_cpu_register_random(void);
  nt_cpu_register_random();
}
