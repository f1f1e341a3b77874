/*
** lexec.c — the register VM, the only engine: runs the bytecode lcode.c
** compiles (Lua 5.4's lvm.c is the model).  Computed-goto dispatch under
** GCC/clang, a switch otherwise.  Numbers are unboxed; int/float arithmetic
** and comparisons are inline, and so are the common cases of what programs
** do most (== of strings, truth tests, one list index, a record's field, a
** method's lookup, calls of nabla functions and of builtins given every
** parameter positionally: docs/language.md lists them); everything else
** goes to the slow paths (lexecslow.c, declared cold in lexec.h) and the
** shared helpers (lops.c operators, lcall.c builtins and binding, lerror.c
** errors), which give the same results and errors.  What runs on
** every method call or loop iteration (method_callee, iter_next) stays here.
** The poll and the running of a chunk (nbV_run_program): lrun.c.
**
** Calls.  A call from VM code to a nabla function pushes a frame (XFrame)
** and continues in this loop: no C recursion, so deep recursion is bounded
** by vm->max_depth and the VM stack alone.  Arguments that bind positionally
** enter at the body (code->body); keywords, missing defaults and *rest are
** bound in place (nbV_bind_args) and enter at the defaults' prologue.  A
** call clears only the callee's locals past its arguments, and a return
** clears only the callee's locals and live temporaries: no slot of the VM
** stack ever holds a stale reference (lcall.c's convention; the stack starts
** zeroed), so what is left above the live registers is only overwritten.
** Builtins and records with __call go through nbV_call_at, which comes back
** here (nbI_exec, a new C level) when a builtin calls a nabla function.
**
** Blocks.  try, no_grad and autocast push an entry on the VM's block stack
** (vm->xh); ENDTRY pops it, break/continue pop the ones they leave, a
** return pops its frame's, an error pops up to the try that catches it,
** and each popped no_grad/autocast puts its mode back.
**
** Errors.  An instruction that fails jumps to `error`: the error is pointed
** at the instruction's node (code->nodes), unless a deeper one already was,
** and each VM frame unwound adds a stack-trace entry (caller's name, call
** site) as call_func does for calls through C.
**
** References follow lopcodes.h's invariant: a temporary's reference is moved
** out by its user; a register write drops the old value.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lexec.h"

typedef struct XFrame {
  nb_Frame f;                 /* what the rest of the core sees (vm->frame); its call
                              ** site is NB_CALL_LAZY: found from ccode, cpc when asked */
  nb_Code *ccode; nb_Value *cR; const nb_Instr *cpc;   /* the caller's, to resume */
} XFrame;

/* The VM's frames are one array of max_depth records, made on first use
** (calloc: pages the calls never reach are never touched): a call takes the
** next record, so it allocates nothing, and its address stays put for
** vm->frame.  nxf records are in use; the nesting of calls through C
** (vm->depth) and VM calls (nxf) together stays below max_depth, which a VM
** call checks as nxf < its invocation's limit (max_depth - vm->depth: calls
** through C are fixed during one nbI_exec). */
static XFrame *frames(nb_VM *vm) {
  if (__builtin_expect(!vm->xframes, 0)) {
    vm->xframes = calloc((size_t)vm->max_depth, sizeof(XFrame));
    if (!vm->xframes) abort();
  }
  return vm->xframes;
}

/* A VM call does not look up its call site's node (a load chain on every
** call): a traceback or a nested call through C asks for it, rarely. */
const nb_Node *nbI_frame_call(const nb_Frame *f) {
  if (f->call != NB_CALL_LAZY) return f->call;
  const XFrame *x = (const XFrame *)(const void *)f;   /* f is x->f, its first member */
  return x->ccode->nodes[x->cpc - 1 - x->ccode->code];
}

static const char *frame_name(const nb_Frame *f) { return f->fn ? nbP_proto_name(f->fn->proto) : "<main>"; }

/* ------------------------------------------------------------ hot helpers
** (each runs on every method call or loop iteration: kept here, where the
** compiler may inline them into the loop) */
/* a.name(args), the receiver a in R[ca + 1]: a record's field or a module's
** member is called as is (MC_FIELD, MC_MEMBER: the receiver is not an
** argument), except a function field whose first parameter is named self,
** which receives the record (MC_SELF: the receiver stays), as __call does;
** otherwise name is looked up like a variable and called as name(a, args)
** (MC_UFCS: the receiver stays); -1: an error.  The callee goes into R[ca] in one 16-byte
** store from registers (store16): the call reads it back whole at once, and
** a value passed out through memory as two 8-byte halves cannot be
** forwarded to that load (a stall that was 8-12% of a method-heavy
** program's time). */
enum { MC_FIELD, MC_UFCS, MC_SELF, MC_MEMBER };
static inline int takes_self(nb_Value v) {
  if (v.t != NB_TFUNC) return 0;
  const nb_Proto *p = nb_func(v)->proto;
  return p->nparams > 0 && p->params[0]->len == 4 && !memcmp(p->params[0]->data, "self", 4);
}
static int method_callee(nb_VM *vm, nb_Frame *f, const nb_Node *n, nb_Value *R, int ca) {
  nb_Value recv = R[ca + 1], v;
  if (recv.t == NB_TREC) {
    /* keys and names are interned (nbR_set, the parser): one pointer compare
    ** a key, inline, for a record of up to 16 keys (the usual outcome, a
    ** function called as a method, is a miss over all of them); a bigger
    ** one (a dictionary) through nbR_find and whatever index it keeps */
    const nb_Rec *r = nb_rec(recv);
    const nb_Str *name = n->str;
    int i = -1;
    if (r->n <= 16) { for (int k = 0; k < r->n; k++) if (r->keys[k] == name) { i = k; break; } }
    else i = nbR_find(r, name);
    if (i >= 0) { v = r->vals[i]; nb_incref(v); store16(&R[ca], v); return takes_self(v) ? MC_SELF : MC_FIELD; }
  } else if (recv.t == NB_TMODULE) {
    int i = nbM_global_find(recv.u.p, n->str->data, n->str->len);
    if (i >= 0 && ((nb_Module *)recv.u.p)->vals[i].t != NB_TUNDEF) {
      v = ((nb_Module *)recv.u.p)->vals[i]; nb_incref(v); store16(&R[ca], v); return MC_MEMBER;
    }
  }
  v = nb_undef();
  switch (n->vkind) {
  case V_LOCAL: v = f->locals[n->idx]; break;
  case V_CELL: v = ((nb_Cell *)f->locals[n->idx].u.p)->v; break;
  case V_CAP: v = f->fn->caps[n->idx]->v; break;
  case V_GLOBAL:
    v = f->mod->vals[n->idx];
    if (v.t == NB_TUNDEF && n->bidx >= 0) {
      nb_Value g;
      if (nbI_get_global_slow(vm, n, &g) == NB_OK) { store16(&R[ca], g); return MC_UFCS; }
      nb_decref(vm->err); vm->err = nb_nil(); vm->err_located = false;
    }
    break;
  default: break;
  }
  if (v.t == NB_TUNDEF) {
    nb_error_kind(vm, "NameError", "a %s has no method '%s' (no field, and no function of that name)", nb_typename(recv), n->str->data);
    return -1;
  }
  nb_incref(v); store16(&R[ca], v);
  return MC_UFCS;
}

/* a == b without a call, as nbO_equal decides it: 1 or 0; -1 where that
** needs more (a tensor's elementwise ==, lists, records and ranges that are
** not the same object, an unassigned local's error).  Values of different
** types are never equal; strings compare their bytes (a one-character
** string read from text against a literal: a JSON parser's every step). */
static inline int quick_eq(const nb_Value *a, const nb_Value *b) {
  uint32_t ta = a->t, tb = b->t;
  if (ta == NB_TTENSOR || tb == NB_TTENSOR || ta == NB_TUNDEF || tb == NB_TUNDEF) return -1;
  if (ta != tb) return 0;
  switch (ta) {
  case NB_TNIL: return 1;
  case NB_TBOOL: return a->u.b == b->u.b;
  case NB_TNUM: return a->u.n == b->u.n;
  case NB_TSTR: {
    const nb_Str *x = a->u.p, *y = b->u.p;
    return x == y || (x->len == y->len && memcmp(x->data, y->data, x->len) == 0);
  }
  case NB_TLIST: case NB_TREC: case NB_TRANGE: return a->u.p == b->u.p ? 1 : -1;
  default: return a->u.p == b->u.p;   /* builtins, functions, modules, cells, handles: identity */
  }
}

/* for x in seq: R[a] the sequence, R[a+1] its state (an iterator's __next,
** a range's length), R[a+2] the counter */
static int iter_prep(nb_VM *vm, nb_Value *R, int a) {
  nb_Value seq = R[a];
  R[a + 2] = nb_int(0);
  nb_Value next = seq.t == NB_TREC ? nbR_method_cstr(nb_rec(seq), "__next") : nb_undef();
  if (next.t != NB_TUNDEF) {   /* an iterator: __next holds code (a data field of that name does not count) */
    nb_incref(next);
    nb_store(&R[a + 1], next);
    return NB_OK;
  }
  switch (seq.t) {
  case NB_TRANGE: nb_store(&R[a + 1], nb_flt(nbG_range_len(seq.u.p))); return NB_OK;
  case NB_TLIST: case NB_TSTR: case NB_TREC: case NB_TTENSOR: nb_store(&R[a + 1], nb_nil()); return NB_OK;
  default: return nb_error_kind(vm, "TypeError", "cannot iterate over a %s", nb_typename(seq));
  }
}

/* the next item (1), the end (0), or an error (-1, located: the poll at
** the loop node n, fetching at its sequence n->a) */
static int iter_next(nb_VM *vm, const nb_Node *n, nb_Value *R, int a, nb_Value *item) {
  nb_Value seq = R[a];
  double k = R[a + 2].u.n;
  R[a + 2].u.n = k + 1;
  if (seq.t == NB_TREC && R[a + 1].t != NB_TNIL) {   /* an iterator */
    if (vm->poll && nbV_poll(vm)) { nbE_locate(vm, vm->frame->chunk, n); return -1; }
    if (nbV_call(vm, R[a + 1], &seq, 1, item)) { if (!vm->err_located) nbE_locate(vm, vm->frame->chunk, n->a); return -1; }
    return item->t != NB_TNIL;
  }
  switch (seq.t) {
  case NB_TRANGE: {
    nb_Range *r = seq.u.p;
    if (k >= R[a + 1].u.n) return 0;
    if (vm->poll && nbV_poll(vm)) { nbE_locate(vm, vm->frame->chunk, n); return -1; }
    *item = nb_numk(r->start + k * r->step, r->kind);
    return 1;
  }
  case NB_TLIST: if (k >= nb_list(seq)->n) return 0; *item = nb_list(seq)->items[(long)k]; nb_incref(*item); break;
  case NB_TSTR: if (k >= nb_str(seq)->len) return 0; *item = nb_strv(nbS_new(nb_str(seq)->data + (long)k, 1)); break;
  case NB_TREC: if (k >= nb_rec(seq)->n) return 0; *item = nb_strv(nb_rec(seq)->keys[(long)k]); nb_incref(*item); break;
  default: {
    double len;
    if (nbT_len(vm, seq, &len)) { nbE_locate(vm, vm->frame->chunk, n->a); return -1; }
    if (k >= (long)len) return 0;
    nb_Value kv = nb_int(k);
    if (nbT_index(vm, seq, &kv, 1, item)) { nbE_locate(vm, vm->frame->chunk, n->a); return -1; }
  }
  }
  if (vm->poll && nbV_poll(vm)) { nb_decref(*item); nbE_locate(vm, vm->frame->chunk, n); return -1; }
  return 1;
}

/* ------------------------------------------------------------ the loop */
int nbI_exec(nb_VM *vm, nb_Frame *f0, nb_Code *code0, nb_Value *R0, nb_Value *out) {
  nb_Value *sp0 = vm->sp;
  if (R0 + code0->nregs > vm->stack_end)
    return nb_error_kind(vm, "RecursionError", "stack overflow (calls nested more than %d deep)", vm->depth + vm->nxf);
  XFrame *const xf = frames(vm);
  const int xflim = vm->max_depth - vm->depth;   /* VM frames allowed (see frames) */
  for (int k = code0->nlocals; k < code0->nregs; k++) { uint64_t z = 0; memcpy(&R0[k], &z, sizeof z); }
  vm->sp = R0 + code0->nregs;

  nb_Frame *f = f0;
  nb_Module *M = f->mod;     /* the running function's module (its globals), kept at hand */
  nb_Code *code = code0;
  nb_Value *R = R0;
  /* the constants are code->k, read through code (kept in a register): a
  ** variable of their own would be one more to save and restore per call */
#define K (code->k)
  const nb_Instr *pc = code->code;
  nb_Instr i;
  int st, ca, cnpos, cnkw;   /* a call's callee register and argument counts (CALL, METHOD) */
  int mcall = MC_UFCS;       /* how METHOD found the callee (a record's field: its binding errors say so) */
  int xhbase = vm->nxh;      /* handlers above this one are this invocation's */
#define NODE (code->nodes[pc - 1 - code->code])
#define A GET_A(i)
#define B GET_B(i)
#define C GET_C(i)
#define RA R[GET_A(i)]
#define CHECK(x) do { if (__builtin_expect((x) != 0, 0)) goto error; } while (0)
/* a tensor stored into a variable, field or element is settled (ltvalue.h) */
#define SETTLE(v) do { if (__builtin_expect((v).t == NB_TTENSOR, 0)) CHECK(nbT_settle(vm, (v))); } while (0)

#if defined(__GNUC__)
  static const void *const disp[BC__COUNT] = {
#define X(name, ops, doc) &&L_##name,
    NB_OPCODES(X)
#undef X
  };
#define CASE(name) L_##name:
#define NEXT do { i = *pc++; goto *disp[GET_OP(i)]; } while (0)
  NEXT;
#else
#define CASE(name) case BC_##name:
#define NEXT continue
  for (;;) {
    i = *pc++;
    switch (GET_OP(i)) {
#endif

  CASE(LOADK) { nb_Value v = K[GET_Bx(i)]; nb_incref(v); store16(&RA, v); NEXT; }
  CASE(LOADNIL) { store16(&RA, nb_nil()); NEXT; }
  CASE(LOADBOOL) { store16(&RA, nb_bool(B != 0)); NEXT; }
  CASE(GETL) {
    nb_Value v = R[B];
    if (__builtin_expect(v.t == NB_TUNDEF, 0)) { nbI_undefined(vm, NODE, false); goto error; }
    nb_incref(v); store16(&RA, v); NEXT;
  }
  CASE(SETL) { if (A < code->nlocals) SETTLE(R[B]); nb_Value v = R[B]; put_nil(&R[B]); store16(&RA, v); NEXT; }
  CASE(GETCELL) {
    nb_Value v = ((nb_Cell *)R[B].u.p)->v;
    if (v.t == NB_TUNDEF) { nbI_undefined(vm, NODE, false); goto error; }
    nb_incref(v); store16(&RA, v); NEXT;
  }
  CASE(SETCELL) { SETTLE(R[B]); nb_Value v = R[B]; put_nil(&R[B]); nb_store(&((nb_Cell *)RA.u.p)->v, v); NEXT; }
  CASE(GETCAP) {
    nb_Value v = f->fn->caps[B]->v;
    if (v.t == NB_TUNDEF) { nbI_undefined(vm, NODE, false); goto error; }
    nb_incref(v); store16(&RA, v); NEXT;
  }
  CASE(SETCAP) { SETTLE(R[B]); nb_Value v = R[B]; put_nil(&R[B]); nb_store(&f->fn->caps[A]->v, v); NEXT; }
  CASE(GETG) {
    /* the unassigned case in a function of its own: v's address is not
    ** taken here, so it stays in registers (no spill and reload) */
    nb_Value v = M->vals[GET_Bx(i)];
    if (__builtin_expect(v.t == NB_TUNDEF, 0)) {
      /* unassigned: the builtin function of its name (push, range, len)
      ** straight into the register; a named value (pi, cuda) or an
      ** undefined name the slow way */
      const nb_Builtin *bi = nbC_at(NODE->bidx);
      if (bi && bi->fn) { store16(&RA, nb_builtinv(bi)); NEXT; }
      CHECK(nbI_get_global_into(vm, NODE, &RA)); NEXT;
    }
    nb_incref(v);
    store16(&RA, v); NEXT;
  }
  CASE(SETG) { SETTLE(RA); nb_Value v = RA; put_nil(&RA); nb_store(&M->vals[GET_Bx(i)], v); NEXT; }

#define TAGOF(x, y) ((uint64_t)NB_TNUM | (uint64_t)((x)->kind | (y)->kind) << 32)
#define ARITH(name, e) CASE(name) { \
    nb_Value *a = &R[B], *b = &R[C]; \
    if (__builtin_expect(a->t == NB_TNUM && b->t == NB_TNUM, 1)) { \
      double x = a->u.n, y = b->u.n; uint64_t tag = TAGOF(a, b); \
      store_num(&RA, tag, e); NEXT; } \
    goto binop; }
/* == and != (eq: 1 and 2; 0 for the orderings) of two values that are not
** both numbers, decided inline where quick_eq can: the operands' temporaries
** dropped as nbI_binop_slow would */
#define EQ_INLINE(eq, t, a, b) ((eq) && ((t) = quick_eq((a), (b))) >= 0 && \
    ((t) ^= (eq) == 2, drop(R, B, code->nlocals), C != B ? drop(R, C, code->nlocals) : (void)0, 1))
#define COMPARE(name, e, eq) CASE(name) { \
    nb_Value *a = &R[B], *b = &R[C]; \
    if (__builtin_expect(a->t == NB_TNUM && b->t == NB_TNUM, 1)) { \
      double x = a->u.n, y = b->u.n; bool t = (e); \
      store16(&RA, nb_bool(t)); NEXT; } \
    int q_; \
    if (EQ_INLINE(eq, q_, a, b)) { store16(&RA, nb_bool(q_)); NEXT; } \
    goto binop; }
#define ARITHK(name, e) CASE(name) { \
    nb_Value *a = &R[B]; const nb_Value *b = &K[C]; \
    if (__builtin_expect(a->t == NB_TNUM, 1)) { \
      double x = a->u.n, y = b->u.n; uint64_t tag = TAGOF(a, b); \
      store_num(&RA, tag, e); NEXT; } \
    goto binopk; }
/* a comparison followed by the JF that tests it jumps at once (the
** temporary it would have written is dead).  The compiler marks the pairs
** (EQKJ .. GEKJ, EQJ .. GEJ): no test of the next instruction here.  Not two
** numbers: the plain instruction's slow path writes R[A], the JF tests it. */
#define COMPAREJ(name, plain, e, reg, eq) CASE(name) { \
    nb_Value *a = &R[B]; const nb_Value *b = reg ? &R[C] : &K[C]; \
    if (__builtin_expect(a->t == NB_TNUM && (!reg || b->t == NB_TNUM), 1)) { \
      double x = a->u.n, y = b->u.n; nb_Instr nx = *pc++; \
      if (!(e)) pc += GET_sBx(nx); \
      NEXT; } \
    int q_; \
    if (reg && EQ_INLINE(eq, q_, a, b)) { nb_Instr nx = *pc++; if (!q_) pc += GET_sBx(nx); NEXT; } \
    i = (i & ~(nb_Instr)0xff) | BC_##plain; \
    if (!reg) goto binopk; \
    goto binop; }
#define COMPAREK(name, e) CASE(name) { \
    nb_Value *a = &R[B]; const nb_Value *b = &K[C]; \
    if (__builtin_expect(a->t == NB_TNUM, 1)) { \
      double x = a->u.n, y = b->u.n; bool t = (e); \
      store16(&RA, nb_bool(t)); NEXT; } \
    goto binopk; }
  ARITHK(ADDK, x + y)
  ARITHK(SUBK, x - y)
  /* an int product has no -0 (0 * -1 is 0): + 0.0 makes it 0; a float's
  ** keeps its sign (+ -0.0 changes nothing) */
  ARITHK(MULK, x * y + ((a->kind | b->kind) ? -0.0 : 0.0))
  CASE(DIVK) { nb_Value *a = &R[B];
    if (a->t == NB_TNUM) { double x = a->u.n / K[C].u.n; store16(&RA, nb_flt(x)); NEXT; }
    goto binopk; }
  /* each comparison's four instructions: with a register or a constant,
  ** alone or fused with the JF after it */
#define COMPARES(op, e, eq) COMPARE(op, e, eq) COMPAREK(op##K, e) COMPAREJ(op##KJ, op##K, e, 0, 0) COMPAREJ(op##J, op, e, 1, eq)
  COMPARES(EQ, x == y, 1)
  COMPARES(NE, x != y, 2)
  COMPARES(LT, x < y, 0)
  COMPARES(LE, x <= y, 0)
  COMPARES(GT, x > y, 0)
  COMPARES(GE, x >= y, 0)
  binopk:
    CHECK(nbI_binop_k(vm, NODE, R, code->nlocals, GET_OP(i), B, K[C], A));
    NEXT;
  ARITH(ADD, x + y)
  ARITH(SUB, x - y)
  ARITH(MUL, x * y + ((a->kind | b->kind) ? -0.0 : 0.0))
  CASE(DIV) { nb_Value *a = &R[B], *b = &R[C];
    if (a->t == NB_TNUM && b->t == NB_TNUM) { double x = a->u.n / b->u.n; store16(&RA, nb_flt(x)); NEXT; }
    goto binop; }
  /* & | ^ of two ints that are exact (within 2^53) inline; the rest (shifts,
  ** big ints, errors) in nbV_bitop */
#define BITOP(name, e) CASE(name) { \
    nb_Value *a = &R[B], *b = &R[C]; \
    if (__builtin_expect(nb_isint(*a) && nb_isint(*b) && fabs(a->u.n) <= 9007199254740992.0 && fabs(b->u.n) <= 9007199254740992.0, 1)) { \
      int64_t x = (int64_t)a->u.n, y = (int64_t)b->u.n; \
      store16(&RA, nb_int((double)(e))); NEXT; } \
    goto binop; }
  BITOP(BAND, x & y)
  BITOP(BOR, x | y)
  BITOP(BXOR, x ^ y)
  /* x % y of two exact ints (within 2^53), y not 0: in integers, the sign
  ** of y's (floored, as nbV_num_arith: fmod is exact on such ints, so the
  ** same value, without fmod's call); the rest (floats, 0, big) the slow way */
  CASE(MOD) { nb_Value *a = &R[B], *b = &R[C];
    if (__builtin_expect(nb_isint(*a) && nb_isint(*b) && fabs(a->u.n) <= 9007199254740992.0 &&
                         fabs(b->u.n) <= 9007199254740992.0 && b->u.n != 0, 1)) {
      int64_t x = (int64_t)a->u.n, y = (int64_t)b->u.n, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      store_num(&RA, (uint64_t)NB_TNUM, (double)m); NEXT; }
    goto binop; }
  CASE(POW) CASE(MATMUL) CASE(IDIV) CASE(SHL) CASE(SHR)
  binop:
    CHECK(nbI_binop_slow(vm, NODE, R, code->nlocals, GET_OP(i) - BC_ADD, B, C, A));
    NEXT;
  CASE(UPD) {
    /* x op= v on two numbers inline (C: the operator); R[A] is the local
    ** itself, R[B] a number left behind holds no reference */
    nb_Value *a = &RA, *b = &R[B];
    if (__builtin_expect(a->t == NB_TNUM && b->t == NB_TNUM && C < OP_BAND, 1)) {
      if (C == OP_ADD) { put_num(a, TAGOF(a, b), a->u.n + b->u.n); NEXT; }   /* k += i: the common one */
      nb_Value r = nbV_num_arith(C, *a, *b);
      put_num(a, (uint64_t)NB_TNUM | (uint64_t)r.kind << 32, r.u.n); NEXT;
    }
    CHECK(nbI_update(vm, NODE, R, code->nlocals, A, B)); NEXT;
  }
  CASE(NEG) {
    nb_Value v = R[B];
    if (v.t == NB_TNUM) { store16(&RA, nb_numk(-v.u.n, v.kind)); NEXT; }
    CHECK(nbI_negate(vm, R, code->nlocals, A, B)); NEXT;
  }
  CASE(BNOT) {
    nb_Value v = R[B], r;
    st = nbV_bnot(vm, v, &r);
    drop(R, B, code->nlocals);
    CHECK(st);
    nb_store(&RA, r); NEXT;
  }
  CASE(NOT) {
    bool t;
    nb_Value v = R[B];
    if (v.t == NB_TBOOL) t = v.u.b;
    else if (v.t == NB_TNIL) t = false;
    else if (v.t == NB_TNUM) t = v.u.n != 0;
    else if (v.t == NB_TREC) { t = true; drop(R, B, code->nlocals); }
    else { st = nbV_truthy(vm, v, &t); drop(R, B, code->nlocals); CHECK(st); }
    store16(&RA, nb_bool(!t)); NEXT;
  }
  CASE(JMP) { pc += GET_sBx(i); NEXT; }
  CASE(LOOP) {
    if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm));
    pc += GET_sBx(i); NEXT;
  }
  /* jumps on a value's truth: JF/JT consume a temporary, JFK/JTK test a
  ** local and keep it; one handler each, so the opcode is a constant.  A
  ** bool, nil, number or record (a linked list's `while e`) inline, as
  ** nb_truthy says; the rest (a tensor's truth may fail) in nbV_truthy */
#define JUMPIF(name, jump_when, temp) CASE(name) { \
    bool t; \
    nb_Value v = RA; \
    if (v.t == NB_TBOOL) t = v.u.b; \
    else if (v.t == NB_TNIL) t = false; \
    else if (v.t == NB_TNUM) t = v.u.n != 0; \
    else if (v.t == NB_TREC) { t = true; if (temp) drop(R, A, code->nlocals); } \
    else { \
      st = nbV_truthy(vm, v, &t); \
      if ((temp) || st) drop(R, A, code->nlocals); \
      CHECK(st); \
    } \
    if (t == (jump_when)) pc += GET_sBx(i); \
    NEXT; }
  JUMPIF(JF, false, true)
  JUMPIF(JT, true, true)
  JUMPIF(JFK, false, false)
  JUMPIF(JTK, true, false)
  CASE(CALLV) {
    /* lays the list of positional arguments out in place, the keywords
    ** after them (past the registers when long: vm->sp covers them) */
    ca = A; cnkw = C; mcall = MC_UFCS;
    {
      int lreg = ca + 1 + B;
      nb_Value lv = R[lreg];
      nb_List *l = nb_list(lv);
      int na = l->n;
      if (R + lreg + na + cnkw + 1 > vm->stack_end) {
        nb_error_kind(vm, "RecursionError", "stack overflow (spreading %d arguments)", na);
        goto error;
      }
      R[lreg] = nb_nil();
      memmove(&R[lreg + na], &R[lreg + 1], sizeof(nb_Value) * (size_t)cnkw);
      if (na == 0 && cnkw) R[lreg + cnkw] = nb_nil();
      memcpy(&R[lreg], l->items, sizeof(nb_Value) * (size_t)na);   /* moved: the list is the call's own */
      l->n = 0;
      nb_decref(lv);
      cnpos = na;
      if (R + lreg + na + cnkw > vm->sp) vm->sp = R + lreg + na + cnkw;
      if (!B) { if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm)); goto do_call; }
    }
    goto do_method;
  }
  CASE(METHOD) {
    ca = A; cnpos = B; cnkw = C;
  do_method: ;
    int how = method_callee(vm, f, NODE, R, ca);
    if (__builtin_expect(how < 0, 0)) goto error;
    mcall = how;
    if (how == MC_FIELD || how == MC_MEMBER) {   /* the receiver is not an argument: the arguments move down one */
      nb_Value recv = R[ca + 1];
      memmove(&R[ca + 1], &R[ca + 2], sizeof(nb_Value) * (size_t)(cnpos + cnkw));
      R[ca + 1 + cnpos + cnkw] = nb_nil();
      nb_decref(recv);
    } else cnpos++;
    if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm));
    goto do_call;
  }
  /* enters function fn (its code cc, compiled) at pc0 with registers nR:
  ** the next frame record, the caller's code, registers and pc saved in it
  ** for the return; nregs is cc->nregs (the fast path has it from fn) */
#define ENTER(fn, cc, nR, pc0, nregs) do { \
    XFrame *x_ = xf + vm->nxf++; \
    x_->f.locals = (nR); x_->f.chunk = (cc)->chunk; x_->f.fn = (fn); x_->f.mod = (fn)->mod; \
    x_->f.call = NB_CALL_LAZY; x_->f.parent = f; \
    x_->ccode = code; x_->cR = R; x_->cpc = pc; \
    vm->frame = f = &x_->f; \
    M = (fn)->mod; \
    pc = (pc0); R = (nR); code = (cc); \
    vm->sp = (nR) + (nregs); \
    NEXT; } while (0)
  /* enters fn by a plain call (npos arguments, its fastcall): its other
  ** locals start unassigned (the 8-byte tag word of NB_TUNDEF); the
  ** temporaries above are not cleared: see the general path */
#define ENTER_PLAIN(fn, nR, npos) do { \
    for (int k_ = (npos); k_ < (fn)->nlocals; k_++) { uint64_t z_ = 0; memcpy(&(nR)[k_], &z_, sizeof z_); } \
    ENTER(fn, (fn)->code, nR, (fn)->entry, (fn)->nregs); } while (0)
  CASE(CALL) {
    /* The common call, inline: a nabla function whose every parameter is
    ** given positionally, no *rest, no cells (B | C << 8, the argument
    ** counts, equal to its fastcall), room for its frame and registers, no
    ** poll pending.  Anything else, and the first call of a function not
    ** yet compiled, goes the general way below. */
    {
      nb_Value *cv = &RA;
      nb_Func *fn;
      if (__builtin_expect(cv->t == NB_TFUNC && (int)(i >> 16) == (fn = cv->u.p)->fastcall, 1)) {   /* so fn->code is set */
        nb_Value *nR = cv + 1;
        if (__builtin_expect(vm->nxf >= xflim || nR + fn->nregs > vm->stack_end || vm->poll, 0)) goto call_slow;
        ENTER_PLAIN(fn, nR, B);
      }
    }
  call_slow:
    if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm));
    ca = A; cnpos = B; cnkw = C; mcall = MC_UFCS;
  do_call: ;
    nb_Value callee = R[ca];
    if (callee.t == NB_TFUNC) {
      nb_Func *fn = nb_func(callee);
      /* a plain call that came by METHOD or CALLV, or one the inline path
      ** left for the poll: as CALL's, when there is room */
      if ((cnpos | cnkw << 8) == fn->fastcall && vm->nxf < xflim && R + ca + 1 + fn->nregs <= vm->stack_end)
        ENTER_PLAIN(fn, R + ca + 1, cnpos);
      nb_Proto *p = fn->proto;
      nb_Code *cc = p->code ? p->code : nbI_proto_code(vm, p);
      if (__builtin_expect(!cc, 0)) { nbI_proto_error(vm, p); goto error; }
      if (!fn->code) nbV_func_set_code(fn, cc);
      {
        nb_Value *nR = R + ca + 1;
        int nargs = cnpos + cnkw, entry = cc->body;
        bool plain = (cnpos | cnkw << 8) == cc->fastcall;
        /* a plain call's arguments are its first locals: within its nregs */
        if (vm->nxf >= xflim || nR + (plain || cc->nregs > nargs ? cc->nregs : nargs) > vm->stack_end) {
          nb_error_kind(vm, "RecursionError", "stack overflow (calls nested more than %d deep)", vm->depth + vm->nxf);
          goto error;
        }
        int from = cnpos;
        if (__builtin_expect(!plain && (cnkw != 0 || cnpos != p->nparams || p->variadic), 0)) {
          /* keywords, defaults, *rest: bound in place, then the prologue */
          const nb_Node *n = NODE;
          if (nbV_bind_args(vm, p, nR, cnpos, cnkw ? n->names + n->npos : NULL, cnkw)) {
            if (mcall == MC_FIELD || mcall == MC_SELF) nbV_field_call_error(vm, n->str, p, mcall == MC_SELF);
            goto error;
          }
          from = p->nlocals > nargs ? p->nlocals : nargs;
          entry = 0;
        }
        /* the locals past the arguments start unassigned (the 8-byte tag
        ** word of NB_TUNDEF).  The temporaries above are not cleared: every
        ** slot above the caller's live registers holds a value that owns no
        ** reference (lcall.c's convention: whoever consumes a slot leaves
        ** nil), and the compiler writes a temporary before it reads it, so
        ** whatever number or nil is left there is only ever overwritten */
        for (int k = from; k < cc->nlocals; k++) { uint64_t z = 0; memcpy(&nR[k], &z, sizeof z); }
        if (__builtin_expect(!plain, 0) && p->ncells) nbV_box_cells(p, nR);
        ENTER(fn, cc, nR, cc->code + entry, cc->nregs);
      }
    }
    const nb_Node *n = NODE;
    nb_Value res;
    if (callee.t == NB_TBUILTIN) {
      const nb_Builtin *bi = callee.u.bi;
      if (__builtin_expect(!bi->variadic && cnpos == bi->nparams && !cnkw && bi->kwrest < 0, 1)) {
        /* a builtin given every parameter positionally (push(xs, v), len(xs)):
        ** called from here as nbV_call_at would (call_builtin's own fast
        ** case), its arguments borrowed where they are, then released */
        nb_Value *args = R + ca + 1;
        nb_Frame *sf = vm->frame, *sbf = vm->builtin_frame;
        const nb_Node *sbs = vm->builtin_site;
        vm->builtin_frame = f; vm->builtin_site = n;
        vm->sp = args + cnpos;
        st = bi->fn(vm, args, cnpos, &res);
        vm->frame = sf; vm->builtin_frame = sbf; vm->builtin_site = sbs;
        if (__builtin_expect(vm->interrupted, 0) && st == NB_OK) { nb_decref(res); res = nb_nil(); st = nbV_interrupt_error(vm); }
        /* the arguments' slots lie above the call's register: what owns no
        ** reference may stay there (lcall.c's convention) */
        release_regs(args, 0, cnpos);
        vm->sp = R + code->nregs;
        CHECK(st);
        store16(&R[ca], res);
        NEXT;
      }
    }
    vm->sp = R + ca + 1 + cnpos + cnkw;
    st = nbV_call_at(vm, f, n, callee, R + ca + 1, cnpos, cnkw ? n->names + n->npos : NULL, cnkw, &res);
    /* the arguments were consumed, and nil left in their registers (lcall.c):
    ** nothing above the call holds a reference */
    vm->sp = R + code->nregs;
    CHECK(st);
    store16(&R[ca], res);
    NEXT;
  }
  CASE(RET) {
    nb_Value *ra = &RA;
    SETTLE(*ra);   /* a returned value leaves its statement: computed (ltvalue.h) */
    nb_Value v = *ra;
    /* RET's register is the newest live one: the temporaries below it may
    ** hold references (a return inside an expression), those above none;
    ** a returned local (B) is moved out like a temporary, and the other
    ** locals are released below */
    int top = A;
    if (B) {
      if (__builtin_expect(v.t == NB_TUNDEF, 0)) { nbI_undefined(vm, NODE, false); goto error; }
      top = code->nlocals;
    }
    put16(ra, nb_nil());
    while (__builtin_expect(vm->nxh > xhbase, 0) && vm->xh[vm->nxh - 1].lvl >= vm->nxf) nbI_pop_block(vm);   /* a return inside try, no_grad */
    if (__builtin_expect(f == f0, 0)) {
      clear_regs(R, code->nlocals, top);
      vm->sp = sp0;
      *out = v;
      return NB_OK;
    }
    XFrame *x = xf + --vm->nxf;
    release_regs(R, 0, top);
    vm->frame = f = x->f.parent;
    M = f->mod;
    code = x->ccode; R = x->cR; pc = x->cpc;
    vm->sp = R + code->nregs;
    /* the callee's window above R[A] holds no references (its locals were
    ** released above, its temporaries moved out): nothing to empty there */
    store16(&R[GET_A(pc[-1])], v);
    NEXT;
  }
  CASE(CLOSURE) { nb_Value v; CHECK(nbV_make_closure(vm, f, NODE->proto, &v)); nb_store(&RA, v); NEXT; }
  CASE(LIST) CASE(REC) CASE(INTERP) { CHECK(nbI_literal_regs(vm, NODE, R, A)); NEXT; }
  CASE(LITEND) { CHECK(nbI_literal_list(vm, NODE, R, A)); NEXT; }
  CASE(FAIL) { nbI_fail_op(vm, NODE, R, A); goto error; }
  CASE(RANGE) { CHECK(nbI_make_range(vm, R, A, B)); NEXT; }
  /* r.name on a record: an inline cache per instruction.  Operand C holds the
  ** slot where this site last found its field (records keep their keys in
  ** insertion order, so the objects that pass one site usually share it);
  ** the hit costs one pointer compare (keys and names are interned), a miss
  ** searches and rewrites C (code is per VM, and a VM runs on one thread).
  ** The record may be a local read in place (B < nlocals: not dropped). */
#define FIELD_SLOT(r, name, out) do { \
    int c_ = C; \
    if (__builtin_expect(!(c_ < (r)->n && (r)->keys[c_] == (name)), 0)) { \
      c_ = nbR_find((r), (name)); \
      if (c_ >= 0 && c_ <= 255) ((nb_Instr *)pc)[-1] = (i & 0x00ffffffu) | (nb_Instr)c_ << 24; \
    } \
    out = c_; } while (0)
  CASE(GETF) {
    if (__builtin_expect(R[B].t == NB_TREC, 1)) {
      nb_Rec *r = R[B].u.p; int c;
      FIELD_SLOT(r, NODE->str, c);
      if (__builtin_expect(c >= 0, 1)) {
        nb_Value v = r->vals[c]; nb_incref(v);
        drop(R, B, code->nlocals);   /* may free r: v is held */
        store16(&RA, v); NEXT;
      }
    }
    CHECK(nbI_get_field(vm, NODE, R, code->nlocals, A, B)); NEXT;
  }
  CASE(SETF) {
    SETTLE(R[B]);
    if (__builtin_expect(R[A].t == NB_TREC, 1)) {
      nb_Rec *r = R[A].u.p; int c;
      FIELD_SLOT(r, NODE->a->str, c);
      if (__builtin_expect(c >= 0, 1)) {
        nb_Value v = R[B]; put_nil(&R[B]);   /* a temporary: moved into the field */
        nb_Value old = r->vals[c]; r->vals[c] = v;
        drop(R, A, code->nlocals);
        nb_decref(old); NEXT;
      }
    }
    CHECK(nbI_set_field(vm, NODE, R, code->nlocals, A, B)); NEXT;
  }
  /* xs[i] with an int i inside the list inline; the rest (negative i,
  ** ranges, errors, records, strings, tensors) in nbV_index/nbV_set_index */
  CASE(GETI) {
    if (NODE->nkids == 1 && R[B].t == NB_TLIST && nb_isint(R[B + 1])) {
      nb_List *l = R[B].u.p; double k = R[B + 1].u.n;
      if (k >= 0 && k < l->n) {
        nb_Value v = l->items[(long)k]; nb_incref(v);   /* before the list's temporary goes */
        clear_regs(R, B, B + 2); store16(&RA, v); NEXT;
      }
    }
    CHECK(nbI_get_index(vm, NODE, R, A, B)); NEXT;
  }
  CASE(SETI) {
    SETTLE(R[B]);
    if (NODE->a->nkids == 1 && R[A].t == NB_TLIST && nb_isint(R[A + 1])) {
      nb_List *l = R[A].u.p; double k = R[A + 1].u.n;
      if (k >= 0 && k < l->n) {
        nb_Value v = R[B]; put_nil(&R[B]);   /* a temporary: moved into the element */
        nb_store(&l->items[(long)k], v); clear_regs(R, A, A + 2); NEXT;
      }
    }
    CHECK(nbI_set_index(vm, NODE, R, A, B)); NEXT;
  }
  /* the same with one index register (a local or a temporary); the list a
  ** local read in place (GETIL, SETIL) or a temporary moved out (GETIT,
  ** SETIT: r.xs[i]) */
#define GETI1(name, temp) CASE(name) { \
    nb_Value *o = &R[B], *k = &R[C]; \
    if (__builtin_expect(o->t == NB_TLIST && nb_isint(*k), 1)) { \
      nb_List *l = o->u.p; double x = k->u.n; \
      if (x >= 0 && x < l->n) { \
        nb_Value v = l->items[(long)x]; nb_incref(v);   /* before the list's temporary goes */ \
        if (temp) { nb_Value lv = *o; put_nil(o); nb_decref(lv); } \
        store16(&RA, v); NEXT; \
      } \
    } \
    CHECK(nbI_get_index1(vm, NODE, R, code->nlocals, A, B, C)); NEXT; }
#define SETI1(name, temp) CASE(name) { \
    SETTLE(R[C]); \
    nb_Value *o = &RA, *k = &R[B]; \
    if (__builtin_expect(o->t == NB_TLIST && nb_isint(*k), 1)) { \
      nb_List *l = o->u.p; double x = k->u.n; \
      if (x >= 0 && x < l->n) { \
        nb_Value v = R[C]; put_nil(&R[C]);   /* a temporary: moved into the element */ \
        nb_store(&l->items[(long)x], v); \
        if (temp) { nb_Value lv = *o; put_nil(o); nb_decref(lv); } \
        NEXT; \
      } \
    } \
    CHECK(nbI_set_index1(vm, NODE, R, code->nlocals, A, B, C)); NEXT; }
  CASE(SETILK) {
    nb_Value *o = &RA, *k = &R[B];
    if (__builtin_expect(o->t == NB_TLIST && nb_isint(*k), 1)) {
      nb_List *l = o->u.p; double x = k->u.n;
      if (x >= 0 && x < l->n) { nb_Value v = K[C]; nb_incref(v); nb_store(&l->items[(long)x], v); NEXT; }
    }
    CHECK(nbI_set_index1k(vm, NODE, R, code->nlocals, A, B, K[C])); NEXT;
  }
  GETI1(GETIL, 0)
  GETI1(GETIT, 1)
  SETI1(SETIL, 0)
  SETI1(SETIT, 1)
  CASE(FORPREP) {
    nb_Value *a = &RA, *b = a + 1;
    if (a->t != NB_TNUM || b->t != NB_TNUM) {
      nb_error_kind(vm, "TypeError", "range bounds must be numbers, got %s and %s", nb_typename(*a), nb_typename(*b));
      goto error;
    }
    pc += GET_sBx(i); NEXT;
  }
  CASE(FORLOOP) {
    nb_Value *a = &RA;
    double x = a->u.n;
    if (x < a[1].u.n) {
      if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm));
      store_num(&R[B], (uint64_t)NB_TNUM | (uint64_t)a->kind << 32, x);
      a->u.n = x + 1;
      pc += 1 + GET_sBx(*pc);
    } else pc++;
    NEXT;
  }
  CASE(FORLOOPG) {
    /* FORLOOP into a global loop variable (a top-level loop): no register */
    nb_Value *a = &RA;
    double x = a->u.n;
    if (x < a[1].u.n) {
      if (__builtin_expect(vm->poll, 0)) CHECK(nbV_poll(vm));
      store_num(&M->vals[GET_Bx(i)], (uint64_t)NB_TNUM | (uint64_t)a->kind << 32, x);
      a->u.n = x + 1;
      pc += 1 + GET_sBx(*pc);
    } else pc++;
    NEXT;
  }
  CASE(CLEAR) { nb_Value v = RA; put_nil(&RA); nb_decref(v); NEXT; }
  CASE(TRY) { nbI_push_handler(vm, pc + GET_sBx(i), A, NB_H_TRY, 0); NEXT; }
  CASE(ENDTRY) { nbI_pop_block(vm); NEXT; }
  CASE(NOGRAD) {
    /* also when grad is already off (checkpoint): the previous mode comes back */
    vm->grad_disabled++;
    nbI_push_handler(vm, NULL, 0, NB_H_NOGRAD, nbT_swap_grad_enabled(false));
    NEXT;
  }
  CASE(AUTOCAST) { CHECK(nbI_enter_autocast(vm, R, A)); NEXT; }
  CASE(ARGLIST) { nb_store(&RA, nb_obj(NB_TLIST, nbL_new(8))); NEXT; }
  CASE(ARGPUSH) { nbI_arg_push(vm, R, A, B, false); NEXT; }
  CASE(ARGSPREAD) { CHECK(nbI_arg_push(vm, R, A, B, true)); NEXT; }
  CASE(JDEF) {
    nb_Value v = RA;
    if (v.t == NB_TCELL) v = ((nb_Cell *)v.u.p)->v;
    if (v.t != NB_TUNDEF) pc += GET_sBx(i);
    NEXT;
  }
  CASE(ITERPREP) { CHECK(iter_prep(vm, R, A)); pc += GET_sBx(i); NEXT; }
  CASE(ITERNEXT) {
    nb_Value item;
    int r = iter_next(vm, NODE, R, A, &item);
    if (r < 0) goto error;
    if (r) { store16(&R[B], item); pc += 1 + GET_sBx(*pc); }
    else pc++;
    NEXT;
  }
  CASE(IMPORT) { nb_Value m; CHECK(nbM_import(vm, NODE->str, &m)); nb_store(&RA, m); NEXT; }
  CASE(SLICE) { CHECK(nbI_make_slice(vm, NODE, R, A, B)); NEXT; }
  CASE(UPDX) {
    /* r.name op= v on a record's number field, v a number: inline, through
    ** the field cache in C (as GETF); R[A] is the record's temporary */
    const nb_Node *n = NODE;
    if (n->a->kind == N_FIELD && R[A].t == NB_TREC && R[B].t == NB_TNUM && n->op < OP_BAND) {
      nb_Rec *r = R[A].u.p; int c;
      FIELD_SLOT(r, n->a->str, c);
      if (c >= 0 && r->vals[c].t == NB_TNUM) {
        r->vals[c] = nbV_num_arith(n->op, r->vals[c], R[B]);   /* numbers: no references to drop */
        clear_regs(R, A, A + 1);
        NEXT;
      }
    }
    CHECK(nbI_update_x(vm, n, R, A, B)); NEXT;
  }

#if !defined(__GNUC__)
    }
  }
#endif

error:
  if (!vm->err_located) nbE_locate(vm, f->chunk, NODE);
  if (vm->sp > R + code->nregs) {   /* the arguments CALLV laid out past the registers */
    clear_regs(R, code->nregs, (int)(vm->sp - R));
    vm->sp = R + code->nregs;
  }
  /* blocks left by the error put their modes back, up to the try that
  ** catches it (an uncatchable error leaves them all) */
  while (vm->nxh > xhbase && !(vm->xh[vm->nxh - 1].kind == NB_H_TRY && nbE_catchable(vm))) nbI_pop_block(vm);
  if (vm->nxh > xhbase) {
    /* caught: unwind to the handler's frame (each frame adds its trace
    ** entry, as call_func does for calls through C) */
    nb_Handler h = vm->xh[--vm->nxh];
    while (vm->nxf > h.lvl) {
      XFrame *x = xf + --vm->nxf;
      clear_regs(R, 0, code->nregs);
      vm->frame = f = x->f.parent;
      M = f->mod;
      nbE_add_frame(vm, frame_name(f), f->chunk, nbI_frame_call(&x->f));
      code = x->ccode; R = x->cR;
    }
    clear_regs(R, h.reg, code->nregs);
    vm->depth = h.depth; vm->sp = R + code->nregs; vm->frame = f;
    R[h.reg] = vm->err; vm->err = nb_nil(); vm->err_located = false;
    pc = h.pc;
    NEXT;
  }
  vm->nxh = xhbase;
  while (f != f0) {
    XFrame *x = xf + --vm->nxf;
    clear_regs(R, 0, code->nregs);
    vm->frame = f = x->f.parent;
    M = f->mod;
    nbE_add_frame(vm, frame_name(f), f->chunk, nbI_frame_call(&x->f));
    code = x->ccode; R = x->cR; pc = x->cpc;
  }
  clear_regs(R, code->nlocals, code->nregs);
  vm->sp = sp0;
  return NB_ERR;
}
