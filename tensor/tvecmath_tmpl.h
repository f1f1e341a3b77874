/*
** tvecmath_tmpl.h — the loops of tvecmath_isa.c for one element type; that
** file defines T (float/double), V (its vector), F(fn) (SLEEF's function for
** V) and FN(name) (the suffixed name) and includes this twice.
** The formulas are those of the scalar kernels they replace (tcpu_elem.c,
** nn/gelu.c, telem.c's composed backward), so only SLEEF's rounding differs.
*/

/* sin/cos/log1p with the out-of-range lanes fixed (tvecmath_isa.c says why) */
static inline V FN(fix_lanes)(V x, V r, int fn) {
  T xl[LANES], rl[LANES];
  memcpy(xl, &x, sizeof x); memcpy(rl, &r, sizeof r);
  for (size_t k = 0; k < LANES; k++) {
    T a = xl[k];
    if (fn == NT_VM_LOG1P) { if (a > LOG1P_MAX) rl[k] = LIBM(log)(a); }
    else if (a > TRIG_MAX || a < -TRIG_MAX) rl[k] = fn == NT_VM_SIN ? LIBM(sin)(a) : LIBM(cos)(a);
  }
  memcpy(&r, rl, sizeof r);
  return r;
}
static inline V FN(sin)(V x) {
  V r = F(sin)(x);
  return ANY((x > TRIG_MAX) | (x < -TRIG_MAX)) ? FN(fix_lanes)(x, r, NT_VM_SIN) : r;
}
static inline V FN(cos)(V x) {
  V r = F(cos)(x);
  return ANY((x > TRIG_MAX) | (x < -TRIG_MAX)) ? FN(fix_lanes)(x, r, NT_VM_COS) : r;
}
static inline V FN(log1p)(V x) {
  V r = F(log1p)(x);
  return ANY(x > LOG1P_MAX) ? FN(fix_lanes)(x, r, NT_VM_LOG1P) : r;
}

static void FN(unary)(int fn, const T *xs, T *ys, int64_t n) {
  const T h = (T)0.5, one = 1;
  switch (fn) {
    case NT_VM_EXP: MAP1(xs, ys, F(exp)(x)); break;
    case NT_VM_LOG: MAP1(xs, ys, F(log)(x)); break;
    case NT_VM_LOG1P: MAP1(xs, ys, FN(log1p)(x)); break;
    case NT_VM_EXPM1: MAP1(xs, ys, F(expm1)(x)); break;
    case NT_VM_TANH: MAP1(xs, ys, F(tanh)(x)); break;
    case NT_VM_ERF: MAP1(xs, ys, F(erf)(x)); break;
    case NT_VM_SIN: MAP1(xs, ys, FN(sin)(x)); break;
    case NT_VM_COS: MAP1(xs, ys, FN(cos)(x)); break;
    case NT_VM_SIGMOID: MAP1(xs, ys, one / (one + F(exp)(-x))); break;
    case NT_VM_SILU: MAP1(xs, ys, x / (one + F(exp)(-x))); break;
#ifdef VM_GELU_OWN
    case NT_VM_GELU: MAP1(xs, ys, gelu_erf_f32(x)); break;
#else
    case NT_VM_GELU: MAP1(xs, ys, h * x * (one + F(erf)(x * (T)INV_SQRT2))); break;
#endif
    case NT_VM_GELU_TANH:
      MAP1(xs, ys, h * x * (one + F(tanh)((T)SQRT_2_PI * (x + (T)GELU_A * x * x * x)))); break;
    default: break;
  }
}

/* gelu's derivatives (nn/gelu.c has the math) */
static inline V FN(dgelu)(V x) {
#ifdef VM_GELU_OWN
  return gelu_grad_f32(x);
#else
  const T h = (T)0.5, one = 1;
  V cdf = h * (one + F(erf)(x * (T)INV_SQRT2));
  V pdf = F(exp)(-h * x * x) * (T)INV_SQRT_2PI;
  return cdf + x * pdf;
#endif
}
static inline V FN(dgelu_tanh)(V x) {
  const T h = (T)0.5, one = 1;
  V x2 = x * x;
  V t = F(tanh)((T)SQRT_2_PI * (x + (T)GELU_A * x2 * x));
  V du = (T)SQRT_2_PI * (one + (T)(3 * GELU_A) * x2);
  return h * (one + t) + h * x * (one - t * t) * du;
}
static inline V FN(dsilu)(V x) {
  const T one = 1;
  V s = one / (one + F(exp)(-x));
  return s + x * s * (one - s);
}

/* a: upstream gradient, b: the saved output (tanh, sigmoid) or input */
static void FN(grad)(int fn, const T *gs, const T *in, T *dx, int64_t n) {
  const T one = 1;
  switch (fn) {
    case NT_VM_TANH: MAP2(gs, in, dx, a * (one - b * b)); break;
    case NT_VM_SIGMOID: MAP2(gs, in, dx, a * (b * (one - b))); break;
    case NT_VM_SILU: MAP2(gs, in, dx, a * FN(dsilu)(b)); break;
    case NT_VM_GELU: MAP2(gs, in, dx, a * FN(dgelu)(b)); break;
    case NT_VM_GELU_TANH: MAP2(gs, in, dx, a * FN(dgelu_tanh)(b)); break;
    default: break;
  }
}

static void FN(pow)(const T *as, const T *bs, T s, int mode, T *os, int64_t n) {
  V zero; memset(&zero, 0, sizeof zero);
  V sv = zero + s;
  if (mode == 1) MAP1(as, os, F(pow)(x, sv));
  else if (mode == 2) MAP1(bs, os, F(pow)(sv, x));
  else MAP2(as, bs, os, F(pow)(a, b));
}

static double FN(expsum)(const T *xs, T *ys, int64_t n, T shift) {
  V acc; memset(&acc, 0, sizeof acc);
  int64_t i = 0;
  for (; i + (int64_t)LANES <= n; i += LANES) {
    V e = F(exp)(LOAD(xs + i) - shift);
    if (ys) STORE(ys + i, e);
    acc += e;
  }
  T lanes[LANES];
  memcpy(lanes, &acc, sizeof acc);
  double sum = 0;
  for (size_t k = 0; k < LANES; k++) sum += lanes[k];
  if (i < n) {   /* the tail, padded with -inf (exp gives 0) */
    T bx[LANES], by[LANES]; size_t r = (size_t)(n - i);
    for (size_t k = 0; k < LANES; k++) bx[k] = -INFINITY;
    memcpy(bx, xs + i, r * sizeof(T));
    STORE(by, F(exp)(LOAD(bx) - shift));
    for (size_t k = 0; k < r; k++) sum += by[k];
    if (ys) memcpy(ys + i, by, r * sizeof(T));
  }
  return sum;
}
