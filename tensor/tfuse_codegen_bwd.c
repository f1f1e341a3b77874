/*
** tfuse_codegen_bwd.c — a fused chain's backward program (tfuse_bwd.h: the
** per-op derivative formulas as eager elementwise calls over slots) as the
** source of ONE CUDA kernel (issue 28), compiled and cached by the module
** like the forward's (cuda/fuse_rtc.cu: NVRTC on a GPU, the host compiler
** on the emulated device; NABLA_FUSE_DUMP writes it too).
**
** The kernel is a grid-stride loop over the chain's n elements, as the
** forward's (tfuse_codegen.c):
**   * each external slot (g, an input's values, a value the forward saved)
**     is loaded once per element: at i when contiguous at the chain's shape,
**     else at the offset its strides give (one unravel of i serves them all;
**     a broadcast axis has stride 0);
**   * each call is one statement with the unfused kernel's formula
**     (nt_fuse_formula_, the forward's table: + - * with the _rn intrinsics,
**     so no product is contracted into the next op's sum), computing in the
**     unfused kernel's compute type, and ROUNDED to its dtype after every
**     call (f16/bf16: every eager op of the formulas stores its result);
**     "unary_grad" is cuda/elementwise.cu's one-pass formula (dact, a second
**     copy: the emulated suite compares it bit for bit), where is `c ? x : y`,
**     zeros are 0;
**   * each slot that is an input's gradient is stored into its buffer: one
**     store per gradient (a multi-output kernel).
** The argument block (FuseArgs, declared by the source) is 8-byte words:
** out[nout], in[next], shape[NT_MAXDIM], strides[next][NT_MAXDIM], s[nsc]
** (the scalars are arguments, not constants: programs that differ only in
** them share a compiled kernel).
*/
#include "tfuse_bwd.h"
#include "tfuse_codegen.h"
#include <stdio.h>
#include <stdlib.h>

static bool is_half(nt_DType d) { return d == NT_F16 || d == NT_BF16; }
static const char *rnd(nt_DType d) { return d == NT_F16 ? "fz_rnd_f16" : d == NT_BF16 ? "fz_rnd_bf16" : ""; }
static const char *store_conv(nt_DType d) { return d == NT_F16 ? "__float2half_rn" : d == NT_BF16 ? "__float2bfloat16_rn" : ""; }

/* cuda/elementwise.cu's dact (the one-pass derivative of unary_grad), same text */
static const char *dact_src =
  "template <int OP, typename C> static __device__ __forceinline__ C fz_dact(C v) {\n"
  "  constexpr bool f32 = sizeof(C) == 4;\n"
  "  const C one = 1;\n"
  "  if constexpr (OP == 0) return one - v * v;   // tanh\n"
  "  else if constexpr (OP == 1) return v * (one - v);   // sigmoid\n"
  "  else if constexpr (OP == 2) {   // silu\n"
  "    C s = one / (one + (f32 ? expf(-v) : exp(-v)));\n"
  "    return s * (one + v * (one - s));\n"
  "  } else if constexpr (OP == 3) {   // gelu\n"
  "    C cdf = (C)0.5 * (f32 ? erfcf(v * (C)-0.7071067811865476) : erfc(v * (C)-0.7071067811865476));\n"
  "    C pdf = (C)0.3989422804014327 * (f32 ? expf((C)-0.5 * v * v) : exp((C)-0.5 * v * v));\n"
  "    return cdf + v * pdf;\n"
  "  } else {   // gelu_tanh\n"
  "    const C c = (C)0.7978845608028654, k = (C)0.044715;\n"
  "    C v2 = v * v, t = f32 ? tanhf(c * (v + k * v2 * v)) : tanh(c * (v + k * v2 * v));\n"
  "    return (C)0.5 * (one + t) + (C)0.5 * v * (one - t * t) * c * (one + 3 * k * v2);\n"
  "  }\n"
  "}\n";

static int dact_index(int op) {
  switch (op) {
    case NT_OP_TANH: return 0;
    case NT_OP_SIGMOID: return 1;
    case NT_OP_SILU: return 2;
    case NT_OP_GELU: return 3;
    default: return 4;
  }
}

static bool is_unary_grad(int op) {
  static int id = -1;
  if (id < 0) id = nt_op_register("unary_grad");
  return op == id;
}

char *nt_fuse_codegen_bwd(const nt_BwdProg *p, nt_Tensor *const *outs, void **args, size_t *nbytes) {
  int nd = p->ndim, nout = 0, nsc = 0, outidx[NT_BWD_MAXSLOT], scidx[NT_BWD_MAXSLOT];
  for (int s = 0; s < p->nslot; s++) {
    outidx[s] = outs[s] ? nout++ : -1;
    scidx[s] = p->slot[s].kind == NT_BWD_OP && p->call[s].niarg && !is_unary_grad(p->call[s].op) ? nsc++ : -1;
  }
  int nex = p->next;
  /* the argument block: 8-byte words */
  size_t words = (size_t)nout + (size_t)nex + NT_MAXDIM + (size_t)nex * NT_MAXDIM + (size_t)nsc;
  uint64_t *w = calloc(words ? words : 1, 8);
  if (!w) { nt_error_oom(words * 8); return NULL; }
  void **wout = (void **)w, **win = (void **)(w + nout);
  int64_t *wshape = (int64_t *)(w + nout + nex), *wstr = wshape + NT_MAXDIM;
  double *wsc = (double *)(wstr + (size_t)nex * NT_MAXDIM);
  for (int d = 0; d < nd; d++) wshape[d] = p->shape[d];
  bool strided[NT_BWD_MAXEXT], any = false;
  for (int e = 0; e < nex; e++) {
    nt_Tensor v;
    nt_bcast_view(&v, p->ext[e], p->shape, nd);
    strided[e] = !(v.flags & NT_T_CONTIG);
    any = any || strided[e];
    for (int d = 0; d < nd; d++) wstr[(size_t)e * NT_MAXDIM + d] = v.strides[d];
    win[e] = (char *)p->ext[e]->storage->data + p->ext[e]->offset * (int64_t)nt_dtype_size(p->ext[e]->dtype);
  }
  for (int s = 0; s < p->nslot; s++) {
    if (outidx[s] >= 0) wout[outidx[s]] = outs[s]->storage->data;
    if (scidx[s] >= 0) wsc[scidx[s]] = p->call[s].s[0];
  }

  nt_StrBuf b = { 0 };
  nt_sb_put(&b, "// nabla fused backward: %d calls over %d tensors, %d outputs, %d-d (generated by tensor/tfuse_codegen_bwd.c)\n",
            p->nops, nex, nout, nd);
  nt_sb_put(&b, "%s%s", nt_fuse_prelude_(), dact_src);
  nt_sb_put(&b, "struct FuseArgs {   // tensor/tfuse_codegen_bwd.c's argument block\n");
  if (nout) nt_sb_put(&b, "  void *out[%d];\n", nout);
  if (nex) nt_sb_put(&b, "  const void *in[%d];\n", nex);
  nt_sb_put(&b, "  long long shape[%d];\n", NT_MAXDIM);
  if (nex) nt_sb_put(&b, "  long long strides[%d][%d];\n", nex, NT_MAXDIM);
  if (nsc) nt_sb_put(&b, "  double s[%d];\n", nsc);
  nt_sb_put(&b, "};\n");
  nt_sb_put(&b, "extern \"C\" __global__ void nabla_fused(long long n, FuseArgs a) {\n");
  nt_sb_put(&b, "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n");
  if (any) {
    nt_sb_put(&b, "    long long");
    bool first = true;
    for (int e = 0; e < nex; e++)
      if (strided[e]) { nt_sb_put(&b, "%s o%d = 0", first ? "" : ",", e); first = false; }
    nt_sb_put(&b, ";\n    {   // row-major unravel of i over the chain's shape\n      long long q = i, c;\n");
    for (int d = nd - 1; d >= 0; d--) {
      if (d > 0) nt_sb_put(&b, "      c = q %% a.shape[%d]; q /= a.shape[%d];", d, d);
      else nt_sb_put(&b, "      c = q;");
      for (int e = 0; e < nex; e++)
        if (strided[e]) nt_sb_put(&b, " o%d += c * a.strides[%d][%d];", e, e, d);
      nt_sb_put(&b, "\n");
    }
    nt_sb_put(&b, "    }\n");
  }
  for (int s = 0; s < p->nslot; s++) {
    nt_DType d = p->slot[s].dt;
    const char *vt = nt_fuse_value_type_(d);
    if (p->slot[s].kind == NT_BWD_EXT) {
      int e = p->slot[s].ext;
      char idx[16];
      snprintf(idx, sizeof idx, strided[e] ? "o%d" : "i", e);
      const char *conv = d == NT_F16 ? "__half2float" : d == NT_BF16 ? "__bfloat162float" : "";
      nt_sb_put(&b, "    const %s v%d = %s(((const %s *)a.in[%d])[%s]);\n", vt, s, conv, nt_fuse_storage_type_(d), e, idx);
    } else {
      const nt_BwdCall *k = &p->call[s];
      char x[16], y[16], z[16];
      snprintf(x, sizeof x, "v%d", k->src[0]);
      snprintf(y, sizeof y, "v%d", k->nsrc > 1 ? k->src[1] : k->src[0]);
      snprintf(z, sizeof z, "v%d", k->nsrc > 2 ? k->src[2] : k->src[0]);
      nt_sb_put(&b, "    const %s v%d = %s(", vt, s, is_half(d) ? rnd(d) : "");
      if (k->op < 0) nt_sb_put(&b, "(%s)0", vt);
      else if (k->op == NT_OP_COPY) nt_sb_put(&b, "(%s)(%s)", vt, x);
      else if (k->op == NT_OP_WHERE) nt_sb_put(&b, "%s ? %s : %s", x, y, z);
      else if (is_unary_grad(k->op)) {
        const char *ct = nt_fuse_value_type_(p->slot[k->src[0]].dt);
        nt_sb_put(&b, "%s * fz_dact<%d, %s>(%s)", x, dact_index((int)k->iarg), ct, y);
      } else {
        nt_DType sd = p->slot[k->src[0]].dt;
        bool f64 = sd == NT_F64;
        const char *ct = nt_fuse_value_type_(sd), *pat = nt_fuse_formula_(k->op, f64);
        if (!pat) { free(b.p); free(w); nt_error_set("internal: no formula for %s in a fused backward", nt_op_name(k->op)); return NULL; }
        if (k->niarg) {   /* the unfused kernel's scalar: (C)s, on the left when first */
          char sv[48];
          snprintf(sv, sizeof sv, "((%s)a.s[%d])", ct, scidx[s]);
          if (k->iarg) nt_fuse_expand_(&b, pat, sv, x, sd);
          else nt_fuse_expand_(&b, pat, x, sv, sd);
        } else nt_fuse_expand_(&b, pat, x, k->nsrc > 1 ? y : NULL, sd);
      }
      nt_sb_put(&b, ");   // %s\n", k->op < 0 ? "zeros" : nt_op_name(k->op));
    }
    if (outidx[s] >= 0)
      nt_sb_put(&b, "    ((%s *)a.out[%d])[i] = %s(v%d);   // a gradient\n", nt_fuse_storage_type_(d), outidx[s], store_conv(d), s);
  }
  nt_sb_put(&b, "  }\n}\n");
  if (b.oom) { free(b.p); free(w); nt_error_oom(b.cap); return NULL; }
  *args = w;
  *nbytes = words * 8;
  return b.p;
}
