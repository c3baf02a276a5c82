"""How the mechanisms of issue 14 (what models since 2023 use) run a worked example.

Each runner computes the example with the library inside ``attnlab.trace()`` in float64 and
returns the trace, like the others in ``mechanisms.py`` (which registers them in ``MECHANISMS``;
grouped-query attention is there too, as a multi-head run): soft-capping (Gemma 2,
``softcap_attention``), linear attention (Katharopoulos et al. 2020, ``linear_attention``),
differential attention (Ye et al. 2024: the core once per map, its steps renamed ``*_1``/``*_2``,
then the library's ``difference`` and ``combine_values``), multi-head latent attention
(DeepSeek-V2, ``latent_attention``) and 2-D neighbourhood attention (Hassani et al. 2023: the core
with ``attnlab.patterns.neighborhood_2d`` as the mask). Nothing here does arithmetic of its own.
"""

from __future__ import annotations

from decimal import Decimal

import torch

from ..functional.attention import attention, combine_values
from ..functional.differential import difference
from ..functional.latent import latent_attention
from ..functional.linear import linear_attention
from ..functional.multihead import split_heads
from ..functional.softcap import softcap_attention
from ..trace import Step, Trace, record, trace
from .examples import Example, ExampleError, _int, _mask, _need, _qkv, _query, _rows, _scale


def _run_softcap(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    cap = ex.params.get("cap")
    if isinstance(cap, bool) or not isinstance(cap, (int, Decimal)):
        raise ExampleError(f"{ex.at('params')}: mechanism 'softcap' needs cap (a positive number); got {cap!r}")
    with trace() as t:
        softcap_attention(q, k, v, cap=float(cap), scale=_scale(ex), mask=_mask(ex, q.shape[0], k.shape[0]),
                          need_weights=True)
    return t


def _run_linear(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    with trace() as t:
        linear_attention(q, k, v, mask=_mask(ex, q.shape[0], k.shape[0]), need_weights=True)
    return t


def _lambda(ex: Example) -> float:
    lam = ex.params.get("lambda")
    if isinstance(lam, bool) or not isinstance(lam, (int, Decimal)):
        raise ExampleError(f"{ex.at('params')}: mechanism 'differential' needs lambda (a number); got {lam!r}")
    return float(lam)


def _run_differential(ex: Example) -> Trace:
    """The core once per map (their steps named ``*_1``, ``*_2``), then the library's A_1 − λ A_2 and context."""
    v = _rows(ex, "values")
    lam, steps, weights = _lambda(ex), [], []
    for n in (1, 2):
        q, k = _rows(ex, f"query_{n}"), _rows(ex, f"keys_{n}")
        with trace() as t:
            _, w = attention(q, k, v, mask=_mask(ex, q.shape[0], k.shape[0]), scale=_scale(ex), need_weights=True)
        steps += [Step(f"{s.name}_{n}", s.formula.replace("α_ij", f"(A_{n})_ij"), s.value,
                       s.latex.replace(r"\alpha_{ij}", f"(A_{n})_{{ij}}"), s.note)
                  for s in t if s.name != "context"]
        weights.append(w)
    with trace() as t:
        w = difference(weights[0], weights[1], lam)
        record("weights", "α = A_1 − λ A_2", w, latex=r"\alpha = A_1 - \lambda A_2")
        combine_values(w, v)
    return Trace(steps + t.steps)


def _run_latent(ex: Example) -> Trace:
    h = _int(ex, "num_heads", 1)
    q_c, q_r = _rows(ex, "query"), _rows(ex, "query_rope")
    c_kv, k_r = _rows(ex, "latents"), _rows(ex, "key_rope")
    for name, t in (("query", q_c), ("query_rope", q_r)):
        if t.shape[-1] % h:
            raise ExampleError(f"{ex.at('inputs', name)}: {t.shape[-1]} features do not split into num_heads={h}")
    with trace() as t:
        latent_attention(split_heads(q_c[None], h), split_heads(q_r[None], h), c_kv[None], k_r[None],
                         _need(ex, "params", "w_uk"), _need(ex, "params", "w_uv"), num_heads=h,
                         mask=_mask(ex, q_c.shape[0], c_kv.shape[0]), need_weights=True)
    return t


def neighborhood_mask(ex: Example) -> torch.Tensor:
    """The (n, n) bool mask of ``attnlab.patterns.neighborhood_2d`` over the example's H × W grid."""
    from .. import patterns

    hgt, wid, kernel = _int(ex, "height"), _int(ex, "width"), _int(ex, "kernel")
    n = _rows(ex, "keys").shape[0]
    if n != hgt * wid or _query(ex).shape[0] != n:
        raise ExampleError(f"{ex.at('inputs')}: a {hgt} × {wid} grid needs {hgt * wid} queries and keys; got {n} keys")
    try:
        return patterns.neighborhood_2d(hgt, wid, kernel, _int(ex, "dilation", 1)).materialize(n)
    except (ValueError, TypeError) as e:
        raise ExampleError(f"{ex.at('params')}: {e}") from None


def _run_neighborhood(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    with trace() as t:
        attention(q, k, v, mask=neighborhood_mask(ex), scale=_scale(ex), need_weights=True)
    return t


__all__ = ["neighborhood_mask"]
