/*
** dcompress.c — all_reduce with 16-bit payloads (gradient compression,
** dist.average_grads(compression="bf16"|"fp16")).
**
** The ring of dring.c, but every chunk travels as bf16/fp16: reduce-scatter
** (each hop: the partial sum is rounded to 16 bits, sent, widened and added
** in f32 on the receiver), then an all-gather of the rounded 16-bit chunks.
** Each rank sends 2(w-1)/w * 2 bytes per element instead of 4.  The caller
** keeps the error feedback (the residual of its own rounding, stdlib/dist.nbl).
*/
#include <stdlib.h>
#include <string.h>
#include "tensor/tdtype.h"
#include "dist/dtensorcoll.h"
#include "dist/dgroup.h"

static uint16_t q16(float f, int bf) { return bf ? nt_f32_to_bf16(f) : nt_f32_to_f16(f); }
static float w16(uint16_t h, int bf) { return bf ? nt_bf16_to_f32(h) : nt_f16_to_f32(h); }

static int half_all_reduce(dr_Group *g, float *buf, size_t count, int bf) {
  int w = g->world, r = g->rank;
  if (w == 1) { for (size_t i = 0; i < count; i++) buf[i] = w16(q16(buf[i], bf), bf); return 0; }
  size_t *c = malloc(sizeof(size_t) * (size_t)w * 2), maxc = 0;
  uint16_t *sb = NULL, *rb = NULL, *all = NULL;
  int st = -1;
  if (!c) { nt_error_set("out of memory"); return -1; }
  size_t *off = c + w, acc = 0;
  for (int i = 0; i < w; i++) { c[i] = count / (size_t)w + ((size_t)i < count % (size_t)w); off[i] = acc; acc += c[i]; if (c[i] > maxc) maxc = c[i]; }
  sb = malloc(maxc * 2 + 2); rb = malloc(maxc * 2 + 2); all = malloc(count * 2 + 2);
  if (!sb || !rb || !all) { nt_error_set("out of memory"); goto done; }
  int next = (r + 1) % w, prev = (r - 1 + w) % w;
  for (int s = 0; s < w - 1; s++) {
    int sc = ((r - s - 1) % w + w) % w, rc = ((r - s - 2) % w + w) % w;
    for (size_t i = 0; i < c[sc]; i++) sb[i] = q16(buf[off[sc] + i], bf);
    if (dr_sendrecv(g, next, sb, c[sc] * 2, prev, rb, c[rc] * 2)) { nt_error_set("%s", g->err); goto done; }
    for (size_t i = 0; i < c[rc]; i++) buf[off[rc] + i] += w16(rb[i], bf);
  }
  for (size_t i = 0; i < c[r]; i++) all[off[r] + i] = q16(buf[off[r] + i], bf);
  if (dr_all_gather(g, all, c, 2)) { nt_error_set("%s", g->err); goto done; }
  for (size_t i = 0; i < count; i++) buf[i] = w16(all[i], bf);
  st = 0;
done:
  free(c); free(sb); free(rb); free(all);
  return st;
}

static int b_half(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)n; const char *f = "dist_all_reduce_half"; int id = 0;
  if (!nbD_self.g) return nb_error_kind(vm, "DistError", "%s: not running on a dist worker", f);
  if (a[0].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: expected a tensor", f);
  if (a[1].t != NB_TSTR || (strcmp(nb_str(a[1])->data, "bf16") && strcmp(nb_str(a[1])->data, "fp16")))
    return nb_error_kind(vm, "ValueError", "%s: kind must be \"bf16\" or \"fp16\"", f);
  int bf = !strcmp(nb_str(a[1])->data, "bf16");
  if (nbD_group_arg(vm, f, a[2], &id)) return NB_ERR;
  bool prev = nt_set_grad_enabled(false);
  /* the ring moves host memory: a device tensor is summed in a host copy
  ** and the sum goes back to its device */
  nt_Tensor *x = (nt_Tensor *)a[0].u.p, *t = nt_to_dtype(x, NT_F32), *h = t ? nt_to_device(t, NT_CPU) : NULL;
  nt_Tensor *y = h ? nt_clone(h) : NULL;
  nt_release(t); nt_release(h);
  nt_set_grad_enabled(prev);
  if (!y) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
  nbD_Scope sc;
  int st = nbD_group_enter(id, &sc);
  if (!st) { st = half_all_reduce(nbD_self.g, nt_data_ptr(y), (size_t)y->numel, bf); nbD_group_leave(&sc); }
  if (st) { nt_release(y); return nb_vm_interrupted(vm) ? nb_error_kind(vm, "Interrupted", "%s: interrupted", f) : nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg()); }
  if (x->device != NT_CPU) {
    prev = nt_set_grad_enabled(false);
    nt_Tensor *d = nt_to_device(y, x->device);
    nt_set_grad_enabled(prev);
    nt_release(y);
    if (!d) return nb_error_kind(vm, "DistError", "%s: %s", f, nt_error_msg());
    y = d;
  }
  *out = nb_obj(NB_TTENSOR, y);
  return NB_OK;
}

static nb_Builtin compress_builtins[] = {
  { "dist_all_reduce_half", b_half, "x, kind=\"bf16\", group=nil", "dist_all_reduce_half(x, kind, group): the f32 sum over ranks of x with every transfer in bf16/fp16 (half the bytes)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_compress_init(void) { nbC_register(compress_builtins); }
