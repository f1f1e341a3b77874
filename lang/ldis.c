/*
** ldis.c — the disassembler: prints a compiled body (nabla --dis FILE, and
** for debugging the compiler).  One line per instruction: index, source
** line, opcode, operands, and what they name (constants, globals' names,
** jump targets).
*/
#include <stdio.h>
#include <string.h>
#include "lopcodes.h"

static const char *const names[BC__COUNT] = {
#define X(name, ops, doc) #name,
  NB_OPCODES(X)
#undef X
};
static const char *const forms[BC__COUNT] = {
#define X(name, ops, doc) ops,
  NB_OPCODES(X)
#undef X
};

const char *nbI_opname(int op) { return op >= 0 && op < BC__COUNT ? names[op] : "?"; }

void nbI_dis(nb_Buf *b, const nb_Code *c) {
  char line[256];
  snprintf(line, sizeof line, "%s: %d instructions, %d registers (%d locals), %d constants\n", c->name ? c->name : "?", c->ncode, c->nregs, c->nlocals, c->nk);
  nbB_add(b, line, strlen(line));
  for (int pc = 0; pc < c->ncode; pc++) {
    nb_Instr i = c->code[pc];
    int op = GET_OP(i);
    const nb_Node *n = c->nodes[pc];
    const char *form = forms[op];
    int len;
    if (!strcmp(form, "sBx")) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s -> %d", pc, n ? n->line : 0, names[op], pc + 1 + GET_sBx(i));
    else if (op == BC_FORLOOPG && pc + 1 < c->ncode) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d %d -> %d", pc, n ? n->line : 0, names[op], GET_A(i), GET_Bx(i), pc + 2 + GET_sBx(c->code[pc + 1]));
    else if (strstr(form, "sBx") && op != BC_FORLOOP && op != BC_ITERNEXT) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d -> %d", pc, n ? n->line : 0, names[op], GET_A(i), pc + 1 + GET_sBx(i));
    else if ((op == BC_FORLOOP || op == BC_ITERNEXT) && pc + 1 < c->ncode) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d %d -> %d", pc, n ? n->line : 0, names[op], GET_A(i), GET_B(i), pc + 2 + GET_sBx(c->code[pc + 1]));
    else if (strstr(form, "Bx")) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d %d", pc, n ? n->line : 0, names[op], GET_A(i), GET_Bx(i));
    else if (strstr(form, "C")) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d %d %d", pc, n ? n->line : 0, names[op], GET_A(i), GET_B(i), GET_C(i));
    else if (strstr(form, "B")) len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d %d", pc, n ? n->line : 0, names[op], GET_A(i), GET_B(i));
    else len = snprintf(line, sizeof line, "%5d  [%3d] %-9s %d", pc, n ? n->line : 0, names[op], GET_A(i));
    nbB_add(b, line, (size_t)len);
    /* what the operands name */
    char note[128] = "";
    if (op == BC_LOADK) {
      nb_Buf v = {0};
      nb_tostring(&v, c->k[GET_Bx(i)], true);
      snprintf(note, sizeof note, "\t; %.*s", v.n > 60 ? 60 : (int)v.n, v.p ? v.p : "");
      nbB_free(&v);
    } else if (op >= BC_ADDK && op <= BC_GEK) {
      nb_Buf v = {0};
      nb_tostring(&v, c->k[GET_C(i)], true);
      snprintf(note, sizeof note, "\t; K %.*s", v.n > 60 ? 60 : (int)v.n, v.p ? v.p : "");
      nbB_free(&v);
    } else if ((op == BC_GETG || op == BC_SETG || op == BC_GETL || op == BC_GETCELL || op == BC_GETCAP) && n && n->kind == N_NAME && n->str)
      snprintf(note, sizeof note, "\t; %s", n->str->data);
    else if ((op == BC_SETG || op == BC_SETL || op == BC_SETCELL || op == BC_SETCAP) && n && n->kind == N_ASSIGN && n->a->kind == N_NAME)
      snprintf(note, sizeof note, "\t; %s", n->a->str->data);
    else if (op == BC_GETF && n && n->str) snprintf(note, sizeof note, "\t; .%s", n->str->data);
    else if (op == BC_SETF && n && n->a->str) snprintf(note, sizeof note, "\t; .%s", n->a->str->data);
    else if (op == BC_CLOSURE && n && n->proto) snprintf(note, sizeof note, "\t; fn %s", nbP_proto_name(n->proto));
    else if (op == BC_FORLOOPG && n && n->kind == N_FOR && n->c && n->c->str) snprintf(note, sizeof note, "\t; %s", n->c->str->data);
    nbB_add(b, note, strlen(note));
    nbB_add(b, "\n", 1);
    if (op == BC_FORLOOP || op == BC_FORLOOPG || op == BC_ITERNEXT) pc++;   /* its jump word */
  }
}

int nb_disassemble_value(nb_VM *vm, nb_Value fn, nb_Buf *out) {
  nb_state_bind(vm);
  if (fn.t != NB_TFUNC)
    return nb_error_kind(vm, "TypeError", "expected a nabla function, got %s", fn.t == NB_TBUILTIN ? "a builtin (written in C: no bytecode)" : nb_typename(fn));
  nb_Proto *p = nb_func(fn)->proto;
  nb_Code *k = nbI_proto_code(vm, p);
  if (!k) return nbI_proto_error(vm, p);
  char line[256];
  snprintf(line, sizeof line, "-- fn %s at %s:%d\n", nbP_proto_name(p), p->chunk && p->chunk->filename ? p->chunk->filename : "?", p->line);
  nbB_add(out, line, strlen(line));
  nbI_dis(out, k);
  return NB_OK;
}

/* nabla --dis FILE: every top-level statement and function of src, compiled
** as a run would (resolved against the main module, not run).  Returns the
** text (malloc'd), or NULL after reporting a syntax error. */
char *nb_disassemble(nb_VM *vm, const char *src, size_t len, const char *filename) {
  nb_state_bind(vm);
  nb_Node *prog = NULL;
  nb_Chunk *c = nbP_parse(vm, src, len, filename, &prog);
  if (!prog || nbK_resolve(vm, c, prog, vm->main)) { nbE_finish(vm); nbP_chunk_release(c); return NULL; }
  nb_Buf b = {0};
  char line[256];
  for (int i = 0; i < prog->nkids; i++) {
    const char *why = NULL; const nb_Node *at = NULL;
    nb_Code *k = nbI_compile_stmt(vm, c, prog->kids[i], &why, &at);
    snprintf(line, sizeof line, "-- top-level statement at line %d\n", prog->kids[i]->line);
    nbB_add(&b, line, strlen(line));
    if (k) { nbI_dis(&b, k); nbI_code_free(k); }
    else { snprintf(line, sizeof line, "  too large to compile: %s\n", why); nbB_add(&b, line, strlen(line)); }
  }
  for (int i = 0; i < c->nprotos; i++) {
    nb_Proto *p = c->protos[i];
    snprintf(line, sizeof line, "-- fn %s at line %d\n", nbP_proto_name(p), p->line);
    nbB_add(&b, line, strlen(line));
    nb_Code *k = nbI_proto_code(vm, p);
    if (k) nbI_dis(&b, k);
    else { snprintf(line, sizeof line, "  too large to compile: %s\n", p->vm_why); nbB_add(&b, line, strlen(line)); }
  }
  nbP_chunk_release(c);
  nbB_add(&b, "", 1);
  return b.p;
}
