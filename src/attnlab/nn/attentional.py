"""The attentional output and prediction layer of the first tutorial (Luong et al. 2015, eq. 5–6).

    h̃_t = tanh(W_c [c_t; s_t] + b_c)          (b, d_out)
    p(y_t | y_<t, x) = softmax(W_s h̃_t)        logits (b, V)

Luong, Pham & Manning 2015, https://arxiv.org/abs/1508.04025. The first tutorial writes
the same layer as s̃_t = tanh(W_c [c_t; s_t] + b_c). The decoders of
``attnlab.models.Seq2Seq`` use it for every variant (even the no-attention
baseline, whose c_t is the fixed context), so only the attention differs.

| paper | here                 | shape                    |
|-------|----------------------|--------------------------|
| W_c   | ``combine.weight``   | (d_out, d_c + d_s)       |
| b_c   | ``combine.bias``     | (d_out,)                 |
| W_s   | ``predict.weight``   | (V, d_out)               |

``forward`` returns logits (the softmax is left to the loss or the decoder). The
arithmetic is ``attnlab.functional.attentional_output``, so a trace records its steps.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from ..functional.attentional import attentional_output


class AttentionalOutput(nn.Module):
    """``AttentionalOutput(context_dim, state_dim, out_dim, vocab_size)``: (c_t, s_t) → (h̃_t, logits)."""

    def __init__(self, context_dim: int, state_dim: int, out_dim: int, vocab_size: int, *, dropout: float = 0.0):
        super().__init__()
        for name, size in (("context_dim", context_dim), ("state_dim", state_dim), ("out_dim", out_dim),
                           ("vocab_size", vocab_size)):
            _checks.integer(name, size)
        dropout = _checks.probability("dropout", dropout, one=True)
        self.combine = nn.Linear(context_dim + state_dim, out_dim)
        self.predict = nn.Linear(out_dim, vocab_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, context: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context (..., d_c), state (..., d_s) → h̃ (..., d_out), logits (..., V)."""
        if isinstance(context, torch.Tensor) and isinstance(state, torch.Tensor):
            _checks.module_input(self, ("context", "state"), (context, state))
        h_tilde = attentional_output(context, state, self.combine.weight, self.combine.bias)
        return h_tilde, self.predict(self.dropout(h_tilde))


__all__ = ["AttentionalOutput"]
