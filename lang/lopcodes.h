/*
** lopcodes.h — the bytecode of the register VM (lcode.c compiles it from the
** resolved syntax tree, lexec.c runs it, ldis.c prints it).  Modelled on Lua
** 5.4's lopcodes.h: fixed-width 32-bit instructions, an 8-bit opcode and
** 8-bit register operands, a 16-bit Bx (constant index, global slot) or sBx
** (signed jump offset).  Module prefix nbI_ (instructions): the compiler,
** the VM loop and the disassembler.
**
** Registers are a frame's window of vm->stack: R[0 .. nlocals) are the
** function's locals (the resolver's slots), temporaries above.  Invariant:
** every register holds a valid value; a temporary's reference is moved out by the instruction that uses
** it (the slot becomes nil), so registers above the live temporaries hold no
** references and a callee's window may start there.
**
** Auxiliary operands come from the syntax node of the instruction
** (code->nodes[pc], kept for error locations anyway): a call's keyword names,
** a field's name, a list's length, an update's operator, a closure's proto.
*/
#ifndef LOPCODES_H
#define LOPCODES_H

#include <stdint.h>
#include "lvm.h"

typedef uint32_t nb_Instr;

#define GET_OP(i)  ((int)((i) & 0xff))
#define GET_A(i)   ((int)(((i) >> 8) & 0xff))
#define GET_B(i)   ((int)(((i) >> 16) & 0xff))
#define GET_C(i)   ((int)(((i) >> 24) & 0xff))
#define GET_Bx(i)  ((int)((i) >> 16))
#define SBX_BIAS   32767
#define GET_sBx(i) (GET_Bx(i) - SBX_BIAS)
#define MK_ABC(o, a, b, c) ((nb_Instr)(o) | (nb_Instr)(a) << 8 | (nb_Instr)(b) << 16 | (nb_Instr)(c) << 24)
#define MK_ABx(o, a, bx)   ((nb_Instr)(o) | (nb_Instr)(a) << 8 | (nb_Instr)(bx) << 16)
#define MAX_REGS   250
#define MAX_Bx     65535

/* X(name, operands, what it does) */
#define NB_OPCODES(X) \
  X(LOADK,   "A Bx",  "R[A] = K[Bx]") \
  X(LOADNIL, "A",     "R[A] = nil") \
  X(LOADBOOL,"A B",   "R[A] = B != 0") \
  X(GETL,    "A B",   "R[A] = R[B] (a local: error if unassigned)") \
  X(SETL,    "A B",   "R[A] = R[B] (moves a temporary)") \
  X(GETCELL, "A B",   "R[A] = cell R[B]'s value") \
  X(SETCELL, "A B",   "cell R[A]'s value = R[B]") \
  X(GETCAP,  "A B",   "R[A] = capture B's value") \
  X(SETCAP,  "A B",   "capture A's value = R[B]") \
  X(GETG,    "A Bx",  "R[A] = global Bx (or the builtin of its name)") \
  X(SETG,    "A Bx",  "global Bx = R[A]") \
  X(ADD, "A B C", "R[A] = R[B] + R[C]") X(SUB, "A B C", "R[A] = R[B] - R[C]") \
  X(MUL, "A B C", "R[A] = R[B] * R[C]") X(DIV, "A B C", "R[A] = R[B] / R[C]") \
  X(MOD, "A B C", "R[A] = R[B] % R[C]") X(POW, "A B C", "R[A] = R[B] ** R[C]") \
  X(MATMUL, "A B C", "R[A] = R[B] @ R[C]") \
  X(EQ, "A B C", "R[A] = R[B] == R[C]") X(NE, "A B C", "R[A] = R[B] != R[C]") \
  X(LT, "A B C", "R[A] = R[B] < R[C]") X(LE, "A B C", "R[A] = R[B] <= R[C]") \
  X(GT, "A B C", "R[A] = R[B] > R[C]") X(GE, "A B C", "R[A] = R[B] >= R[C]") \
  X(IDIV, "A B C", "R[A] = R[B] // R[C]") \
  X(BAND, "A B C", "R[A] = R[B] & R[C]") X(BOR, "A B C", "R[A] = R[B] | R[C]") \
  X(BXOR, "A B C", "R[A] = R[B] ^ R[C]") X(SHL, "A B C", "R[A] = R[B] << R[C]") \
  X(SHR, "A B C", "R[A] = R[B] >> R[C]") \
  X(ADDK, "A B C", "R[A] = R[B] + K[C]") X(SUBK, "A B C", "R[A] = R[B] - K[C]") \
  X(MULK, "A B C", "R[A] = R[B] * K[C]") X(DIVK, "A B C", "R[A] = R[B] / K[C]") \
  /* a K comparison whose next instruction is a JF of its A (lcode.c's last \
  ** pass): the jump is taken at once, R[A] not written (the fast case) */ \
  X(EQKJ, "A B C", "EQK, then the JF after it") X(NEKJ, "A B C", "NEK, then the JF after it") \
  X(LTKJ, "A B C", "LTK, then the JF after it") X(LEKJ, "A B C", "LEK, then the JF after it") \
  X(GTKJ, "A B C", "GTK, then the JF after it") X(GEKJ, "A B C", "GEK, then the JF after it") \
  X(EQK, "A B C", "R[A] = R[B] == K[C]") X(NEK, "A B C", "R[A] = R[B] != K[C]") \
  X(LTK, "A B C", "R[A] = R[B] < K[C]") X(LEK, "A B C", "R[A] = R[B] <= K[C]") \
  X(GTK, "A B C", "R[A] = R[B] > K[C]") X(GEK, "A B C", "R[A] = R[B] >= K[C]") \
  X(UPD,     "A B C", "R[A] op= R[B] (op: C; a tensor in place; R[A], R[B] may be locals)") \
  X(NEG,     "A B",   "R[A] = -R[B]") \
  X(NOT,     "A B",   "R[A] = not R[B]") \
  X(BNOT,    "A B",   "R[A] = ~R[B]") \
  X(JMP,     "sBx",   "pc += sBx") \
  X(LOOP,    "sBx",   "pc += sBx (a back edge: polls)") \
  X(JF,      "A sBx", "if not R[A] then pc += sBx (moves R[A] out)") \
  X(JT,      "A sBx", "if R[A] then pc += sBx (moves R[A] out)") \
  X(JFK,     "A sBx", "if not R[A] then pc += sBx (keeps R[A]: and)") \
  X(JTK,     "A sBx", "if R[A] then pc += sBx (keeps R[A]: or)") \
  X(CALL,    "A B C", "R[A] = R[A](R[A+1 .. A+B], keywords R[A+B+1 .. A+B+C])") \
  X(RET,     "A B",   "return R[A] (B=1: R[A] a local, copied; no temporary is live)") \
  X(CLOSURE, "A",     "R[A] = closure of the node's proto") \
  X(LIST,    "A",     "R[A] = [R[A+1 .. A+n]] (n: the node's items)") \
  X(REC,     "A",     "R[A] = {names: R[A+1 .. A+n]}") \
  X(INTERP,  "A",     "R[A] = the string of the parts R[A+1 .. A+n]") \
  X(RANGE,   "A B",   "R[A] = R[B] .. R[B+1]") \
  X(GETF,    "A B",   "R[A] = R[B].name") \
  X(SETF,    "A B",   "R[A].name = R[B] (moves R[A], R[B] out)") \
  X(GETI,    "A B",   "R[A] = R[B][R[B+1 .. B+n]]") \
  X(SETI,    "A B",   "R[A][R[A+1 .. A+n]] = R[B]") \
  X(FORPREP, "A sBx", "R[A], R[A+1]: bounds (checked); skip the loop (pc += sBx) when empty") \
  X(FORLOOP, "A B sBx", "R[A] += 1; if R[A] < R[A+1] then var R[B] = R[A]; pc += sBx (polls)") \
  X(FORLOOPG,"A Bx sBx", "FORLOOP into global Bx (a top-level loop's variable)") \
  X(CLEAR,   "A",     "R[A] = nil (drops a discarded value)") \
  X(METHOD,  "A B C", "R[A] = R[A+1].name(R[A+2 ..]) (B positional, C keywords after the receiver)") \
  X(TRY,     "A sBx", "push a handler: an error clears R[A ..], puts the error in R[A], pc += sBx") \
  X(ENDTRY,  "",      "pop the handler, or leave the no_grad/autocast block") \
  X(ITERPREP,"A sBx", "R[A]: the sequence; R[A+1], R[A+2]: its state; pc += sBx (to ITERNEXT)") \
  X(ITERNEXT,"A B sBx", "the next item into R[B] and pc += sBx, or fall out of the loop (polls)") \
  X(IMPORT,  "A",     "R[A] = the module named by the node") \
  X(SLICE,   "A B",   "R[A] = a slice of R[B .. B+2] (nil: omitted)") \
  X(UPDX,    "A B",   "R[A].name op= R[B], or R[A][R[A+1 ..]] op= R[B]") \
  X(NOGRAD,  "",      "enter a no_grad block (ENDTRY, or any way out, leaves it)") \
  X(AUTOCAST,"A",     "enter an autocast(R[A]) block (moves R[A] out; left as NOGRAD)") \
  X(ARGLIST, "A",     "R[A] = an empty list of positional arguments (a call with *xs)") \
  X(ARGPUSH, "A B",   "append R[B] to the argument list R[A] (moves R[B] out)") \
  X(ARGSPREAD,"A B",  "append the items of R[B] (a list, range, tensor, iterator) to R[A]") \
  X(CALLV,   "A B C", "a call whose positional arguments are the list R[A+1+B] (B=1: a method, R[A+1] the receiver); C keywords after it") \
  X(LITEND,  "A",     "R[A] = the node's list/record/string literal made of the list R[A] (many items)") \
  X(FAIL,    "A",     "raise the node's run-time error (x[i1, ..., i9]; a:b outside [ ])") \
  X(JDEF,    "A sBx", "if parameter R[A] (or its cell) has a value then pc += sBx (a default's prologue)") \
  X(GETIL,   "A B C", "R[A] = R[B][R[C]] (one index; R[B] a local read in place, R[C] a local or a temporary)") \
  X(SETIL,   "A B C", "R[A][R[B]] = R[C] (one index; R[A] a local read in place, R[B] a local or a temporary; moves R[C])") \
  X(SETILK,  "A B C", "R[A][R[B]] = K[C] (SETIL of a constant: xs[i] = false)") \
  X(GETIT,   "A B C", "GETIL of a temporary R[B] (r.xs[i], f()[i]: moved out)") \
  X(SETIT,   "A B C", "SETIL of a temporary R[A] (r.xs[i] = v: moved out)") \
  X(EQJ, "A B C", "EQ, then the JF after it") X(NEJ, "A B C", "NE, then the JF after it") \
  X(LTJ, "A B C", "LT, then the JF after it") X(LEJ, "A B C", "LE, then the JF after it") \
  X(GTJ, "A B C", "GT, then the JF after it") X(GEJ, "A B C", "GE, then the JF after it")

typedef enum {
#define X(name, ops, doc) BC_##name,
  NB_OPCODES(X)
#undef X
  BC__COUNT
} nb_OpCode;

/* The VM's block stack (lexec.c): a try's handler (where to go, what to
** restore), or a no_grad/autocast block's saved mode, which every way out
** (ENDTRY, break, return, an error unwinding past it) puts back. */
enum { NB_H_TRY, NB_H_NOGRAD, NB_H_AUTOCAST };
typedef struct nb_Handler { const nb_Instr *pc; int reg, lvl, depth; int kind, saved; } nb_Handler;

/* a compiled function body or top-level statement */
typedef struct nb_Code {
  nb_Instr *code; int ncode, capcode;
  const nb_Node **nodes;     /* per instruction: the node to blame for its errors */
  nb_Value *k; int nk, capk;
  int nlocals, nregs;        /* registers: the locals, then temporaries */
  int body;                  /* a function's: the first instruction after its defaults'
                             ** prologue (where a call that bound every parameter enters) */
  int fastcall;              /* a function's: the CALL operands B | C << 8 of a call that
                             ** needs nothing but its locals cleared (every parameter
                             ** positional, no *rest, no cells), or -1 */
  nb_Chunk *chunk;
  const char *name;          /* for the disassembler */
} nb_Code;

/* fn's copy of what a call reads of its code c (NULL: not compiled yet) */
void nbV_func_set_code(nb_Func *fn, nb_Code *c);
/* compiles a proto's body, once; NULL when it exceeds a limit of the
** bytecode (p->vm_why, p->vm_at say which, nbI_proto_error raises it) */
nb_Code *nbI_proto_code(nb_VM *vm, nb_Proto *p);
int nbI_proto_error(nb_VM *vm, nb_Proto *p);
/* compiles one top-level statement; NULL (*why, *at) past a limit */
nb_Code *nbI_compile_stmt(nb_VM *vm, nb_Chunk *chunk, nb_Node *stmt, const char **why, const nb_Node **at);
/* raises the SyntaxError of code past a limit (why) at node at */
int nbI_limit_error(nb_VM *vm, nb_Chunk *chunk, const nb_Node *at, const char *why);
void nbI_code_free(nb_Code *c);
/* runs code in frame f with registers R (f's locals, already bound, or a
** fresh window at vm->sp for a top-level statement), from its first
** instruction (a function's defaults' prologue); *out: its value */
int nbI_exec(nb_VM *vm, nb_Frame *f, nb_Code *c, nb_Value *R, nb_Value *out);
void nbI_dis(nb_Buf *b, const nb_Code *c);
const char *nbI_opname(int op);

#endif
