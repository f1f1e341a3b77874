/*
** lparse.c — recursive-descent parser: tokens to a syntax tree in the chunk's
** arena.  The first syntax error stops the parse (longjmp back to nbP_parse);
** everything allocated so far belongs to the chunk, so nothing leaks.
**
** Precedence, lowest first:  or | and | not | comparisons | .. | `|` | ^ |
** & | << >> | + - | * / % @ | unary - ~ | ** (right) | postfix: call, index,
** .field, .method()  (the bitwise operators as Python orders them)
**
** Who owns what.  Nodes, node vectors and per-node arrays live in the
** chunk's arena and go in one free.  The strings the nodes point to (names,
** literals) are counted: the chunk holds one reference to each (own()),
** dropped by nbP_chunk_release.  Names are interned (tok_name) because the
** resolver and the call path compare names by pointer.  Protos are listed in
** the chunk; a function value keeps its proto alive through the chunk's count,
** which also keeps the source text that error carets and serialization use.
**
** Positions.  Every node records the byte span of its text (pos, end) and the
** line/column of its first token: errors point a caret at the span, and a
** function's span (src_start, src_end) is the text serialization re-parses.
**
** A syntax error without a VM (nb_is_complete) leaves its position in
** thread-local nbP_last_error_pos/at_eof (lerror.c): "incomplete" is an error
** at the end of the input.  The parser's own state is all in its Parser.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lopcodes.h"

#define MAX_NESTING 200

typedef struct ArenaBlock { struct ArenaBlock *next; size_t used, cap; char data[]; } ArenaBlock;

static void *arena_alloc(nb_Chunk *c, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ArenaBlock *b = c->arena;
  if (!b || b->used + n > b->cap) {
    size_t cap = n > 16384 ? n : 16384;
    ArenaBlock *nb = malloc(sizeof(ArenaBlock) + cap);
    if (!nb) abort();
    nb->next = b; nb->used = 0; nb->cap = cap; c->arena = nb; b = nb;
  }
  void *p = b->data + b->used; b->used += n;
  memset(p, 0, n);
  return p;
}

/* One token of lookahead (cur, nxt); depth counts nested blocks and
** parentheses so hostile input cannot recurse the C stack away. */
typedef struct Parser {
  nb_VM *vm;                /* NULL when only asking whether input is complete */
  nb_Chunk *c;
  nb_Lexer lx;
  nb_Token cur, nxt;
  uint32_t prev_end;    /* end offset of the last consumed token */
  int depth;
  jmp_buf jb;
} Parser;

/* -------------------------------------------------------- chunk lifetime */

static void own(Parser *p, nb_Str *s) {
  nb_Chunk *c = p->c;
  if (c->nowned == c->capowned) {
    c->capowned = c->capowned ? c->capowned * 2 : 32;
    c->owned = realloc(c->owned, sizeof(nb_Str *) * (size_t)c->capowned);
    if (!c->owned) abort();
  }
  c->owned[c->nowned++] = s;
}


void nbP_chunk_release(nb_Chunk *c) {
  if (!c || --c->rc > 0) return;
  for (int i = 0; i < c->nprotos; i++) {
    nb_Proto *pr = c->protos[i];
    free(pr->params); free(pr->defaults); free(pr->localnames);
    free(pr->cellslots); free(pr->caps);
    nbI_code_free(pr->code);
    if (pr->capnames) { for (int j = 0; j < pr->ncaps; j++) nb_decref(nb_strv(pr->capnames[j])); free(pr->capnames); }
    if (pr->doc) nb_decref(nb_strv(pr->doc));
    free(pr);
  }
  free(c->protos);
  for (int i = 0; i < c->nowned; i++) nb_decref(nb_strv(c->owned[i]));
  free(c->owned);
  ArenaBlock *b = c->arena;
  while (b) { ArenaBlock *n = b->next; free(b); b = n; }
  free(c->src); free(c->filename);
  free(c);
}

/* Protos do not own the chunk individually: a function value keeps its proto
** alive through a count on the chunk (all protos of a chunk share it). */
void nbP_proto_release(nb_Proto *p) { nbP_chunk_release(p->chunk); }
const char *nbP_proto_name(const nb_Proto *p) { return p->name ? p->name->data : "anonymous"; }

/* -------------------------------------------------------- errors */
static void perr_at(Parser *p, nb_Token t, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
static void perr_at(Parser *p, nb_Token t, const char *fmt, ...) {
  char msg[256]; va_list ap;
  va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  nbP_syntax_error(p->vm, p->c, t.pos, t.pos + (t.len ? t.len : 1), t.line, t.col, "%s", msg);
  longjmp(p->jb, 1);
}

/* A scanner error.  An unterminated string is reported at its opening
** delimiter, named with its line and column: a triple-quoted string that
** never closes runs to the end of the file, far from where the fix goes. */
static void lex_error(Parser *p, nb_Token t) __attribute__((noreturn));
static void lex_error(Parser *p, nb_Token t) {
  if (!t.unterminated) perr_at(p, t, "%s", t.msg);
  char q = p->c->src[t.pos];
  const char *open = t.len == 3 ? (q == '"' ? "\"\"\"" : "'''") : (q == '"' ? "\"" : "'");
  if (t.unterminated & NB_UNTERMINATED_BRACE)
    perr_at(p, t, "unterminated string: the %s at line %d, column %d is never closed: a '{' in it starts an "
            "interpolation that does not end (write \\{ for a literal brace)", open, t.line, t.col);
  if (t.unterminated & NB_UNTERMINATED_LINE)
    perr_at(p, t, "unterminated string: the %s at line %d, column %d is not closed on its line "
            "(a string over several lines is written '''...''' or \"\"\"...\"\"\")", open, t.line, t.col);
  perr_at(p, t, "unterminated string: the %s at line %d, column %d is never closed", open, t.line, t.col);
}

static void advance(Parser *p) {
  p->prev_end = p->cur.pos + p->cur.len;
  p->cur = p->nxt;
  p->nxt = nbX_next(&p->lx);
  if (p->cur.kind == TK_ERROR) lex_error(p, p->cur);
}
static int check(Parser *p, nb_TokKind k) { return p->cur.kind == k; }
static int accept(Parser *p, nb_TokKind k) { if (p->cur.kind == k) { advance(p); return 1; } return 0; }
static const char *describe(Parser *p, nb_Token t, char *buf, size_t n) {
  if (t.kind == TK_NAME || t.kind == TK_NUMBER) snprintf(buf, n, "'%.*s'", (int)(t.len > 40 ? 40 : t.len), p->c->src + t.pos);
  else snprintf(buf, n, "%s", nbX_tokname(t.kind));
  return buf;
}
static void expect(Parser *p, nb_TokKind k, const char *where) {
  if (p->cur.kind != k) {
    char b[64];
    perr_at(p, p->cur, "expected %s %s, found %s", nbX_tokname(k), where, describe(p, p->cur, b, sizeof b));
  }
  advance(p);
}
static void skip_newlines(Parser *p) { while (p->cur.kind == TK_NEWLINE || p->cur.kind == TK_SEMI) advance(p); }
static void enter(Parser *p) { if (++p->depth > MAX_NESTING) perr_at(p, p->cur, "code is nested too deeply (more than %d levels)", MAX_NESTING); }

/* -------------------------------------------------------- nodes */
static nb_Node *node(Parser *p, int kind, nb_Token at) {
  nb_Node *n = arena_alloc(p->c, sizeof(nb_Node));
  n->kind = (uint8_t)kind; n->pos = at.pos; n->end = at.pos + at.len;
  n->line = at.line; n->col = at.col; n->bidx = -1; n->op = OP_NONE;
  return n;
}
static void span_to(nb_Node *n, const nb_Node *last) { if (last && last->end > n->end) n->end = last->end; }

/* growable node list; its storage lives in the arena, so a syntax error
** (longjmp) leaves nothing to free */
typedef struct NodeVec { nb_Node **v; int n, cap; nb_Str **names; } NodeVec;
static void vec_push(Parser *p, NodeVec *vv, nb_Node *n, nb_Str *name) {
  if (vv->n == vv->cap) {
    int cap = vv->cap ? vv->cap * 2 : 8;
    nb_Node **v = arena_alloc(p->c, sizeof(nb_Node *) * (size_t)cap);
    nb_Str **names = arena_alloc(p->c, sizeof(nb_Str *) * (size_t)cap);
    if (vv->n) { memcpy(v, vv->v, sizeof(nb_Node *) * (size_t)vv->n); memcpy(names, vv->names, sizeof(nb_Str *) * (size_t)vv->n); }
    vv->v = v; vv->names = names; vv->cap = cap;
  }
  vv->v[vv->n] = n; vv->names[vv->n] = name; vv->n++;
}
static void vec_finish(Parser *p, NodeVec *vv, nb_Node *into, int with_names) {
  (void)p;
  into->nkids = vv->n;
  into->kids = vv->v;
  if (with_names) into->names = vv->names;
}

static nb_Str *tok_name(Parser *p, nb_Token t) {
  nb_Str *s = nbS_intern(p->c->src + t.pos, t.len);
  own(p, s);
  return s;
}

static nb_Node *expr(Parser *p);
static nb_Node *block(Parser *p);
static nb_Node *statement(Parser *p);
static nb_Node *fn_form(Parser *p, nb_Token at, nb_Str *name);

/* -------------------------------------------------------- strings */
static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

static void put_utf8(nb_Buf *b, unsigned cp) {
  if (cp < 0x80) nbB_putc(b, (char)cp);
  else if (cp < 0x800) { nbB_putc(b, (char)(0xC0 | (cp >> 6))); nbB_putc(b, (char)(0x80 | (cp & 0x3F))); }
  else if (cp < 0x10000) { nbB_putc(b, (char)(0xE0 | (cp >> 12))); nbB_putc(b, (char)(0x80 | ((cp >> 6) & 0x3F))); nbB_putc(b, (char)(0x80 | (cp & 0x3F))); }
  else { nbB_putc(b, (char)(0xF0 | (cp >> 18))); nbB_putc(b, (char)(0x80 | ((cp >> 12) & 0x3F))); nbB_putc(b, (char)(0x80 | ((cp >> 6) & 0x3F))); nbB_putc(b, (char)(0x80 | (cp & 0x3F))); }
}

/* Decodes an escape at s[*i] (just after the backslash). */
static void escape(Parser *p, nb_Token t, const char *s, size_t end, size_t *i, nb_Buf *b) {
  char c = s[*i]; (*i)++;
  switch (c) {
  case 'n': nbB_putc(b, '\n'); break;
  case 't': nbB_putc(b, '\t'); break;
  case 'r': nbB_putc(b, '\r'); break;
  case '0': nbB_putc(b, '\0'); break;
  case '\\': case '"': case '\'': case '{': case '}': nbB_putc(b, c); break;
  case '\n': break;  /* line continuation inside a string */
  case 'x': {
    int h1 = *i < end ? hexval(s[*i]) : -1, h2 = *i + 1 < end ? hexval(s[*i + 1]) : -1;
    if (h1 < 0 || h2 < 0) { nbB_free(b); perr_at(p, t, "invalid \\x escape in string (needs two hex digits)"); }
    nbB_putc(b, (char)(h1 * 16 + h2)); *i += 2; break;
  }
  case 'u': {
    if (*i >= end || s[*i] != '{') { nbB_free(b); perr_at(p, t, "invalid \\u escape in string (use \\u{XXXX})"); }
    (*i)++; unsigned cp = 0; int nd = 0;
    while (*i < end && hexval(s[*i]) >= 0 && nd < 7) { cp = cp * 16 + (unsigned)hexval(s[*i]); (*i)++; nd++; }
    if (*i >= end || s[*i] != '}' || nd == 0 || cp > 0x10FFFF) { nbB_free(b); perr_at(p, t, "invalid \\u{...} escape in string"); }
    (*i)++; put_utf8(b, cp); break;
  }
  default: nbB_free(b); perr_at(p, t, "unknown escape '\\%c' in string", c);
  }
}

static nb_Node *str_node(Parser *p, nb_Token t, nb_Buf *b) {
  nb_Node *n = node(p, N_STR, t);
  n->str = nbS_new(b->p ? b->p : "", b->n); own(p, n->str);
  nbB_free(b);
  return n;
}

/* "text {expr} more": literal pieces and expressions, evaluated and joined
** at run time.  A triple-quoted string (the lexer let it span lines) drops
** a newline right after its opening quotes, as Lua's [[ does, so its text
** may start on the next line. */
static nb_Node *string_lit(Parser *p) {
  nb_Token t = p->cur;
  const char *s = p->c->src;
  /* three quotes always open a triple-quoted string (the lexer's rule), and
  ** a one-quote token never starts with two: '' is a whole token */
  size_t dl = t.len >= 6 && s[t.pos + 1] == s[t.pos] && s[t.pos + 2] == s[t.pos] ? 3 : 1;
  size_t i = t.pos + dl, end = t.pos + t.len - dl;
  int interp = t.kind == TK_STRING;
  advance(p);
  NodeVec parts = {0};
  nb_Buf b = {0};
  int line = t.line; size_t line_start = t.pos - (size_t)(t.col - 1);
  if (dl == 3 && i < end && (s[i] == '\n' || (s[i] == '\r' && i + 1 < end && s[i + 1] == '\n'))) {
    i += s[i] == '\r' ? 2 : 1;
    line++; line_start = i;
  }
  while (i < end) {
    char c = s[i];
    if (c == '\n') { line++; line_start = i + 1; }
    if (c == '\\') {
      if (i + 1 < end && s[i + 1] == '\n') { line++; line_start = i + 2; }   /* a continuation line */
      i++; escape(p, t, s, end, &i, &b); continue;
    }
    if (interp && c == '{') {
      /* the matching } (strings inside the expression may hold braces), found
      ** by the scan the lexer made the token with */
      size_t j = nbX_interp_end(s, end, i + 1);
      if (j >= end) { nbB_free(&b); nb_Token et = t; et.pos = (uint32_t)i; et.len = 1; et.col = (int)(i - line_start) + 1; et.line = line; perr_at(p, et, "unclosed '{' in string interpolation (write \\{ for a literal brace)"); }
      if (b.n) vec_push(p, &parts, str_node(p, t, &b), NULL);
      /* parse s[i+1 .. j) with a sub-parser on the same source text (not
      ** a copy), so the expression's nodes carry their true positions in the
      ** chunk: an error in "{x +}" points into the string where it is
      ** written.  It shares the jmp_buf and the chunk, so its syntax errors
      ** and allocations are handled like the main parser's. */
      Parser sub = *p;
      nbX_init_at(&sub.lx, s, j, i + 1, line, line_start);
      sub.cur = nbX_next(&sub.lx); sub.nxt = nbX_next(&sub.lx);
      if (sub.cur.kind == TK_ERROR) lex_error(p, sub.cur);
      if (sub.cur.kind == TK_EOF) { nb_Token et = t; et.pos = (uint32_t)i; et.len = 2; et.line = line; et.col = (int)(i - line_start) + 1; perr_at(p, et, "empty expression in string interpolation"); }
      memcpy(sub.jb, p->jb, sizeof(jmp_buf));
      nb_Node *e = expr(&sub);
      while (sub.cur.kind == TK_NEWLINE) advance(&sub);
      if (sub.cur.kind != TK_EOF) { char bb[64]; perr_at(p, sub.cur, "unexpected %s in string interpolation", describe(p, sub.cur, bb, sizeof bb)); }
      vec_push(p, &parts, e, NULL);
      for (size_t k = i; k < j; k++) if (s[k] == '\n') { line++; line_start = k + 1; }
      i = j + 1;
      continue;
    }
    nbB_putc(&b, c); i++;
  }
  if (parts.n == 0) { return str_node(p, t, &b); }
  if (b.n) vec_push(p, &parts, str_node(p, t, &b), NULL);
  nbB_free(&b);
  nb_Node *n = node(p, N_INTERP, t);
  vec_finish(p, &parts, n, 0);
  return n;
}

/* -------------------------------------------------------- expressions */
static nb_Node *list_lit(Parser *p) {
  nb_Token t = p->cur; advance(p);
  NodeVec items = {0};
  while (!check(p, TK_RBRACKET)) {
    vec_push(p, &items, expr(p), NULL);
    if (!accept(p, TK_COMMA)) break;
  }
  nb_Token close = p->cur;
  expect(p, TK_RBRACKET, "to close the list");
  nb_Node *n = node(p, N_LIST, t);
  n->end = close.pos + 1;
  vec_finish(p, &items, n, 0);
  return n;
}

/* {a: 1, "b c": 2}: keys are names, keywords ({if: 1}; a key is never an
** expression) or plain string literals, all interned since records find keys
** by pointer (nbR_find). */
static nb_Node *record_lit(Parser *p) {
  nb_Token t = p->cur; advance(p);
  NodeVec items = {0};
  skip_newlines(p);
  while (!check(p, TK_RBRACE)) {
    nb_Str *key;
    if (check(p, TK_NAME) || (p->cur.kind >= TK_AND && p->cur.kind <= TK_WHILE)) key = tok_name(p, p->cur);
    else if (check(p, TK_STRING) || check(p, TK_RSTRING)) {
      nb_Node *k = string_lit(p);
      if (k->kind != N_STR) { perr_at(p, t, "record keys cannot be interpolated strings"); }
      key = nbS_intern_str(k->str); own(p, key);
      goto have_key;
    } else { char b[64]; perr_at(p, p->cur, "expected a field name in record, found %s", describe(p, p->cur, b, sizeof b)); }
    advance(p);
  have_key:
    expect(p, TK_COLON, "after the record field name");
    skip_newlines(p);
    vec_push(p, &items, expr(p), key);
    skip_newlines(p);
    if (!accept(p, TK_COMMA)) break;
    skip_newlines(p);
  }
  nb_Token close = p->cur;
  expect(p, TK_RBRACE, "to close the record");
  nb_Node *n = node(p, N_REC, t);
  n->end = close.pos + 1;
  vec_finish(p, &items, n, 1);
  return n;
}

/* if and try are expressions (their value is the branch taken), so they are
** parsed here among the primaries: `y = if c { 1 } else { 2 }`. */
static nb_Node *if_expr(Parser *p) {
  nb_Token t = p->cur; advance(p);
  enter(p);
  nb_Node *n = node(p, N_IF, t);
  n->a = expr(p);
  n->b = block(p);
  /* `else` may start the next line */
  if (check(p, TK_NEWLINE) && p->nxt.kind == TK_ELSE) advance(p);
  if (accept(p, TK_ELSE)) n->c = check(p, TK_IF) ? if_expr(p) : block(p);
  n->end = p->prev_end;
  p->depth--;
  return n;
}

static nb_Node *try_expr(Parser *p) {
  nb_Token t = p->cur; advance(p);
  nb_Node *n = node(p, N_TRY, t);
  n->a = block(p);
  if (check(p, TK_NEWLINE) && p->nxt.kind == TK_CATCH) advance(p);
  expect(p, TK_CATCH, "after the try block");
  if (check(p, TK_NAME)) { nb_Node *v = node(p, N_NAME, p->cur); v->str = tok_name(p, p->cur); advance(p); n->c = v; }
  n->b = block(p);
  n->end = p->prev_end;
  return n;
}

static nb_Node *primary(Parser *p) {
  nb_Token t = p->cur;
  nb_Node *n;
  switch (t.kind) {
  case TK_NUMBER:
    advance(p); n = node(p, N_NUM, t); n->num = t.num;
    /* written with a point or an exponent: a float (the scanner knows) */
    if (t.isfloat) n->flags |= NF_FLOATLIT;
    n->idx = t.isfloat ? NB_KFLOAT : NB_KINT;   /* idx is free in number nodes: the kind the evaluator copies */
    return n;
  case TK_STRING: case TK_RSTRING: return string_lit(p);
  case TK_NIL: advance(p); return node(p, N_NIL, t);
  case TK_TRUE: advance(p); return node(p, N_TRUE, t);
  case TK_FALSE: advance(p); return node(p, N_FALSE, t);
  case TK_NAME: advance(p); n = node(p, N_NAME, t); n->str = tok_name(p, t); return n;
  case TK_LPAREN: {
    advance(p);
    n = expr(p);
    expect(p, TK_RPAREN, "to close the parenthesis");
    return n;
  }
  case TK_LBRACKET: return list_lit(p);
  case TK_LBRACE: return record_lit(p);
  case TK_FN: advance(p); return fn_form(p, t, NULL);
  case TK_IF: return if_expr(p);
  case TK_TRY: return try_expr(p);
  case TK_NOGRAD: advance(p); n = node(p, N_NOGRAD, t); n->a = block(p); n->end = n->a->end; return n;
  case TK_AUTOCAST:   /* autocast(DTYPE) { ... }: a = the dtype expression, b = the block */
    advance(p); n = node(p, N_AUTOCAST, t);
    expect(p, TK_LPAREN, "after 'autocast' (autocast(\"bf16\") { ... })");
    n->a = expr(p);
    expect(p, TK_RPAREN, "to close autocast(");
    n->b = block(p); n->end = n->b->end;
    return n;
  default: {
    char b[64];
    if (t.kind == TK_EOF) perr_at(p, t, "unexpected end of input, expected an expression");
    perr_at(p, t, "expected an expression, found %s", describe(p, t, b, sizeof b));
  }
  }
  return NULL;
}

/* call arguments: positional first, then name=value.  The call node counts
** the positional ones (npos) and keeps the keyword names in names[npos..],
** which is the order lcall.c expects on the VM stack. */
static void call_args(Parser *p, nb_Node *call, NodeVec *args) {
  int seen_kw = 0;
  while (!check(p, TK_RPAREN)) {
    if (check(p, TK_NAME) && p->nxt.kind == TK_ASSIGN) {
      nb_Str *name = tok_name(p, p->cur);
      advance(p); advance(p);
      vec_push(p, args, expr(p), name); seen_kw = 1;
    } else {
      if (seen_kw) perr_at(p, p->cur, "positional argument after keyword argument");
      if (check(p, TK_STAR)) {   /* f(*xs): the list's items as positional arguments */
        nb_Node *sp = node(p, N_SPREAD, p->cur);
        advance(p);
        sp->a = expr(p);
        sp->end = sp->a->end;
        vec_push(p, args, sp, NULL);
      } else vec_push(p, args, expr(p), NULL);
      call->npos++;
    }
    if (!accept(p, TK_COMMA)) break;
  }
  call->end = p->cur.pos + 1;
  expect(p, TK_RPAREN, "to close the argument list");
}

/* one index inside [ ]: an expression or a slice lo:hi:step with parts optional */
static nb_Node *index_item(Parser *p) {
  nb_Token t = p->cur;
  nb_Node *lo = NULL;
  if (!check(p, TK_COLON)) { lo = expr(p); if (!check(p, TK_COLON)) return lo; }
  nb_Node *s = node(p, N_SLICE, t);
  s->a = lo;
  advance(p);   /* : */
  if (!check(p, TK_COLON) && !check(p, TK_COMMA) && !check(p, TK_RBRACKET)) s->b = expr(p);
  if (accept(p, TK_COLON) && !check(p, TK_COMMA) && !check(p, TK_RBRACKET)) s->c = expr(p);
  return s;
}

/* Calls, indexes and fields chain left to right.  Each postfix node takes
** the start of its operand as its own (pos, line, col), so an error caret
** under a failing call underlines the whole `model.layer(x)`.
** `a.f(args)` is one node (N_METHOD), not a field read then a call: the
** evaluator chooses at run time between a record's field f and the function
** f called with a first (uniform call syntax), which needs both parts. */
static nb_Node *postfix(Parser *p) {
  nb_Node *n = primary(p);
  int chain = 0;
  for (;;) {
    nb_Token t = p->cur;
    if (t.kind == TK_LPAREN) {
      advance(p);
      nb_Node *c = node(p, N_CALL, t);
      c->pos = n->pos; c->line = n->line; c->col = n->col;
      c->a = n;
      NodeVec args = {0};
      call_args(p, c, &args);
      vec_finish(p, &args, c, 1);
      n = c;
    } else if (t.kind == TK_LBRACKET) {
      advance(p);
      nb_Node *ix = node(p, N_INDEX, t);
      ix->pos = n->pos; ix->line = n->line; ix->col = n->col;
      ix->a = n;
      NodeVec items = {0};
      do { if (check(p, TK_RBRACKET)) break; vec_push(p, &items, index_item(p), NULL); } while (accept(p, TK_COMMA));
      if (items.n == 0) { perr_at(p, p->cur, "empty index []"); }
      ix->end = p->cur.pos + 1;
      expect(p, TK_RBRACKET, "to close the index");
      vec_finish(p, &items, ix, 0);
      n = ix;
    } else if (t.kind == TK_DOT) {
      advance(p);
      nb_Token nt = p->cur;
      if (!(nt.kind == TK_NAME || (nt.kind >= TK_AND && nt.kind <= TK_WHILE))) {
        char b[64]; perr_at(p, nt, "expected a field name after '.', found %s", describe(p, nt, b, sizeof b));
      }
      advance(p);
      if (check(p, TK_LPAREN)) {   /* a.f(args): method or uniform call */
        nb_Token lp = p->cur; advance(p);
        nb_Node *m = node(p, N_METHOD, nt);
        m->a = n; m->str = tok_name(p, nt);
        (void)lp;
        NodeVec args = {0};
        call_args(p, m, &args);
        vec_finish(p, &args, m, 1);
        m->pos = n->pos; m->line = n->line; m->col = n->col;
        n = m;
      } else {
        nb_Node *f = node(p, N_FIELD, nt);
        f->a = n; f->str = tok_name(p, nt);
        f->pos = n->pos; f->line = n->line; f->col = n->col; f->end = nt.pos + nt.len;
        n = f;
      }
    } else break;
    if (++chain > MAX_NESTING) perr_at(p, t, "expression chain is too long (more than %d calls/indexes)", MAX_NESTING);
  }
  return n;
}

static nb_Node *binary(Parser *p, nb_Node *a, nb_Token op, int bop, nb_Node *b) {
  nb_Node *n = node(p, N_BINARY, op);
  n->op = (uint8_t)bop; n->a = a; n->b = b;
  n->pos = a->pos; n->line = a->line; n->col = a->col; span_to(n, b);
  return n;
}

static nb_Node *unary(Parser *p);
static nb_Node *power(Parser *p) {
  nb_Node *a = postfix(p);
  if (check(p, TK_POW)) {
    nb_Token t = p->cur; advance(p);
    enter(p);
    nb_Node *b = unary(p);   /* right associative; 2 ** -1 works */
    p->depth--;
    return binary(p, a, t, OP_POW, b);
  }
  return a;
}
static nb_Node *unary(Parser *p) {
  if (check(p, TK_MINUS)) {
    nb_Token t = p->cur; advance(p);
    enter(p);
    nb_Node *a = unary(p);
    p->depth--;
    if (a->kind == N_NUM) { a->num = -a->num; a->pos = t.pos; a->col = t.col; return a; }
    nb_Node *n = node(p, N_NEG, t); n->a = a; span_to(n, a);
    return n;
  }
  if (check(p, TK_PLUS)) { advance(p); return unary(p); }
  if (check(p, TK_TILDE)) {
    nb_Token t = p->cur; advance(p);
    enter(p);
    nb_Node *a = unary(p);
    p->depth--;
    nb_Node *n = node(p, N_BNOT, t); n->a = a; span_to(n, a);
    return n;
  }
  return power(p);
}

static int mulop(nb_TokKind k) {
  switch (k) { case TK_STAR: return OP_MUL; case TK_SLASH: return OP_DIV; case TK_SLASHSLASH: return OP_IDIV; case TK_PERCENT: return OP_MOD; case TK_AT: return OP_MATMUL; default: return -1; }
}
static nb_Node *term(Parser *p) {
  nb_Node *a = unary(p);
  int chain = 0, op;
  while ((op = mulop(p->cur.kind)) >= 0) {
    nb_Token t = p->cur; advance(p);
    skip_newlines(p);
    if (++chain > 4 * MAX_NESTING) perr_at(p, t, "expression is too long");
    a = binary(p, a, t, op, unary(p));
  }
  return a;
}
static nb_Node *arith(Parser *p) {
  nb_Node *a = term(p);
  int chain = 0;
  while (check(p, TK_PLUS) || check(p, TK_MINUS)) {
    nb_Token t = p->cur; advance(p);
    skip_newlines(p);
    if (++chain > 4 * MAX_NESTING) perr_at(p, t, "expression is too long");
    a = binary(p, a, t, t.kind == TK_PLUS ? OP_ADD : OP_SUB, term(p));
  }
  return a;
}
/* the bitwise levels, tightest first: << >>, &, ^, | (Python's order) */
static int bitop(nb_TokKind k, int level) {
  switch (level) {
  case 0: return k == TK_SHL ? OP_SHL : k == TK_SHR ? OP_SHR : -1;
  case 1: return k == TK_AMP ? OP_BAND : -1;
  case 2: return k == TK_CARET ? OP_BXOR : -1;
  default: return k == TK_PIPE ? OP_BOR : -1;
  }
}
static nb_Node *bitwise(Parser *p, int level) {
  nb_Node *a = level == 0 ? arith(p) : bitwise(p, level - 1);
  int chain = 0, op;
  while ((op = bitop(p->cur.kind, level)) >= 0) {
    nb_Token t = p->cur; advance(p);
    skip_newlines(p);
    if (++chain > 4 * MAX_NESTING) perr_at(p, t, "expression is too long");
    a = binary(p, a, t, op, level == 0 ? arith(p) : bitwise(p, level - 1));
    a->c = node(p, N_NIL, t);   /* the operator's span: its errors point there */
  }
  return a;
}
static nb_Node *bitor(Parser *p) { return bitwise(p, 3); }
static nb_Node *range(Parser *p) {
  nb_Node *a = bitor(p);
  if (check(p, TK_DOTDOT)) {
    nb_Token t = p->cur; advance(p);
    nb_Node *n = node(p, N_RANGE, t);
    n->a = a; n->b = bitor(p);
    n->pos = a->pos; n->line = a->line; n->col = a->col; span_to(n, n->b);
    return n;
  }
  return a;
}
static int cmpop(nb_TokKind k) {
  switch (k) {
  case TK_EQ: return OP_EQ; case TK_NE: return OP_NE; case TK_LT: return OP_LT;
  case TK_LE: return OP_LE; case TK_GT: return OP_GT; case TK_GE: return OP_GE; default: return -1;
  }
}
static nb_Node *comparison(Parser *p) {
  nb_Node *a = range(p);
  int op;
  if ((op = cmpop(p->cur.kind)) >= 0) {
    nb_Token t = p->cur; advance(p);
    skip_newlines(p);
    a = binary(p, a, t, op, range(p));
    if (cmpop(p->cur.kind) >= 0) perr_at(p, p->cur, "comparisons cannot be chained; use 'and' (a < b and b < c)");
  }
  return a;
}
static nb_Node *not_expr(Parser *p) {
  if (check(p, TK_NOT)) {
    nb_Token t = p->cur; advance(p);
    enter(p);
    nb_Node *n = node(p, N_NOT, t); n->a = not_expr(p); span_to(n, n->a);
    p->depth--;
    return n;
  }
  return comparison(p);
}
static nb_Node *and_expr(Parser *p) {
  nb_Node *a = not_expr(p);
  int chain = 0;
  while (check(p, TK_AND)) {
    nb_Token t = p->cur; advance(p); skip_newlines(p);
    if (++chain > 4 * MAX_NESTING) perr_at(p, t, "expression is too long");
    nb_Node *n = node(p, N_AND, t); n->a = a; n->b = not_expr(p);
    n->pos = a->pos; n->line = a->line; n->col = a->col; span_to(n, n->b);
    a = n;
  }
  return a;
}
static nb_Node *expr(Parser *p) {
  enter(p);
  nb_Node *a = and_expr(p);
  int chain = 0;
  while (check(p, TK_OR)) {
    nb_Token t = p->cur; advance(p); skip_newlines(p);
    if (++chain > 4 * MAX_NESTING) perr_at(p, t, "expression is too long");
    nb_Node *n = node(p, N_OR, t); n->a = a; n->b = and_expr(p);
    n->pos = a->pos; n->line = a->line; n->col = a->col; span_to(n, n->b);
    a = n;
  }
  p->depth--;
  return a;
}

/* -------------------------------------------------------- functions */
static nb_Proto *new_proto(Parser *p) {
  nb_Chunk *c = p->c;
  nb_Proto *pr = calloc(1, sizeof *pr);
  if (!pr) abort();
  pr->chunk = c;
  if (c->nprotos == c->capprotos) {
    c->capprotos = c->capprotos ? c->capprotos * 2 : 8;
    c->protos = realloc(c->protos, sizeof(nb_Proto *) * (size_t)c->capprotos);
    if (!c->protos) abort();
  }
  c->protos[c->nprotos++] = pr;
  return pr;
}

/* `## text` lines directly above the line of `fn` become its doc */
static nb_Str *doc_comment(Parser *p, nb_Token at) {
  const char *s = p->c->src;
  size_t ls = at.pos;
  while (ls > 0 && s[ls - 1] != '\n') ls--;
  nb_Buf b = {0};
  char *lines[64]; int nl = 0;
  size_t end = ls;
  while (end > 0 && nl < 64) {
    size_t e = end - 1, st = e;           /* previous line is [st, e) */
    while (st > 0 && s[st - 1] != '\n') st--;
    size_t k = st; while (k < e && (s[k] == ' ' || s[k] == '\t')) k++;
    if (e - k < 2 || s[k] != '#' || s[k + 1] != '#') break;
    k += 2; if (k < e && s[k] == ' ') k++;
    size_t n = e - k; char *ln = malloc(n + 1); if (!ln) abort();
    memcpy(ln, s + k, n); ln[n] = 0; lines[nl++] = ln;
    end = st;
  }
  if (!nl) return NULL;
  for (int i = nl - 1; i >= 0; i--) { nbB_puts(&b, lines[i]); if (i) nbB_putc(&b, '\n'); free(lines[i]); }
  nb_Str *d = nbS_new(b.p, b.n); nbB_free(&b);
  return d;
}

/* After `fn` (and the name, for definitions): (params) then a block, `= expr`, or an expression. */
static nb_Node *fn_form(Parser *p, nb_Token at, nb_Str *name) {
  nb_Node *n = node(p, N_FN, at);
  nb_Proto *pr = new_proto(p);
  n->proto = pr;
  pr->name = name; pr->line = at.line; pr->src_start = at.pos;
  if (name) pr->doc = doc_comment(p, at);
  expect(p, TK_LPAREN, name ? "after the function name" : "after 'fn'");
  NodeVec params = {0};
  while (!check(p, TK_RPAREN)) {
    bool rest = accept(p, TK_STAR);   /* *name: the extra positional arguments, as a list */
    if (!check(p, TK_NAME)) { char b[64]; perr_at(p, p->cur, "expected a parameter name, found %s", describe(p, p->cur, b, sizeof b)); }
    nb_Token pt = p->cur;
    nb_Str *pname = tok_name(p, pt);
    for (int i = 0; i < params.n; i++) if (params.names[i] == pname) { perr_at(p, pt, "duplicate parameter '%s'", pname->data); }
    advance(p);
    if (rest) {
      if (check(p, TK_ASSIGN)) perr_at(p, p->cur, "'*%s' gathers the extra arguments and takes no default", pname->data);
      if (!check(p, TK_RPAREN) && !(check(p, TK_COMMA) && p->nxt.kind == TK_RPAREN)) perr_at(p, p->cur, "'*%s' must be the last parameter", pname->data);
      pr->variadic = true;
      vec_push(p, &params, NULL, pname);
      accept(p, TK_COMMA);
      break;
    }
    nb_Node *def = NULL;
    if (accept(p, TK_ASSIGN)) def = expr(p);
    else if (params.n && params.v[params.n - 1]) { perr_at(p, pt, "parameter '%s' without a default follows one with a default", pname->data); }
    vec_push(p, &params, def, pname);
    if (!accept(p, TK_COMMA)) break;
  }
  expect(p, TK_RPAREN, "to close the parameter list");
  pr->nparams = params.n;
  pr->params = malloc(sizeof(nb_Str *) * (size_t)(params.n + 1));
  pr->defaults = malloc(sizeof(nb_Node *) * (size_t)(params.n + 1));
  if (!pr->params || !pr->defaults) abort();
  for (int i = 0; i < params.n; i++) { pr->params[i] = params.names[i]; pr->defaults[i] = params.v[i]; }
  enter(p);
  if (check(p, TK_LBRACE)) pr->body = block(p);
  else { accept(p, TK_ASSIGN); skip_newlines(p); pr->body = expr(p); }
  p->depth--;
  /* the text up to the last token of the body (a closing ')' or '}' that
  ** the body's own node does not span): serialization re-parses it */
  pr->src_end = p->prev_end > pr->body->end ? p->prev_end : pr->body->end;
  n->end = pr->src_end;
  return n;
}

/* -------------------------------------------------------- statements */
static nb_Node *block(Parser *p) {
  nb_Token t = p->cur;
  if (!check(p, TK_LBRACE)) { char b[64]; perr_at(p, t, "expected '{' to start a block, found %s", describe(p, t, b, sizeof b)); }
  advance(p);
  enter(p);
  nb_Node *n = node(p, N_BLOCK, t);
  NodeVec stmts = {0};
  skip_newlines(p);
  while (!check(p, TK_RBRACE)) {
    if (check(p, TK_EOF)) { perr_at(p, p->cur, "unexpected end of input: '{' at line %d is not closed", t.line); }
    vec_push(p, &stmts, statement(p), NULL);
    if (!check(p, TK_RBRACE) && !check(p, TK_NEWLINE) && !check(p, TK_SEMI)) {
      char b[64];
      perr_at(p, p->cur, "expected a newline or ';' between statements, found %s", describe(p, p->cur, b, sizeof b));
    }
    skip_newlines(p);
  }
  n->end = p->cur.pos + 1;
  advance(p);
  vec_finish(p, &stmts, n, 0);
  p->depth--;
  return n;
}

static int is_assign_op(nb_TokKind k) { return k == TK_ASSIGN || k == TK_PLUSEQ || k == TK_MINUSEQ || k == TK_STAREQ || k == TK_SLASHEQ || k == TK_SLASHSLASHEQ
  || k == TK_AMPEQ || k == TK_PIPEEQ || k == TK_CARETEQ || k == TK_SHLEQ || k == TK_SHREQ; }

/* Assignment is a statement, not an expression: `x = 1` is only recognized
** here, after an expression that turns out to be a target.  An expression
** standing as a statement is marked NF_EXPRSTMT: its value is what a block
** yields and what the REPL echoes.  `fn name(...) {...}` becomes an
** assignment of the closure to name (NF_FNDEF), so the resolver scopes a
** function's name like any other variable. */
static nb_Node *statement(Parser *p) {
  nb_Token t = p->cur;
  nb_Node *n;
  switch (t.kind) {
  case TK_FN:
    if (p->nxt.kind == TK_NAME) {
      advance(p);
      nb_Token nt = p->cur;
      nb_Str *name = tok_name(p, nt);
      advance(p);
      n = node(p, N_ASSIGN, t);
      n->flags |= NF_FNDEF;
      nb_Node *target = node(p, N_NAME, nt); target->str = name;
      n->a = target;
      n->b = fn_form(p, t, name);
      n->end = n->b->end;
      return n;
    }
    break;
  case TK_WHILE:
    advance(p);
    n = node(p, N_WHILE, t);
    n->a = expr(p); n->b = block(p);
    return n;
  case TK_FOR: {
    advance(p);
    n = node(p, N_FOR, t);
    if (!check(p, TK_NAME)) { char b[64]; perr_at(p, p->cur, "expected a loop variable after 'for', found %s", describe(p, p->cur, b, sizeof b)); }
    nb_Node *v = node(p, N_NAME, p->cur); v->str = tok_name(p, p->cur); advance(p);
    n->c = v;
    expect(p, TK_IN, "after the loop variable");
    n->a = expr(p); n->b = block(p);
    return n;
  }
  case TK_RETURN:
    advance(p);
    n = node(p, N_RETURN, t);
    if (!check(p, TK_NEWLINE) && !check(p, TK_SEMI) && !check(p, TK_RBRACE) && !check(p, TK_EOF)) { n->a = expr(p); span_to(n, n->a); }
    return n;
  case TK_BREAK: advance(p); return node(p, N_BREAK, t);
  case TK_CONTINUE: advance(p); return node(p, N_CONTINUE, t);
  case TK_IMPORT: {
    advance(p);
    if (!check(p, TK_NAME)) { char b[64]; perr_at(p, p->cur, "expected a module name after 'import', found %s", describe(p, p->cur, b, sizeof b)); }
    n = node(p, N_IMPORT, t);
    nb_Node *v = node(p, N_NAME, p->cur); v->str = tok_name(p, p->cur); n->str = v->str; advance(p);
    n->a = v; span_to(n, v);
    return n;
  }
  case TK_GLOBAL: {
    advance(p);
    n = node(p, N_GLOBAL, t);
    NodeVec names = {0};
    do {
      if (!check(p, TK_NAME)) { char b[64]; perr_at(p, p->cur, "expected a variable name after 'global', found %s", describe(p, p->cur, b, sizeof b)); }
      vec_push(p, &names, NULL, tok_name(p, p->cur)); advance(p);
    } while (accept(p, TK_COMMA));
    vec_finish(p, &names, n, 1);
    return n;
  }
  default: break;
  }
  nb_Node *e = expr(p);
  if (is_assign_op(p->cur.kind)) {
    nb_Token at = p->cur;
    if (e->kind != N_NAME && e->kind != N_INDEX && e->kind != N_FIELD) {
      nb_Token et = t; et.pos = e->pos; et.len = e->end > e->pos ? e->end - e->pos : 1;
      perr_at(p, et, "cannot assign to this expression (only to a name, x[i] or x.field)");
    }
    advance(p);
    skip_newlines(p);
    n = node(p, N_ASSIGN, at);
    n->a = e;
    n->op = at.kind == TK_PLUSEQ ? OP_ADD : at.kind == TK_MINUSEQ ? OP_SUB : at.kind == TK_STAREQ ? OP_MUL : at.kind == TK_SLASHEQ ? OP_DIV : at.kind == TK_SLASHSLASHEQ ? OP_IDIV
          : at.kind == TK_AMPEQ ? OP_BAND : at.kind == TK_PIPEEQ ? OP_BOR : at.kind == TK_CARETEQ ? OP_BXOR
          : at.kind == TK_SHLEQ ? OP_SHL : at.kind == TK_SHREQ ? OP_SHR : OP_NONE;
    n->b = expr(p);
    n->pos = e->pos; n->line = e->line; n->col = e->col; span_to(n, n->b);
    return n;
  }
  e->flags |= NF_EXPRSTMT;
  return e;
}

nb_Chunk *nbP_parse(nb_VM *vm, const char *src, size_t len, const char *filename, nb_Node **out) {
  nb_Chunk *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->rc = 1;
  c->src = malloc(len + 1); if (!c->src) abort();
  memcpy(c->src, src, len); c->src[len] = 0; c->len = len;
  c->filename = strdup(filename ? filename : "<input>");
  Parser *p = calloc(1, sizeof *p);
  if (!p) abort();
  p->vm = vm; p->c = c;
  nbX_init(&p->lx, c->src, len);
  nb_Node *prog = NULL;
  if (setjmp(p->jb) == 0) {
    p->nxt = nbX_next(&p->lx);
    advance(p);
    prog = node(p, N_BLOCK, p->cur);
    prog->flags |= NF_TOPLEVEL;
    NodeVec stmts = {0};
    skip_newlines(p);
    while (!check(p, TK_EOF)) {
      if (check(p, TK_RBRACE)) perr_at(p, p->cur, "unexpected '}' (no block is open)");
      vec_push(p, &stmts, statement(p), NULL);
      if (!check(p, TK_EOF) && !check(p, TK_NEWLINE) && !check(p, TK_SEMI)) {
        char b[64];
        if (check(p, TK_RBRACE)) perr_at(p, p->cur, "unexpected '}' (no block is open)");
        perr_at(p, p->cur, "expected a newline or ';' between statements, found %s", describe(p, p->cur, b, sizeof b));
      }
      skip_newlines(p);
    }
    vec_finish(p, &stmts, prog, 0);
  } else {
    prog = NULL;
  }
  free(p);
  *out = prog;
  return c;
}
