/*
** top.c — the op table (op id × device → kernel), op names, nt_init, and the
** strided multi-operand iterator used by CPU kernels.
*/
#include "tinternal.h"
#include <stdlib.h>

nt_Kernel nt_kernel_table[NT_OP_TABLE_SIZE][NT_NDEVICES];

static const char *builtin_names[NT_OP_BUILTIN_COUNT] = {
  "add", "sub", "mul", "div", "pow", "floordiv", "mod", "maximum", "minimum",
  "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
  "neg", "exp", "log", "log1p", "sqrt", "rsqrt", "abs", "sign", "tanh", "sigmoid",
  "relu", "gelu", "gelu_tanh", "silu", "sin", "cos", "logical_not",
  "floor", "ceil", "round", "reciprocal", "square", "expm1", "log2", "tan", "erf", "clamp",
  "sum", "mean", "prod", "max", "min", "argmax", "argmin", "var", "std", "logsumexp", "any", "all",
  "where", "copy", "fill", "matmul", "random", "tril", "arange",
};
static char *extra_names[NT_OP_TABLE_SIZE];
static int nops = NT_OP_BUILTIN_COUNT;

const char *nt_op_name(int op) {
  if (op >= 0 && op < NT_OP_BUILTIN_COUNT) return builtin_names[op];
  if (op >= NT_OP_BUILTIN_COUNT && op < nops) return extra_names[op];
  return "?";
}

int nt_op_register(const char *name) {
  for (int i = 0; i < nops; i++)
    if (!strcmp(nt_op_name(i), name)) return i;
  if (nops >= NT_OP_TABLE_SIZE) NT_FAIL("op table is full (%d ops)", NT_OP_TABLE_SIZE);
  char *s = strdup(name);
  if (!s) { nt_error_oom(strlen(name) + 1); return -1; }
  extra_names[nops] = s;
  return nops++;
}

void nt_register_kernel(int op, nt_Device dev, nt_Kernel fn) {
  if (op >= 0 && op < NT_OP_TABLE_SIZE && (unsigned)dev < NT_NDEVICES) nt_kernel_table[op][dev] = fn;
}

void nt_init(void) {
  static bool done = false;
  if (done) return;
  done = true;
  nt_cpu_register_elem();
  nt_cpu_register_reduce();
  nt_cpu_register_matmul();
  nt_cpu_register_misc();
}

int nt_check_same_device(const char *op, int n, nt_Tensor *const *ts) {
  for (int i = 1; i < n; i++)
    if (ts[i] && ts[0] && ts[i]->device != ts[0]->device)
      NT_FAIL("%s: expected all tensors on the same device, got %s and %s", op,
              nt_device_name(ts[0]->device), nt_device_name(ts[i]->device));
  return 0;
}

int nt_move_cpu_scalars(int n, nt_Tensor **ts, nt_Tensor **moved) {
  nt_Device dev = NT_CPU;
  for (int i = 0; i < n; i++) { moved[i] = NULL; if (ts[i] && ts[i]->device != NT_CPU) dev = ts[i]->device; }
  if (dev == NT_CPU) return 0;
  for (int i = 0; i < n; i++) {
    if (!ts[i] || ts[i]->device != NT_CPU || ts[i]->ndim != 0) continue;
    if (!(moved[i] = nt_to_device(ts[i], dev))) {
      for (int k = 0; k < i; k++) nt_release(moved[k]);
      return -1;
    }
    ts[i] = moved[i];
  }
  return 0;
}

int nt_check_float(const char *op, const nt_Tensor *t) {
  if (!nt_dtype_is_float(t->dtype)) NT_FAIL("%s: expected a floating dtype, got %s", op, nt_dtype_name(t->dtype));
  return 0;
}

bool nt_all_contig(int n, nt_Tensor *const *ts) {
  for (int i = 0; i < n; i++) {
    if (!(ts[i]->flags & NT_T_CONTIG)) return false;
    if (i && ts[i]->numel != ts[0]->numel) return false;
  }
  return true;
}

/* ---- iterator ------------------------------------------------------------
** Dims are merged (coalesced) when for every operand stride[d] * shape[d+1]...
** i.e. stride[d] == stride[d+1] * shape[d+1]; size-1 dims are dropped.  The
** innermost remaining dim becomes the inner run. */
void nt_iter_init(nt_Iter *it, int nop, nt_Tensor *const *ops, const int64_t *shape_or_null) {
  const int64_t *shape = shape_or_null ? shape_or_null : ops[0]->shape;
  int ndim = ops[0]->ndim;
  it->nop = nop;
  bool empty = false;
  for (int d = 0; d < ndim; d++) if (shape[d] == 0) empty = true;
  int64_t esize[NT_ITER_MAXOP] = { 0 };
  for (int k = 0; k < nop; k++) esize[k] = (int64_t)nt_dtype_size(ops[k]->dtype);
  int n = nt_coalesce_dims(nop, ops, shape, ndim, esize, it->shape, it->stride);   /* strides in bytes */
  if (n == 0) { it->shape[0] = 1; for (int k = 0; k < nop; k++) it->stride[k][0] = 0; n = 1; }
  it->ndim = n;
  for (int d = 0; d < n; d++) it->idx[d] = 0;
  for (int k = 0; k < nop; k++) {
    it->ptr[k] = nt_base(ops[k]);
    it->istride[k] = it->stride[k][n - 1];
  }
  it->inner = empty ? 0 : it->shape[n - 1];
}

bool nt_iter_next(nt_Iter *it) {
  if (it->inner == 0) return false;
  for (int d = it->ndim - 2; d >= 0; d--) {
    if (++it->idx[d] < it->shape[d]) {
      for (int k = 0; k < it->nop; k++) it->ptr[k] += it->stride[k][d];
      return true;
    }
    for (int k = 0; k < it->nop; k++) it->ptr[k] -= it->stride[k][d] * (it->shape[d] - 1);
    it->idx[d] = 0;
  }
  return false;
}
