/*
** index/gammamath.h — the implicit reparameterisation gradients of Gamma and
** Beta/Dirichlet samples, one element at a time in double, written once and
** compiled into both the CPU kernel (index/gammagrad.c) and the GPU module
** (cuda/distributions.cu), so the devices cannot drift apart (as
** tensor/nn/actmath.h does for the activations).
**
** A sample x of a distribution with CDF F(x; a) moves with a as
**     dx/da = -(dF/da)(x; a) / pdf(x; a)             (implicit differentiation
** of F(x(a); a) = u, u held fixed: Figurnov et al. 2018, Jankowiak & Obermeyer
** 2018).  dF/da has no closed form, so, as torch (ATen/native/Distributions.h)
** does, each region uses an approximation accurate there:
**   Gamma(a):  x < 0.8: the series of the lower incomplete gamma,
**                 F = x^a sum_k (-x)^k / (k! (a + k)), differentiated in a;
**              a > 8: Rice's saddle-point expansion (a closed form near the
**                 mode |x - a| <= 0.1 a, where the general one is 0/0);
**              else: Jankowiak & Obermeyer's bivariate rational fit in
**                 u = log(x/a), v = log a.
**   Beta(a, b) (the Dirichlet's marginal, total = a + b), the scaled gradient
**   -(dF/da) / pdf / (1 - x):  x near 0 or near 1: Taylor series; a, b > 6:
**   a saddle-point expansion; else a rational correction (a 2x3x3x4 fit) of
**   the analytic approximation x (psi(total) - psi(a)) / b.
** The fitted coefficients are the published ones torch uses, so gradients
** agree with torch's to rounding.  Where a series' value is NaN (0/0 at the
** tails) the gradient is 0, as torch's.
*/
#ifndef NT_GAMMAMATH_H
#define NT_GAMMAMATH_H

#include <math.h>

#ifdef __CUDACC__
#define NT_GM_FN static inline __host__ __device__
#else
#define NT_GM_FN static inline
#endif

/* psi(x) for x > 0: psi(x) = psi(x + k) - sum_{i<k} 1/(x + i), pushed to
** x >= 10, then log x - 1/(2x) - sum B_2n / (2n x^2n) to 1/x^14 */
NT_GM_FN double nt_gm_digamma(double x) {
  if (x == 0) return -INFINITY;
  double r = 0;
  if (x < 0) {   /* reflection: psi(x) = psi(1 - x) - pi / tan(pi x); poles NaN */
    if (x == floor(x)) return NAN;
    r = -M_PI / tan(M_PI * x);
    x = 1 - x;
  }
  while (x < 10) { r -= 1 / x; x += 1; }
  double z = 1 / (x * x);
  /* 1/12 - z/120 + z^2/252 - z^3/240 + z^4/132 - 691 z^5/32760 + z^6/12 */
  double s = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return r + log(x) - 0.5 / x - s;
}

/* dx/da for x ~ Gamma(a, 1) */
NT_GM_FN double nt_gm_standard_gamma_grad(double a, double x) {
  if (x < 0.8) {
    /* F = x^a S1, S1 = sum_{k<=5} (-x)^k/(k! (a+k));  dF/da = (log x - psi(a)) ... as torch:
    ** dF/da = log(x) F - x^a S2,  S2 = sum (-x)^k/(k! (a+k)^2), and the Gamma(a) normaliser's
    ** derivative -psi(a) F; pdf = x^(a-1) e^-x (both without 1/Gamma(a), which cancels) */
    double numer = 1, denom = a, s1 = 1 / a, s2 = 1 / (a * a);
    for (int i = 1; i <= 5; i++) {
      numer *= -x / i;
      denom += 1;
      s1 += numer / denom;
      s2 += numer / (denom * denom);
    }
    double pxa = pow(x, a), pdf = pow(x, a - 1) * exp(-x);
    double cdf = pxa * s1, cdf_a = (log(x) - nt_gm_digamma(a)) * cdf - pxa * s2;
    double r = -cdf_a / pdf;
    return isnan(r) ? 0 : r;
  }
  if (a > 8) {
    if (0.9 * a <= x && x <= 1.1 * a) {   /* near the mode: the expansion's limit */
      double n1 = 1 + 24 * a * (1 + 12 * a);
      double n2 = 1440 * (a * a) + 6 * x * (53 - 120 * x) - 65 * x * x / a + a * (107 + 3600 * x);
      return n1 * n2 / (1244160 * (a * a) * (a * a));
    }
    double den = sqrt(8 * a), t2 = den / (a - x);
    double t3 = pow(x - a - a * log(x / a), -1.5);
    double t23 = x < a ? t2 - t3 : t2 + t3;
    double t1 = log(x / a) * t23 - sqrt(2 / a) * (a + x) / ((a - x) * (a - x));
    double stirling = 1 + 1 / (12 * a) * (1 + 1 / (24 * a));
    return -stirling * x * t1 / den;
  }
  /* exp(p(u, v) / q(u, v)): each of p's and q's cubic-in-v coefficients is quadratic in u */
  static const double c[3][8] = {
    { 0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084 },
    { 0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623 },
    { 0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367, -1.5247877e-07 },
  };
  double u = log(x / a), v = log(a), cv[8];
  for (int i = 0; i < 8; i++) cv[i] = c[0][i] + u * (c[1][i] + u * c[2][i]);
  double p = cv[0] + v * (cv[1] + v * (cv[2] + v * cv[3]));
  double q = cv[4] + v * (cv[5] + v * (cv[6] + v * cv[7]));
  return exp(p / q);
}

/* Beta(a, b), x near 0: the series of the incomplete beta, differentiated in a */
NT_GM_FN double nt_gm_beta_grad_a_small(double x, double a, double b) {
  double factor = nt_gm_digamma(a) - nt_gm_digamma(a + b) - log(x);
  double numer = 1, series = numer / a * (factor + 1 / a);
  for (int i = 1; i <= 10; i++) {
    numer *= (i - b) * x / i;
    double den = a + i;
    series += numer / den * (factor + 1 / den);
  }
  double r = x * pow(1 - x, -b) * series;
  return isnan(r) ? 0 : r;
}

/* Beta(a, b), x near 0: the same in b */
NT_GM_FN double nt_gm_beta_grad_b_small(double x, double a, double b) {
  double factor = nt_gm_digamma(a + b) - nt_gm_digamma(b);
  double numer = 1, betas = 1, dbetas = 0, series = factor / a;
  for (int i = 1; i <= 8; i++) {
    numer *= -x / i;
    dbetas = dbetas * (b - i) + betas;
    betas = betas * (b - i);
    series += numer / (a + i) * (dbetas + factor * betas);
  }
  double r = -pow(1 - x, 1 - b) * series;
  return isnan(r) ? 0 : r;
}

/* Beta(a, b), a and b large: Rice's saddle-point expansion (its limit within 0.1 sd of the mean) */
NT_GM_FN double nt_gm_beta_grad_a_mid(double x, double a, double b) {
  double total = a + b, mean = a / total, sd = sqrt(a * b / (total + 1)) / total;
  if (mean - 0.1 * sd <= x && x <= mean + 0.1 * sd) {
    double poly = 47 * x * (b * b) * (b * b) + a * ((43 + 20 * (16 + 27 * b) * x) * (b * b) * b + a * (
                  3 * (59 + 180 * b - 90 * x) * (b * b) + a * ((453 + 1620 * b * (1 - x) - 455 * x) * b + a * (
                  8 * (1 - x) * (135 * b - 11)))));
    double pre_num = (1 + 12 * a) * (1 + 12 * b) / (total * total);
    double pre_den = 12960 * a * a * a * b * b * (1 + 12 * total);
    return pre_num / (1 - x) * poly / pre_den;
  }
  double prefactor = -x / sqrt(2 * a * b / total);
  double stirling = (1 + 1 / (12 * a) + 1 / (288 * a * a)) * (1 + 1 / (12 * b) + 1 / (288 * b * b)) /
                    (1 + 1 / (12 * total) + 1 / (288 * total * total));
  double axbx = a * (x - 1) + b * x;
  double t1 = (2 * (a * a) * (x - 1) + a * b * (x - 1) - x * (b * b)) / (sqrt(2 * a / b) * pow(total, 1.5) * axbx * axbx);
  double t2 = 0.5 * log(a / (total * x));
  double t3 = sqrt(8 * a * b / total) / (b * x + a * (x - 1));
  double t4 = pow(b * log(b / (total * (1 - x))) + a * log(a / (total * x)), -1.5);
  return stirling * prefactor * (t1 + t2 * (t3 + (x < mean ? t4 : -t4)));
}

/* -(dF/da) / pdf / (1 - x) for x ~ Beta(a, total - a): a Dirichlet coordinate's gradient */
NT_GM_FN double nt_gm_dirichlet_grad(double x, double a, double total) {
  double b = total - a, boundary = total * x * (1 - x);
  if (x <= 0.5 && boundary < 2.5) return nt_gm_beta_grad_a_small(x, a, b);
  if (x >= 0.5 && boundary < 0.75) return -nt_gm_beta_grad_b_small(1 - x, b, a);
  if (a > 6 && b > 6) return nt_gm_beta_grad_a_mid(x, a, b);
  /* p/q, each sum_{i,j<3} u^i t^j (cubic in w), u = log x, t = log a - u, w = log total - t */
  static const double c[2][3][3][4] = {
    {{{1.003668233, -0.01061107488, -0.0657888334, 0.01201642863},
      {0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033},
      {-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013}},
     {{0.221950385, -0.3187676331, 0.01799915743, 0.01074823814},
      {-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057},
      {0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05}},
     {{-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565},
      {0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181},
      {0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05}}},
    {{{1, -0.02924021934, -0.04438342661, 0.007285809825},
      {0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521},
      {-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149}},
     {{0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273},
      {0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956},
      {-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05}},
     {{0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05},
      {0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05},
      {-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06}}},
  };
  double u = log(x), t = log(a) - u, w = log(total) - t;
  double pu[3] = { 1, u, u * u }, pt[3] = { 1, t, t * t }, p = 0, q = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double ut = pu[i] * pt[j];
      p += ut * (c[0][i][j][0] + w * (c[0][i][j][1] + w * (c[0][i][j][2] + w * c[0][i][j][3])));
      q += ut * (c[1][i][j][0] + w * (c[1][i][j][1] + w * (c[1][i][j][2] + w * c[1][i][j][3])));
    }
  return p / q * (x * (nt_gm_digamma(total) - nt_gm_digamma(a)) / b);
}

/* ---- the regularised incomplete gamma functions P(a, x) = gamma(a, x) / Gamma(a), Q = 1 - P --------
** x < a + 1: the series P = e^-x x^a / Gamma(a + 1) sum_n x^n / ((a+1)...(a+n)) (terms shrink
** from n ~ x on); else Legendre's continued fraction for Q, by the modified Lentz method.  Both
** converge to a relative 1e-16 in O(sqrt(a)) to O(x) steps; NT_GM_MAX_ITER bounds the loop
** (a > ~1e7 near x = a would need more: a NaN then, never a silent truncation).  Edges as
** torch/SciPy: a < 0 or x < 0 or NaN: NaN; a = 0: P = 1 for x > 0 (NaN at x = 0);
** x = 0: P = 0; x = inf: P = 1. */
#define NT_GM_MAX_ITER 20000
/* returns P (upper = 0) or Q (upper = 1) */
NT_GM_FN double nt_gm_igamma(double a, double x, int upper) {
  if (isnan(a) || isnan(x) || a < 0 || x < 0 || (a == 0 && x == 0)) return NAN;
  if (a == 0) return upper ? 0 : 1;
  if (x == 0) return upper ? 1 : 0;
  if (isinf(x)) return upper ? 0 : 1;
  double logpre = a * log(x) - x - lgamma(a);   /* log(e^-x x^a / Gamma(a)) */
  if (x < a + 1) {
    double term = 1 / a, sum = term;
    for (int n = 1; n < NT_GM_MAX_ITER; n++) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-17) {
        double p = exp(logpre) * sum;
        return upper ? 1 - p : p;
      }
    }
    return NAN;
  }
  /* Q = e^-x x^a / Gamma(a) * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))) */
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int n = 1; n < NT_GM_MAX_ITER; n++) {
    double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-16) {
      double q = exp(logpre) * h;
      return upper ? q : 1 - q;
    }
  }
  return NAN;
}

/* the op's element function: kind 0 standard_gamma_grad(p = alpha, q = x), 1 dirichlet_grad(p = x,
** q = alpha, r = total), 2 igamma(p = a, q = x), 3 igammac(p = a, q = x) */
NT_GM_FN double nt_gm_eval(int kind, double p, double q, double r) {
  switch (kind) {
  case 0: return nt_gm_standard_gamma_grad(p, q);
  case 1: return nt_gm_dirichlet_grad(p, q, r);
  case 2: return nt_gm_igamma(p, q, 0);
  default: return nt_gm_igamma(p, q, 1);
  }
}

#endif
