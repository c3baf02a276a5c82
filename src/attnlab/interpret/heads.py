"""Head importance and head ablation (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?").

https://arxiv.org/abs/1905.10650 — give every head a gate ξ_h (1 = on, 0 = removed):

    MHA(x) = Σ_h ξ_h · Att_h(x) W_o,h            importance I_h = |∂L/∂ξ_h| at ξ = 1
    ablation: remove heads one by one, least important first, and record the loss

| symbol | argument |
|---|---|
| ξ_{l,h} | ``gates[l, h]`` (modules, h): l runs over every attention module, in registration order |
| L | ``loss(model)`` (any scalar), or ``model.loss(tokens, targets)`` (the GPT's mean cross-entropy) |
| Att_h(x) | head h's context, columns ``h·d_h:(h+1)·d_h`` of the input of ``out_proj`` |

How the gate gets in without touching the model: the output projection is linear in the
concatenated head contexts, so ξ_h · ctx_h W_o,hᵀ = ctx_h (ξ_h W_o,h)ᵀ. ``gated_loss`` calls the
loss through ``torch.func.functional_call`` with every attention module's ``out_proj.weight``
replaced by that weight with head h's columns multiplied by ξ_h — exactly a multiplication of
each head's context, differentiable in ξ, with no hook, no mutation and no change to ``nn/``.

Every ``attnlab.nn.MultiHeadAttention`` of the model is gated (``attention_modules``): the GPT's
self-attention, and the translator's encoder self-attention, decoder self-attention and
cross-attention (``attnlab.models.TransformerTranslator``: for l encoder and l decoder layers,
3l modules). ``loss`` is a callable ``loss(model) -> scalar`` evaluated on your batch, e.g.
``lambda m: F.cross_entropy(m(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)``;
without it, ``model.loss(tokens, targets)`` (the GPT's) is used.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call

from ..nn.multihead import MultiHeadAttention
from ..viz.heatmap import save as save_figure

LossFn = Callable[[nn.Module], torch.Tensor]


def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """(name, module) of every multi-head attention in the model, in registration (= layer) order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]


def _modules(model: nn.Module) -> tuple[list[tuple[str, MultiHeadAttention]], int]:
    mods = attention_modules(model)
    if not mods:
        raise ValueError(f"{type(model).__name__} has no attnlab.nn.MultiHeadAttention modules to gate")
    heads = {m.num_heads for _, m in mods}
    if len(heads) != 1:
        raise ValueError(f"every attention module must have the same number of heads to share one gate table; "
                         f"got {sorted(heads)}")
    return mods, heads.pop()


def _loss_fn(tokens, targets, loss: LossFn | None) -> LossFn:
    if loss is not None:
        if tokens is not None or targets is not None:
            raise TypeError("pass either tokens and targets (the model's own .loss) or loss=callable, not both")
        if not callable(loss):
            raise TypeError(f"loss must be a callable loss(model) -> scalar; got {type(loss).__name__}")
        return loss
    if tokens is None or targets is None:
        raise TypeError("pass tokens and targets (for model.loss), or loss=callable(model) -> scalar")
    return lambda m: m.loss(tokens, targets)


class _Loss(nn.Module):
    """functional_call calls ``forward``: route it to the loss callable on the inner model."""

    def __init__(self, inner: nn.Module, fn: LossFn):
        super().__init__()
        self.inner, self.fn = inner, fn

    def forward(self) -> torch.Tensor:
        return self.fn(self.inner)


def gated_loss(model: nn.Module, tokens: torch.Tensor | None = None, targets: torch.Tensor | None = None,
               gates: torch.Tensor | None = None, *, loss: LossFn | None = None) -> torch.Tensor:
    """The loss with head h of attention module l scaled by ``gates[l, h]``; gates (modules, h).

    ``gated_loss(gpt, tokens, targets, gates)`` or ``gated_loss(model, gates=gates, loss=fn)``.
    """
    fn = _loss_fn(tokens, targets, loss)
    mods, heads = _modules(model)
    if gates is None or tuple(gates.shape) != (len(mods), heads):
        got = None if gates is None else tuple(gates.shape)
        raise ValueError(f"gates must be (modules, heads) = ({len(mods)}, {heads}); got {got}")
    params = {}
    for (name, m), g in zip(mods, gates):
        w = m.out_proj.weight  # (dim, h·d_h): column block h reads head h's context
        params[f"inner.{name}.out_proj.weight"] = w * g.to(w.device, w.dtype).repeat_interleave(w.shape[1] // heads)
    return functional_call(_Loss(model, fn), params, ())


def head_importance(model: nn.Module, tokens: torch.Tensor | None = None, targets: torch.Tensor | None = None,
                    *, loss: LossFn | None = None) -> torch.Tensor:
    """I[l, h] = |∂L/∂ξ_{l,h}| at ξ = 1 (Michel et al. 2019, eq. 2), (modules, h), in eval mode."""
    fn = _loss_fn(tokens, targets, loss)
    mods, heads = _modules(model)
    gates = torch.ones(len(mods), heads, dtype=torch.float64, requires_grad=True)
    was = model.training
    model.eval()
    try:
        (grad,) = torch.autograd.grad(gated_loss(model, gates=gates, loss=fn), gates)
    finally:
        model.train(was)
    return grad.abs().detach()


def ablation_curve(model: nn.Module, tokens: torch.Tensor | None = None, targets: torch.Tensor | None = None,
                   importance: torch.Tensor | None = None, *,
                   loss: LossFn | None = None) -> tuple[list[tuple[int, int]], list[float]]:
    """Remove heads least important first; returns (order of (module, head) removed, losses).

    ``losses[k]`` is the loss with the first k heads of ``order`` removed (``losses[0]``: the full model),
    so ``len(losses) == modules·h + 1``. Ties in importance keep (module, head) order.
    """
    fn = _loss_fn(tokens, targets, loss)
    if importance is None:
        importance = head_importance(model, loss=fn)
    mods, heads = _modules(model)
    if tuple(importance.shape) != (len(mods), heads):
        raise ValueError(f"importance must be (modules, heads) = ({len(mods)}, {heads}); got {tuple(importance.shape)}")
    order = [divmod(int(i), heads) for i in torch.argsort(importance.flatten(), stable=True)]
    gates = torch.ones(len(mods), heads, dtype=torch.float64)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            losses = [float(gated_loss(model, gates=gates, loss=fn))]
            for layer, head in order:
                gates[layer, head] = 0.0
                losses.append(float(gated_loss(model, gates=gates, loss=fn)))
    finally:
        model.train(was)
    return order, losses


def plot_ablation(losses: list[float], path: str, *, title: str = "head ablation (Michel et al. 2019)",
                  labels: list[str] | None = None) -> None:
    """Loss against the number of heads removed (least important first), as a PNG (matplotlib, Agg).

    Written to a temporary name and renamed, so ``path`` is never half-written.
    """

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(len(losses)), losses, marker="o", markersize=3)
    ax.axhline(losses[0], color="grey", linestyle=":", linewidth=1, label=f"all heads: {losses[0]:.3f}")
    ax.set_xlabel(f"heads removed, least important first (of {len(losses) - 1})")
    ax.set_ylabel("loss (mean cross-entropy, nats)")
    ax.set_title(title, fontsize=9, wrap=True)
    if labels and len(labels) <= 48:  # which head each step removes, along the top
        top = ax.secondary_xaxis("top")
        top.set_xticks(range(1, len(labels) + 1), labels, rotation=90, fontsize=6)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)  # written whole, then renamed


__all__ = ["attention_modules", "gated_loss", "head_importance", "ablation_curve", "plot_ablation", "LossFn"]
