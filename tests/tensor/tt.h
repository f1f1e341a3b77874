/*
** tt.h — the harness shared by the sources of the test_tensor program
** (tests/tensor/): test_tensor.c (harness, helpers, random and printing
** tests, main), tt_ops.c (values of the ops, views, shapes, creation, error
** paths, the op table), tt_grad.c (autograd and gradient checks) and
** tt_fuse.c (lazy fused chains).  It is
** one program split by topic to keep each file short: its output, and the
** order of the tests in it, are those of the single file it was.
*/
#ifndef TT_H
#define TT_H

#include "tensor/tbackend.h"   /* the op table (op_table test) and raw storage */
#include "tensor/tdevice.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <time.h>
#include <math.h>
#include <string.h>

/* the current test's failure/skip message and skip flag (test_tensor.c) */
extern char why[1024];
extern bool skipped;

#define FAILF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return false; } while (0)
#define EXPECT(c, ...) do { if (!(c)) FAILF(__VA_ARGS__); } while (0)
#define OK(x) do { if (!(x)) FAILF("%s:%d: %s failed: %s", __FILE__, __LINE__, #x, nt_error_msg()); } while (0)
#define SKIPF(...) do { skipped = true; snprintf(why, sizeof why, __VA_ARGS__); return true; } while (0)

#define TEST(name) static bool test_##name(void)
/* each topic file exports its tests as a table, in running order */
typedef struct tt_test { const char *name; bool (*fn)(void); } tt_test;
#define TT_ENTRY(name) { #name, test_##name }
extern const tt_test tt_tests_ops[];    /* tt_ops.c */
extern const tt_test tt_tests_grad[];   /* tt_grad.c */
extern const tt_test tt_tests_fuse[];   /* tt_fuse.c */

/* ---- helpers (test_tensor.c) --------------------------------------------------- */
/* a tensor from doubles */
nt_Tensor *T(nt_DType dt, int nd, const int64_t *shape, const double *v);
#define SHAPE(...) ((const int64_t[]){ __VA_ARGS__ })
#define VALS(...) ((const double[]){ __VA_ARGS__ })
#define NARGS(...) (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))
#define MK(dt, shape_, ...) T(dt, (int)(sizeof(shape_) / sizeof(int64_t)), shape_, VALS(__VA_ARGS__))
double *host(nt_Tensor *t);   /* malloc'd f64 copy */
bool close_to(double a, double b, double tol);
/* checks values and shape; releases t */
bool check(nt_Tensor *t, int nd, const int64_t *shape, const double *v, double tol);
#define CHECKV(t, shape_, ...) do { const int64_t *s_ = shape_; if (!check((t), (int)(sizeof(shape_) / sizeof(int64_t)), s_, VALS(__VA_ARGS__), 1e-5)) return false; } while (0)
#define CHECK0(t, v) do { if (!check((t), 0, NULL, VALS(v), 1e-5)) return false; } while (0)
bool err_has(const char *s);
/* gradcheck: f maps inputs to an output; loss = sum(f(x) * w) with fixed
** random w, so all output elements contribute with different weights.
** Compares autograd's d loss / d x with central differences (eps 1e-6) for
** every input element. */
typedef nt_Tensor *(*GFn)(nt_Tensor **x, void *ud);
bool gradcheck(const char *name, GFn f, int nin, nt_Tensor **x, void *ud);
/* uniform f64 in [lo, hi) */
nt_Tensor *rnd(int nd, const int64_t *shape, double lo, double hi);

#endif
