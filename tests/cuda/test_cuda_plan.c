/*
** test_cuda_plan.c — the CUDA module's host-side decisions, on any machine
** (cuda/plan.h is plain C shared with the module):
**  - GEMM plans: which cuBLAS call a matmul becomes (one GEMM with the batch
**    folded into the rows, strided-batched, or a loop), checked by shape and
**    by EXECUTING each plan on random data with a column-major reference
**    GEMM that takes exactly cuBLAS's arguments, against a plain matmul;
**  - the per-launch choice of 32-bit index math for strided kernels;
**  - the wording of CUDA fault reports (an earlier kernel's fault is never
**    blamed on the op being launched; the user is told the context is lost);
**  - NABLA_CUDA_SYNC parsing by the loader (in a child process: the loader
**    runs once per process).
** One line per test: PASS/FAIL; exit status 1 if anything failed.
*/
#include "cuda/plan.h"
#include "tensor/tdevice.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <sys/wait.h>

static int n_pass, n_fail;
static char why[2048];

#define FAILF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return 0; } while (0)
#define EXPECT(c, ...) do { if (!(c)) FAILF(__VA_ARGS__); } while (0)
#define TEST(name) static int test_##name(void)
#define RUN(name) do { why[0] = 0; if (test_##name()) { printf("PASS: %s\n", #name); n_pass++; } \
                       else { printf("FAIL: %s: %s\n", #name, why); n_fail++; } fflush(stdout); } while (0)

/* ---- a strided matmul problem on the host -------------------------------------- */
typedef struct Prob {
  int nd;
  int64_t shape[NCP_MAXDIM];             /* out's shape [B.., M, N] */
  int64_t M, N, K;
  int64_t as[NCP_MAXDIM], bs[NCP_MAXDIM]; /* a's / b's strides over out's dims (batch broadcast = 0) */
  double *a, *b;                          /* storages, large enough for the strides */
  size_t alen, blen;
} Prob;

static double urand(void) { return (double)rand() / RAND_MAX * 2 - 1; }

static size_t span(int nd, const int64_t *shape, const int64_t *st, int64_t rows, int64_t cols) {
  int64_t off = 0;
  for (int d = 0; d < nd - 2; d++) off += (shape[d] - 1) * st[d];
  off += (rows - 1) * st[nd - 2] + (cols - 1) * st[nd - 1];
  return (size_t)off + 1;
}

static void prob_fill(Prob *p) {
  p->alen = span(p->nd, p->shape, p->as, p->M, p->K);
  p->blen = span(p->nd, p->shape, p->bs, p->K, p->N);
  p->a = malloc(p->alen * sizeof(double));
  p->b = malloc(p->blen * sizeof(double));
  for (size_t i = 0; i < p->alen; i++) p->a[i] = urand();
  for (size_t i = 0; i < p->blen; i++) p->b[i] = urand();
}

static int64_t batch_count(const Prob *p) {
  int64_t n = 1;
  for (int d = 0; d < p->nd - 2; d++) n *= p->shape[d];
  return n;
}

static int64_t boff(const Prob *p, const int64_t *st, int64_t bi) {
  int64_t off = 0;
  for (int d = p->nd - 3; d >= 0; d--) { off += bi % p->shape[d] * st[d]; bi /= p->shape[d]; }
  return off;
}

/* the plain definition: out[bi, i, j] = sum_k a[bi, i, k] b[bi, k, j] */
static void reference(const Prob *p, double *out) {
  int64_t nb = batch_count(p);
  for (int64_t bi = 0; bi < nb; bi++)
    for (int64_t i = 0; i < p->M; i++)
      for (int64_t j = 0; j < p->N; j++) {
        double s = 0;
        const double *pa = p->a + boff(p, p->as, bi), *pb = p->b + boff(p, p->bs, bi);
        for (int64_t k = 0; k < p->K; k++) s += pa[i * p->as[p->nd - 2] + k * p->as[p->nd - 1]] * pb[k * p->bs[p->nd - 2] + j * p->bs[p->nd - 1]];
        out[(bi * p->M + i) * p->N + j] = s;
      }
}

/* cublasGemmEx's contract, column-major: C[m x n] = op(A)[m x k] op(B)[k x n] */
static void gemm_colmajor(int opA, int opB, int64_t m, int64_t n, int64_t k, const double *A, int64_t lda,
                          const double *B, int64_t ldb, double *C, int64_t ldc) {
  for (int64_t c = 0; c < n; c++)
    for (int64_t r = 0; r < m; r++) {
      double s = 0;
      for (int64_t q = 0; q < k; q++) {
        double x = opA == NCP_OP_N ? A[r + q * lda] : A[q + r * lda];
        double y = opB == NCP_OP_N ? B[q + c * ldb] : B[c + q * ldb];
        s += x * y;
      }
      C[r + c * ldc] = s;
    }
}

/* runs the plan exactly as matmul.cu's k_matmul calls cuBLAS ("A" := b, "B" := a) */
static void execute(const Prob *p, const ncp_GemmPlan *pl, double *out) {
  int64_t M = p->M, N = p->N, K = p->K, nb = batch_count(p);
  if (pl->kind == NCP_GEMM_ONE)
    gemm_colmajor(pl->b.op, pl->a.op, N, pl->m, K, p->b, pl->b.ld, p->a, pl->a.ld, out, N);
  else if (pl->kind == NCP_GEMM_STRIDED)
    for (int64_t bi = 0; bi < nb; bi++)
      gemm_colmajor(pl->b.op, pl->a.op, N, M, K, p->b + bi * pl->b.bstride, pl->b.ld, p->a + bi * pl->a.bstride, pl->a.ld,
                    out + bi * M * N, N);
  else
    for (int64_t bi = 0; bi < nb; bi++)
      gemm_colmajor(pl->b.op, pl->a.op, N, M, K, p->b + boff(p, p->bs, bi), pl->b.ld, p->a + boff(p, p->as, bi), pl->a.ld,
                    out + bi * M * N, N);
}

/* plans p, checks the kind, executes it and compares with the reference */
static int check_plan(Prob *p, int want_kind, int64_t want_m, const char *what) {
  ncp_GemmPlan pl = ncp_gemm_plan(p->nd, p->shape, p->M, p->N, p->K, p->as, p->bs);
  prob_fill(p);
  int ok = 1;
  if (pl.pack_a || pl.pack_b) { snprintf(why, sizeof why, "%s: unexpected packing (a %d, b %d)", what, pl.pack_a, pl.pack_b); ok = 0; }
  else if (pl.kind != want_kind) { snprintf(why, sizeof why, "%s: plan kind %d, expected %d", what, pl.kind, want_kind); ok = 0; }
  else if (want_m && pl.m != want_m) { snprintf(why, sizeof why, "%s: GEMM rows %lld, expected %lld", what, (long long)pl.m, (long long)want_m); ok = 0; }
  if (ok) {
    size_t n = (size_t)(batch_count(p) * p->M * p->N);
    double *r = malloc(n * sizeof(double)), *o = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) o[i] = NAN;
    reference(p, r);
    execute(p, &pl, o);
    for (size_t i = 0; ok && i < n; i++)
      if (!(fabs(o[i] - r[i]) <= 1e-12 * (1 + fabs(r[i])))) {
        snprintf(why, sizeof why, "%s: element %zu: plan gives %.17g, matmul %.17g", what, i, o[i], r[i]);
        ok = 0;
      }
    free(r); free(o);
  }
  free(p->a); free(p->b);
  return ok;
}

#define SET(arr, ...) do { const int64_t v_[] = { __VA_ARGS__ }; memcpy(arr, v_, sizeof v_); } while (0)

TEST(gemm_plan_contiguous_2d) {
  Prob p = { .nd = 2, .M = 5, .N = 7, .K = 3 };
  SET(p.shape, 5, 7); SET(p.as, 3, 1); SET(p.bs, 7, 1);
  return check_plan(&p, NCP_GEMM_ONE, 5, "a[5,3] @ b[3,7]");
}

TEST(gemm_plan_transposed_operands) {
  Prob p = { .nd = 2, .M = 4, .N = 6, .K = 5 };
  SET(p.shape, 4, 6); SET(p.as, 1, 4); SET(p.bs, 1, 5);     /* x.T @ y.T: unit row strides */
  ncp_GemmPlan pl = ncp_gemm_plan(p.nd, p.shape, p.M, p.N, p.K, p.as, p.bs);
  EXPECT(pl.a.op == NCP_OP_T && pl.b.op == NCP_OP_T && pl.a.ld == 4 && pl.b.ld == 5,
         "ops %d %d, lds %lld %lld: expected T, T, 4, 5", pl.a.op, pl.b.op, (long long)pl.a.ld, (long long)pl.b.ld);
  return check_plan(&p, NCP_GEMM_ONE, 4, "x.T @ y.T");
}

/* x[B,T,K] @ w[K,N]: ONE GEMM of [B*T, K] @ [K, N] (the case) */
TEST(gemm_plan_fold_rows) {
  Prob p = { .nd = 3, .M = 5, .N = 4, .K = 6 };
  SET(p.shape, 3, 5, 4); SET(p.as, 30, 6, 1); SET(p.bs, 0, 4, 1);
  if (!check_plan(&p, NCP_GEMM_ONE, 15, "x[3,5,6] @ w[6,4]")) return 0;
  Prob q = { .nd = 4, .M = 3, .N = 2, .K = 5 };             /* x[B,H,T,K] @ w[K,N] */
  SET(q.shape, 2, 4, 3, 2); SET(q.as, 60, 15, 5, 1); SET(q.bs, 0, 0, 2, 1);
  if (!check_plan(&q, NCP_GEMM_ONE, 24, "x[2,4,3,5] @ w[5,2]")) return 0;
  Prob r = { .nd = 3, .M = 1, .N = 3, .K = 4 };             /* one row per batch, rows 9 apart */
  SET(r.shape, 6, 1, 3); SET(r.as, 9, 4, 1); SET(r.bs, 0, 3, 1);
  if (!check_plan(&r, NCP_GEMM_ONE, 6, "x[6,1,4] (row stride 9) @ w[4,3]")) return 0;
  Prob s = { .nd = 3, .M = 5, .N = 4, .K = 6 };             /* rows padded to 8: still one progression */
  SET(s.shape, 3, 5, 4); SET(s.as, 40, 8, 1); SET(s.bs, 0, 4, 1);
  return check_plan(&s, NCP_GEMM_ONE, 15, "x[3,5,6] (row stride 8) @ w[6,4]");
}

TEST(gemm_plan_strided_batched) {
  Prob p = { .nd = 3, .M = 4, .N = 3, .K = 5 };             /* both batched, contiguous */
  SET(p.shape, 6, 4, 3); SET(p.as, 20, 5, 1); SET(p.bs, 15, 3, 1);
  if (!check_plan(&p, NCP_GEMM_STRIDED, 0, "a[6,4,5] @ b[6,5,3]")) return 0;
  Prob q = { .nd = 3, .M = 4, .N = 3, .K = 5 };             /* a broadcast, b batched */
  SET(q.shape, 6, 4, 3); SET(q.as, 0, 5, 1); SET(q.bs, 15, 3, 1);
  if (!check_plan(&q, NCP_GEMM_STRIDED, 0, "a[4,5] @ b[6,5,3]")) return 0;
  Prob r = { .nd = 3, .M = 4, .N = 3, .K = 5 };             /* a transposed per batch, w shared: no fold */
  SET(r.shape, 6, 4, 3); SET(r.as, 20, 1, 4); SET(r.bs, 0, 3, 1);
  if (!check_plan(&r, NCP_GEMM_STRIDED, 0, "x.mT[6,4,5] @ w[5,3]")) return 0;
  Prob s = { .nd = 4, .M = 2, .N = 3, .K = 4 };             /* two batch dims in one progression */
  SET(s.shape, 3, 5, 2, 3); SET(s.as, 40, 8, 4, 1); SET(s.bs, 60, 12, 3, 1);
  return check_plan(&s, NCP_GEMM_STRIDED, 0, "a[3,5,2,4] @ b[3,5,4,3]");
}

TEST(gemm_plan_non_collapsible_batch) {
  /* a's batch dims permuted ([B2,B1,M,K] storage viewed as [B1,B2,M,K]): no single stride */
  Prob p = { .nd = 4, .M = 3, .N = 2, .K = 4 };
  SET(p.shape, 2, 5, 3, 2); SET(p.as, 12, 24, 4, 1); SET(p.bs, 40, 8, 2, 1);
  return check_plan(&p, NCP_GEMM_LOOP, 0, "permuted batch dims");
}

TEST(gemm_plan_packs_what_cublas_cannot_read) {
  int64_t shape[2] = { 4, 3 }, as[2] = { 10, 2 }, bs[2] = { 3, 1 };   /* a: every other column */
  ncp_GemmPlan pl = ncp_gemm_plan(2, shape, 4, 3, 5, as, bs);
  EXPECT(pl.pack_a && !pl.pack_b, "pack a %d b %d, expected 1 0", pl.pack_a, pl.pack_b);
  int64_t shape3[3] = { 2, 4, 3 }, as3[3] = { 20, 5, 1 }, bs3[3] = { 0, 6, 2 };
  pl = ncp_gemm_plan(3, shape3, 4, 3, 5, as3, bs3);
  EXPECT(!pl.pack_a && pl.pack_b, "pack a %d b %d, expected 0 1", pl.pack_a, pl.pack_b);
  return 1;
}

/* random shapes and layouts: whatever the plan, executing it equals matmul */
TEST(gemm_plan_random_layouts) {
  int seen[3] = { 0, 0, 0 }, folded = 0;
  for (int trial = 0; trial < 400; trial++) {
    Prob p;
    memset(&p, 0, sizeof p);
    p.nd = 2 + rand() % 3;
    p.M = 1 + rand() % 4; p.N = 1 + rand() % 4; p.K = 1 + rand() % 4;
    for (int d = 0; d < p.nd - 2; d++) p.shape[d] = 1 + rand() % 3;
    p.shape[p.nd - 2] = p.M; p.shape[p.nd - 1] = p.N;
    /* matrix layouts: row-major, transposed or padded; batch: contiguous, broadcast or padded */
    for (int w = 0; w < 2; w++) {
      int64_t R = w ? p.K : p.M, C = w ? p.N : p.K, *st = w ? p.bs : p.as;
      int64_t pad = rand() % 2;
      if (rand() % 2) { st[p.nd - 2] = C + pad; st[p.nd - 1] = 1; }
      else { st[p.nd - 2] = 1; st[p.nd - 1] = R + pad; }
      int64_t next = R * C + pad * (R > C ? R : C) + rand() % 3;
      for (int d = p.nd - 3; d >= 0; d--) {
        if (rand() % 4 == 0) st[d] = 0;
        else { st[d] = next; next *= p.shape[d]; }
      }
    }
    char what[64];
    snprintf(what, sizeof what, "trial %d", trial);
    ncp_GemmPlan pl = ncp_gemm_plan(p.nd, p.shape, p.M, p.N, p.K, p.as, p.bs);
    if (pl.pack_a || pl.pack_b) continue;   /* packing makes a contiguous copy: planned again in the module */
    if (!check_plan(&p, pl.kind, 0, what)) return 0;
    seen[pl.kind]++;
    if (pl.kind == NCP_GEMM_ONE && batch_count(&p) > 1) folded++;
  }
  EXPECT(seen[NCP_GEMM_ONE] && seen[NCP_GEMM_STRIDED] && seen[NCP_GEMM_LOOP] && folded,
         "the random layouts did not reach every plan (one %d of which folded %d, strided %d, loop %d)", seen[0], folded, seen[1], seen[2]);
  return 1;
}

/* ---- 32-bit index math ------------------------------------------------------------- */
TEST(index32_choice) {
  int64_t shape[NCP_MAXDIM] = { 1000, 1000 };
  int64_t st[2][NCP_MAXDIM] = { { 1000, 1 }, { 1, 1000 } };
  EXPECT(ncp_index32_ok(1000000, 2, shape, st, 2), "a 1000x1000 transpose must take 32-bit math");
  int64_t big[NCP_MAXDIM] = { 65536, 32768 };               /* 2^31 elements */
  int64_t stb[1][NCP_MAXDIM] = { { 32768, 1 } };
  EXPECT(!ncp_index32_ok(65536LL * 32768, 2, big, stb, 1), "2^31 elements must fall back to 64-bit");
  int64_t sh2[NCP_MAXDIM] = { 2, 10 };                      /* few elements, huge offset */
  int64_t st2[2][NCP_MAXDIM] = { { 10, 1 }, { (int64_t)1 << 31, 1 } };
  EXPECT(!ncp_index32_ok(20, 2, sh2, st2, 2), "an offset of 2^31 must fall back to 64-bit");
  int64_t st3[1][NCP_MAXDIM] = { { INT32_MAX - 9, 1 } };    /* largest offset exactly 2^31 - 1 */
  EXPECT(ncp_index32_ok(20, 2, sh2, st3, 1), "a largest offset of 2^31 - 1 fits");
  int64_t st4[1][NCP_MAXDIM] = { { INT32_MAX - 8, 1 } };
  EXPECT(!ncp_index32_ok(20, 2, sh2, st4, 1), "a largest offset of 2^31 does not fit");
  int64_t st5[1][NCP_MAXDIM] = { { -((int64_t)1 << 31), 1 } };
  EXPECT(!ncp_index32_ok(20, 2, sh2, st5, 1), "negative strides count by magnitude");
  int64_t sh6[NCP_MAXDIM] = { 1, 7 };                        /* size-1 dims never add to the offset */
  int64_t st6[1][NCP_MAXDIM] = { { (int64_t)1 << 40, 1 } };
  EXPECT(ncp_index32_ok(7, 2, sh6, st6, 1), "a size-1 dim's stride is irrelevant");
  return 1;
}

/* ---- CUDA error reports --------------------------------------------------------------- */
TEST(fault_report_wording) {
  char m[1024];
  const char *name = "cudaErrorIllegalAddress", *text = "an illegal memory access was encountered";
  /* found at the launch of softmax, without sync mode: an earlier kernel's fault */
  ncp_cuda_error_text(m, sizeof m, name, text, 1, 0, NCP_AT_LAUNCH, "softmax", "take");
  EXPECT(strstr(m, text) && strstr(m, name), "no error text: %s", m);
  EXPECT(strstr(m, "BEFORE softmax") && strstr(m, "last op launched before it: take"), "must blame work before softmax: %s", m);
  EXPECT(strstr(m, "NABLA_CUDA_SYNC=1") && strstr(m, "session must restart its GPU work") && strstr(m, "unusable"),
         "must say how to find the op and that the context is lost: %s", m);
  EXPECT(!strstr(m, "raised by the kernel of softmax"), "blamed the op being launched: %s", m);
  /* with NABLA_CUDA_SYNC=1 every launch is waited for: the fault is softmax's own */
  ncp_cuda_error_text(m, sizeof m, name, text, 1, 1, NCP_AT_LAUNCH, "softmax", "take");
  EXPECT(strstr(m, "raised by the kernel of softmax") && strstr(m, "session must restart its GPU work"), "sync mode: %s", m);
  /* found at a synchronisation */
  ncp_cuda_error_text(m, sizeof m, name, text, 1, 0, NCP_AT_SYNC, NULL, "layer_norm");
  EXPECT(strstr(m, "asynchronously") && strstr(m, "last op launched: layer_norm") && strstr(m, "session must restart its GPU work"),
         "at sync: %s", m);
  /* a launch's own configuration error is the op's, and no restart is needed */
  ncp_cuda_error_text(m, sizeof m, "cudaErrorInvalidConfiguration", "invalid configuration argument", 0, 0, NCP_AT_LAUNCH, "conv2d", "x");
  EXPECT(!strncmp(m, "conv2d: CUDA error launching its kernel: invalid configuration argument", 70) && !strstr(m, "restart"),
         "launch error: %s", m);
  return 1;
}

/* ---- NABLA_CUDA_SYNC (the loader parses it before anything loads) ------------------- */
/* the loader's reason in a child process with NABLA_CUDA_SYNC=value */
static int reason_with_sync(const char *value, char *out, size_t n, int *avail) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fd[0]);
    setenv("NABLA_CUDA_SYNC", value, 1);
    char r[800] = "";
    int ok = nt_cuda_available(r, sizeof r);
    char line[820];
    int len = snprintf(line, sizeof line, "%d %s", ok, r);
    if (write(fd[1], line, (size_t)len) < 0) _exit(2);
    _exit(0);
  }
  close(fd[1]);
  char buf[820];
  ssize_t got = 0, k;
  while ((k = read(fd[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += k;
  close(fd[0]);
  buf[got > 0 ? got : 0] = 0;
  int st = 0;
  waitpid(pid, &st, 0);
  *avail = atoi(buf);
  const char *sp = strchr(buf, ' ');
  snprintf(out, n, "%s", sp ? sp + 1 : "");
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 && got > 0 ? 0 : -1;
}

TEST(sync_env_parsing) {
  char r[800];
  int avail = 0;
  EXPECT(!reason_with_sync("yes", r, sizeof r, &avail), "child failed");
  EXPECT(!avail && !strncmp(r, "NABLA_CUDA_SYNC=yes: expected 0 or 1", 36), "NABLA_CUDA_SYNC=yes must be refused by name, got %d: %s", avail, r);
  EXPECT(!reason_with_sync("2", r, sizeof r, &avail), "child failed");
  EXPECT(!avail && strstr(r, "NABLA_CUDA_SYNC=2"), "NABLA_CUDA_SYNC=2 must be refused, got: %s", r);
  const char *good[] = { "1", "0", "" };
  for (int i = 0; i < 3; i++) {
    EXPECT(!reason_with_sync(good[i], r, sizeof r, &avail), "child failed");
    EXPECT(!strstr(r, "NABLA_CUDA_SYNC"), "NABLA_CUDA_SYNC=%s must be accepted, got: %s", good[i], r);
  }
  return 1;
}

/* ---- reduction geometry (plan.h ncp_col_plan / ncp_row_plan) --------------------------- */
/* every column and row is covered exactly once by the tiles and slices */
static int col_plan_covers(int64_t M, int64_t R, ncp_ColPlan p) {
  if (p.block_x < 1 || p.block_y < 1 || p.block_x * p.block_y > NCP_RED_THREADS) FAILF("block %dx%d", p.block_x, p.block_y);
  if (p.grid_x < 1 || p.grid_y < 1 || p.grid_y > 65535) FAILF("grid %lldx%lld", (long long)p.grid_x, (long long)p.grid_y);
  if (p.grid_x < 2147483647 && p.grid_x * p.block_x * p.vec < M) FAILF("columns: %lld tiles of %d miss some of %lld", (long long)p.grid_x, p.block_x * p.vec, (long long)M);
  int64_t r = R < 1 ? 1 : R;
  if (p.grid_y * p.rows_per_block < r || (p.grid_y - 1) * p.rows_per_block >= r)
    FAILF("rows: %lld slices of %lld for %lld rows", (long long)p.grid_y, (long long)p.rows_per_block, (long long)R);
  if (p.loads_per_thread != (p.rows_per_block + p.block_y - 1) / p.block_y) FAILF("loads_per_thread");
  return 1;
}
static int row_plan_covers(int64_t M, int64_t R, ncp_RowPlan p) {
  (void)M;
  int64_t r = R < 1 ? 1 : R;
  if (p.nsplit < 1 || p.nsplit > 65535 || p.chunk % p.vec) FAILF("nsplit %lld chunk %lld", (long long)p.nsplit, (long long)p.chunk);
  if (p.nsplit * p.chunk < r || (p.nsplit - 1) * p.chunk >= r) FAILF("slices: %lld of %lld for %lld", (long long)p.nsplit, (long long)p.chunk, (long long)R);
  return 1;
}
TEST(reduce_geometry_gpt2_shapes) {
  const int sms = 132;                   /* H100 / H200 */
  const int64_t Ns[] = { 768, 2304, 3072 }, R = 8 * 1024;
  const int vecs[] = { 4, 8 };           /* f32, bf16: one 16-byte load */
  for (int i = 0; i < 3; i++)
    for (int v = 0; v < 2; v++) {
      ncp_ColPlan p = ncp_col_plan(Ns[i], R, vecs[v], sms);
      if (!col_plan_covers(Ns[i], R, p)) return 0;
      int64_t blocks = p.grid_x * p.grid_y;
      EXPECT(blocks >= 2 * sms, "bias-grad sum [8192, %lld] vec %d: %lld blocks on %d SMs", (long long)Ns[i], vecs[v], (long long)blocks, sms);
      EXPECT(p.loads_per_thread <= 64, "bias-grad sum [8192, %lld] vec %d: %lld serial loads per thread", (long long)Ns[i], vecs[v], (long long)p.loads_per_thread);
    }
  /* last-axis and full reductions at GPT-2 sizes: rows of 768 / 50304, the
  ** full logits (8192 x 50304), the largest weight (wte), torch's sum_f32_256M */
  struct { int64_t M, R; } rows[] = { { 8192, 768 }, { 8192, 50304 }, { 1, 8192LL * 50304 }, { 1, 50304LL * 768 }, { 1, 256LL << 20 } };
  for (int i = 0; i < 5; i++)
    for (int v = 0; v < 2; v++) {
      ncp_RowPlan p = ncp_row_plan(rows[i].M, rows[i].R, vecs[v], sms);
      if (!row_plan_covers(rows[i].M, rows[i].R, p)) return 0;
      int64_t blocks = (p.grid_x < rows[i].M ? p.grid_x : rows[i].M) * p.nsplit;
      EXPECT(blocks >= 2 * sms, "reduce [%lld, %lld] vec %d: %lld blocks", (long long)rows[i].M, (long long)rows[i].R, vecs[v], (long long)blocks);
      EXPECT(p.loads_per_thread <= 64, "reduce [%lld, %lld] vec %d: %lld serial loads per thread", (long long)rows[i].M, (long long)rows[i].R, vecs[v], (long long)p.loads_per_thread);
    }
  return 1;
}
TEST(reduce_geometry_random) {
  for (int it = 0; it < 20000; it++) {
    int64_t M = 1 + rand() % (it % 3 == 0 ? 4 : it % 3 == 1 ? 5000 : 3000000);
    int64_t R = rand() % (it % 2 ? 100 : 20000000);
    int vec = 1 << (rand() % 5), sms = 1 + rand() % 200;
    ncp_ColPlan c = ncp_col_plan(M, R, vec, sms);
    if (!col_plan_covers(M, R, c)) return 0;
    ncp_RowPlan r = ncp_row_plan(M, R, vec, sms);
    if (!row_plan_covers(M, R, r)) return 0;
    /* where there is enough work, the bound on serial loads holds */
    EXPECT(c.grid_y == 65535 || c.loads_per_thread <= NCP_MAX_LOADS, "cols M=%lld R=%lld: %lld loads", (long long)M, (long long)R, (long long)c.loads_per_thread);
    if (M == 1) EXPECT(r.nsplit == 65535 || r.loads_per_thread <= NCP_MAX_LOADS, "row R=%lld: %lld loads", (long long)R, (long long)r.loads_per_thread);
  }
  return 1;
}

/* ---- magic-number division (plan.h ncp_div32) ------------------------------------------- */
static int div_ok(uint32_t d, uint32_t n) {
  ncp_Div32 v = ncp_div32_make(d);
  uint32_t got = ncp_div32(v, n), want = n / d;
  if (got != want) FAILF("%u / %u: got %u, want %u (m=%u s=%u)", n, d, got, want, v.m, v.s);
  return 1;
}
TEST(magic_division) {
  const uint32_t lim = 0x7fffffffu;      /* n < 2^31: the 32-bit launches' bound */
  /* every divisor up to 4096 against the numerators where it can go wrong:
  ** around each multiple of d near 0 and near 2^31 */
  for (uint32_t d = 1; d <= 4096; d++) {
    for (uint32_t n = 0; n < 3 * d + 3; n++) if (!div_ok(d, n)) return 0;
    for (uint32_t k = 0; k < 3; k++) {
      uint32_t top = lim / d * d - k * d;
      for (int e = -2; e <= 2; e++) {
        int64_t n = (int64_t)top + e;
        if (n >= 0 && n <= lim && !div_ok(d, (uint32_t)n)) return 0;
      }
    }
    if (!div_ok(d, lim)) return 0;
  }
  /* edge divisors: powers of two and their neighbours, the largest ones */
  for (int b = 0; b < 31; b++)
    for (int e = -1; e <= 1; e++) {
      int64_t d = ((int64_t)1 << b) + e;
      if (d < 1 || d > lim) continue;
      uint32_t ns[] = { 0, 1, (uint32_t)d - 1, (uint32_t)d, (uint32_t)(d + 1 <= lim ? d + 1 : lim), lim - 1, lim };
      for (int i = 0; i < 7; i++) if (!div_ok((uint32_t)d, ns[i])) return 0;
    }
  /* random divisors and numerators below 2^31 */
  for (int it = 0; it < 2000000; it++) {
    uint32_t d = (uint32_t)(((uint64_t)rand() << 16 ^ (uint64_t)rand()) % (it % 2 ? 1000 : lim)) + 1;
    uint32_t n = (uint32_t)(((uint64_t)rand() << 16 ^ (uint64_t)rand()) & lim);
    if (!div_ok(d, n)) return 0;
  }
  return 1;
}

int main(void) {
  srand((unsigned)getpid());
  RUN(gemm_plan_contiguous_2d);
  RUN(gemm_plan_transposed_operands);
  RUN(gemm_plan_fold_rows);
  RUN(gemm_plan_strided_batched);
  RUN(gemm_plan_non_collapsible_batch);
  RUN(gemm_plan_packs_what_cublas_cannot_read);
  RUN(gemm_plan_random_layouts);
  RUN(index32_choice);
  RUN(fault_report_wording);
  RUN(sync_env_parsing);
  RUN(reduce_geometry_gpt2_shapes);
  RUN(reduce_geometry_random);
  RUN(magic_division);
  printf("# %d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
