/*
** standin.c — a stand-in libcudnn.so.9 for the tests only (never shipped): the
** cuDNN backend API entry points nabla's cuda/cudnn.cu calls, which
**   * record every descriptor created, every attribute set (name, type, count,
**     values: dims, strides, dtypes, uids, by-value flags, modes, descriptor
**     references) and every finalize to the log file $NABLA_CUDNN_STANDIN_LOG,
**     one line each, numbers as cudnn_graph.h defines them (the test maps them
**     to names by reading the header):
**         create #ID TYPE
**         set #ID ATTR ATTRTYPE COUNT v1 v2 ...   (descriptors as #ID, pointers as p)
**         finalize #ID
**         heuristics #ID N            execute #PLAN uid=... ws=...     fail ...
**   * answer the heuristics with the engines $NABLA_CUDNN_STANDIN_ENGINES lists
**     ("det,nondet": one engine config each, the second's engine carrying
**     CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; "" = none; default "det");
**   * report $NABLA_CUDNN_STANDIN_VERSION (default 91900) from cudnnGetVersion;
**   * execute a plan by INTERPRETING its operation graph on the host pointers of
**     the variant pack (under the emulated device, device memory is host memory):
**     matmul, pointwise (add sub mul div exp log cmp_ge gen_index binary_select
**     identity), reduction (add max) and reshape (a view of the same elements), in
**     double precision, loading and storing f32/f16/bf16 as their tensors say.
**     So the numerics the test checks come from the graph nabla built: a wrong
**     stride, uid, scale or mask in it gives wrong values.
**     $NABLA_CUDNN_STANDIN_FAIL_EXECUTE=1 makes execution fail instead;
**     $NABLA_CUDNN_STANDIN_NO_BACKWARD=1 gives no engine for backward graphs,
**     $NABLA_CUDNN_STANDIN_NO_RNG=1 none for graphs with an RNG node (dropout).
**   * the RNG node (dropout): checked at finalize (BERNOULLI, a probability in
**     (0, 1), seed and offset as tensor descriptors -- never the INT64-value seed
**     form, never by value: nabla's are device scalars a captured replay changes --
**     of INT64 [1,1,1,1] with unit strides, not virtual; a virtual f32 4-D y) and
**     interpreted with a generator of the stand-in's own, keyed by (seed, offset,
**     element index over y's dims, row-major):
**         u = (mix(mix(seed ^ mix(offset)) + index) >> 11) * 2^-53   (mix: splitmix64's)
**         y = u < probability ? 1 : 0
**     reading seed and offset from the variant pack's pointers at execution (logged
**     "rng #OP SEED OFFSET PROBABILITY"), so a forward and a backward given the same
**     seed and offset see the same mask, and the test reproduces it in NumPy.
**   * reject, at finalize and execute, what cuDNN would: tensors without dims,
**     strides, uid or dtype, non-positive dims or negative strides; pointwise ops
**     whose operands do not broadcast to y or lack an operand, a select without a
**     BOOLEAN condition, a gen_index without an axis (check_pointwise); a NULL
**     pointer in the variant pack for a tensor of the graph.
** Not thread-safe; one process, one log.
*/
#include <cudnn_graph.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXA = 12, MAXV = 32 };
typedef struct Attr { int name, type; int64_t n; int64_t iv[MAXV]; double dv[MAXV]; void *pv[MAXV]; } Attr;
typedef struct Desc {
  int type, id;
  Attr a[MAXA];
  int na;
  bool final;
  /* execution-time state of a tensor */
  double *buf; int64_t bufn; void *ptr;
  /* what the heuristics gave an engine config / engine */
  bool nondet;
  struct Desc *next;   /* every descriptor but variant packs stays alive (below) */
} Desc;
/* A real cuDNN plan keeps what it needs of the graph; this one reads the graph's
** descriptors at execution, so destroying them only marks them (they stay on this
** list, reachable: not leaks). Variant packs are freed. */
static Desc *all_descs;
static int next_id = 1;
static char last_err[512];
static int handle_dummy;

static FILE *logf_(void) {
  static FILE *f;
  static bool tried;
  if (!tried) {
    tried = true;
    const char *p = getenv("NABLA_CUDNN_STANDIN_LOG");
    if (p && *p) f = fopen(p, "a");
  }
  return f;
}
static void logline(const char *fmt, ...) {
  FILE *f = logf_();
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fflush(f);
}
static cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
  logline("fail %d %s\n", (int)st, last_err);
  return st;
}

size_t cudnnGetVersion(void) {
  const char *v = getenv("NABLA_CUDNN_STANDIN_VERSION");
  return v && *v ? (size_t)strtoull(v, NULL, 10) : 91900;
}
const char *cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_(stand-in: other)";
  }
}
void cudnnGetLastErrorString(char *message, size_t max_size) {
  if (max_size) snprintf(message, max_size, "%s", last_err);
  last_err[0] = 0;
}
cudnnStatus_t cudnnCreate(cudnnHandle_t *h) { *h = (cudnnHandle_t)&handle_dummy; logline("handle_create\n"); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { (void)h; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { (void)h; (void)s; logline("set_stream\n"); return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
  Desc *d = calloc(1, sizeof *d);
  if (!d) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "stand-in: out of memory");
  d->type = (int)t;
  d->id = next_id++;
  if (t != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) { d->next = all_descs; all_descs = d; }
  *out = (cudnnBackendDescriptor_t)d;
  logline("create #%d %d\n", d->id, d->type);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t dd) {
  Desc *d = (Desc *)dd;
  if (!d) return CUDNN_STATUS_SUCCESS;
  logline("destroy #%d\n", d->id);
  if (d->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) free(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t d) { (void)d; return CUDNN_STATUS_SUCCESS; }

static Attr *find(Desc *d, int name) {
  for (int i = 0; i < d->na; i++) if (d->a[i].name == name) return &d->a[i];
  return NULL;
}
static int64_t ival(Desc *d, int name, int64_t dflt) { Attr *a = find(d, name); return a && a->n ? a->iv[0] : dflt; }
static Desc *dval(Desc *d, int name) { Attr *a = find(d, name); return a && a->n ? (Desc *)a->pv[0] : NULL; }

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t dd, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *v) {
  Desc *d = (Desc *)dd;
  if (!d || n < 0 || n > MAXV || (n && !v)) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: bad SetAttribute arguments");
  if (d->final) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: attribute %d set on finalized descriptor #%d", (int)name, d->id);
  Attr *a = find(d, (int)name);
  if (!a) {
    if (d->na == MAXA) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: too many attributes");
    a = &d->a[d->na++];
  }
  memset(a, 0, sizeof *a);
  a->name = (int)name; a->type = (int)type; a->n = n;
  char line[4096];
  int off = snprintf(line, sizeof line, "set #%d %d %d %lld", d->id, (int)name, (int)type, (long long)n);
  for (int64_t i = 0; i < n && off < (int)sizeof line - 64; i++) {
    switch (type) {
      case CUDNN_TYPE_INT64: a->iv[i] = ((const int64_t *)v)[i]; off += snprintf(line + off, sizeof line - off, " %lld", (long long)a->iv[i]); break;
      case CUDNN_TYPE_BOOLEAN: a->iv[i] = ((const bool *)v)[i]; off += snprintf(line + off, sizeof line - off, " %lld", (long long)a->iv[i]); break;
      case CUDNN_TYPE_FLOAT: a->dv[i] = ((const float *)v)[i]; off += snprintf(line + off, sizeof line - off, " %.9g", a->dv[i]); break;
      case CUDNN_TYPE_DOUBLE: a->dv[i] = ((const double *)v)[i]; off += snprintf(line + off, sizeof line - off, " %.17g", a->dv[i]); break;
      case CUDNN_TYPE_BACKEND_DESCRIPTOR: {
        Desc *r = ((Desc *const *)v)[i];
        if (!r || !r->final) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "stand-in: attribute %d of #%d names a descriptor that is not finalized", (int)name, d->id);
        a->pv[i] = r; off += snprintf(line + off, sizeof line - off, " #%d", r->id); break;
      }
      case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: a->pv[i] = ((void *const *)v)[i]; off += snprintf(line + off, sizeof line - off, " p"); break;
      default: a->iv[i] = ((const int32_t *)v)[i]; off += snprintf(line + off, sizeof line - off, " %lld", (long long)a->iv[i]); break;   /* enums */
    }
  }
  logline("%s\n", line);
  return CUDNN_STATUS_SUCCESS;
}

static int64_t engines_n(bool nondet[16]) {
  const char *e = getenv("NABLA_CUDNN_STANDIN_ENGINES");
  if (!e) e = "det";
  int64_t n = 0;
  while (*e && n < 16) {
    nondet[n++] = strncmp(e, "nondet", 6) == 0;
    const char *c = strchr(e, ',');
    if (!c) break;
    e = c + 1;
  }
  return n;
}

static cudnnStatus_t check_pointwise(Desc *o);
static cudnnStatus_t check_rng(Desc *o);

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t dd) {
  Desc *d = (Desc *)dd;
  if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
    Attr *dims = find(d, CUDNN_ATTR_TENSOR_DIMENSIONS), *st = find(d, CUDNN_ATTR_TENSOR_STRIDES);
    if (!dims || !st || dims->n != st->n || !find(d, CUDNN_ATTR_TENSOR_UNIQUE_ID) || !find(d, CUDNN_ATTR_TENSOR_DATA_TYPE))
      return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: tensor #%d lacks dims, strides, uid or dtype", d->id);
    /* as cuDNN: positive dims, non-negative strides, 4-D here (the SDPA graph's rank) */
    if (dims->n != 4) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: tensor #%d has %lld dims (the graph's are 4-D)", d->id, (long long)dims->n);
    for (int i = 0; i < 4; i++)
      if (dims->iv[i] < 1 || st->iv[i] < 0)
        return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: tensor #%d dim %d is %lld with stride %lld", d->id, i, (long long)dims->iv[i], (long long)st->iv[i]);
  }
  if (d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR || d->type == CUDNN_BACKEND_RNG_DESCRIPTOR ||
      d->type == CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR) {
    cudnnStatus_t r = d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ? check_pointwise(d) : check_rng(d);
    if (r != CUDNN_STATUS_SUCCESS) return r;
  }
  d->final = true;
  logline("finalize #%d\n", d->id);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const dd, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t req, int64_t *got, void *out) {
  Desc *d = (Desc *)dd;
  (void)type;
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    bool nondet[16];
    int64_t n = engines_n(nondet);
    /* NABLA_CUDNN_STANDIN_NO_BACKWARD=1: no engine for graphs with a reshape (the backward) */
    const char *nb = getenv("NABLA_CUDNN_STANDIN_NO_BACKWARD");
    Desc *g = dval(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    Attr *ops = g ? find(g, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
    if (nb && *nb && *nb != '0' && ops)
      for (int64_t i = 0; i < ops->n; i++)
        if (((Desc *)ops->pv[i])->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) n = 0;
    /* NABLA_CUDNN_STANDIN_NO_RNG=1: no engine for graphs with an RNG node (dropout) */
    const char *nr = getenv("NABLA_CUDNN_STANDIN_NO_RNG");
    if (nr && *nr && *nr != '0' && ops)
      for (int64_t i = 0; i < ops->n; i++)
        if (((Desc *)ops->pv[i])->type == CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR) n = 0;
    if (req == 0) { *got = n; logline("heuristics #%d %lld\n", d->id, (long long)n); return CUDNN_STATUS_SUCCESS; }
    int64_t k = req < n ? req : n;
    for (int64_t i = 0; i < k; i++) {
      Desc *c = ((Desc **)out)[i];
      c->nondet = nondet[i];
      c->final = true;
      c->na = 1;
      c->a[0].name = CUDNN_ATTR_ENGINECFG_ENGINE;   /* the heuristics descriptor, for the plan to find the graph */
      c->a[0].n = 1;
      c->a[0].pv[0] = d;
    }
    *got = k;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    Desc *e = *(Desc **)out;
    e->nondet = d->nondet;
    e->final = true;
    *got = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
    *got = 0;
    if (d->nondet && req >= 1) { ((cudnnBackendNumericalNote_t *)out)[0] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; *got = 1; }
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    *(int64_t *)out = 4096;
    *got = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  return fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: GetAttribute %d not answered", (int)name);
}

/* A pointwise operation cuDNN would reject: no mode or y; x (and b, t) missing where
** the mode needs them; a b or t whose dims neither equal y's nor are 1 there (cuDNN
** broadcasts by extent-1 dims: the mask's bias, the by-value scalars, the row
** statistics), an x that is not y's shape (never broadcast in nabla's graphs: the
** stand-in is stricter there); GEN_INDEX without an axis in [0, 4);
** BINARY_SELECT's t not BOOLEAN; CMP_* writing anything but BOOLEAN. */
static cudnnStatus_t check_pointwise(Desc *o) {
  Desc *pw = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), *x = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
       *b = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC), *t = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC),
       *y = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
  if (!pw || !x || !y) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: pointwise #%d lacks its descriptor, x or y", o->id);
  int mode = (int)ival(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
  bool binary = mode == CUDNN_POINTWISE_ADD || mode == CUDNN_POINTWISE_SUB || mode == CUDNN_POINTWISE_MUL ||
                mode == CUDNN_POINTWISE_DIV || mode == CUDNN_POINTWISE_CMP_GE || mode == CUDNN_POINTWISE_BINARY_SELECT;
  if (binary && !b) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: pointwise #%d (mode %d) has no b", o->id, mode);
  if (mode == CUDNN_POINTWISE_BINARY_SELECT && (!t || ival(t, CUDNN_ATTR_TENSOR_DATA_TYPE, -1) != CUDNN_DATA_BOOLEAN))
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: binary_select #%d needs a BOOLEAN t", o->id);
  if (mode == CUDNN_POINTWISE_CMP_GE && ival(y, CUDNN_ATTR_TENSOR_DATA_TYPE, -1) != CUDNN_DATA_BOOLEAN)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: cmp_ge #%d must write BOOLEAN", o->id);
  int64_t axis = ival(pw, CUDNN_ATTR_POINTWISE_AXIS, -1);
  if (mode == CUDNN_POINTWISE_GEN_INDEX && (axis < 0 || axis > 3))
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: gen_index #%d needs an axis in [0, 4), got %lld", o->id, (long long)axis);
  Attr *yd = find(y, CUDNN_ATTR_TENSOR_DIMENSIONS);
  Desc *ops[3] = {x, b, t};
  for (int k = 0; k < 3; k++) {
    if (!ops[k]) continue;
    Attr *dd = find(ops[k], CUDNN_ATTR_TENSOR_DIMENSIONS);
    for (int i = 0; i < 4; i++) {
      bool ok = dd->iv[i] == yd->iv[i] || (k > 0 && dd->iv[i] == 1);
      if (!ok) return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "stand-in: pointwise #%d operand %c dim %d is %lld, y's %lld",
                           o->id, "xbt"[k], i, (long long)dd->iv[i], (long long)yd->iv[i]);
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

/* The RNG descriptor and operation as nabla must give them (the header says what). */
static cudnnStatus_t check_scalar_i64(Desc *o, const char *what, Desc *t) {
  if (!t || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: the %s is not a tensor descriptor", o->id, what);
  Attr *dims = find(t, CUDNN_ATTR_TENSOR_DIMENSIONS), *st = find(t, CUDNN_ATTR_TENSOR_STRIDES);
  for (int i = 0; i < 4; i++)
    if (dims->iv[i] != 1 || st->iv[i] != 1)
      return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: the %s must be [1,1,1,1] with unit strides", o->id, what);
  if (ival(t, CUDNN_ATTR_TENSOR_DATA_TYPE, -1) != CUDNN_DATA_INT64)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: the %s must be INT64", o->id, what);
  if (ival(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0) || ival(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, 0))
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: the %s must be a device tensor (not virtual, not by value)", o->id, what);
  return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t check_rng(Desc *o) {
  if (o->type == CUDNN_BACKEND_RNG_DESCRIPTOR) {
    Attr *dist = find(o, CUDNN_ATTR_RNG_DISTRIBUTION), *pr = find(o, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY);
    if (!dist || dist->type != CUDNN_TYPE_RNG_DISTRIBUTION || dist->iv[0] != CUDNN_RNG_DISTRIBUTION_BERNOULLI)
      return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng descriptor #%d: the distribution must be BERNOULLI", o->id);
    if (!pr || pr->type != CUDNN_TYPE_DOUBLE || pr->n != 1 || !(pr->dv[0] > 0 && pr->dv[0] < 1))
      return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng descriptor #%d: a DOUBLE Bernoulli probability in (0, 1) is required", o->id);
    return CUDNN_STATUS_SUCCESS;
  }
  Attr *seed = find(o, CUDNN_ATTR_OPERATION_RNG_SEED);
  Desc *rd = dval(o, CUDNN_ATTR_OPERATION_RNG_DESC), *y = dval(o, CUDNN_ATTR_OPERATION_RNG_YDESC);
  if (!rd || rd->type != CUDNN_BACKEND_RNG_DESCRIPTOR || !y)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d lacks its rng descriptor or y", o->id);
  if (!seed || seed->type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: the seed must be a tensor descriptor (a device scalar)", o->id);
  cudnnStatus_t r = check_scalar_i64(o, "seed", (Desc *)seed->pv[0]);
  if (r == CUDNN_STATUS_SUCCESS) r = check_scalar_i64(o, "offset", dval(o, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC));
  if (r != CUDNN_STATUS_SUCCESS) return r;
  if (ival(y, CUDNN_ATTR_TENSOR_DATA_TYPE, -1) != CUDNN_DATA_FLOAT || !ival(y, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0))
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: y must be a virtual FLOAT tensor", o->id);
  return CUDNN_STATUS_SUCCESS;
}

/* the stand-in's own generator (the header): a uniform in [0, 1) per (seed, offset, index) */
static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double standin_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  return (double)(mix64(mix64(seed ^ mix64(offset)) + index) >> 11) * 0x1p-53;
}

/* ---- the interpreter ------------------------------------------------------------ */
static float bf16_to_f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t f_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float half_to_f(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return s ? -v : v;
}
static uint16_t f_to_half(float f) {
  /* round to nearest even through the spacing of f16 at f's magnitude */
  uint16_t s = signbit(f) ? 0x8000 : 0;
  float a = fabsf(f);
  if (isnan(f)) return 0x7e00;
  if (a >= 65520.f) return s | 0x7c00;
  int e;
  frexpf(a, &e);               /* a = m 2^e, m in [0.5, 1) */
  int ex = e - 1;              /* a in [2^ex, 2^(ex+1)) */
  if (ex < -14) ex = -14;      /* subnormal spacing 2^-24 */
  float q = nearbyintf(ldexpf(a, 10 - ex));   /* a / 2^(ex-10) */
  float r = ldexpf(q, ex - 10);
  /* re-encode r exactly */
  if (r == 0) return s;
  int er;
  frexpf(r, &er);
  int E = er - 1;
  if (E < -14) return s | (uint16_t)(r * 16777216.f);               /* subnormal */
  if (E > 15) return s | 0x7c00;
  uint16_t mant = (uint16_t)(ldexpf(r, 10 - E) - 1024.f);
  return s | (uint16_t)((E + 15) << 10) | mant;
}

typedef struct Ten { Desc *d; int64_t dim[4], str[4]; int dt; bool virt, byval; int64_t uid; } Ten;
static Ten ten(Desc *d) {
  Ten t = {d, {1, 1, 1, 1}, {0, 0, 0, 0}, 0, false, false, 0};
  Attr *dims = find(d, CUDNN_ATTR_TENSOR_DIMENSIONS), *st = find(d, CUDNN_ATTR_TENSOR_STRIDES);
  int nd = dims ? (int)dims->n : 0, o = 4 - nd;
  for (int i = 0; i < nd && i < 4; i++) { t.dim[o + i] = dims->iv[i]; t.str[o + i] = st->iv[i]; }
  t.dt = (int)ival(d, CUDNN_ATTR_TENSOR_DATA_TYPE, 0);
  t.virt = ival(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0) != 0;
  t.byval = ival(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, 0) != 0;
  t.uid = ival(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, -1);
  return t;
}
static int64_t offs(const Ten *t, const int64_t *ix) {
  int64_t o = 0;
  for (int i = 0; i < 4; i++) o += (t->dim[i] == 1 ? 0 : ix[i]) * t->str[i];
  return o;
}
static double ld(const Ten *t, const int64_t *ix) {
  int64_t o = offs(t, ix);
  if (t->d->buf) return t->d->buf[o];
  const void *p = t->d->ptr;
  switch (t->dt) {
    case CUDNN_DATA_FLOAT: return ((const float *)p)[o];
    case CUDNN_DATA_DOUBLE: return ((const double *)p)[o];
    case CUDNN_DATA_HALF: return half_to_f(((const uint16_t *)p)[o]);
    case CUDNN_DATA_BFLOAT16: return bf16_to_f(((const uint16_t *)p)[o]);
    default: return NAN;
  }
}
static void st(const Ten *t, const int64_t *ix, double v) {
  int64_t o = offs(t, ix);
  if (t->d->buf) { t->d->buf[o] = v; return; }
  void *p = t->d->ptr;
  switch (t->dt) {
    case CUDNN_DATA_FLOAT: ((float *)p)[o] = (float)v; break;
    case CUDNN_DATA_DOUBLE: ((double *)p)[o] = v; break;
    case CUDNN_DATA_HALF: ((uint16_t *)p)[o] = f_to_half((float)v); break;
    case CUDNN_DATA_BFLOAT16: ((uint16_t *)p)[o] = f_to_bf16((float)v); break;
    default: break;
  }
}
#define FOR4(ix, dim) \
  for (ix[0] = 0; ix[0] < dim[0]; ix[0]++) for (ix[1] = 0; ix[1] < dim[1]; ix[1]++) \
  for (ix[2] = 0; ix[2] < dim[2]; ix[2]++) for (ix[3] = 0; ix[3] < dim[3]; ix[3]++)

/* binds t's storage: a variant-pack pointer, or a fresh double buffer when virtual */
static cudnnStatus_t bind(Desc *d, const int64_t *uids, void *const *ptrs, int64_t n, Desc **virts, int *nvirt) {
  if (d->buf || d->ptr) return CUDNN_STATUS_SUCCESS;
  Ten t = ten(d);
  if (t.virt) {
    int64_t m = 0;
    for (int i = 0; i < 4; i++) m += (t.dim[i] - 1) * t.str[i];
    d->bufn = m + 1;
    d->buf = calloc((size_t)d->bufn, sizeof(double));
    virts[(*nvirt)++] = d;
    return d->buf ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "stand-in: out of memory");
  }
  for (int64_t i = 0; i < n; i++)
    if (uids[i] == t.uid) {
      if (!ptrs[i]) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: the variant pack's pointer for uid %lld is NULL", (long long)t.uid);
      d->ptr = ptrs[i];
      if (t.byval && t.dt == CUDNN_DATA_FLOAT) logline("by_value %lld %.9g\n", (long long)t.uid, *(const float *)d->ptr);
      return CUDNN_STATUS_SUCCESS;
    }
  return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: the variant pack has no pointer for uid %lld", (long long)t.uid);
}

static cudnnStatus_t run_op(Desc *o) {
  int64_t ix[4], jx[4];
  if (o->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
    Ten a = ten(dval(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC)), b = ten(dval(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC)),
        c = ten(dval(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC));
    int64_t K = a.dim[3];
    if (b.dim[2] != K || a.dim[2] != c.dim[2] || b.dim[3] != c.dim[3])
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "stand-in: matmul #%d shapes do not agree", o->id);
    FOR4(ix, c.dim) {
      double s = 0;
      int64_t ai[4] = {ix[0], ix[1], ix[2], 0}, bi[4] = {ix[0], ix[1], 0, ix[3]};
      for (int64_t k = 0; k < K; k++) { ai[3] = k; bi[2] = k; s += ld(&a, ai) * ld(&b, bi); }
      st(&c, ix, s);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (o->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
    Desc *pw = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
    int mode = (int)ival(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
    int64_t axis = ival(pw, CUDNN_ATTR_POINTWISE_AXIS, -1);
    Desc *xd = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), *bd = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
         *td = dval(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
    Ten x = ten(xd), y = ten(dval(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC)), b, t;
    if (bd) b = ten(bd);
    if (td) t = ten(td);
    FOR4(ix, y.dim) {
      double xv = mode == CUDNN_POINTWISE_GEN_INDEX ? 0 : ld(&x, ix), bv = bd ? ld(&b, ix) : 0, r;
      switch (mode) {
        case CUDNN_POINTWISE_ADD: r = xv + bv; break;
        case CUDNN_POINTWISE_SUB: r = xv - bv; break;
        case CUDNN_POINTWISE_MUL: r = xv * bv; break;
        case CUDNN_POINTWISE_DIV: r = xv / bv; break;
        case CUDNN_POINTWISE_EXP: r = exp(xv); break;
        case CUDNN_POINTWISE_LOG: r = log(xv); break;
        case CUDNN_POINTWISE_IDENTITY: r = xv; break;
        case CUDNN_POINTWISE_CMP_GE: r = xv >= bv; break;
        case CUDNN_POINTWISE_GEN_INDEX:
          if (axis < 0 || axis > 3) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: gen_index #%d without axis", o->id);
          r = (double)ix[axis]; break;
        case CUDNN_POINTWISE_BINARY_SELECT:
          if (!td || !bd) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: binary_select #%d needs b and t", o->id);
          r = ld(&t, ix) != 0 ? xv : bv; break;
        default: return fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: pointwise mode %d not interpreted", mode);
      }
      st(&y, ix, r);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (o->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
    Desc *rd = dval(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
    int red = (int)ival(rd, CUDNN_ATTR_REDUCTION_OPERATOR, -1);
    Ten x = ten(dval(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC)), y = ten(dval(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC));
    if (red != CUDNN_REDUCE_TENSOR_ADD && red != CUDNN_REDUCE_TENSOR_MAX)
      return fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: reduction %d not interpreted", red);
    int64_t span[4];
    for (int i = 0; i < 4; i++) span[i] = y.dim[i] == 1 ? x.dim[i] : 1;
    FOR4(ix, y.dim) {
      double acc = red == CUDNN_REDUCE_TENSOR_ADD ? 0 : -INFINITY;
      int64_t k[4];
      FOR4(k, span) {
        for (int i = 0; i < 4; i++) jx[i] = y.dim[i] == 1 ? k[i] : ix[i];
        double v = ld(&x, jx);
        acc = red == CUDNN_REDUCE_TENSOR_ADD ? acc + v : (v > acc ? v : acc);
      }
      st(&y, ix, acc);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (o->type == CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR) {
    Desc *sd = dval(o, CUDNN_ATTR_OPERATION_RNG_SEED), *od = dval(o, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC);
    double prob = find(dval(o, CUDNN_ATTR_OPERATION_RNG_DESC), CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY)->dv[0];
    if (!sd->ptr || !od->ptr) return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: rng #%d: seed or offset not bound", o->id);
    uint64_t seed = *(const uint64_t *)sd->ptr, offset = *(const uint64_t *)od->ptr;
    logline("rng #%d %llu %llu %.17g\n", o->id, (unsigned long long)seed, (unsigned long long)offset, prob);
    Ten y = ten(dval(o, CUDNN_ATTR_OPERATION_RNG_YDESC));
    FOR4(ix, y.dim) {
      uint64_t index = (uint64_t)(((ix[0] * y.dim[1] + ix[1]) * y.dim[2] + ix[2]) * y.dim[3] + ix[3]);
      st(&y, ix, standin_uniform(seed, offset, index) < prob ? 1 : 0);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (o->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
    Desc *xd = dval(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC), *yd = dval(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
    if (!xd->buf || !ten(yd).virt) return fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: reshape #%d of non-virtual tensors", o->id);
    free(yd->buf);   /* y is a view of x's elements */
    yd->buf = xd->buf;
    return CUDNN_STATUS_SUCCESS;
  }
  return fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: operation type %d not interpreted", o->type);
}

/* the tensors an operation reads or writes (its attributes naming tensor descriptors) */
static int op_tensors(Desc *o, Desc **out) {
  int n = 0;
  for (int i = 0; i < o->na; i++)
    if (o->a[i].type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
      for (int64_t j = 0; j < o->a[i].n; j++) {
        Desc *t = (Desc *)o->a[i].pv[j];
        if (t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) out[n++] = t;
      }
  return n;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_, cudnnBackendDescriptor_t vp_) {
  (void)h;
  Desc *plan = (Desc *)plan_, *vp = (Desc *)vp_;
  Attr *ua = find(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *pa = find(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  Desc *cfg = dval(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  Desc *heur = cfg ? dval(cfg, CUDNN_ATTR_ENGINECFG_ENGINE) : NULL;
  Desc *graph = heur ? dval(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH) : NULL;
  Attr *ops = graph ? find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
  if (!ua || !pa || ua->n != pa->n || !ops || !vp->final || !plan->final)
    return fail(CUDNN_STATUS_BAD_PARAM, "stand-in: execute needs a finalized plan and variant pack with uids and pointers");
  char line[1024];
  int off = snprintf(line, sizeof line, "execute #%d", plan->id);
  for (int64_t i = 0; i < ua->n && off < (int)sizeof line - 32; i++) off += snprintf(line + off, sizeof line - off, " %lld", (long long)ua->iv[i]);
  logline("%s\n", line);
  const char *f = getenv("NABLA_CUDNN_STANDIN_FAIL_EXECUTE");
  if (f && *f && *f != '0') return fail(CUDNN_STATUS_EXECUTION_FAILED, "stand-in: execution failed as NABLA_CUDNN_STANDIN_FAIL_EXECUTE asked");
  Desc *virts[256];
  int nvirt = 0;
  cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
  /* bind every tensor first (reshape aliases are set up as ops run) */
  for (int64_t i = 0; i < ops->n && rc == CUDNN_STATUS_SUCCESS; i++) {
    Desc *ts[16];
    int nt = op_tensors((Desc *)ops->pv[i], ts);
    for (int j = 0; j < nt && rc == CUDNN_STATUS_SUCCESS; j++) {
      if (nvirt >= 240) { rc = fail(CUDNN_STATUS_NOT_SUPPORTED, "stand-in: graph too large"); break; }
      rc = bind(ts[j], ua->iv, pa->pv, ua->n, virts, &nvirt);
    }
  }
  for (int64_t i = 0; i < ops->n && rc == CUDNN_STATUS_SUCCESS; i++) rc = run_op((Desc *)ops->pv[i]);
  /* unbind: descriptors are reused by the next execution of the cached plan */
  for (int64_t i = 0; i < ops->n; i++) {
    Desc *ts[16];
    int nt = op_tensors((Desc *)ops->pv[i], ts);
    for (int j = 0; j < nt; j++) ts[j]->ptr = NULL;
  }
  for (int i = 0; i < nvirt; i++) {
    bool aliased = false;   /* a reshape's y shares x's buffer: free it once */
    for (int j = 0; j < i; j++) aliased |= virts[j]->buf == virts[i]->buf;
    if (!aliased) free(virts[i]->buf);
  }
  for (int i = 0; i < nvirt; i++) virts[i]->buf = NULL;
  return rc;
}
