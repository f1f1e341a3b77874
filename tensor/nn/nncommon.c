/*
** nncommon.c — op registration for tensor/nn and the helpers every nn front
** end uses (float compute dtype, i64 index normalisation, node recording).
*/
#include "nninternal.h"
#include <pthread.h>

nn_op_ids nn_ops;

static void register_all(void) {
  nt_init();
  nn_register_softmax();
  nn_register_norm();
  nn_register_index();
  nn_register_conv();
  nn_register_sort();
  nn_register_attention();
  nn_register_linear();
  nn_register_gelu();
}

void nt_nn_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_all);
}

nt_Tensor *nn_compute_float(const char *op, nt_Tensor *x) {
  nt_nn_init();
  if (x->dtype == NT_F32 || x->dtype == NT_F64) return nt_retain(x);
  if (x->dtype == NT_F16 || x->dtype == NT_BF16) return nt_to_dtype(x, NT_F32);
  NT_FAIL_NULL("%s: expected a floating dtype, got %s", op, nt_dtype_name(x->dtype));
}

nt_Tensor *nn_cast_back(nt_Tensor *y, nt_DType dt) {
  if (!y || y->dtype == dt) return y;
  nt_Tensor *c = nt_to_dtype(y, dt);
  nt_release(y);
  return c;
}

nt_Tensor *nn_index_i64(const char *op, nt_Tensor *idx) {
  if (!nt_dtype_is_int(idx->dtype))
    NT_FAIL_NULL("%s: indices must be an integer tensor, got %s", op, nt_dtype_name(idx->dtype));
  if (idx->device != NT_CPU) return nt_to_dtype(idx, NT_I64);   /* device kernels check themselves */
  nt_Tensor *i = nt_to_dtype(idx, NT_I64);
  if (!i) return NULL;
  nt_Tensor *c = nt_contiguous(i);
  nt_release(i);
  return c;
}

nt_Tensor *nn_finish(nt_Tensor *out, const char *name, nt_BackwardFn fn, int nin, nt_Tensor *const *in,
                     nt_Node **node_out) {
  if (node_out) *node_out = NULL;
  if (!nt_needs_grad(nin, in)) return out;
  nt_Node *n = nt_record(out, name, fn, nin, in);
  if (!n) { nt_release(out); return NULL; }
  if (node_out) *node_out = n;
  return out;
}
