/* test_parser.c — unit tests of the parser (lang/lparse.c) and of the source
** questions front ends ask: nb_is_complete, nb_complete, nb_inspect. */
#include <stdlib.h>
#include "lang/ltests.h"   /* white-box: the parser's syntax tree */
#include "test_util.h"

/* ------------------------------------------------------------ tree dump */
static void dump(nb_Buf *b, const nb_Node *n);
static const char *const opnames[] = { "+", "-", "*", "/", "%", "**", "@", "==", "!=", "<", "<=", ">", ">=", "//", "&", "|", "^", "<<", ">>" };
static void kids(nb_Buf *b, const nb_Node *n, int from) {
  for (int i = from; i < n->nkids; i++) {
    nbB_putc(b, ' ');
    if (n->names && n->names[i]) nbB_printf(b, "%s=", n->names[i]->data);
    dump(b, n->kids[i]);
  }
}
static void dump(nb_Buf *b, const nb_Node *n) {
  if (!n) { nbB_putc(b, '_'); return; }
  switch ((nb_NodeKind)n->kind) {
  case N_NUM: { char t[40]; nb_fmtnum(t, sizeof t, n->num); nbB_puts(b, t); break; }
  case N_STR: nbB_printf(b, "\"%s\"", n->str->data); break;
  case N_NIL: nbB_puts(b, "nil"); break;
  case N_TRUE: nbB_puts(b, "true"); break;
  case N_FALSE: nbB_puts(b, "false"); break;
  case N_INTERP: nbB_puts(b, "(interp"); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_LIST: nbB_puts(b, "(list"); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_REC: nbB_puts(b, "(rec"); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_NAME: nbB_puts(b, n->str->data); break;
  case N_NEG: nbB_puts(b, "(neg "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_NOT: nbB_puts(b, "(not "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_BNOT: nbB_puts(b, "(~ "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_BINARY: nbB_printf(b, "(%s ", n->op < OP_NONE ? opnames[n->op] : "?"); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_AND: nbB_puts(b, "(and "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_OR: nbB_puts(b, "(or "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_RANGE: nbB_puts(b, "(.. "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_CALL: nbB_puts(b, "(call "); dump(b, n->a); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_SPREAD: nbB_puts(b, "(spread "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_METHOD: nbB_puts(b, "(method "); dump(b, n->a); nbB_printf(b, " %s", n->str->data); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_INDEX: nbB_puts(b, "(index "); dump(b, n->a); kids(b, n, 0); nbB_putc(b, ')'); break;
  case N_SLICE: nbB_puts(b, "(slice "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ' '); dump(b, n->c); nbB_putc(b, ')'); break;
  case N_FIELD: nbB_puts(b, "(. "); dump(b, n->a); nbB_printf(b, " %s)", n->str->data); break;
  case N_ASSIGN:
    nbB_printf(b, "(%s%s ", n->op < OP_NONE ? opnames[n->op] : "", "=");
    dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_FN: {
    nb_Proto *p = n->proto;
    nbB_printf(b, "(fn %s (", p->name ? p->name->data : "_");
    for (int i = 0; i < p->nparams; i++) {
      if (i) nbB_putc(b, ' ');
      nbB_puts(b, p->params[i]->data);
      if (p->defaults[i]) { nbB_putc(b, '='); dump(b, p->defaults[i]); }
    }
    nbB_puts(b, ") "); dump(b, p->body); nbB_putc(b, ')'); break;
  }
  case N_IF: nbB_puts(b, "(if "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); if (n->c) { nbB_putc(b, ' '); dump(b, n->c); } nbB_putc(b, ')'); break;
  case N_WHILE: nbB_puts(b, "(while "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_FOR: nbB_puts(b, "(for "); dump(b, n->c); nbB_putc(b, ' '); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_BLOCK: nbB_puts(b, "{"); for (int i = 0; i < n->nkids; i++) { if (i) nbB_puts(b, "; "); dump(b, n->kids[i]); } nbB_puts(b, "}"); break;
  case N_BREAK: nbB_puts(b, "break"); break;
  case N_CONTINUE: nbB_puts(b, "continue"); break;
  case N_RETURN: nbB_puts(b, "(return "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_TRY: nbB_puts(b, "(try "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->c); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  case N_IMPORT: nbB_printf(b, "(import %s)", n->str->data); break;
  case N_GLOBAL: nbB_puts(b, "(global"); for (int i = 0; i < n->nkids; i++) nbB_printf(b, " %s", n->names[i]->data); nbB_putc(b, ')'); break;
  case N_NOGRAD: nbB_puts(b, "(no_grad "); dump(b, n->a); nbB_putc(b, ')'); break;
  case N_AUTOCAST: nbB_puts(b, "(autocast "); dump(b, n->a); nbB_putc(b, ' '); dump(b, n->b); nbB_putc(b, ')'); break;
  }
}

/* parses src without a VM; returns the dump of its statements, or "ERROR" */
static char *parse_dump(const char *src) {
  static char out[8192];
  nb_Node *prog;
  nb_Chunk *c = nbP_parse(NULL, src, strlen(src), "t", &prog);
  if (!prog) { nbP_chunk_release(c); snprintf(out, sizeof out, "ERROR"); return out; }
  nb_Buf b = {0};
  for (int i = 0; i < prog->nkids; i++) { if (i) nbB_puts(&b, "; "); dump(&b, prog->kids[i]); }
  snprintf(out, sizeof out, "%s", b.p ? b.p : "");
  nbB_free(&b);
  nbP_chunk_release(c);
  return out;
}
#define SHAPE(src, want) CHECK_STR(parse_dump(src), want)

/* a first parse node for span/position checks; caller releases the chunk */
static nb_Node *first(const char *src, nb_Chunk **c) {
  nb_Node *prog;
  *c = nbP_parse(NULL, src, strlen(src), "t", &prog);
  return prog && prog->nkids ? prog->kids[0] : NULL;
}

/* runs src in vm; returns "name|message|line:col" of the error, or "OK" */
static nb_VM *vm;
static char *run_err(const char *src) {
  static char out[1024];
  int st = nb_run(vm, src, strlen(src), "t.nbl", 0);
  const nb_ErrorInfo *e = nb_last_error(vm);
  if (!st || !e) { snprintf(out, sizeof out, "OK"); return out; }
  /* the report starts "t.nbl:LINE:COL: Name: message" */
  int line = 0, col = 0;
  sscanf(e->report, "t.nbl:%d:%d:", &line, &col);
  snprintf(out, sizeof out, "%s|%s|%d:%d", e->name, e->message, line, col);
  return out;
}
#define SYNERR(src, want) CHECK_STR(run_err(src), want)

static int run(const char *src) { return nb_run(vm, src, strlen(src), "t", 0); }
static void null_write(nb_Sink *s, int stream, const char *d, size_t n) { (void)s; (void)stream; (void)d; (void)n; }
static nb_Sink quiet = { null_write, NULL, NULL, NULL, NULL };

static int has(const nb_Completions *c, const char *s) {
  for (int i = 0; i < c->n; i++) if (strcmp(c->items[i], s) == 0) return 1;
  return 0;
}

int main(void) {
  vm = nb_vm_new(&quiet);

  /* -------------------------------------------------------- shapes */
  TEST("parser/precedence-arith") {
    SHAPE("1 + 2 * 3", "(+ 1 (* 2 3))");
    SHAPE("(1 + 2) * 3", "(* (+ 1 2) 3)");
    SHAPE("a - b - c", "(- (- a b) c)");
    SHAPE("a / b * c % d", "(% (* (/ a b) c) d)");
    SHAPE("a @ b + c", "(+ (@ a b) c)");
    SHAPE("x = 1 +\n 2", "(= x (+ 1 2))");
  }
  TEST("parser/precedence-bitwise") {   /* Python's: | < ^ < & < << >> < + - < unary ~ */
    SHAPE("a | b ^ c & d << e + f", "(| a (^ b (& c (<< d (+ e f)))))");
    SHAPE("a & b | c ^ d", "(| (& a b) (^ c d))");
    SHAPE("a << b >> c", "(>> (<< a b) c)");
    SHAPE("~a & -b", "(& (~ a) (neg b))");
    SHAPE("~a ** 2", "(~ (** a 2))");
    SHAPE("a | b == c", "(== (| a b) c)");
    SHAPE("a .. b | c", "(.. a (| b c))");
    SHAPE("x ^= 1", "(^= x 1)");
    SHAPE("x >>= y & 3", "(>>= x (& y 3))");
  }
  TEST("parser/precedence-unary-power") {
    SHAPE("-2**2", "(neg (** 2 2))");
    SHAPE("-2", "-2");
    SHAPE("- -x", "(neg (neg x))");
    SHAPE("2**3**2", "(** 2 (** 3 2))");
    SHAPE("2 ** -1", "(** 2 -1)");
    SHAPE("-a.b ** 2", "(neg (** (. a b) 2))");
    SHAPE("+x", "x");
    SHAPE("2 * -x", "(* 2 (neg x))");
  }
  TEST("parser/precedence-logic") {
    SHAPE("a or b and c", "(or a (and b c))");
    SHAPE("a and b or c", "(or (and a b) c)");
    SHAPE("not a == b", "(not (== a b))");
    SHAPE("not a and not b", "(and (not a) (not b))");
    SHAPE("a < b and b < c", "(and (< a b) (< b c))");
    SHAPE("x == 1 + 2", "(== x (+ 1 2))");
    SHAPE("a or\n b", "(or a b)");
  }
  TEST("parser/ranges") {
    SHAPE("0..n", "(.. 0 n)");
    SHAPE("a + 1..b * 2", "(.. (+ a 1) (* b 2))");
    SHAPE("0..3 == r", "(== (.. 0 3) r)");
    SHAPE("for i in 0..10 { }", "(for i (.. 0 10) {})");
  }
  TEST("parser/postfix") {
    SHAPE("f(1, x, k=2)", "(call f 1 x k=2)");
    SHAPE("f()(2)", "(call (call f) 2)");
    SHAPE("a.b.c", "(. (. a b) c)");
    SHAPE("a.f(1)", "(method a f 1)");
    SHAPE("a.if", "(. a if)");
    SHAPE("xs[0][1]", "(index (index xs 0) 1)");
    SHAPE("xs[1:2]", "(index xs (slice 1 2 _))");
    SHAPE("xs[::-1]", "(index xs (slice _ _ -1))");
    SHAPE("xs[:3, 1:]", "(index xs (slice _ 3 _) (slice 1 _ _))");
    SHAPE("xs[a:b:c]", "(index xs (slice a b c))");
    SHAPE("xs[i, j]", "(index xs i j)");
    SHAPE("x.len() + 1", "(+ (method x len) 1)");
  }
  TEST("parser/literals") {
    SHAPE("[1, \"a\", nil, true, false]", "(list 1 \"a\" nil true false)");
    SHAPE("[]", "(list)");
    SHAPE("[1,\n 2,\n]", "(list 1 2)");
    SHAPE("{a: 1, \"b c\": 2, if: 3}", "(rec a=1 b c=2 if=3)");
    SHAPE("{\n a: 1,\n b: 2,\n}", "(rec a=1 b=2)");
    SHAPE("{}", "(rec)");
    SHAPE("\"x={x}!\"", "(interp \"x=\" x \"!\")");
    SHAPE("\"{a}{b}\"", "(interp a b)");
    SHAPE("\"lit \\{x}\"", "\"lit {x}\"");
    SHAPE("'no {x}'", "\"no {x}\"");
    SHAPE("\"\\x41\\u{42}\\n\"", "\"AB\n\"");
  }
  TEST("parser/statements") {
    SHAPE("x = 1; y = 2", "(= x 1); (= y 2)");
    SHAPE("x += 1", "(+= x 1)");
    SHAPE("x -= 1\nx *= 2\nx /= 3", "(-= x 1); (*= x 2); (/= x 3)");
    SHAPE("a.b = 1", "(= (. a b) 1)");
    SHAPE("a[0] += 1", "(+= (index a 0) 1)");
    SHAPE("while x { y }", "(while x {y})");
    SHAPE("for k in r { break; continue }", "(for k r {break; continue})");
    SHAPE("import nn", "(import nn)");
    SHAPE("fn f() { global a, b\n a }", "(= f (fn f () {(global a b); a}))");
    SHAPE("no_grad { x }", "(no_grad {x})");
    SHAPE("autocast(\"bf16\") { x @ y }", "(autocast \"bf16\" {(@ x y)})");
    SHAPE("\n\n;;x\n\n", "x");
  }
  TEST("parser/if-try") {
    SHAPE("if a { 1 } else { 2 }", "(if a {1} {2})");
    SHAPE("if a { 1 }\nelse if b { 2 } else { 3 }", "(if a {1} (if b {2} {3}))");
    SHAPE("s = if a { 1 }", "(= s (if a {1}))");
    SHAPE("try { f() } catch e { g(e) }", "(try {(call f)} e {(call g e)})");
    SHAPE("try { f() }\ncatch { 0 }", "(try {(call f)} _ {0})");
  }
  TEST("parser/functions") {
    SHAPE("fn square(x) { x * x }", "(= square (fn square (x) {(* x x)}))");
    SHAPE("fn axpy(a, x, y=0) = a * x + y", "(= axpy (fn axpy (a x y=0) (+ (* a x) y)))");
    SHAPE("add = fn(a, b) a + b", "(= add (fn _ (a b) (+ a b)))");
    SHAPE("f = fn() = 1", "(= f (fn _ () 1))");
    SHAPE("fn f(x) =\n  x", "(= f (fn f (x) x))");
    SHAPE("fn f() { return }", "(= f (fn f () {(return _)}))");
    SHAPE("fn f() { return 1 }", "(= f (fn f () {(return 1)}))");
    SHAPE("map(xs, fn(v) v + 1)", "(call map xs (fn _ (v) (+ v 1)))");
  }
  TEST("parser/spans") {
    nb_Chunk *c; nb_Node *n;
    n = first("x = foo(1, 2) + 3", &c);
    CHECK(n && n->kind == N_ASSIGN, "not an assignment");
    if (n) {
      nb_Node *call = n->b->a;
      CHECK(call->kind == N_CALL && call->pos == 4 && call->end == 13 && call->line == 1 && call->col == 5,
            "call span %u..%u at %d:%d", call->pos, call->end, call->line, call->col);
      CHECK(n->b->pos == 4 && n->b->end == 17, "binary span %u..%u", n->b->pos, n->b->end);
    }
    nbP_chunk_release(c);
    n = first("\n  a.b.c", &c);
    CHECK(n && n->kind == N_FIELD && n->line == 2 && n->col == 3 && n->pos == 3 && n->end == 8, "field span");
    nbP_chunk_release(c);
    /* a function's source text runs to its last token (used by serialize) */
    const char *src = "fn f(x) = (x + 1)\n";
    n = first(src, &c);
    CHECK(n && n->b->proto->src_start == 0 && n->b->proto->src_end == 17, "fn src %u..%u", n ? n->b->proto->src_start : 0, n ? n->b->proto->src_end : 0);
    nbP_chunk_release(c);
    src = "g = fn(n) if n { 1 } else { 2 }";
    n = first(src, &c);
    CHECK(n && n->b->proto->src_end == strlen(src), "if-body fn src end %u", n ? n->b->proto->src_end : 0);
    nbP_chunk_release(c);
  }
  TEST("parser/doc-comments") {
    nb_Chunk *c;
    nb_Node *n = first("## First line.\n##   indented\n  ## third\nfn f(a) = a\n", &c);
    CHECK(n && n->b->proto->doc && strcmp(n->b->proto->doc->data, "First line.\n  indented\nthird") == 0,
          "doc = '%s'", n && n->b->proto->doc ? n->b->proto->doc->data : "(none)");
    nbP_chunk_release(c);
    n = first("# plain comment\nfn f(a) = a\n", &c);
    CHECK(n && !n->b->proto->doc, "a plain comment is not a doc");
    nbP_chunk_release(c);
  }

  /* -------------------------------------------------------- syntax errors */
  TEST("parser/errors-expressions") {
    SYNERR("x = * 2", "SyntaxError|expected an expression, found '*'|1:5");
    SYNERR("x = 1 +", "SyntaxError|unexpected end of input, expected an expression|1:8");
    SYNERR("x = (1 + 2\ny", "SyntaxError|expected ')' to close the parenthesis, found 'y'|2:1");
    SYNERR("[1, 2", "SyntaxError|expected ']' to close the list, found end of input|1:6");
    SYNERR("{a: 1 b: 2}", "SyntaxError|expected '}' to close the record, found 'b'|1:7");
    SYNERR("{a 1}", "SyntaxError|expected ':' after the record field name, found '1'|1:4");
    SYNERR("{1: 2}", "SyntaxError|expected a field name in record, found '1'|1:2");
    SYNERR("{\"{k}\": 2}", "SyntaxError|record keys cannot be interpolated strings|1:1");
    SYNERR("f(1, 2", "SyntaxError|expected ')' to close the argument list, found end of input|1:7");
    SYNERR("f(k=1, 2)", "SyntaxError|positional argument after keyword argument|1:8");
    SYNERR("xs[0 1]", "SyntaxError|expected ']' to close the index, found '1'|1:6");
    SYNERR("xs[]", "SyntaxError|empty index []|1:4");
    SYNERR("a.1", "SyntaxError|expected a field name after '.', found '1'|1:3");
    SYNERR("1 < 2 < 3", "SyntaxError|comparisons cannot be chained; use 'and' (a < b and b < c)|1:7");
    SYNERR("x = 1 $", "SyntaxError|unexpected character|1:7");
    SYNERR("not !x", "SyntaxError|unexpected character '!' (use 'not' for negation)|1:5");
    SYNERR("x = 0x", "SyntaxError|malformed hexadecimal number|1:5");
    SYNERR("x = 9z", "SyntaxError|malformed number|1:5");
    SYNERR("x = \"abc", "SyntaxError|unterminated string: the \" at line 1, column 5 is not closed on its line (a string over several lines is written '''...''' or \"\"\"...\"\"\")|1:5");
    SYNERR("x = 1\ns = '''abc\n\n", "SyntaxError|unterminated string: the ''' at line 2, column 5 is never closed|2:5");
  }
  TEST("parser/errors-strings") {
    SYNERR("\"\\q\"", "SyntaxError|unknown escape '\\q' in string|1:1");
    SYNERR("\"\\x4\"", "SyntaxError|invalid \\x escape in string (needs two hex digits)|1:1");
    SYNERR("\"\\u41\"", "SyntaxError|invalid \\u escape in string (use \\u{XXXX})|1:1");
    SYNERR("\"\\u{}\"", "SyntaxError|invalid \\u{...} escape in string|1:1");
    SYNERR("\"\\u{110000}\"", "SyntaxError|invalid \\u{...} escape in string|1:1");
    SYNERR("\"a {} b\"", "SyntaxError|empty expression in string interpolation|1:4");
    SYNERR("\"a {1 2} b\"", "SyntaxError|unexpected '2' in string interpolation|1:7");
    /* quotes inside an interpolation start a nested string, braces and all */
    SYNERR("s = \"{join(list(\"a\", \"b\"), \"}\\{\")}\"", "OK");
    SYNERR("s = \"{'}\"", "SyntaxError|unterminated string: the \" at line 1, column 5 is never closed: a '{' in it starts an interpolation that does not end (write \\{ for a literal brace)|1:5");
    /* triple-quoted strings: raw and interpolated, nested, a newline after the opening dropped */
    SYNERR("s = '''\n{x}\n'''", "OK");
    SYNERR("s = \"\"\"{'''a\nb'''}\"\"\"", "OK");
    SYNERR("s = \"\"\"\n{x +}\"\"\"", "SyntaxError|unexpected end of input, expected an expression|2:5");   /* positions count the dropped newline */
    SYNERR("x = 1\n\"ok {x $}\"", "SyntaxError|unexpected character|2:8");
  }
  TEST("parser/errors-statements") {
    SYNERR("x = 1 y = 2", "SyntaxError|expected a newline or ';' between statements, found 'y'|1:7");
    SYNERR("fn f() { 1 2 }", "SyntaxError|expected a newline or ';' between statements, found '2'|1:12");
    SYNERR("x = 1 }", "SyntaxError|unexpected '}' (no block is open)|1:7");
    SYNERR("}", "SyntaxError|unexpected '}' (no block is open)|1:1");
    SYNERR("while x print(1)", "SyntaxError|expected '{' to start a block, found 'print'|1:9");
    SYNERR("fn f() {\n  1\n", "SyntaxError|unexpected end of input: '{' at line 1 is not closed|3:1");
    SYNERR("for 1 in x {}", "SyntaxError|expected a loop variable after 'for', found '1'|1:5");
    SYNERR("for i of x {}", "SyntaxError|expected 'in' after the loop variable, found 'of'|1:7");
    SYNERR("try { 1 }\nx", "SyntaxError|expected 'catch' after the try block, found newline|1:10");
    SYNERR("import 1", "SyntaxError|expected a module name after 'import', found '1'|1:8");
    SYNERR("global 1", "SyntaxError|expected a variable name after 'global', found '1'|1:8");
    SYNERR("f(x) = 1", "SyntaxError|cannot assign to this expression (only to a name, x[i] or x.field)|1:1");
    SYNERR("1 += 1", "SyntaxError|cannot assign to this expression (only to a name, x[i] or x.field)|1:1");
  }
  TEST("parser/errors-functions") {
    SYNERR("fn f x", "SyntaxError|expected '(' after the function name, found 'x'|1:6");
    SYNERR("g = fn x", "SyntaxError|expected '(' after 'fn', found 'x'|1:8");
    SYNERR("fn f(a b) = 1", "SyntaxError|expected ')' to close the parameter list, found 'b'|1:8");
    SYNERR("fn f(1) = 1", "SyntaxError|expected a parameter name, found '1'|1:6");
    SYNERR("fn f(a, a) = 1", "SyntaxError|duplicate parameter 'a'|1:9");
    SYNERR("fn f(a=1, b) = 1", "SyntaxError|parameter 'b' without a default follows one with a default|1:11");
    SYNERR("fn f(x) {\n global x\n}", "SyntaxError|'x' is a parameter and cannot be declared global|1:9");
    SYNERR("break", "SyntaxError|'break' outside a loop|1:1");
    SYNERR("if true { continue }", "SyntaxError|'continue' outside a loop|1:11");
    SYNERR("while true { f = fn() { break } }", "SyntaxError|'break' outside a loop|1:25");
    SYNERR("return 1", "SyntaxError|'return' outside a function|1:1");
  }
  TEST("parser/errors-limits") {
    char src[4096]; int n = 0;
    for (int i = 0; i < 300; i++) src[n++] = '(';
    src[n++] = '1';
    for (int i = 0; i < 300; i++) src[n++] = ')';
    src[n] = 0;
    SYNERR(src, "SyntaxError|code is nested too deeply (more than 200 levels)|1:201");
    n = 0;
    for (int i = 0; i < 300; i++) src[n++] = '-';
    src[n++] = 'x'; src[n] = 0;
    CHECK(strstr(run_err(src), "nested too deeply") != NULL, "300 unary minus: %s", run_err(src));
    n = snprintf(src, sizeof src, "x = 0");
    for (int i = 0; i < 900; i++) n += snprintf(src + n, sizeof src - (size_t)n, "+1");
    SYNERR(src, "SyntaxError|expression is too long|1:1606");
    n = snprintf(src, sizeof src, "f");
    for (int i = 0; i < 250; i++) n += snprintf(src + n, sizeof src - (size_t)n, "()");
    SYNERR(src, "SyntaxError|expression chain is too long (more than 200 calls/indexes)|1:402");
    /* 200 levels are fine */
    n = 0;
    for (int i = 0; i < 150; i++) src[n++] = '(';
    src[n++] = '1';
    for (int i = 0; i < 150; i++) src[n++] = ')';
    src[n] = 0;
    SYNERR(src, "OK");
  }
  TEST("parser/error-report") {
    { const char *s_ = "x = 1\ny = (2 +\n  )\n"; nb_run(vm, s_, strlen(s_), "file.nbl", 0); }
    const nb_ErrorInfo *e = nb_last_error(vm);
    CHECK(e != NULL, "no error");
    if (e) {
      CHECK_STR(e->name, "SyntaxError");
      CHECK_STR(e->report, "file.nbl:3:3: SyntaxError: expected an expression, found ')'\n 3 |   )\n   |   ^\n");
    }
    /* a syntax error leaves the VM usable, and nothing of the chunk ran */
    CHECK_INT(run("q = 1\nq q"), 2);
    CHECK(strstr(run_err("print(q)"), "undefined variable 'q'") != NULL, "q was assigned: %s", run_err("print(q)"));
  }
  TEST("parser/no-vm") {
    nb_Node *prog;
    nb_Chunk *c = nbP_parse(NULL, "x = (1 +", 8, NULL, &prog);
    CHECK(prog == NULL && nbP_last_error_at_eof, "error at eof expected");
    CHECK_STR(c->filename, "<input>");
    nbP_chunk_release(c);
    c = nbP_parse(NULL, "x = ) + 1", 9, "t", &prog);
    CHECK(prog == NULL && !nbP_last_error_at_eof && nbP_last_error_pos == 4, "error pos %u", nbP_last_error_pos);
    nbP_chunk_release(c);
  }

  /* -------------------------------------------------------- is_complete */
  TEST("complete/is-complete") {
    const char *ind;
    struct { const char *src; nb_Completeness want; } cases[] = {
      { "1 + 2", NB_COMPLETE }, { "", NB_COMPLETE }, { "x = 1\n", NB_COMPLETE },
      { "fn f() { 1 }", NB_COMPLETE }, { "# comment", NB_COMPLETE },
      { "fn f() {", NB_INCOMPLETE }, { "if x {\n  1\n} else {", NB_INCOMPLETE },
      { "f(1,", NB_INCOMPLETE }, { "[1,\n2", NB_INCOMPLETE }, { "{a: 1,", NB_INCOMPLETE },
      /* a one-quote string ends on its line: more lines cannot close it; a
      ** triple-quoted one, or an interpolation's braces, may go on */
      { "\"open string", NB_INVALID }, { "'open", NB_INVALID }, { "x = \"a\nb\"", NB_INVALID },
      { "\"interp {x", NB_INCOMPLETE }, { "s = '''open", NB_INCOMPLETE }, { "s = \"\"\"a\n{x}", NB_INCOMPLETE },
      { "s = '''a\nb'''", NB_COMPLETE }, { "s = \"\"\"{x}\n\"\"\"\n", NB_COMPLETE },
      { "x = 1 +", NB_INCOMPLETE }, { "x =", NB_INCOMPLETE }, { "a and", NB_INCOMPLETE },
      { "fn f(x) =", NB_INCOMPLETE },
      { ")", NB_INVALID }, { "x = 1 }", NB_INVALID }, { "1 2", NB_INVALID }, { "x = $", NB_INVALID },
      { "f(1))", NB_INVALID }, { "x = * 2", NB_INVALID }, { "fn f(a, a) = 1", NB_INVALID },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      nb_Completeness got = nb_is_complete(cases[i].src, &ind);
      CHECK(got == cases[i].want, "'%s': got %d, want %d", cases[i].src, got, cases[i].want);
    }
    nb_is_complete("fn f() {", &ind);
    CHECK_STR(ind, "    ");
    nb_is_complete("f(1,", &ind);
    CHECK_STR(ind, "");
    nb_is_complete("1", &ind);
    CHECK_STR(ind, "");
    CHECK(nb_is_complete("x = 1", NULL) == NB_COMPLETE, "NULL indent");
  }

  /* -------------------------------------------------------- completion */
  TEST("complete/globals-builtins-keywords") {
    run("my_long_variable_name = 1\nmy_other = {weight: 1, bias: 2, wx: 3}\nfn my_fn(a, b=2) = a\n");
    nb_Completions c;
    nb_complete(vm, "my_l", 4, &c);
    CHECK(c.n == 1 && has(&c, "my_long_variable_name") && c.start == 0 && c.end == 4, "my_l: n=%d start=%d", c.n, c.start);
    nb_completions_free(&c);
    nb_complete(vm, "x = 1 + my_", 11, &c);
    CHECK(c.n == 3 && has(&c, "my_fn") && has(&c, "my_other") && c.start == 8 && c.end == 11, "my_: n=%d start=%d", c.n, c.start);
    CHECK(c.n == 3 && strcmp(c.items[0], "my_fn") == 0, "sorted");
    nb_completions_free(&c);
    nb_complete(vm, "pri", 3, &c);
    CHECK(has(&c, "print") && !has(&c, "eprint"), "builtin print");
    nb_completions_free(&c);
    nb_complete(vm, "wh", 2, &c);
    CHECK(has(&c, "while"), "keyword while");
    nb_completions_free(&c);
    nb_complete(vm, "no_", 3, &c);
    CHECK(has(&c, "no_grad"), "keyword no_grad");
    nb_completions_free(&c);
    nb_complete(vm, "autoc", 5, &c);
    CHECK(has(&c, "autocast") && has(&c, "autocast_dtype"), "keyword autocast");
    nb_completions_free(&c);
    nb_complete(vm, "zzzq", 4, &c);
    CHECK(c.n == 0, "no matches: %d", c.n);
    nb_completions_free(&c);
    /* cursor in the middle of the line */
    nb_complete(vm, "my_l + 1", 4, &c);
    CHECK(c.n == 1 && c.end == 4, "mid-line");
    nb_completions_free(&c);
  }
  TEST("complete/record-fields") {
    nb_Completions c;
    nb_complete(vm, "my_other.w", 10, &c);
    CHECK(has(&c, "weight") && has(&c, "wx") && !has(&c, "bias") && c.start == 9 && c.end == 10, "fields after '.': n=%d", c.n);
    nb_completions_free(&c);
    nb_complete(vm, "my_other.", 9, &c);
    CHECK(has(&c, "weight") && has(&c, "bias") && has(&c, "len"), "all fields and uniform-call builtins");
    nb_completions_free(&c);
    run("nest = {inner: {deep: 1}}");
    nb_complete(vm, "print(nest.inner.d", 18, &c);
    CHECK(has(&c, "deep") && c.start == 17, "nested chain: n=%d", c.n);
    nb_completions_free(&c);
    nb_complete(vm, "unknown_thing.x", 15, &c);
    CHECK(c.n == 0, "unknown chain: %d", c.n);
    nb_completions_free(&c);
  }
  TEST("complete/inspect") {
    char *d = nb_inspect(vm, "len", 3);
    CHECK(d && strstr(d, "len(x)") == d && strstr(d, "the length of"), "len doc: %s", d ? d : "(null)");
    free(d);
    d = nb_inspect(vm, "my_fn", 2);
    CHECK_STR(d, "my_fn(a, b=2)");
    free(d);
    d = nb_inspect(vm, "my_fn(1, ", 9);    /* inside the call: the callee */
    CHECK_STR(d, "my_fn(a, b=2)");
    free(d);
    d = nb_inspect(vm, "my_other.weight", 15);
    CHECK_STR(d, "my_other.weight: number\n1");
    free(d);
    d = nb_inspect(vm, "my_other.len", 12);   /* not a field: the function (uniform call) */
    CHECK(d && strstr(d, "len(x)") == d, "uniform call inspect: %s", d ? d : "(null)");
    free(d);
    d = nb_inspect(vm, "no_such_name", 5);
    CHECK(d == NULL, "unknown name");
    free(d);
    run("## Adds one.\nfn inc(x) = x + 1");
    d = nb_inspect(vm, "inc", 3);
    CHECK_STR(d, "inc(x)\nAdds one.");
    free(d);
    d = nb_inspect(vm, "", 0);
    CHECK(d == NULL, "empty source");
    free(d);
  }
  TEST("complete/globals-list-reset") {
    char *g = nb_globals_list(vm);
    CHECK(strstr(g, "my_long_variable_name\tnumber\n") && strstr(g, "my_fn\tfunction\n") && strstr(g, "argv\tlist\n"), "globals: %s", g);
    free(g);
    nb_reset(vm);
    g = nb_globals_list(vm);
    CHECK_STR(g, "argv\tlist\n");
    free(g);
  }

  nb_vm_free(vm);
  return t_failed ? 1 : 0;
}
