/*
** tcpu_misc.c — CPU kernels for arange/linspace fills and tril/triu.
*/
#include "tinternal.h"
#include "trange.h"

/* out[i] = s[0] + i * s[1], floats with torch's bits (trange.h) */
static float round_bf16(float x) { return nt_bf16_to_f32(nt_f32_to_bf16(x)); }
static float round_f16(float x) { return nt_f16_to_f32(nt_f32_to_f16(x)); }
NT_ARANGE_LOWP(arange_bf16, round_bf16)
NT_ARANGE_LOWP(arange_f16, round_f16)
static int k_arange(const nt_KernelArgs *a) {
  nt_Tensor *t = a->out;
  int64_t n = t->numel;
  size_t es = nt_dtype_size(t->dtype);
  char *p = nt_base(t);
  double s = a->s[0], d = a->s[1];
  switch (t->dtype) {
    case NT_F32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = nt_arange_f32(i, n, s, d); break;
    case NT_F64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = nt_arange_f64(i, n, s, d); break;
    case NT_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nt_f32_to_bf16(arange_bf16(i, n, s, d)); break;
    case NT_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nt_f32_to_f16(arange_f16(i, n, s, d)); break;
    case NT_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = (int64_t)(s + (double)i * d); break;
    default: for (int64_t i = 0; i < n; i++) nt_store_from_double(p + i * (int64_t)es, t->dtype, s + (double)i * d);
  }
  return 0;
}

/* linspace(s[0], s[1], n = out->numel) as torch makes it (trange.h) */
NT_LINSPACE_LOWP(linspace_bf16, round_bf16)
NT_LINSPACE_LOWP(linspace_f16, round_f16)
static int k_linspace(const nt_KernelArgs *a) {
  nt_Tensor *t = a->out;
  int64_t n = t->numel, es = (int64_t)nt_dtype_size(t->dtype);
  char *p = nt_base(t);
  double s = a->s[0], e = a->s[1];
  switch (t->dtype) {
    case NT_F32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = nt_linspace_f32(i, n, s, e); break;
    case NT_F64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = nt_linspace_f64(i, n, s, e); break;
    case NT_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nt_f32_to_bf16(linspace_bf16(i, n, s, e)); break;
    case NT_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nt_f32_to_f16(linspace_f16(i, n, s, e)); break;
    case NT_BOOL: for (int64_t i = 0; i < n; i++) p[i] = nt_linspace_f64(i, n, s, e) != 0; break;
    default: for (int64_t i = 0; i < n; i++) nt_store_from_double(p + i * es, t->dtype, nt_linspace_int(i, n, s, e, es));
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
  nt_register_kernel(nt_op_register("linspace"), NT_CPU, k_linspace);
  extern void nt_cpu_register_random(void);
  nt_cpu_register_random();
}
