// shim.cu — module-private copies of the few PURE helpers of the core that
// kernels use (dtype sizes/names, strides).  The module is linked with
// -fvisibility=hidden and dlopened RTLD_LOCAL, so these definitions bind only
// inside nabla_cuda.so; everything with state goes through ncu::host.
#include "common.cuh"

extern "C" {

size_t nt_dtype_size(nt_DType dt) {
  static const size_t sz[NT_NDTYPES] = { 4, 8, 2, 2, 4, 8, 1, 1 };
  return (unsigned)dt < NT_NDTYPES ? sz[dt] : 0;
}

const char *nt_dtype_name(nt_DType dt) {
  static const char *names[NT_NDTYPES] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool" };
  return (unsigned)dt < NT_NDTYPES ? names[dt] : "?";
}

bool nt_dtype_is_float(nt_DType dt) { return dt == NT_F32 || dt == NT_F64 || dt == NT_F16 || dt == NT_BF16; }

int64_t nt_contig_strides(const int64_t *shape, int ndim, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) { strides[i] = s; s *= shape[i]; }
  return s;
}

// same rule as tensor.c: size-1 dims do not break contiguity
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

}
