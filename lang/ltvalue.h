/*
** ltvalue.h — tensor values in the language: the hooks the VM,
** printer and serializer call when an operand is a tensor.  The core of
** lang/ (lexec.c, lops.c, lobject.c, lserial.c, lsession.c) calls them; the tensor
** library (lib/ltensor.c, lib/ltgrad.c) implements them.  It is the one
** place where the core knows the tensor library exists, kept to
** declarations over public types so lib/ needs nothing of lvm.h.
*/
#ifndef LTVALUE_H
#define LTVALUE_H

#include "nbapi.h"

/* operators and printing delegate here (lib/ltensor.c) */
void nbT_format(nb_Buf *b, void *tensor);
int  nbT_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out);
int  nbT_update(nb_VM *vm, int op, const char *opname, nb_Value x, nb_Value v);   /* x op= v on a tensor x: in place */
int  nbT_neg(nb_VM *vm, nb_Value a, nb_Value *out);
int  nbT_index(nb_VM *vm, nb_Value t, nb_Value *idx, int nidx, nb_Value *out);
int  nbT_setindex(nb_VM *vm, nb_Value t, nb_Value *idx, int nidx, nb_Value v);
int  nbT_field(nb_VM *vm, nb_Value t, nb_Str *name, nb_Value *out);
int  nbT_setfield(nb_VM *vm, nb_Value t, nb_Str *name, nb_Value v);
int  nbT_truthy(nb_VM *vm, nb_Value t, bool *out);
int  nbT_literal(nb_VM *vm, nb_Value list, nb_Value *out);   /* numeric bracket literal -> tensor (f32 when any element is a float) */
int  nbT_len(nb_VM *vm, nb_Value t, double *out);
int  nbT_round(nb_VM *vm, nb_Value t, nb_Value digits, nb_Value *out);   /* round(tensor, digits) (lib/ltops.c) */
void nbT_display(nb_VM *vm, nb_Value t, nb_Buf *html);
void nbT_set_grad_enabled(bool on);
/* blocks (ltgrad.c): no_grad and autocast set a thread-local mode and put the
** previous one back on every way out of the block */
bool nbT_swap_grad_enabled(bool on);             /* returns the previous mode */
int  nbT_autocast_arg(nb_VM *vm, nb_Value v, int *dtype);  /* "bf16"/"f16" -> dtype; nil/false/"off" -> -1 */
int  nbT_swap_autocast(int dtype);               /* returns the previous dtype (-1 = off) */

/* a tensor being stored (in a local, a global, a captured variable, a field
** or an element) or returned is computed now if it is a lazy elementwise chain
** (tensor/tfuse.c): laziness lives within one statement, so a stored value
** never keeps its chain's inputs alive.  The VM tests NB_TTENSOR first. */
int  nbT_settle(nb_VM *vm, nb_Value t);

int  nbT_serialize(nb_VM *vm, nb_Value t, nb_Buf *out);
int  nbT_deserialize(nb_VM *vm, const unsigned char **p, const unsigned char *end, nb_Value *out);
/* inspect text for a tensor (shape, dtype, device, min/max/mean) */
void nbT_describe(nb_VM *vm, nb_Value t, nb_Buf *out);

#endif
