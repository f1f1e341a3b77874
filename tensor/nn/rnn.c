/*
** rnn.c — recurrent layers: torch.nn.RNN (tanh, relu), LSTM and GRU.
**
** One layer in one direction is one autograd node ("LSTMBackward", ...) over
** {x, w_ih, w_hh, b_ih, b_hh, h0, c0}; nt_rnn stacks layers and directions
** out of them with public ops (concat, dropout, stack).  Inside a layer:
**   gx [T, B, G*H] = x @ w_ih^T + b_ih          ONE GEMM for every step (nt_linear)
**   per step t (t = 0..T-1, or T-1..0 reversed):
**     gh [B, G*H] = h_prev @ w_hh^T              one GEMM (nt_matmul)
**     the cell: one fused kernel per device ("rnn_cell"; CPU here, CUDA in
**     cuda/rnn.cu) adds b_hh, applies the gates' nonlinearities, updates the
**     state and saves what backward needs:
**       LSTM  i,f,g,o = sig,sig,tanh,sig(gx + gh + b_hh)   (torch's order)
**             c' = f*c + i*g,  h' = o*tanh(c')            saves [i f g o tanh(c')]
**       GRU   r,z = sig(gx_rz + gh_rz + b_hh_rz)
**             n = tanh(gx_n + r*(gh_n + b_hh_n)),  h' = (1-z)*n + z*h
**                                                          saves [r z n (gh_n + b_hh_n)]
**       RNN   h' = act(gx + gh + b_hh)                     saves [h']
**     With lengths, a sequence is active at t when t < lengths[b]: inactive
**     rows carry their state unchanged (h' = h, c' = c) and output 0, so the
**     final state is the state at the sequence's length (and a reversed
**     direction starts from h0 at lengths[b]-1).
** Buffers (time-indexed): hprev [T, B, H] (the state each step starts
** from), cprev (LSTM), gates [T, B, R*H] (R = 5, 4, 1), and the node's
** output `packed` [T + S, B, H] = {y[0..T), h_n, c_n (LSTM)} (S = 2 for
** LSTM, else 1), of which the caller takes views.
**
** Backward through time with the same structure (cell kernel
** "rnn_cell_backward", then one GEMM per step):
**   dh, dc = the gradients of h_n, c_n; for t in reverse processing order:
**     d = dh + mm + dy[t] (active)      mm = dgh[t_next] @ w_hh, the previous step's GEMM
**     cell backward: dgx[t], dgh[t] (the same for LSTM/RNN: one buffer) from
**     d, dc and the saved gates; writes dh <- the part of dL/dh_prev that
**     does not go through w_hh (GRU: d*z; inactive: d), dc <- dL/dc_prev
**   dh0 = dh + mm, dc0 = dc; then one GEMM each for the weights:
**   dx = dgx @ w_ih, dw_ih = dgx^T @ x, dw_hh = dgh^T @ hprev, db_* = column sums.
** A device with an "rnn_sequence" kernel (the CPU) runs each of the two
** per-step loops as one kernel call instead: the same steps, the step GEMMs
** straight into reused buffers, no tensor or dispatch per step.
*/
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nninternal.h"
#include "tensor/tblas.h"
#undef I   /* <complex.h>'s, through cblas.h: I is the input size here */
#include "rnn.h"
#include "rnncell.h"

static int op_cell = -1, op_cell_bwd = -1, op_seq = -1, op_seq_bwd = -1;

const char *nt_rnn_mode_name(nt_RnnMode mode) {
  return mode == NT_RNN_LSTM ? "lstm" : mode == NT_RNN_GRU ? "gru" : "rnn";
}

#define PTR(t) ((t) ? (void *)nt_base(t) : NULL)

/* ---- the CPU cell kernels ------------------------------------------------------- */
/* One step's buffers as raw pointers (the layout of rnncell.h): what the
** per-step op "rnn_cell" (from its tensors) and the whole-sequence kernels
** below (from offsets into the layer's buffers) both hand the cell, so the
** math is written once. */
typedef struct {
  int64_t mode, B, H, t;
  const void *gx, *gh, *bhh, *hp, *cp;
  const int64_t *len;
  void *y, *hn, *cn, *gs;                  /* forward's outputs */
  const void *dy, *mm;                     /* backward's inputs (mm may be NULL) */
  void *dh, *dc, *dgx, *dgh;               /* backward's in/outputs (dgh: GRU only) */
} cell_ptrs;

/* The forward cell, one batch row at a time: the pre-activations go into the
** row's saved-gates slice, the nonlinearities run over whole gate blocks of H
** units at vector width (tvecmath.h: SLEEF's 1-ULP sigmoid and tanh, the
** formulas of the scalar kernels), the state update is plain vectorisable
** loops.  Rows past their sequence's length carry their state and output 0.
** The backward cell has no transcendental: one loop per mode. */
#define CELL_T(T, VMU)                                                                          \
  static void cell_fwd_##T(const cell_ptrs *a) {                                                \
    int64_t B = a->B, H = a->H, mode = a->mode, G = rnn_gates(mode), R = rnn_saved(mode);       \
    const T *gx = a->gx, *gh = a->gh, *bhh = a->bhh, *hp = a->hp, *cp = a->cp;                  \
    const int64_t *len = a->len;                                                                \
    T *y = a->y, *hn = a->hn, *cn = a->cn, *gs = a->gs;                                         \
    const nt_VecMath *vm = nt_vm();                                                             \
    _Pragma("omp parallel for if (B * H * G > NT_OMP_THRESHOLD)")                               \
    for (int64_t b = 0; b < B; b++) {                                                           \
      const T *x = gx + b * G * H, *h = gh ? gh + b * G * H : NULL, *hpb = hp + b * H;          \
      T *s = gs + b * R * H, *yb = y + b * H, *hnb = hn + b * H, *cnb = cn ? cn + b * H : NULL; \
      const T *cpb = cp ? cp + b * H : NULL;                                                    \
      if (len && a->t >= len[b]) {                                                              \
        memcpy(hnb, hpb, (size_t)H * sizeof(T));                                                \
        if (cnb) memcpy(cnb, cpb, (size_t)H * sizeof(T));                                       \
        memset(yb, 0, (size_t)H * sizeof(T));                                                   \
        continue;                                                                               \
      }                                                                                         \
      /* s = gx + gh + b_hh over the gates the sum feeds (GRU: r, z) */                         \
      int64_t ns = mode == NT_RNN_GRU ? 2 * H : G * H;                                          \
      for (int64_t k = 0; k < ns; k++) s[k] = x[k];                                             \
      if (h) for (int64_t k = 0; k < ns; k++) s[k] += h[k];                                     \
      if (bhh) for (int64_t k = 0; k < ns; k++) s[k] += bhh[k];                                 \
      if (mode == NT_RNN_LSTM) {                /* s = [i f g o tanh(c')] */                    \
        vm->VMU(NT_VM_SIGMOID, s, s, 2 * H);                                                    \
        vm->VMU(NT_VM_TANH, s + 2 * H, s + 2 * H, H);                                           \
        vm->VMU(NT_VM_SIGMOID, s + 3 * H, s + 3 * H, H);                                        \
        for (int64_t j = 0; j < H; j++) cnb[j] = s[H + j] * cpb[j] + s[j] * s[2 * H + j];       \
        vm->VMU(NT_VM_TANH, cnb, s + 4 * H, H);                                                 \
        for (int64_t j = 0; j < H; j++) hnb[j] = yb[j] = s[3 * H + j] * s[4 * H + j];           \
      } else if (mode == NT_RNN_GRU) {          /* s = [r z n (gh_n + b_hn)] */                 \
        for (int64_t j = 0; j < H; j++) s[3 * H + j] = (h ? h[2 * H + j] : 0) + (bhh ? bhh[2 * H + j] : 0); \
        vm->VMU(NT_VM_SIGMOID, s, s, 2 * H);                                                    \
        for (int64_t j = 0; j < H; j++) s[2 * H + j] = x[2 * H + j] + s[j] * s[3 * H + j];      \
        vm->VMU(NT_VM_TANH, s + 2 * H, s + 2 * H, H);                                           \
        for (int64_t j = 0; j < H; j++) {                                                       \
          T z = s[H + j];                                                                       \
          hnb[j] = yb[j] = ((T)1 - z) * s[2 * H + j] + z * hpb[j];                              \
        }                                                                                       \
      } else {                                  /* s = [h'] */                                  \
        if (mode == NT_RNN_TANH) vm->VMU(NT_VM_TANH, s, s, H);                                  \
        else for (int64_t j = 0; j < H; j++) s[j] = s[j] > 0 ? s[j] : 0;                        \
        memcpy(hnb, s, (size_t)H * sizeof(T));                                                  \
        memcpy(yb, s, (size_t)H * sizeof(T));                                                   \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  static void cell_bwd_##T(const cell_ptrs *a) {                                                \
    int64_t B = a->B, H = a->H, mode = a->mode, G = rnn_gates(mode), R = rnn_saved(mode);       \
    const T *dy = a->dy, *mm = a->mm, *gs = a->gs, *hp = a->hp, *cp = a->cp;                    \
    const int64_t *len = a->len;                                                                \
    T *dh = a->dh, *dc = a->dc, *dgx = a->dgx, *dgh = a->dgh;                                   \
    _Pragma("omp parallel for if (B * H * G > NT_OMP_THRESHOLD)")                               \
    for (int64_t b = 0; b < B; b++) {                                                           \
      const T *s = gs + b * R * H, *dyb = dy + b * H, *hpb = hp + b * H;                        \
      const T *mmb = mm ? mm + b * H : NULL, *cpb = cp ? cp + b * H : NULL;                     \
      T *gx = dgx + b * G * H, *gh = dgh ? dgh + b * G * H : NULL;                              \
      T *dhb = dh + b * H, *dcb = dc ? dc + b * H : NULL;                                       \
      if (mmb) for (int64_t j = 0; j < H; j++) dhb[j] += mmb[j];                                \
      if (len && a->t >= len[b]) {              /* carried: dh, dc pass through */              \
        memset(gx, 0, (size_t)(G * H) * sizeof(T));                                             \
        if (gh) memset(gh, 0, (size_t)(G * H) * sizeof(T));                                     \
        continue;                                                                               \
      }                                                                                         \
      if (mode == NT_RNN_LSTM) {                                                                \
        for (int64_t j = 0; j < H; j++) {                                                       \
          T d = dhb[j] + dyb[j];                                                                \
          T i = s[j], f = s[H + j], g = s[2 * H + j], o = s[3 * H + j], tc = s[4 * H + j];       \
          T dct = dcb[j] + d * o * ((T)1 - tc * tc);                                            \
          gx[j] = dct * g * i * ((T)1 - i);                                                     \
          gx[H + j] = dct * cpb[j] * f * ((T)1 - f);                                            \
          gx[2 * H + j] = dct * i * ((T)1 - g * g);                                             \
          gx[3 * H + j] = d * tc * o * ((T)1 - o);                                              \
          dcb[j] = dct * f;                                                                     \
          dhb[j] = 0;                                                                           \
        }                                                                                       \
      } else if (mode == NT_RNN_GRU) {                                                          \
        for (int64_t j = 0; j < H; j++) {                                                       \
          T d = dhb[j] + dyb[j];                                                                \
          T r = s[j], z = s[H + j], n = s[2 * H + j], hn_ = s[3 * H + j];                       \
          T dn = d * ((T)1 - z) * ((T)1 - n * n), dz = d * (hpb[j] - n) * z * ((T)1 - z);       \
          T dr = dn * hn_ * r * ((T)1 - r);                                                     \
          gx[j] = gh[j] = dr;                                                                   \
          gx[H + j] = gh[H + j] = dz;                                                           \
          gx[2 * H + j] = dn;                                                                   \
          gh[2 * H + j] = dn * r;                                                               \
          dhb[j] = d * z;                                                                       \
        }                                                                                       \
      } else {                                                                                  \
        for (int64_t j = 0; j < H; j++) {                                                       \
          T d = dhb[j] + dyb[j], out = s[j];                                                    \
          gx[j] = mode == NT_RNN_TANH ? d * ((T)1 - out * out) : (out > 0 ? d : 0);             \
          dhb[j] = 0;                                                                           \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }
CELL_T(float, unary_f32)
CELL_T(double, unary_f64)

static void cell_fwd(bool f32, const cell_ptrs *p) { if (f32) cell_fwd_float(p); else cell_fwd_double(p); }
static void cell_bwd(bool f32, const cell_ptrs *p) { if (f32) cell_bwd_float(p); else cell_bwd_double(p); }

/* "rnn_cell" / "rnn_cell_backward": one step, from rnn_cell_args' tensors */
static int k_rnn_cell(const nt_KernelArgs *ka) {
  const rnn_cell_args *a = ka->extra;
  cell_ptrs p = {.mode = a->mode, .B = a->B, .H = a->H, .t = a->t, .gx = PTR(a->gx), .gh = PTR(a->gh), .bhh = PTR(a->bhh),
                 .hp = PTR(a->hprev), .cp = PTR(a->cprev), .len = PTR(a->len), .y = PTR(a->y), .hn = PTR(a->hnext),
                 .cn = PTR(a->cnext), .gs = PTR(a->gates), .dy = PTR(a->dy), .mm = PTR(a->mm), .dh = PTR(a->dh),
                 .dc = PTR(a->dc), .dgx = PTR(a->dgx), .dgh = PTR(a->dgh)};
  bool f32 = ka->in[0]->dtype == NT_F32;
  if (ka->op == op_cell) cell_fwd(f32, &p);
  else cell_bwd(f32, &p);
  return 0;
}

/* ---- the CPU's whole sequence in one kernel ------------------------------------------
** "rnn_sequence" / "rnn_sequence_backward": every step of one layer and
** direction in one call, the step GEMMs straight into reused buffers
** (OpenBLAS; no tensor, view or allocation per step):
**   forward   per step: gh = hprev[t] @ w_hh^T (scratch gh [B, G*H]), then
**             the cell writes y, the next step's hprev/cprev (or h_n, c_n:
**             packed[T], packed[T+1]) and gates[t]
**   backward  per step: the cell (mm = NULL) leaves in dh the part of
**             dL/dh_prev that bypasses w_hh, then dh += dg[t] @ w_hh (dg =
**             dgh for GRU, else dgx): after the last step dh is dL/dh0.
** Buffers as the layer's (rnn.c's top comment), all contiguous in one dtype
** (f32 or f64).  The per-step path (rnn_cell ops + nt_matmul) remains for
** devices without these kernels (CUDA). */
typedef struct {
  int64_t mode, T, B, H;
  bool reverse;
  nt_Tensor *w_hh, *bhh, *hprev, *cprev, *len, *gates;
  nt_Tensor *gx, *gh, *packed;                     /* forward: gx [T,B,G*H], scratch gh [B,G*H], packed [T+S,B,H] */
  nt_Tensor *dy, *dh, *dc, *dgx, *dgh;             /* backward: dy = gout [T+S,B,H]; dgh == dgx but for GRU */
} rnn_seq_args;

static void gemm(bool f32, bool trans_b, int64_t M, int64_t N, int64_t K, const void *a, int64_t lda, const void *b,
                 int64_t ldb, double beta, void *c, int64_t ldc) {
  const nt_Blas *bl = nt_blas();
  enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if (f32) bl->sgemm(CblasRowMajor, CblasNoTrans, tb, (int)M, (int)N, (int)K, 1.0f, a, (int)lda, b, (int)ldb, (float)beta, c, (int)ldc);
  else bl->dgemm(CblasRowMajor, CblasNoTrans, tb, (int)M, (int)N, (int)K, 1.0, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

static int k_rnn_sequence(const nt_KernelArgs *ka) {
  const rnn_seq_args *a = ka->extra;
  int64_t T = a->T, B = a->B, H = a->H, G = rnn_gates(a->mode), R = rnn_saved(a->mode), BH = B * H;
  bool f32 = a->hprev->dtype == NT_F32, lstm = a->mode == NT_RNN_LSTM, gru = a->mode == NT_RNN_GRU;
  size_t es = f32 ? sizeof(float) : sizeof(double);
  char *hprev = nt_base(a->hprev), *cprev = a->cprev ? nt_base(a->cprev) : NULL, *gates = nt_base(a->gates);
  const void *whh = nt_base(a->w_hh);
  const int64_t *len = PTR(a->len);
  if (B * G * H > INT_MAX || H > INT_MAX) NT_FAIL("%s: batch x gates x hidden_size = %lld is beyond BLAS's int", nt_op_name(ka->op), (long long)(B * G * H));
  for (int64_t s = 0; s < T; s++) {
    if (NT_INTERRUPTED()) NT_FAIL("interrupted");
    bool fwd = ka->op == op_seq;
    int64_t t = a->reverse == fwd ? T - 1 - s : s;   /* the forward's processing order; backward walks it back */
    char *hp = hprev + (size_t)(t * BH) * es, *cp = cprev ? cprev + (size_t)(t * BH) * es : NULL;
    cell_ptrs p = {.mode = a->mode, .B = B, .H = H, .t = t, .hp = hp, .cp = cp, .len = len,
                   .gs = gates + (size_t)(t * B * R * H) * es};
    if (fwd) {
      char *packed = nt_base(a->packed), *gh = nt_base(a->gh);
      int64_t tn = a->reverse ? t - 1 : t + 1;
      bool last = s == T - 1;
      gemm(f32, true, B, G * H, H, hp, H, whh, H, 0, gh, G * H);
      p.gx = (char *)nt_base(a->gx) + (size_t)(t * B * G * H) * es;
      p.gh = gh;
      p.bhh = PTR(a->bhh);
      p.y = packed + (size_t)(t * BH) * es;
      p.hn = last ? packed + (size_t)(T * BH) * es : hprev + (size_t)(tn * BH) * es;
      p.cn = !lstm ? NULL : last ? packed + (size_t)((T + 1) * BH) * es : cprev + (size_t)(tn * BH) * es;
      cell_fwd(f32, &p);
    } else {
      char *dg = (char *)nt_base(gru ? a->dgh : a->dgx) + (size_t)(t * B * G * H) * es;
      p.dy = (char *)nt_base(a->dy) + (size_t)(t * BH) * es;
      p.dh = nt_base(a->dh);
      p.dc = PTR(a->dc);
      p.dgx = (char *)nt_base(a->dgx) + (size_t)(t * B * G * H) * es;
      p.dgh = gru ? dg : NULL;
      cell_bwd(f32, &p);
      gemm(f32, false, B, H, G * H, dg, G * H, whh, H, 1, p.dh, H);
    }
  }
  return 0;
}

static void register_rnn(void) {
  nt_nn_init();
  op_cell = nt_op_register("rnn_cell");
  op_cell_bwd = nt_op_register("rnn_cell_backward");
  op_seq = nt_op_register("rnn_sequence");
  op_seq_bwd = nt_op_register("rnn_sequence_backward");
  nt_register_kernel(op_cell, NT_CPU, k_rnn_cell);
  nt_register_kernel(op_cell_bwd, NT_CPU, k_rnn_cell);
  nt_register_kernel(op_seq, NT_CPU, k_rnn_sequence);
  nt_register_kernel(op_seq_bwd, NT_CPU, k_rnn_sequence);
}
static void rnn_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_rnn);
}

/* the cell's buffers written through `extra`: marked written on their device */
static void mark(nt_Tensor *const *ts, int n) {
  for (int i = 0; i < n; i++) if (ts[i]) nt_bump_version(ts[i]);
}

static nt_Tensor *sel(nt_Tensor *t, int64_t i) { return t ? nt_select(t, 0, i) : NULL; }

/* ---- one layer, one direction: the node ----------------------------------------- */
/* node in = {x [T,B,I], w_ih, w_hh, b_ih, b_hh, h0 [B,H], c0}; saved = {gates,
** hprev, cprev|-, lengths|-}; iarg = {mode, T, B, H, reverse, has cprev, has len} */
static int layer_backward_(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin);
static int layer_backward(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  int ac = nt_autocast_set(-1);   /* the GEMMs in the forward's dtype, as the forward ran */
  int rc = layer_backward_(nd, gout, gin);
  nt_autocast_set(ac);
  return rc;
}
static int layer_backward_(nt_Node *nd, nt_Tensor *gout, nt_Tensor **gin) {
  nt_RnnMode mode = (nt_RnnMode)nd->iarg[0];
  int64_t T = nd->iarg[1], B = nd->iarg[2], H = nd->iarg[3], G = rnn_gates(mode);
  bool reverse = nd->iarg[4];
  nt_Tensor *x = nd->in[0], *w_ih = nd->in[1], *w_hh = nd->in[2];
  nt_Tensor *gates = nd->saved[0], *hprev = nd->saved[1];
  nt_Tensor *cprev = nd->iarg[5] ? nd->saved[2] : NULL, *len = nd->iarg[6] ? nd->saved[3] : NULL;
  nt_DType dt = x->dtype;
  nt_Device dev = x->device;
  int rc = -1;
  nt_Tensor *gc = nt_to_dtype(gout, dt), *g = gc ? nt_contiguous(gc) : NULL;
  nt_release(gc);
  nt_Tensor *dh = NULL, *dc = NULL, *dgx = NULL, *dgh = NULL, *mm = NULL, *dh0 = NULL;
  if (!g) return -1;
  nt_Tensor *gh_ = sel(g, T), *gc_ = mode == NT_RNN_LSTM ? sel(g, T + 1) : NULL;
  dh = gh_ ? nt_clone(gh_) : NULL;
  dc = gc_ ? nt_clone(gc_) : NULL;
  nt_release(gh_); nt_release(gc_);
  int64_t gshape[3] = {T, B, G * H};
  dgx = nt_empty(gshape, 3, dt, dev);
  dgh = mode == NT_RNN_GRU ? nt_empty(gshape, 3, dt, dev) : nt_retain(dgx);
  if (!dh || (mode == NT_RNN_LSTM && !dc) || !dgx || !dgh) goto done;
  if (nt_kernel_table[op_seq_bwd][dev] && nt_is_contiguous(w_hh)) {   /* the whole sequence in one kernel (the CPU's): dh ends as dL/dh0 */
    rnn_seq_args sa = {.mode = mode, .T = T, .B = B, .H = H, .reverse = reverse, .w_hh = w_hh, .hprev = hprev, .cprev = cprev,
                       .len = len, .gates = gates, .dy = g, .dh = dh, .dc = dc, .dgx = dgx, .dgh = dgh};
    nt_KernelArgs ka = {.op = op_seq_bwd, .in = {g, w_hh, hprev}, .nin = 3, .extra = &sa};
    if (nt_dispatch(op_seq_bwd, dev, &ka) != 0) goto done;
    mark((nt_Tensor *[]){dh, dc, dgx, dgh}, 4);
  } else   /* one step at a time: "rnn_cell_backward" and a GEMM per step */
  for (int64_t s = 0; s < T; s++) {
    int64_t t = reverse ? s : T - 1 - s;       /* the processing order, backwards */
    rnn_cell_args a = {.mode = mode, .B = B, .H = H, .t = t, .len = len, .mm = mm, .dh = dh, .dc = dc};
    a.dy = sel(g, t); a.gates = sel(gates, t); a.hprev = sel(hprev, t); a.cprev = sel(cprev, t);
    a.dgx = sel(dgx, t); a.dgh = mode == NT_RNN_GRU ? sel(dgh, t) : NULL;
    nt_KernelArgs ka = {.op = op_cell_bwd, .in = {a.dgx}, .nin = 1, .extra = &a};
    int bad = !a.dy || !a.gates || !a.hprev || (cprev && !a.cprev) || !a.dgx || (mode == NT_RNN_GRU && !a.dgh);
    if (!bad && NT_INTERRUPTED()) { nt_error_set("interrupted"); bad = 1; }
    if (!bad) bad = nt_dispatch(op_cell_bwd, dev, &ka) != 0;
    if (!bad) { mark((nt_Tensor *[]){dh, dc, a.dgx, a.dgh}, 4); }
    nt_Tensor *next = NULL;
    if (!bad) { next = nt_matmul(a.dgh ? a.dgh : a.dgx, w_hh); bad = !next; }
    nt_release(a.dy); nt_release(a.gates); nt_release(a.hprev); nt_release(a.cprev); nt_release(a.dgx); nt_release(a.dgh);
    nt_release(mm);
    mm = next;
    if (bad) goto done;
  }
  dh0 = mm ? nt_add(dh, mm) : nt_retain(dh);
  if (!dh0) goto done;
  int64_t TB = T * B;
  nt_Tensor *gx2 = nt_reshape(dgx, (int64_t[]){TB, G * H}, 2), *gh2 = nt_reshape(dgh, (int64_t[]){TB, G * H}, 2);
  nt_Tensor *gx2t = gx2 ? nt_transpose(gx2, 0, 1) : NULL, *gh2t = gh2 ? nt_transpose(gh2, 0, 1) : NULL;
  rc = gx2t && gh2t ? 0 : -1;
  if (!rc && nt_node_needs(nd, 0)) {
    nt_Tensor *d = nt_matmul(gx2, w_ih);
    gin[0] = d ? nt_reshape(d, x->shape, 3) : NULL;
    nt_release(d);
    if (!gin[0]) rc = -1;
  }
  if (!rc && nt_node_needs(nd, 1)) {
    nt_Tensor *x2 = nt_reshape(x, (int64_t[]){TB, x->shape[2]}, 2);
    gin[1] = x2 ? nt_matmul(gx2t, x2) : NULL;
    nt_release(x2);
    if (!gin[1]) rc = -1;
  }
  if (!rc && nt_node_needs(nd, 2)) {
    nt_Tensor *h2 = nt_reshape(hprev, (int64_t[]){TB, H}, 2);
    gin[2] = h2 ? nt_matmul(gh2t, h2) : NULL;
    nt_release(h2);
    if (!gin[2]) rc = -1;
  }
  if (!rc && nt_node_needs(nd, 3) && !(gin[3] = nt_sum(gx2, (int[]){0}, 1, false))) rc = -1;
  if (!rc && nt_node_needs(nd, 4) && !(gin[4] = nt_sum(gh2, (int[]){0}, 1, false))) rc = -1;
  if (!rc && nt_node_needs(nd, 5)) gin[5] = nt_retain(dh0);
  if (!rc && nt_node_needs(nd, 6)) gin[6] = nt_retain(dc);
  nt_release(gx2); nt_release(gh2); nt_release(gx2t); nt_release(gh2t);
  if (rc) for (int i = 0; i < 7; i++) { nt_release(gin[i]); gin[i] = NULL; }
done:
  nt_release(g); nt_release(dh); nt_release(dc); nt_release(dgx); nt_release(dgh); nt_release(mm); nt_release(dh0);
  return rc;
}

static const char *node_name(nt_RnnMode mode) {
  return mode == NT_RNN_LSTM ? "LSTMBackward" : mode == NT_RNN_GRU ? "GRUBackward" : "RNNBackward";
}

/* One layer, one direction, on prepared tensors (contiguous, dtype dt, one
** device; len i64 on that device or NULL): the packed output [T+S, B, H]
** with its node.  x [T, B, I]; h0 [B, H]; c0 [B, H] for LSTM. */
static nt_Tensor *rnn_layer(nt_RnnMode mode, nt_Tensor *x, nt_Tensor *w_ih, nt_Tensor *w_hh, nt_Tensor *b_ih,
                            nt_Tensor *b_hh, nt_Tensor *h0, nt_Tensor *c0, nt_Tensor *len, bool reverse) {
  int64_t T = x->shape[0], B = x->shape[1], I = x->shape[2], H = w_hh->shape[1], G = rnn_gates(mode);
  int64_t S = mode == NT_RNN_LSTM ? 2 : 1;
  nt_DType dt = x->dtype;
  nt_Device dev = x->device;
  bool lstm = mode == NT_RNN_LSTM;
  nt_Tensor *packed = NULL, *hprev = NULL, *cprev = NULL, *gates = NULL, *gx = NULL, *whhT = NULL;
  bool prev = nt_set_grad_enabled(false);
  packed = nt_empty((int64_t[]){T + S, B, H}, 3, dt, dev);
  hprev = nt_empty((int64_t[]){T, B, H}, 3, dt, dev);
  cprev = lstm ? nt_empty((int64_t[]){T, B, H}, 3, dt, dev) : NULL;
  gates = nt_empty((int64_t[]){T, B, rnn_saved(mode) * H}, 3, dt, dev);
  nt_Tensor *x2 = nt_reshape(x, (int64_t[]){T * B, I}, 2);
  nt_Tensor *gx2 = x2 ? nt_linear(x2, w_ih, b_ih) : NULL;
  gx = gx2 ? nt_reshape(gx2, (int64_t[]){T, B, G * H}, 3) : NULL;
  nt_release(x2); nt_release(gx2);
  whhT = nt_transpose(w_hh, 0, 1);
  bool ok = packed && hprev && (!lstm || cprev) && gates && gx && whhT;
  int64_t t0 = reverse ? T - 1 : 0;
  if (ok) {   /* the first step starts from h0, c0 */
    nt_Tensor *h = sel(hprev, t0), *c = lstm ? sel(cprev, t0) : NULL;
    ok = h && nt_copy_(h, h0) == 0 && (!lstm || (c && nt_copy_(c, c0) == 0));
    nt_release(h); nt_release(c);
  }
  if (ok && nt_kernel_table[op_seq][dev] && nt_is_contiguous(w_hh)) {   /* the whole sequence in one kernel (the CPU's) */
    nt_Tensor *gh = nt_empty((int64_t[]){B, G * H}, 2, dt, dev);
    rnn_seq_args sa = {.mode = mode, .T = T, .B = B, .H = H, .reverse = reverse, .w_hh = w_hh, .bhh = b_hh, .hprev = hprev,
                       .cprev = cprev, .len = len, .gates = gates, .gx = gx, .gh = gh, .packed = packed};
    nt_KernelArgs ka = {.op = op_seq, .in = {gx, w_hh, hprev}, .nin = 3, .extra = &sa};
    ok = gh && nt_dispatch(op_seq, dev, &ka) == 0;
    if (ok) mark((nt_Tensor *[]){packed, hprev, cprev, gates}, 4);
    nt_release(gh);
  } else   /* one step at a time: a GEMM and the "rnn_cell" op per step */
  for (int64_t s = 0; ok && s < T; s++) {
    int64_t t = reverse ? T - 1 - s : s, tn = reverse ? t - 1 : t + 1;
    bool last = s == T - 1;
    rnn_cell_args a = {.mode = mode, .B = B, .H = H, .t = t, .bhh = b_hh, .len = len};
    a.gx = sel(gx, t); a.hprev = sel(hprev, t); a.cprev = sel(cprev, t); a.y = sel(packed, t);
    a.hnext = last ? sel(packed, T) : sel(hprev, tn);
    a.cnext = lstm ? (last ? sel(packed, T + 1) : sel(cprev, tn)) : NULL;
    a.gates = sel(gates, t);
    a.gh = a.hprev ? nt_matmul(a.hprev, whhT) : NULL;
    ok = a.gx && a.hprev && (!lstm || (a.cprev && a.cnext)) && a.y && a.hnext && a.gates && a.gh;
    if (ok && NT_INTERRUPTED()) { nt_error_set("interrupted"); ok = false; }
    if (ok) {
      nt_KernelArgs ka = {.op = op_cell, .in = {a.gx, a.gh, a.hprev, a.cprev}, .nin = lstm ? 4 : 3, .extra = &a};
      ok = nt_dispatch(op_cell, dev, &ka) == 0;
      if (ok) mark((nt_Tensor *[]){a.y, a.hnext, a.cnext, a.gates}, 4);
    }
    nt_Tensor *rel[] = {a.gx, a.gh, a.hprev, a.cprev, a.y, a.hnext, a.cnext, a.gates};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) nt_release(rel[i]);
  }
  nt_set_grad_enabled(prev);
  nt_release(gx); nt_release(whhT);
  if (!ok) goto fail;
  nt_Node *nd;
  packed = nn_finish(packed, node_name(mode), layer_backward, 7, (nt_Tensor *[]){x, w_ih, w_hh, b_ih, b_hh, h0, c0}, &nd);
  if (!packed) goto fail;
  if (nd) {
    if (nt_node_save(nd, gates) < 0 || nt_node_save(nd, hprev) < 0 || (lstm && nt_node_save(nd, cprev) < 0)) goto fail;
    if (!lstm && nt_node_save(nd, hprev) < 0) goto fail;   /* keeps slot 3 for the lengths */
    if (len && nt_node_save(nd, len) < 0) goto fail;
    int64_t ia[] = {mode, T, B, H, reverse, lstm, len != NULL};
    memcpy(nd->iarg, ia, sizeof ia);
    nd->niarg = (int)(sizeof ia / sizeof ia[0]);
  }
  nt_release(hprev); nt_release(cprev); nt_release(gates);
  return packed;
fail:
  nt_release(packed); nt_release(hprev); nt_release(cprev); nt_release(gates);
  return NULL;
}

/* ---- the network ------------------------------------------------------------------ */
static const char *dir_suffix(int d) { return d ? "_reverse" : ""; }

static int check_param(const char *op, nt_Tensor *p, const char *kind, int layer, int d, int64_t r, int64_t c, nt_Tensor *x) {
  char s[128], want[64];
  bool ok = c ? p->ndim == 2 && p->shape[0] == r && p->shape[1] == c : p->ndim == 1 && p->shape[0] == r;
  if (c) snprintf(want, sizeof want, "[%lld, %lld]", (long long)r, (long long)c);
  else snprintf(want, sizeof want, "[%lld]", (long long)r);
  if (!ok)
    NT_FAIL("%s: %s_l%d%s must have shape %s, got %s", op, kind, layer, dir_suffix(d), want, nt_shape_str(p->shape, p->ndim, s, sizeof s));
  if (!nt_dtype_is_float(p->dtype)) NT_FAIL("%s: %s_l%d%s must be a floating tensor, got %s", op, kind, layer, dir_suffix(d), nt_dtype_name(p->dtype));
  if (p->device != x->device)
    NT_FAIL("%s: %s_l%d%s is on %s but the input is on %s", op, kind, layer, dir_suffix(d), nt_device_name(p->device), nt_device_name(x->device));
  return 0;
}

/* the initial state h0/c0 [L*D, B, H] (already batched) in dtype dt, or zeros */
static nt_Tensor *prep_state(const char *op, const char *what, nt_Tensor *s, int64_t LD, int64_t B, int64_t H, nt_Tensor *x) {
  char s1[128];
  int64_t want[3] = {LD, B, H};
  if (!s) return nt_zeros(want, 3, x->dtype, x->device);
  if (s->ndim != 3 || s->shape[0] != LD || s->shape[1] != B || s->shape[2] != H)
    NT_FAIL_NULL("%s: %s must have shape [%lld, %lld, %lld] (num_layers * directions, batch, hidden_size), got %s", op, what,
                 (long long)LD, (long long)B, (long long)H, nt_shape_str(s->shape, s->ndim, s1, sizeof s1));
  if (!nt_dtype_is_float(s->dtype)) NT_FAIL_NULL("%s: %s must be a floating tensor, got %s", op, what, nt_dtype_name(s->dtype));
  if (s->device != x->device) NT_FAIL_NULL("%s: %s is on %s but the input is on %s", op, what, nt_device_name(s->device), nt_device_name(x->device));
  nt_Tensor *c = nt_to_dtype(s, x->dtype), *r = c ? nt_contiguous(c) : NULL;
  nt_release(c);
  return r;
}

/* lengths: integer [B] with 0 <= lengths[b] <= T, as i64 on dev */
static nt_Tensor *prep_lengths(const char *op, nt_Tensor *l, int64_t B, int64_t T, nt_Device dev) {
  char s[128];
  if (!nt_dtype_is_int(l->dtype) || l->ndim != 1 || l->shape[0] != B)
    NT_FAIL_NULL("%s: lengths must be an integer tensor of shape [%lld] (one length per sequence), got %s %s", op, (long long)B,
                 nt_dtype_name(l->dtype), nt_shape_str(l->shape, l->ndim, s, sizeof s));
  nt_Tensor *c = nt_to_device(l, NT_CPU), *i = c ? nt_to_dtype(c, NT_I64) : NULL, *h = i ? nt_contiguous(i) : NULL;
  nt_release(c); nt_release(i);
  if (!h) return NULL;
  const int64_t *v = (const int64_t *)nt_base(h);
  for (int64_t b = 0; b < B; b++)
    if (v[b] < 0 || v[b] > T) {
      nt_error_set("%s: lengths[%lld] = %lld is outside [0, %lld] (the sequence length)", op, (long long)b, (long long)v[b], (long long)T);
      nt_release(h);
      return NULL;
    }
  nt_Tensor *r = nt_to_device(h, dev);
  nt_release(h);
  return r;
}

int nt_rnn(nt_RnnMode mode, nt_Tensor *x0, nt_Tensor *const *weights, int nweights, bool has_bias, int num_layers,
           bool bidirectional, bool batch_first, double dropout, bool training, nt_Tensor *h00, nt_Tensor *c00,
           nt_Tensor *lengths, nt_Tensor **out, nt_Tensor **hn, nt_Tensor **cn) {
  rnn_init();
  const char *op = nt_rnn_mode_name(mode);
  char s[128];
  *out = *hn = NULL;
  if (cn) *cn = NULL;
  if ((int)mode < 0 || mode > NT_RNN_GRU) NT_FAIL("rnn: unknown mode %d", (int)mode);
  bool lstm = mode == NT_RNN_LSTM;
  int D = bidirectional ? 2 : 1, per = has_bias ? 4 : 2;
  if (num_layers < 1 || num_layers > 1024) NT_FAIL("%s: num_layers must be in [1, 1024], got %d", op, num_layers);
  if (!(dropout >= 0 && dropout <= 1)) NT_FAIL("%s: dropout must be in [0, 1], got %g", op, dropout);
  if (nweights != num_layers * D * per)
    NT_FAIL("%s: expected %d weight tensors (%d layers x %d directions x %s), got %d", op, num_layers * D * per, num_layers, D,
            has_bias ? "weight_ih, weight_hh, bias_ih, bias_hh" : "weight_ih, weight_hh", nweights);
  if (x0->ndim != 2 && x0->ndim != 3)
    NT_FAIL("%s: input must be [T, B, input_size] (batch_first: [B, T, input_size]) or unbatched [T, input_size], got %s", op,
            nt_shape_str(x0->shape, x0->ndim, s, sizeof s));
  if (!nt_dtype_is_float(x0->dtype)) NT_FAIL("%s: input must be a floating tensor, got %s", op, nt_dtype_name(x0->dtype));
  bool unbatched = x0->ndim == 2;
  if (unbatched && lengths) NT_FAIL("%s: lengths need a batched input [T, B, input_size]", op);
  int64_t G = rnn_gates(mode), H = weights[1]->ndim == 2 ? weights[1]->shape[1] : -1;
  if (H < 1) NT_FAIL("%s: weight_hh_l0 must have shape [%lld * hidden_size, hidden_size] with hidden_size >= 1, got %s", op, (long long)G,
                     nt_shape_str(weights[1]->shape, weights[1]->ndim, s, sizeof s));
  /* x as [T, B, I] */
  nt_Tensor *xb = unbatched ? nt_unsqueeze(x0, 1) : batch_first ? nt_transpose(x0, 0, 1) : nt_retain(x0);
  if (!xb) return -1;
  int64_t T = xb->shape[0], B = xb->shape[1], I = xb->shape[2];
  if (T < 1 || B < 1) { nt_release(xb); NT_FAIL("%s: expected a non-empty input (sequence length and batch >= 1), got %s", op, nt_shape_str(x0->shape, x0->ndim, s, sizeof s)); }
  for (int l = 0; l < num_layers; l++)
    for (int d = 0; d < D; d++) {
      nt_Tensor *const *w = weights + (l * D + d) * per;
      int64_t in = l == 0 ? I : H * D;
      if (check_param(op, w[0], "weight_ih", l, d, G * H, in, x0) || check_param(op, w[1], "weight_hh", l, d, G * H, H, x0) ||
          (has_bias && (check_param(op, w[2], "bias_ih", l, d, G * H, 0, x0) || check_param(op, w[3], "bias_hh", l, d, G * H, 0, x0)))) {
        nt_release(xb);
        return -1;
      }
    }
  if (!lstm && c00) { nt_release(xb); NT_FAIL("%s: c0 is only for lstm", op); }
  int ac = nt_autocast_set(-1);
  nt_Tensor *xf = nn_compute_float(op, xb);
  nt_release(xb);
  nt_DType dt = xf ? xf->dtype : NT_F32;
  nt_Tensor *x = xf ? nt_contiguous(xf) : NULL;
  nt_release(xf);
  int64_t LD = (int64_t)num_layers * D;
  nt_Tensor *h0u = h00 && unbatched ? nt_unsqueeze(h00, 1) : h00 ? nt_retain(h00) : NULL;
  nt_Tensor *c0u = c00 && unbatched ? nt_unsqueeze(c00, 1) : c00 ? nt_retain(c00) : NULL;
  nt_Tensor *h0 = NULL, *c0 = NULL, *len = NULL;
  nt_Tensor **hs = calloc((size_t)LD, sizeof *hs), **cs = calloc((size_t)LD, sizeof *cs);
  int rc = -1;
  if (!x || !hs || !cs || (h00 && !h0u) || (c00 && !c0u)) { if (x && (!hs || !cs)) nt_error_oom(sizeof *hs * (size_t)LD); goto done; }
  if (!(h0 = prep_state(op, "h0", h0u, LD, B, H, x))) goto done;
  if (lstm && !(c0 = prep_state(op, "c0", c0u, LD, B, H, x))) goto done;
  if (lengths && !(len = prep_lengths(op, lengths, B, T, x->device))) goto done;
  nt_Tensor *layer_in = nt_retain(x);
  for (int l = 0; l < num_layers; l++) {
    nt_Tensor *ys[2] = {NULL, NULL};
    bool ok = true;
    for (int d = 0; d < D && ok; d++) {
      nt_Tensor *const *w = weights + (l * D + d) * per;
      bool pok = true;
      nt_Tensor *p[4];
      for (int k = 0; k < 4; k++) p[k] = k < per ? nn_channel_param(w[k], dt, &pok) : NULL;
      /* nn_channel_param makes any shape contiguous in dt (it is not [C]-specific) */
      nt_Tensor *h = sel(h0, (int64_t)l * D + d), *c = c0 ? sel(c0, (int64_t)l * D + d) : NULL;
      nt_Tensor *packed = pok && h && (!c0 || c) ? rnn_layer(mode, layer_in, p[0], p[1], p[2], p[3], h, c, len, d == 1) : NULL;
      for (int k = 0; k < 4; k++) nt_release(p[k]);
      nt_release(h); nt_release(c);
      if (!packed) { ok = false; break; }
      ys[d] = nt_narrow(packed, 0, 0, T);
      hs[l * D + d] = nt_select(packed, 0, T);
      if (lstm) cs[l * D + d] = nt_select(packed, 0, T + 1);
      nt_release(packed);
      if (!ys[d] || !hs[l * D + d] || (lstm && !cs[l * D + d])) ok = false;
    }
    nt_Tensor *y = !ok ? NULL : D == 2 ? nt_concat(ys, 2, 2) : nt_retain(ys[0]);
    nt_release(ys[0]); nt_release(ys[1]);
    nt_release(layer_in);
    layer_in = NULL;
    if (y && dropout > 0 && training && l < num_layers - 1) {
      nt_Tensor *yd = nt_dropout(y, dropout, true);
      nt_release(y);
      y = yd;
    }
    if (!y) goto done;
    layer_in = y;
  }
  /* layer_in is the last layer's output [T, B, D*H] */
  nt_Tensor *o = unbatched ? nt_squeeze(layer_in, 1) : batch_first ? nt_transpose(layer_in, 0, 1) : nt_retain(layer_in);
  nt_release(layer_in);
  nt_Tensor *hst = nt_stack(hs, (int)LD, 0), *cst = lstm ? nt_stack(cs, (int)LD, 0) : NULL;
  if (unbatched) {
    nt_Tensor *a = hst ? nt_squeeze(hst, 1) : NULL, *b = cst ? nt_squeeze(cst, 1) : NULL;
    nt_release(hst); nt_release(cst);
    hst = a; cst = b;
  }
  if (!o || !hst || (lstm && !cst)) { nt_release(o); nt_release(hst); nt_release(cst); goto done; }
  *out = nn_cast_back(o, x0->dtype);
  *hn = nn_cast_back(hst, x0->dtype);
  if (lstm) *cn = nn_cast_back(cst, x0->dtype);
  else nt_release(cst);
  rc = *out && *hn && (!lstm || *cn) ? 0 : -1;
  if (rc) { nt_release(*out); nt_release(*hn); if (cn) nt_release(*cn); *out = *hn = NULL; if (cn) *cn = NULL; }
done:
  nt_autocast_set(ac);
  if (hs) for (int64_t i = 0; i < LD; i++) nt_release(hs[i]);
  if (cs) for (int64_t i = 0; i < LD; i++) nt_release(cs[i]);
  free(hs); free(cs);
  nt_release(x); nt_release(h0u); nt_release(c0u); nt_release(h0); nt_release(c0); nt_release(len);
  return rc;
}
