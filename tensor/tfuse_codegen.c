/*
** tfuse_codegen.c — one recorded elementwise chain (tfuse.c's nt_Fused) as
** the source of one CUDA kernel (issue 28), compiled at run time by the CUDA
** module: NVRTC on a GPU, the host compiler on the emulated device
** (cuda/fuse_rtc.cu).  NABLA_FUSE_DUMP=dir writes each new source there
** (tfuse.c).
**
** The kernel is a grid-stride loop over the chain's n elements:
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
** Inputs of any real dtype join through cast ops (COPY: the unfused
** conversion, St<D>::from(ld(x))); ops compute in f32/f64/f16/bf16 only
** (nt_fuse_codegen_ok says which).  MOD (Python's fmod) and integer
** compute stay unfused on CUDA.
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

bool nt_fuse_codegen_ok(const nt_Fused *b, const nt_FuseOp *o) {
  nt_DType d = (nt_DType)o->dtype;
  if (o->nsrc < 1) return false;
  nt_DType sd = ref_dtype(b, o->src[0]);
  if (sd == NT_C64 || sd == NT_C128) return false;
  if (o->op == NT_OP_COPY) return is_cfloat(d);
  if (o->nsrc == 2 && ref_dtype(b, o->src[1]) != sd) return false;
  if (!is_cfloat(sd) || !formula(o->op, false)) return false;
  return is_cmp(o->op) ? d == NT_BOOL : d == sd;
}

/* writes pattern with its operands and the compute type's names */
static void expand(nt_StrBuf *b, const char *pat, const char *x, const char *y, bool f64, const char *ct, int k) {
  for (const char *p = pat; *p; p++) {
    if (*p == '$') nt_sb_put(b, "%s", x);
    else if (*p == '@') nt_sb_put(b, "%s", y ? y : x);
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
  "template <typename C> static __device__ __forceinline__ C fz_clamp(C x, double lo, double hi) {\n"
  "  if (lo == lo && x < (C)lo) return (C)lo;   // NaN bound: unbounded\n"
  "  if (hi == hi && x > (C)hi) return (C)hi;\n"
  "  return x;\n"
  "}\n";

char *nt_fuse_codegen(const nt_Fused *r, const nt_Tensor *views, void *const *save, nt_FuseArgs *args) {
  nt_StrBuf b = { 0 };
  int nd = r->ndim;
  memset(args, 0, sizeof *args);
  for (int d = 0; d < nd; d++) args->shape[d] = r->shape[d];
  nt_sb_put(&b, "// nabla fused elementwise chain: %d ops over %d inputs, %d-d (generated by tensor/tfuse_codegen.c)\n",
      r->nops, r->nin, nd);
  nt_sb_put(&b, "//");
  for (int k = 0; k < r->nops; k++) nt_sb_put(&b, " %s:%s", nt_op_name(r->ops[k].op), nt_dtype_name((nt_DType)r->ops[k].dtype));
  nt_sb_put(&b, "\n%s", prelude);
  nt_sb_put(&b, "struct FuseArgs {   // tensor/tfuse_codegen.h nt_FuseArgs\n"
          "  void *out;\n  const void *in[%d];\n  long long shape[%d];\n  long long strides[%d][%d];\n  double s[%d][2];\n"
          "  void *save[%d];\n};\n",
      NT_FUSE_MAXIN, NT_MAXDIM, NT_FUSE_MAXIN, NT_MAXDIM, NT_FUSE_MAXOPS, NT_FUSE_MAXOPS);
  nt_sb_put(&b, "extern \"C\" __global__ void nabla_fused(long long n, FuseArgs a) {\n");
  nt_sb_put(&b, "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n");
  /* offsets of the inputs that are not contiguous at the chain's shape */
  bool strided[NT_FUSE_MAXIN], any = false;
  for (int i = 0; i < r->nin; i++) {
    strided[i] = !(views[i].flags & NT_T_CONTIG);
    for (int d = 0; d < nd; d++) args->strides[i][d] = views[i].strides[d];
    any = any || strided[i];
  }
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
  for (int i = 0; i < r->nin; i++) {
    nt_DType d = views[i].dtype;
    char idx[16];
    snprintf(idx, sizeof idx, strided[i] ? "o%d" : "i", i);
    const char *conv = d == NT_F16 ? "__half2float" : d == NT_BF16 ? "__bfloat162float" : "";
    nt_sb_put(&b, "    const %s x%d = %s(((const %s *)a.in[%d])[%s]);\n", value_type(d), i, conv, storage_type(d), i, idx);
  }
  for (int k = 0; k < r->nops; k++) {
    const nt_FuseOp *o = &r->ops[k];
    nt_DType d = (nt_DType)o->dtype, sd = ref_dtype(r, o->src[0]);
    bool last = k + 1 == r->nops, f64 = sd == NT_F64;
    const char *ct = value_type(sd);
    char x[16], y[16];
    ref_name(x, sizeof x, o->src[0]);
    if (o->nsrc == 2) ref_name(y, sizeof y, o->src[1]);
    else if (o->scalar) snprintf(y, sizeof y, "s%d", k);
    /* a value the backward reads is stored as the unfused op stores it: from
    ** the unrounded e (St<S>::from), then rounded for the next ops */
    bool saved = !last && save && save[k];
    bool whole = last || saved;   /* e_k, unrounded, is needed */
    nt_sb_put(&b, "    %s%s %s%d = ", whole ? "" : "const ", value_type(d), whole ? "e" : "v", k);
    if (!whole && is_half(d)) nt_sb_put(&b, "fz_rnd_%s(", d == NT_F16 ? "f16" : "bf16");
    if (o->op == NT_OP_COPY) {
      /* St<D>::from(ld(x)): through float for the half types */
      nt_sb_put(&b, "(%s)(%s)", value_type(d), x);
    } else {
      const char *pat = formula(o->op, f64);
      if (o->scalar) {
        /* the unfused kernel's scalar: (C)s, on the left when sfirst */
        char sv[48];
        snprintf(sv, sizeof sv, "((%s)a.s[%d][0])", ct, k);
        if (o->sfirst) expand(&b, pat, sv, x, f64, ct, k);
        else expand(&b, pat, x, sv, f64, ct, k);
      } else expand(&b, pat, x, o->nsrc == 2 ? y : NULL, f64, ct, k);
    }
    if (!whole && is_half(d)) nt_sb_put(&b, ")");
    nt_sb_put(&b, ";   // %s\n", nt_op_name(o->op));
    if (saved) {
      const char *st = d == NT_F16 ? "__float2half_rn" : d == NT_BF16 ? "__float2bfloat16_rn" : "";
      nt_sb_put(&b, "    ((%s *)a.save[%d])[i] = %s(e%d);   // saved for the backward\n", storage_type(d), k, st, k);
      if (is_half(d)) nt_sb_put(&b, "    const float v%d = fz_rnd_%s(e%d);\n", k, d == NT_F16 ? "f16" : "bf16", k);
      else nt_sb_put(&b, "    const %s v%d = e%d;\n", value_type(d), k, k);
    }
    args->s[k][0] = o->s[0];
    args->s[k][1] = o->s[1];
    if (last) {
      const char *st = d == NT_F16 ? "__float2half_rn" : d == NT_BF16 ? "__float2bfloat16_rn" : "";
      nt_sb_put(&b, "    ((%s *)a.out)[i] = %s(e%d);\n", storage_type(d), st, k);
    }
  }
  nt_sb_put(&b, "  }\n}\n");
  if (b.oom) { free(b.p); nt_error_oom(b.cap); return NULL; }
  return b.p;
}

uint64_t nt_fuse_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
  return h;
}

/* (tfuse_codegen_bwd.c writes a chain's backward with the same formulas) */
const char *nt_fuse_formula_(int op, bool f64) { return formula(op, f64); }
void nt_fuse_expand_(nt_StrBuf *b, const char *pat, const char *x, const char *y, bool f64, const char *ct) {
  expand(b, pat, x, y, f64, ct, 0);
}
const char *nt_fuse_prelude_(void) { return prelude; }
const char *nt_fuse_value_type_(nt_DType d) { return value_type(d); }
const char *nt_fuse_storage_type_(nt_DType d) { return storage_type(d); }
