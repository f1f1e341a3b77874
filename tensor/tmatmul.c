/*
** tmatmul.c — matmul (NumPy semantics, batch broadcasting), dot, outer.
**
** CPU kernel: one GEMM per batch matrix.  A matrix whose last-axis stride is
** 1 is passed row-major (NoTrans, ld = row stride); one whose second-to-last
** stride is 1 is passed as the transpose (Trans, ld = column stride) — so
** x.T @ y never copies.  Anything else (e.g. stride-0 expands inside the
** matrix) is packed into a contiguous temporary first.  f32/f64 use OpenBLAS;
** f16/bf16 go through f32; integer dtypes use a plain i-k-j loop.
*/
#include "tinternal.h"
#include <stdlib.h>
#include "tblas.h"

typedef struct { const char *p; int64_t rs, cs; } Mat;   /* element strides */

/* Chooses the BLAS layout for an R×C matrix; false if it must be packed. */
static bool blas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, CBLAS_TRANSPOSE *tr, int *ld) {
  if (C == 1) cs = 1;
  if (R == 1) rs = C > 1 ? C : 1;
  if (cs == 1 && rs >= (C > 1 ? C : 1) && rs <= INT32_MAX) { *tr = CblasNoTrans; *ld = (int)rs; return true; }
  if (rs == 1 && cs >= (R > 1 ? R : 1) && cs <= INT32_MAX) { *tr = CblasTrans; *ld = (int)cs; return true; }
  return false;
}

/* packs a strided R×C matrix into contiguous row-major memory */
static void pack(void *dst, Mat m, int64_t R, int64_t C, size_t es) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++)
      memcpy((char *)dst + (r * C + c) * (int64_t)es, m.p + (r * m.rs + c * m.cs) * (int64_t)es, es);
}

/* C (contiguous M x N) = A B + beta C */
static int gemm_float_beta(nt_DType dt, Mat A, Mat B, void *C, int64_t M, int64_t N, int64_t K, double beta) {
  size_t es = nt_dtype_size(dt);
  CBLAS_TRANSPOSE ta, tb;
  int lda, ldb;
  void *pa = NULL, *pb = NULL;
  const void *a = A.p, *b = B.p;
  if (!blas_layout(M, K, A.rs, A.cs, &ta, &lda)) {
    if (!(pa = nt_malloc((size_t)(M * K) * es))) return -1;
    pack(pa, A, M, K, es); a = pa; ta = CblasNoTrans; lda = K > 1 ? (int)K : 1;
  }
  if (!blas_layout(K, N, B.rs, B.cs, &tb, &ldb)) {
    if (!(pb = nt_malloc((size_t)(K * N) * es))) { free(pa); return -1; }
    pack(pb, B, K, N, es); b = pb; tb = CblasNoTrans; ldb = N > 1 ? (int)N : 1;
  }
  int ldc = N > 1 ? (int)N : 1;
  if (dt == NT_F32) nt_blas()->sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, a, lda, b, ldb, (float)beta, C, ldc);
  else nt_blas()->dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0, a, lda, b, ldb, beta, C, ldc);
  free(pa); free(pb);
  return 0;
}
/* Multiply-adds per BLAS call: one call cannot be interrupted, so a big GEMM
** runs as row blocks of about this much work (~0.1 s on a few cores) with an
** interrupt check between them.  Smaller products are one call as before. */
#define GEMM_BLOCK_WORK ((int64_t)1 << 30)
static int gemm_rows_blocked(nt_DType dt, Mat A, Mat B, void *C, int64_t M, int64_t N, int64_t K, double beta) {
  int64_t rows = N * K > 0 ? GEMM_BLOCK_WORK / (N * K) : M;   /* N or K = 0 (empty): one call */
  if (rows < 1) rows = 1;
  if (rows >= M) return gemm_float_beta(dt, A, B, C, M, N, K, beta);
  size_t es = nt_dtype_size(dt);
  CBLAS_TRANSPOSE tb; int ldb; void *pb = NULL;
  if (!blas_layout(K, N, B.rs, B.cs, &tb, &ldb)) {   /* pack B once, not per block */
    if (!(pb = nt_malloc((size_t)(K * N) * es))) return -1;
    pack(pb, B, K, N, es);
    B = (Mat){ pb, N, 1 };
  }
  int rc = 0;
  for (int64_t r0 = 0; r0 < M && !rc; r0 += rows) {
    if (NT_INTERRUPTED()) { nt_error_set("interrupted"); rc = -1; break; }
    int64_t m = M - r0 < rows ? M - r0 : rows;
    Mat Ab = { A.p + r0 * A.rs * (int64_t)es, A.rs, A.cs };
    rc = gemm_float_beta(dt, Ab, B, (char *)C + r0 * N * (int64_t)es, m, N, K, beta);
  }
  free(pb);
  return rc;
}
static int gemm_float(nt_DType dt, Mat A, Mat B, void *C, int64_t M, int64_t N, int64_t K) {
  return gemm_rows_blocked(dt, A, B, C, M, N, K, 0.0);
}

int nt_cpu_gemm(nt_DType dt, const void *a, int64_t ars, int64_t acs, const void *b, int64_t brs, int64_t bcs,
                void *c, int64_t M, int64_t N, int64_t K, double beta) {
  if (dt != NT_F32 && dt != NT_F64) NT_FAIL("gemm: not supported for dtype %s", nt_dtype_name(dt));
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) NT_FAIL("gemm: matrix too large for BLAS");
  if (M == 0 || N == 0) return 0;
  if (K == 0) {   /* the empty product: C = beta C */
    size_t es = nt_dtype_size(dt);
    if (beta == 0) memset(c, 0, (size_t)(M * N) * es);
    else if (beta != 1) NT_FAIL("gemm: K = 0 with beta %g", beta);
    return 0;
  }
  Mat A = { (const char *)a, ars, acs }, B = { (const char *)b, brs, bcs };
  return gemm_rows_blocked(dt, A, B, c, M, N, K, beta);
}

#define DEF_IGEMM(N_, T)                                                              \
static int igemm_##N_(Mat A, Mat B, T *C, int64_t M, int64_t N, int64_t K) {          \
  const T *a = (const T *)A.p, *b = (const T *)B.p;                                   \
  for (int64_t i = 0; i < M * N; i++) C[i] = 0;                                       \
  for (int64_t i = 0, work = 0; i < M; i++)                                           \
    for (int64_t k = 0; k < K; k++) {                                                 \
      if ((work += N) >= NT_CHUNK) { work = 0; if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED(); } \
      T x = a[i * A.rs + k * A.cs];                                                   \
      for (int64_t j = 0; j < N; j++) C[i * N + j] += (T)(x * b[k * B.rs + j * B.cs]);\
    }                                                                                 \
  return 0;                                                                           \
}
DEF_IGEMM(i32, int32_t)
DEF_IGEMM(i64, int64_t)
DEF_IGEMM(u8, uint8_t)

/* True when the batch of a @ b is one tall GEMM: b's batch axes are all
** broadcast (stride 0 or size 1), a's rows are contiguous (last stride 1) and
** its batch axes step by whole row blocks, so row r of batch i is at
** offset (i*M + r) * row stride.  (x @ w with x [B, T, K] and w [K, N].) */
static bool batch_folds(const nt_Tensor *a, const nt_Tensor *b, int nb, int64_t nbatch, int64_t *row_stride) {
  int nd = a->ndim;
  int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], rs = a->strides[nd - 2];
  if (nbatch * M > INT32_MAX) return false;
  if (K > 1 && a->strides[nd - 1] != 1) return false;
  if (M > 1 && rs < K) return false;
  if (M == 1) rs = K;   /* a single row: any step works; pick the packed one */
  int64_t step = M * rs;
  for (int d = nb - 1; d >= 0; d--) {
    if (b->shape[d] != 1 && b->strides[d] != 0) return false;
    if (a->shape[d] == 1) continue;
    if (a->strides[d] != step) return false;
    step *= a->shape[d];
  }
  *row_stride = rs;
  return rs <= INT32_MAX;
}

/* bf16 x bf16 -> bf16 through oneDNN (tonednn.c), batch by batch: 1 done, 0 not
** applicable (no oneDNN, strides it cannot describe): the f32 path runs, -1 error */
static int matmul_bf16_onednn(nt_Tensor *out, nt_Tensor *a, nt_Tensor *b) {
  int nd = out->ndim, nb = nd - 2;
  int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = a->shape[nd - 1];
  if (a->dtype != NT_BF16 || b->dtype != NT_BF16 || K == 0 || M * N == 0 || !nt_onednn_available()) return 0;
  int64_t st[4] = {a->strides[nd - 2], a->strides[nd - 1], b->strides[nd - 2], b->strides[nd - 1]};
  for (int i = 0; i < 4; i++) if (st[i] <= 0) return 0;   /* broadcast or flipped: not a oneDNN layout */
  int64_t nbatch = 1;
  for (int i = 0; i < nb; i++) nbatch *= out->shape[i];
  char *pa = nt_base(a), *pb = nt_base(b), *pc = nt_base(out);
  for (int64_t bi = 0; bi < nbatch; bi++) {
    if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    int64_t oa = 0, ob = 0, rem = bi;
    for (int d = nb - 1; d >= 0; d--) {
      int64_t i = rem % out->shape[d];
      rem /= out->shape[d];
      oa += i * a->strides[d]; ob += i * b->strides[d];
    }
    int rc = nt_onednn_matmul_bf16(pa + oa * 2, st[0], st[1], pb + ob * 2, st[2], st[3], pc + bi * M * N * 2, M, N, K);
    if (rc <= 0) return rc;   /* 0 only before the first batch: oneDNN answers alike for every batch */
  }
  return 1;
}

static int k_matmul(const nt_KernelArgs *ka) {
  nt_Tensor *out = ka->out, *a = ka->in[0], *b = ka->in[1];
  nt_DType dt = out->dtype;
  if (dt == NT_BF16) {
    int rc = matmul_bf16_onednn(out, a, b);
    if (rc) return rc < 0 ? -1 : 0;
  }
  if (dt == NT_F16 || dt == NT_BF16) {   /* compute in f32 */
    nt_Tensor *fa = nt_empty(a->shape, a->ndim, NT_F32, NT_CPU), *fb = nt_empty(b->shape, b->ndim, NT_F32, NT_CPU);
    nt_Tensor *fo = nt_empty(out->shape, out->ndim, NT_F32, NT_CPU);
    int rc = -1;
    if (fa && fb && fo) {
      nt_KernelArgs c = { .op = NT_OP_COPY, .out = fa, .in = { a }, .nin = 1 };
      nt_KernelArgs d = { .op = NT_OP_COPY, .out = fb, .in = { b }, .nin = 1 };
      nt_KernelArgs m = { .op = NT_OP_MATMUL, .out = fo, .in = { fa, fb }, .nin = 2 };
      nt_KernelArgs e = { .op = NT_OP_COPY, .out = out, .in = { fo }, .nin = 1 };
      rc = nt_dispatch(NT_OP_COPY, NT_CPU, &c) || nt_dispatch(NT_OP_COPY, NT_CPU, &d) ||
           k_matmul(&m) || nt_dispatch(NT_OP_COPY, NT_CPU, &e) ? -1 : 0;
    }
    nt_release(fa); nt_release(fb); nt_release(fo);
    return rc;
  }
  int nd = out->ndim, nb = nd - 2;
  int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = a->shape[nd - 1];
  int64_t nbatch = 1;
  for (int i = 0; i < nb; i++) nbatch *= out->shape[i];
  size_t es = nt_dtype_size(dt);
  char *pc = nt_base(out);
  int64_t frs;
  if (nbatch > 1 && K > 0 && (dt == NT_F32 || dt == NT_F64) && batch_folds(a, b, nb, nbatch, &frs)) {
    /* b is shared by every batch and a's batch rows are evenly spaced: one
    ** [nbatch*M, K] x [K, N] GEMM instead of nbatch small ones */
    Mat A = { nt_base(a), frs, 1 };
    Mat B = { nt_base(b), b->strides[nd - 2], b->strides[nd - 1] };
    return gemm_float(dt, A, B, pc, nbatch * M, N, K);
  }
  for (int64_t bi = 0; bi < nbatch; bi++) {
    if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    int64_t oa = a->offset, ob = b->offset, rem = bi;
    for (int d = nb - 1; d >= 0; d--) {
      int64_t i = rem % out->shape[d];
      rem /= out->shape[d];
      oa += i * a->strides[d]; ob += i * b->strides[d];
    }
    Mat A = { nt_base(a) + (oa - a->offset) * (int64_t)es, a->strides[nd - 2], a->strides[nd - 1] };
    Mat B = { nt_base(b) + (ob - b->offset) * (int64_t)es, b->strides[nd - 2], b->strides[nd - 1] };
    void *C = pc + bi * M * N * (int64_t)es;
    if (K == 0) { memset(C, 0, (size_t)(M * N) * es); continue; }
    switch (dt) {
      case NT_F32: case NT_F64: if (gemm_float(dt, A, B, C, M, N, K)) return -1; break;
      case NT_I32: if (igemm_i32(A, B, C, M, N, K)) return -1; break;
      case NT_I64: if (igemm_i64(A, B, C, M, N, K)) return -1; break;
      case NT_U8: if (igemm_u8(A, B, C, M, N, K)) return -1; break;
      default: NT_FAIL("matmul: not supported for dtype %s", nt_dtype_name(dt));
    }
  }
  return 0;
}

void nt_cpu_register_matmul(void) { nt_register_kernel(NT_OP_MATMUL, NT_CPU, k_matmul); }

/* ---- front end ------------------------------------------------------------ */
/* 1-D operands become matrices: a → [1, K], b → [K, 1] */
static nt_Tensor *as_matrix(nt_Tensor *t, bool is_left) {
  if (t->ndim != 1) return nt_retain(t);
  int64_t sh[2] = { is_left ? 1 : t->shape[0], is_left ? t->shape[0] : 1 };
  return nt_reshape(t, sh, 2);
}

static int matmul_backward(nt_Node *n, nt_Tensor *g, nt_Tensor **gin) {
  nt_Tensor *a = n->in[0], *b = n->in[1];
  nt_Tensor *am = as_matrix(a, true), *bm = as_matrix(b, false);
  int rc = -1;
  /* g back to the full [batch..., M, N] shape */
  int64_t gs[NT_MAXDIM];
  for (int i = 0; i < n->niarg; i++) gs[i] = n->iarg[i];
  nt_Tensor *gf = am && bm ? nt_reshape(g, gs, n->niarg) : NULL;
  if (!gf) goto out;
  if (nt_node_needs(n, 0)) {
    nt_Tensor *bt = nt_transpose(bm, -1, -2), *ga = bt ? nt_matmul(gf, bt) : NULL;
    nt_release(bt);
    if (!ga) goto out;
    if (a->ndim == 1) { gin[0] = nt_squeeze(ga, -2); nt_release(ga); if (!gin[0]) goto out; }
    else gin[0] = ga;
  }
  if (nt_node_needs(n, 1)) {
    nt_Tensor *at, *gb;
    if (bm->ndim == 2 && am->ndim > 2) {
      /* b shared by the whole batch: gb = a^T g over all batch rows at once,
      ** one [K, B*M] x [B*M, N] GEMM instead of B GEMMs and a sum */
      int64_t K = am->shape[am->ndim - 1], N = gf->shape[gf->ndim - 1];
      nt_Tensor *a2 = nt_reshape(am, (int64_t[]){-1, K}, 2), *g2 = a2 ? nt_reshape(gf, (int64_t[]){-1, N}, 2) : NULL;
      at = g2 ? nt_transpose(a2, 0, 1) : NULL;
      gb = at ? nt_matmul(at, g2) : NULL;
      nt_release(a2); nt_release(g2);
    } else {
      at = nt_transpose(am, -1, -2);
      gb = at ? nt_matmul(at, gf) : NULL;
    }
    nt_release(at);
    if (!gb) goto out;
    if (b->ndim == 1) { gin[1] = nt_squeeze(gb, -1); nt_release(gb); if (!gin[1]) goto out; }
    else gin[1] = gb;
  }
  rc = 0;
out:
  nt_release(am); nt_release(bm); nt_release(gf);
  return rc;
}

nt_Tensor *nt_matmul(nt_Tensor *a, nt_Tensor *b) {
  NT_AUTOCAST(NT_AUTOCAST_LOW, nt_matmul(ac_[0], ac_[1]), a, b);
  if (a->device != b->device)
    NT_FAIL_NULL("matmul: expected all tensors on the same device, got %s and %s", nt_device_name(a->device), nt_device_name(b->device));
  if (a->ndim == 0 || b->ndim == 0) NT_FAIL_NULL("matmul: both arguments need at least 1 dimension, got %d and %d", a->ndim, b->ndim);
  int64_t Ka = a->shape[a->ndim - 1], Kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
  if (Ka != Kb) {
    char s1[128], s2[128];
    NT_FAIL_NULL("matmul: shapes %s and %s do not match (%lld != %lld)", nt_shape_str(a->shape, a->ndim, s1, sizeof s1),
                 nt_shape_str(b->shape, b->ndim, s2, sizeof s2), (long long)Ka, (long long)Kb);
  }
  nt_DType dt = nt_promote(a->dtype, b->dtype);
  if (dt == NT_BOOL) dt = NT_I64;
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *am = as_matrix(a, true), *bm = as_matrix(b, false), *ca = NULL, *cb = NULL, *out = NULL;
  if (!am || !bm) goto done;
  ca = nt_to_dtype(am, dt); cb = nt_to_dtype(bm, dt);
  if (!ca || !cb) goto done;
  /* batch shapes broadcast */
  int64_t bs[NT_MAXDIM], full[NT_MAXDIM];
  int nb;
  if (nt_broadcast_shapes("matmul", ca->shape, ca->ndim - 2, cb->shape, cb->ndim - 2, bs, &nb)) {
    char s1[128], s2[128], b1[128], b2[128];   /* show the operands, not just their batch parts */
    nt_error_set("matmul: shapes %s and %s: batch dimensions %s and %s cannot broadcast",
                 nt_shape_str(a->shape, a->ndim, s1, sizeof s1), nt_shape_str(b->shape, b->ndim, s2, sizeof s2),
                 nt_shape_str(ca->shape, ca->ndim - 2, b1, sizeof b1), nt_shape_str(cb->shape, cb->ndim - 2, b2, sizeof b2));
    goto done;
  }
  if (nb + 2 > NT_MAXDIM) { nt_error_set("matmul: too many dimensions"); goto done; }
  int64_t M = ca->shape[ca->ndim - 2], N = cb->shape[cb->ndim - 1], K = Ka;
  memcpy(full, bs, sizeof(int64_t) * (size_t)nb);
  full[nb] = M; full[nb + 1] = N;
  int64_t sa[NT_MAXDIM], sb[NT_MAXDIM];
  memcpy(sa, bs, sizeof(int64_t) * (size_t)nb); sa[nb] = M; sa[nb + 1] = K;
  memcpy(sb, bs, sizeof(int64_t) * (size_t)nb); sb[nb] = K; sb[nb + 1] = N;
  nt_Tensor va, vb;
  nt_bcast_view(&va, ca, sa, nb + 2); nt_bcast_view(&vb, cb, sb, nb + 2);
  out = nt_empty(full, nb + 2, dt, a->device);
  if (!out) goto done;
  nt_KernelArgs args = { .op = NT_OP_MATMUL, .out = out, .in = { &va, &vb }, .nin = 2 };
  if (nt_dispatch(NT_OP_MATMUL, a->device, &args)) { nt_release(out); out = NULL; goto done; }
  /* drop the axes that 1-D operands added */
  if (a->ndim == 1 || b->ndim == 1) {
    int64_t os[NT_MAXDIM];
    int k = 0;
    for (int i = 0; i < nb; i++) os[k++] = bs[i];
    if (a->ndim != 1) os[k++] = M;
    if (b->ndim != 1) os[k++] = N;
    nt_Tensor *r = nt_reshape(out, os, k);
    nt_release(out);
    out = r;
    if (!out) goto done;
  }
  nt_set_grad_enabled(prev);
  if (nt_needs_grad(2, (nt_Tensor *[]){ a, b })) {
    nt_Node *n = nt_record(out, "MatmulBackward", matmul_backward, 2, (nt_Tensor *[]){ a, b });
    if (!n) { nt_release(out); out = NULL; goto done; }
    for (int i = 0; i < nb + 2; i++) n->iarg[i] = full[i];
    n->niarg = nb + 2;
  }
done:
  nt_set_grad_enabled(prev);
  nt_release(am); nt_release(bm); nt_release(ca); nt_release(cb);
  return out;
}

nt_Tensor *nt_dot(nt_Tensor *a, nt_Tensor *b) {
  if (a->ndim != 1 || b->ndim != 1) NT_FAIL_NULL("dot: expected 1-D tensors, got %dD and %dD", a->ndim, b->ndim);
  if (a->shape[0] != b->shape[0])
    NT_FAIL_NULL("dot: sizes %lld and %lld do not match", (long long)a->shape[0], (long long)b->shape[0]);
  return nt_matmul(a, b);
}

nt_Tensor *nt_outer(nt_Tensor *a, nt_Tensor *b) {
  if (a->ndim != 1 || b->ndim != 1) NT_FAIL_NULL("outer: expected 1-D tensors, got %dD and %dD", a->ndim, b->ndim);
  nt_Tensor *ua = nt_unsqueeze(a, 1), *ub = ua ? nt_unsqueeze(b, 0) : NULL;
  nt_Tensor *r = ub ? nt_mul(ua, ub) : NULL;
  nt_release(ua); nt_release(ub);
  return r;
}
