"""The attentional output of Luong et al.: the decoder's state after attention.

Luong, Pham, Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", eq. (5), https://arxiv.org/abs/1508.04025; the first
tutorial, step 4 ("解码器输出").

    s̃_t = tanh(W_c [c_t; s_t] + b_c)

| paper | argument |
|-------|----------|
| c_t   | ``context`` (..., d_c), the attention's context vector |
| s_t   | ``state`` (..., d_s), the decoder state (the query) |
| W_c   | ``weight`` (d_out, d_c + d_s), ``torch.nn.Linear`` layout |
| b_c   | ``bias`` (d_out,) or None |

The order inside the bracket is the paper's: the context first, then the
state. While a trace is active the steps ``context_state`` ([c_t; s_t]),
``output_preactivation`` (W_c [c_t; s_t] + b_c) and ``output`` (s̃_t) are
recorded. ``attnlab.nn.AttentionalOutput`` owns W_c (and the prediction layer
W_s) and calls this function.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..trace import record
from .scores import project


def concat_features(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Step: [a; b] along the features."""
    return torch.cat([a, b], dim=-1)


def attentional_output(
    context: torch.Tensor,
    state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """s̃_t = tanh(W_c [c_t; s_t] + b_c).  context (..., d_c), state (..., d_s) → (..., d_out)."""
    _checks.tensor("context", context, 1), _checks.tensor("state", state, 1)
    if context.shape[:-1] != state.shape[:-1]:
        raise ValueError(
            f"context and state must share their leading dimensions: context {_checks.shape(context)}, "
            f"state {_checks.shape(state)}"
        )
    d_in = context.shape[-1] + state.shape[-1]
    _checks.tensor("weight", weight, 2)
    if weight.dim() != 2 or weight.shape[1] != d_in:
        raise ValueError(
            f"weight W_c must be (d_out, d_c + d_s) = (·, {context.shape[-1]} + {state.shape[-1]}); "
            f"got {_checks.shape(weight)}"
        )
    if bias is not None:
        _checks.param("bias", bias, (weight.shape[0],), "b_c, (d_out,)")
    given = (("context", context), ("state", state), ("weight", weight)) + ((("bias", bias),) if bias is not None else ())
    _checks.floating(tuple(n for n, _ in given), tuple(t for _, t in given))
    cs = concat_features(context, state)  # (..., d_c + d_s)
    record("context_state", "[c_t; s_t]", cs, latex=r"[c_t; s_t]")
    pre = project(cs, weight, bias)  # (..., d_out)
    record("output_preactivation", "W_c [c_t; s_t] + b_c", pre, latex=r"W_c [c_t; s_t] + b_c")
    out = torch.tanh(pre)
    record("output", "s̃_t = tanh(W_c [c_t; s_t] + b_c)", out, latex=r"\tilde{s}_t = \tanh(W_c [c_t; s_t] + b_c)")
    return out


__all__ = ["attentional_output", "concat_features"]
