/*
** tdtype.c — dtype names, sizes, promotion and slow generic element access.
*/
#include "tinternal.h"
#include <strings.h>

/* nt_dtype_size, nt_dtype_name, nt_dtype_is_float: tpure.c (shared with the
** CUDA module). */
bool nt_dtype_is_int(nt_DType dt) { return dt == NT_I32 || dt == NT_I64 || dt == NT_U8; }
const char *nt_device_name(nt_Device d) { return d == NT_CPU ? "cpu" : d == NT_CUDA ? "cuda" : "?"; }

int nt_dtype_from_name(const char *name) {
  static const struct { const char *n; nt_DType d; } alias[] = {
    {"f32", NT_F32}, {"float32", NT_F32}, {"float", NT_F32},
    {"f64", NT_F64}, {"float64", NT_F64}, {"double", NT_F64},
    {"f16", NT_F16}, {"float16", NT_F16}, {"half", NT_F16},
    {"bf16", NT_BF16}, {"bfloat16", NT_BF16},
    {"i32", NT_I32}, {"int32", NT_I32}, {"int", NT_I32},
    {"i64", NT_I64}, {"int64", NT_I64}, {"long", NT_I64},
    {"u8", NT_U8}, {"uint8", NT_U8}, {"bool", NT_BOOL},
    {"c64", NT_C64}, {"complex64", NT_C64}, {"cfloat", NT_C64},
    {"c128", NT_C128}, {"complex128", NT_C128}, {"cdouble", NT_C128},
  };
  for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
    if (!strcasecmp(name, alias[i].n)) return alias[i].d;
  nt_error_set("unknown dtype '%s'", name);
  return -1;
}

/* category: 0 bool, 1 int, 2 float, 3 complex */
static int cat(nt_DType d) { return d == NT_BOOL ? 0 : nt_dtype_is_int(d) ? 1 : nt_dtype_is_complex(d) ? 3 : 2; }

nt_DType nt_promote(nt_DType a, nt_DType b) {
  if (a == b) return a;
  int ca = cat(a), cb = cat(b);
  if (ca == 3 || cb == 3)   /* complex wins; double width if either side is f64/c128 (torch) */
    return a == NT_C128 || b == NT_C128 || a == NT_F64 || b == NT_F64 ? NT_C128 : NT_C64;
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) {  /* u8 < i32 < i64 */
    if (a == NT_I64 || b == NT_I64) return NT_I64;
    return NT_I32;
  }
  /* floats: f64 wins; f16 vs bf16 → f32; f32 beats halves */
  if (a == NT_F64 || b == NT_F64) return NT_F64;
  return NT_F32;
}

/* PyTorch's result_type for two tensors: a 0-d tensor next to a tensor with
** dimensions acts like a scalar: it can raise the result's category (int →
** float, bool → int) but not its width within the category.  This is c10's
** combine_categories(dim_result, zero_dim_result). */
nt_DType nt_result_type(const nt_Tensor *a, const nt_Tensor *b) {
  if ((a->ndim == 0) == (b->ndim == 0)) return nt_promote(a->dtype, b->dtype);
  nt_DType dim = a->ndim ? a->dtype : b->dtype, zero = a->ndim ? b->dtype : a->dtype;
  if (cat(dim) == 3) return dim;                                  /* complex tensor: kept */
  if (cat(zero) == 3) return dim == NT_F64 ? NT_C128 : NT_C64;    /* complex 0-d: raises, dim's width */
  if (cat(dim) == 2) return dim;                                  /* float tensor: kept */
  if (dim == NT_BOOL || cat(zero) == 2) return nt_promote(dim, zero);
  return dim;                                                     /* int tensor, int/bool 0-d */
}

nt_DType nt_promote_scalar(nt_DType t, bool scalar_is_float) {
  if (scalar_is_float) return cat(t) >= 2 ? t : NT_DEFAULT_FLOAT;
  return t == NT_BOOL ? NT_DEFAULT_INT : t;
}

double nt_load_as_double(const void *p, nt_DType dt) {
  switch (dt) {
#define X(E, N, ST, CT) case E: return (double)nt_ld_##N(*(const ST *)p);
    NT_FOR_EACH_DTYPE(X)
#undef X
    case NT_C64: return *(const float *)p;    /* the real part: callers that must not drop */
    case NT_C128: return *(const double *)p;  /* the imaginary part refuse complex first */
    default: return 0;
  }
}

void nt_store_from_double(void *p, nt_DType dt, double v) {
  switch (dt) {
    case NT_F32: *(float *)p = (float)v; break;
    case NT_F64: *(double *)p = v; break;
    case NT_F16: *(uint16_t *)p = nt_f32_to_f16((float)v); break;
    case NT_BF16: *(uint16_t *)p = nt_f32_to_bf16((float)v); break;
    case NT_I32: *(int32_t *)p = nt_sat_i32(v); break;
    case NT_I64: *(int64_t *)p = nt_sat_i64(v); break;
    case NT_U8: *(uint8_t *)p = (uint8_t)nt_sat_i64(v); break;
    case NT_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
  }
}
