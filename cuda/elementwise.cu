// elementwise.cu — binary (broadcasting), unary, comparisons, where, copy with
// dtype conversion, fill, tril/triu and arange on the GPU.
//
// Layout: the front ends (tensor/telem.c) hand us a fresh contiguous output
// and inputs that are views of the output's shape (stride 0 on broadcast
// axes).  Two paths per kernel:
//   * contiguous: every operand dense → element i is at offset i.  Binary and
//     unary ops then load/store VEC = 16 / sizeof(S) elements per thread with
//     one 16-byte access per operand (float4-style), when the pointers are
//     16-byte aligned; the tail is done element by element;
//   * strided: the host coalesces dims (make_geom) and each thread maps its
//     row-major index i to every operand's offset with div/mod per dim, in
//     32-bit math when the launch fits (n and every operand's largest offset
//     below 2^31: index32 / plan.h, chosen per launch), else in 64-bit.
// The op is a run-time switch inside the kernel (uniform across the grid, so
// no divergence) — one kernel per dtype instead of one per (op, dtype).
// Math follows tcpu_elem.c exactly: f16/bf16 compute in float, integer
// division/modulo use Python's floor semantics, max/min propagate NaN.
#include "common.cuh"
#include "tensor/tintmath.h"
#include "tensor/trange.h"
#include <type_traits>

// u8 makes "x < 0" always false: intended in the generic source
#pragma nv_diag_suppress 186

namespace ncu {
namespace {

template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };

template <typename C> __device__ inline C m_floor(C x) { if constexpr (sizeof(C) == 4) return floorf(x); else return floor(x); }

// ipow, floor division and modulo with Python's semantics: tensor/tintmath.h,
// the CPU kernels' own source

// arithmetic binary ops in the compute type C
// Integer + - * wrap modulo 2^bits as the hardware does; computed in the
// unsigned type because signed overflow is undefined in C++ (UBSan halts on
// it in the emulated build).
template <typename C> struct Wrap { typedef C type; };
template <> struct Wrap<int> { typedef unsigned int type; };
template <> struct Wrap<long long> { typedef unsigned long long type; };
template <> struct Wrap<long> { typedef unsigned long type; };
template <typename C> __device__ inline C bin_arith(int op, C x, C y, int *zd) {
  constexpr bool isf = std::is_floating_point<C>::value;
  typedef typename Wrap<C>::type W;
  switch (op) {
    case NT_OP_ADD: return (C)((W)x + (W)y);
    case NT_OP_SUB: return (C)((W)x - (W)y);
    case NT_OP_MUL: return (C)((W)x * (W)y);
    case NT_OP_DIV:
      if constexpr (isf) return x / y; else return (C)nt_ifloordiv((int64_t)x, (int64_t)y, zd);
    case NT_OP_POW:
      if constexpr (isf) { if constexpr (sizeof(C) == 4) return powf(x, y); else return pow(x, y); }
      else return (C)nt_ipow((int64_t)x, (int64_t)y);
    case NT_OP_FLOORDIV:
      if constexpr (isf) return m_floor(x / y); else return (C)nt_ifloordiv((int64_t)x, (int64_t)y, zd);
    case NT_OP_MOD:
      if constexpr (isf) return (C)nt_fmod_py((double)x, (double)y); else return (C)nt_imod((int64_t)x, (int64_t)y, zd);
    case NT_OP_MAXIMUM:
      if constexpr (isf) return (x != x || x > y) ? x : y; else return x > y ? x : y;
    case NT_OP_MINIMUM:
      if constexpr (isf) return (x != x || x < y) ? x : y; else return x < y ? x : y;
    default: return 0;
  }
}
template <typename C> __device__ inline bool bin_pred(int op, C x, C y) {
  switch (op) {
    case NT_OP_EQ: return x == y;
    case NT_OP_NE: return x != y;
    case NT_OP_LT: return x < y;
    case NT_OP_LE: return x <= y;
    case NT_OP_GT: return x > y;
    case NT_OP_GE: return x >= y;
    case NT_OP_LOGICAL_AND: return x != 0 && y != 0;
    case NT_OP_LOGICAL_OR: return x != 0 || y != 0;
    default: return false;
  }
}
template <typename S, typename O> __device__ inline O bin_apply(int op, typename Comp<S>::type x, typename Comp<S>::type y, int *zd) {
  if constexpr (std::is_same<O, b8>::value) {
    if (op >= NT_OP_EQ) { b8 r; r.v = bin_pred(op, x, y); return r; }   // comparisons, logical ops
    return St<b8>::from(bin_arith(op, x, y, zd));                        // maximum/minimum of bools
  } else return St<O>::from(bin_arith(op, x, y, zd));
}

// mode: 0 = tensor OP tensor, 1 = tensor OP scalar, 2 = scalar OP tensor
// I: the index type (uint32_t when the launch fits 32-bit math, else int64_t)
// S2: b's storage type, S's except in a mixed-dtype binary (below: f32 with f16/bf16,
// computed in f32 as after a cast, which is exact)
template <typename I, typename S, typename O, typename S2 = S>
__global__ void binary_strided(int op, I n, Geom g, O *out, const S *a, const S2 *b,
                               typename Comp<S>::type sv, int mode, DevError *err) {
  typedef typename Comp<S>::type C;
  int zd = 0;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    C v = ld(a[g.offset_of(1, i)]);
    C x = mode == 2 ? sv : v;
    C y = mode == 0 ? ld(b[g.offset_of(2, i)]) : mode == 1 ? sv : v;
    out[g.offset_of(0, i)] = bin_apply<S, O>(op, x, y, &zd);
  }
  if (zd) raise_error(err, DEVERR_ZERODIV, op, 0, 0, 0);
}

// contiguous: VEC elements per thread with 16-byte loads; [vec_n*VEC, n) scalar tail
template <typename S, typename O, int VEC, typename S2 = S>
__global__ void binary_contig(int op, int64_t n, O *out, const S *a, const S2 *b,
                              typename Comp<S>::type sv, int mode, DevError *err) {
  typedef typename Comp<S>::type C;
  int zd = 0;
  int64_t nvec = n / VEC, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += stride) {
    Vec<S, VEC> va = reinterpret_cast<const Vec<S, VEC> *>(a)[v];
    Vec<S2, VEC> vb;
    if (mode == 0) vb = reinterpret_cast<const Vec<S2, VEC> *>(b)[v];
    Vec<O, VEC> vo;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      C p = ld(va.v[k]);
      C x = mode == 2 ? sv : p, y = mode == 0 ? ld(vb.v[k]) : mode == 1 ? sv : p;
      vo.v[k] = bin_apply<S, O>(op, x, y, &zd);
    }
    reinterpret_cast<Vec<O, VEC> *>(out)[v] = vo;
  }
  for (int64_t i = nvec * VEC + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    C p = ld(a[i]);
    C x = mode == 2 ? sv : p, y = mode == 0 ? ld(b[i]) : mode == 1 ? sv : p;
    out[i] = bin_apply<S, O>(op, x, y, &zd);
  }
  if (zd) raise_error(err, DEVERR_ZERODIV, op, 0, 0, 0);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Mixed-dtype binary: an arithmetic op of an f32 tensor and an f16/bf16 one (either
// order) into f32, each operand read in its stored dtype (telem.c sends these on
// CUDA instead of casting the 16-bit operand first: autocast's residual stream,
// x_f32 + attn_bf16).  The same values as the cast then the op.  4 elements per
// thread in the contiguous path: one 16-byte f32 load and one 8-byte 16-bit load.
template <typename SA, typename SB>
int binary_mixed(const nt_KernelArgs *a, Geom &g, bool contig, int64_t n, const char *name) {
  const SA *pa = (const SA *)base(a->in[0]);
  const SB *pb = (const SB *)base(a->in[1]);
  float *po = (float *)base(a->out);
  constexpr int VEC = 4;
  if (contig && (uintptr_t)pa % sizeof(Vec<SA, VEC>) == 0 && (uintptr_t)pb % sizeof(Vec<SB, VEC>) == 0 && aligned16(po))
    binary_contig<SA, float, VEC, SB><<<grid_for(n, VEC), kThreads, 0, stream>>>(a->op, n, po, pa, pb, 0.f, 0, dev_err);
  else
    with_index_type(g, n, [&](auto i0) {
      binary_strided<decltype(i0), SA, float, SB><<<grid_for(n), kThreads, 0, stream>>>(a->op, (decltype(i0))n, g, po, pa, pb,
                                                                                        0.f, 0, dev_err);
    });
  LAUNCHED(name);
  return 0;
}

int k_binary(const nt_KernelArgs *a) {
  nt_Tensor *ops[3] = { a->out, a->in[0], a->in[1] };
  int nop = a->in[1] ? 3 : 2;
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  int mode = a->in[1] ? 0 : a->iarg[0] ? 2 : 1;
  bool contig;
  Geom g = make_geom(nop, ops, &contig);
  const char *name = host->op_name(a->op);
  if (a->in[1] && a->in[1]->dtype != a->in[0]->dtype) {   // mixed f32 / f16 / bf16 (telem.c: nt_binary)
    const nt_DType da = a->in[0]->dtype, db = a->in[1]->dtype;
    if (a->out->dtype == NT_F32 && a->op <= NT_OP_MINIMUM) {
      if (da == NT_F32 && db == NT_BF16) return binary_mixed<float, __nv_bfloat16>(a, g, contig, n, name);
      if (da == NT_F32 && db == NT_F16) return binary_mixed<float, __half>(a, g, contig, n, name);
      if (da == NT_BF16 && db == NT_F32) return binary_mixed<__nv_bfloat16, float>(a, g, contig, n, name);
      if (da == NT_F16 && db == NT_F32) return binary_mixed<__half, float>(a, g, contig, n, name);
    }
    host->error_set("%s: internal error: operands of dtypes %s and %s into %s on cuda", name, nt_dtype_name(da),
                    nt_dtype_name(db), nt_dtype_name(a->out->dtype));
    return -1;
  }
  auto run = [&]<typename S>() -> int {
    typedef typename Comp<S>::type C;
    const S *pa = (const S *)base(a->in[0]);
    const S *pb = a->in[1] ? (const S *)base(a->in[1]) : nullptr;
    C sv = (C)a->s[0];
    if constexpr (std::is_same<S, b8>::value) sv = a->s[0] != 0;
    constexpr int VEC = 16 / sizeof(S) > 0 ? 16 / sizeof(S) : 1;
    auto go = [&]<typename O>(O *po) -> int {
      if (contig && aligned16(pa) && (!pb || aligned16(pb)) && ((uintptr_t)po % sizeof(Vec<O, VEC>)) == 0)
        binary_contig<S, O, VEC><<<grid_for(n, VEC), kThreads, 0, stream>>>(a->op, n, po, pa, pb, sv, mode, dev_err);
      else
        with_index_type(g, n, [&](auto i0) {
          binary_strided<decltype(i0), S, O><<<grid_for(n), kThreads, 0, stream>>>(a->op, (decltype(i0))n, g, po, pa, pb, sv, mode, dev_err);
        });
      LAUNCHED(name);
      return 0;
    };
    if (a->out->dtype == NT_BOOL) return go((b8 *)base(a->out));
    return go((S *)base(a->out));
  };
  NCU_DISPATCH_ALL(a->in[0]->dtype, run);
  host->error_set("%s: unsupported dtype on cuda", name);
  return -1;
}

// ---- unary ---------------------------------------------------------------------------------
template <typename C> __device__ inline C un_math(int op, C x, double lo, double hi) {
  constexpr bool isf = std::is_floating_point<C>::value;
  constexpr bool f32 = sizeof(C) == 4 && isf;
  const C one = 1;
  switch (op) {
    case NT_OP_NEG:   // a sign flip: neg(+0) = -0 (NumPy, torch); 0 - x would give +0
      if constexpr (isf) return -x;
      else return (C)(0 - x);
    case NT_OP_ABS:   // |-0| = +0, as on the CPU (NumPy, torch)
      if constexpr (f32) return fabsf(x);
      else if constexpr (isf) return fabs(x);
      else return x < 0 ? (C)(0 - x) : x;
    case NT_OP_SIGN: return (C)((x > 0) - (x < 0));
    case NT_OP_RELU: return x < 0 ? (C)0 : x;   // NaN passes, as on the CPU (torch)
    case NT_OP_SQUARE: return (C)(x * x);
    case NT_OP_FLOOR: if constexpr (isf) return f32 ? floorf(x) : floor(x); else return x;
    case NT_OP_CEIL: if constexpr (isf) return f32 ? ceilf(x) : ceil(x); else return x;
    case NT_OP_ROUND: if constexpr (isf) return f32 ? rintf(x) : rint(x); else return x;
    case NT_OP_CLAMP: {
      if (lo == lo && x < (C)lo) return (C)lo;
      if (hi == hi && x > (C)hi) return (C)hi;
      return x;
    }
    default: break;
  }
  if constexpr (isf) {
    switch (op) {
      case NT_OP_EXP: return f32 ? expf(x) : exp(x);
      case NT_OP_LOG: return f32 ? logf(x) : log(x);
      case NT_OP_LOG1P: return f32 ? log1pf(x) : log1p(x);
      case NT_OP_SQRT: return f32 ? sqrtf(x) : sqrt(x);
      case NT_OP_RSQRT: return one / (f32 ? sqrtf(x) : sqrt(x));
      case NT_OP_TANH: return f32 ? tanhf(x) : tanh(x);
      case NT_OP_SIGMOID: return one / (one + (f32 ? expf(-x) : exp(-x)));
      case NT_OP_SILU: return x / (one + (f32 ? expf(-x) : exp(-x)));
      // gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2): erfc keeps
      // the negative tail's digits that 1 + erf loses (x = -3: 1 + erf is 1 - 0.99730...; on the
      // GPU it was off by 1e-3 relative there)
      case NT_OP_GELU: return (C)0.5 * x * (f32 ? erfcf(x * (C)-0.7071067811865476) : erfc(x * (C)-0.7071067811865476));
      // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      case NT_OP_GELU_TANH: {
        C u = (C)0.7978845608028654 * (x + (C)0.044715 * x * x * x);
        return (C)0.5 * x * (one + (f32 ? tanhf(u) : tanh(u)));
      }
      case NT_OP_SIN: return f32 ? sinf(x) : sin(x);
      case NT_OP_COS: return f32 ? cosf(x) : cos(x);
      case NT_OP_TAN: return f32 ? tanf(x) : tan(x);
      case NT_OP_RECIPROCAL: return one / x;
      case NT_OP_EXPM1: return f32 ? expm1f(x) : expm1(x);
      case NT_OP_LOG2: return f32 ? log2f(x) : log2(x);
      case NT_OP_ERF: return f32 ? erff(x) : erf(x);
      default: break;
    }
  }
  return x;
}

template <typename I, typename S>
__global__ void unary_strided(int op, I n, Geom g, S *out, const S *in, double lo, double hi) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
    out[g.offset_of(0, i)] = St<S>::from(un_math(op, ld(in[g.offset_of(1, i)]), lo, hi));
}
template <typename S, int VEC>
__global__ void unary_contig(int op, int64_t n, S *out, const S *in, double lo, double hi) {
  int64_t nvec = n / VEC, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += stride) {
    Vec<S, VEC> x = reinterpret_cast<const Vec<S, VEC> *>(in)[v], y;
#pragma unroll
    for (int k = 0; k < VEC; k++) y.v[k] = St<S>::from(un_math(op, ld(x.v[k]), lo, hi));
    reinterpret_cast<Vec<S, VEC> *>(out)[v] = y;
  }
  for (int64_t i = nvec * VEC + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = St<S>::from(un_math(op, ld(in[i]), lo, hi));
}
template <typename I, typename S>
__global__ void logical_not_kernel(I n, Geom g, b8 *out, const S *in) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    b8 r; r.v = ld(in[g.offset_of(1, i)]) == 0;
    out[g.offset_of(0, i)] = r;
  }
}

int k_unary(const nt_KernelArgs *a) {
  nt_Tensor *ops[2] = { a->out, a->in[0] };
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  bool contig;
  Geom g = make_geom(2, ops, &contig);
  const char *name = host->op_name(a->op);
  double lo = a->op == NT_OP_CLAMP ? a->s[0] : 0, hi = a->op == NT_OP_CLAMP ? a->s[1] : 0;
  auto run = [&]<typename S>() -> int {
    const S *pi = (const S *)base(a->in[0]);
    if (a->op == NT_OP_LOGICAL_NOT) {
      with_index_type(g, n, [&](auto i0) {
        logical_not_kernel<decltype(i0), S><<<grid_for(n), kThreads, 0, stream>>>((decltype(i0))n, g, (b8 *)base(a->out), pi);
      });
    } else {
      if constexpr (std::is_same<S, b8>::value) { host->error_set("%s: bool input on cuda", name); return -1; }
      else {
        S *po = (S *)base(a->out);
        constexpr int VEC = 16 / sizeof(S);
        if (contig && aligned16(pi) && aligned16(po))
          unary_contig<S, VEC><<<grid_for(n, VEC), kThreads, 0, stream>>>(a->op, n, po, pi, lo, hi);
        else
          with_index_type(g, n, [&](auto i0) {
            unary_strided<decltype(i0), S><<<grid_for(n), kThreads, 0, stream>>>(a->op, (decltype(i0))n, g, po, pi, lo, hi);
          });
      }
    }
    LAUNCHED(name);
    return 0;
  };
  NCU_DISPATCH_ALL(a->in[0]->dtype, run);
  host->error_set("%s: unsupported dtype on cuda", name);
  return -1;
}

// ---- one-pass backward of tanh, sigmoid, silu, gelu (op "unary_grad") --------------------------
// dx = g * f'(v) in one pass (tensor/telem.c fused_unary_grad: the composed
// backward takes 3 to 11 elementwise passes).  v is what the forward saved:
// y for tanh and sigmoid, x for silu and gelu.  g, v and dx are contiguous
// and of one float dtype; f16/bf16 compute in float.  The formulas are the
// CPU kernel's (tensor/tvecmath.c) and telem.c's composed ones:
//   tanh      1 - y^2                     sigmoid   y (1 - y)
//   silu      s (1 + x (1 - s)), s = sigmoid(x)
//   gelu      Phi(x) + x phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, phi the normal density
//   gelu_tanh 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2), t = tanh(c (x + k x^3)), c = sqrt(2/pi), k = 0.044715
template <int OP, typename C> __device__ inline C dact(C v) {
  constexpr bool f32 = sizeof(C) == 4;
  const C one = 1;
  if constexpr (OP == NT_OP_TANH) return one - v * v;
  else if constexpr (OP == NT_OP_SIGMOID) return v * (one - v);
  else if constexpr (OP == NT_OP_SILU) {
    C s = one / (one + (f32 ? expf(-v) : exp(-v)));
    return s * (one + v * (one - s));
  } else if constexpr (OP == NT_OP_GELU) {
    C cdf = (C)0.5 * (f32 ? erfcf(v * (C)-0.7071067811865476) : erfc(v * (C)-0.7071067811865476));
    C pdf = (C)0.3989422804014327 * (f32 ? expf((C)-0.5 * v * v) : exp((C)-0.5 * v * v));
    return cdf + v * pdf;
  } else {
    const C c = (C)0.7978845608028654, k = (C)0.044715;
    C v2 = v * v, t = f32 ? tanhf(c * (v + k * v2 * v)) : tanh(c * (v + k * v2 * v));
    return (C)0.5 * (one + t) + (C)0.5 * v * (one - t * t) * c * (one + 3 * k * v2);
  }
}
template <int OP, typename S, int VEC>
__global__ void unary_grad_kernel(int64_t n, S *dx, const S *g, const S *v) {
  typedef typename Comp<S>::type C;
  int64_t nvec = n / VEC, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec; i += stride) {
    Vec<S, VEC> gv = reinterpret_cast<const Vec<S, VEC> *>(g)[i], vv = reinterpret_cast<const Vec<S, VEC> *>(v)[i], r;
#pragma unroll
    for (int k = 0; k < VEC; k++) r.v[k] = St<S>::from(ld(gv.v[k]) * dact<OP, C>(ld(vv.v[k])));
    reinterpret_cast<Vec<S, VEC> *>(dx)[i] = r;
  }
  for (int64_t i = nvec * VEC + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = St<S>::from(ld(g[i]) * dact<OP, C>(ld(v[i])));
}
int k_unary_grad(const nt_KernelArgs *a) {
  nt_Tensor *dx = a->out, *g = a->in[0], *v = a->in[1];
  int64_t n = dx->numel;
  int fop = (int)a->iarg[0];
  bool contig = (dx->flags & NT_T_CONTIG) && (g->flags & NT_T_CONTIG) && (v->flags & NT_T_CONTIG);
  if (g->dtype != dx->dtype || v->dtype != dx->dtype || g->numel != n || v->numel != n || !contig) {
    host->error_set("unary_grad: expected contiguous g, saved tensor and output of one dtype and size");
    return -1;
  }
  if (n == 0) return 0;
  auto run = [&]<typename S>() -> int {
    constexpr int VEC = 16 / sizeof(S);
    S *po = (S *)base(dx);
    const S *pg = (const S *)base(g), *pv = (const S *)base(v);
    bool vec = aligned16(po) && aligned16(pg) && aligned16(pv);
    unsigned grid = grid_for(n, vec ? VEC : 1);
    auto go = [&]<int OP>() {
      if (vec) unary_grad_kernel<OP, S, VEC><<<grid, kThreads, 0, stream>>>(n, po, pg, pv);
      else unary_grad_kernel<OP, S, 1><<<grid, kThreads, 0, stream>>>(n, po, pg, pv);
    };
    switch (fop) {
      case NT_OP_TANH: go.template operator()<NT_OP_TANH>(); break;
      case NT_OP_SIGMOID: go.template operator()<NT_OP_SIGMOID>(); break;
      case NT_OP_SILU: go.template operator()<NT_OP_SILU>(); break;
      case NT_OP_GELU: go.template operator()<NT_OP_GELU>(); break;
      case NT_OP_GELU_TANH: go.template operator()<NT_OP_GELU_TANH>(); break;
      default: host->error_set("unary_grad: no fused backward for %s", host->op_name(fop)); return -1;
    }
    LAUNCHED("unary_grad");
    return 0;
  };
  switch (dx->dtype) {
    case NT_F32: return run.template operator()<float>();
    case NT_F64: return run.template operator()<double>();
    case NT_F16: return run.template operator()<__half>();
    case NT_BF16: return run.template operator()<__nv_bfloat16>();
    default: host->error_set("unary_grad: expected a float dtype, got %s", nt_dtype_name(dx->dtype)); return -1;
  }
}

// ---- copy / cast -------------------------------------------------------------------------------
// out[i] = convert(in[i]) with any strides on both sides.  Conversion as on
// the CPU: load into the source's compute type, then to the destination
// (bool destinations test != 0; f16/bf16 go through float).
template <typename I, typename D, typename S>
__global__ void convert_kernel(I n, Geom g, D *out, const S *in) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
    out[g.offset_of(0, i)] = St<D>::from(ld(in[g.offset_of(1, i)]));
}
// contiguous float <-> float casts (the autocast casts of activations,
// weights, logits): VEC elements per thread, one 16-byte access on the wider
// side; the tail element by element
template <typename D, typename S, int VEC>
__global__ void convert_contig(int64_t n, D *out, const S *in) {
  int64_t nvec = n / VEC, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += stride) {
    Vec<S, VEC> x = reinterpret_cast<const Vec<S, VEC> *>(in)[v];
    Vec<D, VEC> y;
#pragma unroll
    for (int k = 0; k < VEC; k++) y.v[k] = St<D>::from(ld(x.v[k]));
    reinterpret_cast<Vec<D, VEC> *>(out)[v] = y;
  }
  for (int64_t i = nvec * VEC + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = St<D>::from(ld(in[i]));
}
template <typename T> constexpr bool is_float_storage() {
  return std::is_same<T, float>::value || std::is_same<T, double>::value || std::is_same<T, __half>::value ||
         std::is_same<T, __nv_bfloat16>::value;
}
// same dtype: move raw element bits (E = 1, 2, 4 or 8-byte integer type)
template <typename I, typename E>
__global__ void move_kernel(I n, Geom g, E *out, const E *in) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
    out[g.offset_of(0, i)] = in[g.offset_of(1, i)];
}

// a c128 element (two doubles), moved and filled whole
struct alignas(16) Bytes16 { uint64_t lo, hi; };

template <typename E> int launch_move(int64_t n, Geom &g, void *out, const void *in) {
  with_index_type(g, n, [&](auto i0) {
    move_kernel<decltype(i0), E><<<grid_for(n), kThreads, 0, stream>>>((decltype(i0))n, g, (E *)out, (const E *)in);
  });
  LAUNCHED("copy");
  return 0;
}

int k_copy(const nt_KernelArgs *a) {
  nt_Tensor *dst = a->out, *src = a->in[0];
  nt_Tensor *ops[2] = { dst, src };
  int64_t n = dst->numel;
  if (n == 0) return 0;
  bool contig;
  Geom g = make_geom(2, ops, &contig);
  size_t es = nt_dtype_size(dst->dtype);
  if (dst->dtype == src->dtype) {
    if (contig) {
      CU(cudaMemcpyAsync(base(dst), base(src), (size_t)n * es, cudaMemcpyDeviceToDevice, stream));
      last_op = "copy";
      return 0;
    }
    switch (es) {
      case 1: return launch_move<uint8_t>(n, g, base(dst), base(src));
      case 2: return launch_move<uint16_t>(n, g, base(dst), base(src));
      case 4: return launch_move<uint32_t>(n, g, base(dst), base(src));
      case 8: return launch_move<uint64_t>(n, g, base(dst), base(src));
      default: return launch_move<Bytes16>(n, g, base(dst), base(src));
    }
  }
  auto outer = [&]<typename D>() -> int {
    auto inner = [&]<typename S>() -> int {
      if constexpr (is_float_storage<D>() && is_float_storage<S>()) {
        constexpr int VEC = 16 / (sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));
        if (contig && (uintptr_t)base(dst) % sizeof(Vec<D, VEC>) == 0 && (uintptr_t)base(src) % sizeof(Vec<S, VEC>) == 0) {
          convert_contig<D, S, VEC><<<grid_for(n, VEC), kThreads, 0, stream>>>(n, (D *)base(dst), (const S *)base(src));
          LAUNCHED("copy");
          return 0;
        }
      }
      with_index_type(g, n, [&](auto i0) {
        convert_kernel<decltype(i0), D, S><<<grid_for(n), kThreads, 0, stream>>>((decltype(i0))n, g, (D *)base(dst), (const S *)base(src));
      });
      LAUNCHED("copy");
      return 0;
    };
    NCU_DISPATCH_ALL(src->dtype, inner);
    return -1;
  };
  NCU_DISPATCH_ALL(dst->dtype, outer);
  host->error_set("copy: unsupported dtype on cuda");
  return -1;
}

// ---- fill -----------------------------------------------------------------------------------------
// The value's bit pattern is made on the host exactly like nt_store_from_double.
template <typename I, typename E>
__global__ void fill_kernel(I n, Geom g, E *out, E v) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
    out[g.offset_of(0, i)] = v;
}
template <typename E> int launch_fill(int64_t n, Geom &g, void *out, const char *bits) {
  E v;
  memcpy(&v, bits, sizeof v);
  with_index_type(g, n, [&](auto i0) {
    fill_kernel<decltype(i0), E><<<grid_for(n), kThreads, 0, stream>>>((decltype(i0))n, g, (E *)out, v);
  });
  LAUNCHED("fill");
  return 0;
}

void store_from_double(char *p, nt_DType dt, double v) {
  switch (dt) {
    case NT_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case NT_F64: memcpy(p, &v, 8); break;
    case NT_F16: { uint16_t h = nt_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case NT_BF16: { uint16_t h = nt_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case NT_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case NT_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case NT_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
    case NT_BOOL: *(uint8_t *)p = v != 0; break;
    case NT_C64: { float f[2] = { (float)v, 0.0f }; memcpy(p, f, 8); break; }   // (v, 0)
    case NT_C128: { double d[2] = { v, 0.0 }; memcpy(p, d, 16); break; }
    default: break;
  }
}

int k_fill(const nt_KernelArgs *a) {
  nt_Tensor *dst = a->out;
  int64_t n = dst->numel;
  if (n == 0) return 0;
  char bits[16] = {0};
  store_from_double(bits, dst->dtype, a->s[0]);
  bool contig;
  nt_Tensor *ops[1] = { dst };
  Geom g = make_geom(1, ops, &contig);
  size_t es = nt_dtype_size(dst->dtype);
  bool zero = true;
  for (size_t i = 0; i < es; i++) zero = zero && bits[i] == 0;
  if (contig && zero) {
    CU(cudaMemsetAsync(base(dst), 0, (size_t)n * es, stream));
    last_op = "fill";
    return 0;
  }
  switch (es) {
    case 1: return launch_fill<uint8_t>(n, g, base(dst), bits);
    case 2: return launch_fill<uint16_t>(n, g, base(dst), bits);
    case 4: return launch_fill<uint32_t>(n, g, base(dst), bits);
    case 8: return launch_fill<uint64_t>(n, g, base(dst), bits);
    default: return launch_fill<Bytes16>(n, g, base(dst), bits);
  }
}

// ---- where ----------------------------------------------------------------------------------------
template <typename I, typename E>
__global__ void where_kernel(I n, Geom g, E *out, const uint8_t *c, const E *x, const E *y) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
    out[g.offset_of(0, i)] = c[g.offset_of(1, i)] ? x[g.offset_of(2, i)] : y[g.offset_of(3, i)];
}
template <typename E> int launch_where(int64_t n, Geom &g, const nt_KernelArgs *a) {
  with_index_type(g, n, [&](auto i0) {
    where_kernel<decltype(i0), E><<<grid_for(n), kThreads, 0, stream>>>((decltype(i0))n, g, (E *)base(a->out), (const uint8_t *)base(a->in[0]),
                                                                        (const E *)base(a->in[1]), (const E *)base(a->in[2]));
  });
  LAUNCHED("where");
  return 0;
}
int k_where(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  nt_Tensor *ops[4] = { a->out, a->in[0], a->in[1], a->in[2] };
  bool contig;
  Geom g = make_geom(4, ops, &contig);
  switch (nt_dtype_size(a->out->dtype)) {
    case 1: return launch_where<uint8_t>(n, g, a);
    case 2: return launch_where<uint16_t>(n, g, a);
    case 4: return launch_where<uint32_t>(n, g, a);
    default: return launch_where<uint64_t>(n, g, a);
  }
}

// ---- tril / triu: keep (r, c) when c - r <= k (tril) or >= k (triu); out and in contiguous
template <typename E>
__global__ void tril_kernel(int64_t n, int64_t R, int64_t C, int64_t k, bool upper, E *out, const E *in) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % C, r = (i / C) % R;
    bool keep = upper ? c - r >= k : c - r <= k;
    out[i] = keep ? in[i] : (E)0;
  }
}
template <typename E> int launch_tril(const nt_KernelArgs *a) {
  nt_Tensor *o = a->out;
  int64_t n = o->numel, R = o->shape[o->ndim - 2], C = o->shape[o->ndim - 1];
  if (n == 0) return 0;
  tril_kernel<E><<<grid_for(n), kThreads, 0, stream>>>(n, R, C, a->iarg[0], a->iarg[1] != 0, (E *)base(o), (const E *)base(a->in[0]));
  LAUNCHED("tril");
  return 0;
}
int k_tril(const nt_KernelArgs *a) {
  if (!(a->in[0]->flags & NT_T_CONTIG)) { host->error_set("tril: expected a contiguous input on cuda"); return -1; }
  switch (nt_dtype_size(a->out->dtype)) {
    case 1: return launch_tril<uint8_t>(a);
    case 2: return launch_tril<uint16_t>(a);
    case 4: return launch_tril<uint32_t>(a);
    default: return launch_tril<uint64_t>(a);
  }
}

// ---- arange: out[i] = s0 + i * s1; floats with torch's CPU bits (tensor/trange.h, the CPU's
// code), integers in double (no FMA, as on the CPU), then converted
__device__ inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ inline float round_f16(float x) { return __half2float(__float2half_rn(x)); }
NT_ARANGE_LOWP(arange_bf16, round_bf16)
NT_ARANGE_LOWP(arange_f16, round_f16)
template <typename S>
__global__ void arange_kernel(int64_t n, S *out, double s0, double s1) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same<S, double>::value) out[i] = nt_arange_f64(i, n, s0, s1);
    else if constexpr (std::is_same<S, float>::value) out[i] = nt_arange_f32(i, n, s0, s1);
    else if constexpr (std::is_same<S, __nv_bfloat16>::value) out[i] = __float2bfloat16_rn(arange_bf16(i, n, s0, s1));
    else if constexpr (std::is_same<S, __half>::value) out[i] = __float2half_rn(arange_f16(i, n, s0, s1));
    else {
      double v = __dadd_rn(s0, __dmul_rn((double)i, s1));
      if constexpr (std::is_same<S, uint8_t>::value) out[i] = (uint8_t)(int64_t)v;
      else out[i] = St<S>::from(v);
    }
  }
}
int k_arange(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  auto run = [&]<typename S>() -> int {
    arange_kernel<S><<<grid_for(n), kThreads, 0, stream>>>(n, (S *)base(a->out), a->s[0], a->s[1]);
    LAUNCHED("arange");
    return 0;
  };
  NCU_DISPATCH_ALL(a->out->dtype, run);
  host->error_set("arange: unsupported dtype on cuda");
  return -1;
}

// ---- linspace: element i computed on its own with torch's CPU bits (tensor/trange.h,
// shared with the CPU kernel: the same vector-lane layout, fused multiply-adds and roundings)
NT_LINSPACE_LOWP(linspace_bf16, round_bf16)
NT_LINSPACE_LOWP(linspace_f16, round_f16)
template <typename S>
__global__ void linspace_kernel(int64_t n, S *out, double start, double end) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same<S, double>::value) out[i] = nt_linspace_f64(i, n, start, end);
    else if constexpr (std::is_same<S, float>::value) out[i] = nt_linspace_f32(i, n, start, end);
    else if constexpr (std::is_same<S, __nv_bfloat16>::value) out[i] = __float2bfloat16_rn(linspace_bf16(i, n, start, end));
    else if constexpr (std::is_same<S, __half>::value) out[i] = __float2half_rn(linspace_f16(i, n, start, end));
    else if constexpr (std::is_same<S, b8>::value) out[i] = St<S>::from(nt_linspace_f64(i, n, start, end));
    else if constexpr (std::is_same<S, uint8_t>::value) out[i] = (uint8_t)(int64_t)nt_linspace_int(i, n, start, end, sizeof(S));
    else out[i] = St<S>::from(nt_linspace_int(i, n, start, end, sizeof(S)));
  }
}
int k_linspace(const nt_KernelArgs *a) {
  int64_t n = a->out->numel;
  if (n == 0) return 0;
  auto run = [&]<typename S>() -> int {
    linspace_kernel<S><<<grid_for(n), kThreads, 0, stream>>>(n, (S *)base(a->out), a->s[0], a->s[1]);
    LAUNCHED("linspace");
    return 0;
  };
  NCU_DISPATCH_ALL(a->out->dtype, run);
  host->error_set("linspace: unsupported dtype on cuda");
  return -1;
}

}  // namespace

int copy_into(nt_Tensor *dst, nt_Tensor *src) {
  nt_KernelArgs c = {};
  c.op = NT_OP_COPY; c.out = dst; c.in[0] = src; c.nin = 1;
  return k_copy(&c);
}

void register_elementwise(void) {
  for (int op = NT_OP_ADD; op <= NT_OP_LOGICAL_OR; op++) host->register_kernel(op, NT_CUDA, k_binary);
  for (int op = NT_OP_NEG; op <= NT_OP_CLAMP; op++) host->register_kernel(op, NT_CUDA, k_unary);
  host->register_kernel(NT_OP_COPY, NT_CUDA, k_copy);
  host->register_kernel(NT_OP_FILL, NT_CUDA, k_fill);
  host->register_kernel(NT_OP_WHERE, NT_CUDA, k_where);
  host->register_kernel(NT_OP_TRIL, NT_CUDA, k_tril);
  host->register_kernel(NT_OP_ARANGE, NT_CUDA, k_arange);
  host->register_kernel(host->op_register("linspace"), NT_CUDA, k_linspace);
  host->register_kernel(host->op_register("unary_grad"), NT_CUDA, k_unary_grad);
}

}  // namespace ncu
