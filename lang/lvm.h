/*
** lvm.h — the interpreter's internal structures, shared by the files of lang/:
** the syntax tree, function prototypes, modules, the VM, builtins, errors.
** Front ends use nabla.h; only lang/ (and lang's tests) include this.
*/
#ifndef LVM_H
#define LVM_H

#include <signal.h>
#include "nabla.h"
#include "lobject.h"
#include "llex.h"

/* ------------------------------------------------------------ syntax tree */
typedef enum {
  N_NUM, N_STR, N_NIL, N_TRUE, N_FALSE, N_INTERP, N_LIST, N_REC,
  N_NAME, N_NEG, N_NOT, N_BINARY, N_AND, N_OR, N_RANGE,
  N_CALL, N_METHOD, N_INDEX, N_SLICE, N_FIELD,
  N_ASSIGN, N_FN, N_IF, N_WHILE, N_FOR, N_BLOCK,
  N_BREAK, N_CONTINUE, N_RETURN, N_TRY, N_IMPORT, N_GLOBAL, N_NOGRAD, N_AUTOCAST,
  N_SPREAD,                     /* *xs among a call's arguments: a = the list */
} nb_NodeKind;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_POW, OP_MATMUL,
               OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
               OP_IDIV /* // floor division */, OP_NONE } nb_BinOp;

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
#define NB_MAX_PARAMS 16   /* named parameters of one builtin */
typedef int (*nb_CFunc)(nb_VM *vm, nb_Value *args, int nargs, nb_Value *out);
struct nb_Builtin {
  const char *name;
  nb_CFunc fn;
  const char *params;   /* "x, axis=nil, keepdims=false"; "*args" for variadic; "**kw" collects extra keywords */
  const char *doc;      /* one line */
  /* filled by nbC_register from params: */
  int nparams, nrequired; bool variadic;
  int kwrest;           /* index of a "**name" parameter collecting other keywords into a record, or -1 */
  /* fn == NULL: a named value.  If `value` is set it makes the value (e.g. the
  ** `cuda` record), else params holds a number's text (pi, inf, nan). */
  int (*value)(nb_VM *vm, nb_Value *out);
  const char *pnames[NB_MAX_PARAMS];
  nb_Value pdefaults[NB_MAX_PARAMS];
};
/* Registers a NULL-terminated array of builtins (kept by pointer; must be static). */
void nbC_register(nb_Builtin *table);
void nbC_prepare(nb_Builtin *table);   /* parses params of builtins used only as values */
int  nbC_lookup(const char *name, size_t len);     /* index or -1 */
const nb_Builtin *nbC_at(int idx);
int  nbC_count(void);
const char *nbC_name(const nb_Builtin *b);
void nbopen_base(void);   /* registers lang's own builtins (idempotent) */

/* ------------------------------------------------------------ VM */
enum { NB_OK = 0, NB_ERR = 1, NB_BREAK = 2, NB_CONTINUE = 3, NB_RETURN = 4 };

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
  nb_Value tensor_state;                    /* reserved for tensor bindings */
};

/* resolver (lresolve.c) */
int  nbK_resolve(nb_VM *vm, nb_Chunk *c, nb_Node *prog, nb_Module *mod);
int  nbK_resolve_in_scope(nb_VM *vm, nb_Chunk *c, nb_Node *fnexpr, nb_Module *mod, nb_Str **names, int n, nb_Proto *holder);

/* evaluation */
int  nbV_run_program(nb_VM *vm, nb_Chunk *chunk, nb_Node *prog, nb_Module *mod, int flags);
int  nbV_call(nb_VM *vm, nb_Value fn, nb_Value *args, int nargs, nb_Value *out);
int  nbV_interrupt_error(nb_VM *vm);   /* consumes vm->interrupted: raises the Interrupted error */
int  nbV_call_kw(nb_VM *vm, nb_Value fn, nb_Value *args, int npos, nb_Str **kwnames, int nkw, nb_Value *out);
int  nbM_import(nb_VM *vm, nb_Str *name, nb_Value *out);
void nbW_display(nb_VM *vm, nb_Value v);
/* as_result: the chunk's value (sink->result); display_id/update: Jupyter display updates */
void nbW_show(nb_VM *vm, nb_Value v, bool as_result, const char *display_id, bool update);
int  nbV_truthy(nb_VM *vm, nb_Value v, bool *out);
int  nbV_binop(nb_VM *vm, int op, nb_Value a, nb_Value b, nb_Value *out);
int  nbV_index(nb_VM *vm, nb_Value obj, nb_Value *idx, int nidx, nb_Value *out);

/* errors (lerror.c).  nb_error* set vm->err and return NB_ERR. */
int  nb_error(nb_VM *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int  nb_error_kind(nb_VM *vm, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int  nb_raise(nb_VM *vm, nb_Value errval);       /* takes the reference */
void nbE_locate(nb_VM *vm, nb_Chunk *chunk, const nb_Node *n);
void nbE_add_frame(nb_VM *vm, const char *fname, nb_Chunk *chunk, const nb_Node *n);
bool nbE_catchable(nb_VM *vm);
void nbE_finish(nb_VM *vm);                      /* turns vm->err into vm->last */
char *nbE_syntax_report(const char *filename, const char *src, size_t len, uint32_t pos, uint32_t end, int line, int col, const char *msg);
void nbE_source_caret(nb_Buf *b, const char *src, size_t len, uint32_t pos, uint32_t end, int line);

/* the syntax error produced by the parser: carried as a regular error value */
int  nbP_syntax_error(nb_VM *vm, nb_Chunk *c, uint32_t pos, uint32_t end, int line, int col, const char *fmt, ...);

/* tensors (ltensor.c): operators and printing delegate here */
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
void nbT_display(nb_VM *vm, nb_Value t, nb_Buf *html);
void nbT_set_grad_enabled(bool on);
/* blocks (ltgrad.c): no_grad and autocast set a thread-local mode and put the
** previous one back on every way out of the block */
bool nbT_swap_grad_enabled(bool on);             /* returns the previous mode */
int  nbT_autocast_arg(nb_VM *vm, nb_Value v, int *dtype);  /* "bf16"/"f16" -> dtype; nil/false/"off" -> -1 */
int  nbT_swap_autocast(int dtype);               /* returns the previous dtype (-1 = off) */
void nbopen_tensor(void);

int  nbT_serialize(nb_VM *vm, nb_Value t, nb_Buf *out);
int  nbT_deserialize(nb_VM *vm, const unsigned char **p, const unsigned char *end, nb_Value *out);
/* inspect text for a tensor (shape, dtype, device, min/max/mean) */
void nbT_describe(nb_VM *vm, nb_Value t, nb_Buf *out);

/* serialization (lserial.c) */
int  nbZ_serialize(nb_VM *vm, nb_Value v, nb_Buf *out);
int  nbZ_deserialize(nb_VM *vm, const char *data, size_t len, nb_Value *out);

int  nbV_make_closure(nb_VM *vm, nb_Frame *f, nb_Proto *p, nb_Value *out);
int  nbS_split(nb_VM *vm, nb_Value s, nb_Value sep, nb_Value *out);
/* the last syntax error when parsing without a VM (for is_complete) */
extern __thread uint32_t nbP_last_error_pos;
extern __thread bool nbP_last_error_at_eof;

/* plotting builtins (lplot.c) */
void nbopen_plot(void);
void nbopen_progress(void);   /* lprogress.c: progress() */
void nbopen_files(void);      /* lfiles.c: read_text, write_text, lines, ... */

/* size limits (lobject.h: NB_MAX_STR, NB_MAX_LIST): the errors naming the
** operation and the size, and a checked buffer -> string */
int  nbS_too_long(nb_VM *vm, const char *op, size_t len);
int  nbS_from_buf(nb_VM *vm, const char *op, const nb_Buf *b, nb_Value *out);
int  nbL_too_long(nb_VM *vm, const char *op, size_t n);

/* misc */
nb_Str *nbS_tostr(nb_Value v);     /* print form as a string object */
void nbW_write(nb_VM *vm, int stream, const char *s, size_t n);

#endif
