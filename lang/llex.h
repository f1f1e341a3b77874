/*
** llex.h — the scanner: source bytes to tokens.
** Newlines are tokens (they end statements) except inside ( ) and [ ],
** where the scanner drops them.  Strings keep their raw text (delimiters
** included: one quote, or three for a string that may span lines); the
** parser splits "{...}" interpolations out of double-quoted ones.
*/
#ifndef LLEX_H
#define LLEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum {
  TK_EOF, TK_NEWLINE, TK_ERROR,
  TK_NUMBER, TK_STRING, TK_RSTRING, TK_NAME,
  /* keywords */
  TK_AND, TK_AUTOCAST, TK_BREAK, TK_CATCH, TK_CONTINUE, TK_ELSE, TK_FALSE, TK_FN, TK_FOR,
  TK_GLOBAL, TK_IF, TK_IMPORT, TK_IN, TK_NIL, TK_NOGRAD, TK_NOT, TK_OR,
  TK_RETURN, TK_TRUE, TK_TRY, TK_WHILE,
  /* punctuation */
  TK_LPAREN, TK_RPAREN, TK_LBRACKET, TK_RBRACKET, TK_LBRACE, TK_RBRACE,
  TK_COMMA, TK_DOT, TK_DOTDOT, TK_COLON, TK_SEMI, TK_ASSIGN,
  TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_PERCENT, TK_POW, TK_AT,
  TK_EQ, TK_NE, TK_LT, TK_LE, TK_GT, TK_GE,
  TK_PLUSEQ, TK_MINUSEQ, TK_STAREQ, TK_SLASHEQ,
  TK_PERCENT_CMD,   /* a %command at the start of a line (REPL/kernel magics) */
  TK_SLASHSLASH,    /* // (after the older tokens: their numbering is unchanged) */
  TK_SLASHSLASHEQ,  /* //= */
  TK_AMP, TK_PIPE, TK_CARET, TK_TILDE, TK_SHL, TK_SHR,          /* & | ^ ~ << >> */
  TK_AMPEQ, TK_PIPEEQ, TK_CARETEQ, TK_SHLEQ, TK_SHREQ,          /* &= |= ^= <<= >>= */
  TK_COUNT
} nb_TokKind;

typedef struct nb_Token {
  nb_TokKind kind;
  uint32_t pos, len;     /* byte offset and length in the source */
  int line, col;         /* 1-based; col counts bytes */
  double num;
  bool isfloat;          /* TK_NUMBER written with a point or an exponent: 1.0, .5, 1e3 */
  const char *msg;       /* for TK_ERROR */
  uint8_t unterminated;  /* TK_ERROR of a string with no closing delimiter: where it stopped */
} nb_Token;
/* a one-line string's line ended; the input ended; (either) inside an interpolation's braces */
enum { NB_UNTERMINATED_LINE = 1, NB_UNTERMINATED_EOF = 2, NB_UNTERMINATED_BRACE = 4 };

typedef struct nb_Lexer {
  const char *src; size_t len;
  size_t pos; int line; size_t line_start;
  int depth;             /* ( and [ nesting, where newlines are not tokens */
  int brace_stack[256];  /* for each open bracket: was it ( or [ (1) or { (0)? */
  int nbrace;
  nb_TokKind prev;       /* the last token returned: `.5` is a number only where an operand may start */
} nb_Lexer;

void nbX_init(nb_Lexer *lx, const char *src, size_t len);
/* start lexing at byte offset pos (used for string interpolation pieces) */
void nbX_init_at(nb_Lexer *lx, const char *src, size_t len, size_t pos, int line, size_t line_start);
nb_Token nbX_next(nb_Lexer *lx);
/* the offset of the '}' closing a string's interpolation opened before pos, or len */
size_t nbX_interp_end(const char *src, size_t len, size_t pos);
const char *nbX_tokname(nb_TokKind k);
/* which keyword, or TK_NAME */
nb_TokKind nbX_keyword(const char *s, size_t len);
extern const char *const nbX_keywords[];

#endif
