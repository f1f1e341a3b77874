/*
** lvm.h — the interpreter's internal structures, shared by the files of lang/:
** the syntax tree, function prototypes, modules, the VM, errors.
** Front ends use nabla.h, libraries of builtins (lang/lib/, dist/) nbapi.h;
** only the core files of lang/ include this (lang/lib/ does not).
*/
#ifndef LVM_H
#define LVM_H

#include <signal.h>
#include "nbapi.h"    /* the public extension API: values, builtins, errors, calls */
#include "llex.h"
#include "ltvalue.h"

/* ------------------------------------------------------------ syntax tree */
typedef enum {
  N_NUM, N_STR, N_NIL, N_TRUE, N_FALSE, N_INTERP, N_LIST, N_REC,
  N_NAME, N_NEG, N_NOT, N_BINARY, N_AND, N_OR, N_RANGE,
  N_CALL, N_METHOD, N_INDEX, N_SLICE, N_FIELD,
  N_ASSIGN, N_FN, N_IF, N_WHILE, N_FOR, N_BLOCK,
  N_BREAK, N_CONTINUE, N_RETURN, N_TRY, N_IMPORT, N_GLOBAL, N_NOGRAD, N_AUTOCAST,
  N_SPREAD,                     /* *xs among a call's arguments: a = the list */
} nb_NodeKind;

/* nb_BinOp, the operator codes: nbapi.h */

/* where a name lives, decided by the resolver */
typedef enum { V_UNRESOLVED, V_LOCAL, V_CELL, V_CAP, V_GLOBAL } nb_VarKind;

typedef struct nb_Proto nb_Proto;
typedef struct nb_Chunk nb_Chunk;
typedef struct nb_Node nb_Node;
struct nb_Node {
  uint8_t kind, op, vkind, flags;
  int32_t idx;          /* slot, capture index or global index; N_NUM: its kind, NB_KINT or NB_KFLOAT */
  int32_t bidx;         /* for globals: builtin of the same name (fallback), or -1 */
  uint32_t pos, end;    /* source span, for carets */
  int line, col;
  nb_Node *a, *b, *c;   /* children: operands, target/value, cond/then/else, ... */
  nb_Node **kids; int nkids;   /* list items, call args (positional first), block statements */
  int npos;             /* calls: number of positional args (the rest are keywords) */
  nb_Str **names;       /* record keys, keyword argument names, global declarations */
  nb_Str *str;          /* string literal, variable name, field name, module name */
  double num;
  nb_Proto *proto;      /* N_FN */
};
enum { NF_EXPRSTMT = 1, NF_FNDEF = 2, NF_TOPLEVEL = 4, NF_FLOATLIT = 8 /* N_NUM: 1.0, .5, 2e3 (a float; else an int) */ };

/* A parsed unit of source: the nodes live in its arena; the source text is kept
** for error carets and for serializing functions.  Refcounted by the protos
** made from it and by whoever is running it. */
struct nb_Chunk {
  int rc;
  char *src; size_t len;
  char *filename;
  struct ArenaBlock *arena;
  nb_Proto **protos; int nprotos, capprotos;   /* protos created by the parser */
  nb_Str **owned; int nowned, capowned;        /* names and literals the nodes point to */
};

typedef struct nb_CapDesc { uint8_t from_cap; int32_t idx; } nb_CapDesc;

struct nb_Proto {
  int rc;
  nb_Chunk *chunk;
  nb_Str *name, *doc;
  int nparams; nb_Str **params; nb_Node **defaults;   /* defaults[i] may be NULL */
  bool variadic;                /* fn f(a, *rest): the last param gathers extra positional args in a list */
  int nlocals;
  nb_Str **localnames;          /* nlocals entries, for completion and debugging */
  int ncells; int32_t *cellslots;   /* locals that closures capture: hold an nb_Cell */
  int ncaps; nb_CapDesc *caps; nb_Str **capnames;
  nb_Node *body;
  uint32_t src_start, src_end;  /* the text of the `fn ...` form */
  int line;
  int ninner_protos;            /* scratch for the resolver */
  bool resolved;
};

nb_Chunk *nbP_parse(nb_VM *vm, const char *src, size_t len, const char *filename, nb_Node **out_program);
void nbP_chunk_release(nb_Chunk *c);
void nbP_proto_release(nb_Proto *p);
const char *nbP_proto_name(const nb_Proto *p);

/* ------------------------------------------------------------ modules */
typedef struct nb_Module {
  nb_Obj h;
  nb_Str *name, *path;
  int n, cap;
  nb_Str **names;       /* interned */
  nb_Value *vals;       /* NB_TUNDEF until assigned */
  int32_t *index; int icap;   /* open-addressing map name -> slot */
  nb_Chunk **chunks; int nchunks, capchunks;   /* source run in this module */
} nb_Module;

nb_Module *nbM_new(const char *name, const char *path);
void nbM_free(nb_Module *m);
const char *nbM_name(const nb_Module *m);
int nbM_global_slot(nb_Module *m, nb_Str *name);     /* creates the slot if needed */
int nbM_global_find(const nb_Module *m, const char *name, size_t len);

/* ------------------------------------------------------------ builtins */
/* nb_Builtin and its registration (nbC_*): nbapi.h */
void nbC_freeze(void);   /* closes registration (nb_vm_new): the index is read-only from then on */

/* ------------------------------------------------------------ VM */
enum { NB_BREAK = 2, NB_CONTINUE = 3, NB_RETURN = 4 };   /* after NB_OK, NB_ERR (nbapi.h) */

typedef struct nb_Frame {
  nb_Value *locals;
  nb_Chunk *chunk;      /* source of the running code, for error locations */
  nb_Func *fn;          /* NULL at top level */
  nb_Module *mod;
  const nb_Node *call;  /* the call site, for stack traces */
  struct nb_Frame *parent;
} nb_Frame;

struct nb_VM {
  nb_Sink *sink;
  nb_Module *main;
  nb_Module **mods; int nmods, capmods;     /* imported modules, by name */
  char **paths; int npaths;
  nb_Value *stack, *sp, *stack_end;        /* locals of active calls */
  int depth, max_depth;
  char *cstack_base; size_t cstack_limit;
  volatile sig_atomic_t interrupted;
  volatile sig_atomic_t poll;               /* nonzero: check interrupt/step limit */
  uint64_t steps, step_limit;
  nb_Value err;                             /* the error being raised (a record) */
  bool err_located;
  nb_Value ret;                             /* value of a `return` in flight */
  nb_Frame *frame;                          /* innermost active frame */
  int grad_disabled;                        /* no_grad nesting */
  nb_ErrorInfo last; char *last_name, *last_msg, *last_report;
  int echo_flags;
  nb_Value tensor_state;                    /* the libraries' per-VM data (nb_vm_libdata, lapi.c) */
};

/* resolver (lresolve.c) */
int  nbK_resolve(nb_VM *vm, nb_Chunk *c, nb_Node *prog, nb_Module *mod);
int  nbK_resolve_in_scope(nb_VM *vm, nb_Chunk *c, nb_Node *fnexpr, nb_Module *mod, nb_Str **names, int n, nb_Proto *holder);

/* evaluation */
int  nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags);
int  nbM_import(nb_VM *vm, nb_Str *name, nb_Value *out);
void nbW_display(nb_VM *vm, nb_Value v);

/* errors (lerror.c).  nb_error* set vm->err and return NB_ERR. */
void nbE_locate(nb_VM *vm, nb_Chunk *chunk, const nb_Node *n);
void nbE_add_frame(nb_VM *vm, const char *fname, nb_Chunk *chunk, const nb_Node *n);
bool nbE_catchable(nb_VM *vm);
char *nbE_syntax_report(const char *filename, const char *src, size_t len, uint32_t pos, uint32_t end, int line, int col, const char *msg);
void nbE_source_caret(nb_Buf *b, const char *src, size_t len, uint32_t pos, uint32_t end, int line);

/* the syntax error produced by the parser: carried as a regular error value */
int  nbP_syntax_error(nb_VM *vm, nb_Chunk *c, uint32_t pos, uint32_t end, int line, int col, const char *fmt, ...);

/* tensor values: the hooks the evaluator calls for tensor operands: ltvalue.h */

int  nbV_make_closure(nb_VM *vm, nb_Frame *f, nb_Proto *p, nb_Value *out);
/* the last syntax error when parsing without a VM (for is_complete) */
extern __thread uint32_t nbP_last_error_pos;
extern __thread bool nbP_last_error_at_eof;

/* registers the standard libraries' builtins (lib/linit.c): once, from
** nb_vm_new; the libraries' openers are declared in lib/nblib.h */
void nbopen_libs(void);

/* errors, calls, output, serialization, size limits: nbapi.h (public) */

#endif
