/*
** tcpu_elem.c — CPU kernels for elementwise ops: binary, unary, where, copy
** (with dtype conversion) and fill.
**
** One generic source for all dtypes: each kernel is a macro expanded per
** dtype by NT_FOR_EACH_DTYPE; per op the loop is written out (switch outside
** the loop) so the contiguous cases vectorize.  Elements are loaded into the
** compute type (float for f16/bf16), combined, and stored back.  Contiguous
** (and broadcast binary) bf16/f16 arithmetic, the unary ops with an f32
** vector form and the f32<->bf16/f16 casts take tvecmath_half.h's blocked
** vector path instead: the same values (round(f32 op)), at vector width.
*/
#include "tinternal.h"
#include "tvecmath.h"
#include "tvecmath_half.h"
#include "tintmath.h"
#include <stdlib.h>

/* u8 makes "x < 0" always false; that is intended in the generic source */
#pragma GCC diagnostic ignored "-Wtype-limits"
#define ISFLT(CT) ((CT)0.5 != 0)
/* float / double math picked by the compute type */
#define FM(fn, x) _Generic((x), float: fn##f, default: fn)(x)
#define FPOW(x, y) _Generic((x), float: powf((float)(x), (float)(y)), default: pow((double)(x), (double)(y)))

/* ipow, floor division and modulo with Python's semantics: tintmath.h (the
** GPU module compiles the same source) */
static inline double fmaxnan(double x, double y) { return (x != x || x > y) ? x : y; }
static inline double fminnan(double x, double y) { return (x != x || x < y) ? x : y; }

/* for (i = 0; i < n; i++) BODY, in chunks of NT_CHUNK elements, multi-threaded
** above NT_OMP_THRESHOLD; between chunks an interrupt sets intr_ and stops --
** unless the kernel writes over an input (an out= into an operand), which
** must not be left half done, so it runs to the end (stoppable_ false) */
#define CHUNKED_FOR(n, ...) do {                                                   \
    for (int64_t c0_ = 0; c0_ < (n); c0_ += NT_CHUNK) {                            \
      int64_t c1_ = (n) - c0_ > NT_CHUNK ? c0_ + NT_CHUNK : (n);                   \
      if (c0_ && stoppable_ && NT_INTERRUPTED()) { intr_ = 1; break; }             \
      if (c1_ - c0_ > NT_OMP_THRESHOLD) {                                          \
        _Pragma("omp parallel for")                                                \
        for (int64_t i = c0_; i < c1_; i++) { __VA_ARGS__ }                        \
      } else for (int64_t i = c0_; i < c1_; i++) { __VA_ARGS__ }                   \
    }                                                                              \
  } while (0)

static bool writes_input(const nt_KernelArgs *a) {
  for (int i = 0; i < a->nin; i++) if (a->in[i] && a->in[i]->storage == a->out->storage) return true;
  return false;
}

/* ---- binary ------------------------------------------------------------- */
/* BLOOP(E): E is an expression of x, y (compute type).  Four layouts. */
#define BLOOP(E, SO) do {                                                              \
    if (mode == 0) {                                                               \
      CHUNKED_FOR(n, CT x = LD(pa[i]), y = LD(pb[i]); po[i] = SO(E););             \
    } else if (mode == 1) {                                                        \
      const CT y = sv;                                                             \
      CHUNKED_FOR(n, CT x = LD(pa[i]); po[i] = SO(E););                            \
    } else if (mode == 2) {                                                        \
      const CT x = sv;                                                             \
      CHUNKED_FOR(n, CT y = LD(pa[i]); po[i] = SO(E););                            \
    } else {                                                                       \
      nt_Iter it; nt_Tensor *ops_[3] = { a->out, a->in[0], a->in[1] };             \
      nt_iter_init(&it, a->in[1] ? 3 : 2, ops_, NULL);                             \
      do {                                                                         \
        char *o_ = it.ptr[0], *a_ = it.ptr[1], *b_ = a->in[1] ? it.ptr[2] : NULL;  \
        for (int64_t i = 0; i < it.inner; i++) {                                   \
          CT x, y;                                                                 \
          if (!b_) { if (sfirst) { x = sv; y = LD(*(ST *)(a_ + i * it.istride[1])); } \
                     else { x = LD(*(ST *)(a_ + i * it.istride[1])); y = sv; } }   \
          else { x = LD(*(ST *)(a_ + i * it.istride[1])); y = LD(*(ST *)(b_ + i * it.istride[2])); } \
          *(OT *)(o_ + i * it.istride[0]) = SO(E);                                 \
        }                                                                          \
      } while (nt_iter_next(&it));                                                 \
    }                                                                              \
  } while (0)

#define DEF_BINARY(E_, N, ST_, CT_)                                                \
static int bin_##N(const nt_KernelArgs *a, int mode, int64_t n, double sval, int sfirst) { \
  typedef ST_ ST; typedef CT_ CT;                                                  \
  const ST *pa = (const ST *)nt_base(a->in[0]);                                    \
  const ST *pb = a->in[1] ? (const ST *)nt_base(a->in[1]) : NULL;                  \
  const CT sv = (CT)sval; int zd = 0, intr_ = 0; (void)pb; (void)sfirst;          \
  const bool stoppable_ = !writes_input(a);                                        \
  if (a->out->dtype == NT_BOOL) {                                                  \
    typedef uint8_t OT; OT *po = (OT *)nt_base(a->out);                            \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wfloat-equal\"") \
    switch (a->op) {                                                               \
      case NT_OP_EQ: BLOOP2(x == y); break;                                        \
      case NT_OP_NE: BLOOP2(x != y); break;                                        \
      case NT_OP_LT: BLOOP2(x < y); break;                                         \
      case NT_OP_LE: BLOOP2(x <= y); break;                                        \
      case NT_OP_GT: BLOOP2(x > y); break;                                         \
      case NT_OP_GE: BLOOP2(x >= y); break;                                        \
      case NT_OP_LOGICAL_AND: BLOOP2(x != 0 && y != 0); break;                     \
      case NT_OP_LOGICAL_OR: BLOOP2(x != 0 || y != 0); break;                      \
      /* bool OP bool stays bool (torch): + and max are or, * and min are and */   \
      case NT_OP_ADD: case NT_OP_MAXIMUM: BLOOP2(x != 0 || y != 0); break;         \
      case NT_OP_MUL: case NT_OP_MINIMUM: BLOOP2(x != 0 && y != 0); break;         \
      default: goto bad;                                                           \
    }                                                                              \
    _Pragma("GCC diagnostic pop")                                                  \
    if (intr_) NT_FAIL_INTERRUPTED();                                              \
    return 0;                                                                      \
  }                                                                                \
  {                                                                                \
    typedef ST OT; OT *po = (OT *)nt_base(a->out);                                 \
    switch (a->op) {                                                               \
      case NT_OP_ADD: BLOOP1(x + y); break;                                        \
      case NT_OP_SUB: BLOOP1(x - y); break;                                        \
      case NT_OP_MUL: BLOOP1(x * y); break;                                        \
      case NT_OP_DIV: BLOOP1(ISFLT(CT) ? x / y : (CT)nt_ifloordiv((int64_t)x, (int64_t)y, &zd)); break; \
      case NT_OP_POW: BLOOP1(ISFLT(CT) ? (CT)FPOW(x, y) : (CT)nt_ipow((int64_t)x, (int64_t)y)); break; \
      case NT_OP_FLOORDIV: BLOOP1(ISFLT(CT) ? (CT)FM(floor, x / y) : (CT)nt_ifloordiv((int64_t)x, (int64_t)y, &zd)); break; \
      case NT_OP_MOD: BLOOP1(ISFLT(CT) ? (CT)nt_fmod_py((double)x, (double)y) : (CT)nt_imod((int64_t)x, (int64_t)y, &zd)); break; \
      case NT_OP_MAXIMUM: BLOOP1(ISFLT(CT) ? (CT)fmaxnan((double)x, (double)y) : (x > y ? x : y)); break; \
      case NT_OP_MINIMUM: BLOOP1(ISFLT(CT) ? (CT)fminnan((double)x, (double)y) : (x < y ? x : y)); break; \
      default: goto bad;                                                           \
    }                                                                              \
  }                                                                                \
  if (intr_) NT_FAIL_INTERRUPTED();                                                \
  if (zd) NT_FAIL("%s: integer division by zero", nt_op_name(a->op));             \
  return 0;                                                                        \
bad:                                                                               \
  NT_FAIL("%s: not supported for dtype %s", nt_op_name(a->op), nt_dtype_name(a->in[0]->dtype)); \
}

/* LD: storage → compute; SO: compute → output storage */
/* arithmetic stores through the dtype's converter, predicates store 0/1 */
#define TOBOOL(v) ((uint8_t)((v) != 0))
#define BLOOP1(E) BLOOP(E, STF)
#define BLOOP2(E) BLOOP(E, TOBOOL)
#define LD(v) LDF(v)

#define LDF(v) nt_ld_f32(v)
#define STF(v) nt_st_f32(v)
DEF_BINARY(NT_F32, f32, float, float)
#undef LDF
#undef STF
#define LDF(v) nt_ld_f64(v)
#define STF(v) nt_st_f64(v)
DEF_BINARY(NT_F64, f64, double, double)
#undef LDF
#undef STF
#define LDF(v) nt_ld_f16(v)
#define STF(v) nt_st_f16(v)
DEF_BINARY(NT_F16, f16, uint16_t, float)
#undef LDF
#undef STF
#define LDF(v) nt_ld_bf16(v)
#define STF(v) nt_st_bf16(v)
DEF_BINARY(NT_BF16, bf16, uint16_t, float)
#undef LDF
#undef STF
#define LDF(v) (v)
#define STF(v) (v)
DEF_BINARY(NT_I32, i32, int32_t, int32_t)
DEF_BINARY(NT_I64, i64, int64_t, int64_t)
DEF_BINARY(NT_U8, u8, uint8_t, uint8_t)
DEF_BINARY(NT_BOOL, b8, uint8_t, uint8_t)
#undef LDF
#undef STF
#undef X

/* + - * / on f32/f64 arrays (nt_arith_f32/f64, tinternal.h): one IEEE
** operation per element, correctly rounded at any vector width, so the loops
** are built for the CPU's widest vectors (the rest of this file is baseline
** SSE2).  Every contiguous f32/f64 + - * / runs here -- eager ops (k_binary),
** small ops (telem.c's fast path) and fused chains (tfuse.c) -- so the three
** also agree in the one thing IEEE leaves open, which NaN's payload a NaN
** result carries: the same instructions see the operands in the same order. */
#define FAST_BODY(T)                                                                       \
  const T sv = (T)s;                                                                       \
  if (b) switch (op) {                                                                     \
    case NT_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; break;             \
    case NT_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; break;             \
    case NT_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;             \
    default: for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;                    \
  } else if (!first) switch (op) {                                                         \
    case NT_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + sv; break;               \
    case NT_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - sv; break;               \
    case NT_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * sv; break;               \
    default: for (int64_t i = 0; i < n; i++) o[i] = a[i] / sv; break;                      \
  } else switch (op) {                                                                     \
    case NT_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = sv + a[i]; break;               \
    case NT_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = sv - a[i]; break;               \
    case NT_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = sv * a[i]; break;               \
    default: for (int64_t i = 0; i < n; i++) o[i] = sv / a[i]; break;                      \
  }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FAST_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FAST_CLONES
#endif
FAST_CLONES void nt_arith_f32(int op, const float *restrict a, const float *restrict b, double s, bool first,
                              float *restrict o, int64_t n) { FAST_BODY(float) }
FAST_CLONES void nt_arith_f64(int op, const double *restrict a, const double *restrict b, double s, bool first,
                              double *restrict o, int64_t n) { FAST_BODY(double) }

/* k_binary's path to them: blocks of ARITH_BLOCK elements (a multiple of
** every vector width, so each element meets the same instruction as in a
** fused chain's tiles), threaded above NT_OMP_THRESHOLD, an interrupt looked
** at every NT_CHUNK elements.  Not when the output is an input (out=): the
** loops' restrict pointers promise no overlap. */
#define ARITH_BLOCK 1024
static void arith_run(int op, nt_DType dt, const void *pa, const void *pb, double s, bool first, void *po, int64_t n) {
  if (dt == NT_F32) nt_arith_f32(op, pa, pb, s, first, po, n);
  else nt_arith_f64(op, pa, pb, s, first, po, n);
}
/* a strided run of n elements to/from a contiguous buffer */
static void run_get(char *dst, const char *p, int64_t st, int64_t n, size_t es) {
  if (es == 4) for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, p + i * st, 4);
  else for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, p + i * st, 8);
}
static void run_put(char *p, int64_t st, const char *src, int64_t n, size_t es) {
  if (es == 4) for (int64_t i = 0; i < n; i++) memcpy(p + i * st, src + 4 * i, 4);
  else for (int64_t i = 0; i < n; i++) memcpy(p + i * st, src + 8 * i, 8);
}

/* Strided operands (broadcast, transposed): the iterator's inner runs,
** copied through small buffers where they are not contiguous, so these
** elements too meet nt_arith's instructions -- as a fused chain's gathered
** tiles do (the SSE2 loop's scalar path takes the operands of a commutative
** op the other way round: NaN payloads differed, tests/numerics/test_fuse_ops). */
#define ARITH_RUN 256
static int arith_strided(const nt_KernelArgs *a, nt_DType dt) {
  nt_Tensor *ops[3] = { a->out, a->in[0], a->in[1] };
  nt_Iter it;
  nt_iter_init(&it, a->in[1] ? 3 : 2, ops, NULL);
  size_t es = nt_dtype_size(dt);
  bool first = !a->in[1] && a->iarg[0];
  _Alignas(64) char bo[ARITH_RUN * 8], bx[ARITH_RUN * 8], by[ARITH_RUN * 8];
  int64_t work = 0;
  do {
    for (int64_t i0 = 0; i0 < it.inner; i0 += ARITH_RUN) {
      int64_t len = it.inner - i0 < ARITH_RUN ? it.inner - i0 : ARITH_RUN;
      const char *px = it.ptr[1] + i0 * it.istride[1], *py = a->in[1] ? it.ptr[2] + i0 * it.istride[2] : NULL;
      char *po = it.ptr[0] + i0 * it.istride[0];
      if (it.istride[1] != (int64_t)es) { run_get(bx, px, it.istride[1], len, es); px = bx; }
      if (py && it.istride[2] != (int64_t)es) { run_get(by, py, it.istride[2], len, es); py = by; }
      if (it.istride[0] != (int64_t)es) {
        arith_run(a->op, dt, px, py, a->s[0], first, bo, len);
        run_put(po, it.istride[0], bo, len, es);
      } else arith_run(a->op, dt, px, py, a->s[0], first, po, len);
    }
    if ((work += it.inner) >= NT_CHUNK) { work = 0; if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED(); }
  } while (nt_iter_next(&it));
  return 1;
}

/* 0: not taken, 1: done, -1: interrupted (error set) */
static int arith_exact(const nt_KernelArgs *a, int mode, int64_t n) {
  nt_DType dt = a->out->dtype;
  if ((dt != NT_F32 && dt != NT_F64) || a->in[0]->dtype != dt || (a->in[1] && a->in[1]->dtype != dt) ||
      a->op < NT_OP_ADD || a->op > NT_OP_DIV || writes_input(a))
    return 0;
  if (mode == 3) return arith_strided(a, dt);
  const char *pa = nt_base(a->in[0]), *pb = mode == 0 ? nt_base(a->in[1]) : NULL;
  char *po = nt_base(a->out);
  size_t es = nt_dtype_size(dt);
  double s = a->s[0];
  bool first = mode == 2;
  for (int64_t c0 = 0; c0 < n; c0 += NT_CHUNK) {
    int64_t c1 = n - c0 > NT_CHUNK ? c0 + NT_CHUNK : n, nb = (c1 - c0 + ARITH_BLOCK - 1) / ARITH_BLOCK;
    if (c0 && NT_INTERRUPTED()) NT_FAIL_INTERRUPTED();
    _Pragma("omp parallel for if (c1 - c0 > NT_OMP_THRESHOLD)")
    for (int64_t k = 0; k < nb; k++) {
      int64_t lo = c0 + k * ARITH_BLOCK, len = c1 - lo < ARITH_BLOCK ? c1 - lo : ARITH_BLOCK;
      size_t off = (size_t)lo * es;
      if (dt == NT_F32) nt_arith_f32(a->op, (const float *)(pa + off), pb ? (const float *)(pb + off) : NULL, s, first, (float *)(po + off), len);
      else nt_arith_f64(a->op, (const double *)(pa + off), pb ? (const double *)(pb + off) : NULL, s, first, (double *)(po + off), len);
    }
  }
  return 1;
}

/* Contiguous f32/f64 pow runs on SLEEF's vector pow (tvecmath.h).  A small
** integer exponent (x ** 2, the commonest) keeps libm's pow, exact there. */
static bool vecmath_pow(const nt_KernelArgs *a, int mode, int64_t n) {
  nt_DType dt = a->in[0]->dtype;
  double s = a->s[0];
  if (a->op != NT_OP_POW || mode == 3 || (dt != NT_F32 && dt != NT_F64) || a->out->dtype != dt) return false;
  if (mode == 1 && s == rint(s) && fabs(s) <= 4) return false;
  const void *pa = mode == 2 ? NULL : nt_base(a->in[0]), *pb = mode == 0 ? nt_base(a->in[1]) : mode == 2 ? nt_base(a->in[0]) : NULL;
  if (dt == NT_F32) nt_vm_pow_f32(pa, pb, (float)s, mode, (float *)nt_base(a->out), n);
  else nt_vm_pow_f64(pa, pb, s, mode, (double *)nt_base(a->out), n);
  return true;
}

/* bf16/f16 + - * / max min: the f32 kernels over blocks upcast to f32 and
** rounded back once (tvecmath_half.h) -- the scalar bin_bf16/bin_f16 loops'
** meaning, round(f32 op), at vector speed.  Contiguous operands go through
** nt_half_map; strided ones (broadcast, transposed) are gathered run by run
** into contiguous blocks first.  Not when the output is an input (out=). */
typedef struct { int op; double s; bool first; } HalfArith;
static void half_arith_block(void *ctx, const float *const in[2], float *o, int64_t n) {
  const HalfArith *h = ctx;
  const float *x = in[0], *y = in[1];
  if (h->op <= NT_OP_DIV) { nt_arith_f32(h->op, x, y, h->s, h->first, o, n); return; }
  /* maximum / minimum: NaN wins (fmaxnan / fminnan in f32: the same choice) */
  const float sv = (float)h->s;
  bool mx = h->op == NT_OP_MAXIMUM;
  for (int64_t i = 0; i < n; i++) {
    float a = y ? x[i] : h->first ? sv : x[i], b = y ? y[i] : h->first ? x[i] : sv;
    o[i] = a != a ? a : b != b ? b : mx ? (a > b ? a : b) : (a < b ? a : b);
  }
}
static bool half_arith_op(int op) {
  return (op >= NT_OP_ADD && op <= NT_OP_DIV) || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM;
}
/* a strided run of n 2-byte elements to/from a contiguous buffer */
static void run_get16(uint16_t *dst, const char *p, int64_t st, int64_t n) {
  for (int64_t i = 0; i < n; i++) memcpy(dst + i, p + i * st, 2);
}
static int half_strided(const nt_KernelArgs *a, bool bf, const HalfArith *h) {
  nt_Tensor *ops[3] = { a->out, a->in[0], a->in[1] };
  nt_Iter it;
  nt_iter_init(&it, a->in[1] ? 3 : 2, ops, NULL);
  uint16_t bx[NT_HALF_BLOCK], by[NT_HALF_BLOCK], bo[NT_HALF_BLOCK];
  int64_t work = 0;
  do {
    for (int64_t i0 = 0; i0 < it.inner; i0 += NT_HALF_BLOCK) {
      int64_t len = it.inner - i0 < NT_HALF_BLOCK ? it.inner - i0 : NT_HALF_BLOCK;
      const char *px = it.ptr[1] + i0 * it.istride[1], *py = a->in[1] ? it.ptr[2] + i0 * it.istride[2] : NULL;
      char *po = it.ptr[0] + i0 * it.istride[0];
      run_get16(bx, px, it.istride[1], len);
      if (py) run_get16(by, py, it.istride[2], len);
      nt_half_map(bf, bx, py ? by : NULL, bo, len, half_arith_block, (void *)h);
      for (int64_t i = 0; i < len; i++) memcpy(po + i * it.istride[0], bo + i, 2);
    }
    if ((work += it.inner) >= NT_CHUNK) { work = 0; if (NT_INTERRUPTED()) NT_FAIL_INTERRUPTED(); }
  } while (nt_iter_next(&it));
  return 0;
}
/* 0: not taken, 1: done, -1: error set */
static int half_arith(const nt_KernelArgs *a, int mode, int64_t n) {
  nt_DType dt = a->out->dtype;
  if ((dt != NT_BF16 && dt != NT_F16) || a->in[0]->dtype != dt || (a->in[1] && a->in[1]->dtype != dt) ||
      !half_arith_op(a->op) || writes_input(a))
    return 0;
  HalfArith h = { a->op, a->s[0], mode == 2 };
  bool bf = dt == NT_BF16;
  if (mode == 3) return half_strided(a, bf, &h) ? -1 : 1;
  const uint16_t *pa = (const uint16_t *)nt_base(a->in[0]), *pb = mode == 0 ? (const uint16_t *)nt_base(a->in[1]) : NULL;
  return nt_half_map(bf, pa, pb, (uint16_t *)nt_base(a->out), n, half_arith_block, &h) ? -1 : 1;
}

/* A float operand broadcast from ONE element (every stride 0 or extent 1: the
** gradient of a sum arrives so) is a scalar: *scal becomes the one-input
** form of the op (s[0] = the value, iarg[0] = scalar first) and the contiguous
** loops run instead of the per-element iterator.  Floats only: a double holds
** their value exactly. */
static bool single_element(const nt_Tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] != 1 && t->strides[d] != 0) return false;
  return true;
}
static const nt_KernelArgs *scalar_operand(const nt_KernelArgs *a, nt_KernelArgs *scal) {
  if (!a->in[1] || !nt_dtype_is_float(a->in[0]->dtype) || a->in[0]->dtype != a->in[1]->dtype || a->out->numel <= 1) return a;
  int k = single_element(a->in[1]) ? 1 : single_element(a->in[0]) ? 0 : -1;
  if (k < 0) return a;
  *scal = *a;
  scal->s[0] = nt_load_as_double(nt_base(a->in[k]), a->in[k]->dtype);
  scal->iarg[0] = k == 0;
  scal->in[0] = a->in[1 - k];
  scal->in[1] = NULL;
  return scal;
}

static int k_binary(const nt_KernelArgs *a0) {
  nt_KernelArgs scal;
  const nt_KernelArgs *a = scalar_operand(a0, &scal);
  nt_Tensor *ops[3] = { a->out, a->in[0], a->in[1] };
  int64_t n = a->out->numel;
  int sfirst = a->in[1] ? 0 : (int)a->iarg[0];
  int mode = nt_all_contig(a->in[1] ? 3 : 2, ops) ? (a->in[1] ? 0 : sfirst ? 2 : 1) : 3;
  if (vecmath_pow(a, mode, n)) return 0;
  int ar = arith_exact(a, mode, n);
  if (!ar) ar = half_arith(a, mode, n);
  if (ar) return ar < 0 ? -1 : 0;
  switch (a->in[0]->dtype) {
#define X(E, N, ST, CT) case E: return bin_##N(a, mode, n, a->s[0], sfirst);
    NT_FOR_EACH_DTYPE(X)
#undef X
    default: NT_FAIL("%s: bad dtype", nt_op_name(a->op));
  }
}

/* ---- unary -------------------------------------------------------------- */
#define SQRT_2_PI 0.7978845608028654
#define INV_SQRT2 0.7071067811865476
#define ULOOP(E) do {                                                              \
    if (contig) {                                                                  \
      CHUNKED_FOR(n, CT x = LDF(pa[i]); po[i] = STF(E););                          \
    } else {                                                                       \
      nt_Iter it; nt_Tensor *ops_[2] = { a->out, a->in[0] };                       \
      nt_iter_init(&it, 2, ops_, NULL);                                            \
      do {                                                                         \
        for (int64_t i = 0; i < it.inner; i++) {                                   \
          CT x = LDF(*(ST *)(it.ptr[1] + i * it.istride[1]));                      \
          *(ST *)(it.ptr[0] + i * it.istride[0]) = STF(E);                         \
        }                                                                          \
      } while (nt_iter_next(&it));                                                 \
    }                                                                              \
  } while (0)

#define DEF_UNARY(N, ST_, CT_)                                                     \
static int un_##N(const nt_KernelArgs *a, bool contig, int64_t n) {                \
  typedef ST_ ST; typedef CT_ CT;                                                  \
  const ST *pa = (const ST *)nt_base(a->in[0]); ST *po = (ST *)nt_base(a->out);    \
  const CT one = 1; int intr_ = 0; (void)one;                                     \
  const bool stoppable_ = !writes_input(a);                                        \
  switch (a->op) {                                                                 \
    case NT_OP_NEG: ULOOP(ISFLT(CT) ? (CT)-x : (CT)(0 - x)); break;   /* -(+0) = -0 */  \
    case NT_OP_ABS: ULOOP(ISFLT(CT) ? (CT)FM(fabs, x) : x < 0 ? (CT)(0 - x) : x); break;   /* |-0| = +0 */ \
    case NT_OP_SIGN: ULOOP((CT)((x > 0) - (x < 0))); break;                        \
    case NT_OP_RELU: ULOOP(x < 0 ? (CT)0 : x); break;   /* NaN passes (torch) */   \
    case NT_OP_SQUARE: ULOOP((CT)(x * x)); break;                                  \
    case NT_OP_FLOOR: ULOOP(ISFLT(CT) ? (CT)FM(floor, x) : x); break;              \
    case NT_OP_CEIL: ULOOP(ISFLT(CT) ? (CT)FM(ceil, x) : x); break;                \
    case NT_OP_ROUND: ULOOP(ISFLT(CT) ? (CT)FM(rint, x) : x); break;               \
    case NT_OP_CLAMP: {                                                            \
      double lo = a->s[0], hi = a->s[1]; bool hl = lo == lo, hh = hi == hi;        \
      CT clo = hl ? (CT)lo : 0, chi = hh ? (CT)hi : 0;                             \
      if (hl && hh) ULOOP(x < clo ? clo : x > chi ? chi : x);                      \
      else if (hl) ULOOP(x < clo ? clo : x);                                       \
      else if (hh) ULOOP(x > chi ? chi : x);                                       \
      else ULOOP(x);                                                               \
      break; }                                                                     \
    default:                                                                       \
      if (!ISFLT(CT)) NT_FAIL("%s: expected a floating dtype, got %s", nt_op_name(a->op), nt_dtype_name(a->in[0]->dtype)); \
      switch (a->op) {                                                             \
        case NT_OP_EXP: ULOOP(FM(exp, x)); break;                                  \
        case NT_OP_LOG: ULOOP(FM(log, x)); break;                                  \
        case NT_OP_LOG1P: ULOOP(FM(log1p, x)); break;                              \
        case NT_OP_SQRT: ULOOP(FM(sqrt, x)); break;                                \
        case NT_OP_RSQRT: ULOOP(one / FM(sqrt, x)); break;                         \
        case NT_OP_TANH: ULOOP(FM(tanh, x)); break;                                \
        case NT_OP_SIGMOID: ULOOP(one / (one + FM(exp, -x))); break;               \
        case NT_OP_SILU: ULOOP(x / (one + FM(exp, -x))); break;                    \
        case NT_OP_GELU: ULOOP((CT)0.5 * x * (one + FM(erf, x * (CT)INV_SQRT2))); break; \
        case NT_OP_GELU_TANH: ULOOP((CT)0.5 * x * (one + FM(tanh, (CT)SQRT_2_PI * (x + (CT)0.044715 * x * x * x)))); break; \
        case NT_OP_SIN: ULOOP(FM(sin, x)); break;                                  \
        case NT_OP_COS: ULOOP(FM(cos, x)); break;                                  \
        case NT_OP_TAN: ULOOP(FM(tan, x)); break;                                  \
        case NT_OP_RECIPROCAL: ULOOP(one / x); break;                              \
        case NT_OP_EXPM1: ULOOP(FM(expm1, x)); break;                              \
        case NT_OP_LOG2: ULOOP(FM(log2, x)); break;                                \
        case NT_OP_ERF: ULOOP(FM(erf, x)); break;                                  \
        default: NT_FAIL("%s: not a unary op", nt_op_name(a->op));                 \
      }                                                                            \
  }                                                                                \
  if (intr_) NT_FAIL_INTERRUPTED();                                                \
  return 0;                                                                        \
}

#define LDF(v) nt_ld_f32(v)
#define STF(v) nt_st_f32(v)
DEF_UNARY(f32, float, float)
#undef LDF
#undef STF
#define LDF(v) nt_ld_f64(v)
#define STF(v) nt_st_f64(v)
DEF_UNARY(f64, double, double)
#undef LDF
#undef STF
#define LDF(v) nt_ld_f16(v)
#define STF(v) nt_st_f16(v)
DEF_UNARY(f16, uint16_t, float)
#undef LDF
#undef STF
#define LDF(v) nt_ld_bf16(v)
#define STF(v) nt_st_bf16(v)
DEF_UNARY(bf16, uint16_t, float)
#undef LDF
#undef STF
#define LDF(v) (v)
#define STF(v) (v)
DEF_UNARY(i32, int32_t, int32_t)
DEF_UNARY(i64, int64_t, int64_t)
DEF_UNARY(u8, uint8_t, uint8_t)
#undef LDF
#undef STF

static int k_logical_not(const nt_KernelArgs *a) {
  nt_Iter it; nt_Tensor *ops[2] = { a->out, a->in[0] };
  nt_iter_init(&it, 2, ops, NULL);
  nt_DType dt = a->in[0]->dtype;
  do {
    for (int64_t i = 0; i < it.inner; i++)
      *(uint8_t *)(it.ptr[0] + i * it.istride[0]) = nt_load_as_double(it.ptr[1] + i * it.istride[1], dt) == 0;
  } while (nt_iter_next(&it));
  return 0;
}

/* The transcendental ops on contiguous f32/f64 data run on SLEEF's vector
** forms (tvecmath.h); strided and other dtypes keep the scalar loops above. */
static int vecmath_fn(int op) {
  switch (op) {
    case NT_OP_EXP: return NT_VM_EXP;
    case NT_OP_LOG: return NT_VM_LOG;
    case NT_OP_LOG1P: return NT_VM_LOG1P;
    case NT_OP_EXPM1: return NT_VM_EXPM1;
    case NT_OP_TANH: return NT_VM_TANH;
    case NT_OP_ERF: return NT_VM_ERF;
    case NT_OP_SIN: return NT_VM_SIN;
    case NT_OP_COS: return NT_VM_COS;
    case NT_OP_SIGMOID: return NT_VM_SIGMOID;
    case NT_OP_SILU: return NT_VM_SILU;
    case NT_OP_GELU: return NT_VM_GELU;
    case NT_OP_GELU_TANH: return NT_VM_GELU_TANH;
    default: return -1;
  }
}
static bool vecmath_unary(const nt_KernelArgs *a, bool contig, int64_t n) {
  int fn = vecmath_fn(a->op);
  nt_DType dt = a->in[0]->dtype;
  if (fn < 0 || !contig || a->out->dtype != dt) return false;
  if (dt == NT_F32) nt_vm_unary_f32(fn, (const float *)nt_base(a->in[0]), (float *)nt_base(a->out), n);
  else if (dt == NT_F64) nt_vm_unary_f64(fn, (const double *)nt_base(a->in[0]), (double *)nt_base(a->out), n);
  else return false;
  return true;
}

/* Contiguous bf16/f16 unary ops: SLEEF's f32 vector forms (or the simple
** ops below) over blocks upcast to f32, rounded back once (tvecmath_half.h).
** The simple ops are the scalar kernels' expressions in f32. */
typedef struct { int op, fn; } HalfUnary;
static void half_unary_block(void *ctx, const float *const in[2], float *o, int64_t n) {
  const HalfUnary *h = ctx;
  const float *x = in[0];
  if (h->fn >= 0) { nt_vm()->unary_f32(h->fn, x, o, n); return; }
  switch (h->op) {
    case NT_OP_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break;   /* as un_f32: neg(+0) = -0 */
    case NT_OP_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabsf(x[i]); break;
    case NT_OP_RELU: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? 0.0f : x[i]; break;
    case NT_OP_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = x[i] * x[i]; break;
    case NT_OP_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]); break;
    case NT_OP_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / sqrtf(x[i]); break;
    default: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / x[i]; break;   /* NT_OP_RECIPROCAL */
  }
}
/* 0: not taken, 1: done, -1: error set */
static int half_unary(const nt_KernelArgs *a, bool contig, int64_t n) {
  nt_DType dt = a->in[0]->dtype;
  int op = a->op, fn = vecmath_fn(op);
  bool simple = op == NT_OP_NEG || op == NT_OP_ABS || op == NT_OP_RELU || op == NT_OP_SQUARE ||
                op == NT_OP_SQRT || op == NT_OP_RSQRT || op == NT_OP_RECIPROCAL;
  if ((dt != NT_BF16 && dt != NT_F16) || a->out->dtype != dt || !contig || (fn < 0 && !simple) || writes_input(a))
    return 0;
  HalfUnary h = { op, fn };
  return nt_half_map(dt == NT_BF16, (const uint16_t *)nt_base(a->in[0]), NULL, (uint16_t *)nt_base(a->out), n, half_unary_block, &h) ? -1 : 1;
}

static int k_unary(const nt_KernelArgs *a) {
  if (a->op == NT_OP_LOGICAL_NOT) return k_logical_not(a);
  nt_Tensor *ops[2] = { a->out, a->in[0] };
  bool contig = nt_all_contig(2, ops);
  int64_t n = a->out->numel;
  if (vecmath_unary(a, contig, n)) return 0;
  int hu = half_unary(a, contig, n);
  if (hu) return hu < 0 ? -1 : 0;
  switch (a->in[0]->dtype) {
    case NT_F32: return un_f32(a, contig, n);
    case NT_F64: return un_f64(a, contig, n);
    case NT_F16: return un_f16(a, contig, n);
    case NT_BF16: return un_bf16(a, contig, n);
    case NT_I32: return un_i32(a, contig, n);
    case NT_I64: return un_i64(a, contig, n);
    case NT_U8: case NT_BOOL: return un_u8(a, contig, n);
    default: NT_FAIL("%s: bad dtype", nt_op_name(a->op));
  }
}

/* ---- copy with conversion ------------------------------------------------
** Same dtype: contiguous → memcpy, else strided element copy by size.
** Different dtypes: a nested dtype switch (64 small loops). */
/* (the inner switch uses NT_FOR_EACH_DTYPE_B: tdtype.h says why) */

static int copy_same(nt_Tensor *dst, nt_Tensor *src) {
  size_t es = nt_dtype_size(dst->dtype);
  nt_Tensor *ops[2] = { dst, src };
  if (nt_all_contig(2, ops)) { memcpy(nt_base(dst), nt_base(src), (size_t)dst->numel * es); return 0; }
  nt_Iter it; nt_iter_init(&it, 2, ops, NULL);
  do {
    char *o = it.ptr[0], *s = it.ptr[1];
    int64_t so = it.istride[0], ss = it.istride[1];
    switch (es) {
      case 1: for (int64_t i = 0; i < it.inner; i++) o[i * so] = s[i * ss]; break;
      case 2: for (int64_t i = 0; i < it.inner; i++) *(uint16_t *)(o + i * so) = *(uint16_t *)(s + i * ss); break;
      case 4: for (int64_t i = 0; i < it.inner; i++) *(uint32_t *)(o + i * so) = *(uint32_t *)(s + i * ss); break;
      case 8: for (int64_t i = 0; i < it.inner; i++) *(uint64_t *)(o + i * so) = *(uint64_t *)(s + i * ss); break;
      default: for (int64_t i = 0; i < it.inner; i++) memcpy(o + i * so, s + i * ss, 16); break;   /* c128 */
    }
  } while (nt_iter_next(&it));
  return 0;
}

/* complex <-> other dtypes: real values get a zero imaginary part, c64 <-> c128
** convert both parts; complex to real is refused (torch warns and drops the
** imaginary part: a silent loss here; real(x), abs(x) say which part is meant). */
static int copy_complex(nt_Tensor *dst, nt_Tensor *src) {
  if (!nt_dtype_is_complex(dst->dtype))
    NT_FAIL("cannot convert %s to %s: it would drop the imaginary part (take real(x), imag(x) or abs(x) first)",
            nt_dtype_name(src->dtype), nt_dtype_name(dst->dtype));
  nt_Iter it; nt_Tensor *ops[2] = { dst, src };
  nt_iter_init(&it, 2, ops, NULL);
  do {
    for (int64_t i = 0; i < it.inner; i++) {
      char *o = it.ptr[0] + i * it.istride[0], *p = it.ptr[1] + i * it.istride[1];
      double re, im = 0;
      if (src->dtype == NT_C64) { re = ((float *)p)[0]; im = ((float *)p)[1]; }
      else if (src->dtype == NT_C128) { re = ((double *)p)[0]; im = ((double *)p)[1]; }
      else re = nt_load_as_double(p, src->dtype);
      if (dst->dtype == NT_C64) { ((float *)o)[0] = (float)re; ((float *)o)[1] = (float)im; }
      else { ((double *)o)[0] = re; ((double *)o)[1] = im; }
    }
  } while (nt_iter_next(&it));
  return 0;
}

/* bf16/f16 <-> f32 (autocast's casts): the vector converters of
** tvecmath_half.h, bit-identical to the scalar ones, on every contiguous run */
static bool copy_half(nt_Tensor *dst, nt_Tensor *src) {
  nt_DType d = dst->dtype, s = src->dtype;
  bool up = d == NT_F32 && (s == NT_BF16 || s == NT_F16), down = s == NT_F32 && (d == NT_BF16 || d == NT_F16);
  if (!up && !down) return false;
  bool bf = (up ? s : d) == NT_BF16;
  nt_Tensor *ops[2] = { dst, src };
  if (nt_all_contig(2, ops)) {
    if (up) nt_half_to_f32_par(bf, (const uint16_t *)nt_base(src), (float *)nt_base(dst), dst->numel);
    else nt_f32_to_half_par(bf, (const float *)nt_base(src), (uint16_t *)nt_base(dst), dst->numel);
    return true;
  }
  nt_Iter it; nt_iter_init(&it, 2, ops, NULL);
  int64_t so = up ? 4 : 2, si = up ? 2 : 4;
  do {
    char *o = it.ptr[0], *p = it.ptr[1];
    if (it.istride[0] == so && it.istride[1] == si) {
      if (up) nt_half_to_f32(bf, (const uint16_t *)p, (float *)o, it.inner);
      else nt_f32_to_half(bf, (const float *)p, (uint16_t *)o, it.inner);
    } else for (int64_t i = 0; i < it.inner; i++) {
      char *oi = o + i * it.istride[0], *pi = p + i * it.istride[1];
      if (up) { uint16_t h; memcpy(&h, pi, 2); float f = bf ? nt_bf16_to_f32(h) : nt_f16_to_f32(h); memcpy(oi, &f, 4); }
      else { float f; memcpy(&f, pi, 4); uint16_t h = bf ? nt_f32_to_bf16(f) : nt_f32_to_f16(f); memcpy(oi, &h, 2); }
    }
  } while (nt_iter_next(&it));
  return true;
}

static int k_copy(const nt_KernelArgs *a) {
  nt_Tensor *dst = a->out, *src = a->in[0];
  if (dst->dtype == src->dtype) return copy_same(dst, src);
  if (copy_half(dst, src)) return 0;
  if (nt_dtype_is_complex(dst->dtype) || nt_dtype_is_complex(src->dtype)) return copy_complex(dst, src);
  nt_Iter it; nt_Tensor *ops[2] = { dst, src };
  nt_iter_init(&it, 2, ops, NULL);
  /* conversion goes through the source's compute type; bool targets test != 0
  ** first so 0.5 → true */
#define CONV_OUTER(DE, DN, DST, DCT) case DE: switch (src->dtype) { NT_FOR_EACH_DTYPE_B(CONV_INNER_##DN) default: break; } break;
#define CONV_BODY(DN, DST, DCT, SN, SST)                                               \
    do { for (int64_t i = 0; i < it.inner; i++) {                                      \
      __auto_type v = nt_ld_##SN(*(SST *)(it.ptr[1] + i * it.istride[1]));             \
      *(DST *)(it.ptr[0] + i * it.istride[0]) = (DE_IS_BOOL) ? (DST)(v != 0) : nt_st_##DN(CONV_TO_##DN(v)); } \
    } while (nt_iter_next(&it));
  /* to an integer type: exact from integers, saturating from floats */
#define CONV_TO_f32(v) ((float)(v))
#define CONV_TO_f64(v) ((double)(v))
#define CONV_TO_f16(v) ((float)(v))
#define CONV_TO_bf16(v) ((float)(v))
#define CONV_TO_i32(v) NT_TO_I32(v)
#define CONV_TO_i64(v) NT_TO_I64(v)
#define CONV_TO_u8(v) NT_TO_U8(v)
#define CONV_TO_b8(v) ((uint8_t)(v))
  switch (dst->dtype) {
#define DE_IS_BOOL (dst->dtype == NT_BOOL)
#define CONV_INNER_f32(SE, SN, SST, SCT) case SE: CONV_BODY(f32, float, float, SN, SST) break;
#define CONV_INNER_f64(SE, SN, SST, SCT) case SE: CONV_BODY(f64, double, double, SN, SST) break;
#define CONV_INNER_f16(SE, SN, SST, SCT) case SE: CONV_BODY(f16, uint16_t, float, SN, SST) break;
#define CONV_INNER_bf16(SE, SN, SST, SCT) case SE: CONV_BODY(bf16, uint16_t, float, SN, SST) break;
#define CONV_INNER_i32(SE, SN, SST, SCT) case SE: CONV_BODY(i32, int32_t, int32_t, SN, SST) break;
#define CONV_INNER_i64(SE, SN, SST, SCT) case SE: CONV_BODY(i64, int64_t, int64_t, SN, SST) break;
#define CONV_INNER_u8(SE, SN, SST, SCT) case SE: CONV_BODY(u8, uint8_t, uint8_t, SN, SST) break;
#define CONV_INNER_b8(SE, SN, SST, SCT) case SE: CONV_BODY(b8, uint8_t, uint8_t, SN, SST) break;
    NT_FOR_EACH_DTYPE(CONV_OUTER)
    default: NT_FAIL("copy: bad dtype");
  }
  return 0;
}

/* ---- fill ---------------------------------------------------------------- */
static int k_fill(const nt_KernelArgs *a) {
  nt_Tensor *dst = a->out;
  size_t es = nt_dtype_size(dst->dtype);
  char val[16] = {0};
  if (dst->dtype == NT_C64) { float re = (float)a->s[0]; memcpy(val, &re, 4); }   /* (s, 0) */
  else if (dst->dtype == NT_C128) memcpy(val, &a->s[0], 8);
  else nt_store_from_double(val, dst->dtype, a->s[0]);
  nt_Iter it; nt_Tensor *ops[1] = { dst };
  nt_iter_init(&it, 1, ops, NULL);
  do {
    char *o = it.ptr[0]; int64_t so = it.istride[0];
    switch (es) {
      case 1: { uint8_t v; memcpy(&v, val, 1); for (int64_t i = 0; i < it.inner; i++) *(uint8_t *)(o + i * so) = v; break; }
      case 2: { uint16_t v; memcpy(&v, val, 2); for (int64_t i = 0; i < it.inner; i++) *(uint16_t *)(o + i * so) = v; break; }
      case 4: { uint32_t v; memcpy(&v, val, 4); for (int64_t i = 0; i < it.inner; i++) *(uint32_t *)(o + i * so) = v; break; }
      case 8: { uint64_t v; memcpy(&v, val, 8); for (int64_t i = 0; i < it.inner; i++) *(uint64_t *)(o + i * so) = v; break; }
      default: for (int64_t i = 0; i < it.inner; i++) memcpy(o + i * so, val, 16); break;   /* c128 */
    }
  } while (nt_iter_next(&it));
  return 0;
}

/* ---- where --------------------------------------------------------------- */
/* how an operand walks the output's elements: 1 contiguous (element i at i),
** 0 one value for all (every stride 0 or a size-1 axis: relu's backward is
** where(x > 0, g, 0)), -1 anything else (the strided iterator below) */
static int where_walk(const nt_Tensor *t) {
  bool zero = true, contig = true;
  int64_t want = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] == 1) continue;
    if (t->strides[d] != 0) zero = false;
    if (t->strides[d] != want) contig = false;
    want *= t->shape[d];
  }
  return contig ? 1 : zero ? 0 : -1;
}
/* the common layouts (contiguous cond and out; a and b contiguous or one value)
** as typed loops by element size (a select copies bits: the dtype does not
** matter), threaded above NT_OMP_THRESHOLD: a byte-wise memcpy per element
** made the relu backward of a small ResNet ~40% of its CPU step (18 ns an
** element) and kept the second thread idle through it.  1: not taken. */
/* SEL: a branch-free select (all-ones mask from the condition byte), so the
** loops vectorize: a random condition mispredicted half the branches */
#define SEL(T, ci, u, v) ((T)(((u) & (T)-(T)((ci) != 0)) | ((v) & (T)((T)((ci) != 0) - 1))))
#define WHERE_LOOP(T) do {                                                               \
    T *o = (T *)nt_base(a->out); const T *x = (const T *)nt_base(a->in[1]), *y = (const T *)nt_base(a->in[2]); \
    if (wa && wb) CHUNKED_FOR(n, o[i] = SEL(T, c[i], x[i], y[i]););                       \
    else if (wa) { const T v = y[0]; CHUNKED_FOR(n, o[i] = SEL(T, c[i], x[i], v);); }     \
    else if (wb) { const T v = x[0]; CHUNKED_FOR(n, o[i] = SEL(T, c[i], v, y[i]);); }     \
    else { const T u = x[0], v = y[0]; CHUNKED_FOR(n, o[i] = SEL(T, c[i], u, v);); }      \
  } while (0)
static int where_fast(const nt_KernelArgs *a) {
  int wa = where_walk(a->in[1]), wb = where_walk(a->in[2]);
  size_t es = nt_dtype_size(a->out->dtype);
  if (where_walk(a->out) != 1 || where_walk(a->in[0]) != 1 || wa < 0 || wb < 0 || a->in[0]->dtype != NT_BOOL ||
      a->in[1]->dtype != a->out->dtype || a->in[2]->dtype != a->out->dtype || !(es == 1 || es == 2 || es == 4 || es == 8))
    return 1;
  const uint8_t *c = (const uint8_t *)nt_base(a->in[0]);
  int64_t n = a->out->numel;
  if (n == 0) return 0;   /* (no value to read for the one-value operands) */
  int intr_ = 0;
  const bool stoppable_ = !writes_input(a);
  switch (es) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    default: WHERE_LOOP(uint64_t); break;
  }
  if (intr_) NT_FAIL_INTERRUPTED();
  return 0;
}

static int k_where(const nt_KernelArgs *a) {
  int rc = where_fast(a);
  if (rc <= 0) return rc;
  size_t es = nt_dtype_size(a->out->dtype);
  nt_Iter it; nt_Tensor *ops[4] = { a->out, a->in[0], a->in[1], a->in[2] };
  nt_iter_init(&it, 4, ops, NULL);
  do {
    for (int64_t i = 0; i < it.inner; i++) {
      bool c = *(uint8_t *)(it.ptr[1] + i * it.istride[1]);
      memcpy(it.ptr[0] + i * it.istride[0], c ? it.ptr[2] + i * it.istride[2] : it.ptr[3] + i * it.istride[3], es);
    }
  } while (nt_iter_next(&it));
  return 0;
}

/* one-pass backward of tanh, sigmoid, silu, gelu (telem.c's unary_grad):
** in = {g, y for tanh/sigmoid or x}, contiguous, one dtype (f32/f64) */
static int k_unary_grad(const nt_KernelArgs *a) {
  int fn = vecmath_fn((int)a->iarg[0]);
  int64_t n = a->out->numel;
  if (fn < 0) NT_FAIL("unary_grad: no fused backward for %s", nt_op_name((int)a->iarg[0]));
  if (a->out->dtype == NT_F32)
    nt_vm_grad_f32(fn, (const float *)nt_base(a->in[0]), (const float *)nt_base(a->in[1]), (float *)nt_base(a->out), n);
  else
    nt_vm_grad_f64(fn, (const double *)nt_base(a->in[0]), (const double *)nt_base(a->in[1]), (double *)nt_base(a->out), n);
  return 0;
}

void nt_cpu_register_elem(void) {
  nt_register_kernel(nt_op_register("unary_grad"), NT_CPU, k_unary_grad);
  for (int op = NT_OP_ADD; op <= NT_OP_LOGICAL_OR; op++) nt_register_kernel(op, NT_CPU, k_binary);
  for (int op = NT_OP_NEG; op <= NT_OP_CLAMP; op++) nt_register_kernel(op, NT_CPU, k_unary);
  nt_register_kernel(NT_OP_COPY, NT_CPU, k_copy);
  nt_register_kernel(NT_OP_FILL, NT_CPU, k_fill);
  nt_register_kernel(NT_OP_WHERE, NT_CPU, k_where);
}
