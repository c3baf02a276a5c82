"""Head importance and head ablation (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?").

https://arxiv.org/abs/1905.10650 — give every head a gate ξ_h (1 = on, 0 = removed):

    MHA(x) = Σ_h ξ_h · Att_h(x) W_o,h            importance I_h = |∂L/∂ξ_h| at ξ = 1
    ablation: remove heads one by one, least important first, and record the loss

| symbol | argument |
|---|---|
| ξ_{l,h} | ``gates[l, h]`` (layers, h) |
| L | ``model.loss(tokens, targets)`` (mean cross-entropy) |
| Att_h(x) | head h's context, columns ``h·d_h:(h+1)·d_h`` of the input of ``out_proj`` |

How the gate gets in without touching the model: the output projection is linear in the
concatenated head contexts, so ξ_h · ctx_h W_o,hᵀ = ctx_h (ξ_h W_o,h)ᵀ. ``gated_loss`` calls the
model through ``torch.func.functional_call`` with every layer's ``self_attn.out_proj.weight``
replaced by that weight with head h's columns multiplied by ξ_h — exactly a multiplication of
each head's context, differentiable in ξ, with no hook, no mutation and no change to ``nn/``.
Works for any model whose attention modules are ``attnlab.nn.MultiHeadAttention`` (GPT here).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from ..nn.multihead import MultiHeadAttention


def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """(name, module) of every multi-head attention in the model, in registration (= layer) order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]


def gated_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """``model.loss(tokens, targets)`` with head h of layer l scaled by ``gates[l, h]``; gates (layers, h)."""
    mods = attention_modules(model)
    if not mods:
        raise ValueError(f"{type(model).__name__} has no attnlab.nn.MultiHeadAttention modules to gate")
    heads = mods[0][1].num_heads
    if gates.shape != (len(mods), heads):
        raise ValueError(f"gates must be (layers, heads) = ({len(mods)}, {heads}); got {tuple(gates.shape)}")
    params = {}
    for (name, m), g in zip(mods, gates):
        w = m.out_proj.weight  # (dim, h·d_h): column block h reads head h's context
        params[f"{name}.out_proj.weight"] = w * g.to(w.dtype).repeat_interleave(w.shape[1] // heads)
    return _call_loss(model, params, tokens, targets)


def _call_loss(model, params, tokens, targets):
    class _Loss(nn.Module):  # functional_call calls forward; route it to model.loss
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, y):
            return self.inner.loss(x, y)

    wrapper = _Loss(model)
    return functional_call(wrapper, {f"inner.{k}": v for k, v in params.items()}, (tokens, targets))


def head_importance(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """I[l, h] = |∂L/∂ξ_{l,h}| at ξ = 1 (Michel et al. 2019, eq. 2), (layers, h), in eval mode."""
    mods = attention_modules(model)
    if not mods:
        raise ValueError(f"{type(model).__name__} has no attnlab.nn.MultiHeadAttention modules")
    gates = torch.ones(len(mods), mods[0][1].num_heads, dtype=torch.float64, requires_grad=True)
    was = model.training
    model.eval()
    try:
        (grad,) = torch.autograd.grad(gated_loss(model, tokens, targets, gates), gates)
    finally:
        model.train(was)
    return grad.abs().detach()


def ablation_curve(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                   importance: torch.Tensor | None = None) -> tuple[list[tuple[int, int]], list[float]]:
    """Remove heads least important first; returns (order of (layer, head) removed, losses).

    ``losses[k]`` is the loss with the first k heads of ``order`` removed (``losses[0]``: the full model),
    so ``len(losses) == layers·h + 1``.
    """
    if importance is None:
        importance = head_importance(model, tokens, targets)
    layers, heads = importance.shape
    order = [divmod(int(i), heads) for i in torch.argsort(importance.flatten(), stable=True)]
    gates = torch.ones(layers, heads, dtype=torch.float64)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            losses = [float(gated_loss(model, tokens, targets, gates))]
            for layer, head in order:
                gates[layer, head] = 0.0
                losses.append(float(gated_loss(model, tokens, targets, gates)))
    finally:
        model.train(was)
    return order, losses


__all__ = ["attention_modules", "gated_loss", "head_importance", "ablation_curve"]
