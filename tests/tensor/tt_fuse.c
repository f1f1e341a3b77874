/*
** tt_fuse.c — lazy fused elementwise chains (tensor/tfuse.c) through the C
** API: raw access (nt_base, nt_data_ptr) computes a lazy value and the
** pending chains that read the memory before handing out the address; a
** write through a pointer taken BEFORE the chain was recorded is reported,
** not computed from silently; nt_settle, stats, and what is never lazy.
** (Values against NumPy/torch and each language-level writer:
** tests/numerics/test_fuse.py.)
*/
#include "tt.h"
#include "tensor/textend.h"

#define BIG SHAPE(200, 100)   /* above the fusion threshold (16384 elements) */

/* f(x) with fusion off: the reference bits */
static nt_Tensor *eager_2x1(nt_Tensor *x) {
  bool prev = nt_fuse_set_enabled(false);
  nt_Tensor *a = nt_binary_scalar(NT_OP_MUL, x, 2, false), *b = a ? nt_binary_scalar(NT_OP_ADD, a, 1, false) : NULL;
  nt_fuse_set_enabled(prev);
  nt_release(a);
  return b;
}
static bool same_bits(nt_Tensor *a, nt_Tensor *b) {
  return a->numel == b->numel && a->dtype == b->dtype &&
         !memcmp(nt_data_ptr(a), nt_data_ptr(b), (size_t)a->numel * nt_dtype_size(a->dtype));
}

TEST(fuse_raw_write_hazard) {
  nt_Tensor *x = rnd(2, BIG, -3, 3);
  OK(x && !nt_settle(x));
  nt_Tensor *ref = eager_2x1(x), *a = nt_binary_scalar(NT_OP_MUL, x, 2, false), *y = a ? nt_binary_scalar(NT_OP_ADD, a, 1, false) : NULL;
  OK(ref && y);
  nt_release(a);
  EXPECT(nt_is_lazy(y), "x * 2 + 1 on %lld f64 elements should be lazy", (long long)y->numel);
  double *p = nt_data_ptr(x);   /* the address is handed out: y is computed first */
  EXPECT(!nt_is_lazy(y), "taking x's address did not compute the chain that reads x");
  for (int64_t i = 0; i < x->numel; i++) p[i] = 7;
  nt_bump_version(x);
  bool ok = same_bits(y, ref);
  nt_release(x); nt_release(y); nt_release(ref);
  EXPECT(ok, "y = x * 2 + 1 saw a raw write into x made after it");
  return true;
}

TEST(fuse_cached_pointer_reported) {
  nt_Tensor *x = rnd(2, BIG, -3, 3);
  OK(x);
  double *p = nt_data_ptr(x);   /* taken BEFORE the chain: the rule in textend.h is broken on purpose */
  nt_Tensor *y = nt_binary_scalar(NT_OP_MUL, x, 2, false);
  OK(y);
  EXPECT(nt_is_lazy(y), "x * 2 should be lazy");
  p[0] = 1e300;
  nt_bump_version(x);
  nt_error_clear();
  int rc = nt_settle(y);
  nt_release(x); nt_release(y);
  EXPECT(rc == -1 && err_has("written in place"), "a write through a stale pointer was not reported (rc %d, error '%s')", rc, nt_error_msg());
  return true;
}

TEST(fuse_settle_stats_drop) {
  int64_t p0, f0, d0, p1, f1, d1;
  nt_fuse_stats(&p0, &f0, &d0);
  nt_Tensor *x = rnd(2, BIG, -1, 1);
  OK(x && !nt_settle(x));
  nt_fuse_stats(&p0, &f0, &d0);
  nt_Tensor *y = nt_unary(NT_OP_TANH, x), *z = nt_binary_scalar(NT_OP_MUL, x, 3, false);
  OK(y && z);
  EXPECT(nt_is_lazy(y) && nt_is_lazy(z), "tanh(x) and x * 3 should be lazy");
  OK(!nt_settle(y));
  EXPECT(!nt_is_lazy(y), "nt_settle left it lazy");
  nt_release(z);   /* dropped unread: never computed */
  nt_fuse_stats(&p1, &f1, &d1);
  nt_release(x); nt_release(y);
  EXPECT(f1 == f0 + 1 && d1 == d0 + 1 && p1 == p0, "stats: forced %lld->%lld dropped %lld->%lld pending %lld->%lld",
         (long long)f0, (long long)f1, (long long)d0, (long long)d1, (long long)p0, (long long)p1);
  return true;
}

TEST(fuse_never_lazy) {
  nt_Tensor *s = rnd(1, SHAPE(16), -1, 1), *x = rnd(2, BIG, -1, 1);
  OK(s && x && !nt_settle(x));
  nt_Tensor *a = nt_binary_scalar(NT_OP_ADD, s, 1, false);             /* tiny */
  nt_Tensor *b = nt_binary_scalar(NT_OP_LT, x, 0, false);              /* bool result */
  OK(!nt_set_requires_grad(x, true));
  nt_Tensor *c = nt_binary_scalar(NT_OP_MUL, x, 2, false);             /* recorded by autograd */
  bool prev = nt_fuse_set_enabled(false);
  OK(!nt_set_requires_grad(x, false));
  nt_Tensor *d = nt_binary_scalar(NT_OP_MUL, x, 2, false);             /* NABLA_FUSE=0 */
  nt_fuse_set_enabled(prev);
  OK(a && b && c && d);
  bool ok = !nt_is_lazy(a) && !nt_is_lazy(b) && !nt_is_lazy(c) && !nt_is_lazy(d);
  nt_release(s); nt_release(x); nt_release(a); nt_release(b); nt_release(c); nt_release(d);
  EXPECT(ok, "a tiny op, a comparison, an op under autograd or with fusion off was lazy");
  return true;
}

TEST(fuse_view_of_lazy) {
  nt_Tensor *x = rnd(2, BIG, -3, 3);
  OK(x && !nt_settle(x));
  nt_Tensor *ref = eager_2x1(x), *a = nt_binary_scalar(NT_OP_MUL, x, 2, false), *y = a ? nt_binary_scalar(NT_OP_ADD, a, 1, false) : NULL;
  nt_release(a);
  OK(ref && y);
  nt_Tensor *v = nt_transpose(y, 0, 1), *vr = ref ? nt_transpose(ref, 0, 1) : NULL;
  OK(v && vr);
  nt_Tensor *c = nt_contiguous(v), *cr = nt_contiguous(vr);   /* reads through the view */
  OK(c && cr);
  bool ok = same_bits(c, cr);
  nt_release(x); nt_release(ref); nt_release(y); nt_release(v); nt_release(vr); nt_release(c); nt_release(cr);
  EXPECT(ok, "a transposed view of a lazy value read other bits than eager evaluation");
  return true;
}

const tt_test tt_tests_fuse[] = {
  TT_ENTRY(fuse_raw_write_hazard), TT_ENTRY(fuse_cached_pointer_reported), TT_ENTRY(fuse_settle_stats_drop),
  TT_ENTRY(fuse_never_lazy), TT_ENTRY(fuse_view_of_lazy), { NULL, NULL }
};
