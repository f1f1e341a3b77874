/*
** rnn.h — recurrent layers (rnn.c): torch.nn.RNN (tanh/relu), LSTM and GRU,
** with torch's gate order, parameter layout and packed-sequence semantics.
** Conventions as nn.h: borrowed arguments, new references, -1 / NULL with
** the error set.
*/
#ifndef NT_RNN_H
#define NT_RNN_H

#include "tensor/tensor.h"

typedef enum { NT_RNN_TANH = 0, NT_RNN_RELU = 1, NT_RNN_LSTM = 2, NT_RNN_GRU = 3 } nt_RnnMode;

/* The whole recurrent network, torch._VF.lstm/gru/rnn_tanh/rnn_relu:
**   x        [T, B, I] ([B, T, I] with batch_first; unbatched [T, I])
**   weights  torch's _flat_weights: for each layer l, for each direction
**            (forward, then reverse when bidirectional): weight_ih [G*H, I_l],
**            weight_hh [G*H, H], then bias_ih [G*H], bias_hh [G*H] when
**            has_bias (G = 4 for LSTM with gates i,f,g,o; 3 for GRU with
**            r,z,n; 1 for RNN); I_0 = I, I_l = H*D after.  nweights must be
**            num_layers*D*(has_bias ? 4 : 2).
**   h0, c0   [num_layers*D, B, H] (unbatched: [num_layers*D, H]) or NULL
**            (zeros); c0 only for LSTM.
**   lengths  integer [B] or NULL: sequence b is x[0:lengths[b], b] (0 <=
**            lengths[b] <= T); its outputs past that are zero and its final
**            state is the state at its length (the reverse direction starts
**            at lengths[b]-1): torch's pack_padded_sequence /
**            pad_packed_sequence(total_length=T) semantics.
**   dropout  applied to every layer's output but the last when training.
** Writes *out [T, B, D*H] ([B, T, D*H] with batch_first), *hn
** [num_layers*D, B, H] and, for LSTM, *cn (same shape); the caller owns
** them.  f32/f64 (f16/bf16 computed in f32 and cast back); autocast is off
** inside.  Each layer and direction is one autograd node (see rnn.c).
** 0, or -1 with the error set (nothing written). */
int nt_rnn(nt_RnnMode mode, nt_Tensor *x, nt_Tensor *const *weights, int nweights, bool has_bias, int num_layers,
           bool bidirectional, bool batch_first, double dropout, bool training, nt_Tensor *h0, nt_Tensor *c0,
           nt_Tensor *lengths, nt_Tensor **out, nt_Tensor **hn, nt_Tensor **cn);

/* "lstm", "gru", "rnn" (tanh and relu) */
const char *nt_rnn_mode_name(nt_RnnMode mode);

#endif
