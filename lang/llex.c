/*
** llex.c — the scanner: source bytes to tokens, each with its byte span,
** line and column (the parser copies them into nodes for error carets).
**
** Newlines are tokens, because they end statements -- but only where the
** innermost open bracket is a { block or there is none: inside ( ) and [ ]
** a newline is whitespace, so a long call or list literal may span lines
** without a backslash.  The lexer keeps that bracket stack itself so the
** parser never has to tell it.  A string token is kept raw (quotes,
** escapes and {...} interpolations included); the parser decodes it.  A
** '...' or "..." string ends on its line; a triple-quoted one ('''...''',
** """...""") may span lines, as in Python.  The
** lexer allocates nothing, so nb_is_complete can run it on any text.
*/
#include <string.h>
#include <stdlib.h>
#include <ctype.h>
#include "llex.h"

const char *const nbX_keywords[] = {
  "and", "autocast", "break", "catch", "continue", "else", "false", "fn", "for",
  "global", "if", "import", "in", "nil", "no_grad", "not", "or",
  "return", "true", "try", "while", NULL
};

nb_TokKind nbX_keyword(const char *s, size_t len) {
  for (int i = 0; nbX_keywords[i]; i++)
    if (strlen(nbX_keywords[i]) == len && memcmp(nbX_keywords[i], s, len) == 0) return (nb_TokKind)(TK_AND + i);
  return TK_NAME;
}

static const char *const toknames[TK_COUNT] = {
  [TK_EOF] = "end of input", [TK_NEWLINE] = "newline", [TK_ERROR] = "error",
  [TK_NUMBER] = "number", [TK_STRING] = "string", [TK_RSTRING] = "string", [TK_NAME] = "name",
  [TK_AND] = "'and'", [TK_AUTOCAST] = "'autocast'", [TK_BREAK] = "'break'", [TK_CATCH] = "'catch'", [TK_CONTINUE] = "'continue'",
  [TK_ELSE] = "'else'", [TK_FALSE] = "'false'", [TK_FN] = "'fn'", [TK_FOR] = "'for'",
  [TK_GLOBAL] = "'global'", [TK_IF] = "'if'", [TK_IMPORT] = "'import'", [TK_IN] = "'in'",
  [TK_NIL] = "'nil'", [TK_NOGRAD] = "'no_grad'", [TK_NOT] = "'not'", [TK_OR] = "'or'",
  [TK_RETURN] = "'return'", [TK_TRUE] = "'true'", [TK_TRY] = "'try'", [TK_WHILE] = "'while'",
  [TK_LPAREN] = "'('", [TK_RPAREN] = "')'", [TK_LBRACKET] = "'['", [TK_RBRACKET] = "']'",
  [TK_LBRACE] = "'{'", [TK_RBRACE] = "'}'", [TK_COMMA] = "','", [TK_DOT] = "'.'",
  [TK_DOTDOT] = "'..'", [TK_COLON] = "':'", [TK_SEMI] = "';'", [TK_ASSIGN] = "'='",
  [TK_PLUS] = "'+'", [TK_MINUS] = "'-'", [TK_STAR] = "'*'", [TK_SLASH] = "'/'",
  [TK_PERCENT] = "'%'", [TK_POW] = "'**'", [TK_AT] = "'@'", [TK_SLASHSLASH] = "'//'",
  [TK_EQ] = "'=='", [TK_NE] = "'!='", [TK_LT] = "'<'", [TK_LE] = "'<='", [TK_GT] = "'>'", [TK_GE] = "'>='",
  [TK_PLUSEQ] = "'+='", [TK_MINUSEQ] = "'-='", [TK_STAREQ] = "'*='", [TK_SLASHEQ] = "'/='",
  [TK_PERCENT_CMD] = "%command", [TK_SLASHSLASHEQ] = "'//='",
  [TK_AMP] = "'&'", [TK_PIPE] = "'|'", [TK_CARET] = "'^'", [TK_TILDE] = "'~'", [TK_SHL] = "'<<'", [TK_SHR] = "'>>'",
  [TK_AMPEQ] = "'&='", [TK_PIPEEQ] = "'|='", [TK_CARETEQ] = "'^='", [TK_SHLEQ] = "'<<='", [TK_SHREQ] = "'>>='",
};
const char *nbX_tokname(nb_TokKind k) { return (k >= 0 && k < TK_COUNT && toknames[k]) ? toknames[k] : "token"; }

void nbX_init_at(nb_Lexer *lx, const char *src, size_t len, size_t pos, int line, size_t line_start) {
  memset(lx, 0, sizeof *lx);
  lx->src = src; lx->len = len; lx->pos = pos; lx->line = line; lx->line_start = line_start;
}
void nbX_init(nb_Lexer *lx, const char *src, size_t len) { nbX_init_at(lx, src, len, 0, 1, 0); }

static int peekc(nb_Lexer *lx, size_t k) { return lx->pos + k < lx->len ? (unsigned char)lx->src[lx->pos + k] : -1; }

static nb_Token make(nb_Lexer *lx, nb_TokKind k, size_t start, int line, size_t line_start) {
  nb_Token t; memset(&t, 0, sizeof t);
  t.kind = k; t.pos = (uint32_t)start; t.len = (uint32_t)(lx->pos - start);
  t.line = line; t.col = (int)(start - line_start) + 1;
  return t;
}
static nb_Token error_tok(nb_Lexer *lx, const char *msg, size_t start, int line, size_t line_start) {
  nb_Token t = make(lx, TK_ERROR, start, line, line_start);
  if (t.len == 0) t.len = 1;
  t.msg = msg; return t;
}

/* The brace stack is a fixed 256 entries, so the lexer needs no allocation;
** deeper brackets are still counted (nbrace) and newlines inside them count
** as in a block. */
static void open_bracket(nb_Lexer *lx, int paren) {
  if (lx->nbrace < 256) lx->brace_stack[lx->nbrace] = paren;
  lx->nbrace++;
  if (paren) lx->depth++;
}
static void close_bracket(nb_Lexer *lx) {
  if (lx->nbrace > 0) {
    lx->nbrace--;
    if (lx->nbrace < 256 && lx->brace_stack[lx->nbrace]) lx->depth--;
  }
}
/* Newlines count only where the innermost open bracket is a { block (or none). */
static int newline_significant(nb_Lexer *lx) {
  if (lx->nbrace == 0) return 1;
  int top = lx->nbrace - 1;
  return top < 256 ? !lx->brace_stack[top] : 1;
}

/* Skips a string body after its opening delimiter (q, or qqq when triple).
** Returns 1 past the closing delimiter, 0 at the end of the input, -1 where
** a one-line string's line ends first (a newline, or the end outside an
** interpolation's braces: more lines could not close it).  Inside
** a "{...}" interpolation a quote starts a nested string (which may hold braces
** of its own) and newlines are allowed, as the parser sees it.  Nesting is
** bounded (200), so the recursion's depth is too.  *in_braces: whether a
** failure came inside an interpolation (its '{' is the likely culprit). */
static int skip_string(nb_Lexer *lx, char q, int triple, int nest, int *in_braces) {
  int braces = 0;   /* nesting of {...} interpolations inside "..." */
  while (lx->pos < lx->len) {
    char c = lx->src[lx->pos];
    if (c == '\\') {
      if (peekc(lx, 1) == '\n') { lx->line++; lx->line_start = lx->pos + 2; }   /* a continuation line */
      lx->pos += 2;
      continue;
    }
    if (c == '\n') {
      if (braces == 0 && !triple) return -1;
      lx->line++; lx->line_start = lx->pos + 1;
    }
    if (braces > 0 && (c == '"' || c == '\'') && nest < 200) {
      int t3 = peekc(lx, 1) == c && peekc(lx, 2) == c;
      lx->pos += t3 ? 3 : 1;
      int r = skip_string(lx, c, t3, nest + 1, in_braces);
      if (r <= 0) { *in_braces = 1; return r; }
      continue;
    }
    if (q == '"' && c == '{') braces++;
    else if (q == '"' && c == '}' && braces > 0) braces--;
    else if (c == q && braces == 0 && (!triple || (peekc(lx, 1) == q && peekc(lx, 2) == q))) { lx->pos += triple ? 3 : 1; return 1; }
    lx->pos++;
  }
  *in_braces = braces > 0;
  return triple || braces > 0 ? 0 : -1;   /* more lines cannot close a one-line string */
}

/* '...' and "..." end on their line; '''...''' and """...""" may span lines.  An
** unterminated one is an error token over its opening delimiter (so the
** caret shows where it started), flagged for the parser's message and for
** nb_is_complete (open at the end of the input: more lines may close it). */
static nb_Token scan_string(nb_Lexer *lx, size_t start, int line, size_t line_start) {
  char q = lx->src[lx->pos];
  int triple = peekc(lx, 1) == q && peekc(lx, 2) == q;
  lx->pos += triple ? 3 : 1;
  int in_braces = 0;
  int r = skip_string(lx, q, triple, 0, &in_braces);
  if (r > 0) return make(lx, q == '"' ? TK_STRING : TK_RSTRING, start, line, line_start);
  if (lx->pos > lx->len) lx->pos = lx->len;
  nb_Token t = error_tok(lx, "unterminated string", start, line, line_start);
  t.len = triple ? 3 : 1;
  t.unterminated = (uint8_t)((r < 0 ? NB_UNTERMINATED_LINE : NB_UNTERMINATED_EOF) | (in_braces ? NB_UNTERMINATED_BRACE : 0));
  return t;
}

/* Where the interpolation opened just before pos (after its '{') closes:
** the offset of its '}', or len when it never does.  The same scan as the
** lexer's over a string token, so parser and lexer agree on every brace. */
size_t nbX_interp_end(const char *src, size_t len, size_t pos) {
  nb_Lexer lx; nbX_init_at(&lx, src, len, pos, 1, 0);
  int depth = 1;
  while (lx.pos < lx.len) {
    char c = src[lx.pos];
    if (c == '"' || c == '\'') {
      int t3 = peekc(&lx, 1) == c && peekc(&lx, 2) == c;
      lx.pos += t3 ? 3 : 1;
      int in_braces;
      if (skip_string(&lx, c, t3, 1, &in_braces) <= 0) return len;
      continue;
    }
    if (c == '{') depth++;
    else if (c == '}' && --depth == 0) return lx.pos;
    lx.pos++;
  }
  return len;
}

static nb_Token scan_number(nb_Lexer *lx, size_t start, int line, size_t line_start) {
  char buf[128]; size_t n = 0;
  if (peekc(lx, 0) == '0' && (peekc(lx, 1) == 'x' || peekc(lx, 1) == 'X')) {
    lx->pos += 2;
    unsigned long long v = 0; int digits = 0;
    while (isxdigit(peekc(lx, 0)) || peekc(lx, 0) == '_') {
      int c = peekc(lx, 0); lx->pos++;
      if (c == '_') continue;
      v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10)); digits++;
    }
    if (!digits) return error_tok(lx, "malformed hexadecimal number", start, line, line_start);
    nb_Token t = make(lx, TK_NUMBER, start, line, line_start); t.num = (double)v; return t;
  }
  bool isfloat = false;
  while (isdigit(peekc(lx, 0)) || peekc(lx, 0) == '_') { if (peekc(lx, 0) != '_' && n < 120) buf[n++] = (char)peekc(lx, 0); lx->pos++; }
  if (peekc(lx, 0) == '.' && isdigit(peekc(lx, 1))) {
    buf[n++] = '.'; lx->pos++; isfloat = true;
    while (isdigit(peekc(lx, 0)) || peekc(lx, 0) == '_') { if (peekc(lx, 0) != '_' && n < 120) buf[n++] = (char)peekc(lx, 0); lx->pos++; }
  }
  if (peekc(lx, 0) == 'e' || peekc(lx, 0) == 'E') {
    size_t save = lx->pos, savedn = n;
    buf[n++] = 'e'; lx->pos++;
    if (peekc(lx, 0) == '+' || peekc(lx, 0) == '-') { buf[n++] = (char)peekc(lx, 0); lx->pos++; }
    if (!isdigit(peekc(lx, 0))) { lx->pos = save; n = savedn; }
    else if ((isfloat = true)) while (isdigit(peekc(lx, 0))) { if (n < 120) buf[n++] = (char)peekc(lx, 0); lx->pos++; }
  }
  buf[n] = 0;
  if (isalpha(peekc(lx, 0)) || peekc(lx, 0) == '_') {
    while (isalnum(peekc(lx, 0)) || peekc(lx, 0) == '_') lx->pos++;
    return error_tok(lx, "malformed number", start, line, line_start);
  }
  nb_Token t = make(lx, TK_NUMBER, start, line, line_start);
  t.num = strtod(buf, NULL);
  t.isfloat = isfloat;
  return t;
}

/* After these a '.' is a field access (r.1 is a bad field name, not r .1). */
static bool ends_operand(nb_TokKind k) {
  return k == TK_NAME || k == TK_NUMBER || k == TK_STRING || k == TK_RSTRING || k == TK_RPAREN || k == TK_RBRACKET ||
         k == TK_RBRACE || k == TK_TRUE || k == TK_FALSE || k == TK_NIL;
}

static nb_Token next_token(nb_Lexer *lx);
nb_Token nbX_next(nb_Lexer *lx) {
  nb_Token t = next_token(lx);
  lx->prev = t.kind;
  return t;
}

static nb_Token next_token(nb_Lexer *lx) {
  for (;;) {
    while (lx->pos < lx->len) {
      char c = lx->src[lx->pos];
      if (c == ' ' || c == '\t' || c == '\r') lx->pos++;
      else if (c == '\\' && peekc(lx, 1) == '\n') { lx->pos += 2; lx->line++; lx->line_start = lx->pos; }
      else if (c == '#') { while (lx->pos < lx->len && lx->src[lx->pos] != '\n') lx->pos++; }
      else break;
    }
    size_t start = lx->pos; int line = lx->line; size_t ls = lx->line_start;
    if (lx->pos >= lx->len) return make(lx, TK_EOF, start, line, ls);
    int c = (unsigned char)lx->src[lx->pos];
    if (c == '\n') {
      lx->pos++; lx->line++; lx->line_start = lx->pos;
      if (!newline_significant(lx)) continue;
      return make(lx, TK_NEWLINE, start, line, ls);
    }
    if (isdigit(c) || (c == '.' && isdigit(peekc(lx, 1)) && !ends_operand(lx->prev))) return scan_number(lx, start, line, ls);   /* 1, 1.5, .5 */
    if (isalpha(c) || c == '_' || c >= 0x80) {
      while (lx->pos < lx->len) {
        int d = (unsigned char)lx->src[lx->pos];
        if (isalnum(d) || d == '_' || d >= 0x80) lx->pos++; else break;
      }
      return make(lx, nbX_keyword(lx->src + start, lx->pos - start), start, line, ls);
    }
    if (c == '"' || c == '\'') return scan_string(lx, start, line, ls);
    lx->pos++;
    int n1 = peekc(lx, 0);
#define TWO(ch, k2, k1) if (n1 == ch) { lx->pos++; return make(lx, k2, start, line, ls); } return make(lx, k1, start, line, ls)
    switch (c) {
    case '(': open_bracket(lx, 1); return make(lx, TK_LPAREN, start, line, ls);
    case '[': open_bracket(lx, 1); return make(lx, TK_LBRACKET, start, line, ls);
    case '{': open_bracket(lx, 0); return make(lx, TK_LBRACE, start, line, ls);
    case ')': close_bracket(lx); return make(lx, TK_RPAREN, start, line, ls);
    case ']': close_bracket(lx); return make(lx, TK_RBRACKET, start, line, ls);
    case '}': close_bracket(lx); return make(lx, TK_RBRACE, start, line, ls);
    case ',': return make(lx, TK_COMMA, start, line, ls);
    case ':': return make(lx, TK_COLON, start, line, ls);
    case ';': return make(lx, TK_SEMI, start, line, ls);
    case '@': return make(lx, TK_AT, start, line, ls);
    case '%': return make(lx, TK_PERCENT, start, line, ls);
    case '.': TWO('.', TK_DOTDOT, TK_DOT);
    case '+': TWO('=', TK_PLUSEQ, TK_PLUS);
    case '-': TWO('=', TK_MINUSEQ, TK_MINUS);
    case '/':
      if (n1 == '/') {
        lx->pos++;
        if (peekc(lx, 0) == '=') { lx->pos++; return make(lx, TK_SLASHSLASHEQ, start, line, ls); }
        return make(lx, TK_SLASHSLASH, start, line, ls);
      }
      TWO('=', TK_SLASHEQ, TK_SLASH);
    case '=': TWO('=', TK_EQ, TK_ASSIGN);
    case '<':
      if (n1 == '<') { lx->pos++; if (peekc(lx, 0) == '=') { lx->pos++; return make(lx, TK_SHLEQ, start, line, ls); } return make(lx, TK_SHL, start, line, ls); }
      TWO('=', TK_LE, TK_LT);
    case '>':
      if (n1 == '>') { lx->pos++; if (peekc(lx, 0) == '=') { lx->pos++; return make(lx, TK_SHREQ, start, line, ls); } return make(lx, TK_SHR, start, line, ls); }
      TWO('=', TK_GE, TK_GT);
    case '&': TWO('=', TK_AMPEQ, TK_AMP);
    case '|': TWO('=', TK_PIPEEQ, TK_PIPE);
    case '^': TWO('=', TK_CARETEQ, TK_CARET);
    case '~': return make(lx, TK_TILDE, start, line, ls);
    case '!': if (n1 == '=') { lx->pos++; return make(lx, TK_NE, start, line, ls); }
              return error_tok(lx, "unexpected character '!' (use 'not' for negation)", start, line, ls);
    case '*':
      if (n1 == '*') { lx->pos++; return make(lx, TK_POW, start, line, ls); }
      TWO('=', TK_STAREQ, TK_STAR);
    default: break;
    }
#undef TWO
    return error_tok(lx, "unexpected character", start, line, ls);
  }
}
