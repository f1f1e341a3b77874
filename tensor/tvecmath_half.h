/*
** tvecmath_half.h — the CPU's 16-bit float (bf16, f16) arrays at vector speed:
** conversions to and from f32, and a blocked driver that runs an f32 kernel
** over half-precision operands (tensor/ and tensor/nn/ only).
**
** Every half op on the CPU computes in f32 and rounds once on the store (the
** scalar kernels' meaning: round_to_half(f32_op(upcast(x)))).  The blocked
** driver keeps that meaning at vector speed: it upcasts a block of each input
** into an L1-sized f32 buffer, runs the f32 kernel (SLEEF's vector math,
** nt_arith_f32's AVX-512 loops) on the buffers, and rounds the block back --
** no full-size f32 temporaries, so no page faults and no extra passes.
**
** Conversions: bit-identical to tdtype.h's nt_f32_to_bf16 / nt_bf16_to_f32 /
** nt_f32_to_f16 / nt_f16_to_f32 for every input (round to nearest even, NaN
** kept quiet, -0, infinities, subnormals): branch-free integer forms of the
** same rounding, which GCC vectorizes, built for AVX-512 and AVX2 and picked
** by tvecmath.c's width (NABLA_VECMATH); "sse2"/"scalar" run tdtype.h's scalar
** reference itself, so the tests compare the two on the same data.
*/
#ifndef NT_TVECMATH_HALF_H
#define NT_TVECMATH_HALF_H

#include <stdbool.h>
#include <stdint.h>

/* y[i] = f32(x[i]) / y[i] = half(x[i]); bf: bf16 (else f16).  Single-threaded. */
void nt_half_to_f32(bool bf, const uint16_t *x, float *y, int64_t n);
void nt_f32_to_half(bool bf, const float *x, uint16_t *y, int64_t n);

/* the same over big arrays, chunked on the OpenMP pool above NT_OMP_THRESHOLD */
void nt_half_to_f32_par(bool bf, const uint16_t *x, float *y, int64_t n);
void nt_f32_to_half_par(bool bf, const float *x, uint16_t *y, int64_t n);

/* Elements per block of the driver: three f32 buffers of it fit in L1. */
#define NT_HALF_BLOCK 1024

/* An f32 kernel over one block: out[0..n) = f(in[0][0..n), in[1][0..n)); in[k]
** is NULL where the caller passed NULL (a scalar operand, say). */
typedef void (*nt_HalfBlockFn)(void *ctx, const float *const in[2], float *out, int64_t n);

/* out = half(f(f32(in0), f32(in1))) over contiguous arrays of n elements in
** blocks of NT_HALF_BLOCK, threaded over blocks above NT_OMP_THRESHOLD; in1
** may be NULL.  out may be in0 or in1 exactly (a block is read whole before
** it is written).  Returns -1 (error set) when interrupted between chunks. */
int nt_half_map(bool bf, const uint16_t *in0, const uint16_t *in1, uint16_t *out, int64_t n,
                nt_HalfBlockFn f, void *ctx);

#endif
