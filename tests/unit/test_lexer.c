/* test_lexer.c — unit tests of the scanner (lang/llex.c). */
#include <stdlib.h>
#include "lang/llex.h"
#include "lang/lobject.h"
#include "test_util.h"

#define MAXT 256
typedef struct { nb_Token t[MAXT]; int n; } Toks;

static Toks lex(const char *src) {
  Toks r; r.n = 0;
  nb_Lexer lx; nbX_init(&lx, src, strlen(src));
  for (;;) {
    nb_Token t = nbX_next(&lx);
    if (r.n < MAXT) r.t[r.n++] = t;
    if (t.kind == TK_EOF || t.kind == TK_ERROR) break;
  }
  return r;
}

/* "NUMBER DOTDOT NUMBER EOF"-style description of the kinds */
static const char *kname(nb_TokKind k) {
  static const char *const n[TK_COUNT] = {
    "EOF", "NL", "ERROR", "NUM", "STR", "RSTR", "NAME",
    "and", "autocast", "break", "catch", "continue", "else", "false", "fn", "for",
    "global", "if", "import", "in", "nil", "no_grad", "not", "or",
    "return", "true", "try", "while",
    "(", ")", "[", "]", "{", "}", ",", ".", "..", ":", ";", "=",
    "+", "-", "*", "/", "%", "**", "@", "==", "!=", "<", "<=", ">", ">=",
    "+=", "-=", "*=", "/=", "%cmd" };
  return k < TK_COUNT && n[k] ? n[k] : "?";
}
static const char *kinds(const char *src) {
  static char buf[4096]; buf[0] = 0;
  Toks r = lex(src);
  for (int i = 0; i < r.n; i++) {
    if (i) strcat(buf, " ");
    strcat(buf, kname(r.t[i].kind));
  }
  return buf;
}
static const char *text(const char *src, nb_Token t) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%.*s", (int)t.len, src + t.pos);
  return buf;
}

int main(void) {
  TEST("lexer/punctuation") {
    CHECK_STR(kinds("( ) [ ] { } , . .. : ; = + - * / % ** @ == != < <= > >= += -= *= /="),
              "( ) [ ] { } , . .. : ; = + - * / % ** @ == != < <= > >= += -= *= /= EOF");
  }
  TEST("lexer/no-space-operators") {
    CHECK_STR(kinds("a**-b<=c>=d==e!=f+=1-=2*=3/=4"),
              "NAME ** - NAME <= NAME >= NAME == NAME != NAME += NUM -= NUM *= NUM /= NUM EOF");
    CHECK_STR(kinds("x.y..z"), "NAME . NAME .. NAME EOF");
  }
  TEST("lexer/keywords") {
    CHECK_STR(kinds("and autocast break catch continue else false fn for global if import in nil no_grad not or return true try while"),
              "and autocast break catch continue else false fn for global if import in nil no_grad not or return true try while EOF");
    CHECK_STR(kinds("android fnord iff nil_ _if"), "NAME NAME NAME NAME NAME EOF");
    CHECK_INT(nbX_keyword("while", 5), TK_WHILE);
    CHECK_INT(nbX_keyword("whil", 4), TK_NAME);
    CHECK_INT(nbX_keyword("no_grad", 7), TK_NOGRAD);
    CHECK_INT(nbX_keyword("autocast", 8), TK_AUTOCAST);
    int n = 0; while (nbX_keywords[n]) n++;
    CHECK_INT(n, TK_WHILE - TK_AND + 1);
  }
  TEST("lexer/names") {
    const char *s = "_a1 größe x_y2";
    Toks r = lex(s);
    CHECK_STR(kinds(s), "NAME NAME NAME EOF");
    CHECK_STR(text(s, r.t[0]), "_a1");
    CHECK_STR(text(s, r.t[1]), "größe");
    CHECK_STR(text(s, r.t[2]), "x_y2");
  }
  TEST("lexer/numbers") {
    struct { const char *src; double v; } cases[] = {
      { "0", 0 }, { "42", 42 }, { "2.5", 2.5 }, { "1e3", 1000 }, { "1E3", 1000 }, { "1.5e-3", 0.0015 },
      { "2e+2", 200 }, { "0x1F", 31 }, { "0XfF", 255 }, { "0xff_ff", 65535 }, { "1_000_000", 1e6 },
      { "1_0.2_5", 10.25 }, { "123456789012", 123456789012.0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      Toks r = lex(cases[i].src);
      CHECK(r.t[0].kind == TK_NUMBER && r.t[0].num == cases[i].v && r.t[0].len == strlen(cases[i].src) && r.t[1].kind == TK_EOF,
            "'%s' lexed as %s %g (len %u)", cases[i].src, kname(r.t[0].kind), r.t[0].num, r.t[0].len);
    }
  }
  TEST("lexer/number-then-dots") {
    Toks r = lex("1..2");
    CHECK_STR(kinds("1..2"), "NUM .. NUM EOF");
    CHECK(r.t[0].num == 1 && r.t[2].num == 2, "values %g %g", r.t[0].num, r.t[2].num);
    CHECK_STR(kinds("1.5..2.5"), "NUM .. NUM EOF");
    CHECK_STR(kinds("5.len"), "NUM . NAME EOF");
    CHECK_STR(kinds("x[1:2]"), "NAME [ NUM : NUM ] EOF");
    CHECK_STR(kinds("-3"), "- NUM EOF");   /* the sign is an operator */
  }
  TEST("lexer/positions") {
    const char *s = "x = 1\n  foo(\n\tbar)\n";
    Toks r = lex(s);
    CHECK_STR(kinds(s), "NAME = NUM NL NAME ( NAME ) NL EOF");
    CHECK(r.t[0].line == 1 && r.t[0].col == 1 && r.t[0].pos == 0, "x at %d:%d", r.t[0].line, r.t[0].col);
    CHECK(r.t[1].line == 1 && r.t[1].col == 3, "= at %d:%d", r.t[1].line, r.t[1].col);
    CHECK(r.t[2].line == 1 && r.t[2].col == 5, "1 at %d:%d", r.t[2].line, r.t[2].col);
    CHECK(r.t[3].line == 1 && r.t[3].col == 6, "newline at %d:%d", r.t[3].line, r.t[3].col);
    CHECK(r.t[4].line == 2 && r.t[4].col == 3 && r.t[4].len == 3, "foo at %d:%d", r.t[4].line, r.t[4].col);
    CHECK(r.t[6].line == 3 && r.t[6].col == 2, "bar at %d:%d (col counts bytes; a tab is one)", r.t[6].line, r.t[6].col);
    CHECK(r.t[9].line == 4, "EOF on line %d", r.t[9].line);
  }
  TEST("lexer/comments-and-continuation") {
    CHECK_STR(kinds("a # comment ( [ {\nb"), "NAME NL NAME EOF");
    CHECK_STR(kinds("## doc\nfn"), "NL fn EOF");
    const char *s = "a + \\\n  b";
    Toks r = lex(s);
    CHECK_STR(kinds(s), "NAME + NAME EOF");
    CHECK(r.t[2].line == 2 && r.t[2].col == 3, "b at %d:%d", r.t[2].line, r.t[2].col);
    CHECK_STR(kinds("a\r\nb"), "NAME NL NAME EOF");
  }
  TEST("lexer/newlines-in-brackets") {
    CHECK_STR(kinds("f(a,\n b\n)"), "NAME ( NAME , NAME ) EOF");
    CHECK_STR(kinds("[1,\n2]\n"), "[ NUM , NUM ] NL EOF");
    CHECK_STR(kinds("{\na\n}"), "{ NL NAME NL } EOF");
    /* a block inside parentheses: newlines count again inside the { } */
    CHECK_STR(kinds("f(fn() {\n a\n b\n}\n)"), "NAME ( fn ( ) { NL NAME NL NAME NL } ) EOF");
    /* and a ( inside that block drops them again */
    CHECK_STR(kinds("{ g(1,\n2)\n}"), "{ NAME ( NUM , NUM ) NL } EOF");
    /* unbalanced closers do not underflow */
    CHECK_STR(kinds(")\n]\n}\na"), ") NL ] NL } NL NAME EOF");
  }
  TEST("lexer/strings") {
    const char *s = "\"dq\" 'sq' \"a{x}b\" \"esc\\\"q\" 'it\\'s'";
    Toks r = lex(s);
    CHECK_STR(kinds(s), "STR RSTR STR STR RSTR EOF");
    CHECK_STR(text(s, r.t[0]), "\"dq\"");
    CHECK_STR(text(s, r.t[1]), "'sq'");
    CHECK_STR(text(s, r.t[3]), "\"esc\\\"q\"");
    CHECK_STR(text(s, r.t[4]), "'it\\'s'");
    /* quotes and newlines inside an interpolation do not end the string */
    const char *s2 = "\"v={f(\"}\", {a:\n1}.a)} end\" x";
    Toks r2 = lex(s2);
    CHECK_STR(kinds(s2), "STR NAME EOF");
    CHECK(r2.t[1].line == 2, "x on line %d", r2.t[1].line);
    /* single-quoted strings do not interpolate: a brace is plain */
    CHECK_STR(kinds("'{' x"), "RSTR NAME EOF");
    CHECK_STR(kinds("\"\\{\" x"), "STR NAME EOF");
    /* triple-quoted strings span lines; quotes inside need no escape */
    const char *s3 = "'''a\n'b' ''c''\n''' x \"\"\"{y}\n\"q\" \"\"\" z";
    Toks r3 = lex(s3);
    CHECK_STR(kinds(s3), "RSTR NAME STR NAME EOF");
    CHECK(r3.t[0].len == 18 && r3.t[1].line == 3 && r3.t[2].line == 3 && r3.t[3].line == 4,
          "len %u, x line %d, triple line %d, z line %d", r3.t[0].len, r3.t[1].line, r3.t[2].line, r3.t[3].line);
    CHECK_STR(kinds("'' 'a' \"\"\"\"\"\" x"), "RSTR RSTR STR NAME EOF");   /* empty strings, one-quote and triple */
    /* a line continuation inside a string counts its line */
    Toks r4 = lex("'a\\\nb' x");
    CHECK(r4.n == 3 && r4.t[1].kind == TK_NAME && r4.t[1].line == 2, "continued string: x on line %d", r4.n > 1 ? r4.t[1].line : -1);
  }
  TEST("lexer/interp-end") {
    /* the } closing an interpolation, past braces and quotes in nested strings */
    const char *s = "{f('}', \"\\{\", '''\n}''') + 1} rest";
    size_t end = nbX_interp_end(s, strlen(s), 1);
    CHECK(!strcmp(s + end, "} rest"), "closing brace at %zu: '%s'", end, s + end);
    CHECK(nbX_interp_end("{a", 2, 1) == 2 && nbX_interp_end("'}", 2, 0) == 2, "unclosed: the end");
  }
  TEST("lexer/errors") {
    struct { const char *src, *msg; int col, len; } cases[] = {
      { "x = \"open", "unterminated string", 5, 1 },   /* the error token is the opening quote */
      { "'a\nb'", "unterminated string", 1, 1 },
      { "\"{\n", "unterminated string", 1, 1 },
      { "x = '''a\nb", "unterminated string", 5, 3 },
      { "a ! b", "unexpected character '!' (use 'not' for negation)", 3, 1 },
      { "a $ b", "unexpected character", 3, 1 },
      { "`", "unexpected character", 1, 1 },
      { "0x", "malformed hexadecimal number", 1, 2 },
      { "0xg", "malformed hexadecimal number", 1, 2 },
      { "12abc", "malformed number", 1, 5 },
      { "1e", "malformed number", 1, 2 },
      { "3_x", "malformed number", 1, 3 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      Toks r = lex(cases[i].src);
      nb_Token t = r.t[r.n - 1];
      CHECK(t.kind == TK_ERROR && t.msg && strcmp(t.msg, cases[i].msg) == 0 && t.col == cases[i].col && (int)t.len == cases[i].len,
            "'%s': got %s '%s' at col %d len %u", cases[i].src, kname(t.kind), t.msg ? t.msg : "", t.col, t.len);
    }
    CHECK_STR(kinds("a != b"), "NAME != NAME EOF");
    /* where an unterminated string stopped: more lines may close it (EOF), or not (LINE) */
    struct { const char *src; int how; } open[] = {
      { "x = \"open", NB_UNTERMINATED_LINE }, { "'a\nb'", NB_UNTERMINATED_LINE }, { "\"a\n\"", NB_UNTERMINATED_LINE },
      { "\"{\n", NB_UNTERMINATED_EOF | NB_UNTERMINATED_BRACE }, { "'''a\nb", NB_UNTERMINATED_EOF },
      { "\"\"\"{x}\n\"\"", NB_UNTERMINATED_EOF }, { "\"{'''a\n", NB_UNTERMINATED_EOF | NB_UNTERMINATED_BRACE },
      { "\"v {x\")\nprint(2)\n", NB_UNTERMINATED_LINE | NB_UNTERMINATED_BRACE },
    };
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++) {
      Toks r = lex(open[i].src);
      nb_Token t = r.t[r.n - 1];
      CHECK(t.kind == TK_ERROR && t.unterminated == open[i].how, "'%s': got %s, unterminated %d", open[i].src, kname(t.kind), t.unterminated);
    }
  }
  TEST("lexer/tokname") {
    CHECK_STR(nbX_tokname(TK_RPAREN), "')'");
    CHECK_STR(nbX_tokname(TK_EOF), "end of input");
    CHECK_STR(nbX_tokname(TK_NEWLINE), "newline");
    CHECK_STR(nbX_tokname(TK_WHILE), "'while'");
    CHECK_STR(nbX_tokname(TK_POW), "'**'");
    CHECK_STR(nbX_tokname(TK_COUNT), "token");
    for (int k = 0; k < TK_COUNT; k++) CHECK(nbX_tokname((nb_TokKind)k) != NULL && strcmp(nbX_tokname((nb_TokKind)k), "token") != 0, "kind %d has no name", k);
  }
  TEST("lexer/init-at") {
    const char *s = "\"a {x + 1} b\"";
    nb_Lexer lx; nbX_init_at(&lx, s, 9, 4, 1, 0);   /* the interpolated part: x + 1 */
    nb_Token a = nbX_next(&lx), b = nbX_next(&lx), c = nbX_next(&lx), d = nbX_next(&lx);
    CHECK(a.kind == TK_NAME && a.col == 5 && b.kind == TK_PLUS && c.kind == TK_NUMBER && c.num == 1 && d.kind == TK_EOF,
          "kinds %s %s %s %s, x at col %d", kname(a.kind), kname(b.kind), kname(c.kind), kname(d.kind), a.col);
  }
  TEST("lexer/deep-nesting") {
    /* more brackets than the scanner's 256-entry stack: still lexes, no overflow */
    char src[2200]; int n = 0;
    for (int i = 0; i < 1000; i++) src[n++] = '(';
    src[n++] = '\n';
    for (int i = 0; i < 1000; i++) src[n++] = ')';
    src[n] = 0;
    Toks r; r.n = 0;
    nb_Lexer lx; nbX_init(&lx, src, (size_t)n);
    int count = 0, nl = 0; nb_Token t;
    while ((t = nbX_next(&lx)).kind != TK_EOF && t.kind != TK_ERROR) { count++; if (t.kind == TK_NEWLINE) nl++; }
    (void)r;
    /* (past 256 open brackets the scanner stops tracking them, so the newline
    ** may count; the parser rejects nesting past 200 levels anyway) */
    CHECK(t.kind == TK_EOF && count >= 2000, "count %d newlines %d end %s", count, nl, kname(t.kind));
  }
  return t_failed ? 1 : 0;
}
