/*
** ltensor.c — tensor values in the language: operators, indexing, fields,
** printing and the tensor builtins, over tensor/tensor.h.
** (Placeholder until the tensor library lands: numeric literals stay lists.)
*/
#include "lvm.h"

static int no_tensors(nb_VM *vm) { return nb_error_kind(vm, "TypeError", "tensors are not available in this build"); }
void nbT_init(void) {}
void nbT_format(nb_Buf *b, void *t) { (void)t; nbB_puts(b, "<tensor>"); }
int nbT_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out) { (void)op; (void)a; (void)b; (void)out; return no_tensors(vm); }
int nbT_neg(nb_VM *vm, nb_Value a, nb_Value *out) { (void)a; (void)out; return no_tensors(vm); }
int nbT_index(nb_VM *vm, nb_Value t, nb_Value *idx, int nidx, nb_Value *out) { (void)t; (void)idx; (void)nidx; (void)out; return no_tensors(vm); }
int nbT_setindex(nb_VM *vm, nb_Value t, nb_Value *idx, int nidx, nb_Value v) { (void)t; (void)idx; (void)nidx; (void)v; return no_tensors(vm); }
int nbT_field(nb_VM *vm, nb_Value t, nb_Str *name, nb_Value *out) { (void)t; (void)name; (void)out; return no_tensors(vm); }
int nbT_setfield(nb_VM *vm, nb_Value t, nb_Str *name, nb_Value v) { (void)t; (void)name; (void)v; return no_tensors(vm); }
int nbT_truthy(nb_VM *vm, nb_Value t, bool *out) { (void)t; (void)out; return no_tensors(vm); }
int nbT_literal(nb_VM *vm, nb_Value list, nb_Value *out) { (void)vm; nb_incref(list); *out = list; return NB_OK; }
int nbT_len(nb_VM *vm, nb_Value t, double *out) { (void)t; (void)out; return no_tensors(vm); }
void nbT_display(nb_VM *vm, nb_Value t, nb_Buf *html) { (void)vm; (void)t; (void)html; }
void nbT_set_grad_enabled(bool on) { (void)on; }
int nbT_serialize(nb_VM *vm, nb_Value t, nb_Buf *out) { (void)t; (void)out; return no_tensors(vm); }
int nbT_deserialize(nb_VM *vm, const unsigned char **p, const unsigned char *end, nb_Value *out) { (void)p; (void)end; (void)out; return no_tensors(vm); }
void nbT_describe(nb_VM *vm, nb_Value t, nb_Buf *out) { (void)vm; (void)t; (void)out; }
void nbO_retain_tensor(void *t) { (void)t; }
void nbO_release_tensor(void *t) { (void)t; }
