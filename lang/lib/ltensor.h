/*
** lib/ltensor.h — shared by the files that bind tensors into the language:
** ltensor.c (tensor values: literals, operators, indexing, fields, printing,
** serialization), ltops.c (math, shape, nn and device builtins), ltcompose.c,
** ltree.c (pytrees), ltgrad.c (autograd), loptim.c (optimizers) and ltio.c
** (tensor files); lprogress.c and lfiles.c use its argument helpers.  Argument conversion from nabla values and
** error translation live here once.
*/
#ifndef LTENSOR_H
#define LTENSOR_H

#include "lang/nbapi.h"
#include "lang/ltvalue.h"
#include "tensor/tensor.h"

#define T(v) ((nt_Tensor *)(v).u.p)

int nbT_err(nb_VM *vm);                                  /* raises the tensor layer's error */
int nbT_ret(nb_VM *vm, nt_Tensor *t, nb_Value *out);     /* a new tensor as the result, or the error */

/* Temporaries made while converting arguments; released at the end of a builtin. */
typedef struct Tmp { nt_Tensor *t[16]; int n; } Tmp;
void nbT_tmp_free(Tmp *tp);
nt_Tensor *nbT_tmp_keep(Tmp *tp, nt_Tensor *t);
/* a tensor from a tensor (borrowed), number, bool or nested list (kept in tp) */
nt_Tensor *nbT_arg(nb_VM *vm, Tmp *tp, const char *fname, const char *what, nb_Value v);
int nbT_dtype_arg(nb_VM *vm, const char *fname, nb_Value v, nt_DType dflt, nt_DType *out);
int nbT_device_arg(nb_VM *vm, const char *fname, nb_Value v, nt_Device *out);
int nbT_int_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out);
int nbT_num_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, double *out);
/* An integer argument C keeps in an int (an axis, a kernel size, a stride, a
** padding): nbT_int_arg's checks, then refused, naming the argument, when an
** int cannot hold it (2**32 + 1 was silently 1).  nbT_narrow_int is the same
** check on a value already read as int64 (a list's entries). */
int nbT_intc_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int *out);
int nbT_narrow_int(nb_VM *vm, const char *fname, const char *what, int64_t v, int *out);
int nbT_ints_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int64_t *out, int max, int *n);
int nbT_axes_arg(nb_VM *vm, const char *fname, nb_Value v, int *axes, int *n);
int nbT_shape_arg(nb_VM *vm, const char *fname, nb_Value *vals, int n, int64_t *shape, int *ndim);
int nbT_view_shape_arg(nb_VM *vm, const char *fname, nb_Value *vals, int n, int64_t *shape, int *ndim);   /* one -1 allowed */
int nbT_from_list(nb_VM *vm, nb_Value list, nt_DType want, bool have_want, nt_Tensor **out);
int nbT_tolist(nb_VM *vm, nt_Tensor *t, nb_Value *out);
void nbT_set_default_device(nb_VM *vm, nt_Device d);   /* set_default_device: per VM; nil device args get it */

/* A number meets a tensor as PyTorch's Python scalars do: an int as an
** integer (i64 on its own), a float as a float (the default f32 on its own).
** An int past 2^53 (or inf/nan after overflow) is not exact in a double and
** counts as a float, as it always has. */
static inline bool nbT_num_isint(nb_Value v) { return !nb_isfloat(v) && v.u.n > -9007199254740992.0 && v.u.n < 9007199254740992.0; }
/* an element read from a tensor of dtype dt: a bool, an int or a float */
static inline nb_Value nbT_elem(nt_DType dt, double d) {
  return dt == NT_BOOL ? nb_bool(d != 0) : nt_dtype_is_float(dt) ? nb_flt(d) : nb_int(d);
}

/* a builtin's tensor argument i (kept in the builtin's Tmp tp) and its result */
/* A number or list argument becomes a temporary tensor that nbT_tmp_free
** frees: an error message that reads it is formatted before the free. */
#define TENSOR_ARG(var, i, what) nt_Tensor *var = nbT_arg(vm, &tp, fname, what, args[i]); if (!var) { nbT_tmp_free(&tp); return NB_ERR; }
#define DONE(expr) do { int st_ = nbT_ret(vm, (expr), out); nbT_tmp_free(&tp); return st_; } while (0)

/* a loss whose input and target shapes differ (they broadcast): torch's
** UserWarning, once per call site (ltops.c); every pred/target loss calls it */
void nbT_warn_loss_shapes(nb_VM *vm, const char *fname, const nt_Tensor *input, const nt_Tensor *target);

/* index_put(x, idx, v, accumulate): a copy of x with x[idx] = v (or += v) */
int nbT_index_put(nb_VM *vm, nt_Tensor *x, nb_Value idx, nb_Value v, bool accumulate, nb_Value *out);

/* ---- pytrees (ltree.c): nested records and lists with tensor leaves */
#define MAX_TREE_DEPTH 64
typedef int (*LeafFn)(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out);
/* a tree of the same structure with fn(leaf) at each leaf; buffers (fields
** a record names in its __buffers list) are left out: nil at their place */
int nbT_tree_walk(nb_VM *vm, nb_Value v, LeafFn fn, void *ctx, nb_Value *out);
/* Tensor leaves in order (borrowed), buffers left out. */
typedef struct Leaves { nt_Tensor **t; int n, cap; } Leaves;
int nbT_leaves(nb_VM *vm, nb_Value tree, Leaves *ls);
/* a tensor (by identity) -> a value: open addressing on the pointer */
typedef struct IdMap { const void **key; void **val; size_t cap, n; } IdMap;
/* What a walk does with buffers: ALL walks them as any field; SKIP puts nil
** at their place (the parameter walks above); KEEP puts the buffer's value
** itself there, unwalked (grad()'s copy of a model); ONLY walks the buffers
** and puts nil at every other tensor.  twins (or NULL) maps each container
** the walk makes to the one it copies. */
enum { NBT_ALL = 1, NBT_SKIP_BUFFERS, NBT_KEEP_BUFFERS, NBT_ONLY_BUFFERS };
int nbT_tree_walk_mode(nb_VM *vm, nb_Value v, int mode, LeafFn fn, void *ctx, IdMap *twins, nb_Value *out);
int nbT_leaves_mode(nb_VM *vm, nb_Value tree, int mode, Leaves *ls);
/* whether rec's field key is a buffer (named in rec.__buffers) */
bool nbT_is_buffer_field(const nb_Rec *rec, const nb_Str *key);
/* the slot of key k (NULL when out of memory); *found says whether it was there */
void **nbT_idmap_slot(IdMap *m, const void *k, bool *found);
void *nbT_idmap_get(const IdMap *m, const void *k);   /* NULL when absent */
void nbT_idmap_free(IdMap *m);
/* to(model, target) in place over a tree (ltgrad.c): a device move, or a
** cast of the floating tensors to dt */
int nbT_tree_to(nb_VM *vm, nb_Value tree, bool is_dev, nt_Device dev, nt_DType dt);
/* drops tied tensors (seen at an earlier place) from ls[0] and the same
** places from the aligned lists ls[1..nlists) */
int nbT_drop_ties(nb_VM *vm, Leaves *ls, int nlists);

/* the builtin tables, registered by nbopen_tensor */
void nbT_register_ops(void);
void nbT_register_grad(void);    /* ltgrad.c: autograd, no_grad/autocast, checkpoint, custom_vjp */
void nbT_register_optim(void);   /* loptim.c: fused optimizer updates, clipping, unscaling */
void nbT_register_io(void);      /* ltio.c: save/load, npy/npz, csv */
void nbT_register_compose(void);   /* ltcompose.c: einsum, masked_fill, norm, view, multinomial */
void nbT_register_norm(void);      /* ltnorm.c: batch_norm, group_norm, instance_norm */
void nbT_register_layers(void);    /* ltlayers.c: issue 29's activations and losses */

#endif
