/*
** lcode.c — the compiler from the resolved syntax tree to the register
** bytecode of lopcodes.h (Lua 5.4's lparser.c/lcode.c are the model: one
** pass, registers allocated as a stack above the locals).
**
** Everything compiles: code past a limit of the bytecode (250 registers,
** 65535 constants, 16-bit jumps) is refused with a SyntaxError before its
** chunk runs (nbI_limit_error); literals and calls with many items are
** built through a list (ARGLIST/ARGPUSH, then LITEND or CALLV) instead.
**
** Every instruction records the node to blame for an error at that point
** (nodes[pc]), so errors carry file:line:column, carets and stack traces.
** The resolver's slots are the VM's registers 0 .. nlocals-1.
*/
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lopcodes.h"

typedef struct Loop {
  struct Loop *outer;
  int freereg;                  /* temporaries live when the loop started */
  int jstart;                   /* its breaks and continues: Cs.jl[jstart ..] */
  int ntry;                     /* try blocks open when the loop started */
} Loop;

typedef struct Cs {
  nb_Code *code;
  int freereg;
  bool toplevel;
  Loop *loop;
  int ntry;                     /* try/no_grad/autocast blocks open here (a break out of one leaves it) */
  int *jl, njl, capjl;          /* pending loop jumps, innermost loop's last: pc*2 (+1: a continue) */
  const nb_Node *cur;           /* the node being compiled: where a limit is reported */
  int nparams;                  /* a function's parameters: slots 0 .. nparams, bound by its body */
  bool assigned[MAX_REGS + 1];  /* locals surely assigned here: parameters, and the targets of
                                ** `x = v` statements earlier in this block or an enclosing one */
  const char *why;
  jmp_buf jb;
} Cs;

/* a limit of the bytecode that this code exceeds: compiling stops, and the
** run reports a SyntaxError at the node being compiled (nbI_compile_error) */
static void limit(Cs *c, const char *why) __attribute__((noreturn));
static void limit(Cs *c, const char *why) { c->why = why; longjmp(c->jb, 1); }

/* NABLA_VM_STATS=1: the number of units compiled, at exit */
static long ncompiled;
static void print_stats(void) { fprintf(stderr, "vm: %ld units compiled\n", ncompiled); }
static void stats_count(void) {
  static int on = -1;
  if (on < 0) {
    const char *s = getenv("NABLA_VM_STATS");
    on = s && *s && strcmp(s, "0");
    if (on) atexit(print_stats);
  }
  ncompiled++;
}

static int emit(Cs *c, nb_Instr i, const nb_Node *n) {
  nb_Code *k = c->code;
  if (k->ncode == k->capcode) {
    if (k->ncode >= (1 << 20)) limit(c, "more than a million instructions in one function");
    k->capcode = k->capcode ? k->capcode * 2 : 32;
    k->code = realloc(k->code, sizeof *k->code * (size_t)k->capcode);
    k->nodes = realloc(k->nodes, sizeof *k->nodes * (size_t)k->capcode);
    if (!k->code || !k->nodes) abort();
  }
  k->code[k->ncode] = i;
  k->nodes[k->ncode] = n;
  return k->ncode++;
}
#define ABC(op, a, b, cc, n) emit(c, MK_ABC(BC_##op, a, b, cc), n)
#define ABx(op, a, bx, n)    emit(c, MK_ABx(BC_##op, a, bx), n)

static int newreg(Cs *c) {
  int r = c->freereg++;
  if (c->freereg > MAX_REGS) limit(c, "more than 250 registers (locals and temporaries) in one function or statement");
  if (c->freereg > c->code->nregs) c->code->nregs = c->freereg;
  return r;
}

static int addk(Cs *c, nb_Value v) {
  nb_Code *k = c->code;
  for (int i = 0; i < k->nk; i++)   /* small tables: a linear search is fine */
    if (k->k[i].t == v.t && k->k[i].kind == v.kind && memcmp(&k->k[i].u, &v.u, sizeof v.u) == 0) return i;
  if (k->nk >= MAX_Bx) limit(c, "more than 65535 constants in one function");
  if (k->nk == k->capk) {
    k->capk = k->capk ? k->capk * 2 : 8;
    k->k = realloc(k->k, sizeof *k->k * (size_t)k->capk);
    if (!k->k) abort();
  }
  nb_incref(v);
  k->k[k->nk] = v;
  return k->nk++;
}

/* jumps: A operand a, offset patched later */
static int jump(Cs *c, int op, int a, const nb_Node *n) { return emit(c, MK_ABx(op, a, SBX_BIAS), n); }
static void patch_to(Cs *c, int at, int target) {
  int off = target - (at + 1);
  if (off < -SBX_BIAS || off > MAX_Bx - SBX_BIAS) limit(c, "a jump over more than 32767 instructions (split the block into functions)");
  nb_Instr *i = &c->code->code[at];
  *i = (*i & 0xffff) | (nb_Instr)(off + SBX_BIAS) << 16;
}
static void patch_here(Cs *c, int at) { patch_to(c, at, c->code->ncode); }

static void expr(Cs *c, nb_Node *n, int dst);
static void node(Cs *c, nb_Node *n, int dst);

/* the node's value into a new temporary */
static int to_temp(Cs *c, nb_Node *n) { int r = newreg(c); expr(c, n, r); return r; }

/* a local's register, read in place (an operand of a binary operator) */
static bool is_local(const nb_Node *n) { return n->kind == N_NAME && n->vkind == V_LOCAL; }
/* leaves whose evaluation has no effect and cannot fail: an operand before
** one of them may be read in place without changing the order of errors */
static bool is_pure_leaf(const nb_Node *n) { return n->kind == N_NUM || n->kind == N_STR || is_local(n); }
/* a constant: its evaluation cannot fail */
static bool is_literal(const nb_Node *n) { return n->kind == N_NUM || n->kind == N_STR || n->kind == N_NIL || n->kind == N_TRUE || n->kind == N_FALSE; }

/* the constant a literal compiles to (its index in K), or -1 */
static int literal_k(Cs *c, const nb_Node *n) {
  switch (n->kind) {
  case N_NUM: return addk(c, nb_numk(n->num, (uint32_t)n->idx));
  case N_STR: return addk(c, nb_strv(n->str));
  case N_NIL: return addk(c, nb_nil());
  case N_TRUE: case N_FALSE: return addk(c, nb_bool(n->kind == N_TRUE));
  default: return -1;
  }
}

static void load_name(Cs *c, nb_Node *n, int dst) {
  switch (n->vkind) {
  case V_LOCAL: ABC(GETL, dst, n->idx, 0, n); return;
  case V_CELL: ABC(GETCELL, dst, n->idx, 0, n); return;
  case V_CAP: ABC(GETCAP, dst, n->idx, 0, n); return;
  case V_GLOBAL:
    if (n->idx > MAX_Bx) limit(c, "more than 65535 globals in one module");
    ABx(GETG, dst, n->idx, n); return;
  default: limit(c, "unresolved name");
  }
}

/* stores the temporary src into the variable named by n (moves it) */
static void store_name(Cs *c, nb_Node *n, int src, const nb_Node *at) {
  switch (n->vkind) {
  case V_LOCAL: ABC(SETL, n->idx, src, 0, at); return;
  case V_CELL: ABC(SETCELL, n->idx, src, 0, at); return;
  case V_CAP: ABC(SETCAP, n->idx, src, 0, at); return;
  case V_GLOBAL:
    if (n->idx > MAX_Bx) limit(c, "more than 65535 globals in one module");
    ABx(SETG, src, n->idx, at); return;
  default: limit(c, "unresolved name");
  }
}

/* expressions that write their destination once, at their end, after
** reading every operand: these may target a local's register directly */
static bool writes_once(const nb_Node *n) {
  switch (n->kind) {
  case N_NUM: case N_STR: case N_NIL: case N_TRUE: case N_FALSE: case N_NAME:
  case N_BINARY: case N_NEG: case N_NOT: case N_BNOT: case N_FIELD: case N_INDEX: case N_RANGE: case N_FN:
    return true;
  default: return false;
  }
}

/* one index into a new temporary: a slice a:b:c becomes a range */
static void index_part(Cs *c, nb_Node *k) {
  int r = newreg(c);
  if (k->kind != N_SLICE) { expr(c, k, r); return; }
  int base = c->freereg, p = newreg(c); newreg(c); newreg(c);
  nb_Node *ps[3] = { k->a, k->b, k->c };
  for (int j = 0; j < 3; j++) { if (ps[j]) expr(c, ps[j], p + j); else ABC(LOADNIL, p + j, 0, 0, k); }
  ABC(SLICE, r, p, 0, k);
  c->freereg = base;
}

/* A call f(a, *xs, k=v): positional arguments are pushed onto a list (a
** spread appends its items), which CALLV lays out as arguments when it
** calls; also the form of a call with more positional arguments than an
** instruction's operand holds. */
static void call_spread(Cs *c, nb_Node *n, int f) {
  if (n->kind == N_METHOD) { int recv = newreg(c); expr(c, n->a, recv); }
  else if (n->a->kind == N_NAME) load_name(c, n->a, f);
  else expr(c, n->a, f);
  int lst = newreg(c);
  ABC(ARGLIST, lst, 0, 0, n);
  for (int i = 0; i < n->npos; i++) {
    nb_Node *k = n->kids[i];
    int base = c->freereg, t = newreg(c);
    expr(c, k->kind == N_SPREAD ? k->a : k, t);
    emit(c, MK_ABC(k->kind == N_SPREAD ? BC_ARGSPREAD : BC_ARGPUSH, lst, t, 0), k);
    c->freereg = base;
  }
  for (int i = n->npos; i < n->nkids; i++) { int r = newreg(c); expr(c, n->kids[i], r); }
  ABC(CALLV, f, n->kind == N_METHOD, n->nkids - n->npos, n);
}

/* tensor([...], dtype=...): the bracket literal in the first argument (and the
** literals nested directly in it) are marked NF_RAWLIST with the callee's
** register, so that they reach the builtin as lists of exact numbers instead of
** f32 tensors (the literal's default dtype), as torch.tensor reads its list.
** An explicit stack: the nesting depth is the source's. */
static void mark_raw_literal(Cs *c, nb_Node *n, int callee) {
  if (!(n->a->kind == N_NAME && n->a->str && n->a->str->len == 6 && memcmp(n->a->str->data, "tensor", 6) == 0)) return;
  if (n->npos < 1 || n->kids[0]->kind != N_LIST) return;
  nb_Node *stack[64]; int top = 0;
  stack[top++] = n->kids[0];
  while (top > 0) {
    nb_Node *l = stack[--top];
    l->flags |= NF_RAWLIST; l->bidx = callee;
    for (int i = 0; i < l->nkids; i++)
      if (l->kids[i]->kind == N_LIST) {
        if (top == 64) limit(c, "bracket literals nested more than 64 deep in tensor(...)");
        else stack[top++] = l->kids[i];
      }
  }
}

static void call(Cs *c, nb_Node *n, int dst) {
  int base = c->freereg;
  /* the list form also when the arguments would not fit in the registers left */
  bool spread = n->npos > 254 || c->freereg + 2 + n->nkids > MAX_REGS;
  for (int i = 0; i < n->nkids; i++) if (n->kids[i]->kind == N_SPREAD) spread = true;
  if (n->nkids - n->npos > 255) limit(c, "more than 255 keyword arguments in one call");
  /* the result may go straight to dst when dst is the newest temporary */
  int f = dst >= 0 && dst == c->freereg - 1 && dst >= c->code->nlocals ? (c->freereg--, newreg(c)) : newreg(c);
  if (spread) call_spread(c, n, f);
  else {
    if (n->kind == N_METHOD) {
      int recv = newreg(c);
      expr(c, n->a, recv);
    } else if (n->a->kind == N_NAME) { load_name(c, n->a, f); mark_raw_literal(c, n, f); }
    else expr(c, n->a, f);
    for (int i = 0; i < n->nkids; i++) { int r = newreg(c); expr(c, n->kids[i], r); }
    if (n->kind == N_METHOD) ABC(METHOD, f, n->npos, n->nkids - n->npos, n);
    else ABC(CALL, f, n->npos, n->nkids - n->npos, n);
  }
  if (dst >= 0 && dst != f) ABC(SETL, dst, f, 0, n);
  else if (dst < 0) ABC(CLEAR, f, 0, 0, n);
  c->freereg = base;
}

/* the K-operand form of an operator (x + 1, n < 2), or -1 */
static int kform(int op) {
  switch (op) {
  case OP_ADD: return BC_ADDK; case OP_SUB: return BC_SUBK; case OP_MUL: return BC_MULK; case OP_DIV: return BC_DIVK;
  case OP_EQ: return BC_EQK; case OP_NE: return BC_NEK; case OP_LT: return BC_LTK; case OP_LE: return BC_LEK;
  case OP_GT: return BC_GTK; case OP_GE: return BC_GEK; default: return -1;
  }
}

static void binary(Cs *c, nb_Node *n, int dst) {
  int base = c->freereg, ra, rb;
  if (is_local(n->a) && is_pure_leaf(n->b)) ra = n->a->idx;
  else { ra = newreg(c); expr(c, n->a, ra); }
  if (n->b->kind == N_NUM && kform(n->op) >= 0) {
    int k = addk(c, nb_numk(n->b->num, (uint32_t)n->b->idx));
    if (k < 256) {
      emit(c, MK_ABC(kform(n->op), dst, ra, k), n);
      c->freereg = base;
      return;
    }
  }
  if (is_local(n->b)) rb = n->b->idx;
  else { rb = newreg(c); expr(c, n->b, rb); }
  if (n->op >= OP_NONE) limit(c, "operator");
  emit(c, MK_ABC(BC_ADD + n->op, dst, ra, rb), n);
  c->freereg = base;
}

/* After the statement s of a block, the local it assigns is surely assigned
** for the rest of the block (and the blocks inside it): every path there runs
** s first.  The block's caller restores the set when the block ends. */
static void mark_assigned(Cs *c, const nb_Node *s) {
  if (s->kind == N_ASSIGN && s->op == OP_NONE && is_local(s->a)) c->assigned[s->a->idx] = true;
}
static bool surely_assigned(const Cs *c, const nb_Node *n) { return is_local(n) && c->assigned[n->idx]; }

/* A jump taken when the condition n (of an if or a while) is false.  A local
** surely assigned is tested in place (JFK keeps it: no copy, no reference
** taken and dropped), and `not x` of one by JTK (an error of its truth is
** put at the `not`, as NOT's was); anything else is computed into a
** temporary that JF consumes.  An unassigned local still goes the JF way,
** whose GETL reports it. */
static int jump_if_false(Cs *c, nb_Node *n) {
  if (surely_assigned(c, n)) return jump(c, BC_JFK, n->idx, n);
  if (n->kind == N_NOT && surely_assigned(c, n->a)) return jump(c, BC_JTK, n->a->idx, n);
  int t = to_temp(c, n);
  return jump(c, BC_JF, t, n);
}

static void block(Cs *c, nb_Node *n, int dst) {
  if (n->nkids == 0) { if (dst >= 0) ABC(LOADNIL, dst, 0, 0, n); return; }
  bool saved[MAX_REGS + 1];
  memcpy(saved, c->assigned, sizeof saved);
  for (int i = 0; i < n->nkids; i++) {
    nb_Node *s = n->kids[i];
    bool last = i == n->nkids - 1;
    bool valued = (s->flags & NF_EXPRSTMT) || s->kind == N_IF || s->kind == N_TRY;
    if (last && dst >= 0 && valued) node(c, s, dst);
    else {
      node(c, s, -1);
      if (last && dst >= 0) ABC(LOADNIL, dst, 0, 0, s);
    }
    mark_assigned(c, s);
  }
  memcpy(c->assigned, saved, sizeof saved);
}

static void assign(Cs *c, nb_Node *n, int dst) {
  nb_Node *t = n->a;
  int base = c->freereg;
  if (t->kind == N_NAME) {
    if (n->op == OP_NONE) {
      if (t->vkind == V_LOCAL && writes_once(n->b) && !(n->b->kind == N_NAME && n->b->vkind == V_LOCAL && n->b->idx == t->idx)) expr(c, n->b, t->idx);
      else { int r = to_temp(c, n->b); store_name(c, t, r, n); }
    } else if (t->vkind == V_LOCAL) {
      /* a local is updated in place, and a local value read in place: `k += i`
      ** is one UPD (the VM checks both are assigned, the value first) */
      int v = is_local(n->b) ? n->b->idx : to_temp(c, n->b);
      ABC(UPD, t->idx, v, n->op, n);
    } else {
      int cur = newreg(c), v = newreg(c);
      expr(c, n->b, v);         /* the value first, then the target: the language's order */
      load_name(c, t, cur);
      ABC(UPD, cur, v, n->op, n);
      store_name(c, t, cur, n);
    }
  } else if (t->kind == N_INDEX && t->nkids > 8) {
    int obj = to_temp(c, t->a);
    ABC(FAIL, obj, 0, 0, t);
  } else if (n->op != OP_NONE && (t->kind == N_FIELD || t->kind == N_INDEX)) {
    int obj = to_temp(c, t->a);
    if (t->kind == N_INDEX) for (int i = 0; i < t->nkids; i++) index_part(c, t->kids[i]);
    int v = to_temp(c, n->b);
    ABC(UPDX, obj, v, 0, n);
  } else if (t->kind == N_FIELD) {
    /* a local record in place, where reading it after the value changes
    ** nothing: surely assigned (a parameter, or by an earlier statement), or
    ** a value that cannot fail */
    bool inplace = is_local(t->a) && (surely_assigned(c, t->a) || is_pure_leaf(n->b));
    int obj = inplace ? t->a->idx : to_temp(c, t->a), v = to_temp(c, n->b);
    ABC(SETF, obj, v, 0, n);
  } else if (t->kind == N_INDEX && t->nkids == 1 && is_local(t->a) &&
             (surely_assigned(c, t->a) || (is_pure_leaf(t->kids[0]) && is_literal(n->b)))) {
    /* xs[i] = v with xs a local read in place (as GETIL; the value may
    ** not be a variable, whose error would otherwise come first) */
    nb_Node *k = t->kids[0];
    int ri = is_local(k) ? k->idx : (index_part(c, k), c->freereg - 1);
    int kv = literal_k(c, n->b);
    if (kv >= 0 && kv < 256) ABC(SETILK, t->a->idx, ri, kv, n);   /* flags[k] = false: no register */
    else {
      int v = to_temp(c, n->b);
      ABC(SETIL, t->a->idx, ri, v, n);
    }
  } else if (t->kind == N_INDEX && t->nkids == 1) {
    /* r.xs[i] = v, f()[i] = v: SETIT, SETIL with the object a temporary
    ** (moved out); the index a local read in place only where nothing evaluated
    ** after it (the value: a constant or a local) can change it or fail
    ** first */
    int obj = to_temp(c, t->a);
    nb_Node *k = t->kids[0];
    bool kin = is_local(k) && is_pure_leaf(n->b) && (surely_assigned(c, k) || is_literal(n->b));
    int ri = kin ? k->idx : (index_part(c, k), c->freereg - 1);
    int v = to_temp(c, n->b);
    ABC(SETIT, obj, ri, v, n);
  } else if (t->kind == N_INDEX) {
    int obj = to_temp(c, t->a);
    for (int i = 0; i < t->nkids; i++) index_part(c, t->kids[i]);
    int v = to_temp(c, n->b);
    ABC(SETI, obj, v, 0, n);
  } else limit(c, "assignment target");
  c->freereg = base;
  if (dst >= 0) ABC(LOADNIL, dst, 0, 0, n);
}

static Loop *enter_loop(Cs *c, Loop *l) { memset(l, 0, sizeof *l); l->outer = c->loop; l->freereg = c->freereg; l->ntry = c->ntry; l->jstart = c->njl; c->loop = l; return l; }
static void leave_loop(Cs *c, Loop *l, int cont_target, int exit_target) {
  for (int i = l->jstart; i < c->njl; i++) patch_to(c, c->jl[i] >> 1, c->jl[i] & 1 ? cont_target : exit_target);
  c->njl = l->jstart;
  c->loop = l->outer;
}

/* for var in it { body }: a numeric loop over a .. range (FORPREP/FORLOOP:
** no range object), or over any value (ITERPREP/ITERNEXT).  The stepping
** instruction reads its backward jump from the word after it. */
static void for_loop(Cs *c, nb_Node *n) {
  nb_Node *var = n->c, *it = n->a;
  int base = c->freereg;
  bool numeric = it->kind == N_RANGE;
  int s = newreg(c); newreg(c);   /* numeric: counter, bound; else sequence, state, counter */
  if (numeric) { expr(c, it->a, s); expr(c, it->b, s + 1); }
  else { newreg(c); expr(c, it, s); }
  /* a top-level numeric loop steps its global variable in place (FORLOOPG) */
  bool global = numeric && var->vkind == V_GLOBAL && var->idx <= MAX_Bx;
  int vreg = var->vkind == V_LOCAL ? var->idx : global ? 0 : newreg(c);
  int prep = jump(c, numeric ? BC_FORPREP : BC_ITERPREP, s, it);
  Loop l; enter_loop(c, &l);
  int body = c->code->ncode;
  if (var->vkind != V_LOCAL && !global) store_name(c, var, vreg, n);
  node(c, n->b, -1);
  int step = c->code->ncode;
  patch_to(c, prep, step);
  if (global) emit(c, MK_ABx(BC_FORLOOPG, s, var->idx), n);
  else emit(c, MK_ABC(numeric ? BC_FORLOOP : BC_ITERNEXT, s, vreg, 0), n);
  int j = emit(c, MK_ABx(BC_JMP, 0, SBX_BIAS), n);
  patch_to(c, j, body);
  leave_loop(c, &l, step, c->code->ncode);
  if (!numeric) { ABC(CLEAR, s, 0, 0, n); ABC(CLEAR, s + 1, 0, 0, n); }
  c->freereg = base;
}

static void while_loop(Cs *c, nb_Node *n) {
  int base = c->freereg;
  emit(c, MK_ABx(BC_LOOP, 0, SBX_BIAS), n);   /* the first iteration's poll */
  int top = c->code->ncode;
  Loop l; enter_loop(c, &l);
  int jf = jump_if_false(c, n->a);
  c->freereg = base;
  node(c, n->b, -1);
  int back = emit(c, MK_ABx(BC_LOOP, 0, SBX_BIAS), n);
  patch_to(c, back, top);
  patch_here(c, jf);
  leave_loop(c, &l, back, c->code->ncode);
  c->freereg = base;
}

static void loop_jump(Cs *c, nb_Node *n, bool brk) {
  Loop *l = c->loop;
  if (!l) limit(c, "break outside a loop");
  for (int r = l->freereg; r < c->freereg; r++) ABC(CLEAR, r, 0, 0, n);
  for (int t = l->ntry; t < c->ntry; t++) ABC(ENDTRY, 0, 0, 0, n);
  int j = jump(c, BC_JMP, 0, n);
  if (c->njl == c->capjl) {
    c->capjl = c->capjl ? c->capjl * 2 : 16;
    c->jl = realloc(c->jl, sizeof *c->jl * (size_t)c->capjl);
    if (!c->jl) abort();
  }
  c->jl[c->njl++] = j * 2 + !brk;
}

/* a node whose value goes to dst, or is dropped when dst < 0 */
static void node(Cs *c, nb_Node *n, int dst) {
  c->cur = n;
  switch (n->kind) {
  case N_ASSIGN: assign(c, n, dst); return;
  case N_WHILE: while_loop(c, n); break;
  case N_FOR: for_loop(c, n); break;
  case N_BREAK: loop_jump(c, n, true); return;
  case N_CONTINUE: loop_jump(c, n, false); return;
  case N_GLOBAL: break;
  case N_RETURN: {
    if (c->toplevel) limit(c, "return at top level");
    int base = c->freereg, r = newreg(c);
    if (n->a) expr(c, n->a, r); else ABC(LOADNIL, r, 0, 0, n);
    ABC(RET, r, 0, 0, n);
    c->freereg = base;
    return;
  }
  case N_IF: {
    int base = c->freereg;
    int jf = jump_if_false(c, n->a);
    c->freereg = base;
    node(c, n->b, dst);
    if (n->c || dst >= 0) {
      int j = jump(c, BC_JMP, 0, n);
      patch_here(c, jf);
      if (n->c) node(c, n->c, dst); else ABC(LOADNIL, dst, 0, 0, n);
      patch_here(c, j);
    } else patch_here(c, jf);
    return;
  }
  case N_BLOCK: block(c, n, dst); return;
  default:
    if (dst >= 0) { expr(c, n, dst); return; }
    if (n->kind == N_CALL) { call(c, n, -1); return; }
    int base = c->freereg, r = newreg(c);
    expr(c, n, r);
    ABC(CLEAR, r, 0, 0, n);
    c->freereg = base;
    return;
  }
  if (dst >= 0) ABC(LOADNIL, dst, 0, 0, n);
}

/* an expression's value into register dst */
static void expr(Cs *c, nb_Node *n, int dst) {
  int base = c->freereg;
  c->cur = n;
  switch ((nb_NodeKind)n->kind) {
  case N_NUM: ABx(LOADK, dst, addk(c, nb_numk(n->num, (uint32_t)n->idx)), n); return;
  case N_STR: ABx(LOADK, dst, addk(c, nb_strv(n->str)), n); return;
  case N_NIL: ABC(LOADNIL, dst, 0, 0, n); return;
  case N_TRUE: ABC(LOADBOOL, dst, 1, 0, n); return;
  case N_FALSE: ABC(LOADBOOL, dst, 0, 0, n); return;
  case N_NAME: load_name(c, n, dst); return;
  case N_BINARY: binary(c, n, dst); return;
  case N_NEG: case N_NOT: case N_BNOT: {
    int r = to_temp(c, n->a);
    emit(c, MK_ABC(n->kind == N_NEG ? BC_NEG : n->kind == N_NOT ? BC_NOT : BC_BNOT, dst, r, 0), n);
    c->freereg = base;
    return;
  }
  case N_AND: case N_OR:
    expr(c, n->a, dst);
    { int j = jump(c, n->kind == N_AND ? BC_JFK : BC_JTK, dst, n->a);
      expr(c, n->b, dst);
      patch_here(c, j); }
    return;
  case N_CALL: case N_METHOD: call(c, n, dst); return;
  case N_RANGE: {
    int r = to_temp(c, n->a); to_temp(c, n->b);
    ABC(RANGE, dst, r, 0, n);
    c->freereg = base;
    return;
  }
  case N_FIELD: {   /* a local record is read in place (GETF reports it unassigned) */
    int r = is_local(n->a) ? n->a->idx : to_temp(c, n->a);
    ABC(GETF, dst, r, 0, n);
    c->freereg = base;
    return;
  }
  case N_INDEX: {
    /* xs[i] with xs a local read in place: surely assigned (a parameter, or
    ** assigned by an earlier statement), or an index that cannot fail before
    ** xs would have been read */
    if (n->nkids == 1 && is_local(n->a) && (surely_assigned(c, n->a) || is_pure_leaf(n->kids[0]))) {
      nb_Node *k = n->kids[0];
      int ri = is_local(k) ? k->idx : (index_part(c, k), c->freereg - 1);
      ABC(GETIL, dst, n->a->idx, ri, n);
      c->freereg = base;
      return;
    }
    int r = to_temp(c, n->a);
    if (n->nkids == 1) {
      /* one index of a temporary (r.xs[i], f()[i]): GETIT moves the object
      ** out; a local index is read in place (nothing is evaluated between) */
      nb_Node *k = n->kids[0];
      int ri = is_local(k) ? k->idx : (index_part(c, k), c->freereg - 1);
      ABC(GETIT, dst, r, ri, n);
      c->freereg = base;
      return;
    }
    if (n->nkids > 8) { ABC(FAIL, r, 0, 0, n); c->freereg = base; return; }
    for (int i = 0; i < n->nkids; i++) index_part(c, n->kids[i]);
    ABC(GETI, dst, r, 0, n);
    c->freereg = base;
    return;
  }
  case N_LIST: case N_REC: case N_INTERP: {
    int r = newreg(c);
    if (n->nkids > 64) {   /* many items: pushed one by one onto a list, then made the literal */
      ABC(ARGLIST, r, 0, 0, n);
      for (int i = 0; i < n->nkids; i++) {
        if (n->kind == N_INTERP && n->kids[i]->kind == N_STR) continue;
        int t = newreg(c);
        expr(c, n->kids[i], t);
        ABC(ARGPUSH, r, t, 0, n->kids[i]);
        c->freereg = r + 1;
      }
      ABC(LITEND, r, 0, 0, n);
      if (r != dst) ABC(SETL, dst, r, 0, n);
      c->freereg = base;
      return;
    }
    for (int i = 0; i < n->nkids; i++) {
      int k = newreg(c);
      if (!(n->kind == N_INTERP && n->kids[i]->kind == N_STR)) expr(c, n->kids[i], k);
    }
    emit(c, MK_ABC(n->kind == N_LIST ? BC_LIST : n->kind == N_REC ? BC_REC : BC_INTERP, r, 0, 0), n);
    if (r != dst) ABC(SETL, dst, r, 0, n);
    c->freereg = base;
    return;
  }
  case N_FN: ABC(CLOSURE, dst, 0, 0, n); return;
  case N_IF: case N_BLOCK: case N_ASSIGN: case N_WHILE: case N_FOR: case N_RETURN:
  case N_BREAK: case N_CONTINUE: case N_GLOBAL:
    node(c, n, dst); return;
  case N_TRY: {
    int h = newreg(c);
    int t = jump(c, BC_TRY, h, n);
    c->ntry++;
    expr(c, n->a, dst);
    c->ntry--;
    ABC(ENDTRY, 0, 0, 0, n);
    int j = jump(c, BC_JMP, 0, n);
    patch_here(c, t);
    if (n->c) store_name(c, n->c, h, n); else ABC(CLEAR, h, 0, 0, n);
    expr(c, n->b, dst);
    patch_here(c, j);
    c->freereg = base;
    return;
  }
  case N_IMPORT: {
    int r = newreg(c);
    ABC(IMPORT, r, 0, 0, n);
    store_name(c, n->a, r, n);
    c->freereg = base;
    if (dst >= 0) ABC(LOADNIL, dst, 0, 0, n);
    return;
  }
  case N_NOGRAD: case N_AUTOCAST:
    /* a block with a mode: its exit (ENDTRY) is emitted like a try's, and
    ** break/continue out of it leave it the same way (c->ntry); a return
    ** or an error leaves it in the VM (lexec.c's block stack) */
    if (n->kind == N_NOGRAD) ABC(NOGRAD, 0, 0, 0, n);
    else { int r = to_temp(c, n->a); ABC(AUTOCAST, r, 0, 0, n->a); c->freereg = base; }
    c->ntry++;
    expr(c, n->kind == N_NOGRAD ? n->a : n->b, dst);
    c->ntry--;
    ABC(ENDTRY, 0, 0, 0, n);
    return;
  case N_SLICE: ABC(FAIL, dst, 0, 0, n); return;   /* a:b outside [ ]: an error when run */
  case N_SPREAD: limit(c, "*xs outside a call's arguments");
  }
  limit(c, "an unknown syntax node");
}

void nbI_code_free(nb_Code *k) {
  if (!k) return;
  for (int i = 0; i < k->nk; i++) nb_decref(k->k[i]);
  free(k->k); free(k->code); free(k->nodes); free(k);
}

/* A function's prologue: each parameter with a default that the call left
** unassigned gets it, evaluated in the callee's frame after the arguments
** (so a default may use an earlier parameter), into the parameter's cell
** when a closure captures it.  A call that bound every parameter
** positionally enters after it (code->body). */
static void prologue(Cs *c, const nb_Proto *p) {
  for (int i = 0; i < p->nparams; i++) {
    nb_Node *d = p->defaults ? p->defaults[i] : NULL;
    if (!d) continue;
    bool cell = false;
    for (int j = 0; j < p->ncells; j++) if (p->cellslots[j] == i) cell = true;
    int base = c->freereg;
    int skip = jump(c, BC_JDEF, i, d);
    int t = to_temp(c, d);
    emit(c, MK_ABC(cell ? BC_SETCELL : BC_SETL, i, t, 0), d);
    patch_here(c, skip);
    c->freereg = base;
  }
  c->code->body = c->code->ncode;
}

/* A function body's value, returned: an if/else or a block in tail
** position returns from each branch (no jump to a shared RET), so
** `if n < 2 { n } else { ... }` costs a base case three instructions. */
static void ret_expr(Cs *c, nb_Node *n) {
  int base = c->freereg;
  c->cur = n;
  if (n->kind == N_IF && n->c) {
    int jf = jump_if_false(c, n->a);
    c->freereg = base;
    ret_expr(c, n->b);
    patch_here(c, jf);
    ret_expr(c, n->c);
    return;
  }
  if (n->kind == N_BLOCK && n->nkids > 0) {
    nb_Node *last = n->kids[n->nkids - 1];
    if ((last->flags & NF_EXPRSTMT) || last->kind == N_IF || last->kind == N_TRY) {
      bool saved[MAX_REGS + 1];
      memcpy(saved, c->assigned, sizeof saved);
      for (int i = 0; i < n->nkids - 1; i++) { node(c, n->kids[i], -1); mark_assigned(c, n->kids[i]); }
      ret_expr(c, last);
      memcpy(c->assigned, saved, sizeof saved);
      return;
    }
  }
  if (is_local(n) && base == c->code->nlocals) {   /* `n` as the value: RET reads the local (no GETL) */
    ABC(RET, n->idx, 1, 0, n);
    return;
  }
  int r = newreg(c);
  expr(c, n, r);
  ABC(RET, r, 0, 0, n);
  c->freereg = base;
}

/* The last pass: a comparison whose next instruction is the JF that tests
** its result becomes the fused instruction (lexec.c's COMPAREJ), so the VM
** does not look at the next instruction to find out.  Jumps into the JF
** still run it alone; the comparison's own operands are unchanged. */
static void fuse_compares(nb_Code *k) {
  for (int pc = 0; pc + 1 < k->ncode; pc++) {
    nb_Instr i = k->code[pc], nx = k->code[pc + 1];
    int op = GET_OP(i);
    if (GET_OP(nx) != BC_JF || GET_A(nx) != GET_A(i)) continue;
    if (op >= BC_EQK && op <= BC_GEK) op = BC_EQKJ + (op - BC_EQK);
    else if (op >= BC_EQ && op <= BC_GE) op = BC_EQJ + (op - BC_EQ);
    else continue;
    k->code[pc] = (i & ~(nb_Instr)0xff) | (nb_Instr)op;
  }
}

static nb_Code *compile(nb_Chunk *chunk, nb_Node *body, int nlocals, bool toplevel, const char *name, const nb_Proto *p, const char **why, const nb_Node **at) {
  Cs cs; memset(&cs, 0, sizeof cs);
  Cs *c = &cs;   /* the emit macros' name */
  nb_Code *volatile k = calloc(1, sizeof *k);
  if (!k) abort();
  cs.code = k; k->chunk = chunk; k->name = name;
  k->nlocals = nlocals; k->nregs = nlocals;
  cs.freereg = nlocals; cs.toplevel = toplevel; cs.cur = body;
  if (nlocals > MAX_REGS) { *why = "more than 250 local variables in one function"; *at = body; nbI_code_free(k); return NULL; }
  if (setjmp(cs.jb)) { *why = cs.why; *at = cs.cur; free(cs.jl); nbI_code_free(k); return NULL; }
  k->fastcall = p && !p->variadic && !p->ncells ? p->nparams : -1;
  if (p) { prologue(c, p); cs.nparams = p->nparams; for (int i = 0; i < p->nparams && i <= MAX_REGS; i++) cs.assigned[i] = true; }
  int r = newreg(c);
  if (toplevel) { node(c, body, r); ABC(RET, r, 0, 0, body); }
  else { c->freereg = r; ret_expr(c, body); }
  fuse_compares(k);
  free(cs.jl);
  stats_count();
  return k;
}

nb_Code *nbI_proto_code(nb_VM *vm, nb_Proto *p) {
  (void)vm;
  if (p->code || p->vm_why) return p->code;
  p->code = compile(p->chunk, p->body, p->nlocals, false, nbP_proto_name(p), p, &p->vm_why, &p->vm_at);
  return p->code;
}

nb_Code *nbI_compile_stmt(nb_VM *vm, nb_Chunk *chunk, nb_Node *stmt, const char **why, const nb_Node **at) {
  (void)vm;
  return compile(chunk, stmt, 0, true, "<main>", NULL, why, at);
}

/* Code past one of the bytecode's limits (registers, constants, jump
** lengths) is reported before it runs, as a syntax error would be. */
int nbI_limit_error(nb_VM *vm, nb_Chunk *chunk, const nb_Node *at, const char *why) {
  nb_error_kind(vm, "SyntaxError", "too large to compile: %s", why);
  if (at) nbE_locate(vm, chunk, at);
  return NB_ERR;
}
int nbI_proto_error(nb_VM *vm, nb_Proto *p) { return nbI_limit_error(vm, p->chunk, p->vm_at, p->vm_why); }
