/*
** tdtype.h — element types for code that reads or writes tensor memory
** directly: the CPU kernels (tensor/), device backends (cuda/), and code
** outside tensor/ that packs raw buffers (dist/'s gradient compression).
**
** Public (any layer above tensor/ may include it).  It holds only pure,
** stateless helpers: no allocation, no errors, no reference counts.
** Split out of tinternal.h so that such code needs nothing of the tensor
** core's private layout to convert an f16 or bf16 element.
*/
#ifndef NT_TDTYPE_H
#define NT_TDTYPE_H

#include "tensor.h"
#include <string.h>

/* One generic source for all dtypes: NT_FOR_EACH_DTYPE(X) expands
** X(ENUM, name, storage C type, compute C type).  f16/bf16 are stored as
** uint16_t and computed in float; bool is stored as one byte 0/1.  Load and
** store between storage and compute types with nt_ld_<name>/nt_st_<name>. */
#define NT_FOR_EACH_DTYPE(X)          \
  X(NT_F32,  f32,  float,    float)   \
  X(NT_F64,  f64,  double,   double)  \
  X(NT_F16,  f16,  uint16_t, float)   \
  X(NT_BF16, bf16, uint16_t, float)   \
  X(NT_I32,  i32,  int32_t,  int32_t) \
  X(NT_I64,  i64,  int64_t,  int64_t) \
  X(NT_U8,   u8,   uint8_t,  uint8_t) \
  X(NT_BOOL, b8,   uint8_t,  uint8_t)
/* The same list under a second name, for a dtype switch nested inside another
** (copy with conversion, tcpu_elem.c): the preprocessor does not expand a
** macro inside its own expansion, so the inner one must be another macro.
** Keep the two lists identical. */
#define NT_FOR_EACH_DTYPE_B(X)        \
  X(NT_F32,  f32,  float,    float)   \
  X(NT_F64,  f64,  double,   double)  \
  X(NT_F16,  f16,  uint16_t, float)   \
  X(NT_BF16, bf16, uint16_t, float)   \
  X(NT_I32,  i32,  int32_t,  int32_t) \
  X(NT_I64,  i64,  int64_t,  int64_t) \
  X(NT_U8,   u8,   uint8_t,  uint8_t) \
  X(NT_BOOL, b8,   uint8_t,  uint8_t)
#define NT_FOR_EACH_FLOAT_DTYPE(X) \
  X(NT_F32, f32, float, float) X(NT_F64, f64, double, double) \
  X(NT_F16, f16, uint16_t, float) X(NT_BF16, bf16, uint16_t, float)

/* IEEE half <-> float (round to nearest even; inf/nan kept) */
static inline float nt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { /* subnormal: normalise */
      int e = -1; do { e++; man <<= 1; } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 112) << 23) | (man << 13);
  float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t nt_f32_to_f16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000; int32_t exp = (int32_t)((x >> 23) & 0xff); uint32_t man = x & 0x7fffff;
  if (exp == 255) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {                       /* subnormal or zero in half */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000; uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;   /* may carry into exp: correct */
  return (uint16_t)h;
}
static inline float nt_bf16_to_f32(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; memcpy(&f, &x, 4); return f; }
static inline uint16_t nt_f32_to_bf16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);   /* quiet nan */
  x += 0x7fff + ((x >> 16) & 1);                                          /* nearest even */
  return (uint16_t)(x >> 16);
}
static inline float    nt_ld_f32(float x)    { return x; }
static inline double   nt_ld_f64(double x)   { return x; }
static inline float    nt_ld_f16(uint16_t x) { return nt_f16_to_f32(x); }
static inline float    nt_ld_bf16(uint16_t x){ return nt_bf16_to_f32(x); }
static inline int32_t  nt_ld_i32(int32_t x)  { return x; }
static inline int64_t  nt_ld_i64(int64_t x)  { return x; }
static inline uint8_t  nt_ld_u8(uint8_t x)   { return x; }
static inline uint8_t  nt_ld_b8(uint8_t x)   { return x; }
static inline float    nt_st_f32(float v)    { return v; }
static inline double   nt_st_f64(double v)   { return v; }
static inline uint16_t nt_st_f16(float v)    { return nt_f32_to_f16(v); }
static inline uint16_t nt_st_bf16(float v)   { return nt_f32_to_bf16(v); }
/* float -> integer conversions saturate (NaN -> 0): C leaves out-of-range
** casts undefined (NumPy/PyTorch give unspecified values there). */
static inline int64_t nt_sat_i64(double v) {
  return v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
}
static inline int32_t nt_sat_i32(double v) {
  return v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}
/* a value of any compute type to an integer storage type, exact for integers */
#define NT_TO_I32(v) _Generic((v), float: nt_sat_i32(v), double: nt_sat_i32(v), default: (int32_t)(v))
#define NT_TO_I64(v) _Generic((v), float: nt_sat_i64(v), double: nt_sat_i64(v), default: (int64_t)(v))
#define NT_TO_U8(v)  _Generic((v), float: (uint8_t)nt_sat_i64(v), double: (uint8_t)nt_sat_i64(v), default: (uint8_t)(v))
static inline int32_t  nt_st_i32(int32_t v)  { return v; }
static inline int64_t  nt_st_i64(int64_t v)  { return v; }
static inline uint8_t  nt_st_u8(uint8_t v)   { return v; }
static inline uint8_t  nt_st_b8(uint8_t v)   { return v != 0; }

/* Slow generic element access (formatting, item, tests). */
double nt_load_as_double(const void *p, nt_DType dt);
void   nt_store_from_double(void *p, nt_DType dt, double v);   /* ints truncate toward 0 */

#endif
