/*
** tpure.c — the tensor core's PURE helpers (dtype sizes and names, strides,
** contiguity, coalescing the dims of strided operands), written once and
** compiled twice: into libnabla as a normal
** source, and into the CUDA module by cuda/shim.cu, which #includes this
** file.  The module is linked with -fvisibility=hidden and dlopened
** RTLD_LOCAL, so it cannot call the core's copies and must carry its own;
** compiling the same source keeps the two from drifting apart (they had:
** the module's strides once ignored the zero-dimension rule below).
**
** Rules for what may live here: no state, no allocation, no errors, no calls
** into the rest of the core — and valid C and C++ both (nvcc and clang++
** compile it as C++ inside extern "C").
*/
#include "tensor.h"
#include "textend.h"

static const size_t nt_dsize_[NT_NDTYPES] = { 4, 8, 2, 2, 4, 8, 1, 1, 8, 16 };
static const char *const nt_dname_[NT_NDTYPES] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool", "c64", "c128" };

size_t nt_dtype_size(nt_DType dt) { return (unsigned)dt < NT_NDTYPES ? nt_dsize_[dt] : 0; }
const char *nt_dtype_name(nt_DType dt) { return (unsigned)dt < NT_NDTYPES ? nt_dname_[dt] : "?"; }
bool nt_dtype_is_float(nt_DType dt) { return dt == NT_F32 || dt == NT_F64 || dt == NT_F16 || dt == NT_BF16; }
bool nt_dtype_is_complex(nt_DType dt) { return dt == NT_C64 || dt == NT_C128; }

/* Strides skip the zero dimensions' factor: a checked shape bounds the
** product of the nonzero ones, and a tensor with a zero dimension has no
** element for its strides to reach anyway. */
int64_t nt_contig_strides(const int64_t *shape, int ndim, int64_t *strides) {
  int64_t s = 1;
  bool empty = false;
  for (int i = ndim - 1; i >= 0; i--) { strides[i] = s; if (shape[i]) s *= shape[i]; else empty = true; }
  return empty ? 0 : s;
}

/* Size-1 dims do not break contiguity (their stride is never used). */
void nt_update_meta(nt_Tensor *t) {
  int64_t n = 1, expect = 1;
  bool contig = true;
  for (int i = t->ndim - 1; i >= 0; i--) {
    n *= t->shape[i];
    if (t->shape[i] != 1) {
      if (t->strides[i] != expect) contig = false;
      expect *= t->shape[i];
    }
  }
  t->numel = n;
  if (n == 0) contig = true;
  t->flags = contig ? (t->flags | NT_T_CONTIG) : (t->flags & ~(uint32_t)NT_T_CONTIG);
}

/* Drops size-1 dims and merges each dim into the previous kept one when,
** for EVERY operand, the two make one run (outer stride = inner stride x
** inner size); strides come out multiplied by scale[k] (1: elements, the
** dtype size: bytes).  The CPU iterator (nt_iter_init, bytes) and the CUDA
** module's launch geometry (make_geom, elements) both start from this, so
** a strided op walks its operands in the same coalesced shape on either
** device.  Returns the number of kept dims (0 when every dim is 1). */
int nt_coalesce_dims(int nop, nt_Tensor *const *ops, const int64_t *shape, int ndim, const int64_t *scale,
                     int64_t *shape_out, int64_t (*stride_out)[NT_MAXDIM]) {
  int n = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    if (n > 0) {
      bool merge = true;
      for (int k = 0; k < nop; k++)
        if (stride_out[k][n - 1] != ops[k]->strides[d] * scale[k] * shape[d]) { merge = false; break; }
      if (merge) {
        shape_out[n - 1] *= shape[d];
        for (int k = 0; k < nop; k++) stride_out[k][n - 1] = ops[k]->strides[d] * scale[k];
        continue;
      }
    }
    shape_out[n] = shape[d];
    for (int k = 0; k < nop; k++) stride_out[k][n] = ops[k]->strides[d] * scale[k];
    n++;
  }
  return n;
}
