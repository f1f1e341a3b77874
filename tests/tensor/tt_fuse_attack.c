/*
** tt_fuse_attack.c — the test_fuse_attack program: adversarial C-level checks
** of lazy fused elementwise chains (tensor/tfuse.c), each against the same
** ops with fusion off (nt_fuse_set_enabled(false)), bit for bit:
**  - a lazy value combined with a view of itself (y + y^T, y * y[0]) while
**    its chain holds the only reference to its input (was a use after free:
**    run it under ASan);
**  - a reshape of a lazy value (same numel, another shape) as an operand
**    (was a silent wrong value);
**  - a pending value holds neither its input tensor nor its graph (the input
**    is released as soon as the caller releases it);
**  - threads: several threads take the address of a lazy value, or of the
**    input a chain reads, at once — each must see the computed bits.
** A standalone program (its own main) so that it shares no file with
** test_tensor; the language-level routes are tests/numerics/test_fuse_attack.py.
*/
#include "tensor/tensor.h"
#include "tensor/textend.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int n_pass, n_fail;
static char why[512];
#define FAILF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return false; } while (0)
#define EXPECT(c, ...) do { if (!(c)) FAILF(__VA_ARGS__); } while (0)
#define OK(x) do { if (!(x)) FAILF("line %d: %s failed: %s", __LINE__, #x, nt_error_msg()); } while (0)
#define SH(...) ((const int64_t[]){ __VA_ARGS__ })
#define RUN(fn) do { why[0] = 0; if (fn()) { n_pass++; printf("PASS: fuse_attack.%s\n", #fn); } \
                     else { n_fail++; printf("FAIL: fuse_attack.%s: %s\n", #fn, why); } } while (0)

/* 200 x 200 f32 (above the 16384-element threshold), uniform in [-3, 3), settled */
static nt_Tensor *input(void) {
  nt_Tensor *u = nt_rand(SH(200, 200), 2, NT_F32, NT_CPU);
  nt_Tensor *a = u ? nt_binary_scalar(NT_OP_MUL, u, 6, false) : NULL, *b = a ? nt_binary_scalar(NT_OP_SUB, a, 3, false) : NULL;
  nt_release(u); nt_release(a);
  if (b && nt_settle(b)) { nt_release(b); return NULL; }
  return b;
}
static bool same_bits(nt_Tensor *a, nt_Tensor *b) {
  if (!a || !b || a->numel != b->numel || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  nt_Tensor *ca = nt_contiguous(a), *cb = nt_contiguous(b);
  bool ok = ca && cb && !memcmp(nt_data_ptr(ca), nt_data_ptr(cb), (size_t)a->numel * nt_dtype_size(a->dtype));
  nt_release(ca); nt_release(cb);
  return ok;
}

/* f(x) = (x * 2 - 1) OP view(x * 2 - 1), fused (x released first: the chain
** holds the only reference to it) and not */
static nt_Tensor *self_view(nt_Tensor *x, bool fuse, bool release_x, int which) {
  bool prev = nt_fuse_set_enabled(fuse);
  nt_Tensor *a = nt_binary_scalar(NT_OP_MUL, x, 2, false), *y = a ? nt_binary_scalar(NT_OP_SUB, a, 1, false) : NULL;
  nt_release(a);
  if (release_x) nt_release(x);
  nt_Tensor *v = !y ? NULL : which == 0 ? nt_transpose(y, 0, 1) : which == 1 ? nt_narrow(y, 0, 0, 1) : nt_reshape(y, SH(40000), 1);
  nt_Tensor *out = NULL;
  if (v && which < 2) out = nt_binary(which == 0 ? NT_OP_ADD : NT_OP_MUL, y, v);
  else if (v) out = nt_binary_scalar(NT_OP_ADD, v, 1, false);   /* the reshape alone as the operand */
  if (out && nt_settle(out)) { nt_release(out); out = NULL; }
  nt_release(v); nt_release(y);
  nt_fuse_set_enabled(prev);
  return out;
}

static bool check_self_view(int which) {
  nt_Tensor *x = input();
  OK(x);
  nt_Tensor *ref = self_view(x, false, false, which);
  OK(ref);
  nt_Tensor *got = self_view(x, true, true, which);   /* releases x */
  OK(got);
  bool ok = same_bits(got, ref);
  nt_release(got); nt_release(ref);
  EXPECT(ok, "fused and unfused values differ (case %d)", which);
  return true;
}
static bool self_transpose(void) { return check_self_view(0); }
static bool self_row(void) { return check_self_view(1); }
static bool reshape_operand(void) { return check_self_view(2); }

static bool input_not_held(void) {
  nt_Tensor *x = input();
  OK(x);
  OK(!nt_set_requires_grad(x, true));
  nt_Tensor *h = nt_binary_scalar(NT_OP_MUL, x, 2, false);   /* recorded: h has a graph */
  OK(h);
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *s = nt_binary_scalar(NT_OP_ADD, h, 1, false);
  nt_set_grad_enabled(prev);
  OK(s);
  bool lazy = nt_is_lazy(s);
  int hrc = h->refcount, xrc = x->refcount;
  nt_Tensor *hv = nt_detach(h);
  bool prev2 = nt_fuse_set_enabled(false);
  nt_Tensor *ref = hv ? nt_binary_scalar(NT_OP_ADD, hv, 1, false) : NULL;
  nt_fuse_set_enabled(prev2);
  nt_release(hv);
  nt_release(h);
  bool ok = ref && same_bits(s, ref);
  nt_release(s); nt_release(ref); nt_release(x);
  EXPECT(lazy, "h + 1 on 40000 elements with grad off should be lazy");
  EXPECT(hrc == 1, "a pending value holds its input tensor (refcount %d, want 1): its graph stays alive", hrc);
  EXPECT(xrc == 2, "x's refcount %d (want 2: x and h's graph)", xrc);
  EXPECT(ok, "the value differs from eager evaluation");
  return true;
}

/* ---- threads ---------------------------------------------------------------- */
typedef struct { nt_Tensor *t, *ref; int bad; } Job;
static void *take(void *p) {
  Job *j = p;
  const void *d = nt_data_ptr(j->t);
  j->bad = !d || memcmp(d, nt_data_ptr(j->ref), (size_t)j->ref->numel * nt_dtype_size(j->ref->dtype)) != 0;
  return NULL;
}
static bool threads_settle(void) {
  for (int round = 0; round < 20; round++) {
    nt_Tensor *x = input();
    OK(x);
    bool prev = nt_fuse_set_enabled(false);
    nt_Tensor *r0 = nt_unary(NT_OP_TANH, x), *ref = r0 ? nt_binary_scalar(NT_OP_MUL, r0, 3, false) : NULL;
    nt_fuse_set_enabled(prev);
    nt_Tensor *l0 = nt_unary(NT_OP_TANH, x), *y = l0 ? nt_binary_scalar(NT_OP_MUL, l0, 3, false) : NULL;
    nt_release(r0); nt_release(l0);
    OK(ref && y);
    EXPECT(nt_is_lazy(y), "tanh(x) * 3 should be lazy");
    /* half the threads take y's address, half x's (which computes y first) */
    Job jobs[8];
    pthread_t th[8];
    int started = 0;
    for (int i = 0; i < 8; i++) {
      jobs[i] = (Job){ i % 2 ? y : x, i % 2 ? ref : x, 0 };
      if (!pthread_create(&th[i], NULL, take, &jobs[i])) started++;
      else jobs[i].bad = 2;
    }
    for (int i = 0; i < 8; i++) if (jobs[i].bad != 2) pthread_join(th[i], NULL);
    bool ok = !nt_is_lazy(y) && same_bits(y, ref);
    int bad = 0;
    for (int i = 0; i < 8; i++) bad |= jobs[i].bad == 1;
    nt_release(x); nt_release(y); nt_release(ref);
    EXPECT(started > 1, "could not start threads");
    EXPECT(ok && !bad, "round %d: a thread saw other bits than eager evaluation", round);
  }
  return true;
}

int main(void) {
  nt_init();
  RUN(self_transpose);
  RUN(self_row);
  RUN(reshape_operand);
  RUN(input_not_held);
  RUN(threads_settle);
  fprintf(stderr, "%d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
