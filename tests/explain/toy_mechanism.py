"""A toy mechanism written the way a new one is added: one file, the module and its walkthrough.

Temperature attention: α = softmax(q kᵀ / τ + mask), o = α v (scaled dot-product attention whose
scale is 1/τ). In the library the module part lives in ``attnlab/nn/<name>.py`` and the walkthrough
part is one entry of ``explain.mechanisms.MECHANISMS``; a test may hold both in one file, since
nothing imports it back. Importing this file registers it everywhere (``create``, ``available``,
the alias table, ``explain``'s names, the example schema, ``verify``'s recomputation).
"""

from __future__ import annotations

from decimal import Decimal

import torch

from attnlab.explain import inputs, mechanisms
from attnlab.functional import steps
from attnlab.functional.attention import attention
from attnlab.nn.registry import register
from attnlab.trace import Trace, trace

NAME = "toy-temperature"


def temperature_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, tau: float,
                          mask: torch.Tensor | None = None, need_weights: bool = False):
    """softmax(q kᵀ / τ + mask) v: the core with scale 1/τ. Shapes: q (..., q, d), k (..., k, d), v (..., k, d_v)."""
    return attention(q, k, v, scale=1.0 / tau, mask=mask, need_weights=need_weights)


@register(NAME, aliases=("temperature",), functional=temperature_attention)
class TemperatureAttention(torch.nn.Module):
    def __init__(self, *, tau: float = 2.0):
        super().__init__()
        self.tau = tau

    def forward(self, query, key, value, *, mask=None, need_weights=False):
        return temperature_attention(query, key, value, tau=self.tau, mask=mask, need_weights=need_weights)


def _tau(ex) -> float:
    tau = ex.params["tau"]
    return float(tau) if isinstance(tau, Decimal) else tau


def _run(ex) -> Trace:
    q, k, v = inputs.qkv(ex)
    with trace() as t:
        temperature_attention(q, k, v, tau=_tau(ex), mask=inputs.mask(ex, q.shape[0], k.shape[0]), need_weights=True)
    return t


def _recompute(ex):
    q, k, v = inputs.qkv(ex)
    env = {"q": q, "k": k, "v": v, "scale": torch.tensor(1.0 / _tau(ex), dtype=torch.float64)}
    m = inputs.mask(ex, q.shape[0], k.shape[0])
    if m is not None:
        env["mask"] = m
    return env, steps.PATHS["attention/scaled_dot"]


mechanisms.add(NAME, mechanisms.Mechanism(
    _run, "temperature attention: softmax(qᵀk / τ)", "vaswani", ("query", "keys", "values?", "mask?"), ("tau",),
    recompute=_recompute, keys={"tau": ({"type": "number", "exclusiveMinimum": 0}, "the temperature τ")},
))
