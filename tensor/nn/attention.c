/*
** attention.c — scaled_dot_product_attention(q, k, v, mask, causal, scale,
** dropout) as one op (torch.nn.functional.scaled_dot_product_attention).
**
** Math, per batch b (q [T, D], k [S, D], v [S, DV]; row i of q, key j):
**   s_ij = scale q_i . k_j + M_ij     (scale defaults to 1/sqrt(D); M the
**                                     additive mask, 0 without one; a bool
**                                     mask is 0 where true, -inf where false)
**   causal: query i sees keys j <= i (top-left aligned, torch's tril(ones(T, S)))
**   L_i  = log sum_{j seen} exp(s_ij) p_ij = exp(s_ij - L_i) (0 for unseen j)
**   O_i  = sum_j p_ij v_j
** Backward (recomputes P from the saved L instead of storing the T x S matrix):
**   D_i = dO_i . O_i      dV = P^T dO      dP = dO V^T
**   dS = P * (dP - D)     dQ = scale dS K   dK = scale dS^T Q
** (M is a constant: a mask that requires grad, and dropout on the CPU, take the
** composed path at the end of this file, plain differentiable ops; so do a mask
** and dropout on CUDA where cuDNN's graph, the only CUDA path that adds a mask or
** drops out (its RNG node, cuda/cudnn.cu), cannot run.)
**
** CPU kernel (f32/f64): the query rows of each batch matrix are cut into
** blocks of kRows; one block is two GEMMs (scores, then P V) around a row
** softmax in a per-thread kRows x S scratch, so memory is O(T*DV + kRows*S)
** per thread, never B*T*S.  Causal blocks only touch the keys < the block's
** last row + 1.  Forward tasks (batch, block) run in parallel; backward runs
** one batch matrix per thread (dK and dV are sums over every query block).
** With Debian's OpenMP OpenBLAS a GEMM inside a parallel region runs on its
** own thread; with a pthread OpenBLAS the loops stay serial and BLAS threads.
**
** The front end broadcasts the batch dims, flattens them to B and makes
** q, k, v contiguous with public (differentiable) ops, so the autograd node
** sees [B, T, D] inputs; the kernel contract is in attention.h.  On the CPU,
** q, k, v that are already strided views of the right dtype and batch shape
** (a model's heads, permuted out of [B, T, H, hd]) are read in place, and O
** and the gradients are laid out like them: the GPT step's copies of q, k, v,
** of O before the output projection and of the gradients went away (k_copy
** 4.9% -> 1.1% of the step's samples; the attention layer's forward + backward
** takes ~10% less CPU time: bench/results/2026-11-26-gpt.md).  On CUDA the
** same views go in place to cuDNN's graph and the fused kernels (cuda_views_ok,
** NT_SDPA_VIEWS in attention.h), and to the cuBLAS path (attention_gemm.cu).
**
** attention_qkv(qkv [B, T, 3C], heads) (end of file) is the model's form: the
** heads of q, k, v are views of the packed qkv, the output is written as
** [B, T, C] and its backward writes dq, dk, dv into ONE packed [B, T, 3C]
** gradient: no chunk, no permutes, no chunk backward's zero fill and copies
** (nn.causal_self_attention uses it).
*/
#include "nninternal.h"
#include "attention.h"
#include "tensor/tblas.h"
#include "tensor/tdevice.h"
#include <stdlib.h>

#ifdef NABLA_BLAS_OPENMP
#define SDPA_PARALLEL 1
#else
#define SDPA_PARALLEL 0
#endif

/* trandom.c: the generator moves on by what cuDNN's dropout drew at its state (not a
** reset: a captured step may do it) */
void nt_rng_advance(uint64_t offsets);

enum { kRows = 64 };   /* query rows per block: scratch is kRows x S per thread */

typedef struct sdpa_geom { int64_t B, T, S, D, DV; bool causal; double scale; int64_t mask_b; } sdpa_geom;

static sdpa_geom geom_of(const nt_KernelArgs *a) {
  const int64_t *g = a->iarg;
  return (sdpa_geom){g[NT_SDPA_B], g[NT_SDPA_T], g[NT_SDPA_S], g[NT_SDPA_D], g[NT_SDPA_DV], g[NT_SDPA_CAUSAL] != 0, a->s[0],
                     a->niarg > NT_SDPA_MASK ? g[NT_SDPA_MASK] : 0};
}
/* batch b's [T, S] additive mask (NULL: none); mask_b is 1 (shared) or B */
#define MASK_OF(F, g, m, b) ((m) ? (const F *)(m) + ((g)->mask_b > 1 ? (b) : 0) * (g)->T * (g)->S : NULL)
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int ld(int64_t n) { return n > 1 ? (int)n : 1; }   /* BLAS wants ld >= 1 */
/* keys seen by query row i (all S, or the first i+1 when causal) */
static inline int64_t keys_seen(const sdpa_geom *g, int64_t i) { return g->causal ? min64(g->S, i + 1) : g->S; }

/* One operand seen as B matrices (its leading dims flattened row-major):
** matrix b starts at base + off[b] (elements) and its row i at + i * ld.
** The front end sends contiguous [B, rows, cols] or, on the CPU, views with
** unit column stride and row stride >= cols (attention.h), e.g. the heads of
** a [B, T, H, hd] tensor permuted to [B, H, T, hd]: no copy is made. */
typedef struct sdpa_lay { char *base; const int64_t *off; int64_t ld; } sdpa_lay;

static int lay_of(const nt_Tensor *t, int64_t B, int64_t *off, sdpa_lay *l) {
  int nd = t->ndim, nbd = nd - 2;
  int64_t nb = 1;
  for (int i = 0; i < nbd; i++) nb *= t->shape[i];
  if (nd < 2 || nb != B) NT_FAIL("scaled_dot_product_attention: internal error: operand batch %lld, expected %lld",
                                 (long long)nb, (long long)B);
  l->base = nt_base(t);
  l->off = off;
  l->ld = t->shape[nd - 2] > 1 ? t->strides[nd - 2] : t->shape[nd - 1];
  for (int64_t b = 0; b < B; b++) {
    int64_t rem = b, o = 0;
    for (int i = nbd - 1; i >= 0; i--) { o += rem % t->shape[i] * t->strides[i]; rem /= t->shape[i]; }
    off[b] = o;
  }
  return 0;
}

#define SDPA_T(F, GEMM)                                                                           \
  /* s [rows, n] holds scores of rows i0..; turns them into probabilities in place, writes L */   \
  static void softmax_rows_##F(const sdpa_geom *g, F *s, int64_t n, int64_t i0, int64_t rows, F *L) { \
    for (int64_t r = 0; r < rows; r++) {                                                          \
      F *row = s + r * n;                                                                         \
      int64_t ni = min64(keys_seen(g, i0 + r), n);                                                \
      F m = -INFINITY;                                                                            \
      _Pragma("omp simd reduction(max:m)")                                                        \
      for (int64_t j = 0; j < ni; j++) m = row[j] > m ? row[j] : m;                               \
      if (m == -INFINITY) m = 0;   /* all -inf: NaN below, as torch */                            \
      double sum = nn_expsum(row, row, ni, m);   /* SLEEF's vector exp, in place */               \
      F inv = (F)(1 / sum);                                                                       \
      _Pragma("omp simd")                                                                         \
      for (int64_t j = 0; j < ni; j++) row[j] *= inv;                                             \
      for (int64_t j = ni; j < n; j++) row[j] = 0;                                                \
      L[i0 + r] = (F)(m + log(sum));                                                              \
    }                                                                                             \
  }                                                                                               \
  /* s [rows, n] += the mask's rows i0.. (its first n keys) */                                    \
  static void add_mask_##F(const sdpa_geom *g, const F *mk, F *s, int64_t n, int64_t i0, int64_t rows) { \
    for (int64_t r = 0; r < rows; r++)                                                            \
      for (int64_t j = 0; j < n; j++) s[r * n + j] += mk[(i0 + r) * g->S + j];                    \
  }                                                                                               \
  /* one block of query rows [i0, i0+rows) of one batch matrix (x: batch b's */ \
  /* matrix, row i at x + i * x.ld) */                                                            \
  static void fwd_block_##F(const sdpa_geom *g, const F *q, int64_t lq, const F *k, int64_t lk,   \
                            const F *v, int64_t lv, const F *mk, F *o, int64_t lo, F *L,          \
                            int64_t i0, int64_t rows, F *s) {                                     \
    int64_t n = g->causal ? min64(g->S, i0 + rows) : g->S;   /* keys any row here sees */         \
    if (n == 0) {                                                                                 \
      for (int64_t r = 0; r < rows; r++) {                                                        \
        memset(o + (i0 + r) * lo, 0, sizeof(F) * (size_t)g->DV);                                  \
        L[i0 + r] = -INFINITY;                                                                    \
      }                                                                                           \
      return;                                                                                     \
    }                                                                                             \
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)g->D, (F)g->scale,      \
         q + i0 * lq, ld(lq), k, ld(lk), 0, s, ld(n));                                            \
    if (mk) add_mask_##F(g, mk, s, n, i0, rows);                                                  \
    softmax_rows_##F(g, s, n, i0, rows, L);                                                       \
    if (g->DV)                                                                                    \
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)g->DV, (int)n, 1, s, ld(n), \
           v, ld(lv), 0, o + i0 * lo, ld(lo));                                                    \
  }                                                                                               \
  static int fwd_##F(const sdpa_geom *g, const sdpa_lay *q, const sdpa_lay *k, const sdpa_lay *v, \
                     const void *m, const sdpa_lay *o, F *L) {                                    \
    int64_t nblk = (g->T + kRows - 1) / kRows, tasks = g->B * nblk;                               \
    int64_t sn = min64(kRows, g->T) * (g->S > 0 ? g->S : 1);                                      \
    int failed = 0;                                                                               \
    _Pragma("omp parallel if (SDPA_PARALLEL && tasks > 1 && g->B * g->T * g->S * (g->D + g->DV) > NT_OMP_THRESHOLD)") \
    {                                                                                             \
      F *s = malloc(sizeof(F) * (size_t)sn);                                                      \
      if (!s) {                                                                                   \
        _Pragma("omp atomic write")                                                               \
        failed = 1;                                                                               \
      }                                                                                           \
      _Pragma("omp for schedule(dynamic)")                                                        \
      for (int64_t t = 0; t < tasks; t++) {                                                       \
        if (!s) continue;                                                                         \
        int64_t b = t / nblk, i0 = (t % nblk) * kRows;                                            \
        fwd_block_##F(g, (const F *)q->base + q->off[b], q->ld, (const F *)k->base + k->off[b], k->ld, \
                      (const F *)v->base + v->off[b], v->ld, MASK_OF(F, g, m, b),                 \
                      (F *)o->base + o->off[b], o->ld, L + b * g->T, i0, min64(kRows, g->T - i0), s); \
      }                                                                                           \
      free(s);                                                                                    \
    }                                                                                             \
    if (failed) { nt_error_oom(sizeof(F) * (size_t)sn); return -1; }                              \
    return 0;                                                                                     \
  }                                                                                               \
  /* one batch matrix (X, lX: its rows and their stride); dk, dv are accumulated (zeroed */       \
  /* here), dq written per block */                                                               \
  static void bwd_one_##F(const sdpa_geom *g, const F *q, int64_t lq, const F *k, int64_t lk,     \
                          const F *v, int64_t lv, const F *mk, const F *o, int64_t lo, const F *L, \
                          const F *dout, int64_t lg, F *dq, int64_t ldq, F *dk, int64_t ldk,      \
                          F *dv, int64_t ldv, F *p, F *dp) {                                      \
    int64_t D = g->D, DV = g->DV;                                                                 \
    for (int64_t j = 0; j < g->S; j++) {                                                          \
      memset(dk + j * ldk, 0, sizeof(F) * (size_t)D);                                             \
      memset(dv + j * ldv, 0, sizeof(F) * (size_t)DV);                                            \
    }                                                                                             \
    for (int64_t i0 = 0; i0 < g->T; i0 += kRows) {                                                \
      int64_t rows = min64(kRows, g->T - i0), n = g->causal ? min64(g->S, i0 + rows) : g->S;      \
      const F *qb = q + i0 * lq, *ob = o + i0 * lo, *gb = dout + i0 * lg;                          \
      if (n == 0) {                                                                               \
        for (int64_t r = 0; r < rows; r++) memset(dq + (i0 + r) * ldq, 0, sizeof(F) * (size_t)D); \
        continue;                                                                                 \
      }                                                                                           \
      /* P = exp(scale q k^F - L), unseen keys 0 */                                               \
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)D, (F)g->scale, qb,   \
           ld(lq), k, ld(lk), 0, p, ld(n));                                                       \
      if (mk) add_mask_##F(g, mk, p, n, i0, rows);                                                \
      for (int64_t r = 0; r < rows; r++) {                                                        \
        int64_t ni = min64(keys_seen(g, i0 + r), n);                                              \
        F *row = p + r * n, Li = L[i0 + r];                                                       \
        nn_expsum(row, row, ni, Li);                                                              \
        for (int64_t j = ni; j < n; j++) row[j] = 0;                                              \
      }                                                                                           \
      if (DV) {                                                                                   \
        /* dV[0:n] += P^F dO;  dP = dO V[0:n]^F */                                                \
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)DV, (int)rows, 1, p, ld(n), gb, \
             ld(lg), 1, dv, ld(ldv));                                                             \
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)DV, 1, gb, ld(lg),   \
             v, ld(lv), 0, dp, ld(n));                                                            \
      } else memset(dp, 0, sizeof(F) * (size_t)(rows * n));                                       \
      /* dS = P * (dP - D_i), in place in p */                                                    \
      for (int64_t r = 0; r < rows; r++) {                                                        \
        double Di = 0;   /* vectorised: a serial double sum was latency-bound */                  \
        const F *gr_ = gb + r * lg, *or_ = ob + r * lo;                                           \
        _Pragma("omp simd reduction(+:Di)")                                                       \
        for (int64_t c = 0; c < DV; c++) Di += (double)gr_[c] * or_[c];                           \
        F *row = p + r * n, *drow = dp + r * n;                                                   \
        for (int64_t j = 0; j < n; j++) row[j] = row[j] * (drow[j] - (F)Di);                      \
      }                                                                                           \
      /* dQ = scale dS K[0:n];  dK[0:n] += scale dS^F Q */                                        \
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)n, (F)g->scale, p,  \
           ld(n), k, ld(lk), 0, dq + i0 * ldq, ld(ldq));                                          \
      GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)D, (int)rows, (F)g->scale, p,    \
           ld(n), qb, ld(lq), 1, dk, ld(ldk));                                                    \
    }                                                                                             \
  }                                                                                               \
  /* y: the layouts of q, k, v, o, dout, dq, dk, dv */                                            \
  static int bwd_##F(const sdpa_geom *g, const nt_SdpaGrads *a, const sdpa_lay *y) {              \
    const F *L = (const F *)nt_base(a->lse);                                                      \
    int64_t sn = min64(kRows, g->T) * (g->S > 0 ? g->S : 1);                                      \
    int failed = 0;                                                                               \
    _Pragma("omp parallel if (SDPA_PARALLEL && g->B > 1 && g->B * g->T * g->S * (g->D + g->DV) > NT_OMP_THRESHOLD)") \
    {                                                                                             \
      F *p = malloc(sizeof(F) * (size_t)sn), *dp = malloc(sizeof(F) * (size_t)sn);                \
      if (!p || !dp) {                                                                            \
        _Pragma("omp atomic write")                                                               \
        failed = 1;                                                                               \
      }                                                                                           \
      _Pragma("omp for schedule(dynamic)")                                                        \
      for (int64_t b = 0; b < g->B; b++) {                                                        \
        if (!p || !dp) continue;                                                                  \
        bwd_one_##F(g, (const F *)y[0].base + y[0].off[b], y[0].ld, (const F *)y[1].base + y[1].off[b], y[1].ld, \
                    (const F *)y[2].base + y[2].off[b], y[2].ld,                                  \
                    MASK_OF(F, g, a->mask ? nt_base(a->mask) : NULL, b),                          \
                    (const F *)y[3].base + y[3].off[b], y[3].ld, L + b * g->T,                    \
                    (const F *)y[4].base + y[4].off[b], y[4].ld, (F *)y[5].base + y[5].off[b], y[5].ld, \
                    (F *)y[6].base + y[6].off[b], y[6].ld, (F *)y[7].base + y[7].off[b], y[7].ld, p, dp); \
      }                                                                                           \
      free(p); free(dp);                                                                          \
    }                                                                                             \
    if (failed) { nt_error_oom(2 * sizeof(F) * (size_t)sn); return -1; }                          \
    return 0;                                                                                     \
  }
SDPA_T(float, nt_blas()->sgemm)
SDPA_T(double, nt_blas()->dgemm)

static int k_sdpa(const nt_KernelArgs *a) {
  sdpa_geom g = geom_of(a);
  bool bwd = a->op == nn_ops.sdpa_bwd;
  const nt_SdpaGrads *gr = a->extra;
  nt_Tensor *ts[8] = {a->in[0], a->in[1], a->in[2], a->out};
  if (bwd) {
    nt_Tensor *tb[8] = {gr->q, gr->k, gr->v, gr->o, gr->dout, gr->dq, gr->dk, gr->dv};
    memcpy(ts, tb, sizeof ts);
  }
  nt_DType dt = ts[0]->dtype;
  if (dt != NT_F32 && dt != NT_F64)
    NT_FAIL("%s: unsupported dtype %s on cpu", bwd ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention",
            nt_dtype_name(dt));
  int nl = bwd ? 8 : 4;
  size_t per = (size_t)(g.B > 0 ? g.B : 1);
  int64_t *tab = malloc(sizeof(int64_t) * per * (size_t)nl);
  if (!tab) { nt_error_oom(sizeof(int64_t) * per * (size_t)nl); return -1; }
  sdpa_lay y[8];
  int rc = 0;
  for (int i = 0; i < nl && !rc; i++) rc = lay_of(ts[i], g.B, tab + per * (size_t)i, &y[i]);
  const void *mk = bwd || !g.mask_b ? NULL : nt_base(((const nt_SdpaExtra *)a->extra)->mask);
  if (!rc && a->niarg > NT_SDPA_DROPOUT && a->iarg[NT_SDPA_DROPOUT]) {   /* never a silent drop of dropout */
    nt_error_set("scaled_dot_product_attention: internal error: dropout reached the CPU kernel (the CPU composes it)");
    rc = -1;
  }
  if (!rc) {
    if (bwd) rc = dt == NT_F32 ? bwd_float(&g, gr, y) : bwd_double(&g, gr, y);
    else if (dt == NT_F32) rc = fwd_float(&g, &y[0], &y[1], &y[2], mk, &y[3], (float *)nt_base(a->in[3]));
    else rc = fwd_double(&g, &y[0], &y[1], &y[2], mk, &y[3], (double *)nt_base(a->in[3]));
  }
  free(tab);
  return rc;
}

/* Can the CPU kernel read t (the dtype dt, batch dims exactly `batch`) in
** place, as sdpa_lay: unit column stride, rows at least a row apart (a
** BLAS leading dimension), batch strides >= 0?  Then no copy is made. */
static bool view_ok(const nt_Tensor *t, nt_DType dt, const int64_t *batch, int nb) {
  if (t->dtype != dt || t->ndim != nb + 2 || memcmp(t->shape, batch, sizeof(int64_t) * (size_t)nb))
    return false;
  int64_t rows = t->shape[nb], cols = t->shape[nb + 1], rs = t->strides[nb];
  if (cols > 1 && t->strides[nb + 1] != 1) return false;
  if (rows > 1 && (rs < cols || rs < 1 || rs > INT32_MAX)) return false;
  for (int i = 0; i < nb; i++) if (t->strides[i] < 0) return false;
  return true;
}
static bool lay_ok(const nt_Tensor *t, nt_DType dt, const int64_t *batch, int nb) {
  return t->device == NT_CPU && view_ok(t, dt, batch, nb);
}

/* On CUDA, q, k, v views (1 or 2 batch dims, no mask: the heads of a packed qkv,
** permuted) are sent as they are: NT_SDPA_VIEWS (attention.h).  cuDNN's graph and
** the fused kernels and the cuBLAS path read them in place; a path that cannot
** (cuDNN without an engine for the graph, the cuBLAS one on empty views)
** returns 1 and the caller retries with contiguous copies. */
static bool cuda_views_ok(nt_Tensor *const *t, nt_DType dt, const int64_t *batch, int nb, bool mask) {
  if (t[0]->device != NT_CUDA || mask || nb < 1 || nb > 2) return false;
  for (int i = 0; i < 3; i++) if (!view_ok(t[i], dt, batch, nb)) return false;
  return true;
}

/* t as a contiguous [B, rows, cols] (the copy the kernels without view support read) */
static nt_Tensor *flat3(nt_Tensor *t, int64_t B) {
  int64_t s3[3] = {B, t->shape[t->ndim - 2], t->shape[t->ndim - 1]};
  nt_Tensor *c = nt_contiguous(t), *r = c ? nt_reshape(c, s3, 3) : NULL;
  nt_release(c);
  return r;
}

/* A fresh tensor of `shape` (ndim nd >= 2) whose dims lie in memory in the
** order of ref's strides (largest first, the last dim innermost): a permuted
** view of a contiguous one, contiguous when ref is.  The heads of a
** [B, T, H, hd] tensor seen as [B, H, T, hd] give an output (or gradient)
** laid out [B, T, H, hd], which the model's permute + reshape back to
** [B, T, H * hd] then takes without a copy. */
static nt_Tensor *empty_like_order(const int64_t *shape, int nd, const nt_Tensor *ref, nt_DType dt) {
  int order[NT_MAXDIM], pos[NT_MAXDIM];
  int64_t phys[NT_MAXDIM] = {0};
  bool ident = true;
  for (int i = 0; i < nd; i++) order[i] = i;
  for (int i = 1; i < nd - 1; i++)   /* stable insertion sort of dims 0..nd-2, strides descending */
    for (int j = i; j > 0 && ref->strides[order[j]] > ref->strides[order[j - 1]]; j--) {
      int tmp = order[j]; order[j] = order[j - 1]; order[j - 1] = tmp;
    }
  for (int j = 0; j < nd; j++) { phys[j] = shape[order[j]]; pos[order[j]] = j; ident &= order[j] == j; }
  nt_Tensor *t = nt_empty(phys, nd, dt, ref->device);
  if (!t || ident) return t;
  nt_Tensor *v = nt_permute(t, pos, nd);
  nt_release(t);
  return v;
}

/* ---- autograd ------------------------------------------------------------------ */
static int sdpa_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  /* saved: o, lse, then the mask (when iarg says one), then the dropout state */
  bool has_mask = nd->iarg[NT_SDPA_MASK] != 0, has_rng = nd->iarg[NT_SDPA_DROPOUT] != 0;
  nt_SdpaGrads gr = {.q = nd->in[0], .k = nd->in[1], .v = nd->in[2], .o = nd->saved[0], .lse = nd->saved[1],
                     .mask = has_mask ? nd->saved[2] : NULL, .rng = has_rng ? nd->saved[2 + has_mask] : NULL};
  nt_Tensor *gc = nt_to_dtype(gout, gr.q->dtype);
  int nb = gr.q->ndim - 2;
  bool cpu = gr.q->device == NT_CPU;
  gr.dout = !gc ? NULL : cpu && lay_ok(gc, gc->dtype, gr.q->shape, nb) ? nt_retain(gc) : nt_contiguous(gc);
  nt_release(gc);
  if (!gr.dout) return -1;
  bool views = !cpu && nd->iarg[NT_SDPA_VIEWS];
  if (views && gr.dout && !view_ok(gr.dout, gr.dout->dtype, gr.q->shape, nb)) {
    nt_Tensor *c = nt_contiguous(gr.dout);
    nt_release(gr.dout);
    if (!(gr.dout = c)) return -1;
  }
  if (cpu || views) {   /* these kernels write any sdpa_lay: grads laid out like their inputs */
    gr.dq = empty_like_order(gr.q->shape, gr.q->ndim, gr.q, gr.q->dtype);
    gr.dk = empty_like_order(gr.k->shape, gr.k->ndim, gr.k, gr.k->dtype);
    gr.dv = empty_like_order(gr.v->shape, gr.v->ndim, gr.v, gr.v->dtype);
  } else {
    gr.dq = nt_empty(gr.q->shape, 3, gr.q->dtype, gr.q->device);
    gr.dk = nt_empty(gr.k->shape, 3, gr.k->dtype, gr.k->device);
    gr.dv = nt_empty(gr.v->shape, 3, gr.v->dtype, gr.v->device);
  }
  nt_KernelArgs ka = {.op = nn_ops.sdpa_bwd, .extra = &gr, .s = {nd->s[0], nd->s[1]}, .niarg = NT_SDPA_NIARG};
  memcpy(ka.iarg, nd->iarg, NT_SDPA_NIARG * sizeof(int64_t));
  int rc = gr.dq && gr.dk && gr.dv ? 0 : -1;
  bool work = gr.q->numel || gr.k->numel || gr.v->numel;
  /* its inputs travel in `extra`: the dispatch cannot check them (textend.h nt_dev_check) */
  nt_Tensor *ins[8] = {gr.q, gr.k, gr.v, gr.o, gr.lse, gr.mask, gr.dout, gr.rng};
  for (int i = 0; i < 8 && !rc; i++) rc = nt_dev_check(ins[i], "scaled_dot_product_attention backward");
  if (!rc && work) rc = nt_dispatch(ka.op, gr.q->device, &ka);
  if (rc == 1 && views) {   /* cuDNN declined the views: contiguous copies, results reshaped back */
    int64_t B = nd->iarg[NT_SDPA_B];
    nt_SdpaGrads c = {.lse = gr.lse, .mask = gr.mask, .rng = gr.rng};
    nt_Tensor *own[8] = {c.q = flat3(gr.q, B), c.k = flat3(gr.k, B), c.v = flat3(gr.v, B), c.o = flat3(gr.o, B),
                         c.dout = flat3(gr.dout, B)};
    rc = c.q && c.k && c.v && c.o && c.dout ? 0 : -1;
    if (!rc) {
      own[5] = c.dq = nt_empty(c.q->shape, 3, c.q->dtype, c.q->device);
      own[6] = c.dk = nt_empty(c.k->shape, 3, c.k->dtype, c.k->device);
      own[7] = c.dv = nt_empty(c.v->shape, 3, c.v->dtype, c.v->device);
      ka.extra = &c;
      ka.iarg[NT_SDPA_VIEWS] = 0;
      rc = c.dq && c.dk && c.dv ? nt_dispatch(ka.op, gr.q->device, &ka) : -1;
    }
    nt_Tensor *r[3] = {NULL, NULL, NULL};
    if (!rc) {
      r[0] = nt_reshape(c.dq, gr.q->shape, gr.q->ndim); r[1] = nt_reshape(c.dk, gr.k->shape, gr.k->ndim);
      r[2] = nt_reshape(c.dv, gr.v->shape, gr.v->ndim);
      rc = r[0] && r[1] && r[2] ? 0 : -1;
    }
    for (int i = 0; i < 8; i++) nt_release(own[i]);
    nt_release(gr.dq); nt_release(gr.dk); nt_release(gr.dv);
    gr.dq = r[0]; gr.dk = r[1]; gr.dv = r[2];
  }
  nt_release(gr.dout);
  nt_Tensor *d[3] = {gr.dq, gr.dk, gr.dv};
  for (int i = 0; i < 3; i++) {
    if (rc || !nt_node_needs(nd, i)) { nt_release(d[i]); d[i] = NULL; }
    gin[i] = d[i];
  }
  return rc;
}

/* ---- front end ----------------------------------------------------------------- */
/* t (compute dtype dt) broadcast to batch + [rows, cols], flattened to
** contiguous [B, rows, cols]: all public ops, so autograd sees through it. */
static nt_Tensor *to_bmat(nt_Tensor *t, nt_DType dt, const int64_t *batch, int nb, int64_t B) {
  int64_t shp[NT_MAXDIM];
  memcpy(shp, batch, sizeof(int64_t) * (size_t)nb);
  shp[nb] = t->shape[t->ndim - 2];
  shp[nb + 1] = t->shape[t->ndim - 1];
  int64_t s3[3] = {B, shp[nb], shp[nb + 1]};
  nt_Tensor *c = nt_to_dtype(t, dt);
  nt_Tensor *e = c ? nt_expand(c, shp, nb + 2) : NULL;
  nt_Tensor *r = e ? nt_reshape(e, s3, 3) : NULL;
  nt_Tensor *out = r ? nt_contiguous(r) : NULL;
  nt_release(c); nt_release(e); nt_release(r);
  return out;
}

/* A mask as an additive one in dt: a bool mask is 0 where true (attend),
** -inf where false; a float mask is added as it is (torch's attn_mask). */
static nt_Tensor *mask_additive(nt_Tensor *m, nt_DType dt) {
  if (m->dtype != NT_BOOL) return nt_to_dtype(m, dt);
  nt_Tensor *z = nt_zeros(NULL, 0, dt, m->device), *ninf = nt_full(NULL, 0, -INFINITY, dt, m->device);
  nt_Tensor *r = z && ninf ? nt_where(m, z, ninf) : NULL;
  nt_release(z); nt_release(ninf);
  return r;
}

/* mask [..., T, S] (broadcast to batch + [T, S]) as the kernel's contiguous
** additive [mask_b, T, S]: mask_b = 1 when it is the same for every batch
** matrix (nothing is copied B times), else B */
static nt_Tensor *mask_bmat(const char *op, nt_Tensor *m, nt_DType dt, const int64_t *batch, int nb, int64_t B,
                            int64_t T, int64_t S, int64_t *mask_b) {
  int64_t full[NT_MAXDIM], bs[NT_MAXDIM];
  int nf;
  memcpy(full, batch, sizeof(int64_t) * (size_t)nb);
  full[nb] = T; full[nb + 1] = S;
  char a[128], b[128];
  if (m->ndim > nb + 2 || nt_broadcast_shapes(op, m->shape, m->ndim, full, nb + 2, bs, &nf) || nf != nb + 2 ||
      memcmp(bs, full, sizeof(int64_t) * (size_t)nf)) {
    nt_error_set("%s: the mask %s does not broadcast to the attention scores' shape %s", op,
                 nt_shape_str(m->shape, m->ndim, a, sizeof a), nt_shape_str(full, nb + 2, b, sizeof b));
    return NULL;
  }
  int64_t mb = 1;
  for (int i = 0; i + 2 < m->ndim; i++) mb *= m->shape[i];
  *mask_b = mb == 1 ? 1 : B;
  nt_Tensor *add = mask_additive(m, dt), *r = NULL;
  if (!add) return NULL;
  if (*mask_b == 1) {
    int64_t ts[2] = { m->ndim >= 2 ? m->shape[m->ndim - 2] : 1, m->ndim >= 1 ? m->shape[m->ndim - 1] : 1 };
    int64_t one[3] = {1, T, S};
    nt_Tensor *t2 = nt_reshape(add, ts, 2), *e = t2 ? nt_expand(t2, one + 1, 2) : NULL, *e3 = e ? nt_reshape(e, one, 3) : NULL;
    r = e3 ? nt_contiguous(e3) : NULL;
    nt_release(t2); nt_release(e); nt_release(e3);
  } else {
    int64_t s3[3] = {B, T, S};
    nt_Tensor *e = nt_expand(add, full, nb + 2), *e3 = e ? nt_reshape(e, s3, 3) : NULL;
    r = e3 ? nt_contiguous(e3) : NULL;
    nt_release(e); nt_release(e3);
  }
  nt_release(add);
  return r;
}

/* softmax(scale q k^T + mask) v with dropout on the probabilities, as plain
** differentiable ops (torch's math path): for dropout on the CPU, for a mask
** that requires grad, and for a mask or dropout on CUDA where cuDNN cannot run
** (the fused kernels take neither). */
static nt_Tensor *sdpa_composed(nt_Tensor *q, nt_Tensor *k, nt_Tensor *v, nt_Tensor *mask, bool causal, double scale, double dropout) {
  int64_t D = q->shape[q->ndim - 1], T = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2];
  if (scale != scale) scale = 1 / sqrt((double)D);
  nt_Tensor *kt = nt_transpose(k, k->ndim - 2, k->ndim - 1), *qk = kt ? nt_matmul(q, kt) : NULL;
  nt_Tensor *s = qk ? nt_binary_scalar_ex(NT_OP_MUL, qk, scale, NT_SCALAR_FLOAT) : NULL;
  nt_release(kt); nt_release(qk);
  if (s && causal) {
    nt_Tensor *ones = nt_full((int64_t[]){T, S}, 2, 1, NT_BOOL, s->device), *tri = ones ? nt_tril(ones, 0) : NULL;
    nt_Tensor *ninf = nt_full(NULL, 0, -INFINITY, s->dtype, s->device), *w = tri && ninf ? nt_where(tri, s, ninf) : NULL;
    nt_release(ones); nt_release(tri); nt_release(ninf); nt_release(s);
    s = w;
  }
  if (s && mask) {
    /* the mask broadcasts TO the scores (never widens them), as the fused path checks */
    int64_t bs[NT_MAXDIM]; int nbs;
    char a[128], b[128];
    if (mask->ndim > s->ndim || nt_broadcast_shapes("scaled_dot_product_attention", mask->shape, mask->ndim, s->shape, s->ndim, bs, &nbs) ||
        nbs != s->ndim || memcmp(bs, s->shape, sizeof(int64_t) * (size_t)nbs)) {
      nt_error_set("scaled_dot_product_attention: the mask %s does not broadcast to the attention scores' shape %s",
                   nt_shape_str(mask->shape, mask->ndim, a, sizeof a), nt_shape_str(s->shape, s->ndim, b, sizeof b));
      nt_release(s);
      return NULL;
    }
    nt_Tensor *add = mask_additive(mask, s->dtype), *w = add ? nt_add(s, add) : NULL;
    nt_release(add); nt_release(s);
    s = w;
  }
  nt_Tensor *p = s ? nt_softmax(s, -1) : NULL;
  nt_release(s);
  if (p && dropout > 0) { nt_Tensor *d = nt_dropout(p, dropout, true); nt_release(p); p = d; }
  nt_Tensor *o = p ? nt_matmul(p, v) : NULL;
  nt_release(p);
  return o;
}

/* the fused op; mask0: an additive or bool mask the CPU kernel applies, or NULL;
** dropout > 0 (CUDA only): cuDNN's graph drops out, else the composed ops do */
static nt_Tensor *sdpa_fused(nt_Tensor *q0, nt_Tensor *k0, nt_Tensor *v0, nt_Tensor *mask0, bool causal, double scale,
                             double dropout) {
  const char *op = "scaled_dot_product_attention";
  char sq[128], sk[128], sv[128];
  nt_Tensor *in0[3] = {q0, k0, v0};
  if (nt_check_same_device(op, 3, in0)) return NULL;
  for (int i = 0; i < 3; i++)
    if (!nt_dtype_is_float(in0[i]->dtype))
      NT_FAIL_NULL("%s: expected floating q, k and v, got %s, %s and %s", op, nt_dtype_name(q0->dtype),
                   nt_dtype_name(k0->dtype), nt_dtype_name(v0->dtype));
  if (q0->dtype != k0->dtype || q0->dtype != v0->dtype)
    NT_FAIL_NULL("%s: q, k and v must have the same dtype, got %s, %s and %s", op, nt_dtype_name(q0->dtype),
                 nt_dtype_name(k0->dtype), nt_dtype_name(v0->dtype));
  nt_shape_str(q0->shape, q0->ndim, sq, sizeof sq);
  nt_shape_str(k0->shape, k0->ndim, sk, sizeof sk);
  nt_shape_str(v0->shape, v0->ndim, sv, sizeof sv);
  if (q0->ndim < 2 || k0->ndim < 2 || v0->ndim < 2)
    NT_FAIL_NULL("%s: expected q [..., T, d], k [..., S, d] and v [..., S, dv] (at least 2-D), got q %s, k %s, v %s",
                 op, sq, sk, sv);
  int64_t D = q0->shape[q0->ndim - 1], T = q0->shape[q0->ndim - 2];
  int64_t S = k0->shape[k0->ndim - 2], DV = v0->shape[v0->ndim - 1];
  if (k0->shape[k0->ndim - 1] != D)
    NT_FAIL_NULL("%s: q and k need the same last dim d, got q %s and k %s", op, sq, sk);
  if (v0->shape[v0->ndim - 2] != S)
    NT_FAIL_NULL("%s: k and v need the same number of keys S (dim -2), got k %s and v %s", op, sk, sv);
  if (D == 0) NT_FAIL_NULL("%s: head dim d must be positive, got q %s", op, sq);
  if (T > INT32_MAX || S > INT32_MAX || D > INT32_MAX || DV > INT32_MAX)
    NT_FAIL_NULL("%s: a dimension is too large (T, S, d, dv must fit in 32 bits)", op);
  int64_t b1[NT_MAXDIM], batch[NT_MAXDIM];
  int n1, nb;
  if (nt_broadcast_shapes(op, q0->shape, q0->ndim - 2, k0->shape, k0->ndim - 2, b1, &n1) ||
      nt_broadcast_shapes(op, b1, n1, v0->shape, v0->ndim - 2, batch, &nb)) {
    nt_error_set("%s: the batch dims of q %s, k %s and v %s cannot broadcast", op, sq, sk, sv);
    return NULL;
  }
  int64_t B = nt_shape_numel(batch, nb);
  if (scale != scale) scale = 1 / sqrt((double)D);
  /* the CPU computes f16/bf16 in f32; CUDA reads them as they are */
  nt_DType dt = q0->device == NT_CPU && (q0->dtype == NT_F16 || q0->dtype == NT_BF16) ? NT_F32 : q0->dtype;
  /* strided CPU operands are read in place, and CUDA ones where cuDNN runs; others
  ** are copied to [B, rows, cols] */
  bool cviews = cuda_views_ok(in0, dt, batch, nb, mask0 != NULL);
  bool direct = cviews || (lay_ok(q0, dt, batch, nb) && lay_ok(k0, dt, batch, nb) && lay_ok(v0, dt, batch, nb));
  nt_Tensor *q, *k, *v, *o = NULL, *lse = NULL, *mask = NULL, *rng = NULL;
again:
  q = direct ? nt_retain(q0) : to_bmat(q0, dt, batch, nb, B);
  k = !q ? NULL : direct ? nt_retain(k0) : to_bmat(k0, dt, batch, nb, B);
  v = !k ? NULL : direct ? nt_retain(v0) : to_bmat(v0, dt, batch, nb, B);
  if (!v) goto done;
  int64_t mask_b = 0;
  if (mask0 && !(mask = mask_bmat(op, mask0, dt, batch, nb, B, T, S, &mask_b))) goto fail;
  if (direct) {
    int64_t os[NT_MAXDIM];
    memcpy(os, batch, sizeof(int64_t) * (size_t)nb);
    os[nb] = T; os[nb + 1] = DV;
    o = empty_like_order(os, nb + 2, q0, dt);
  } else o = nt_empty((int64_t[]){B, T, DV}, 3, dt, q->device);
  lse = nt_empty((int64_t[]){B, T}, 2, dt == NT_F64 ? NT_F64 : NT_F32, q->device);
  /* dropout: the graph draws at the generator's state (no advance until it ran) and
  ** writes the seed and offset it used into rng, which the backward reads again */
  uint64_t seed = 0, offset = 0;
  if (dropout > 0) {
    nt_rng_get_state(&seed, &offset);
    rng = nt_empty((int64_t[]){4}, 1, NT_I64, q->device);
  }
  if (!o || !lse || (dropout > 0 && !rng)) goto fail;
  nt_SdpaExtra ex = {.mask = mask, .rng = rng};
  nt_KernelArgs ka = {.op = nn_ops.sdpa, .out = o, .in = {q, k, v, lse}, .nin = 4, .extra = &ex, .s = {scale, dropout},
                      .iarg = {B, T, S, D, DV, causal, mask_b, cviews, dropout > 0, (int64_t)seed, (int64_t)offset,
                               mask0 && mask0->requires_grad},
                      .niarg = NT_SDPA_NIARG};
  if (nt_dev_check(mask, op)) goto fail;   /* in `extra`: the dispatch does not see it */
  int rc = B * T > 0 ? nt_dispatch(ka.op, q->device, &ka) : 0;
  if (rc == 1 && cviews) {   /* cuDNN declined the views: again with contiguous copies */
    nt_release(q); nt_release(k); nt_release(v); nt_release(o); nt_release(lse); nt_release(mask); nt_release(rng);
    o = lse = mask = rng = NULL;
    cviews = direct = false;
    goto again;
  }
  if (rc == 1 && (mask || dropout > 0)) {   /* CUDA: only cuDNN's graph adds a mask or drops out; where it cannot, the composed ops */
    nt_release(q); nt_release(k); nt_release(v); nt_release(o); nt_release(lse); nt_release(mask); nt_release(rng);
    return sdpa_composed(q0, k0, v0, mask0, causal, scale, dropout);
  }
  if (rc) goto fail;
  /* the graph drew B*T*S numbers: the generator moves on as the composed dropout's would */
  if (dropout > 0) nt_rng_advance(((uint64_t)B * (uint64_t)T * (uint64_t)S + 3) / 4);
  nt_Node *nd;
  o = nn_finish(o, "ScaledDotProductAttentionBackward", sdpa_backward, 3, (nt_Tensor *[]){q, k, v}, &nd);
  if (o && nd) {
    memcpy(nd->iarg, ka.iarg, NT_SDPA_NIARG * sizeof(int64_t));
    nd->niarg = NT_SDPA_NIARG;
    nd->s[0] = scale;
    nd->s[1] = dropout;
    if (nt_node_save(nd, o) < 0 || nt_node_save(nd, lse) < 0 || (mask && nt_node_save(nd, mask) < 0) ||
        (rng && nt_node_save(nd, rng) < 0))
      goto fail;
  }
  if (o && !direct) {   /* [B, T, DV] -> batch + [T, DV] (a view; differentiable) */
    batch[nb] = T; batch[nb + 1] = DV;
    nt_Tensor *r = nt_reshape(o, batch, nb + 2);
    nt_release(o);
    o = r;
  }
  goto done;
fail:
  nt_release(o); o = NULL;
done:
  nt_release(q); nt_release(k); nt_release(v); nt_release(lse); nt_release(mask); nt_release(rng);
  return nn_cast_back(o, q0->dtype);
}


nt_Tensor *nt_sdpa(nt_Tensor *q, nt_Tensor *k, nt_Tensor *v, nt_Tensor *mask, bool causal, double scale, double dropout) {
  const char *op = "scaled_dot_product_attention";
  nt_nn_init();
  if (mask && causal) NT_FAIL_NULL("%s: give either a mask or causal=true, not both (as torch)", op);
  if (!(dropout >= 0 && dropout < 1)) NT_FAIL_NULL("%s: dropout must be in [0, 1), got %g", op, dropout);
  if (mask && mask->dtype != NT_BOOL && !nt_dtype_is_float(mask->dtype))
    NT_FAIL_NULL("%s: the mask must be bool (true = attend) or floating (added to the scores), got %s", op, nt_dtype_name(mask->dtype));
  if (mask && mask->device != q->device)
    NT_FAIL_NULL("%s: expected all tensors on the same device, got %s and %s", op, nt_device_name(q->device), nt_device_name(mask->device));
  /* a mask or dropout on CUDA goes to the fused op: cuDNN's graph adds it / drops out,
  ** or the op composes (with the reason in cuda.attention_backend()) */
  if (q->device != NT_CUDA && (dropout > 0 || (mask && mask->requires_grad))) {
    nt_Tensor *in0[3] = {q, k, v};
    if (nt_check_same_device(op, 3, in0)) return NULL;
    NT_AUTOCAST(NT_AUTOCAST_LOW, sdpa_composed(ac_[0], ac_[1], ac_[2], mask, causal, scale, dropout), q, k, v);
    return sdpa_composed(q, k, v, mask, causal, scale, dropout);
  }
  /* autocast: runs in the low dtype, like matmul (torch's lower-precision list) */
  NT_AUTOCAST(NT_AUTOCAST_LOW, sdpa_fused(ac_[0], ac_[1], ac_[2], mask, causal, scale, dropout), q, k, v);
  return sdpa_fused(q, k, v, mask, causal, scale, dropout);
}

nt_Tensor *nt_scaled_dot_product_attention(nt_Tensor *q, nt_Tensor *k, nt_Tensor *v, bool causal, double scale) {
  return nt_sdpa(q, k, v, NULL, causal, scale, 0);
}

/* ---- attention_qkv: attention over a packed qkv ---------------------------------------- */
/* The heads of columns [col0, col0 + H hd) of x [B, T, W] (unit column stride) as the
** view [B, H, T, hd] of the same memory: no copy, no autograd (a raw view for the kernel). */
static nt_Tensor *heads_view(nt_Tensor *x, int64_t col0, int64_t H, int64_t hd) {
  nt_Tensor *v = nt_view_of(x);
  if (!v) return NULL;
  int64_t s0 = x->strides[0], s1 = x->strides[1];
  v->ndim = 4;
  v->shape[0] = x->shape[0]; v->shape[1] = H; v->shape[2] = x->shape[1]; v->shape[3] = hd;
  v->strides[0] = s0; v->strides[1] = hd; v->strides[2] = s1; v->strides[3] = 1;
  v->offset += col0;
  nt_update_meta(v);
  return v;
}

/* A [B, T, W] tensor whose heads views the kernels take (unit column stride, rows at
** least W apart, batch stride >= 0): else a contiguous copy.  New reference. */
static nt_Tensor *packed_ok(nt_Tensor *x) {
  int64_t T = x->shape[1], W = x->shape[2];
  bool ok = (W <= 1 || x->strides[2] == 1) && (T <= 1 || x->strides[1] >= W) && x->strides[0] >= 0;
  return ok ? nt_retain(x) : nt_contiguous(x);
}

/* geometry in the node: iarg = the sdpa kernel's (B = batch * heads) + heads */
enum { QKV_HEADS = NT_SDPA_NIARG, QKV_NIARG };

/* the kernel on q, k, v (and O / dO, dq, dk, dv) given as [B, H, T, hd] views, or, when
** the CUDA path declines views (1), on contiguous copies whose results are copied into
** the views: the one place both directions fall back */
static int qkv_dispatch(nt_KernelArgs *ka, bool bwd) {
  int rc = nt_dispatch(ka->op, bwd ? ((nt_SdpaGrads *)ka->extra)->q->device : ka->out->device, ka);
  if (rc != 1) return rc;
  int64_t B = ka->iarg[NT_SDPA_B];
  ka->iarg[NT_SDPA_VIEWS] = 0;
  if (!bwd) {
    nt_Tensor *q = flat3(ka->in[0], B), *k = q ? flat3(ka->in[1], B) : NULL, *v = k ? flat3(ka->in[2], B) : NULL;
    nt_Tensor *ov = ka->out, *o = v ? nt_empty((int64_t[]){B, ov->shape[2], ov->shape[3]}, 3, ov->dtype, ov->device) : NULL;
    nt_Tensor *o4 = NULL;
    rc = o ? 0 : -1;
    if (!rc) {
      nt_KernelArgs c = *ka;
      c.out = o; c.in[0] = q; c.in[1] = k; c.in[2] = v;
      rc = nt_dispatch(c.op, o->device, &c);
    }
    if (!rc) rc = (o4 = nt_reshape(o, ov->shape, 4)) ? nt_copy_(ov, o4) : -1;
    nt_release(q); nt_release(k); nt_release(v); nt_release(o); nt_release(o4);
    return rc;
  }
  nt_SdpaGrads *g = ka->extra, c = {.lse = g->lse};
  nt_Tensor *own[8] = {c.q = flat3(g->q, B), c.k = flat3(g->k, B), c.v = flat3(g->v, B), c.o = flat3(g->o, B),
                       c.dout = flat3(g->dout, B)};
  rc = c.q && c.k && c.v && c.o && c.dout ? 0 : -1;
  if (!rc) {
    own[5] = c.dq = nt_empty(c.q->shape, 3, c.q->dtype, c.q->device);
    own[6] = c.dk = nt_empty(c.k->shape, 3, c.k->dtype, c.k->device);
    own[7] = c.dv = nt_empty(c.v->shape, 3, c.v->dtype, c.v->device);
    nt_KernelArgs cb = *ka;
    cb.extra = &c;
    rc = c.dq && c.dk && c.dv ? nt_dispatch(cb.op, c.q->device, &cb) : -1;
  }
  nt_Tensor *src[3] = {c.dq, c.dk, c.dv}, *dst[3] = {g->dq, g->dk, g->dv};
  for (int i = 0; i < 3 && !rc; i++) {
    nt_Tensor *r = nt_reshape(src[i], dst[i]->shape, 4);
    rc = r ? nt_copy_(dst[i], r) : -1;
    nt_release(r);
  }
  for (int i = 0; i < 8; i++) nt_release(own[i]);
  return rc;
}

static int qkv_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_Tensor *qkv = nd->in[0];
  int64_t H = nd->iarg[QKV_HEADS], hd = nd->iarg[NT_SDPA_D], C = H * hd;
  nt_Tensor *gc = nt_to_dtype(gout, qkv->dtype), *g = gc ? packed_ok(gc) : NULL;
  nt_release(gc);
  nt_Tensor *dqkv = g ? nt_empty(qkv->shape, 3, qkv->dtype, qkv->device) : NULL;
  nt_SdpaGrads gr = {.lse = nd->saved[1]};
  nt_Tensor *own[8] = {0};
  int rc = dqkv ? 0 : -1;
  if (!rc) {
    own[0] = gr.q = heads_view(qkv, 0, H, hd); own[1] = gr.k = heads_view(qkv, C, H, hd);
    own[2] = gr.v = heads_view(qkv, 2 * C, H, hd); own[3] = gr.o = heads_view(nd->saved[0], 0, H, hd);
    own[4] = gr.dout = heads_view(g, 0, H, hd); own[5] = gr.dq = heads_view(dqkv, 0, H, hd);
    own[6] = gr.dk = heads_view(dqkv, C, H, hd); own[7] = gr.dv = heads_view(dqkv, 2 * C, H, hd);
    for (int i = 0; i < 8; i++) if (!own[i]) rc = -1;
  }
  nt_KernelArgs ka = {.op = nn_ops.sdpa_bwd, .extra = &gr, .s = {nd->s[0]}, .niarg = NT_SDPA_NIARG};
  memcpy(ka.iarg, nd->iarg, NT_SDPA_NIARG * sizeof(int64_t));
  nt_Tensor *ins[5] = {qkv, nd->saved[0], gr.lse, g};
  for (int i = 0; i < 4 && !rc; i++) rc = nt_dev_check(ins[i], "attention_qkv backward");
  if (!rc && dqkv->numel) rc = qkv_dispatch(&ka, true);
  for (int i = 0; i < 8; i++) nt_release(own[i]);
  nt_release(g);
  if (rc) { nt_release(dqkv); dqkv = NULL; }
  gin[0] = dqkv;
  return rc;
}

static nt_Tensor *qkv_op(nt_Tensor *qkv, int64_t heads, bool causal, double scale);

nt_Tensor *nt_attention_qkv(nt_Tensor *qkv, int64_t heads, bool causal, double scale) {
  const char *op = "attention_qkv";
  char sh[128];
  nt_nn_init();
  nt_shape_str(qkv->shape, qkv->ndim, sh, sizeof sh);
  if (qkv->ndim != 3) NT_FAIL_NULL("%s: expected the packed qkv [B, T, 3C], got %s", op, sh);
  if (!nt_dtype_is_float(qkv->dtype)) NT_FAIL_NULL("%s: expected a floating qkv, got %s", op, nt_dtype_name(qkv->dtype));
  if (heads < 1) NT_FAIL_NULL("%s: heads must be positive, got %lld", op, (long long)heads);
  int64_t T = qkv->shape[1], W = qkv->shape[2];
  if (W == 0 || W % (3 * heads))
    NT_FAIL_NULL("%s: the last dim of qkv %s must be 3 * heads * head_dim with head_dim >= 1 (heads = %lld)", op, sh,
                 (long long)heads);
  int64_t C = W / 3, hd = C / heads;
  if (T > INT32_MAX || hd > INT32_MAX) NT_FAIL_NULL("%s: a dimension of qkv %s is too large (T and the head dim must fit in 32 bits)", op, sh);
  if (scale != scale) scale = 1 / sqrt((double)hd);
  /* autocast: the low dtype, as scaled_dot_product_attention */
  NT_AUTOCAST(NT_AUTOCAST_LOW, qkv_op(ac_[0], heads, causal, scale), qkv);
  return qkv_op(qkv, heads, causal, scale);
}

/* the op on a checked qkv (autocast done); recurses at most twice (f32, then packed) */
static nt_Tensor *qkv_op(nt_Tensor *qkv, int64_t heads, bool causal, double scale) {
  int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hd = C / heads;
  if (qkv->device == NT_CPU && qkv->dtype != NT_F32 && qkv->dtype != NT_F64) {   /* the CPU computes f16/bf16 in f32 */
    nt_Tensor *c = nt_to_dtype(qkv, NT_F32), *r = c ? qkv_op(c, heads, causal, scale) : NULL;
    nt_release(c);
    return nn_cast_back(r, qkv->dtype);
  }
  nt_Tensor *x = packed_ok(qkv);
  if (!x) return NULL;
  if (x != qkv) {   /* a contiguous copy (differentiable): the op on it */
    nt_Tensor *r = qkv_op(x, heads, causal, scale);
    nt_release(x);
    return r;
  }
  nt_release(x);
  nt_DType dt = qkv->dtype;
  nt_Tensor *o = nt_empty((int64_t[]){B, T, C}, 3, dt, qkv->device);
  nt_Tensor *lse = nt_empty((int64_t[]){B * heads, T}, 2, dt == NT_F64 ? NT_F64 : NT_F32, qkv->device);
  nt_Tensor *v[4] = {0};
  int rc = o && lse ? 0 : -1;
  if (!rc) {
    v[0] = heads_view(qkv, 0, heads, hd); v[1] = heads_view(qkv, C, heads, hd);
    v[2] = heads_view(qkv, 2 * C, heads, hd); v[3] = heads_view(o, 0, heads, hd);
    for (int i = 0; i < 4; i++) if (!v[i]) rc = -1;
  }
  nt_KernelArgs ka = {.op = nn_ops.sdpa, .out = v[3], .in = {v[0], v[1], v[2], lse}, .nin = 4, .s = {scale},
                      .iarg = {B * heads, T, T, hd, hd, causal, 0, qkv->device == NT_CUDA}, .niarg = NT_SDPA_NIARG};
  if (!rc && B * T > 0) rc = qkv_dispatch(&ka, false);
  for (int i = 0; i < 4; i++) nt_release(v[i]);
  nt_Node *nd = NULL;
  if (!rc) o = nn_finish(o, "AttentionQkvBackward", qkv_backward, 1, &qkv, &nd);
  else { nt_release(o); o = NULL; }
  if (o && nd) {
    memcpy(nd->iarg, ka.iarg, NT_SDPA_NIARG * sizeof(int64_t));
    nd->iarg[NT_SDPA_VIEWS] = qkv->device == NT_CUDA;
    nd->iarg[QKV_HEADS] = heads;
    nd->niarg = QKV_NIARG;
    nd->s[0] = scale;
    if (nt_node_save(nd, o) < 0 || nt_node_save(nd, lse) < 0) { nt_release(o); o = NULL; }
  }
  nt_release(lse);
  return o;
}

void nn_register_attention(void) {
  nn_ops.sdpa = nt_op_register("scaled_dot_product_attention");
  nn_ops.sdpa_bwd = nt_op_register("scaled_dot_product_attention_backward");
  nt_register_kernel(nn_ops.sdpa, NT_CPU, k_sdpa);
  nt_register_kernel(nn_ops.sdpa_bwd, NT_CPU, k_sdpa);
}
