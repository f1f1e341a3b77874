/*
** lib/ltrnn.c — builtins of the recurrent layers (tensor/nn/rnn.c): lstm,
** gru, rnn, torch._VF's functional forms over torch's flat weight list;
** and the convolutions (tensor/nn/conv.c): conv1d, conv2d,
** conv_transpose1d, conv_transpose2d, torch.nn.functional's.
** stdlib/nn.nbl's layers hold the weights under torch's parameter names and
** call these.
*/
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/nn/rnn.h"
#include "tensor/nn/nn.h"
#include <string.h>

#define MAX_WEIGHTS 4096   /* 1024 layers x 2 directions x 4 would be 8192: bounded well above any real net */

/* the shared arguments of the three builtins, already matched:
** x, weights, h0, c0 (lstm only, else nil), num_layers, bidirectional,
** batch_first, dropout, training, lengths */
static int run(nb_VM *vm, const char *fname, nt_RnnMode mode, nb_Value x, nb_Value weights, nb_Value h0, nb_Value c0,
               nb_Value *opt, nb_Value *out) {
  Tmp tp = {0};
  int64_t layers;
  double dropout = 0;
  if (nbT_int_arg(vm, fname, "num_layers", opt[0], &layers)) return NB_ERR;
  if (layers < 1 || layers > 1024) return nb_error_kind(vm, "ValueError", "%s: num_layers must be in [1, 1024], got %lld", fname, (long long)layers);
  for (int i = 1; i <= 2; i++)
    if (opt[i].t != NB_TBOOL)
      return nb_error_kind(vm, "TypeError", "%s: %s must be a bool, got %s", fname, i == 1 ? "bidirectional" : "batch_first", nb_typename(opt[i]));
  if (nbT_num_arg(vm, fname, "dropout", opt[3], &dropout)) return NB_ERR;
  if (opt[4].t != NB_TBOOL) return nb_error_kind(vm, "TypeError", "%s: training must be a bool, got %s", fname, nb_typename(opt[4]));
  if (weights.t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: weights must be a list of tensors, got %s", fname, nb_typename(weights));
  nb_List *wl = nb_list(weights);
  if (wl->n > MAX_WEIGHTS) return nb_error_kind(vm, "ValueError", "%s: too many weights (%d)", fname, wl->n);
  int D = opt[1].u.b ? 2 : 1, n = wl->n;
  bool has_bias;
  if (n == layers * D * 4) has_bias = true;
  else if (n == layers * D * 2) has_bias = false;
  else
    return nb_error_kind(vm, "ValueError",
                         "%s: weights must hold 4 tensors per layer and direction (weight_ih, weight_hh, bias_ih, bias_hh) or 2 without biases: %lld layers x %d directions need %lld or %lld, got %d",
                         fname, (long long)layers, D, (long long)(layers * D * 4), (long long)(layers * D * 2), n);
  nt_Tensor *w[MAX_WEIGHTS];
  for (int i = 0; i < n; i++) {
    if (wl->items[i].t != NB_TTENSOR) return nb_error_kind(vm, "TypeError", "%s: weights[%d] must be a tensor, got %s", fname, i, nb_typename(wl->items[i]));
    w[i] = T(wl->items[i]);
  }
  nt_Tensor *xt = nbT_arg(vm, &tp, fname, "input", x), *h = NULL, *c = NULL, *len = NULL;
  if (!xt) { nbT_tmp_free(&tp); return NB_ERR; }
  if ((h0.t != NB_TNIL && !(h = nbT_arg(vm, &tp, fname, "h0", h0))) || (c0.t != NB_TNIL && !(c = nbT_arg(vm, &tp, fname, "c0", c0))) ||
      (opt[5].t != NB_TNIL && !(len = nbT_arg(vm, &tp, fname, "lengths", opt[5])))) {
    nbT_tmp_free(&tp);
    return NB_ERR;
  }
  nt_Tensor *y = NULL, *hn = NULL, *cn = NULL;
  int rc = nt_rnn(mode, xt, w, n, has_bias, (int)layers, D == 2, opt[2].u.b, dropout, opt[4].u.b, h, c, len, &y, &hn,
                  mode == NT_RNN_LSTM ? &cn : NULL);
  nbT_tmp_free(&tp);
  if (rc < 0) return nbT_err(vm);
  nb_List *l = nbL_new(3);
  nbL_push(l, nb_obj(NB_TTENSOR, y));
  nbL_push(l, nb_obj(NB_TTENSOR, hn));
  if (cn) nbL_push(l, nb_obj(NB_TTENSOR, cn));
  *out = nb_obj(NB_TLIST, l);
  return NB_OK;
}

/* lstm(x, weights, h0=nil, c0=nil, num_layers=1, bidirectional=false, batch_first=false, dropout=0, training=false, lengths=nil) */
static int b_lstm(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  return run(vm, "lstm", NT_RNN_LSTM, args[0], args[1], args[2], args[3], args + 4, out);
}
/* gru(x, weights, h0=nil, num_layers=1, ...) */
static int b_gru(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  return run(vm, "gru", NT_RNN_GRU, args[0], args[1], args[2], nb_nil(), args + 3, out);
}
/* rnn(x, weights, h0=nil, nonlinearity="tanh", num_layers=1, ...) */
static int b_rnn(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n;
  nt_RnnMode mode;
  nb_Value nl = args[3];
  if (nl.t == NB_TSTR && strcmp(((nb_Str *)nl.u.p)->data, "tanh") == 0) mode = NT_RNN_TANH;
  else if (nl.t == NB_TSTR && strcmp(((nb_Str *)nl.u.p)->data, "relu") == 0) mode = NT_RNN_RELU;
  else return nb_error_kind(vm, "ValueError", "rnn: nonlinearity must be \"tanh\" or \"relu\"");
  return run(vm, "rnn", mode, args[0], args[1], args[2], nb_nil(), args + 4, out);
}

/* ---- convolutions ------------------------------------------------------------- */
/* a per-axis integer argument: a number or a list of nsp numbers, each in [lo, 2^20] */
static int axes_arg(nb_VM *vm, const char *fname, const char *what, nb_Value v, int nsp, int64_t lo, int64_t *out) {
  int64_t p[2];
  int k;
  if (nbT_ints_arg(vm, fname, what, v, p, 2, &k)) return NB_ERR;
  if (k != 1 && k != nsp) return nb_error_kind(vm, "ValueError", "%s: %s must be a number or a list of %d, got %d values", fname, what, nsp, k);
  for (int i = 0; i < nsp; i++) {
    out[i] = p[k == 1 ? 0 : i];
    if (out[i] < lo || out[i] > (1 << 20)) return nb_error_kind(vm, "ValueError", "%s: %s must be in [%lld, %d], got %lld", fname, what, (long long)lo, 1 << 20, (long long)out[i]);
  }
  return NB_OK;
}

/* conv1d(x, weight, bias, stride, padding, dilation, groups) and
** conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation): torch's orders */
static int conv(nb_VM *vm, const char *fname, int nsp, bool transposed, nb_Value *args, nb_Value *out) {
  Tmp tp = {0};
  nt_ConvArgs a = {.groups = 1};
  nb_Value pad = args[4], dil = transposed ? args[7] : args[5], grp = args[6];   /* groups: the 7th argument of both orders */
  if (axes_arg(vm, fname, "stride", args[3], nsp, 1, a.stride) || axes_arg(vm, fname, "dilation", dil, nsp, 1, a.dilation)) return NB_ERR;
  if (transposed && axes_arg(vm, fname, "output_padding", args[5], nsp, 0, a.output_padding)) return NB_ERR;
  if (pad.t == NB_TSTR && !transposed && strcmp(((nb_Str *)pad.u.p)->data, "same") == 0) a.same = true;
  else if (pad.t == NB_TSTR && !transposed && strcmp(((nb_Str *)pad.u.p)->data, "valid") == 0) a.padding[0] = a.padding[1] = 0;
  else if (pad.t == NB_TSTR) return nb_error_kind(vm, "ValueError", "%s: padding must be a number, a list%s", fname, transposed ? "" : ", 'same' or 'valid'");
  else if (axes_arg(vm, fname, "padding", pad, nsp, 0, a.padding)) return NB_ERR;
  if (nbT_int_arg(vm, fname, "groups", grp, &a.groups)) return NB_ERR;
  if (a.groups < 1 || a.groups > (1 << 20)) return nb_error_kind(vm, "ValueError", "%s: groups must be a positive integer, got %lld", fname, (long long)a.groups);
  TENSOR_ARG(x, 0, "input"); TENSOR_ARG(w, 1, "weight");
  nt_Tensor *b = NULL;
  if (args[2].t != NB_TNIL && !(b = nbT_arg(vm, &tp, fname, "bias", args[2]))) { nbT_tmp_free(&tp); return NB_ERR; }
  if (x->ndim != nsp + 2) {
    nbT_tmp_free(&tp);
    return nb_error_kind(vm, "ValueError", "%s: expected input [N, C, %s], got %d dimensions", fname, nsp == 1 ? "L" : "H, W", x->ndim);
  }
  DONE(transposed ? nt_conv_transpose(x, w, b, &a) : nt_conv(x, w, b, &a));
}
static int b_conv1d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return conv(vm, "conv1d", 1, false, args, out); }
static int b_conv2d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return conv(vm, "conv2d", 2, false, args, out); }
static int b_conv_transpose1d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return conv(vm, "conv_transpose1d", 1, true, args, out); }
static int b_conv_transpose2d(nb_VM *vm, nb_Value *args, int n, nb_Value *out) { (void)n; return conv(vm, "conv_transpose2d", 2, true, args, out); }

#define COMMON "num_layers=1, bidirectional=false, batch_first=false, dropout=0, training=false, lengths=nil"
#define RETURNS "x [T, B, input_size] ([B, T, input_size] with batch_first; unbatched [T, input_size]); weights: torch's flat list (per layer, per direction: weight_ih, weight_hh, bias_ih, bias_hh; biases optional); h0 [num_layers*directions, B, H] (nil: zeros); lengths [B] (nil: all T): packed-sequence semantics, outputs past a sequence's length are 0 and its final state is the state at its length; dropout between layers while training"
static nb_Builtin rnn_builtins[] = {
  { "lstm", b_lstm, "x, weights, h0=nil, c0=nil, " COMMON,
    "lstm(x, weights, h0=nil, c0=nil, " COMMON "): torch's LSTM (gates i, f, g, o) -> [output, h_n, c_n]; " RETURNS },
  { "gru", b_gru, "x, weights, h0=nil, " COMMON,
    "gru(x, weights, h0=nil, " COMMON "): torch's GRU (gates r, z, n; n = tanh(W_in x + b_in + r*(W_hn h + b_hn))) -> [output, h_n]; " RETURNS },
  { "rnn", b_rnn, "x, weights, h0=nil, nonlinearity='tanh', " COMMON,
    "rnn(x, weights, h0=nil, nonlinearity=\"tanh\", " COMMON "): torch's RNN (h' = tanh or relu of W_ih x + b_ih + W_hh h + b_hh) -> [output, h_n]; " RETURNS },
  { "conv1d", b_conv1d, "x, weight, bias=nil, stride=1, padding=0, dilation=1, groups=1",
    "conv1d(x [N, C, L], weight [O, C/groups, k], bias=nil, stride=1, padding=0, dilation=1, groups=1): torch.nn.functional.conv1d; padding a number, 'same' (stride 1) or 'valid'" },
  { "conv2d", b_conv2d, "x, weight, bias=nil, stride=1, padding=0, dilation=1, groups=1",
    "conv2d(x [N, C, H, W], weight [O, C/groups, kh, kw], bias=nil, stride=1, padding=0, dilation=1, groups=1): torch.nn.functional.conv2d; stride, padding, dilation a number or [h, w]; padding also 'same' (stride 1) or 'valid'" },
  { "conv_transpose1d", b_conv_transpose1d, "x, weight, bias=nil, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
    "conv_transpose1d(x [N, C, L], weight [C, O/groups, k], bias=nil, stride=1, padding=0, output_padding=0, groups=1, dilation=1): torch.nn.functional.conv_transpose1d (the gradient of conv1d)" },
  { "conv_transpose2d", b_conv_transpose2d, "x, weight, bias=nil, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
    "conv_transpose2d(x [N, C, H, W], weight [C, O/groups, kh, kw], bias=nil, stride=1, padding=0, output_padding=0, groups=1, dilation=1): torch.nn.functional.conv_transpose2d; stride, padding, output_padding, dilation a number or [h, w]" },
  { NULL, NULL, NULL, NULL }
};

void nbopen_rnn(void) { nbC_register(rnn_builtins); }
