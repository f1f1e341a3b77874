/*
** tcpu_reduce.c — CPU reduction kernels: sum prod max min any all argmax argmin.
**
** The front end hands us a view whose LAST iarg[0] axes are reduced.  Two
** strategies:
**  - "inner": the reduced block of each output element is contiguous in
**    memory (e.g. sum over the last axis, or everything): one tight loop per
**    output element, accumulating in double (floats) or int64 (ints);
**  - "outer": otherwise, an accumulator array (one per output element) is
**    swept in input-memory order by the strided iterator, so sum(axis=0) of a
**    row-major matrix streams rows instead of striding down columns.
*/
#include "tinternal.h"
#include <stdlib.h>
#include <float.h>

static bool reduced_block_contig(const nt_Tensor *in, int nk) {
  int64_t expect = 1;
  for (int d = in->ndim - 1; d >= nk; d--) {
    if (in->shape[d] == 1) continue;
    if (in->strides[d] != expect) return false;
    expect *= in->shape[d];
  }
  return true;
}

/* element offset (in elements) of output m's block start */
static inline int64_t kept_offset(const nt_Tensor *in, int nk, int64_t m) {
  int64_t off = in->offset;
  for (int d = nk - 1; d >= 0; d--) {
    int64_t s = in->shape[d];
    off += (m % s) * in->strides[d];
    m /= s;
  }
  return off;
}

/* reduction step / init per op, in the accumulator type AT */
#define R_INIT(op, AT, isf) ((op) == NT_OP_PROD || (op) == NT_OP_ALL ? (AT)1 : \
    (op) == NT_OP_MAX ? ((isf) ? (AT)-INFINITY : (AT)INT64_MIN) : (op) == NT_OP_MIN ? ((isf) ? (AT)INFINITY : (AT)INT64_MAX) : (AT)0)

#define DEF_REDUCE(N, ST_, AT_, LDF, STF, ISF)                                        \
static int red_##N(const nt_KernelArgs *a) {                                          \
  typedef ST_ ST; typedef AT_ AT;                                                     \
  const int op = a->op;                                                               \
  nt_Tensor *in = a->in[0], *out = a->out;                                            \
  int nr = (int)a->iarg[0], nk = in->ndim - nr;                                       \
  int64_t M = out->numel, R = 1;                                                      \
  for (int d = nk; d < in->ndim; d++) R *= in->shape[d];                              \
  const ST *base = (const ST *)nt_base(in) - in->offset;   /* nt_base: settles a lazy input */                                     \
  if (op == NT_OP_ARGMAX || op == NT_OP_ARGMIN) {                                     \
    /* one reduced axis, or a contiguous flattened block */                           \
    int64_t rs = nr == 1 ? in->strides[in->ndim - 1] : 1;                             \
    int64_t *po = (int64_t *)nt_base(out);                                            \
    for (int64_t m = 0; m < M; m++) {                                                 \
      const ST *p = base + kept_offset(in, nk, m);                                    \
      AT best = LDF(p[0]); int64_t bi = 0;                                            \
      for (int64_t r = 1; r < R; r++) {                                               \
        AT v = LDF(p[r * rs]);                                                        \
        if (best != best) break;                                                      \
        if (op == NT_OP_ARGMAX ? (v > best || v != v) : (v < best || v != v)) { best = v; bi = r; } \
      }                                                                               \
      po[m] = bi;                                                                     \
    }                                                                                 \
    return 0;                                                                         \
  }                                                                                   \
  ST *po = (ST *)nt_base(out);                                                        \
  const AT init = R_INIT(op, AT, ISF);                                                \
  if (reduced_block_contig(in, nk)) {                                                 \
    if (M == 1 && R > NT_OMP_THRESHOLD && (op == NT_OP_SUM || op == NT_OP_PROD)) {    \
      const ST *p = base + in->offset; AT acc = init;                                 \
      /* in chunks of NT_CHUNK elements, with an interrupt check between them */      \
      for (int64_t c0 = 0; c0 < R; c0 += NT_CHUNK) {                                  \
        int64_t c1 = R - c0 > NT_CHUNK ? c0 + NT_CHUNK : R;                           \
        if (c0 && NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();                            \
        if (op == NT_OP_SUM) {                                                        \
          /* simd: GCC's -O2 keeps a reduction of unknown length scalar otherwise */  \
          _Pragma("omp parallel for simd reduction(+:acc)")                           \
          for (int64_t r = c0; r < c1; r++) acc += LDF(p[r]);                         \
        } else {                                                                      \
          _Pragma("omp parallel for reduction(*:acc)")                                \
          for (int64_t r = c0; r < c1; r++) acc *= LDF(p[r]);                         \
        }                                                                             \
      }                                                                               \
      po[0] = STF(acc);                                                               \
      return 0;                                                                       \
    }                                                                                 \
    int intr = 0;   /* rows of NT_CHUNK or more: an interrupt check per row */     \
    _Pragma("omp parallel for if(M * R > NT_OMP_THRESHOLD && M > 1)")                 \
    for (int64_t m = 0; m < M; m++) {                                                 \
      if (R >= NT_CHUNK && NT_INTERRUPTED()) {                                        \
        _Pragma("omp atomic write")                                                   \
        intr = 1;                                                                     \
        continue;                                                                     \
      }                                                                               \
      const ST *p = base + kept_offset(in, nk, m);                                    \
      AT acc = init;                                                                  \
      switch (op) {                                                                   \
        case NT_OP_SUM: {                                                             \
          _Pragma("omp simd reduction(+:acc)")                                        \
          for (int64_t r = 0; r < R; r++) acc += LDF(p[r]);                           \
          break; }                                                                    \
        case NT_OP_PROD: for (int64_t r = 0; r < R; r++) acc *= LDF(p[r]); break;     \
        case NT_OP_MAX: for (int64_t r = 0; r < R; r++) { AT v = LDF(p[r]); if (v > acc || v != v) acc = v; if (acc != acc) break; } break; \
        case NT_OP_MIN: for (int64_t r = 0; r < R; r++) { AT v = LDF(p[r]); if (v < acc || v != v) acc = v; if (acc != acc) break; } break; \
        case NT_OP_ANY: for (int64_t r = 0; r < R; r++) if (LDF(p[r]) != 0) { acc = 1; break; } break; \
        case NT_OP_ALL: for (int64_t r = 0; r < R; r++) if (LDF(p[r]) == 0) { acc = 0; break; } break; \
        default: break;                                                               \
      }                                                                               \
      po[m] = STF(acc);                                                               \
    }                                                                                 \
    if (intr) NT_FAIL_INTERRUPTED();                                                  \
    return 0;                                                                         \
  }                                                                                   \
  /* outer strategy: accumulator array swept in memory order */                      \
  AT *acc = nt_malloc(sizeof(AT) * (size_t)(M ? M : 1));                              \
  if (!acc) return -1;                                                                \
  for (int64_t m = 0; m < M; m++) acc[m] = init;                                      \
  nt_Storage as = { .data = acc, .nbytes = sizeof(AT) * (size_t)M, .device = NT_CPU, .refcount = 1, .flags = NT_STORAGE_EXTERNAL }; \
  nt_Tensor av = *in, iv = *in;                                                       \
  av.storage = &as; av.offset = 0; av.dtype = sizeof(AT) == 8 && ISF ? NT_F64 : NT_I64; \
  { int64_t s = 1;                                                                    \
    for (int d = in->ndim - 1; d >= 0; d--) {                                         \
      if (d >= nk) av.strides[d] = 0; else { av.strides[d] = s; s *= in->shape[d]; } } } \
  /* order dims by decreasing |input stride| so the sweep follows memory */           \
  for (int i = 1; i < in->ndim; i++)                                                  \
    for (int j = i; j > 0 && llabs(iv.strides[j]) > llabs(iv.strides[j - 1]); j--) {  \
      int64_t t;                                                                      \
      t = iv.strides[j]; iv.strides[j] = iv.strides[j - 1]; iv.strides[j - 1] = t;    \
      t = av.strides[j]; av.strides[j] = av.strides[j - 1]; av.strides[j - 1] = t;    \
      t = iv.shape[j]; iv.shape[j] = iv.shape[j - 1]; iv.shape[j - 1] = t;            \
      av.shape[j] = iv.shape[j]; av.shape[j - 1] = iv.shape[j - 1];                   \
    }                                                                                 \
  nt_Iter it; nt_Tensor *ops[2] = { &av, &iv };                                       \
  nt_iter_init(&it, 2, ops, NULL);                                                    \
  do {                                                                                \
    char *pa = it.ptr[0], *pi = it.ptr[1]; int64_t sa = it.istride[0], si = it.istride[1]; \
    if (op == NT_OP_SUM && sa == (int64_t)sizeof(AT) && si == (int64_t)sizeof(ST)) {  \
      /* a row added onto a row of accumulators (column sums: a bias gradient) */     \
      AT *A_ = (AT *)pa; const ST *I_ = (const ST *)pi;                               \
      _Pragma("omp simd")                                                             \
      for (int64_t i = 0; i < it.inner; i++) A_[i] += LDF(I_[i]);                     \
      continue;                                                                       \
    }                                                                                 \
    for (int64_t i = 0; i < it.inner; i++) {                                          \
      AT *A_ = (AT *)(pa + i * sa); AT v = LDF(*(const ST *)(pi + i * si));           \
      switch (op) {                                                                   \
        case NT_OP_SUM: *A_ += v; break;                                              \
        case NT_OP_PROD: *A_ *= v; break;                                             \
        case NT_OP_MAX: if (v > *A_ || v != v) *A_ = v; break;                        \
        case NT_OP_MIN: if (v < *A_ || v != v) *A_ = v; break;                        \
        case NT_OP_ANY: if (v != 0) *A_ = 1; break;                                   \
        case NT_OP_ALL: if (v == 0) *A_ = 0; break;                                   \
        default: break;                                                               \
      }                                                                               \
    }                                                                                 \
  } while (nt_iter_next(&it));                                                        \
  for (int64_t m = 0; m < M; m++) po[m] = STF(acc[m]);                                \
  free(acc);                                                                          \
  return 0;                                                                           \
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
DEF_REDUCE(f32, float, double, nt_ld_f32, (float), 1)
DEF_REDUCE(f64, double, double, nt_ld_f64, (double), 1)
DEF_REDUCE(f16, uint16_t, double, nt_ld_f16, nt_st_f16, 1)
DEF_REDUCE(bf16, uint16_t, double, nt_ld_bf16, nt_st_bf16, 1)
DEF_REDUCE(i32, int32_t, int64_t, nt_ld_i32, (int32_t), 0)
DEF_REDUCE(i64, int64_t, int64_t, nt_ld_i64, (int64_t), 0)
DEF_REDUCE(u8, uint8_t, int64_t, nt_ld_u8, (uint8_t), 0)
DEF_REDUCE(b8, uint8_t, int64_t, nt_ld_b8, nt_st_b8, 0)
#pragma GCC diagnostic pop

static int k_reduce(const nt_KernelArgs *a) {
  switch (a->in[0]->dtype) {
#define X(E, N, ST, CT) case E: return red_##N(a);
    NT_FOR_EACH_DTYPE(X)
#undef X
    default: NT_FAIL("%s: bad dtype", nt_op_name(a->op));
  }
}

void nt_cpu_register_reduce(void) {
  static const int ops[] = { NT_OP_SUM, NT_OP_PROD, NT_OP_MAX, NT_OP_MIN, NT_OP_ARGMAX, NT_OP_ARGMIN, NT_OP_ANY, NT_OP_ALL };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) nt_register_kernel(ops[i], NT_CPU, k_reduce);
}
