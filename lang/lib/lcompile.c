/*
** lib/lcompile.c — compile(f): a training step as one CUDA graph.
**
** compile(f) returns a callable record {__call, f, stats}.  Per SIGNATURE of
** a call -- the top-level tensor arguments' shapes, dtypes and devices; the
** VALUES of everything else the call can see through its arguments and f's
** closure (numbers, strings, records, lists; tensors nested in them by
** identity: storage, offset, strides, requires_grad, .grad); grad mode,
** autocast and the matmul precision -- a call goes:
**   1st  eager (f runs as written);
**   2nd  captured: the top-level tensor arguments are copied into input
**        buffers the entry owns, f runs on them with the GPU work recorded
**        into a graph (tensor/tcompile.h; cuda/graph.cu), which is launched
**        once -- that launch is this call's work;
**   3rd+ replayed: the arguments are copied into the input buffers, the graph
**        is launched (one cudaGraphLaunch), f does not run.
** Results: every tensor a captured or replayed call returns is a fresh copy
** of the graph's output buffer (the buffers are rewritten by the next
** replay; a copy cannot go stale).  Parameters and optimizer state the step
** updates in place are the model's own tensors: the graph writes them.
**
** Never silently wrong.  A replay repeats the GPU work of the captured call
** and nothing else, so a call falls back to eager, with its reason kept once
** in stats().reasons, whenever that would differ from running f:
**   - the call changed host state: what the signature covers, or the
**     globals of the modules f and its arguments reach (SGD's step counter
**     opt.state.t when its step runs inside f, a list appended to, a .grad
**     set, a tensor replaced) -- compared before and after the eager and the
**     captured call: a replay would not repeat it, so every later call of
**     this compiled function runs eagerly;
**   - the capture met something a graph cannot hold (a host wait such as
**     item() or printing, a copy between host and device, random numbers, a
**     collective, a side stream, a cudaFree): the capture ends there, the
**     work recorded so far runs at once, and the call finishes eagerly, so
**     its result is the eager one;
**   - a top-level tensor argument that requires grad (its gradient would go
**     to the input buffer), or more than MAX_SIGS signatures.
** Host state a replay CAN repeat: a step declares it with
** compile_replay(rec, key, hook) -- rec[key] is host state the step
** advances, and hook() (a host-only function: numbers, and device scalars
** written with set_device_scalar) advances it exactly as the step's own
** host part did.  The signature and the state comparison skip rec[key]; a
** replay calls the hooks the captured call declared, in order, before the
** graph launch.  optim's AdamW declares opt.state.t (its hook advances the
** count and writes the schedule's learning rate to the device scalar the
** update reads).  A call that declares a field for the first time cannot be
** checked (its "before" included the field): it stays eager, unflagged, and
** the next call is checked.  Random numbers need no hook: tensor/tcompile.c
** replays the generator's offsets.
** What the signature cannot see is frozen at capture: globals f READS
** without taking them as arguments or through its closure (pass them in; a
** global f writes is caught above).
** On the CPU (no CUDA tensor in sight) compile runs f eagerly; NABLA_COMPILE=0
** makes compile(f) return f itself.
*/
#include "lang/nbapi.h"
#include "lang/lib/ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/tcompile.h"
#include "tensor/tdevice.h"
#include "tensor/toptim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIGS 32              /* signatures one compiled function keeps graphs for */
#define MAX_SIG_NODES 200000     /* values a signature walk visits */
#define MAX_REASONS 16

typedef struct Entry {
  uint8_t *sig; size_t siglen;
  int state;                     /* SEEN: ran eagerly once; GRAPH: captured; EAGER: falls back */
  nt_Graph *g;
  nt_Tensor **inbuf; int nin;    /* the input buffers (NULL for non-tensor arguments) */
  nb_Value out;                  /* the captured result, tensors detached (the graph's buffers) */
  nb_Value *hooks; int nhooks;   /* compile_replay hooks the captured call declared: run before each replay */
  struct Entry *next;
} Entry;
enum { SEEN, GRAPH, EAGER };

typedef struct Managed { nb_Rec *rec; char *key; } Managed;   /* rec held */
typedef struct Compiled {
  Entry *entries; int nentries;
  Managed *managed; int nmanaged, capmanaged;   /* compile_replay's fields: skipped by the signatures */
  bool mutates;                  /* a call changed what its signature covers: eager from then on */
  int64_t captures, replays, eager_calls;
  char *reasons[MAX_REASONS]; int nreasons;
} Compiled;

static void drop_hooks(Entry *e) {
  for (int i = 0; i < e->nhooks; i++) nb_decref(e->hooks[i]);
  free(e->hooks);
  e->hooks = NULL; e->nhooks = 0;
}
static void entry_free(Entry *e) {
  nt_graph_free(e->g);
  drop_hooks(e);
  for (int i = 0; i < e->nin; i++) nt_release(e->inbuf[i]);
  free(e->inbuf);
  nb_decref(e->out);
  free(e->sig);
  free(e);
}
static void compiled_free(void *p) {
  Compiled *c = p;
  for (Entry *e = c->entries, *n; e; e = n) { n = e->next; entry_free(e); }
  for (int i = 0; i < c->nreasons; i++) free(c->reasons[i]);
  for (int i = 0; i < c->nmanaged; i++) { nb_decref(nb_obj(NB_TREC, c->managed[i].rec)); free(c->managed[i].key); }
  free(c->managed);
  free(c);
}
static bool is_managed(const Compiled *c, const nb_Rec *r, const nb_Str *key) {
  for (int i = 0; c && i < c->nmanaged; i++)
    if (c->managed[i].rec == r && strlen(c->managed[i].key) == key->len && !memcmp(c->managed[i].key, key->data, key->len)) return true;
  return false;
}
static void add_reason(Compiled *c, const char *r) {
  for (int i = 0; i < c->nreasons; i++) if (!strcmp(c->reasons[i], r)) return;
  if (c->nreasons < MAX_REASONS) { char *s = strdup(r); if (s) c->reasons[c->nreasons++] = s; }
}

/* ---- signatures: the bytes of everything a replay would freeze ------------------ */
typedef struct Sig { uint8_t *p; size_t n, cap; bool oom, cuda, big; int nodes; const Compiled *c; } Sig;
static void put(Sig *s, const void *d, size_t n) {
  if (s->oom) return;
  if (s->n + n > s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 256;
    while (nc < s->n + n) nc *= 2;
    uint8_t *q = realloc(s->p, nc);
    if (!q) { s->oom = true; return; }
    s->p = q; s->cap = nc;
  }
  memcpy(s->p + s->n, d, n);
  s->n += n;
}
static void put_u64(Sig *s, uint64_t v) { put(s, &v, 8); }
static void put_tag(Sig *s, char t) { put(s, &t, 1); }
static void put_tensor_meta(Sig *s, const nt_Tensor *t) {
  put_u64(s, (uint64_t)t->device); put_u64(s, (uint64_t)t->dtype); put_u64(s, (uint64_t)t->ndim);
  put(s, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  if (t->device != NT_CPU) s->cuda = true;
}

/* Appends root's bytes: an explicit stack (no recursion input controls), each
** container once (a second visit is its first visit's number: cycles end). */
typedef struct Stack { nb_Value *v; int n, cap; } Stack;
/* the modules whose globals the state walk covers (functions' f->mod, module values) */
typedef struct Mods { struct nb_Module **m; int n, cap; } Mods;
static void add_mod(Sig *s, Mods *ms, struct nb_Module *m) {
  if (!ms || !m) return;
  for (int i = 0; i < ms->n; i++) if (ms->m[i] == m) return;
  if (ms->n == ms->cap) {
    int nc = ms->cap ? 2 * ms->cap : 8;
    struct nb_Module **q = realloc(ms->m, (size_t)nc * sizeof *q);
    if (!q) { s->oom = true; return; }
    ms->m = q; ms->cap = nc;
  }
  ms->m[ms->n++] = m;
}
static bool push(Stack *st, nb_Value v) {
  if (st->n == st->cap) {
    int nc = st->cap ? 2 * st->cap : 64;
    nb_Value *q = realloc(st->v, (size_t)nc * sizeof *q);
    if (!q) return false;
    st->v = q; st->cap = nc;
  }
  st->v[st->n++] = v;
  return true;
}
static void sig_walk(Sig *s, nb_Value root, IdMap *seen, Mods *ms) {
  Stack st = {0};
  if (!push(&st, root)) s->oom = true;
  while (st.n && !s->oom && !s->big) {
    nb_Value v = st.v[--st.n];
    if (++s->nodes > MAX_SIG_NODES) { s->big = true; break; }
    put_tag(s, (char)('A' + v.t));
    switch (v.t) {
      case NB_TNIL: case NB_TUNDEF: break;
      case NB_TBOOL: put_tag(s, (char)v.u.b); break;
      case NB_TNUM: put_u64(s, v.kind); put(s, &v.u.n, sizeof v.u.n); break;
      case NB_TBUILTIN: put_u64(s, (uint64_t)(uintptr_t)v.u.bi); break;
      case NB_TSTR: put_u64(s, nb_str(v)->len); put(s, nb_str(v)->data, nb_str(v)->len); break;
      case NB_TRANGE: { nb_Range *r = v.u.p; put(s, &r->start, 8); put(s, &r->stop, 8); put(s, &r->step, 8); put_tag(s, (char)r->kind); break; }
      case NB_TTENSOR: {
        nt_Tensor *t = T(v);
        put_tensor_meta(s, t);
        put(s, t->strides, sizeof(int64_t) * (size_t)t->ndim);
        put_u64(s, (uint64_t)t->offset); put_u64(s, (uint64_t)(uintptr_t)t->storage);
        put_tag(s, (char)t->requires_grad); put_u64(s, (uint64_t)(uintptr_t)t->grad);
        break;
      }
      case NB_TLIST: case NB_TREC: case NB_TFUNC: case NB_TCELL: {
        bool found;
        void **slot = nbT_idmap_slot(seen, v.u.p, &found);
        if (!slot) { s->oom = true; break; }
        if (found) { put_u64(s, (uint64_t)(uintptr_t)*slot); break; }
        *slot = (void *)(uintptr_t)seen->n;
        put_u64(s, 0);
        if (v.t == NB_TLIST) {
          nb_List *l = nb_list(v);
          put_u64(s, (uint64_t)l->n);
          for (int i = l->n - 1; i >= 0 && !s->oom; i--) if (!push(&st, l->items[i])) s->oom = true;
        } else if (v.t == NB_TREC) {
          nb_Rec *r = nb_rec(v);
          put_u64(s, (uint64_t)r->n);
          for (int i = 0; i < r->n; i++) { put_u64(s, r->keys[i]->len); put(s, r->keys[i]->data, r->keys[i]->len); }
          for (int i = r->n - 1; i >= 0 && !s->oom; i--)   /* a compile_replay field: the hooks repeat it */
            if (!push(&st, is_managed(s->c, r, r->keys[i]) ? nb_nil() : r->vals[i])) s->oom = true;
        } else if (v.t == NB_TFUNC) {
          nb_Func *f = v.u.p;
          add_mod(s, ms, f->mod);
          put_u64(s, (uint64_t)(uintptr_t)f->proto); put_u64(s, (uint64_t)(uintptr_t)f->mod); put_u64(s, (uint64_t)f->ncaps);
          for (int i = f->ncaps - 1; i >= 0 && !s->oom; i--) if (!push(&st, nb_obj(NB_TCELL, f->caps[i]))) s->oom = true;
        } else {
          if (!push(&st, ((nb_Cell *)v.u.p)->v)) s->oom = true;
        }
        break;
      }
      case NB_TMODULE: add_mod(s, ms, v.u.p); put_u64(s, (uint64_t)(uintptr_t)v.u.p); break;
      default: put_u64(s, (uint64_t)(uintptr_t)v.u.p); break;   /* handles: by identity */
    }
  }
  free(st.v);
}
/* the call's signature: f, the ambient settings, then each argument (a
** top-level tensor by its meta only: its values are copied in) */
static void signature(Sig *s, nb_Value f, nb_Value *args, int n) {
  IdMap seen = {0};
  put_u64(s, (uint64_t)nt_grad_enabled());
  put_u64(s, (uint64_t)(int64_t)nt_autocast_dtype());
  const char *mp = nt_get_matmul_precision();
  put(s, mp, strlen(mp) + 1);
  sig_walk(s, f, &seen, NULL);
  put_u64(s, (uint64_t)n);
  for (int i = 0; i < n; i++) {
    if (args[i].t == NB_TTENSOR) {
      put_tag(s, 'X');
      put_tensor_meta(s, T(args[i]));
      put_tag(s, (char)T(args[i])->requires_grad);
    } else sig_walk(s, args[i], &seen, NULL);
  }
  nbT_idmap_free(&seen);
}
/* What a call could change that a replay would not repeat: the values the
** signature covers, tensors by identity, plus the globals of every module
** they reach (f's own module: a step that calls opt.step on a global
** optimizer advances opt.state.t there).  Compared before and after an eager
** or captured call. */
static void state_sig(Sig *s, nb_Value f, nb_Value *args, int n) {
  IdMap seen = {0};
  Mods ms = {0};
  sig_walk(s, f, &seen, &ms);
  for (int i = 0; i < n; i++) sig_walk(s, args[i], &seen, &ms);
  for (int i = 0; i < ms.n && !s->oom && !s->big; i++) {
    nb_Value *vals;
    int k = nb_module_globals(ms.m[i], &vals);
    put_u64(s, (uint64_t)k);
    for (int j = 0; j < k && !s->oom && !s->big; j++) sig_walk(s, vals[j], &seen, &ms);
  }
  free(ms.m);
  nbT_idmap_free(&seen);
}
static bool state_changed(const Sig *before, nb_Value f, nb_Value *args, int n) {
  Sig after = {0};
  after.c = before->c;
  state_sig(&after, f, args, n);
  bool changed = after.oom || after.big || after.n != before->n || memcmp(after.p, before->p, after.n);
  free(after.p);
  return changed;
}
#define MUTATION_REASON "the call changed host values that its arguments, f's closure or their modules' globals reach (a step counter such as AdamW's opt.state.t, a list, a tensor replaced, a .grad set): a replay could not repeat that, so every call runs eagerly"


/* ---- results -------------------------------------------------------------------- */
static int leaf_detach(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  (void)ctx;
  if (leaf.t == NB_TTENSOR) { nt_Tensor *d = nt_detach(T(leaf)); if (!d) return nbT_err(vm); *out = nb_obj(NB_TTENSOR, d); return NB_OK; }
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}
static int leaf_clone(nb_VM *vm, void *ctx, nb_Value leaf, nb_Value *out) {
  (void)ctx;
  if (leaf.t == NB_TTENSOR) { nt_Tensor *c = nt_clone(T(leaf)); if (!c) return nbT_err(vm); *out = nb_obj(NB_TTENSOR, c); return NB_OK; }
  nb_incref(leaf); *out = leaf;
  return NB_OK;
}
/* a tree of fresh tensors (records and lists rebuilt), buffers included */
static int map_result(nb_VM *vm, nb_Value v, LeafFn fn, nb_Value *out) {
  if (v.t == NB_TTENSOR) return fn(vm, NULL, v, out);
  return nbT_tree_walk_mode(vm, v, NBT_ALL, fn, NULL, NULL, out);
}

/* ---- the call ----------------------------------------------------------------- */
static Compiled *self_state(nb_Rec *self) {
  nb_Value h = nbR_get_cstr(self, "state");
  return h.t == NB_THANDLE ? ((nb_Handle *)h.u.p)->ptr : NULL;
}

/* the compiled call running f now (compile_replay declares into it), and
** the entry it captures (NULL: an eager call) */
static Compiled *cur_c;
static Entry *cur_e;
static int call_f(nb_VM *vm, Compiled *c, Entry *capturing, nb_Value f, nb_Value *args, int n, nb_Value *out) {
  Compiled *pc = cur_c; Entry *pe = cur_e;
  cur_c = c; cur_e = capturing;
  int st = nbV_call(vm, f, args, n, out);
  cur_c = pc; cur_e = pe;
  return st;
}
static int eager(nb_VM *vm, Compiled *c, nb_Value f, nb_Value *args, int n, nb_Value *out) {
  c->eager_calls++;
  return call_f(vm, c, NULL, f, args, n, out);
}

static void drop_inbuf(Entry *e) {
  for (int i = 0; i < e->nin; i++) nt_release(e->inbuf[i]);
  free(e->inbuf);
  e->inbuf = NULL; e->nin = 0;
}

/* The 2nd call of a signature: input buffers, capture, check. */
static int capture(nb_VM *vm, Compiled *c, Entry *e, nb_Value f, nb_Value *args, int n, const Sig *before, nb_Value *out) {
  drop_inbuf(e);                                           /* a capture that f's error ended left them */
  for (int i = 0; i < n; i++)
    if (args[i].t == NB_TTENSOR && T(args[i])->requires_grad) {
      e->state = EAGER;
      add_reason(c, "a top-level tensor argument requires grad: its gradient would go to the graph's input buffer (pass parameters inside a record, data as plain tensors)");
      return eager(vm, c, f, args, n, out);
    }
  e->inbuf = calloc((size_t)(n ? n : 1), sizeof *e->inbuf);
  nb_Value *call = malloc(sizeof(nb_Value) * (size_t)(n ? n : 1));
  if (!e->inbuf || !call) { free(call); return nb_error(vm, "compile: out of memory"); }
  e->nin = n;
  for (int i = 0; i < n; i++) {
    if (args[i].t == NB_TTENSOR) {
      e->inbuf[i] = nt_clone(T(args[i]));
      if (!e->inbuf[i]) { free(call); return nbT_err(vm); }
      call[i] = nb_obj(NB_TTENSOR, e->inbuf[i]);
    } else call[i] = args[i];
  }
  if (nt_graph_begin()) {                                  /* e.g. a module without graphs: say why, run eagerly */
    char msg[480];
    snprintf(msg, sizeof msg, "cannot capture: %s", nt_error_msg());
    add_reason(c, msg);
    free(call);
    drop_inbuf(e);
    e->state = EAGER;
    return eager(vm, c, f, args, n, out);
  }
  nb_Value r = nb_nil();
  drop_hooks(e);
  int nm0 = c->nmanaged;
  int st = call_f(vm, c, e, f, call, n, &r);
  free(call);
  char reason[400];
  nt_Graph *g = nt_graph_end(reason, sizeof reason);
  if (st) { nt_graph_free(g); return NB_ERR; }            /* f's error, after its work so far ran */
  if (!g && !reason[0]) { nb_decref(r); return nbT_err(vm); }
  bool declared = c->nmanaged != nm0;                      /* a first compile_replay: "before" held the field */
  bool mutated = !declared && state_changed(before, f, args, n);
  if (!g || mutated || declared) {                         /* it ran as an eager call would have */
    nt_graph_free(g);
    drop_inbuf(e);
    drop_hooks(e);
    e->state = declared && g ? SEEN : EAGER;                /* declared: the next call is checked and captured */
    if (mutated) { c->mutates = true; add_reason(c, MUTATION_REASON); }
    else if (!g) { char msg[480]; snprintf(msg, sizeof msg, "the step needs %s, which a CUDA graph cannot hold", reason); add_reason(c, msg); }
    c->eager_calls++;
    *out = r;
    return NB_OK;
  }
  e->g = g;
  e->state = GRAPH;
  c->captures++;
  st = map_result(vm, r, leaf_detach, &e->out);
  nb_decref(r);
  if (st) { e->out = nb_nil(); return NB_ERR; }
  return map_result(vm, e->out, leaf_clone, out);
}

static int replay(nb_VM *vm, Compiled *c, Entry *e, nb_Value *args, int n, nb_Value *out) {
  for (int i = 0; i < e->nhooks; i++) {                    /* the host part the captured call declared */
    nb_Value r = nb_nil();
    if (nbV_call(vm, e->hooks[i], NULL, 0, &r)) return NB_ERR;
    nb_decref(r);
  }
  for (int i = 0; i < n && i < e->nin; i++)
    if (e->inbuf[i] && nt_copy_(e->inbuf[i], T(args[i]))) return nbT_err(vm);
  if (nt_graph_replay(e->g)) return nbT_err(vm);
  c->replays++;
  return map_result(vm, e->out, leaf_clone, out);
}

static int compile_call(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1 || args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "compile: bad call");
  nb_Rec *self = args[0].u.p;
  Compiled *c = self_state(self);
  nb_Value f = nbR_get_cstr(self, "f");
  nb_Value *fargs = args + 1; int nf = n - 1;
  if (!c) return nb_error_kind(vm, "TypeError", "compile: bad call (no state)");
  /* inside another capture the work is that capture's; after a mutation everything is eager */
  if (c->mutates || nt_graph_capturing()) return eager(vm, c, f, fargs, nf, out);
  Sig s = {0};
  s.c = c;
  signature(&s, f, fargs, nf);
  if (s.oom) { free(s.p); return nb_error(vm, "compile: out of memory"); }
  if (s.big) { free(s.p); add_reason(c, "the arguments and f's closure hold more than 200000 values: compile cannot watch them"); return eager(vm, c, f, fargs, nf, out); }
  if (!s.cuda) { free(s.p); return eager(vm, c, f, fargs, nf, out); }   /* the CPU: eager */
  Entry *e = c->entries;
  while (e && !(e->siglen == s.n && !memcmp(e->sig, s.p, s.n))) e = e->next;
  if (!e) {
    if (c->nentries >= MAX_SIGS) {
      free(s.p);
      add_reason(c, "more than 32 signatures (shapes, dtypes, argument values): later ones run eagerly");
      return eager(vm, c, f, fargs, nf, out);
    }
    e = calloc(1, sizeof *e);
    if (!e) { free(s.p); return nb_error(vm, "compile: out of memory"); }
    e->sig = s.p; e->siglen = s.n; e->state = SEEN; e->out = nb_nil();
    e->next = c->entries; c->entries = e; c->nentries++;
    s.p = NULL;
    Sig before = {0};
    before.c = c;
    state_sig(&before, f, fargs, nf);
    int nm0 = c->nmanaged;
    int st = eager(vm, c, f, fargs, nf, out);
    if (!st && c->nmanaged == nm0 && state_changed(&before, f, fargs, nf)) { c->mutates = true; add_reason(c, MUTATION_REASON); }
    free(before.p);
    return st;
  }
  int st;
  Sig before = {0};
  before.c = c;
  switch (e->state) {
    case SEEN:
      state_sig(&before, f, fargs, nf);
      st = capture(vm, c, e, f, fargs, nf, &before, out);
      free(before.p);
      break;
    case GRAPH: st = replay(vm, c, e, fargs, nf, out); break;
    default: st = eager(vm, c, f, fargs, nf, out); break;
  }
  free(s.p);
  return st;
}

static int compile_stats(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  if (n < 1 || args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "compile: bad stats call");
  Compiled *c = self_state(args[0].u.p);
  if (!c) return nb_error_kind(vm, "TypeError", "compile: bad stats call (no state)");
  nb_Rec *r = nbR_new(5);
  nbR_set_cstr(r, "captures", nb_int((double)c->captures));
  nbR_set_cstr(r, "replays", nb_int((double)c->replays));
  nbR_set_cstr(r, "eager_calls", nb_int((double)c->eager_calls));
  nbR_set_cstr(r, "signatures", nb_int(c->nentries));
  nb_List *l = nbL_new(c->nreasons);
  for (int i = 0; i < c->nreasons; i++) nbL_push(l, nb_strv(nbS_cstr(c->reasons[i])));
  nbR_set_cstr(r, "reasons", nb_obj(NB_TLIST, l));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static nb_Builtin call_builtins[] = {
  { "__compile_call", compile_call, "*args", "internal: calls a compiled function" },
  { "__compile_stats", compile_stats, "*args", "internal: a compiled function's stats()" },
  { NULL, NULL, NULL, NULL },
};

static bool compile_off(void) {
  const char *v = getenv("NABLA_COMPILE");
  return v && !strcmp(v, "0");
}

static int b_compile(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nb_Value f = args[0];
  if (f.t != NB_TFUNC && f.t != NB_TBUILTIN && f.t != NB_TREC)
    return nb_error_kind(vm, "TypeError", "compile: expected a function, got %s", nb_typename(f));
  if (compile_off()) { nb_incref(f); *out = f; return NB_OK; }
  Compiled *c = calloc(1, sizeof *c);
  if (!c) return nb_error(vm, "compile: out of memory");
  nb_Handle *h = nbH_new("compiled", c, compiled_free);
  nb_Value hv = nb_obj(NB_THANDLE, h);
  nb_Rec *st = nbR_new(2);
  nbR_set_cstr(st, "__call", nb_builtinv(&call_builtins[1]));
  nb_incref(hv); nbR_set_cstr(st, "state", hv);
  nb_Rec *r = nbR_new(4);
  nbR_set_cstr(r, "__call", nb_builtinv(&call_builtins[0]));
  nb_incref(f); nbR_set_cstr(r, "f", f);
  nbR_set_cstr(r, "state", hv);
  nbR_set_cstr(r, "stats", nb_obj(NB_TREC, st));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

/* compile_replay(rec, key, hook): see the top of this file.  true when a
** compiled call is running (the declaration taken), false otherwise. */
static int b_compile_replay(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[0].t != NB_TREC) return nb_error_kind(vm, "TypeError", "compile_replay: rec must be a record, got %s", nb_typename(args[0]));
  if (args[1].t != NB_TSTR) return nb_error_kind(vm, "TypeError", "compile_replay: key must be a string, got %s", nb_typename(args[1]));
  if (args[2].t != NB_TFUNC && args[2].t != NB_TBUILTIN) return nb_error_kind(vm, "TypeError", "compile_replay: hook must be a function, got %s", nb_typename(args[2]));
  *out = nb_bool(cur_c != NULL);
  if (!cur_c) return NB_OK;
  Compiled *c = cur_c;
  nb_Rec *r = args[0].u.p;
  nb_Str *k = nb_str(args[1]);
  if (!is_managed(c, r, k)) {
    if (c->nmanaged >= 64) return nb_error(vm, "compile_replay: more than 64 fields declared by one compiled function");
    if (c->nmanaged == c->capmanaged) {
      int nc = c->capmanaged ? 2 * c->capmanaged : 4;
      Managed *q = realloc(c->managed, (size_t)nc * sizeof *q);
      if (!q) return nb_error(vm, "compile: out of memory");
      c->managed = q; c->capmanaged = nc;
    }
    char *key = malloc((size_t)k->len + 1);
    if (!key) return nb_error(vm, "compile: out of memory");
    memcpy(key, k->data, k->len); key[k->len] = 0;
    nb_incref(args[0]);
    c->managed[c->nmanaged++] = (Managed){ r, key };
  }
  if (cur_e) {
    if (cur_e->nhooks >= 64) return nb_error(vm, "compile_replay: more than 64 hooks in one step");
    nb_Value *q = realloc(cur_e->hooks, sizeof *q * (size_t)(cur_e->nhooks + 1));
    if (!q) return nb_error(vm, "compile: out of memory");
    cur_e->hooks = q;
    nb_incref(args[2]);
    cur_e->hooks[cur_e->nhooks++] = args[2];
  }
  return NB_OK;
}

/* set_device_scalar(t, values): tcompile.h nt_device_scalar_set (values: a
** number or a list of up to 64) */
static int b_set_device_scalar(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  double v[64];
  int k = 1;
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "set_device_scalar: expected a tensor, got %s", nb_typename(args[0]));
  if (args[1].t == NB_TLIST) {
    nb_List *l = nb_list(args[1]);
    if (l->n < 1 || l->n > 64) return nb_error_kind(vm, "ValueError", "set_device_scalar: 1 to 64 values, got %d", l->n);
    k = l->n;
    for (int i = 0; i < k; i++) if (nbT_num_arg(vm, "set_device_scalar", "value", l->items[i], &v[i])) return NB_ERR;
  } else if (nbT_num_arg(vm, "set_device_scalar", "value", args[1], &v[0])) return NB_ERR;
  if (nt_device_scalar_set(T(args[0]), v, k)) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}

/* amp_unscale_(grads, state) / amp_update_scale_(state, growth, backoff,
** interval): optim.grad_scaler's device half (tensor/toptim.h: the
** scaler state {scale, growth_tracker, found_inf} stays on the device, so a
** scaled step reads nothing back and can be captured).  Here beside
** set_device_scalar: they are the device scalars of a compiled step. */
static int b_amp_unscale(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  if (args[1].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "amp_unscale_: state must be a tensor, got %s", nb_typename(args[1]));
  Leaves ls = {0};
  if (nbT_leaves(vm, args[0], &ls) || nbT_drop_ties(vm, &ls, 1)) { free(ls.t); return NB_ERR; }
  bool prev = nt_set_grad_enabled(false);
  int bad = nt_amp_unscale(ls.t, ls.n, T(args[1]));
  nt_set_grad_enabled(prev);
  free(ls.t);
  if (bad) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}

static int b_amp_update_scale(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  double g, b, iv;
  if (args[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "amp_update_scale_: state must be a tensor, got %s", nb_typename(args[0]));
  if (nbT_num_arg(vm, "amp_update_scale_", "growth_factor", args[1], &g) || nbT_num_arg(vm, "amp_update_scale_", "backoff_factor", args[2], &b) ||
      nbT_num_arg(vm, "amp_update_scale_", "growth_interval", args[3], &iv)) return NB_ERR;
  if (nt_amp_update_scale(T(args[0]), g, b, iv)) return nbT_err(vm);
  *out = nb_nil();
  return NB_OK;
}

static nb_Builtin compile_builtins[] = {
  { "compile", b_compile, "f",
    "compile(f): f as one CUDA graph per call signature: the 1st call runs eagerly, the 2nd captures, later ones copy the tensor arguments in and replay; results are fresh tensors; anything a graph cannot hold runs eagerly with its reason in f.stats() ({captures, replays, eager_calls, signatures, reasons}); eager on the CPU; NABLA_COMPILE=0 returns f" },
  { "compile_replay", b_compile_replay, "rec, key, hook",
    "compile_replay(rec, key, hook): inside a compiled step, declares rec[key] host state the step advances and hook() the host-only function that advances it the same way; a replay runs the hooks first (optim's AdamW declares its step count). false outside compile" },
  { "set_device_scalar", b_set_device_scalar, "t, values",
    "set_device_scalar(t, values): writes a number (or a list of up to 64) into the f64 tensor t of that many elements in stream order, with no host copy; inside a captured step the write happens before the graph runs and is not replayed (a replay hook sets it: a learning rate)" },
  { "amp_unscale_", b_amp_unscale, "grads, state",
    "amp_unscale_(grads, state): every floating gradient of the tree times 1/state[0] in place, and state[2] = 1 when any is then inf/nan (else 0), on the state's device with no host read (optim.grad_scaler's device path; state: f64 {scale, growth_tracker, found_inf})" },
  { "amp_update_scale_", b_amp_update_scale, "state, growth_factor, backoff_factor, growth_interval",
    "amp_update_scale_(state, growth_factor, backoff_factor, growth_interval): the scaler's update on the state's device: found_inf set: scale *= backoff_factor, tracker = 0; else tracker += 1 and at growth_interval scale *= growth_factor (below the f32 maximum), tracker = 0" },
  { NULL, NULL, NULL, NULL },
};

void nbopen_compile(void) {
  nbC_register(compile_builtins);
  nbC_prepare(call_builtins);
}
