/*
** lib/ltcompose.c — tensor builtins composed from other public tensor ops:
** einsum, masked_fill, norm, view, multinomial.  Being compositions, they are
** differentiable and run on every device without code of their own; each
** says here why its composition is the right one.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ltensor.h"
#include "tensor/nn/nn.h"

/* ------------------------------------------------------------ einsum
** einsum(eq, a, b, ...) as torch.einsum: subscripts are letters, "..." stands
** for broadcast dimensions, "->out" is optional (then the letters used once,
** in alphabetical order, after the "..." dimensions).  Operands are
** contracted left to right, two at a time, each pair as ONE batched matmul:
**     A -> [batch..., left, contracted],  B -> [batch..., contracted, right]
** where batch labels are in both and still needed (by the output or a later
** operand), contracted ones in both and not needed, left/right in one only.
** A label in one operand that nothing later needs is summed out first; a
** label repeated within one operand takes the diagonal. */
#define ES_MAXL 64            /* labels: 52 letters + up to 12 "..." dims */
#define ES_ELL 52             /* label of the first "..." dimension */

typedef struct { nt_Tensor *t; int lab[NT_MAXDIM]; int nd; } Term;

static int es_fail(nb_VM *vm, const char *msg, const char *eq) {
  return nb_error_kind(vm, "ValueError", "einsum(\"%s\"): %s", eq, msg);
}
static int letter(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1; }

/* parses one subscript term of ndim dims into labels; ell = the number of
** "..." dims this term has (ndim - letters), aligned right in [0, maxell) */
static int parse_term(nb_VM *vm, const char *eq, const char *s, size_t n, int ndim, int maxell, int *lab, int *nlab, bool *has_ell) {
  int letters = 0; *has_ell = false;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '.') {
      if (*has_ell || i + 2 >= n + 0 || s[i + 1] != '.' || s[i + 2] != '.') return es_fail(vm, "\"...\" must be three dots, at most once per operand", eq);
      *has_ell = true; i += 2;
    } else if (s[i] == ' ') continue;
    else if (letter(s[i]) < 0) return es_fail(vm, "subscripts must be letters a-z, A-Z or \"...\"", eq);
    else letters++;
  }
  int ell = ndim - letters;
  if (ndim >= 0 && (ell < 0 || (!*has_ell && ell != 0))) {
    nb_error_kind(vm, "ValueError", "einsum(\"%s\"): the subscript \"%.*s\" has %d letters but its operand has %d dimensions", eq, (int)n, s, letters, ndim);
    return NB_ERR;
  }
  if (ndim < 0) ell = maxell;   /* the output: all the "..." dims */
  if (ell > maxell) return es_fail(vm, "too many \"...\" dimensions", eq);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '.') { for (int e = 0; e < ell; e++) lab[k++] = ES_ELL + maxell - ell + e; i += 2; }
    else if (s[i] != ' ') lab[k++] = letter(s[i]);
  }
  *nlab = k;
  return NB_OK;
}

static nt_Tensor *es_permute(nt_Tensor *t, const int *perm, int n) { return nt_permute(t, perm, n); }

/* the diagonal over axes p < q (equal sizes): sum over q of t * eye */
static nt_Tensor *es_diagonal(Term *x, int p, int q) {
  nt_Tensor *t = x->t;
  int64_t n = t->shape[p];
  nt_Tensor *e = nt_eye_on(n, n, t->dtype, t->device);   /* made where t is: no host copy */
  if (!e) return NULL;
  int64_t sh[NT_MAXDIM];
  for (int i = 0; i < t->ndim; i++) sh[i] = i == p || i == q ? n : 1;
  nt_Tensor *eb = nt_reshape(e, sh, t->ndim), *m = eb ? nt_mul(t, eb) : NULL, *s = m ? nt_sum(m, &q, 1, false) : NULL;
  nt_release(e); nt_release(eb); nt_release(m);
  return s;
}

/* sums out the labels of x that `needed` does not contain, and takes the
** diagonal of repeated ones */
static int es_reduce(Term *x, const bool *needed) {
  for (int p = 0; p < x->nd; p++)
    for (int q = p + 1; q < x->nd; q++)
      if (x->lab[p] == x->lab[q]) {
        if (x->t->shape[p] != x->t->shape[q]) { nt_error_set("einsum: a subscript repeated within one operand needs equal sizes there"); return -1; }
        nt_Tensor *d = es_diagonal(x, p, q);
        if (!d) return -1;
        nt_release(x->t); x->t = d;
        memmove(x->lab + q, x->lab + q + 1, sizeof(int) * (size_t)(x->nd - q - 1)); x->nd--;
        q--;
      }
  int axes[NT_MAXDIM], na = 0, keep[NT_MAXDIM], nk = 0;
  for (int i = 0; i < x->nd; i++) { if (needed[x->lab[i]]) keep[nk++] = x->lab[i]; else axes[na++] = i; }
  if (!na) return 0;
  nt_Tensor *s = nt_sum(x->t, axes, na, false);
  if (!s) return -1;
  nt_release(x->t); x->t = s;
  memcpy(x->lab, keep, sizeof(int) * (size_t)nk); x->nd = nk;
  return 0;
}

static int find(const Term *x, int l) { for (int i = 0; i < x->nd; i++) if (x->lab[i] == l) return i; return -1; }

/* A <- A (x) B as one batched matmul; needed: labels wanted after this pair */
static int es_pair(Term *a, Term *b, const bool *needed) {
  int bat[NT_MAXDIM], nb = 0, con[NT_MAXDIM], nc = 0, lft[NT_MAXDIM], nl = 0, rgt[NT_MAXDIM], nr = 0;
  for (int i = 0; i < a->nd; i++) {
    int l = a->lab[i];
    if (find(b, l) >= 0) { if (needed[l]) bat[nb++] = l; else con[nc++] = l; }
    else lft[nl++] = l;
  }
  for (int i = 0; i < b->nd; i++) if (find(a, b->lab[i]) < 0) rgt[nr++] = b->lab[i];
  /* a contracted label of size 1 on one side is broadcast to the other's size */
  for (int k = 0; k < nc; k++) {
    int pa = find(a, con[k]), pb = find(b, con[k]);
    int64_t sa = a->t->shape[pa], sb = b->t->shape[pb];
    if (sa == sb) continue;
    Term *small = sa == 1 ? a : b; int ps = sa == 1 ? pa : pb; int64_t to = sa == 1 ? sb : sa;
    int64_t sh[NT_MAXDIM];
    for (int i = 0; i < small->t->ndim; i++) sh[i] = i == ps ? to : -1;
    nt_Tensor *e = nt_expand(small->t, sh, small->t->ndim);
    if (!e) return -1;
    nt_release(small->t); small->t = e;
  }
  int pa[NT_MAXDIM], pb[NT_MAXDIM], k = 0;
  int64_t sa[NT_MAXDIM + 2], sb[NT_MAXDIM + 2], L = 1, C = 1, R = 1, outsh[NT_MAXDIM];
  for (int i = 0; i < nb; i++) pa[k++] = find(a, bat[i]);
  for (int i = 0; i < nl; i++) { pa[k] = find(a, lft[i]); L *= a->t->shape[pa[k]]; k++; }
  for (int i = 0; i < nc; i++) { pa[k] = find(a, con[i]); C *= a->t->shape[pa[k]]; k++; }
  k = 0;
  for (int i = 0; i < nb; i++) pb[k++] = find(b, bat[i]);
  for (int i = 0; i < nc; i++) pb[k++] = find(b, con[i]);
  for (int i = 0; i < nr; i++) { pb[k] = find(b, rgt[i]); R *= b->t->shape[pb[k]]; k++; }
  int no = 0;
  for (int i = 0; i < nb; i++) {
    int64_t x = a->t->shape[pa[i]], y = b->t->shape[pb[i]];
    sa[i] = x; sb[i] = y; outsh[no++] = x == 1 ? y : x;
  }
  for (int i = 0; i < nl; i++) outsh[no++] = a->t->shape[find(a, lft[i])];
  for (int i = 0; i < nr; i++) outsh[no++] = b->t->shape[find(b, rgt[i])];
  sa[nb] = L; sa[nb + 1] = C; sb[nb] = C; sb[nb + 1] = R;
  nt_Tensor *ap = es_permute(a->t, pa, a->nd), *bp = es_permute(b->t, pb, b->nd);
  nt_Tensor *a3 = ap ? nt_reshape(ap, sa, nb + 2) : NULL, *b3 = bp ? nt_reshape(bp, sb, nb + 2) : NULL;
  nt_Tensor *m = a3 && b3 ? nt_matmul(a3, b3) : NULL, *r = m ? nt_reshape(m, outsh, no) : NULL;
  nt_release(ap); nt_release(bp); nt_release(a3); nt_release(b3); nt_release(m);
  if (!r) return -1;
  nt_release(a->t); a->t = r;
  a->nd = 0;
  for (int i = 0; i < nb; i++) a->lab[a->nd++] = bat[i];
  for (int i = 0; i < nl; i++) a->lab[a->nd++] = lft[i];
  for (int i = 0; i < nr; i++) a->lab[a->nd++] = rgt[i];
  return 0;
}

static int b_einsum(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "einsum";
  /* variadic: args[0] is the equation (the builtin has no keyword params) */
  if (n < 2 || args[0].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "einsum(equation, *operands): expected an equation string and at least one tensor");
  const char *eq = nb_str(args[0])->data;
  int nops = n - 1;
  if (nops > 16) return es_fail(vm, "at most 16 operands", eq);
  Tmp tp = {0};
  Term terms[16];
  memset(terms, 0, sizeof terms);
  const char *arrow = strstr(eq, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
  int st = NB_OK, maxell = 0;
  /* split the left side on commas, operands first for their ndim */
  const char *starts[16]; size_t lens[16]; int nt = 0;
  for (const char *p = eq; p <= eq + lhs_len; ) {
    const char *c = memchr(p, ',', (size_t)(eq + lhs_len - p));
    const char *e = c ? c : eq + lhs_len;
    if (nt == 16) { nt++; break; }
    starts[nt] = p; lens[nt] = (size_t)(e - p); nt++;
    if (!c) break;
    p = c + 1;
  }
  if (nt != nops) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "einsum(\"%s\"): %d subscripts for %d operands", eq, nt, nops); }
  for (int i = 0; i < nops; i++) {
    nt_Tensor *t = nbT_arg(vm, &tp, fname, "operand", args[i + 1]);
    if (!t) { nbT_tmp_free(&tp); return NB_ERR; }
    terms[i].t = nt_retain(t);
    int letters = 0; bool ell = false;
    for (size_t j = 0; j < lens[i]; j++) { if (letter(starts[i][j]) >= 0) letters++; if (starts[i][j] == '.') ell = true; }
    if (ell && t->ndim - letters > maxell) maxell = t->ndim - letters;
  }
  if (maxell > ES_MAXL - ES_ELL) { st = es_fail(vm, "too many \"...\" dimensions", eq); goto done; }
  for (int i = 0; i < nops && !st; i++) {
    bool ell;
    st = parse_term(vm, eq, starts[i], lens[i], terms[i].t->ndim, maxell, terms[i].lab, &terms[i].nd, &ell);
  }
  if (st) goto done;
  /* the output labels */
  int olab[ES_MAXL], no = 0, count[ES_MAXL] = {0};
  int64_t size[ES_MAXL];
  for (int l = 0; l < ES_MAXL; l++) size[l] = -1;
  for (int i = 0; i < nops; i++)
    for (int j = 0; j < terms[i].nd; j++) {
      int l = terms[i].lab[j]; int64_t s = terms[i].t->shape[j];
      bool seen_here = false;
      for (int q = 0; q < j; q++) if (terms[i].lab[q] == l) seen_here = true;
      if (!seen_here) count[l]++;
      if (size[l] < 0 || size[l] == 1) size[l] = s;
      else if (s != size[l] && !(s == 1 && l >= ES_ELL)) {
        char c = l < 26 ? (char)('a' + l) : l < 52 ? (char)('A' + l - 26) : '.';
        st = nb_error_kind(vm, "ValueError", "einsum(\"%s\"): subscript '%c' has sizes %lld and %lld", eq, c, (long long)size[l], (long long)s);
        goto done;
      }
    }
  if (arrow) {
    bool ell;
    const char *o = arrow + 2;
    if (strchr(o, ',') || strstr(o, "->")) { st = es_fail(vm, "the output has one subscript", eq); goto done; }
    if ((st = parse_term(vm, eq, o, strlen(o), -1, maxell, olab, &no, &ell))) goto done;
    if (!ell && maxell) {  /* torch: "..." dims must appear in the output */
      for (int l = ES_ELL; l < ES_ELL + maxell; l++) {
        bool any = false;
        for (int i = 0; i < nops; i++) if (find(&terms[i], l) >= 0 && terms[i].t->shape[find(&terms[i], l)] != 1) any = true;
        if (any) { st = es_fail(vm, "the output must have \"...\" when the operands do", eq); goto done; }
      }
    }
    for (int i = 0; i < no; i++) {
      for (int j = 0; j < i; j++) if (olab[j] == olab[i]) { st = es_fail(vm, "a subscript appears twice in the output", eq); goto done; }
      if (!count[olab[i]]) { st = nb_error_kind(vm, "ValueError", "einsum(\"%s\"): output subscript '%c' appears in no operand", eq, olab[i] < 26 ? 'a' + olab[i] : 'A' + olab[i] - 26); goto done; }
    }
  } else {
    for (int l = ES_ELL; l < ES_ELL + maxell; l++) olab[no++] = l;
    for (int l = 0; l < ES_ELL; l++) if (count[l] == 1) {
      /* once overall: in one operand, not repeated there either */
      int reps = 0;
      for (int i = 0; i < nops; i++) for (int j = 0; j < terms[i].nd; j++) if (terms[i].lab[j] == l) reps++;
      if (reps == 1) olab[no++] = l;
    }
  }
  /* contract left to right: before each pair, each side drops (sums) the
  ** labels that neither the other side, a later operand nor the output uses */
  for (int i = 0; i < nops && !st; i++) {
    bool after[ES_MAXL] = {0}, need[ES_MAXL];
    for (int k = 0; k < no; k++) after[olab[k]] = true;
    for (int j = i + 1; j < nops; j++) for (int k = 0; k < terms[j].nd; k++) after[terms[j].lab[k]] = true;
    memcpy(need, after, sizeof after);
    if (i > 0) for (int k = 0; k < terms[0].nd; k++) need[terms[0].lab[k]] = true;
    if (es_reduce(&terms[i], need)) { st = nbT_err(vm); break; }
    if (i > 0 && es_pair(&terms[0], &terms[i], after)) { st = nbT_err(vm); break; }
  }
  if (st) goto done;
  {
    bool needed[ES_MAXL] = {0};
    for (int k = 0; k < no; k++) needed[olab[k]] = true;
    if (es_reduce(&terms[0], needed)) { st = nbT_err(vm); goto done; }
    /* "..." dims of size 1 that only some operands had */
    int perm[NT_MAXDIM];
    nt_Tensor *r = terms[0].t;
    int64_t sh[NT_MAXDIM];
    for (int k = 0; k < no; k++) sh[k] = size[olab[k]];
    bool all_there = true;
    for (int k = 0; k < no; k++) { perm[k] = find(&terms[0], olab[k]); if (perm[k] < 0) all_there = false; }
    if (!all_there) {   /* an output label that was broadcast away: add it as size 1, then expand */
      for (int k = 0; k < no; k++) if (find(&terms[0], olab[k]) < 0) {
        nt_Tensor *u = nt_unsqueeze(terms[0].t, terms[0].nd);
        if (!u) { st = nbT_err(vm); goto done; }
        nt_release(terms[0].t); terms[0].t = u; terms[0].lab[terms[0].nd++] = olab[k];
      }
      for (int k = 0; k < no; k++) perm[k] = find(&terms[0], olab[k]);
      r = terms[0].t;
    }
    nt_Tensor *p = nt_permute(r, perm, no), *e = p ? nt_expand(p, sh, no) : NULL;
    nt_release(p);
    st = nbT_ret(vm, e, out);
  }
done:
  for (int i = 0; i < nops; i++) nt_release(terms[i].t);
  nbT_tmp_free(&tp);
  return st;
}

/* ------------------------------------------------------------ masked_fill
** masked_fill(x, mask, value): x where mask is false, value where true (mask
** broadcast to x's shape, torch's Tensor.masked_fill); a copy, differentiable
** in x (zero gradient where filled). */
static int b_masked_fill(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "masked_fill"; Tmp tp = {0};
  TENSOR_ARG(x, 0, "x");
  TENSOR_ARG(mask, 1, "mask");
  if (mask->dtype != NT_BOOL) { int st_ = nb_error_kind(vm, "TypeError", "masked_fill: the mask must be a bool tensor, got %s", nt_dtype_name(mask->dtype)); nbT_tmp_free(&tp); return st_; }
  double v;
  if (nbT_num_arg(vm, fname, "value", args[2], &v)) { nbT_tmp_free(&tp); return NB_ERR; }
  if (!nt_dtype_is_float(x->dtype) && v != floor(v)) { int st_ = nb_error_kind(vm, "TypeError", "masked_fill: value %g does not fit a %s tensor", v, nt_dtype_name(x->dtype)); nbT_tmp_free(&tp); return st_; }
  nt_Tensor *mb = nt_broadcast_to(mask, x->shape, x->ndim);
  if (!mb) { nbT_tmp_free(&tp); return nbT_err(vm); }
  nt_Tensor *f = nt_full(NULL, 0, v, x->dtype, x->device);
  nt_Tensor *r = f ? nt_where(mb, f, x) : NULL;
  nt_release(mb); nt_release(f);
  DONE(r);
}

/* ------------------------------------------------------------ norm
** norm(x, p=2, axis=nil, keepdim=false): the vector p-norm over axis (all
** elements when nil), torch.linalg.vector_norm: p = inf/-inf is max/min |x|,
** p = 0 counts non-zeros, other p is (sum |x|^p)^(1/p).  p = 2 as sqrt(sum
** x*x); its gradient at an all-zero x is 0, as torch's, not 0/0. */
static int b_norm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "norm"; Tmp tp = {0};
  double p = 2;
  if (args[1].t != NB_TNIL && nbT_num_arg(vm, fname, "p", args[1], &p)) return NB_ERR;
  int axes[NT_MAXDIM], na;
  if (nbT_axes_arg(vm, fname, args[2], axes, &na)) return NB_ERR;
  bool keep = nb_truthy(args[3]);
  TENSOR_ARG(x, 0, "x");
  if (!nt_dtype_is_float(x->dtype)) { int st_ = nb_error_kind(vm, "TypeError", "norm: expected a floating-point tensor, got %s", nt_dtype_name(x->dtype)); nbT_tmp_free(&tp); return st_; }
  const int *ax = na ? axes : NULL;
  nt_Tensor *r = NULL;
  if (p == 2) {
    /* sqrt(s) with s = sum x^2, its gradient x/sqrt(s) masked to 0 where s == 0:
    ** computed as sqrt(s + (s == 0)) - (s == 0), whose value is sqrt(s) and
    ** whose derivative at s == 0 is finite (1/2), times d s = 2x = 0 there */
    nt_Tensor *sq = nt_mul(x, x), *s = sq ? nt_sum(sq, ax, na, keep) : NULL;
    nt_Tensor *z = s ? nt_binary_scalar_ex(NT_OP_EQ, s, 0, NT_SCALAR_INT) : NULL, *zf = z ? nt_to_dtype(z, s->dtype) : NULL;
    nt_Tensor *sz = zf ? nt_add(s, zf) : NULL, *rt = sz ? nt_sqrt(sz) : NULL;
    r = rt ? nt_sub(rt, zf) : NULL;
    nt_release(sq); nt_release(s); nt_release(z); nt_release(zf); nt_release(sz); nt_release(rt);
  } else if (isinf(p)) {
    nt_Tensor *a = nt_abs(x);
    r = a ? nt_reduce(p > 0 ? NT_OP_MAX : NT_OP_MIN, a, ax, na, keep) : NULL;
    nt_release(a);
  } else if (p == 0) {
    nt_Tensor *nz = nt_binary_scalar_ex(NT_OP_NE, x, 0, NT_SCALAR_INT), *f = nz ? nt_to_dtype(nz, x->dtype) : NULL;
    r = f ? nt_sum(f, ax, na, keep) : NULL;
    nt_release(nz); nt_release(f);
  } else {
    nt_Tensor *a = nt_abs(x), *ap = a ? nt_binary_scalar_ex(NT_OP_POW, a, p, NT_SCALAR_FLOAT) : NULL;
    nt_Tensor *s = ap ? nt_sum(ap, ax, na, keep) : NULL;
    r = s ? nt_binary_scalar_ex(NT_OP_POW, s, 1.0 / p, NT_SCALAR_FLOAT) : NULL;
    nt_release(a); nt_release(ap); nt_release(s);
  }
  DONE(r);
}

/* ------------------------------------------------------------ view
** view(x, shape...): reshape that never copies (torch's Tensor.view): an
** error when x's strides cannot express the new shape. */
static int b_view(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  const char *fname = "view"; Tmp tp = {0};
  if (n < 1) return nb_error_kind(vm, "TypeError", "view(x, *shape): missing x");
  int64_t shape[NT_MAXDIM]; int nd;
  if (nbT_view_shape_arg(vm, fname, args + 1, n - 1, shape, &nd)) return NB_ERR;
  TENSOR_ARG(x, 0, "x");
  nt_Tensor *r = nt_reshape(x, shape, nd);
  if (r && r->storage != x->storage) {
    char a[128], b[128];
    nt_release(r); nbT_tmp_free(&tp);
    return nb_error_kind(vm, "ValueError", "view: a tensor of shape %s with these strides cannot be viewed as %s without a copy (it is not contiguous along the merged axes); use reshape(), which copies when it must",
                         nt_shape_str(x->shape, x->ndim, a, sizeof a), nt_shape_str(shape, nd, b, sizeof b));
  }
  DONE(r);
}

/* ------------------------------------------------------------ multinomial
** multinomial(probs, n, replacement=false): n category indices per row of
** probs ([K] or [B, K], non-negative, not necessarily normalised), i64, as
** torch.multinomial.  Both modes use the Gumbel trick on the same uniforms
** as rand(): with replacement each draw is argmax(log p + G) with fresh
** Gumbel noise G = -log(-log u), one [.., n, K] matrix; without replacement
** the n largest of log p + G (one G per category) are a sample of n distinct
** categories with the sequential-draw probabilities (Gumbel-top-k). */
static int b_multinomial(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "multinomial"; Tmp tp = {0};
  int64_t ns;
  if (nbT_int_arg(vm, fname, "n", args[1], &ns)) return NB_ERR;
  bool repl = nb_truthy(args[2]);
  TENSOR_ARG(p, 0, "probs");
  if (p->ndim < 1 || p->ndim > 2) { int st_ = nb_error_kind(vm, "ValueError", "multinomial: probs must be 1-D or 2-D, got %d dimensions", p->ndim); nbT_tmp_free(&tp); return st_; }
  int64_t K = p->shape[p->ndim - 1];
  if (ns <= 0 || K == 0) { nbT_tmp_free(&tp); return nb_error_kind(vm, "ValueError", "multinomial: n must be positive and probs non-empty (n = %lld, %lld categories)", (long long)ns, (long long)K); }
  bool prev = nt_set_grad_enabled(false);
  nt_Tensor *pf = nt_to_dtype(p, NT_F64), *lo = NULL, *nz = NULL, *cnt = NULL;
  double bad = 0, minnz = 0;
  /* checks on the host: negative / non-finite entries, an all-zero row, n > non-zero categories */
  if (pf) {
    nt_Tensor *fin = nt_unary(NT_OP_ABS, pf), *mx = fin ? nt_reduce(NT_OP_MAX, fin, NULL, 0, false) : NULL;
    double m = 0;
    if (mx && !nt_item(mx, &m) && !isfinite(m)) bad = 1;
    nt_release(fin); nt_release(mx);
    lo = nt_reduce(NT_OP_MIN, pf, NULL, 0, false);
    double l = 0;
    if (lo && !nt_item(lo, &l) && l < 0) bad = 2;
    nz = nt_binary_scalar_ex(NT_OP_GT, pf, 0, NT_SCALAR_INT);
    int ax = p->ndim - 1;
    cnt = nz ? nt_sum(nz, &ax, 1, false) : NULL;
    nt_Tensor *cmin = cnt ? nt_reduce(NT_OP_MIN, cnt, NULL, 0, false) : NULL;
    if (cmin) nt_item(cmin, &minnz);
    nt_release(cmin);
  }
  nt_Tensor *r = NULL;
  if (!pf || !lo || !cnt) { nt_set_grad_enabled(prev); nt_release(pf); nt_release(lo); nt_release(nz); nt_release(cnt); nbT_tmp_free(&tp); return nbT_err(vm); }
  nt_release(lo); nt_release(nz); nt_release(cnt);
  int st = NB_OK;
  if (bad == 1) st = nb_error_kind(vm, "ValueError", "multinomial: probs contain inf or nan");
  else if (bad == 2) st = nb_error_kind(vm, "ValueError", "multinomial: probs contain a negative entry");
  else if (minnz == 0) st = nb_error_kind(vm, "ValueError", "multinomial: a row of probs sums to 0");
  else if (!repl && ns > (int64_t)minnz) st = nb_error_kind(vm, "ValueError", "multinomial: cannot draw %lld distinct categories without replacement from a row with %lld non-zero probabilities", (long long)ns, (long long)minnz);
  if (!st) {
    nt_Tensor *lp = nt_log(pf);   /* -inf for p == 0: never drawn */
    int64_t sh[3]; int nd = 0;
    if (p->ndim == 2) sh[nd++] = p->shape[0];
    if (repl) sh[nd++] = ns;
    sh[nd++] = K;
    nt_Tensor *u = nt_rand(sh, nd, NT_F64, p->device);
    /* G = -log(-log u); u == 0 gives -inf noise, harmless */
    nt_Tensor *l1 = u ? nt_log(u) : NULL, *nl1 = l1 ? nt_neg(l1) : NULL, *l2 = nl1 ? nt_log(nl1) : NULL;
    nt_Tensor *lpb = NULL;
    if (lp && repl) {
      int64_t bs[3]; int bn = 0;
      if (p->ndim == 2) bs[bn++] = p->shape[0];
      bs[bn++] = 1; bs[bn++] = K;
      lpb = nt_reshape(lp, bs, bn);
    } else if (lp) lpb = nt_retain(lp);
    nt_Tensor *key = lpb && l2 ? nt_sub(lpb, l2) : NULL;
    if (key && repl) { int ax = nd - 1; r = nt_argmax(key, &ax, false); }
    else if (key) { nt_Tensor *vals = NULL; if (!nt_topk(key, ns, nd - 1, true, &vals, &r)) nt_release(vals); else r = NULL; }
    nt_release(lp); nt_release(u); nt_release(l1); nt_release(nl1); nt_release(l2); nt_release(lpb); nt_release(key);
    if (!r) st = nbT_err(vm);
  }
  nt_set_grad_enabled(prev);
  nt_release(pf);
  nbT_tmp_free(&tp);
  if (st) { nt_release(r); return st; }
  nt_Tensor *ri = nt_to_dtype(r, NT_I64);
  nt_release(r);
  return nbT_ret(vm, ri, out);
}

static nb_Builtin compose_builtins[] = {
  { "einsum", b_einsum, "*operands", "einsum(equation, *operands): torch.einsum — e.g. einsum(\"bij,bjk->bik\", a, b), \"...\" for broadcast dims, implicit output when \"->\" is left out; each pair of operands is one batched matmul; differentiable" },
  { "masked_fill", b_masked_fill, "x, mask, value", "masked_fill(x, mask, value): x with value where the bool mask (broadcast to x) is true; a copy, differentiable in x" },
  { "norm", b_norm, "x, p=2, axis=nil, keepdim=false", "norm(x, p=2, axis=nil, keepdim=false): vector p-norm over axis (all when nil), torch.linalg.vector_norm: inf/-inf = max/min |x|, 0 = count of non-zeros; differentiable (gradient 0 at x = 0 for p = 2)" },
  { "view", b_view, "*args", "view(x, *shape): the same memory with another shape (one -1 inferred); an error where reshape would have to copy" },
  { "multinomial", b_multinomial, "probs, n, replacement=false", "multinomial(probs, n, replacement=false): n category indices (i64) drawn per row of probs [K] or [B, K] (non-negative weights), with or without replacement, as torch.multinomial" },
  { NULL, NULL, NULL, NULL }
};

void nbT_register_compose(void) { nbC_register(compose_builtins); }
