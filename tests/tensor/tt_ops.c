/*
** tt_ops.c — test_tensor's tests of the ops' values: dtypes and promotion,
** half conversions, views and storage sharing, elementwise, integer and
** comparison semantics, reductions, matmul, shape ops, creation, and the
** error paths (out of memory, shape overflow, devices, the op table).
** Harness and helpers: tt.h.
*/
#include "tt.h"

TEST(dtype_promotion) {
  EXPECT(nt_promote(NT_I32, NT_F32) == NT_F32, "i32+f32");
  EXPECT(nt_promote(NT_I64, NT_F16) == NT_F16, "i64+f16");
  EXPECT(nt_promote(NT_F16, NT_F32) == NT_F32, "f16+f32");
  EXPECT(nt_promote(NT_F16, NT_BF16) == NT_F32, "f16+bf16");
  EXPECT(nt_promote(NT_BOOL, NT_I32) == NT_I32, "bool+i32");
  EXPECT(nt_promote(NT_U8, NT_I32) == NT_I32, "u8+i32");
  EXPECT(nt_promote(NT_I32, NT_I64) == NT_I64, "i32+i64");
  EXPECT(nt_promote(NT_F32, NT_F64) == NT_F64, "f32+f64");
  EXPECT(nt_promote_scalar(NT_I32, true) == NT_F32, "i32 + 2.5");
  EXPECT(nt_promote_scalar(NT_I32, false) == NT_I32, "i32 + 2");
  EXPECT(nt_promote_scalar(NT_F16, true) == NT_F16, "f16 + 2.5");
  EXPECT(nt_promote_scalar(NT_BOOL, false) == NT_I64, "bool + 2");
  /* 0-d tensors next to tensors with dims: category up, width not (torch result_type) */
  {
    nt_Tensor *f32 = nt_ones(SHAPE(2, 3), 2, NT_F32, NT_CPU), *i32 = nt_ones(SHAPE(3), 1, NT_I32, NT_CPU);
    nt_Tensor *bl = nt_ones(SHAPE(3), 1, NT_BOOL, NT_CPU), *f16 = nt_ones(SHAPE(3), 1, NT_F16, NT_CPU);
    nt_Tensor *s64 = nt_scalar(2.5, NT_F64), *si64 = nt_scalar(2, NT_I64), *sb = nt_scalar(1, NT_BOOL), *s32 = nt_scalar(1, NT_F32);
    bool ok = nt_result_type(f32, s64) == NT_F32 && nt_result_type(s64, f32) == NT_F32 &&
              nt_result_type(f16, s64) == NT_F16 && nt_result_type(i32, si64) == NT_I32 &&
              nt_result_type(i32, s64) == NT_F64 && nt_result_type(bl, si64) == NT_I64 &&
              nt_result_type(i32, sb) == NT_I32 && nt_result_type(s64, s32) == NT_F64 &&
              nt_result_type(f32, f16) == NT_F32;
    nt_Tensor *sum = ok ? nt_add(f32, s64) : NULL;
    ok = ok && sum && sum->dtype == NT_F32 && ((float *)nt_base(sum))[0] == 3.5f;
    nt_release(sum);
    nt_release(f32); nt_release(i32); nt_release(bl); nt_release(f16);
    nt_release(s64); nt_release(si64); nt_release(sb); nt_release(s32);
    EXPECT(ok, "nt_result_type with 0-d tensors");
  }
  EXPECT(nt_dtype_from_name("float64") == NT_F64 && nt_dtype_from_name("bool") == NT_BOOL, "names");
  EXPECT(nt_dtype_from_name("quux") == -1 && err_has("unknown dtype"), "bad name");
  return true;
}

TEST(half_conversions) {
  const float vals[] = { 0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.33325195f };
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    EXPECT(nt_f16_to_f32(nt_f32_to_f16(vals[i])) == vals[i], "f16 roundtrip of %g", vals[i]);
  EXPECT(isinf(nt_f16_to_f32(nt_f32_to_f16(1e6f))), "f16 overflow → inf");
  EXPECT(isnan(nt_f16_to_f32(nt_f32_to_f16(NAN))), "f16 nan");
  EXPECT(nt_f32_to_f16(1.0f + 1.0f / 4096) == nt_f32_to_f16(1.0f), "f16 ties to even");
  EXPECT(nt_bf16_to_f32(nt_f32_to_bf16(1.5f)) == 1.5f, "bf16 1.5");
  EXPECT(nt_bf16_to_f32(nt_f32_to_bf16(3.14159f)) == 3.140625f, "bf16 rounding");
  nt_Tensor *h = MK(NT_F16, SHAPE(3), 1.5, -2, 1000);
  nt_Tensor *s = nt_add(h, h);
  EXPECT(s && s->dtype == NT_F16, "f16+f16 dtype");
  CHECKV(s, SHAPE(3), 3, -4, 2000);
  nt_release(h);
  return true;
}

TEST(storage_sharing) {
  nt_Tensor *a = nt_arange(0, 6, 1, NT_F32);
  int64_t sh[2] = { 2, 3 };
  nt_Tensor *b = nt_reshape(a, sh, 2), *c = nt_transpose(b, 0, 1);
  EXPECT(b->storage == a->storage && c->storage == a->storage, "views share storage");
  EXPECT(a->storage->refcount == 3, "storage refcount %d", a->storage->refcount);
  EXPECT(nt_is_contiguous(b) && !nt_is_contiguous(c), "contiguity flags");
  nt_release(a); nt_release(b);     /* storage survives through c */
  CHECKV(nt_contiguous(c), SHAPE(3, 2), 0, 3, 1, 4, 2, 5);
  nt_release(c);
  return true;
}

TEST(slicing) {
  nt_Tensor *a = nt_arange(0, 12, 1, NT_I64);
  nt_Tensor *m = nt_reshape(a, SHAPE(3, 4), 2);
  CHECKV(nt_slice(m, 1, 1, 3, 1), SHAPE(3, 2), 1, 2, 5, 6, 9, 10);
  CHECKV(nt_slice(m, 1, NT_NONE, NT_NONE, -1), SHAPE(3, 4), 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8);
  CHECKV(nt_slice(m, 0, -1, NT_NONE, 1), SHAPE(1, 4), 8, 9, 10, 11);
  CHECKV(nt_slice(m, 1, NT_NONE, NT_NONE, 2), SHAPE(3, 2), 0, 2, 4, 6, 8, 10);
  CHECKV(nt_slice(m, 1, 10, 20, 1), SHAPE(3, 0), 0);
  CHECKV(nt_select(m, 0, -1), SHAPE(4), 8, 9, 10, 11);
  CHECKV(nt_narrow(m, 1, 1, 2), SHAPE(3, 2), 1, 2, 5, 6, 9, 10);
  nt_Index idx[3] = { { NT_IDX_INT, 1, 0, 0 }, { NT_IDX_NEWAXIS, 0, 0, 0 }, { NT_IDX_SLICE, 1, NT_NONE, 2 } };
  CHECKV(nt_index(m, idx, 3), SHAPE(1, 2), 5, 7);
  nt_Index e[2] = { { NT_IDX_ELLIPSIS, 0, 0, 0 }, { NT_IDX_INT, 0, 0, 0 } };
  CHECKV(nt_index(m, e, 2), SHAPE(3), 0, 4, 8);
  EXPECT(!nt_select(m, 0, 5) && err_has("index 5 is out of range for axis 0 with size 3"), "oob msg: %s", nt_error_msg());
  EXPECT(!nt_slice(m, 0, 0, 1, 0) && err_has("step cannot be zero"), "zero step");
  nt_release(a); nt_release(m);
  return true;
}

TEST(permute_reshape_expand) {
  nt_Tensor *a = nt_arange(0, 24, 1, NT_F32), *b = nt_reshape(a, SHAPE(2, 3, 4), 3);
  nt_Tensor *p = nt_permute(b, (int[]){ 2, 0, 1 }, 3);
  EXPECT(p->shape[0] == 4 && p->shape[1] == 2 && p->shape[2] == 3 && p->storage == a->storage, "permute view");
  double v;
  OK(nt_get(p, SHAPE(3, 1, 2), &v) == 0);
  EXPECT(v == 23, "p[3,1,2] = %g", v);
  nt_Tensor *r = nt_reshape(p, SHAPE(-1), 1);         /* needs a copy */
  EXPECT(r && r->shape[0] == 24 && r->storage != a->storage, "reshape copy");
  OK(nt_get(r, SHAPE(1), &v) == 0);
  EXPECT(v == 4, "r[1] = %g", v);
  nt_Tensor *r2 = nt_reshape(p, SHAPE(4, 6), 2);       /* merges the two inner axes: a view */
  EXPECT(r2 && r2->storage == a->storage, "reshape view through permute");
  nt_release(r2);
  nt_Tensor *t = nt_T(b);
  EXPECT(t->shape[0] == 4 && t->shape[2] == 2, ".T reverses axes");
  nt_Tensor *s = nt_slice(b, 2, 0, 2, 1), *rs = nt_reshape(s, SHAPE(6, 2), 2);   /* view possible */
  EXPECT(rs && rs->storage == a->storage, "reshape of a compatible slice is a view");
  nt_Tensor *one = MK(NT_F32, SHAPE(3, 1), 1, 2, 3);
  nt_Tensor *ex = nt_expand(one, SHAPE(2, 3, 4), 3);
  EXPECT(ex && ex->strides[0] == 0 && ex->strides[2] == 0, "expand strides");
  CHECK0(nt_sum(ex, NULL, 0, false), 48);
  nt_Tensor *sq = nt_unsqueeze(one, 0), *sq2 = nt_squeeze(sq, NT_ALL_AXES);
  EXPECT(sq->ndim == 3 && sq2->ndim == 1 && sq2->shape[0] == 3, "squeeze/unsqueeze");
  EXPECT(!nt_reshape(b, SHAPE(5, 5), 2) && err_has("cannot reshape tensor of shape [2, 3, 4] into [5, 5]"), "reshape msg: %s", nt_error_msg());
  EXPECT(!nt_expand(b, SHAPE(3, 3, 4), 3) && err_has("cannot expand"), "expand msg");
  nt_Tensor *fl = nt_flatten(b, 1, 2);
  EXPECT(fl->ndim == 2 && fl->shape[1] == 12, "flatten");
  nt_release(a); nt_release(b); nt_release(p); nt_release(r); nt_release(t); nt_release(s); nt_release(rs);
  nt_release(one); nt_release(ex); nt_release(sq); nt_release(sq2); nt_release(fl);
  return true;
}

TEST(assign_into_views) {
  nt_Tensor *x = nt_zeros(SHAPE(2, 3), 2, NT_F32, NT_CPU);
  nt_Tensor *row = nt_select(x, 0, 0);
  OK(nt_fill_(row, 1) == 0);                       /* x[0, :] = 1 */
  nt_Tensor *col = nt_select(x, 1, 2), *src = MK(NT_I64, SHAPE(2), 7, 8);
  OK(nt_copy_(col, src) == 0);                     /* x[:, 2] = [7, 8] (cast) */
  nt_Tensor *b = MK(NT_F32, SHAPE(3), 4, 5, 6), *r1 = nt_select(x, 0, 1);
  nt_Tensor *tail = nt_slice(r1, 0, 0, 2, 1);
  nt_Tensor *bs = nt_slice(b, 0, 0, 2, 1);
  OK(nt_copy_(tail, bs) == 0);
  EXPECT(nt_copy_(tail, b) == -1 && err_has("cannot assign a tensor of shape [3] to a view of shape [2]"), "shape msg: %s", nt_error_msg());
  nt_Tensor *rev = nt_slice(x, 1, NT_NONE, NT_NONE, -1);
  nt_Tensor *x2 = nt_clone(x);
  OK(nt_copy_(x, rev) == 0);                       /* overlapping copy */
  CHECKV(nt_clone(x), SHAPE(2, 3), 7, 1, 1, 8, 5, 4);
  nt_Tensor *s = nt_scalar(2.5, NT_F64);
  OK(nt_copy_(x2, s) == 0);
  CHECKV(nt_retain(x2), SHAPE(2, 3), 2.5, 2.5, 2.5, 2.5, 2.5, 2.5);
  nt_release(x); nt_release(row); nt_release(col); nt_release(src); nt_release(b); nt_release(r1);
  nt_release(tail); nt_release(bs); nt_release(rev); nt_release(x2); nt_release(s);
  return true;
}

TEST(casts) {
  nt_Tensor *a = MK(NT_F32, SHAPE(5), 0.5, -1.7, 0, 2.9, 300);
  CHECKV(nt_to_dtype(a, NT_BOOL), SHAPE(5), 1, 1, 0, 1, 1);
  CHECKV(nt_to_dtype(a, NT_I32), SHAPE(5), 0, -1, 0, 2, 300);
  nt_Tensor *b = nt_to_dtype(a, NT_BF16);
  CHECKV(nt_to_dtype(b, NT_F64), SHAPE(5), 0.5, -1.703125, 0, 2.90625, 300);
  EXPECT(nt_to_dtype(a, NT_F32) == a, "same dtype returns self");
  nt_release(a); nt_release(a); nt_release(b);
  return true;
}

TEST(elementwise_values) {
  nt_Tensor *a = MK(NT_F32, SHAPE(2, 3), 1, 2, 3, 4, 5, 6), *b = MK(NT_F32, SHAPE(3), 10, 20, 30);
  CHECKV(nt_add(a, b), SHAPE(2, 3), 11, 22, 33, 14, 25, 36);
  CHECKV(nt_sub(b, a), SHAPE(2, 3), 9, 18, 27, 6, 15, 24);
  CHECKV(nt_mul(a, b), SHAPE(2, 3), 10, 40, 90, 40, 100, 180);
  CHECKV(nt_div(a, b), SHAPE(2, 3), 0.1, 0.1, 0.1, 0.4, 0.25, 0.2);
  CHECKV(nt_pow(a, b), SHAPE(2, 3), 1, 1048576, 205891132094649.0, 1048576, 95367431640625.0, 2.210739197e23);
  CHECKV(nt_binary_scalar(NT_OP_SUB, a, 1, true), SHAPE(2, 3), 0, -1, -2, -3, -4, -5);
  CHECKV(nt_binary_scalar(NT_OP_DIV, a, 2, false), SHAPE(2, 3), 0.5, 1, 1.5, 2, 2.5, 3);
  CHECKV(nt_binary_scalar(NT_OP_POW, a, 2, true), SHAPE(2, 3), 2, 4, 8, 16, 32, 64);
  nt_Tensor *c = MK(NT_F32, SHAPE(2, 1), 0, 1);
  CHECKV(nt_add(a, c), SHAPE(2, 3), 1, 2, 3, 5, 6, 7);
  nt_Tensor *bad = MK(NT_F32, SHAPE(4), 1, 2, 3, 4);
  EXPECT(!nt_add(a, bad) && err_has("add: shapes [2, 3] and [4] cannot broadcast"), "msg: %s", nt_error_msg());
  /* 0-d and empty */
  nt_Tensor *z = nt_scalar(3, NT_F32), *e = nt_empty(SHAPE(0, 3), 2, NT_F32, NT_CPU);
  CHECKV(nt_mul(a, z), SHAPE(2, 3), 3, 6, 9, 12, 15, 18);
  nt_Tensor *ee = nt_add(e, b);
  EXPECT(ee && ee->numel == 0 && ee->shape[1] == 3, "empty broadcast");
  nt_release(a); nt_release(b); nt_release(c); nt_release(bad); nt_release(z); nt_release(e); nt_release(ee);
  return true;
}

TEST(integer_semantics) {
  nt_Tensor *a = MK(NT_I64, SHAPE(4), 7, -7, 7, -7), *b = MK(NT_I64, SHAPE(4), 2, 2, -2, -2);
  CHECKV(nt_floordiv(a, b), SHAPE(4), 3, -4, -4, 3);
  CHECKV(nt_mod(a, b), SHAPE(4), 1, 1, -1, -1);
  nt_Tensor *d = nt_div(a, b);
  EXPECT(d->dtype == NT_F32, "int/int → f32");
  CHECKV(d, SHAPE(4), 3.5, -3.5, -3.5, 3.5);
  nt_Tensor *s = nt_add(a, b);
  EXPECT(s->dtype == NT_I64, "int+int stays int");
  nt_release(s);
  nt_Tensor *f = nt_binary_scalar(NT_OP_MUL, a, 0.5, false);
  EXPECT(f->dtype == NT_F32, "int tensor * 0.5 → f32");
  CHECKV(f, SHAPE(4), 3.5, -3.5, 3.5, -3.5);
  nt_Tensor *i = nt_binary_scalar(NT_OP_MUL, a, 2, false);
  EXPECT(i->dtype == NT_I64, "int * 2 stays int");
  nt_release(i);
  nt_Tensor *fa = MK(NT_F64, SHAPE(4), 7, -7, 7.5, -7.5), *fb = MK(NT_F64, SHAPE(4), 2, 2, -2, -2);
  CHECKV(nt_mod(fa, fb), SHAPE(4), 1, 1, -0.5, -1.5);
  CHECKV(nt_floordiv(fa, fb), SHAPE(4), 3, -4, -4, 3);
  nt_Tensor *z = MK(NT_I64, SHAPE(4), 1, 0, 1, 1);
  EXPECT(!nt_floordiv(a, z) && err_has("integer division by zero"), "int /0: %s", nt_error_msg());
  nt_Tensor *t = MK(NT_BOOL, SHAPE(2), 1, 0), *u = MK(NT_BOOL, SHAPE(2), 1, 1);
  nt_Tensor *bb = nt_add(t, u);       /* torch: bool + bool is a logical or, bool * bool an and */
  EXPECT(bb->dtype == NT_BOOL, "bool+bool → bool, got %s", nt_dtype_name(bb->dtype));
  CHECKV(bb, SHAPE(2), 1, 1);
  nt_Tensor *t4 = MK(NT_BOOL, SHAPE(4), 1, 1, 0, 0), *u4 = MK(NT_BOOL, SHAPE(4), 1, 0, 1, 0);
  nt_Tensor *bm = nt_mul(t4, u4), *ba = nt_add(t4, u4);
  EXPECT(bm->dtype == NT_BOOL && ba->dtype == NT_BOOL, "bool*bool, bool+bool dtypes");
  CHECKV(bm, SHAPE(4), 1, 0, 0, 0);
  CHECKV(ba, SHAPE(4), 1, 1, 1, 0);
  nt_Tensor *bx = nt_maximum(t4, u4);
  EXPECT(bx && bx->dtype == NT_BOOL, "maximum(bool, bool) → bool: %s", nt_error_msg());
  CHECKV(bx, SHAPE(4), 1, 1, 1, 0);
  nt_Tensor *bs = nt_sub(t4, u4);     /* other arithmetic still computes in i64 */
  EXPECT(bs->dtype == NT_I64, "bool-bool → i64");
  CHECKV(bs, SHAPE(4), 0, 1, -1, 0);
  nt_release(t4); nt_release(u4);
  nt_Tensor *i32 = MK(NT_I32, SHAPE(2), 1, 2), *ff = MK(NT_F32, SHAPE(2), 0.5, 0.5);
  nt_Tensor *m = nt_add(i32, ff);
  EXPECT(m->dtype == NT_F32, "i32+f32 → f32");
  CHECKV(m, SHAPE(2), 1.5, 2.5);
  CHECKV(nt_pow(a, b), SHAPE(4), 49, 49, 0, 0);
  EXPECT(!nt_binary_scalar_ex(NT_OP_POW, a, -1, NT_SCALAR_INT) && err_has("integers to negative integer powers"),
         "int ** -1: %s", nt_error_msg());
  EXPECT(!nt_binary_scalar(NT_OP_POW, a, -2, false) && err_has("negative integer powers"), "int ** -2");
  CHECKV(nt_binary_scalar_ex(NT_OP_POW, a, 2, NT_SCALAR_INT), SHAPE(4), 49, 49, 49, 49);
  {
    nt_Tensor *f = nt_binary_scalar_ex(NT_OP_POW, a, -1, NT_SCALAR_FLOAT);   /* int ** -1.0 → f32 */
    EXPECT(f && f->dtype == NT_F32, "int ** -1.0 is f32");
    CHECKV(f, SHAPE(4), 1 / 7., -1 / 7., 1 / 7., -1 / 7.);
  }
  CHECKV(nt_binary_scalar_ex(NT_OP_POW, a, -1, NT_SCALAR_INT | NT_SCALAR_FIRST), SHAPE(4), -1, -1, -1, -1);   /* (-1) ** int */
  nt_release(a); nt_release(b); nt_release(fa); nt_release(fb); nt_release(z); nt_release(t); nt_release(u);
  nt_release(i32); nt_release(ff);
  return true;
}

TEST(comparisons_logical) {
  nt_Tensor *a = MK(NT_F32, SHAPE(4), 1, 2, NAN, 4), *b = MK(NT_I32, SHAPE(4), 1, 3, 3, 3);
  nt_Tensor *eq = nt_eq(a, b);
  EXPECT(eq->dtype == NT_BOOL, "eq → bool");
  CHECKV(eq, SHAPE(4), 1, 0, 0, 0);
  CHECKV(nt_ne(a, b), SHAPE(4), 0, 1, 1, 1);
  CHECKV(nt_lt(a, b), SHAPE(4), 0, 1, 0, 0);
  CHECKV(nt_le(a, b), SHAPE(4), 1, 1, 0, 0);
  CHECKV(nt_gt(a, b), SHAPE(4), 0, 0, 0, 1);
  CHECKV(nt_ge(a, b), SHAPE(4), 1, 0, 0, 1);
  CHECKV(nt_binary_scalar(NT_OP_GT, a, 1.5, false), SHAPE(4), 0, 1, 0, 1);
  nt_Tensor *x = MK(NT_BOOL, SHAPE(4), 1, 1, 0, 0), *y = MK(NT_BOOL, SHAPE(4), 1, 0, 1, 0);
  CHECKV(nt_logical_and(x, y), SHAPE(4), 1, 0, 0, 0);
  CHECKV(nt_logical_or(x, y), SHAPE(4), 1, 1, 1, 0);
  CHECKV(nt_logical_not(a), SHAPE(4), 0, 0, 0, 0);
  CHECKV(nt_maximum(a, b), SHAPE(4), 1, 3, NAN, 4);
  CHECKV(nt_minimum(a, b), SHAPE(4), 1, 2, NAN, 3);
  nt_release(a); nt_release(b); nt_release(x); nt_release(y);
  return true;
}

TEST(unary_values) {
  nt_Tensor *a = MK(NT_F64, SHAPE(4), -2, -0.5, 0.5, 2);
  CHECKV(nt_neg(a), SHAPE(4), 2, 0.5, -0.5, -2);
  CHECKV(nt_abs(a), SHAPE(4), 2, 0.5, 0.5, 2);
  CHECKV(nt_sign(a), SHAPE(4), -1, -1, 1, 1);
  CHECKV(nt_exp(a), SHAPE(4), exp(-2), exp(-0.5), exp(0.5), exp(2));
  CHECKV(nt_tanh(a), SHAPE(4), tanh(-2), tanh(-0.5), tanh(0.5), tanh(2));
  CHECKV(nt_sigmoid(a), SHAPE(4), 1 / (1 + exp(2)), 1 / (1 + exp(0.5)), 1 / (1 + exp(-0.5)), 1 / (1 + exp(-2)));
  CHECKV(nt_relu(a), SHAPE(4), 0, 0, 0.5, 2);
  CHECKV(nt_gelu(a, false), SHAPE(4), -0.04550026389635842, -0.15426876936299347, 0.34573123063700653, 1.9544997361036416);
  CHECKV(nt_gelu(a, true), SHAPE(4), -0.04540230591222, -0.15428599017, 0.34571400982, 1.95459769409);
  CHECKV(nt_silu(a), SHAPE(4), -2 / (1 + exp(2)), -0.5 / (1 + exp(0.5)), 0.5 / (1 + exp(-0.5)), 2 / (1 + exp(-2)));
  CHECKV(nt_sin(a), SHAPE(4), sin(-2), sin(-0.5), sin(0.5), sin(2));
  CHECKV(nt_cos(a), SHAPE(4), cos(-2), cos(-0.5), cos(0.5), cos(2));
  CHECKV(nt_clamp(a, -1, 1), SHAPE(4), -1, -0.5, 0.5, 1);
  CHECKV(nt_clamp(a, NAN, 0), SHAPE(4), -2, -0.5, 0, 0);
  {  /* NaN propagates through relu and clamp (torch); relu's gradient passes at NaN */
    nt_Tensor *xn = MK(NT_F32, SHAPE(4), NAN, -1, 2, 0);
    nt_set_requires_grad(xn, true);
    nt_Tensor *r = nt_relu(xn), *sr = r ? nt_sum(r, NULL, 0, false) : NULL;
    CHECKV(nt_retain(r), SHAPE(4), NAN, 0, 2, 0);
    CHECKV(nt_clamp(xn, 0.5, 1.5), SHAPE(4), NAN, 0.5, 1.5, 0.5);
    nt_Tensor *ci = MK(NT_I64, SHAPE(3), 1, 5, 9);   /* int tensor, float bound → f32 (torch) */
    nt_Tensor *c1 = nt_clamp(ci, 2.5, NAN), *c2 = nt_clamp(ci, 2, 6), *c3 = nt_clamp(ci, NAN, 7.5);
    EXPECT(c1 && c1->dtype == NT_F32 && c2 && c2->dtype == NT_I64 && c3 && c3->dtype == NT_F32, "clamp dtypes");
    CHECKV(c1, SHAPE(3), 2.5, 5, 9);
    CHECKV(c2, SHAPE(3), 2, 5, 6);
    CHECKV(c3, SHAPE(3), 1, 5, 7.5);
    nt_release(ci);
    nt_Tensor *ii = MK(NT_I64, SHAPE(3), -3, 0, 4), *ri = nt_relu(ii);
    nt_release(ii);
    EXPECT(ri && ri->dtype == NT_I64, "relu(int) keeps i64");
    CHECKV(ri, SHAPE(3), 0, 0, 4);
    OK(sr && nt_backward(sr, NULL, false) == 0);
    CHECKV(nt_retain(nt_grad(xn)), SHAPE(4), 1, 0, 1, 0);
    nt_release(r); nt_release(sr); nt_release(xn);
  }
  nt_Tensor *p = MK(NT_F32, SHAPE(3), 1, 4, 0.25);
  CHECKV(nt_log(p), SHAPE(3), 0, log(4), log(0.25));
  CHECKV(nt_log1p(p), SHAPE(3), log(2), log(5), log(1.25));
  CHECKV(nt_sqrt(p), SHAPE(3), 1, 2, 0.5);
  CHECKV(nt_rsqrt(p), SHAPE(3), 1, 0.5, 2);
  nt_Tensor *i = MK(NT_I64, SHAPE(3), -3, 0, 4);
  nt_Tensor *ie = nt_exp(i);
  EXPECT(ie->dtype == NT_F32, "exp(int) → f32");
  nt_release(ie);
  nt_Tensor *ia = nt_abs(i);
  EXPECT(ia->dtype == NT_I64, "abs(int) stays int");
  CHECKV(ia, SHAPE(3), 3, 0, 4);
  CHECKV(nt_clamp(i, -1, 2), SHAPE(3), -1, 0, 2);
  /* strided input */
  nt_Tensor *m = MK(NT_F32, SHAPE(2, 2), 1, 2, 3, 4), *mt = nt_T(m);
  CHECKV(nt_neg(mt), SHAPE(2, 2), -1, -3, -2, -4);
  nt_release(a); nt_release(p); nt_release(i); nt_release(m); nt_release(mt);
  return true;
}

TEST(where_op) {
  nt_Tensor *c = MK(NT_BOOL, SHAPE(2, 1), 1, 0), *a = MK(NT_F32, SHAPE(3), 1, 2, 3), *b = nt_scalar(-1, NT_F64);
  nt_Tensor *w = nt_where(c, a, b);
  EXPECT(w->dtype == NT_F32, "where: a 0-d f64 does not widen an f32 tensor (torch)");
  CHECKV(w, SHAPE(2, 3), 1, 2, 3, -1, -1, -1);
  nt_release(c); nt_release(a); nt_release(b);
  return true;
}

TEST(reductions) {
  nt_Tensor *a = MK(NT_F32, SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  CHECK0(nt_sum(a, NULL, 0, false), 21);
  CHECKV(nt_sum(a, (int[]){ 0 }, 1, false), SHAPE(3), 5, 7, 9);
  CHECKV(nt_sum(a, (int[]){ -1 }, 1, true), SHAPE(2, 1), 6, 15);
  CHECKV(nt_sum(a, (int[]){ 0, 1 }, 2, true), SHAPE(1, 1), 21);
  CHECKV(nt_mean(a, (int[]){ 1 }, 1, false), SHAPE(2), 2, 5);
  CHECKV(nt_prod(a, (int[]){ 1 }, 1, false), SHAPE(2), 6, 120);
  CHECKV(nt_max(a, (int[]){ 0 }, 1, false), SHAPE(3), 4, 5, 6);
  CHECKV(nt_min(a, (int[]){ 1 }, 1, false), SHAPE(2), 1, 4);
  CHECKV(nt_argmax(a, (int[]){ 1 }, false), SHAPE(2), 2, 2);
  CHECKV(nt_argmin(a, (int[]){ 0 }, false), SHAPE(3), 0, 0, 0);
  CHECK0(nt_argmax(a, NULL, false), 5);
  CHECKV(nt_var(a, (int[]){ 1 }, 1, 1, false), SHAPE(2), 1, 1);
  CHECK0(nt_var(a, NULL, 0, 0, false), 35.0 / 12);
  CHECKV(nt_std(a, (int[]){ 0 }, 1, 1, false), SHAPE(3), sqrt(4.5), sqrt(4.5), sqrt(4.5));
  CHECKV(nt_logsumexp(a, (int[]){ 1 }, 1, false), SHAPE(2), log(exp(1) + exp(2) + exp(3)), log(exp(4) + exp(5) + exp(6)));
  nt_Tensor *big = MK(NT_F32, SHAPE(2), 1000, 1000);
  CHECK0(nt_logsumexp(big, NULL, 0, false), 1000 + log(2));
  nt_Tensor *t = nt_T(a);   /* strided: outer strategy */
  CHECKV(nt_sum(t, (int[]){ 1 }, 1, false), SHAPE(3), 5, 7, 9);
  CHECKV(nt_max(t, (int[]){ 0 }, 1, false), SHAPE(2), 3, 6);
  CHECKV(nt_argmax(t, (int[]){ 1 }, false), SHAPE(3), 1, 1, 1);
  nt_Tensor *i = MK(NT_I32, SHAPE(3), 1, 2, 3);
  nt_Tensor *si = nt_sum(i, NULL, 0, false);
  EXPECT(si->dtype == NT_I64, "sum(i32) → i64");
  CHECK0(si, 6);
  nt_Tensor *mi = nt_mean(i, NULL, 0, false);
  EXPECT(mi->dtype == NT_F32, "mean(int) → f32");
  CHECK0(mi, 2);
  nt_Tensor *bl = MK(NT_BOOL, SHAPE(2, 2), 1, 0, 1, 1);
  CHECKV(nt_any(bl, (int[]){ 1 }, 1, false), SHAPE(2), 1, 1);
  CHECKV(nt_all(bl, (int[]){ 1 }, 1, false), SHAPE(2), 0, 1);
  CHECK0(nt_sum(bl, NULL, 0, false), 3);
  nt_Tensor *n = MK(NT_F32, SHAPE(3), 1, NAN, 3);
  CHECK0(nt_max(n, NULL, 0, false), NAN);
  CHECK0(nt_argmax(n, NULL, false), 1);
  nt_Tensor *e = nt_empty(SHAPE(0, 2), 2, NT_F32, NT_CPU);
  CHECKV(nt_sum(e, (int[]){ 0 }, 1, false), SHAPE(2), 0, 0);
  EXPECT(!nt_max(e, (int[]){ 0 }, 1, false) && err_has("empty"), "max of empty: %s", nt_error_msg());
  EXPECT(!nt_sum(a, (int[]){ 2 }, 1, false) && err_has("axis 2 is out of range"), "bad axis: %s", nt_error_msg());
  EXPECT(!nt_sum(a, (int[]){ 1, -1 }, 2, false) && err_has("more than once"), "dup axis");
  nt_release(a); nt_release(big); nt_release(t); nt_release(i); nt_release(bl); nt_release(n); nt_release(e);
  return true;
}

TEST(reduce_large) {
  /* exercises the parallel and accumulate-in-double paths */
  int64_t n = 1 << 20;
  nt_Tensor *o = nt_ones(&n, 1, NT_F32, NT_CPU);
  CHECK0(nt_sum(o, NULL, 0, false), (double)n);
  nt_Tensor *m = nt_reshape(o, SHAPE(1024, 1024), 2);
  nt_Tensor *s0 = nt_sum(m, (int[]){ 0 }, 1, false), *s1 = nt_sum(m, (int[]){ 1 }, 1, false);
  CHECK0(nt_max(s0, NULL, 0, false), 1024);
  CHECK0(nt_min(s1, NULL, 0, false), 1024);
  nt_Tensor *a = nt_arange(0, (double)n, 1, NT_F64), *sq = nt_mul(a, a);
  CHECK0(nt_sum(sq, NULL, 0, false), (double)(n - 1) * n * (2.0 * n - 1) / 6);
  nt_release(o); nt_release(m); nt_release(s0); nt_release(s1); nt_release(a); nt_release(sq);
  return true;
}

TEST(matmul_values) {
  nt_Tensor *a = MK(NT_F32, SHAPE(2, 3), 1, 2, 3, 4, 5, 6), *b = MK(NT_F32, SHAPE(3, 2), 7, 8, 9, 10, 11, 12);
  CHECKV(nt_matmul(a, b), SHAPE(2, 2), 58, 64, 139, 154);
  nt_Tensor *at = nt_T(a), *bt = nt_T(b);   /* transposed operands: BLAS Trans flags */
  CHECKV(nt_matmul(bt, at), SHAPE(2, 2), 58, 139, 64, 154);
  CHECKV(nt_matmul(at, a), SHAPE(3, 3), 17, 22, 27, 22, 29, 36, 27, 36, 45);
  nt_Tensor *v = MK(NT_F32, SHAPE(3), 1, 0, -1);
  CHECKV(nt_matmul(a, v), SHAPE(2), -2, -2);
  CHECKV(nt_matmul(v, b), SHAPE(2), -4, -4);
  CHECK0(nt_matmul(v, v), 2);
  CHECK0(nt_dot(v, v), 2);
  CHECKV(nt_outer(v, v), SHAPE(3, 3), 1, 0, -1, 0, 0, 0, -1, 0, 1);
  nt_Tensor *ba = nt_stack((nt_Tensor *[]){ a, a }, 2, 0);      /* [2,2,3] @ [3,2] */
  CHECKV(nt_matmul(ba, b), SHAPE(2, 2, 2), 58, 64, 139, 154, 58, 64, 139, 154);
  nt_Tensor *b4 = nt_reshape(ba, SHAPE(2, 1, 2, 3), 4), *bb = nt_stack((nt_Tensor *[]){ b, b, b }, 3, 0);   /* [2,1,2,3]@[3,3,2] */
  nt_Tensor *r = nt_matmul(b4, bb);
  EXPECT(r && r->ndim == 4 && r->shape[0] == 2 && r->shape[1] == 3, "batch broadcast shape");
  nt_release(r);
  nt_Tensor *ia = MK(NT_I64, SHAPE(2, 2), 1, 2, 3, 4);
  nt_Tensor *im = nt_matmul(ia, ia);
  EXPECT(im->dtype == NT_I64, "int matmul");
  CHECKV(im, SHAPE(2, 2), 7, 10, 15, 22);
  nt_Tensor *h = nt_to_dtype(a, NT_F16), *hb = nt_to_dtype(b, NT_F16), *hm = nt_matmul(h, hb);
  EXPECT(hm->dtype == NT_F16, "f16 matmul dtype");
  CHECKV(hm, SHAPE(2, 2), 58, 64, 139, 154);
  nt_Tensor *d = nt_to_dtype(a, NT_F64), *dm = nt_matmul(d, b);
  EXPECT(dm->dtype == NT_F64, "f64 @ f32 → f64");
  CHECKV(dm, SHAPE(2, 2), 58, 64, 139, 154);
  nt_Tensor *bad = nt_zeros(SHAPE(4, 5), 2, NT_F32, NT_CPU);
  EXPECT(!nt_matmul(a, bad) && err_has("matmul: shapes [2, 3] and [4, 5] do not match (3 != 4)"), "msg: %s", nt_error_msg());
  {  /* batch mismatch: the message shows both operands' full shapes */
    nt_Tensor *x = nt_ones(SHAPE(2, 3, 4), 3, NT_F32, NT_CPU), *y = nt_ones(SHAPE(3, 4, 5), 3, NT_F32, NT_CPU);
    nt_Tensor *xy = nt_matmul(x, y);
    bool ok = !xy && err_has("matmul: shapes [2, 3, 4] and [3, 4, 5]: batch dimensions [2] and [3] cannot broadcast");
    nt_release(xy); nt_release(x); nt_release(y);
    EXPECT(ok, "batch msg: %s", nt_error_msg());
  }
  /* expanded (stride 0) operand inside the matrix gets packed */
  nt_Tensor *one = MK(NT_F32, SHAPE(1, 3), 1, 1, 1), *ex = nt_expand(one, SHAPE(2, 3), 2);
  CHECKV(nt_matmul(ex, b), SHAPE(2, 2), 27, 30, 27, 30);
  nt_release(a); nt_release(b); nt_release(at); nt_release(bt); nt_release(v); nt_release(ba); nt_release(b4);
  nt_release(bb); nt_release(ia); nt_release(h); nt_release(hb); nt_release(d); nt_release(bad); nt_release(one); nt_release(ex);
  return true;
}

TEST(matmul_large_vs_naive) {
  nt_seed(1);
  int64_t M = 37, K = 53, N = 29;
  nt_Tensor *a = nt_randn(SHAPE(M, K), 2, NT_F64, NT_CPU), *b = nt_randn(SHAPE(N, K), 2, NT_F64, NT_CPU);
  nt_Tensor *bt = nt_T(b), *c = nt_matmul(a, bt);
  double *ha = host(a), *hb = host(b), *hc = host(c), maxerr = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += ha[i * K + k] * hb[j * K + k];
      maxerr = fmax(maxerr, fabs(s - hc[i * N + j]));
    }
  free(ha); free(hb); free(hc);
  nt_release(a); nt_release(b); nt_release(bt); nt_release(c);
  EXPECT(maxerr < 1e-10, "max error %g", maxerr);
  return true;
}

TEST(shape_ops) {
  nt_Tensor *a = MK(NT_F32, SHAPE(2, 2), 1, 2, 3, 4), *b = MK(NT_I64, SHAPE(2, 1), 5, 6);
  nt_Tensor *c = nt_concat((nt_Tensor *[]){ a, b }, 2, 1);
  EXPECT(c->dtype == NT_F32, "concat promotes");
  CHECKV(c, SHAPE(2, 3), 1, 2, 5, 3, 4, 6);
  CHECKV(nt_concat((nt_Tensor *[]){ a, a }, 2, 0), SHAPE(4, 2), 1, 2, 3, 4, 1, 2, 3, 4);
  EXPECT(!nt_concat((nt_Tensor *[]){ a, b }, 2, 0) && err_has("do not match"), "concat mismatch");
  CHECKV(nt_stack((nt_Tensor *[]){ a, a }, 2, 2), SHAPE(2, 2, 2), 1, 1, 2, 2, 3, 3, 4, 4);
  nt_Tensor *r = nt_arange(0, 7, 1, NT_F32), *parts[4];
  EXPECT(nt_chunk(r, 3, 0, parts) == 3, "chunk count");
  CHECKV(parts[0], SHAPE(3), 0, 1, 2);
  CHECKV(parts[1], SHAPE(3), 3, 4, 5);
  CHECKV(parts[2], SHAPE(1), 6);
  EXPECT(nt_split(r, SHAPE(2, 5), 2, 0, parts) == 2, "split");
  CHECKV(parts[0], SHAPE(2), 0, 1);
  CHECKV(parts[1], SHAPE(5), 2, 3, 4, 5, 6);
  EXPECT(nt_split(r, SHAPE(2, 2), 2, 0, parts) == -1 && err_has("add up to 4"), "split sizes");
  CHECKV(nt_flip(a, (int[]){ 0 }, 1), SHAPE(2, 2), 3, 4, 1, 2);
  CHECKV(nt_flip(a, (int[]){ 0, 1 }, 2), SHAPE(2, 2), 4, 3, 2, 1);
  CHECKV(nt_repeat(a, SHAPE(1, 2), 2), SHAPE(2, 4), 1, 2, 1, 2, 3, 4, 3, 4);
  CHECKV(nt_repeat(b, SHAPE(2, 1, 2), 3), SHAPE(2, 2, 2), 5, 5, 6, 6, 5, 5, 6, 6);
  nt_Tensor *m = nt_ones(SHAPE(3, 3), 2, NT_F32, NT_CPU);
  CHECKV(nt_tril(m, 0), SHAPE(3, 3), 1, 0, 0, 1, 1, 0, 1, 1, 1);
  CHECKV(nt_triu(m, 1), SHAPE(3, 3), 0, 1, 1, 0, 0, 1, 0, 0, 0);
  CHECKV(nt_tril(m, -1), SHAPE(3, 3), 0, 0, 0, 1, 0, 0, 1, 1, 0);
  nt_release(a); nt_release(b); nt_release(r); nt_release(m);
  return true;
}

TEST(creation) {
  CHECKV(nt_arange(0, 1, 0.25, NT_F32), SHAPE(4), 0, 0.25, 0.5, 0.75);
  CHECKV(nt_arange(5, 0, -2, NT_I64), SHAPE(3), 5, 3, 1);
  CHECKV(nt_linspace(0, 1, 5, NT_F64), SHAPE(5), 0, 0.25, 0.5, 0.75, 1);
  CHECKV(nt_eye(2, 3, NT_I32), SHAPE(2, 3), 1, 0, 0, 0, 1, 0);
  CHECKV(nt_full(SHAPE(2), 1, 7.5, NT_F16, NT_CPU), SHAPE(2), 7.5, 7.5);
  CHECKV(nt_zeros(SHAPE(2), 1, NT_BF16, NT_CPU), SHAPE(2), 0, 0);
  CHECKV(nt_ones(SHAPE(1, 2), 2, NT_BOOL, NT_CPU), SHAPE(1, 2), 1, 1);
  int32_t raw[3] = { 4, 5, 6 };
  nt_Tensor *f = nt_from_buffer(raw, NT_I32, SHAPE(3), 1, NT_F64);
  double v;
  OK(nt_get(f, SHAPE(-1), &v) == 0);
  EXPECT(v == 6, "get[-1]");
  EXPECT(nt_item(f, &v) == -1 && err_has("only one-element tensors"), "item of 3 elems");
  nt_Tensor *s = nt_scalar(3.25, NT_F32);
  OK(nt_item(s, &v) == 0);
  EXPECT(v == 3.25 && s->ndim == 0, "scalar item");
  int64_t out[3];
  OK(nt_to_host(f, out, NT_I64) == 0);
  EXPECT(out[0] == 4 && out[2] == 6, "to_host i64");
  nt_Tensor *zl = nt_zeros_like(f);
  EXPECT(zl->dtype == NT_F64 && zl->numel == 3, "zeros_like");
  EXPECT(!nt_empty(SHAPE(-1), 1, NT_F32, NT_CPU) && err_has("negative dimension"), "negative dim");
  EXPECT(!nt_arange(0, 1, 0, NT_F32) && err_has("step"), "arange step 0");
  nt_release(f); nt_release(s); nt_release(zl);
  return true;
}

TEST(out_of_memory) {
  /* 512 TiB of f32: past x86-64's 128 TiB of user address space, so no
  ** kernel can grant it, even one that overcommits (64 TiB succeeded on the
  ** GPU machine, vm.overcommit_memory=1) */
  int64_t huge[2] = { (int64_t)1 << 24, (int64_t)1 << 23 };
  nt_Tensor *t = nt_empty(huge, 2, NT_F32, NT_CPU);
  EXPECT(!t && err_has("out of memory allocating 562949953421312 bytes"), "got %p: %s", (void *)t, nt_error_msg());
  return true;
}

/* Shapes whose element count (or whose strides) overflow int64 are errors
** naming the op and the shape, in every constructor and view (was: the count
** wrapped to 0 or negative and tolist read past the buffer; UBSan flagged the
** stride products in nt_empty, slicing and repeat). */
TEST(shape_overflow) {
  const int64_t B = (int64_t)1 << 40;
  nt_Tensor *one = nt_ones(SHAPE(1), 1, NT_F32, NT_CPU), *r;
  OK(one);
  r = nt_empty(SHAPE(B, B, 16), 3, NT_F32, NT_CPU);
  EXPECT(!r && err_has("shape [1099511627776, 1099511627776, 16] has too many elements"), "empty: %s", nt_error_msg());
  r = nt_zeros(SHAPE(0, B, B), 3, NT_F32, NT_CPU);   /* no element, but the strides would overflow */
  EXPECT(!r && err_has("shape [0, 1099511627776, 1099511627776] has too many elements"), "zeros with a 0: %s", nt_error_msg());
  r = nt_expand(one, SHAPE(B, B, 16), 3);
  EXPECT(!r && err_has("expand: shape [1099511627776, 1099511627776, 16] has too many"), "expand: %s", nt_error_msg());
  r = nt_expand(one, SHAPE(0, B, B), 3);
  EXPECT(!r && err_has("expand: shape [0, "), "expand with a 0: %s", nt_error_msg());
  r = nt_reshape(one, SHAPE(-1, 0, B, B), 4);
  EXPECT(!r && err_has("reshape: shape [1, 0, 1099511627776, 1099511627776] has too many"), "reshape: %s", nt_error_msg());
  r = nt_repeat(one, SHAPE(B, B), 2);
  EXPECT(!r && err_has("repeat: repeating shape [1] by [1099511627776, 1099511627776]"), "repeat: %s", nt_error_msg());
  nt_Tensor *row = nt_expand(one, SHAPE(1, B), 2), *col = nt_expand(one, SHAPE(B, 1), 2);
  OK(row && col);
  r = nt_add(row, col);   /* broadcasting [1, B] with [B, 1]: fine, [B, B] too big to allocate */
  EXPECT(!r, "add [B,B] succeeded");
  nt_Tensor *e1 = nt_expand(one, SHAPE(1, 1, B), 3), *e2 = nt_zeros(SHAPE(B, 0, 1), 3, NT_F32, NT_CPU);
  OK(e1 && e2);
  r = nt_add(e1, e2);     /* [1, 1, B] + [B, 0, 1] -> [B, 0, B]: empty, strides overflow */
  EXPECT(!r && err_has("add: shape [1099511627776, 0, 1099511627776] has too many"), "add broadcast: %s", nt_error_msg());
  nt_Tensor *big[2] = { nt_expand(one, SHAPE(0, NT_MAX_NUMEL), 2), NULL };
  OK(big[0]);
  big[1] = big[0];
  r = nt_concat(big, 2, 1);
  EXPECT(!r && err_has("too many elements"), "concat: %s", nt_error_msg());
  nt_Tensor *parts[2];
  nt_Tensor *ten = nt_arange(0, 10, 1, NT_F64);
  OK(ten);
  EXPECT(nt_split(ten, SHAPE(INT64_MAX, INT64_MAX), 2, 0, parts) < 0 && err_has("split: sizes add up to more than"),
         "split: %s", nt_error_msg());
  /* a step beyond the axis keeps one element, with a sane stride */
  r = nt_slice(ten, 0, 3, 10, INT64_MAX);
  OK(r);
  double v = -1;
  EXPECT(r->numel == 1 && nt_item(r, &v) == 0 && v == 3, "slice huge step: numel %lld value %g", (long long)r->numel, v);
  nt_release(r);
  r = nt_narrow(ten, 0, 5, INT64_MAX);      /* start + length overflows */
  EXPECT(!r && err_has("narrow: 9223372036854775807 elements from 5 are out of range for axis 0 with size 10"),
         "narrow: %s", nt_error_msg());
  r = nt_randint(INT64_MIN, INT64_MAX, SHAPE(2), 1, NT_I64, NT_CPU);   /* high - low overflows */
  EXPECT(!r && err_has("randint: range high - low must be at most 2^32"), "randint: %s", nt_error_msg());
  int64_t n = -7;
  EXPECT(nt_check_shape("op", SHAPE(3, -2), 2, &n) < 0 && err_has("op: negative dimension -2 in shape [3, -2]") && n == -7,
         "negative: %s", nt_error_msg());
  EXPECT(nt_check_shape("op", SHAPE(NT_MAX_NUMEL, 0), 2, &n) == 0 && n == 0, "max with a zero: %lld", (long long)n);
  EXPECT(nt_check_shape("op", SHAPE(NT_MAX_NUMEL + 1), 1, &n) < 0, "max + 1 accepted");
  nt_release(ten); nt_release(big[0]); nt_release(e1); nt_release(e2); nt_release(row); nt_release(col); nt_release(one);
  return true;
}

/* Dropping the last tensor of a very long autograd chain frees the graph
** without recursing once per node (was: a stack overflow near 100k nodes). */
TEST(long_chain_release) {
  nt_Tensor *x = nt_ones(SHAPE(1), 1, NT_F32, NT_CPU), *one = nt_ones(SHAPE(1), 1, NT_F32, NT_CPU);
  OK(x && one);
  OK(nt_set_requires_grad(x, true) == 0);
  nt_Tensor *y = nt_retain(x);
  const int n = 400000;
  for (int i = 0; i < n; i++) {
    nt_Tensor *z = nt_add(y, one);
    nt_release(y);
    OK(z);
    y = z;
  }
  double v = 0;
  OK(nt_item(y, &v) == 0);
  EXPECT(v == n + 1, "value %g", v);
  EXPECT(nt_grad_fn_name(y) != NULL, "no graph recorded");
  nt_release(y);                 /* frees 400k nodes */
  nt_release(x); nt_release(one);
  return true;
}

TEST(device_errors) {
  nt_Tensor *a = nt_ones(SHAPE(2), 1, NT_F32, NT_CPU);
  nt_Tensor *c = nt_ones(SHAPE(2), 1, NT_F32, NT_CUDA);
  if (c) {
    nt_Tensor *s = nt_add(a, c);
    EXPECT(!s && err_has("expected all tensors on the same device, got cpu and cuda"), "mixed devices: %s", nt_error_msg());
  } else EXPECT(err_has("CUDA is not available: "), "cuda msg: %s", nt_error_msg());   /* tensor/tdevice.c */
  /* a fake device tensor header exercises the mixed-device check without CUDA */
  nt_Tensor *fake = nt_view_of(a);
  fake->device = NT_CUDA;
  nt_Tensor *s = nt_add(a, fake);
  EXPECT(!s && err_has("expected all tensors on the same device, got cpu and cuda"), "mixed: %s", nt_error_msg());
  EXPECT(!nt_matmul(a, fake) && err_has("same device"), "matmul mixed");
  fake->device = NT_CPU;
  nt_release(fake); nt_release(a); nt_release(c);
  return true;
}

TEST(op_table) {
  int id = nt_op_register("test_custom_op");
  EXPECT(id >= NT_OP_BUILTIN_COUNT && nt_op_register("test_custom_op") == id, "custom id");
  EXPECT(nt_op_register("add") == NT_OP_ADD, "builtin lookup");
  EXPECT(!strcmp(nt_op_name(id), "test_custom_op"), "name");
  nt_KernelArgs a = { .op = id };
  EXPECT(nt_dispatch(id, NT_CPU, &a) == -1 && err_has("test_custom_op: not implemented for device cpu"), "missing kernel: %s", nt_error_msg());
  return true;
}

/* tensor.c's small-block cache: blocks freed by one tensor and handed to the
** next never alias a live tensor (each keeps its own values through many
** frees and reuses of every size class), views keep a freed tensor's block,
** and small f32/f64 ops (telem.c's direct path) compute what the general
** path does (a requires_grad operand takes that one). */
TEST(small_block_cache) {
  enum { N = 600 };
  nt_Tensor *live[N] = {0};
  unsigned seed = 12345;
  for (int round = 0; round < 4000; round++) {
    seed = seed * 1103515245u + 12345u;
    int k = (int)((seed >> 8) % N);
    if (live[k]) {   /* check, then free */
      float *p = (float *)nt_data_ptr(live[k]);
      for (int64_t i = 0; i < live[k]->numel; i++)
        EXPECT(p[i] == (float)(k * 1000 + i), "tensor %d element %lld is %g: its block was reused while live", k, (long long)i, p[i]);
      nt_release(live[k]); live[k] = NULL;
    } else {
      int64_t n = (int64_t)((seed >> 16) % 129);   /* 0..512 bytes: every class */
      OK(live[k] = nt_empty(SHAPE(n), 1, NT_F32, NT_CPU));
      float *p = (float *)nt_data_ptr(live[k]);
      for (int64_t i = 0; i < n; i++) p[i] = (float)(k * 1000 + i);
    }
  }
  for (int k = 0; k < N; k++) nt_release(live[k]);
  /* a view outlives its base: the block stays until the view goes */
  nt_Tensor *a = MK(NT_F32, SHAPE(4), 1, 2, 3, 4), *v = nt_view_of(a);
  nt_release(a);
  nt_Tensor *b = MK(NT_F32, SHAPE(4), 9, 9, 9, 9);
  CHECKV(v, SHAPE(4), 1, 2, 3, 4);
  nt_release(b);
  /* small ops: direct path == general path, f32 and f64, all four ops, scalar both sides */
  for (int d = 0; d < 2; d++) {
    nt_DType dt = d ? NT_F64 : NT_F32;
    nt_Tensor *x = rnd(1, SHAPE(37), -2, 2), *y = rnd(1, SHAPE(37), 0.5, 2), *xc, *yc, *xg, *yg, *r1, *r2;
    OK(xc = nt_to_dtype(x, dt)); OK(yc = nt_to_dtype(y, dt)); OK(xg = nt_clone(xc)); OK(yg = nt_clone(yc));
    nt_set_requires_grad(xg, true); nt_set_requires_grad(yg, true);   /* these take the general path */
    for (int op = NT_OP_ADD; op <= NT_OP_DIV; op++) {
      for (int form = 0; form < 3; form++) {
        OK(r1 = form == 0 ? nt_binary(op, xc, yc) : nt_binary_scalar(op, yc, 1.7, form == 2));
        OK(r2 = form == 0 ? nt_binary(op, xg, yg) : nt_binary_scalar(op, yg, 1.7, form == 2));
        EXPECT(r1->dtype == dt && r1->numel == 37 && !r1->requires_grad && r2->requires_grad, "%s dtype/shape/grad", nt_op_name(op));
        double *h1 = host(r1), *h2 = host(r2);
        bool same = !memcmp(h1, h2, 37 * sizeof(double));
        free(h1); free(h2);
        nt_release(r1); nt_release(r2);
        EXPECT(same, "%s form %d dtype %d: direct and general paths differ", nt_op_name(op), form, (int)dt);
      }
    }
    nt_release(x); nt_release(y); nt_release(xc); nt_release(yc); nt_release(xg); nt_release(yg);
  }
  return true;
}

const tt_test tt_tests_ops[] = {
  TT_ENTRY(dtype_promotion),
  TT_ENTRY(half_conversions),
  TT_ENTRY(storage_sharing),
  TT_ENTRY(slicing),
  TT_ENTRY(permute_reshape_expand),
  TT_ENTRY(assign_into_views),
  TT_ENTRY(casts),
  TT_ENTRY(elementwise_values),
  TT_ENTRY(integer_semantics),
  TT_ENTRY(comparisons_logical),
  TT_ENTRY(unary_values),
  TT_ENTRY(where_op),
  TT_ENTRY(reductions),
  TT_ENTRY(reduce_large),
  TT_ENTRY(matmul_values),
  TT_ENTRY(matmul_large_vs_naive),
  TT_ENTRY(shape_ops),
  TT_ENTRY(creation),
  TT_ENTRY(out_of_memory),
  TT_ENTRY(shape_overflow),
  TT_ENTRY(long_chain_release),
  TT_ENTRY(device_errors),
  TT_ENTRY(op_table),
  TT_ENTRY(small_block_cache),
  { NULL, NULL },
};
