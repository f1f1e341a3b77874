/*
** lexec.h — what the VM loop (lexec.c) shares with its out-of-line work
** (lexecslow.c): register helpers and the slow paths the loop calls.
** Private to those two files; lopcodes.h is the bytecode, lvm.h the core.
*/
#ifndef LEXEC_H
#define LEXEC_H

#include <string.h>
#include "lopcodes.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tag word puts t in its low half");
/* A number result is written as one 16-byte store: the next instruction
** often reads the whole value (a RET, a SETL, a call's argument) with one
** 16-byte load, which the CPU cannot forward from two 8-byte stores (a
** stall of a dozen cycles: fib spent 17% of its time on it). */
#if defined(__SSE2__)
#include <emmintrin.h>
static inline void put_num(nb_Value *out, uint64_t tag, double x) {
  _mm_storeu_si128((__m128i *)(void *)out, _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)tag), _mm_castpd_si128(_mm_set_sd(x))));
}
/* the same for any value a hot instruction writes (a load, a move, a
** return): one 16-byte store, then the old value dropped */
static inline void put16(nb_Value *slot, nb_Value v) {
  uint64_t lo, hi;   /* built from the two words in registers, not through memory */
  memcpy(&lo, &v, 8); memcpy(&hi, (char *)&v + 8, 8);
  _mm_storeu_si128((__m128i *)(void *)slot, _mm_set_epi64x((long long)hi, (long long)lo));
}
#else
static inline void put_num(nb_Value *out, uint64_t tag, double x) { memcpy(out, &tag, sizeof tag); out->u.n = x; }
static inline void put16(nb_Value *slot, nb_Value v) { *slot = v; }
#endif
_Static_assert(sizeof(nb_Value) == 16, "a value is two 8-byte words");
/* A register write drops the old value: its tag is tested first, and the
** whole old value read only when it holds a reference (a temporary or a
** number-holding local, the common case, costs one load). */
static inline void store16(nb_Value *slot, nb_Value v) {
  if (__builtin_expect(nb_isobj(*slot), 0)) { nb_Value old = *slot; put16(slot, v); nb_decref(old); }
  else put16(slot, v);
}
static inline void store_num(nb_Value *slot, uint64_t tag, double x) {
  if (__builtin_expect(nb_isobj(*slot), 0)) { nb_Value old = *slot; put_num(slot, tag, x); nb_decref(old); }
  else put_num(slot, tag, x);
}

/* a slot a value was moved out of: nil, in one 16-byte store (as put16) */
static inline void put_nil(nb_Value *slot) { put16(slot, nb_nil()); }

/* empties R[from .. to), dropping what they held */
static inline void clear_regs(nb_Value *R, int from, int to) {
  for (int k = from; k < to; k++) { nb_Value v = R[k]; put_nil(&R[k]); nb_decref(v); }
}

/* drops the references R[from .. to) hold, leaving nil in those slots; a
** number, nil, bool or builtin stays where it is: it owns nothing, and a
** slot above the live registers is only ever overwritten (lcall.c's
** convention), so a frame's return need not store into its every slot */
static inline void release_regs(nb_Value *R, int from, int to) {
  for (int k = from; k < to; k++)
    if (nb_isobj(R[k])) { nb_Value v = R[k]; put_nil(&R[k]); nb_decref(v); }
}

/* a temporary register is consumed by its user; locals are only read */
static inline void drop(nb_Value *R, int r, int nlocals) {
  if (r >= nlocals) { nb_Value v = R[r]; put_nil(&R[r]); nb_decref(v); }
}


/* The slow paths (lexecslow.c): everything an instruction does past its
** inline fast case.  Each takes the registers R and the instruction's node n
** (for error locations and auxiliary operands), consumes the temporaries it
** reads (locals below nlocals are only read), and returns NB_OK or NB_ERR.
** Declared cold: the compiler lays their calls out of the loop's hot path. */
#define NB_SLOW __attribute__((cold))
NB_SLOW int nbI_undefined(nb_VM *vm, const nb_Node *n, bool global);
NB_SLOW int nbI_get_global_slow(nb_VM *vm, const nb_Node *n, nb_Value *out);
NB_SLOW int nbI_get_global_into(nb_VM *vm, const nb_Node *n, nb_Value *dst);
NB_SLOW int nbI_binop_slow(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int op, int a, int b, int dst);
NB_SLOW int nbI_binop_k(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int bc, int a, nb_Value k, int dst);
NB_SLOW int nbI_update(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int a, int b);
NB_SLOW int nbI_literal_regs(nb_VM *vm, const nb_Node *n, nb_Value *R, int a);
NB_SLOW int nbI_literal_list(nb_VM *vm, const nb_Node *n, nb_Value *R, int a);
NB_SLOW int nbI_fail_op(nb_VM *vm, const nb_Node *n, nb_Value *R, int a);
NB_SLOW int nbI_make_range(nb_VM *vm, nb_Value *R, int dst, int b);
NB_SLOW int nbI_get_index(nb_VM *vm, const nb_Node *n, nb_Value *R, int dst, int b);
NB_SLOW int nbI_set_index(nb_VM *vm, const nb_Node *n, nb_Value *R, int a, int b);
NB_SLOW int nbI_get_index1(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int dst, int o, int k);
NB_SLOW int nbI_set_index1(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int o, int k, int v);
NB_SLOW int nbI_set_index1k(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int o, int k, nb_Value v);
NB_SLOW int nbI_get_field(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int dst, int b);
NB_SLOW int nbI_set_field(nb_VM *vm, const nb_Node *n, nb_Value *R, int nlocals, int a, int b);
NB_SLOW int nbI_negate(nb_VM *vm, nb_Value *R, int nlocals, int dst, int b);
NB_SLOW int nbI_update_x(nb_VM *vm, const nb_Node *n, nb_Value *R, int a, int b);
NB_SLOW int nbI_make_slice(nb_VM *vm, const nb_Node *k, nb_Value *R, int dst, int b);
NB_SLOW void nbI_push_handler(nb_VM *vm, const nb_Instr *pc, int reg, int kind, int saved);
NB_SLOW void nbI_pop_block(nb_VM *vm);
NB_SLOW int nbI_enter_autocast(nb_VM *vm, nb_Value *R, int a);
NB_SLOW int nbI_arg_push(nb_VM *vm, nb_Value *R, int a, int b, bool spread);

#endif
