// cudnn.cu — scaled dot-product attention through cuDNN's fused flash-attention
// engines, built with cuDNN's backend (graph) C API.  The one place nabla reaches
// cuDNN: the library is dlopened here on first use, never linked.
//
// Loading (load_cudnn): libcudnn.so.9 from $NABLA_CUDNN_LIBRARY, then the
// loader's search path (LD_LIBRARY_PATH, this module's RUNPATH, ld.so's cache),
// then /usr/local/cuda/lib64.  The emulated module (cuda/emu/) tries ONLY
// $NABLA_CUDNN_LIBRARY: a real cuDNN cannot run on the emulator's host memory, so
// there the variable names the tests' stand-in (tests/cuda/cudnn_standin/).
// cudnnGetVersion() must be >= kMinVersion.  A missing or too-old library is a
// REASON (attention runs on attention.cu / attention_gemm.cu and
// cuda.attention_backend() says why), never an error, unless
// NABLA_CUDA_ATTENTION=cudnn forces it.  Every cuDNN status is checked; the
// message carries cudnnGetErrorString and cudnnGetLastErrorString.
//
// Tensors: cuDNN sees every operand as 4-D [B, H, rows, cols] with explicit
// strides (View), so strided views (the heads of a packed [B, T, 3C] qkv) need
// no copy.  The op contract of today (tensor/nn/attention.h) sends contiguous
// [B, T, D] operands, seen as [B, 1, T, D]; lse [B, T] is the f32 "Stats"
// tensor [B, 1, T, 1].
//
// The forward graph (the pattern cuDNN's fused flash forward engine matches; the
// same one cudnn-frontend's SDPA node emits).  uids: 1 Q, 2 K, 3 V, 4 O, 5 Stats,
// 6 scale, 7 -inf; virtual intermediates (uid >= 100) are f32:
//   s1   = matmul(Q [B,H,T,D], K^T [B,H,D,S])  K^T is uid 2 described with its
//                                               last two dims and strides swapped
//   s2   = s1 * scale                          scale: a by-value f32 [1,1,1,1]
//   mask only: s2 = s2 + Bias                  Bias: uid 13, the additive mask in the io dtype,
//                                               [mb, 1 or H, T, S] with zero strides where it
//                                               broadcasts (the contract's [1 or B, T, S]; a bool
//                                               mask is already 0 / -inf: attention.c mask_additive)
//   causal only (top-left aligned, query i sees keys j <= i):
//     row = gen_index(s2, axis 2), col = gen_index(s2, axis 3)   (int32)
//     keep = row >= col                                           (bool)
//     s3 = select(s2, -inf, keep)              -inf: a by-value f32
//   m    = reduce_max(s3) [B,H,T,1]            softmax, spelled out so the
//   e    = exp(s3 - m)                         engine can fuse it with the GEMMs
//   l    = reduce_add(e) [B,H,T,1]             and keep P in registers
//   Stats = m + log(l)                         non-virtual f32: saved for backward
//                                              (it is our lse: logsumexp of row i)
//   P    = e / l
//   dropout only (training, p in (0, 1); the pattern cudnn-frontend's SDPA node emits):
//     M  = rng(Seed, Offset)                   RNG node: Philox, BERNOULLI with probability
//                                              1-p (keep), [B,H,T,S] f32 virtual; Seed uid 14
//                                              and Offset uid 15 are DEVICE i64 [1,1,1,1]
//     P  = (P * M) * dscale                    dscale: uid 16, a by-value f32 1/(1-p)
//   O    = matmul(P, V)                        written in the io dtype
// The backward graph (the flash backward pattern; P is recomputed from Stats,
// never stored).  Further uids: 8 dO, 9 dQ, 10 dK, 11 dV, 12 Dsum:
//   Dsum = reduce_add(dO * O) [B,H,T,1]         non-virtual f32 scratch: the row sum
//                                               D_i = dO_i . O_i of the softmax grad
//   s    = scale Q K^T (+ Bias, + the causal select, as forward; no dBias: a mask that
//          requires grad takes the composed path, attention.c)
//   P    = exp(s - Stats)
//   dV   = matmul(reshape(P) = P^T, dO)         reshape: a transposed view (strides
//                                               swapped), the way the engine wants it
//   dP   = matmul(dO, V^T)
//   dS   = P * (dP - Dsum) * scale
//   dQ   = matmul(dS, K),  dK = matmul(reshape(dS) = dS^T, Q)
// Dropout in the backward: M = rng(Seed, Offset) first (the same seed and offset as the
// forward: the same mask), Dsum = reduce_add(dO * O) * (1-p) (uid 17, by value; O is the
// dropped output), P's use in dV is (P * M) * dscale, dP = dP * M before "- Dsum", and
// dS = P * (dP - Dsum) * dscale * scale: dS = P (M dP / (1-p) - D), the softmax gradient
// through the dropped probabilities.  The seed and offset reach the forward's kernel as
// the host generator's state (attention.h NT_SDPA_SEED/OFFSET); dropout_state writes them
// into the op's rng tensor (i64 [4]: seed at 0, offset at 2, each 16-byte aligned) that
// both graphs read, reading the captured step's random slot instead while a step is
// captured (graph.h), so each replay draws a new mask, as random.cu's kernels do.  A
// dropout graph whose RNG node is missing or unused cannot be built: check_dropout.
// Which engine runs is cuDNN's heuristics' choice (mode A); the first config that
// finalizes wins, deterministic ones first (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
// engines only when no other finalizes: then attention_backend() says so).
//
// Plan cache: building a plan takes tens to hundreds of ms, executing one µs; plans
// are kept by (direction, dtype, causal, scale, every operand's dims and strides,
// the mask's dims and strides: its kind and broadcast, dropout on/off and p: p is
// the RNG descriptor's Bernoulli probability, fixed in the graph)
// in a small table (kCacheSize, the oldest replaced).  The training flag is
// implicit: the forward always writes Stats (the op contract saves lse).  The
// workspace comes from the caching allocator per call (Scratch).
#include "common.cuh"
#include "cuda/graph.h"
#include "tensor/nn/attention.h"
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace ncu {
namespace {

constexpr size_t kMinVersion = 90000;   // cuDNN 9.0.0: libcudnn.so.9, flash fwd + bwd with the causal pattern
constexpr int kCacheSize = 64;

// ---- the library ------------------------------------------------------------------------
struct Dnn {
  decltype(&::cudnnGetVersion) GetVersion;
  decltype(&::cudnnGetErrorString) GetErrorString;
  decltype(&::cudnnGetLastErrorString) GetLastErrorString;
  decltype(&::cudnnCreate) Create;
  decltype(&::cudnnSetStream) SetStream;
  decltype(&::cudnnBackendCreateDescriptor) CreateDescriptor;
  decltype(&::cudnnBackendDestroyDescriptor) DestroyDescriptor;
  decltype(&::cudnnBackendFinalize) Finalize;
  decltype(&::cudnnBackendSetAttribute) SetAttribute;
  decltype(&::cudnnBackendGetAttribute) GetAttribute;
  decltype(&::cudnnBackendExecute) Execute;
};
Dnn dnn;
pthread_once_t once = PTHREAD_ONCE_INIT;
bool ready;
size_t version;
char reason[700] = "not loaded";
cudnnHandle_t handle;
bool nondeterministic;   // the last backward plan built runs a non-deterministic engine

void load_cudnn(void) {
  const char *env = getenv("NABLA_CUDNN_LIBRARY");
  const char *cands[3];
  int nc = 0;
  if (env && *env) cands[nc++] = env;
#ifndef NABLA_CUDA_EMU
  cands[nc++] = "libcudnn.so.9";
  cands[nc++] = "/usr/local/cuda/lib64/libcudnn.so.9";
#else
  if (!nc) {
    snprintf(reason, sizeof reason, "cuDNN is not emulated: the emulated device runs the fallback kernels "
             "(NABLA_CUDNN_LIBRARY may name a stand-in library)");
    return;
  }
#endif
  void *h = nullptr;
  char first[400] = "";
  for (int i = 0; i < nc && !h; i++) {
    dlerror();
    h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && !first[0]) { const char *e = dlerror(); snprintf(first, sizeof first, "%s", e ? e : cands[i]); }
  }
  if (!h) { snprintf(reason, sizeof reason, "cuDNN is not available: %s", first); return; }
  const char *missing = nullptr;
#define REQ(f, name) if (!missing && !(*(void **)&dnn.f = dlsym(h, name))) missing = name
  REQ(GetVersion, "cudnnGetVersion"); REQ(GetErrorString, "cudnnGetErrorString");
  REQ(GetLastErrorString, "cudnnGetLastErrorString"); REQ(Create, "cudnnCreate"); REQ(SetStream, "cudnnSetStream");
  REQ(CreateDescriptor, "cudnnBackendCreateDescriptor"); REQ(DestroyDescriptor, "cudnnBackendDestroyDescriptor");
  REQ(Finalize, "cudnnBackendFinalize"); REQ(SetAttribute, "cudnnBackendSetAttribute");
  REQ(GetAttribute, "cudnnBackendGetAttribute"); REQ(Execute, "cudnnBackendExecute");
#undef REQ
  if (missing) { snprintf(reason, sizeof reason, "cuDNN is not usable: the loaded library has no %s", missing); return; }
  version = dnn.GetVersion();
  if (version < kMinVersion) {
    // 8.x numbers versions major*1000 + minor*100 + patch, 9.x major*10000 + ...
    size_t mj = version >= 10000 ? version / 10000 : version / 1000, mn = version / 100 % (version >= 10000 ? 100 : 10);
    snprintf(reason, sizeof reason, "cuDNN %zu.%zu.%zu is too old (the fused attention graph needs 9.0.0 or newer)",
             mj, mn, version % 100);
    return;
  }
  cudnnStatus_t st = dnn.Create(&handle);
  if (st == CUDNN_STATUS_SUCCESS) st = dnn.SetStream(handle, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    char last[300] = "";
    dnn.GetLastErrorString(last, sizeof last);
    snprintf(reason, sizeof reason, "cuDNN is not usable: cudnnCreate: %s%s%s", dnn.GetErrorString(st), last[0] ? ": " : "", last);
    return;
  }
  ready = true;
  snprintf(reason, sizeof reason, "ready");
}

// ---- errors -----------------------------------------------------------------------------
// "<op>: cuDNN <what>: <status string>: <last error string>"
int dnn_fail(const char *op, const char *what, cudnnStatus_t st) {
  char last[400] = "";
  dnn.GetLastErrorString(last, sizeof last);
  host->error_set("%s: cuDNN %s failed: %s (%d)%s%s", op, what, dnn.GetErrorString(st), (int)st, last[0] ? ": " : "", last);
  return -1;
}
#define DNN(call, what) do { cudnnStatus_t st_ = (call); if (st_ != CUDNN_STATUS_SUCCESS) return dnn_fail(op, what, st_); } while (0)

// ---- operands as cuDNN sees them ------------------------------------------------------------
struct View { int64_t d[4], s[4]; };   // [B, H, rows, cols] and strides (elements)

// a contract operand as [B, H, rows, cols]: [B, rows, cols] as [B, 1, rows, cols];
// the views of NT_SDPA_VIEWS (batch + [rows, cols], 1 or 2 batch dims) as they are
View view_of(const nt_Tensor *t) {
  const int64_t *d = t->shape, *s = t->strides;
  if (t->ndim == 4) return View{{d[0], d[1], d[2], d[3]}, {s[0], s[1], s[2], s[3]}};
  return View{{d[0], 1, d[1], d[2]}, {s[0], s[0], s[1], s[2]}};
}
View transposed(View v) {
  View t = v;
  t.d[2] = v.d[3]; t.d[3] = v.d[2]; t.s[2] = v.s[3]; t.s[3] = v.s[2];
  return t;
}
View rowmajor(int64_t b, int64_t h, int64_t r, int64_t c) { return View{{b, h, r, c}, {h * r * c, r * c, c, 1}}; }

cudnnDataType_t dnn_dtype(nt_DType dt) { return dt == NT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

// ---- graph building -----------------------------------------------------------------------
// Owns every descriptor made for one graph; the plan outlives it (the cache keeps it).
struct Builder {
  const char *op;
  cudnnBackendDescriptor_t all[160];   // the largest graph (backward, causal, mask, dropout) + 16 engine configs
  int nall = 0;
  cudnnBackendDescriptor_t ops[32];
  int nops = 0;
  int64_t next_virtual = 100;
  // dropout bookkeeping for check_dropout: RNG ops added, and the ops that read the mask
  int nrng = 0, rng_uses = 0;
  cudnnBackendDescriptor_t rng_y = nullptr;
  const char *plant = nullptr;   // NABLA_CUDNN_TEST_PLANT (tests only): a broken dropout graph
  explicit Builder(const char *o) : op(o) {}
  ~Builder() { for (int i = 0; i < nall; i++) dnn.DestroyDescriptor(all[i]); }
  Builder(const Builder &) = delete;
  Builder &operator=(const Builder &) = delete;

  int make(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
    if (nall == (int)(sizeof all / sizeof all[0])) { host->error_set("%s: internal error: cuDNN graph too large", op); return -1; }
    DNN(dnn.CreateDescriptor(type, out), "descriptor creation");
    all[nall++] = *out;
    return 0;
  }
  int set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
          const void *v) {
    DNN(dnn.SetAttribute(d, name, type, n, v), "attribute setting");
    return 0;
  }
  int fin(cudnnBackendDescriptor_t d, const char *what) {
    DNN(dnn.Finalize(d), what);
    return 0;
  }
  // a tensor descriptor: uid, dims, strides, dtype; virtual (an intermediate kept on
  // chip) or by value (a host scalar in the variant pack)
  int tensor(int64_t uid, const View &v, cudnnDataType_t dt, bool virt, bool by_value, cudnnBackendDescriptor_t *out) {
    int64_t align = 16;
    if (make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out) || set(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        set(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, v.d) ||
        set(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, v.s) ||
        set(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        set(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
        set(*out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt) ||
        (by_value && set(*out, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)))
      return -1;
    return fin(*out, "tensor descriptor finalize");
  }
  int virt(const View &v, cudnnDataType_t dt, cudnnBackendDescriptor_t *out) { return tensor(next_virtual++, v, dt, true, false, out); }
  int add_op(cudnnBackendDescriptor_t o, const char *what) {
    if (fin(o, what)) return -1;
    if (nops == (int)(sizeof ops / sizeof ops[0])) { host->error_set("%s: internal error: too many cuDNN ops", op); return -1; }
    ops[nops++] = o;
    return 0;
  }
  // y = mode(x [, b] [, t]); GEN_INDEX takes an axis
  int pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                cudnnBackendDescriptor_t y, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw, o;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw) || set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        (axis >= 0 && set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis)) || fin(pw, "pointwise descriptor finalize"))
      return -1;
    if (make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &o) ||
        set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) ||
        set(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        (b && set(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
        (t && set(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t)) ||
        set(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
      return -1;
    if (rng_y && (x == rng_y || b == rng_y)) rng_uses++;
    return add_op(o, "pointwise operation finalize");
  }
  // y = the Bernoulli(keep) mask of Philox(seed, offset): the dropout RNG node; seed and
  // offset are tensor descriptors (device scalars), keep = 1 - p
  int rng(cudnnBackendDescriptor_t seed, cudnnBackendDescriptor_t offset, double keep, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd, o;
    cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    if (make(CUDNN_BACKEND_RNG_DESCRIPTOR, &rd) || set(rd, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist) ||
        set(rd, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &keep) || fin(rd, "rng descriptor finalize"))
      return -1;
    if (make(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, &o) ||
        set(o, CUDNN_ATTR_OPERATION_RNG_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        set(o, CUDNN_ATTR_OPERATION_RNG_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd) ||
        set(o, CUDNN_ATTR_OPERATION_RNG_SEED, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &seed) ||
        set(o, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &offset))
      return -1;
    rng_y = y;
    if (plant && strcmp(plant, "no_rng") == 0) return fin(o, "rng operation finalize");   // built, never added
    nrng++;
    return add_op(o, "rng operation finalize");
  }
  // Never a silent drop of dropout: a dropout graph has exactly one RNG node whose mask
  // `uses` pointwise ops read (the forward's P * M; the backward's P * M and dP * M),
  // and a graph without dropout has none.  An internal error otherwise.
  int check_dropout(bool dropout, int uses) {
    if (dropout ? nrng == 1 && rng_uses == uses : nrng == 0 && !rng_y) return 0;
    host->error_set("%s: internal error: the cuDNN %s graph has %d RNG node(s) whose mask %d op(s) read "
                    "(expected %d and %d): refusing a graph that would %s", op, dropout ? "dropout" : "attention", nrng,
                    rng_uses, dropout ? 1 : 0, dropout ? uses : 0, dropout ? "silently skip dropout" : "drop out unasked");
    return -1;
  }
  int matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm, o;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    if (make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm) || set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
        fin(mm, "matmul descriptor finalize"))
      return -1;
    if (make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &o) ||
        set(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a) ||
        set(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b) ||
        set(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c) ||
        set(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm))
      return -1;
    return add_op(o, "matmul operation finalize");
  }
  // y = reduce(x) over the dims where y has extent 1
  int reduce(cudnnReduceTensorOp_t red, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd, o;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    if (make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &rd) ||
        set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red) ||
        set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) || fin(rd, "reduction descriptor finalize"))
      return -1;
    if (make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &o) ||
        set(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        set(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        set(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd))
      return -1;
    return add_op(o, "reduction operation finalize");
  }
  // y: the same elements as x seen through other dims/strides (a transpose here)
  int reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t o;
    if (make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, &o) ||
        set(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        set(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
      return -1;
    return add_op(o, "reshape operation finalize");
  }
  // scale * Q K^T, + the additive mask (bias, or NULL), then the causal select: the
  // scores both graphs start with
  int scores(cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
             cudnnBackendDescriptor_t ninf, cudnnBackendDescriptor_t bias, const View &sv, bool causal,
             cudnnBackendDescriptor_t *out) {
    cudnnBackendDescriptor_t s1, s2;
    if (virt(sv, CUDNN_DATA_FLOAT, &s1) || matmul(q, kt, s1) || virt(sv, CUDNN_DATA_FLOAT, &s2) ||
        pointwise(CUDNN_POINTWISE_MUL, s1, scale, nullptr, s2))
      return -1;
    *out = s2;
    if (bias) {
      cudnnBackendDescriptor_t sb;
      if (virt(sv, CUDNN_DATA_FLOAT, &sb) || pointwise(CUDNN_POINTWISE_ADD, s2, bias, nullptr, sb)) return -1;
      *out = s2 = sb;
    }
    if (!causal) return 0;
    cudnnBackendDescriptor_t row, col, keep, s3;
    if (virt(sv, CUDNN_DATA_INT32, &row) || pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, row, 2) ||
        virt(sv, CUDNN_DATA_INT32, &col) || pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, col, 3) ||
        virt(sv, CUDNN_DATA_BOOLEAN, &keep) || pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep) ||
        virt(sv, CUDNN_DATA_FLOAT, &s3) || pointwise(CUDNN_POINTWISE_BINARY_SELECT, s2, ninf, keep, s3))
      return -1;
    *out = s3;
    return 0;
  }
  // the operation graph, then the first engine config of the heuristics that finalizes
  // into a plan (deterministic ones first); *plan is owned by the caller
  int plan(cudnnBackendDescriptor_t *plan_out, bool *nondet) {
    cudnnBackendDescriptor_t graph, heur;
    if (make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph) ||
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops) ||
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) || fin(graph, "operation graph finalize"))
      return -1;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    if (make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) ||
        set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) || fin(heur, "engine heuristics finalize"))
      return -1;
    int64_t count = 0;
    DNN(dnn.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "engine heuristics query");
    if (count <= 0) { host->error_set("%s: cuDNN has no engine for the attention graph (heuristics returned none)", op); return 1; }
    if (count > 16) count = 16;
    cudnnBackendDescriptor_t cfg[16], eng[16];
    for (int64_t i = 0; i < count; i++)
      if (make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]) || make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng[i])) return -1;
    int64_t got = 0;
    DNN(dnn.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
        "engine heuristics results");
    bool det[16];
    for (int64_t i = 0; i < got; i++) {
      det[i] = true;
      int64_t n = 0, nn = 0;
      cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
      if (dnn.GetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng[i]) ==
              CUDNN_STATUS_SUCCESS && n == 1 &&
          dnn.GetAttribute(eng[i], CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                           &nn, notes) == CUDNN_STATUS_SUCCESS)
        for (int64_t j = 0; j < nn; j++) det[i] &= notes[j] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int pass = 0; pass < 2; pass++)
      for (int64_t i = 0; i < got; i++) {
        if (det[i] != (pass == 0)) continue;
        cudnnBackendDescriptor_t p;
        DNN(dnn.CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p), "execution plan creation");
        if ((last = dnn.SetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)) == CUDNN_STATUS_SUCCESS &&
            (last = dnn.SetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i])) ==
                CUDNN_STATUS_SUCCESS &&
            (last = dnn.Finalize(p)) == CUDNN_STATUS_SUCCESS) {
          *plan_out = p;
          *nondet = !det[i];
          return 0;
        }
        dnn.DestroyDescriptor(p);
      }
    dnn_fail(op, "execution plan finalize (no engine config of the heuristics finalized)", last);
    return 1;
  }
};

// ---- the plan cache -----------------------------------------------------------------------
struct Key {
  int bwd, causal, dtype, mask;   // mask: 1 when the graph adds a bias (its view: v[8])
  int dropout;                    // 1: the RNG node, keep probability 1 - p
  double scale, p;
  View v[9];   // q, k, v, o, (dO, dq, dk, dv), mask
};
// plan == NULL: cuDNN cannot run this graph, why says so (kept, so it is not retried per call)
struct Entry { Key key; cudnnBackendDescriptor_t plan; int64_t workspace; bool nondet; bool used; char why[400]; };
Entry cache[kCacheSize];
int cache_next;
long long plans_built;   // for tests (the stand-in log shows each build too)

Entry *cache_find(const Key &k) {
  for (int i = 0; i < kCacheSize; i++)
    if (cache[i].used && memcmp(&cache[i].key, &k, sizeof k) == 0) return &cache[i];
  return nullptr;
}

// builds the forward or backward graph for k and plans it; 0, -1 (error), 1 (cuDNN
// cannot run this graph: the error message says why)
int build(const char *op, const Key &k, Entry *e) {
  Builder g(op);
  const cudnnDataType_t io = dnn_dtype((nt_DType)k.dtype);
  const View &vq = k.v[0], &vk = k.v[1], &vv = k.v[2], &vo = k.v[3];
  const int64_t B = vq.d[0], H = vq.d[1], T = vq.d[2], S = vk.d[2];
  const View sv = rowmajor(B, H, T, S), rowv = rowmajor(B, H, T, 1);
  const View one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
  cudnnBackendDescriptor_t q, kt, scale, ninf, s, stats, bias = nullptr;
  // dropout: the device seed and offset, the by-value 1/(1-p) (and (1-p) for Dsum), the mask
  cudnnBackendDescriptor_t seed = nullptr, offs = nullptr, dscale = nullptr, dkeep = nullptr, mrng = nullptr;
  const bool drop = k.dropout != 0;
  g.plant = getenv("NABLA_CUDNN_TEST_PLANT");
  const bool unused_mask = g.plant && strcmp(g.plant, "rng_unused") == 0;
  if (drop && (g.tensor(14, one, CUDNN_DATA_INT64, false, false, &seed) || g.tensor(15, one, CUDNN_DATA_INT64, false, false, &offs) ||
               g.tensor(16, one, CUDNN_DATA_FLOAT, false, true, &dscale) ||
               (k.bwd && g.tensor(17, one, CUDNN_DATA_FLOAT, false, true, &dkeep))))
    return -1;
  // P (f32 [B,H,T,S]) through the dropout: (P * M) * 1/(1-p), the mask drawn here
  auto dropped = [&](cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t *pd) -> int {
    if (!drop) { *pd = p; return 0; }
    cudnnBackendDescriptor_t pm;
    if (g.virt(sv, CUDNN_DATA_FLOAT, &mrng) || g.rng(seed, offs, 1.0 - k.p, mrng)) return -1;
    if (unused_mask) pm = p;
    else if (g.virt(sv, CUDNN_DATA_FLOAT, &pm) || g.pointwise(CUDNN_POINTWISE_MUL, p, mrng, nullptr, pm)) return -1;
    return g.virt(sv, CUDNN_DATA_FLOAT, pd) || g.pointwise(CUDNN_POINTWISE_MUL, pm, dscale, nullptr, *pd);
  };
  if (g.tensor(1, vq, io, false, false, &q) || g.tensor(2, transposed(vk), io, false, false, &kt) ||
      g.tensor(6, one, CUDNN_DATA_FLOAT, false, true, &scale) || g.tensor(7, one, CUDNN_DATA_FLOAT, false, true, &ninf) ||
      g.tensor(5, rowv, CUDNN_DATA_FLOAT, false, false, &stats) ||
      (k.mask && g.tensor(13, k.v[8], io, false, false, &bias)) || g.scores(q, kt, scale, ninf, bias, sv, k.causal, &s))
    return -1;
  if (!k.bwd) {
    cudnnBackendDescriptor_t m, sub, ex, l, logl, p, pd, v, o;
    if (g.virt(rowv, CUDNN_DATA_FLOAT, &m) || g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, m) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &sub) || g.pointwise(CUDNN_POINTWISE_SUB, s, m, nullptr, sub) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &ex) || g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, nullptr, ex) ||
        g.virt(rowv, CUDNN_DATA_FLOAT, &l) || g.reduce(CUDNN_REDUCE_TENSOR_ADD, ex, l) ||
        g.virt(rowv, CUDNN_DATA_FLOAT, &logl) || g.pointwise(CUDNN_POINTWISE_LOG, l, nullptr, nullptr, logl) ||
        g.pointwise(CUDNN_POINTWISE_ADD, m, logl, nullptr, stats) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &p) || g.pointwise(CUDNN_POINTWISE_DIV, ex, l, nullptr, p) || dropped(p, &pd) ||
        g.tensor(3, vv, io, false, false, &v) || g.tensor(4, vo, io, false, false, &o) || g.matmul(pd, v, o) ||
        g.check_dropout(drop, 1))
      return -1;
  } else {
    const View &vdo = k.v[4], &vdq = k.v[5], &vdk = k.v[6], &vdv = k.v[7];
    const View svt = transposed(sv);
    cudnnBackendDescriptor_t dsum0 = nullptr, dO, o, doo, dsum, sub, p, pd, pt, dv, vt, dp, dpm, t, ds0, ds1, ds, kk, dq, dst, dk;
    // Dsum: the row sum of dO * O, times (1-p) under dropout (uid 12 either way)
    if (g.tensor(8, vdo, io, false, false, &dO) || g.tensor(4, vo, io, false, false, &o) ||
        g.virt(rowmajor(B, H, T, vo.d[3]), CUDNN_DATA_FLOAT, &doo) || g.pointwise(CUDNN_POINTWISE_MUL, dO, o, nullptr, doo) ||
        g.tensor(12, rowv, CUDNN_DATA_FLOAT, false, false, &dsum) ||
        (drop ? g.virt(rowv, CUDNN_DATA_FLOAT, &dsum0) || g.reduce(CUDNN_REDUCE_TENSOR_ADD, doo, dsum0) ||
                    g.pointwise(CUDNN_POINTWISE_MUL, dsum0, dkeep, nullptr, dsum)
              : g.reduce(CUDNN_REDUCE_TENSOR_ADD, doo, dsum)) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &sub) || g.pointwise(CUDNN_POINTWISE_SUB, s, stats, nullptr, sub) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &p) || g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, nullptr, p) || dropped(p, &pd) ||
        g.virt(svt, CUDNN_DATA_FLOAT, &pt) || g.reshape(pd, pt) ||
        g.tensor(11, vdv, io, false, false, &dv) || g.matmul(pt, dO, dv) ||
        g.tensor(3, transposed(vv), io, false, false, &vt) || g.virt(sv, CUDNN_DATA_FLOAT, &dp) || g.matmul(dO, vt, dp))
      return -1;
    dpm = dp;   // dropout: the gradient reaches only the kept probabilities
    if (drop && !unused_mask && (g.virt(sv, CUDNN_DATA_FLOAT, &dpm) || g.pointwise(CUDNN_POINTWISE_MUL, dp, mrng, nullptr, dpm)))
      return -1;
    if (g.virt(sv, CUDNN_DATA_FLOAT, &t) || g.pointwise(CUDNN_POINTWISE_SUB, dpm, dsum, nullptr, t) ||
        g.virt(sv, CUDNN_DATA_FLOAT, &ds0) || g.pointwise(CUDNN_POINTWISE_MUL, p, t, nullptr, ds0))
      return -1;
    ds1 = ds0;
    if (drop && (g.virt(sv, CUDNN_DATA_FLOAT, &ds1) || g.pointwise(CUDNN_POINTWISE_MUL, ds0, dscale, nullptr, ds1))) return -1;
    if (g.virt(sv, CUDNN_DATA_FLOAT, &ds) || g.pointwise(CUDNN_POINTWISE_MUL, ds1, scale, nullptr, ds) ||
        g.tensor(2, vk, io, false, false, &kk) || g.tensor(9, vdq, io, false, false, &dq) || g.matmul(ds, kk, dq) ||
        g.virt(svt, CUDNN_DATA_FLOAT, &dst) || g.reshape(ds, dst) ||
        g.tensor(10, vdk, io, false, false, &dk) || g.matmul(dst, q, dk) || g.check_dropout(drop, 2))
      return -1;
  }
  int rc = g.plan(&e->plan, &e->nondet);
  if (rc) return rc;
  e->workspace = 0;
  int64_t n = 0;
  cudnnStatus_t st = dnn.GetAttribute(e->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &e->workspace);
  if (st != CUDNN_STATUS_SUCCESS) { dnn.DestroyDescriptor(e->plan); return dnn_fail(op, "workspace size query", st); }
  plans_built++;
  return 0;
}

// the cached plan for k, built on a miss (replacing the oldest entry when full)
int plan_for(const char *op, const Key &k, Entry **out) {
  if ((*out = cache_find(k))) {
    if ((*out)->plan) return 0;
    host->error_set("%s", (*out)->why);
    return 1;
  }
  Entry *e = &cache[cache_next];
  if (e->used && e->plan) dnn.DestroyDescriptor(e->plan);
  e->used = false;
  Entry fresh = {};
  fresh.key = k;
  int rc = build(op, k, &fresh);
  if (rc < 0) return rc;
  if (rc == 1) { fresh.plan = nullptr; snprintf(fresh.why, sizeof fresh.why, "%s", host->error_msg()); }
  fresh.used = true;
  *e = fresh;
  cache_next = (cache_next + 1) % kCacheSize;
  *out = e;
  return rc;
}

int execute(const char *op, const Entry *e, const int64_t *uids, void **ptrs, int n) {
  Scratch ws((size_t)(e->workspace > 0 ? e->workspace : 0));
  if (!ws.p) return -1;
  cudnnBackendDescriptor_t vp;
  DNN(dnn.CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp), "variant pack creation");
  cudnnStatus_t st;
  const char *what = "variant pack";
  if ((st = dnn.SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)) == CUDNN_STATUS_SUCCESS &&
      (st = dnn.SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)) == CUDNN_STATUS_SUCCESS &&
      (st = dnn.SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws.p)) == CUDNN_STATUS_SUCCESS &&
      (st = dnn.Finalize(vp)) == CUDNN_STATUS_SUCCESS) {
    what = "execution";
    st = dnn.Execute(handle, e->plan, vp);
  }
  dnn.DestroyDescriptor(vp);
  if (st != CUDNN_STATUS_SUCCESS) return dnn_fail(op, what, st);
  last_op = op;
  return 0;
}

}  // namespace

// Can cuDNN run attention here at all?  true, or false with the reason in why.
bool cudnn_ready(char *why, size_t n) {
  pthread_once(&once, load_cudnn);
  if (why && n) snprintf(why, n, "%s", reason);
  return ready;
}

namespace {
// the contract's additive mask (attention.h): contiguous [mask_b, T, S], or NULL
const nt_Tensor *mask_of(const nt_KernelArgs *a, bool bwd) {
  if (a->niarg <= NT_SDPA_MASK || !a->iarg[NT_SDPA_MASK] || !a->extra) return nullptr;
  return bwd ? ((const nt_SdpaGrads *)a->extra)->mask : ((const nt_SdpaExtra *)a->extra)->mask;
}
// dropout: the op asks for it (iarg), and the i64 [4] seed/offset tensor (attention.h), or NULL
bool dropout_of(const nt_KernelArgs *a) { return a->niarg > NT_SDPA_DROPOUT && a->iarg[NT_SDPA_DROPOUT]; }
const nt_Tensor *rng_of(const nt_KernelArgs *a, bool bwd) {
  if (!dropout_of(a) || !a->extra) return nullptr;
  return bwd ? ((const nt_SdpaGrads *)a->extra)->rng : ((const nt_SdpaExtra *)a->extra)->rng;
}

// The Philox state the dropout graph reads: rng[0] = seed, rng[2] = offset (each
// 16-byte aligned, as the graph's uid 14 and 15 declare).  Eager: the host generator's
// (the launch's arguments).  While a step is captured: the graph's random slot
// {seed, offset delta} (graph.h), read at each replay, so a replay draws a new mask.
__global__ void dropout_state_kernel(int64_t *rng, uint64_t seed, uint64_t offset, const uint64_t *slot) {
  if (slot) { seed = slot[0]; offset += slot[1]; }
  rng[0] = (int64_t)seed; rng[1] = 0;
  rng[2] = (int64_t)offset; rng[3] = 0;
}
int dropout_state(const char *op, const nt_KernelArgs *a, const nt_Tensor *rng) {
  uint64_t seed = (uint64_t)a->iarg[NT_SDPA_SEED];
  if (capture_rng_seed(seed)) return -1;   // may end the capture (a second seed): then the slot is NULL
  dropout_state_kernel<<<1, 1, 0, stream>>>((int64_t *)base(rng), seed, (uint64_t)a->iarg[NT_SDPA_OFFSET], capture_rng_slot);
  LAUNCHED(op);
  return 0;
}

// The mask [mask_b, T, S] as the bias cuDNN adds to the scores [B, H, T, S] (q's view):
// mask_b = 1 broadcasts over B and H (extent 1 there: cuDNN's pointwise broadcast;
// packed strides, as cudnn-frontend gives size-1 dims), else one [T, S] per (b, h).
View bias_view(const View &vq, int64_t mask_b, int64_t S) {
  const int64_t T = vq.d[2], B = vq.d[0], H = vq.d[1];
  if (mask_b == 1) return View{{1, 1, T, S}, {T * S, T * S, S, 1}};
  return View{{B, H, T, S}, {H * T * S, T * S, S, 1}};
}

}  // namespace

// Would the fused cuDNN graph take this problem?  true, or false with why.
bool sdpa_cudnn_supports(const nt_KernelArgs *a, bool bwd, char *why, size_t n) {
  const int64_t *ia = a->iarg;
  nt_DType dt = bwd ? ((const nt_SdpaGrads *)a->extra)->q->dtype : a->out->dtype;
  int64_t D = ia[NT_SDPA_D], DV = ia[NT_SDPA_DV];
  if (dt != NT_F16 && dt != NT_BF16) { snprintf(why, n, "cuDNN's fused attention takes f16/bf16, got %s", nt_dtype_name(dt)); return false; }
  if (!nt_sdpa_cudnn_shape_ok(dt, D, DV)) {
    snprintf(why, n, "cuDNN's fused attention takes equal head dims d = dv, a multiple of 8, at most 128; got d=%lld, dv=%lld",
             (long long)D, (long long)DV);
    return false;
  }
  const nt_Tensor *m = mask_of(a, bwd);
  if (a->niarg > NT_SDPA_MASK_GRAD && ia[NT_SDPA_MASK_GRAD]) {
    snprintf(why, n, "the mask requires grad (cuDNN's graph computes no dBias)");
    return false;
  }
  if (a->niarg > NT_SDPA_MASK && ia[NT_SDPA_MASK] && !m) {   // never a graph that silently drops the mask
    snprintf(why, n, "the op's arguments say mask_b = %lld but carry no mask tensor", (long long)ia[NT_SDPA_MASK]);
    return false;
  }
  if (m && m->dtype != dt) {   // the front end makes it the storage dtype (attention.c mask_bmat)
    snprintf(why, n, "the additive mask must have the io dtype %s, got %s", nt_dtype_name(dt), nt_dtype_name(m->dtype));
    return false;
  }
  if (dropout_of(a)) {   // never a graph that silently drops the dropout
    const nt_Tensor *r = rng_of(a, bwd);
    double p = a->s[1];
    if (!(p > 0 && p < 1)) { snprintf(why, n, "dropout must be in (0, 1) in the graph, got %g", p); return false; }
    if (!r || r->dtype != NT_I64 || r->numel != 4 || !(r->flags & NT_T_CONTIG)) {
      snprintf(why, n, "the op's arguments ask for dropout but carry no contiguous i64 [4] seed/offset tensor");
      return false;
    }
  }
  return true;
}

// scaled_dot_product_attention (forward or backward) through the cached cuDNN plan.
// 0, -1 with the error set (an execution failure names the op), or 1 when cuDNN has
// no engine for the graph (the error message holds why; the caller decides).
int sdpa_cudnn(const nt_KernelArgs *a, bool bwd) {
  const char *op = bwd ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention";
  const int64_t *ia = a->iarg;
  Key k;
  memset(&k, 0, sizeof k);   // padding too: the key is compared with memcmp
  k.bwd = bwd;
  k.causal = ia[NT_SDPA_CAUSAL] != 0;
  k.scale = a->s[0];
  const nt_SdpaGrads *gr = (const nt_SdpaGrads *)a->extra;
  nt_Tensor *ts[8] = {a->in[0], a->in[1], a->in[2], a->out};
  if (bwd) { nt_Tensor *tb[8] = {gr->q, gr->k, gr->v, gr->o, gr->dout, gr->dq, gr->dk, gr->dv}; memcpy(ts, tb, sizeof ts); }
  k.dtype = ts[0]->dtype;
  int nv = bwd ? 8 : 4;
  for (int i = 0; i < nv; i++) k.v[i] = view_of(ts[i]);
  const nt_Tensor *mask = mask_of(a, bwd), *rng = rng_of(a, bwd);
  if (mask) { k.mask = 1; k.v[8] = bias_view(k.v[0], ia[NT_SDPA_MASK], ia[NT_SDPA_S]); }
  if (rng) { k.dropout = 1; k.p = a->s[1]; }
  Entry *e;
  int rc = plan_for(op, k, &e);
  if (rc) return rc;
  if (bwd) nondeterministic = e->nondet;
  float scale = (float)a->s[0], ninf = -INFINITY;
  float dscale = rng ? (float)(1 / (1 - k.p)) : 1, dkeep = rng ? (float)(1 - k.p) : 1;
  void *mptr = mask ? base(mask) : nullptr;
  int64_t *rptr = rng ? (int64_t *)base(rng) : nullptr;
  // the variant pack: the graph's tensors, then the mask's and the dropout's where present
  int64_t uids[17];
  void *ptrs[17];
  int n = 0;
  auto put = [&](int64_t uid, void *ptr) { uids[n] = uid; ptrs[n++] = ptr; };
  if (!bwd) {
    if (rng && dropout_state(op, a, rng)) return -1;   // the seed and offset this call draws with
    put(1, base(ts[0])); put(2, base(ts[1])); put(3, base(ts[2])); put(4, base(ts[3])); put(5, base(a->in[3]));
    put(6, &scale); put(7, &ninf);
    if (mask) put(13, mptr);
    if (rng) { put(14, rptr); put(15, rptr + 2); put(16, &dscale); }
    return execute(op, e, uids, ptrs, n);
  }
  const int64_t rows = k.v[0].d[0] * k.v[0].d[1] * k.v[0].d[2];   // B * H * T
  Scratch dsum((size_t)rows * sizeof(float));
  if (!dsum.p) return -1;
  put(1, base(gr->q)); put(2, base(gr->k)); put(3, base(gr->v)); put(4, base(gr->o)); put(5, base(gr->lse));
  put(6, &scale); put(7, &ninf); put(8, base(gr->dout)); put(9, base(gr->dq)); put(10, base(gr->dk));
  put(11, base(gr->dv)); put(12, dsum.p);
  if (mask) put(13, mptr);
  if (rng) { put(14, rptr); put(15, rptr + 2); put(16, &dscale); put(17, &dkeep); }   // the forward's seed and offset
  return execute(op, e, uids, ptrs, n);
}

bool cudnn_nondeterministic(void) { return nondeterministic; }
size_t cudnn_version(void) { return ready || version ? version : 0; }
long long cudnn_plans_built(void) { return plans_built; }

}  // namespace ncu
