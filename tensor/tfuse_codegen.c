/*
** tfuse_codegen.c — one recorded elementwise chain (tfuse.c's nt_Fused) as
** the source of one CUDA kernel (issue 28), compiled at run time by the CUDA
** module: NVRTC on a GPU, the host compiler on the emulated device
** (cuda/fuse_rtc.cu).  NABLA_FUSE_DUMP=dir writes each new source there
** (tfuse.c).
**
** The kernel is a grid-stride loop over the chain's n elements, calling
** fz_elem (the ops of one element) per element:
**   * each input is loaded once per element: at index i when it is
**     contiguous at the chain's shape, else at the offset its strides give
**     (one row-major unravel of i serves every strided input; a broadcast
**     axis has stride 0).  Strides, shape and scalars are kernel arguments
**     (nt_FuseArgs), so chains that differ only in them share a kernel;
**   * each op is one statement computing in the unfused kernel's compute
**     type (cuda/elementwise.cu: float for f16/bf16, Comp<S>), with the
**     unfused kernel's formula (bin_arith, un_math, St<S>::from), and its
**     result is ROUNDED to the op's dtype exactly where the unfused path
**     stores it in memory (f16/bf16 intermediates round trip through their
**     storage type): fused == unfused bit for bit.  + - * use the _rn
**     intrinsics so that nvcc/NVRTC cannot contract one op's product into
**     the next op's sum (an FMA the unfused kernels never do);
**   * the last op's value is stored into the contiguous output.
**   * when every input is contiguous, a first loop moves VEC elements of
**     each operand per access (16 bytes of the widest dtype), taken when
**     the pointers are aligned (args.vec, nt_fuse_codegen_align); the
**     scalar loop does the rest.
** Inputs of any real dtype join through cast ops (COPY: the unfused
** conversion, St<D>::from(ld(x))); ops compute in f32/f64/f16/bf16 (MOD as
** Python's, in double) or in i32/i64/u8/bool (int_formula: the ops that
** cannot fail; integer // % ** raise "division by zero" through the
** module's error slot and stay unfused); where selects between two values
** of its dtype.  nt_fuse_codegen_ok says which.
**
** The formulas below are a second copy of elementwise.cu's; the emulated
** suite (tests/cuda/test_emu_nvrtc.py) compares every op fused against the
** unfused kernels bit for bit, so a drift is a failing test.
*/
#include "tfuse_codegen.h"
#include "tstrbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static bool is_half(nt_DType d) { return d == NT_F16 || d == NT_BF16; }
static bool is_cfloat(nt_DType d) { return d == NT_F32 || d == NT_F64 || is_half(d); }

/* the type a value of dtype d is held in (the unfused kernels' Comp<S>) */
static const char *value_type(nt_DType d) {
  switch (d) {
    case NT_F32: case NT_F16: case NT_BF16: return "float";
    case NT_F64: return "double";
    case NT_I32: return "int";
    case NT_I64: return "long long";
    default: return "unsigned char";   /* u8, bool */
  }
}
static const char *storage_type(nt_DType d) {
  switch (d) {
    case NT_F16: return "__half";
    case NT_BF16: return "__nv_bfloat16";
    default: return value_type(d);
  }
}

static nt_DType ref_dtype(const nt_Fused *b, int ref) {
  return ref >= 0 ? b->in[ref]->dtype : (nt_DType)b->ops[-1 - ref].dtype;
}

static bool is_cmp(int op) { return op >= NT_OP_EQ && op <= NT_OP_GE; }

/* the formula of op over operand(s) '$' (and '@'), '#' the libm suffix of
** the compute type, '^' the compute type; NULL: not generated */
static const char *formula(int op, bool f64) {
  switch (op) {
    case NT_OP_ADD: return f64 ? "__dadd_rn($, @)" : "__fadd_rn($, @)";
    case NT_OP_SUB: return f64 ? "__dsub_rn($, @)" : "__fsub_rn($, @)";
    case NT_OP_MUL: return f64 ? "__dmul_rn($, @)" : "__fmul_rn($, @)";
    case NT_OP_DIV: return "$ / @";
    case NT_OP_FLOORDIV: return "floor#($ / @)";
    case NT_OP_MOD: return "(^)fz_fmod_py((double)$, (double)@)";   /* in double, as nt_fmod_py */
    case NT_OP_WHERE: return "$ ? @ : &";
    case NT_OP_POW: return "pow#($, @)";
    case NT_OP_MAXIMUM: return "($ != $ || $ > @) ? $ : @";   /* NaN propagates */
    case NT_OP_MINIMUM: return "($ != $ || $ < @) ? $ : @";
    case NT_OP_EQ: return "(unsigned char)($ == @)";
    case NT_OP_NE: return "(unsigned char)($ != @)";
    case NT_OP_LT: return "(unsigned char)($ < @)";
    case NT_OP_LE: return "(unsigned char)($ <= @)";
    case NT_OP_GT: return "(unsigned char)($ > @)";
    case NT_OP_GE: return "(unsigned char)($ >= @)";
    case NT_OP_NEG: return "(-$)";   /* a sign flip, as the unfused kernel: -(+0) = -0 */
    case NT_OP_ABS: return "fabs#($)";
    case NT_OP_SIGN: return "(^)(($ > 0) - ($ < 0))";
    case NT_OP_RELU: return "$ < 0 ? (^)0 : $";
    case NT_OP_SQUARE: return f64 ? "__dmul_rn($, $)" : "__fmul_rn($, $)";
    case NT_OP_FLOOR: return "floor#($)";
    case NT_OP_CEIL: return "ceil#($)";
    case NT_OP_ROUND: return "rint#($)";
    case NT_OP_CLAMP: return "fz_clamp($, a.s[K][0], a.s[K][1])";
    case NT_OP_EXP: return "exp#($)";
    case NT_OP_LOG: return "log#($)";
    case NT_OP_LOG1P: return "log1p#($)";
    case NT_OP_SQRT: return "sqrt#($)";
    case NT_OP_RSQRT: return "(^)1 / sqrt#($)";
    case NT_OP_TANH: return "tanh#($)";
    case NT_OP_SIGMOID: return "(^)1 / ((^)1 + exp#(-$))";
    case NT_OP_SILU: return "$ / ((^)1 + exp#(-$))";
    case NT_OP_GELU: return "(^)0.5 * $ * erfc#($ * (^)-0.7071067811865476)";
    case NT_OP_GELU_TANH: return "(^)0.5 * $ * ((^)1 + tanh#((^)0.7978845608028654 * ($ + (^)0.044715 * $ * $ * $)))";
    case NT_OP_SIN: return "sin#($)";
    case NT_OP_COS: return "cos#($)";
    case NT_OP_TAN: return "tan#($)";
    case NT_OP_RECIPROCAL: return "(^)1 / $";
    case NT_OP_EXPM1: return "expm1#($)";
    case NT_OP_LOG2: return "log2#($)";
    case NT_OP_ERF: return "erf#($)";
    default: return NULL;
  }
}

/* The same in an integer compute type C (i32, i64, u8; bool for + * max min
** and the comparisons, as compute_dtype leaves them), '~' the unsigned type
** the wrapping ops compute in: the unfused kernel's (C)(x + y) wraps on the
** hardware, but a signed overflow is undefined in C++, so the generated code
** says the wrap (same bits).  // % and ** by zero or negative powers take
** tintmath.h's paths, whose "division by zero" a generated kernel cannot
** raise: not generated (they stay unfused). */
static const char *int_formula(int op, nt_DType sd) {
  bool u8 = sd == NT_U8 || sd == NT_BOOL;
  if (op == NT_OP_WHERE) return formula(op, false);
  if (sd == NT_BOOL && !(op == NT_OP_ADD || op == NT_OP_MUL || op == NT_OP_MAXIMUM || op == NT_OP_MINIMUM || is_cmp(op)))
    return NULL;
  switch (op) {
    case NT_OP_ADD: return "(^)((~)$ + (~)@)";
    case NT_OP_SUB: return "(^)((~)$ - (~)@)";
    case NT_OP_MUL: return "(^)((~)$ * (~)@)";
    case NT_OP_MAXIMUM: return "$ > @ ? $ : @";
    case NT_OP_MINIMUM: return "$ < @ ? $ : @";
    case NT_OP_NEG: return "(^)(0 - (~)$)";
    case NT_OP_ABS: return u8 ? "$" : "$ < 0 ? (^)(0 - (~)$) : $";
    case NT_OP_SIGN: return "(^)(($ > 0) - ($ < 0))";
    case NT_OP_RELU: return u8 ? "$" : "$ < 0 ? (^)0 : $";
    case NT_OP_SQUARE: return "(^)((~)$ * (~)$)";
    case NT_OP_FLOOR: case NT_OP_CEIL: case NT_OP_ROUND: return "$";
    default: return op == NT_OP_CLAMP || is_cmp(op) ? formula(op, false) : NULL;
  }
}
static bool is_real(nt_DType d) { return d != NT_C64 && d != NT_C128; }

bool nt_fuse_codegen_ok(const nt_Fused *b, const nt_FuseOp *o) {
  nt_DType d = (nt_DType)o->dtype;
  if (o->nsrc < 1) return false;
  nt_DType sd = ref_dtype(b, o->src[0]);
  if (!is_real(sd) || !is_real(d)) return false;
  if (o->op == NT_OP_COPY) return true;   /* any real dtype to any: St<D>::from */
  if (o->op == NT_OP_WHERE)
    return o->nsrc == 3 && sd == NT_BOOL && ref_dtype(b, o->src[1]) == d && ref_dtype(b, o->src[2]) == d;
  if (o->nsrc == 2 && ref_dtype(b, o->src[1]) != sd) return false;
  if (!(is_cfloat(sd) ? formula(o->op, false) : int_formula(o->op, sd))) return false;
  return is_cmp(o->op) ? d == NT_BOOL : d == sd;
}

static const char *unsigned_type(nt_DType d) { return d == NT_I64 ? "unsigned long long" : "unsigned"; }

/* writes pattern with its operands ($ @ &) and the compute type's names (^,
** ~ its unsigned twin, # the libm suffix) */
static void expand(nt_StrBuf *b, const char *pat, const char *x, const char *y, const char *z, nt_DType sd, int k) {
  bool f64 = sd == NT_F64;
  const char *ct = value_type(sd);
  for (const char *p = pat; *p; p++) {
    if (*p == '$') nt_sb_put(b, "%s", x);
    else if (*p == '@') nt_sb_put(b, "%s", y ? y : x);
    else if (*p == '&') nt_sb_put(b, "%s", z);
    else if (*p == '~') nt_sb_put(b, "%s", unsigned_type(sd));
    else if (*p == '#') nt_sb_put(b, "%s", f64 ? "" : "f");
    else if (*p == '^') nt_sb_put(b, "%s", ct);
    else if (*p == 'K' && p > pat && p[-1] == '[') nt_sb_put(b, "%d", k);
    else nt_sb_put(b, "%c", *p);
  }
}

static void ref_name(char *out, size_t n, int ref) {
  if (ref >= 0) snprintf(out, n, "x%d", ref);
  else snprintf(out, n, "v%d", -1 - ref);
}

static const char *prelude =
  "// The unfused kernels' formulas (cuda/elementwise.cu), one statement per op;\n"
  "// f16/bf16 values computed in float and rounded where the unfused op stores.\n"
  "#include <cuda_fp16.h>\n"
  "#include <cuda_bf16.h>\n"
  "#ifdef NABLA_CUDA_EMU   // (the emulated device's emu.h has the other _rn intrinsics)\n"
  "static inline float __fsub_rn(float a, float b) { return a - b; }\n"
  "static inline double __dsub_rn(double a, double b) { return a - b; }\n"
  "#endif\n"
  "static __device__ __forceinline__ float fz_rnd_f16(float x) { return __half2float(__float2half_rn(x)); }\n"
  "static __device__ __forceinline__ float fz_rnd_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }\n"
  "static __device__ __forceinline__ double fz_fmod_py(double x, double y) {   // tensor/tintmath.h nt_fmod_py\n"
  "  double r = fmod(x, y);\n"
  "  if (r != 0 && ((r < 0) != (y < 0))) r += y;\n"
  "  return r;\n"
  "}\n"
  "template <typename C> static __device__ __forceinline__ C fz_clamp(C x, double lo, double hi) {\n"
  "  if (lo == lo && x < (C)lo) return (C)lo;   // NaN bound: unbounded\n"
  "  if (hi == hi && x > (C)hi) return (C)hi;\n"
  "  return x;\n"
  "}\n";

/* the op's value as its dtype holds it: a bool result of arithmetic tests != 0 (St<b8>::from) */
static void open_value(nt_StrBuf *b, const nt_FuseOp *o, bool round_half) {
  nt_DType d = (nt_DType)o->dtype;
  if (round_half && is_half(d)) nt_sb_put(b, "fz_rnd_%s(", d == NT_F16 ? "f16" : "bf16");
  else if (d == NT_BOOL && !is_cmp(o->op) && o->op != NT_OP_WHERE) nt_sb_put(b, "(unsigned char)((");
}
static void close_value(nt_StrBuf *b, const nt_FuseOp *o, bool round_half) {
  nt_DType d = (nt_DType)o->dtype;
  if (round_half && is_half(d)) nt_sb_put(b, ")");
  else if (d == NT_BOOL && !is_cmp(o->op) && o->op != NT_OP_WHERE) nt_sb_put(b, ") != 0)");
}
static const char *to_storage(nt_DType d) { return d == NT_F16 ? "__float2half_rn" : d == NT_BF16 ? "__float2bfloat16_rn" : ""; }
static const char *from_storage(nt_DType d) { return d == NT_F16 ? "__half2float" : d == NT_BF16 ? "__bfloat162float" : ""; }

/* fz_elem: element i of the chain from its inputs' values x0.. (the ops, the
** saved values' stores), returning the output element as stored */
static bool elem_fn(nt_StrBuf *b, const nt_Fused *r, const nt_Tensor *views, void *const *save, nt_FuseArgs *args) {
  nt_DType outd = (nt_DType)r->ops[r->nops - 1].dtype;
  nt_sb_put(b, "static __device__ __forceinline__ %s fz_elem(const FuseArgs &a, long long i", storage_type(outd));
  for (int i = 0; i < r->nin; i++) nt_sb_put(b, ", const %s x%d", value_type(views[i].dtype), i);
  nt_sb_put(b, ") {\n  (void)i;\n");
  for (int k = 0; k < r->nops; k++) {
    const nt_FuseOp *o = &r->ops[k];
    nt_DType d = (nt_DType)o->dtype, sd = ref_dtype(r, o->src[o->op == NT_OP_WHERE ? 1 : 0]);
    bool last = k + 1 == r->nops;
    char x[16], y[16], z[16];
    ref_name(x, sizeof x, o->src[0]);
    if (o->nsrc >= 2) ref_name(y, sizeof y, o->src[1]);
    if (o->nsrc == 3) ref_name(z, sizeof z, o->src[2]);
    /* a value the backward reads is stored as the unfused op stores it: from
    ** the unrounded e (St<S>::from), then rounded for the next ops */
    bool saved = !last && save && save[k];
    bool whole = last || saved;   /* e_k, unrounded, is needed */
    nt_sb_put(b, "  %s%s %s%d = ", whole ? "" : "const ", value_type(d), whole ? "e" : "v", k);
    open_value(b, o, !whole);
    if (o->op == NT_OP_COPY) {
      /* St<D>::from(ld(x)): through float for the half types, != 0 for bool */
      if (d == NT_BOOL) nt_sb_put(b, "(unsigned char)(%s != 0)", x);
      else nt_sb_put(b, "(%s)(%s)", value_type(d), x);
    } else {
      const char *pat = is_cfloat(sd) ? formula(o->op, sd == NT_F64) : int_formula(o->op, sd);
      if (!pat) return nt_error_set("internal: no CUDA formula for %s on %s", nt_op_name(o->op), nt_dtype_name(sd)), false;
      if (o->scalar) {
        /* the unfused kernel's scalar: (C)s (bool: s != 0), on the left when sfirst */
        char sv[64];
        if (sd == NT_BOOL) snprintf(sv, sizeof sv, "((unsigned char)(a.s[%d][0] != 0))", k);
        else snprintf(sv, sizeof sv, "((%s)a.s[%d][0])", value_type(sd), k);
        if (o->sfirst) expand(b, pat, sv, x, NULL, sd, k);
        else expand(b, pat, x, sv, NULL, sd, k);
      } else expand(b, pat, x, o->nsrc >= 2 ? y : NULL, o->nsrc == 3 ? z : NULL, sd, k);
    }
    close_value(b, o, !whole);
    nt_sb_put(b, ";   // %s\n", nt_op_name(o->op));
    if (saved) {
      nt_sb_put(b, "  ((%s *)a.save[%d])[i] = %s(e%d);   // saved for the backward\n", storage_type(d), k, to_storage(d), k);
      if (is_half(d)) nt_sb_put(b, "  const float v%d = fz_rnd_%s(e%d);\n", k, d == NT_F16 ? "f16" : "bf16", k);
      else nt_sb_put(b, "  const %s v%d = e%d;\n", value_type(d), k, k);
    }
    args->s[k][0] = o->s[0];
    args->s[k][1] = o->s[1];
    if (last) nt_sb_put(b, "  return %s(e%d);\n", to_storage(d), k);
  }
  nt_sb_put(b, "}\n");
  return true;
}

char *nt_fuse_codegen(const nt_Fused *r, const nt_Tensor *views, void *const *save, nt_FuseArgs *args) {
  nt_StrBuf b = { 0 };
  int nd = r->ndim;
  nt_DType outd = (nt_DType)r->ops[r->nops - 1].dtype;
  memset(args, 0, sizeof *args);
  for (int d = 0; d < nd; d++) args->shape[d] = r->shape[d];
  nt_sb_put(&b, "// nabla fused elementwise chain: %d ops over %d inputs, %d-d (generated by tensor/tfuse_codegen.c)\n",
      r->nops, r->nin, nd);
  nt_sb_put(&b, "//");
  for (int k = 0; k < r->nops; k++) nt_sb_put(&b, " %s:%s", nt_op_name(r->ops[k].op), nt_dtype_name((nt_DType)r->ops[k].dtype));
  nt_sb_put(&b, "\n%s", prelude);
  nt_sb_put(&b, "struct FuseArgs {   // tensor/tfuse_codegen.h nt_FuseArgs\n"
          "  void *out;\n  const void *in[%d];\n  long long shape[%d];\n  long long strides[%d][%d];\n  double s[%d][2];\n"
          "  void *save[%d];\n  long long vec;\n};\n",
      NT_FUSE_MAXIN, NT_MAXDIM, NT_FUSE_MAXIN, NT_MAXDIM, NT_FUSE_MAXOPS, NT_FUSE_MAXOPS);
  /* offsets of the inputs that are not contiguous at the chain's shape */
  bool strided[NT_FUSE_MAXIN], any = false;
  for (int i = 0; i < r->nin; i++) {
    strided[i] = !(views[i].flags & NT_T_CONTIG);
    for (int d = 0; d < nd; d++) args->strides[i][d] = views[i].strides[d];
    any = any || strided[i];
  }
  /* The vector path (every input contiguous): VEC elements per thread per
  ** iteration, each operand moved as one access of VEC elements -- 16 bytes
  ** for the widest dtype, as the unfused contiguous kernels do.  VEC goes in
  ** args->vec; nt_fuse_codegen_align clears it when a pointer is not aligned
  ** to its access (an offset view), and the kernel then takes the scalar
  ** loop.  The scalar loop also does the tail [n / VEC * VEC, n). */
  size_t widest = nt_dtype_size(outd);
  for (int i = 0; i < r->nin; i++)
    if (nt_dtype_size(views[i].dtype) > widest) widest = nt_dtype_size(views[i].dtype);
  int vec = any ? 0 : (int)(16 / widest);
  if (vec < 2) vec = 0;
  args->vec = vec;
  if (!elem_fn(&b, r, views, save, args)) { free(b.p); return NULL; }
  if (vec) nt_sb_put(&b, "template <typename T> struct alignas(sizeof(T) * %d) FzVec { T v[%d]; };\n", vec, vec);
  nt_sb_put(&b, "extern \"C\" __global__ void nabla_fused(long long n, FuseArgs a) {\n");
  nt_sb_put(&b, "  const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;\n"
                "  long long i0 = 0;\n");
  if (vec) {
    nt_sb_put(&b, "  if (a.vec) {   // every operand aligned to its %d-element access\n    const long long nv = n / %d;\n"
                  "    for (long long v = start; v < nv; v += step) {\n", vec, vec);
    for (int i = 0; i < r->nin; i++) {
      const char *st = storage_type(views[i].dtype);
      nt_sb_put(&b, "      const FzVec<%s> y%d = ((const FzVec<%s> *)a.in[%d])[v];\n", st, i, st, i);
    }
    nt_sb_put(&b, "      FzVec<%s> r;\n#pragma unroll\n      for (int k = 0; k < %d; k++) r.v[k] = fz_elem(a, v * %d + k",
              storage_type(outd), vec, vec);
    for (int i = 0; i < r->nin; i++) nt_sb_put(&b, ", %s(y%d.v[k])", from_storage(views[i].dtype), i);
    nt_sb_put(&b, ");\n      ((FzVec<%s> *)a.out)[v] = r;\n    }\n    i0 = nv * %d;\n  }\n", storage_type(outd), vec);
  }
  nt_sb_put(&b, "  for (long long i = i0 + start; i < n; i += step) {\n");
  if (any) {
    nt_sb_put(&b, "    long long");
    bool first = true;
    for (int i = 0; i < r->nin; i++)
      if (strided[i]) { nt_sb_put(&b, "%s o%d = 0", first ? "" : ",", i); first = false; }
    nt_sb_put(&b, ";\n    {   // row-major unravel of i over the chain's shape\n      long long q = i, c;\n");
    for (int d = nd - 1; d >= 0; d--) {
      if (d > 0) nt_sb_put(&b, "      c = q %% a.shape[%d]; q /= a.shape[%d];", d, d);
      else nt_sb_put(&b, "      c = q;");
      for (int i = 0; i < r->nin; i++)
        if (strided[i]) nt_sb_put(&b, " o%d += c * a.strides[%d][%d];", i, i, d);
      nt_sb_put(&b, "\n");
    }
    nt_sb_put(&b, "    }\n");
  }
  nt_sb_put(&b, "    ((%s *)a.out)[i] = fz_elem(a, i", storage_type(outd));
  for (int i = 0; i < r->nin; i++) {
    char idx[16];
    snprintf(idx, sizeof idx, strided[i] ? "o%d" : "i", i);
    nt_sb_put(&b, ", %s(((const %s *)a.in[%d])[%s])", from_storage(views[i].dtype), storage_type(views[i].dtype), i, idx);
  }
  nt_sb_put(&b, ");\n  }\n}\n");
  if (b.oom) { free(b.p); nt_error_oom(b.cap); return NULL; }
  return b.p;
}

void nt_fuse_codegen_align(const nt_Fused *r, nt_FuseArgs *args) {
  int64_t v = args->vec;
  if (!v) return;
  if ((uintptr_t)args->out % (uintptr_t)(v * (int64_t)nt_dtype_size((nt_DType)r->ops[r->nops - 1].dtype))) args->vec = 0;
  for (int i = 0; i < r->nin; i++)
    if ((uintptr_t)args->in[i] % (uintptr_t)(v * (int64_t)nt_dtype_size(r->in[i]->dtype))) args->vec = 0;
}

uint64_t nt_fuse_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
  return h;
}

/* (tfuse_codegen_bwd.c writes a chain's backward with the same formulas) */
const char *nt_fuse_formula_(int op, bool f64) { return formula(op, f64); }
void nt_fuse_expand_(nt_StrBuf *b, const char *pat, const char *x, const char *y, nt_DType sd) {
  expand(b, pat, x, y, NULL, sd, 0);
}
const char *nt_fuse_prelude_(void) { return prelude; }
const char *nt_fuse_value_type_(nt_DType d) { return value_type(d); }
const char *nt_fuse_storage_type_(nt_DType d) { return storage_type(d); }
