/*
** actmath.h — the math of the parametrised activations (torch's), one
** definition compiled into both the core's CPU kernel (activation.c) and the
** CUDA module's kernel (cuda/layers.cu), so the two devices cannot drift.
** Pure C/C++ (no tensor types); every function computes in double, so f32
** and f64 inputs get the same rounding story on both devices.
**
** kind                 params p[0..2]               y = f(x)                                  dy/dx
** NT_ACT_LEAKY_RELU    slope                        x > 0 ? x : slope x                       x > 0 ? 1 : slope
** NT_ACT_ELU           alpha, scale, input_scale    x > 0 ? scale x                           x > 0 ? scale
**                      (elu: a,1,1  selu: a,s,1       : scale alpha (exp(is x) - 1)             : scale alpha is exp(is x)
**                       celu: a,1,1/a)
** NT_ACT_SOFTPLUS      beta, threshold              b x > thr ? x : log1p(exp(b x)) / b       b x > thr ? 1 : sigmoid(b x)
** NT_ACT_LOGSIGMOID    -                            min(x, 0) - log1p(exp(-|x|))              sigmoid(-x)
** NT_ACT_MISH          -                            x tanh(softplus(x))                       t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
** NT_ACT_HARDTANH      min_val, max_val             clamp(x, min, max)                        min < x < max ? 1 : 0
** NT_ACT_HARDSWISH     -                            x relu6(x + 3) / 6                        x < -3 ? 0 : x <= 3 ? x/3 + 1/2 : 1
** NT_ACT_HARDSIGMOID   -                            relu6(x + 3) / 6                          -3 < x < 3 ? 1/6 : 0
** The gradients at the kinks are torch 1.13's (its *_backward kernels).
*/
#ifndef NT_ACTMATH_H
#define NT_ACTMATH_H

#include <math.h>

#ifdef __CUDACC__
#define NT_ACT_FN static inline __host__ __device__
#else
#define NT_ACT_FN static inline
#endif

enum {
  NT_ACT_LEAKY_RELU, NT_ACT_ELU, NT_ACT_SOFTPLUS, NT_ACT_LOGSIGMOID, NT_ACT_MISH,
  NT_ACT_HARDTANH, NT_ACT_HARDSWISH, NT_ACT_HARDSIGMOID, NT_ACT_COUNT
};

/* softplus with torch's threshold 20 (mish's inner softplus) */
NT_ACT_FN double nt_act_softplus1(double x) { return x > 20 ? x : log1p(exp(x)); }
/* 1 / (1 + exp(-x)) without overflow for either sign */
NT_ACT_FN double nt_act_sigmoid(double x) {
  double e = exp(-fabs(x));
  return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

NT_ACT_FN double nt_act_forward(int kind, double x, const double *p) {
  switch (kind) {
    case NT_ACT_LEAKY_RELU: return x > 0 ? x : x * p[0];
    case NT_ACT_ELU: return x > 0 ? p[1] * x : p[1] * p[0] * expm1(x * p[2]);
    case NT_ACT_SOFTPLUS: return x * p[0] > p[1] ? x : log1p(exp(x * p[0])) / p[0];
    case NT_ACT_LOGSIGMOID: return (x < 0 ? x : 0) - log1p(exp(-fabs(x)));
    case NT_ACT_MISH: return x * tanh(nt_act_softplus1(x));
    case NT_ACT_HARDTANH: return x < p[0] ? p[0] : x > p[1] ? p[1] : x;
    case NT_ACT_HARDSWISH: return x <= -3 ? 0 : x >= 3 ? x : x * (x + 3) / 6;
    case NT_ACT_HARDSIGMOID: return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5;
    default: return x;
  }
}

/* dy/dx at x (the caller multiplies by the incoming gradient) */
NT_ACT_FN double nt_act_grad(int kind, double x, const double *p) {
  switch (kind) {
    case NT_ACT_LEAKY_RELU: return x > 0 ? 1 : p[0];
    case NT_ACT_ELU: return x > 0 ? p[1] : p[1] * p[0] * p[2] * exp(x * p[2]);
    case NT_ACT_SOFTPLUS: return x * p[0] > p[1] ? 1 : nt_act_sigmoid(x * p[0]);
    case NT_ACT_LOGSIGMOID: return nt_act_sigmoid(-x);
    case NT_ACT_MISH: { double t = tanh(nt_act_softplus1(x)); return t + x * nt_act_sigmoid(x) * (1 - t * t); }
    case NT_ACT_HARDTANH: return x <= p[0] || x >= p[1] ? 0 : 1;
    case NT_ACT_HARDSWISH: return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1;
    case NT_ACT_HARDSIGMOID: return x > -3 && x < 3 ? 1.0 / 6 : 0;
    default: return 1;
  }
}

#endif
