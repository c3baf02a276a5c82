"""One real head of a Hugging Face model as a worked example: ``attnlab explain --hf DIR``.

The model runs once with ``attn_implementation="attnlab"``; what its attention received for one
layer (the query and keys *as the model made them*: after its projections and its positions, e.g.
RoPE; the values; the mask; its scale and soft-cap) and what that call returned (the weights and the
context of every head) are handed here. ``head_example`` cuts out one head and one query:

    e_j = q · k_j · scale                  the model's scale (1/√d unless it says otherwise)
    ê_j = c · tanh(e_j / c)                only where the model soft-caps (Gemma 2)
    α   = softmax(ê + mask),  c = Σ_j α_j v_j

as an ``Example`` of the ``scaled-dot`` or ``softcap`` mechanism, whose claims are the weights and
the context the model itself computed. ``attnlab.explain.run`` then recomputes the steps in float64
(recorded by ``attnlab.trace()``) and ``verify`` checks the model's numbers against them.

Grouped-query heads: query head h reads key/value head h // (h / h_kv), as transformers' repeat_kv.
Not shown (a ValueError says so): additive position biases (T5) and attention sinks, which the
worked-example mechanisms have no step for.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import torch

from .examples import Example


def _mask_row(call: dict[str, Any], head: int, query: int, k_len: int) -> list[bool]:
    """The keys query ``query`` of head ``head`` (batch element 0) may attend, as transformers' mask says."""
    mask = call["mask"]
    if mask is None:  # no mask came: causal (bottom-right aligned) or every key
        q_len = call["query"].shape[-2]
        return [j <= query + k_len - q_len or not call["causal"] for j in range(k_len)]
    if mask.dtype != torch.bool:
        raise ValueError("this model's attention adds a position bias (e.g. T5's relative positions) that the "
                         "walkthrough has no step for; explain --hf walks through models without one")
    row = mask[0, head if mask.shape[1] > 1 else 0, query if mask.shape[2] > 1 else 0]  # (k,)
    return [bool(x) for x in row.tolist()]


def _rows(t: torch.Tensor) -> list:
    return t.detach().to(torch.float64).cpu().tolist()


def head_example(call: dict[str, Any], *, layer: int, head: int, query: int, tokens: list[str],
                 model: str) -> Example:
    """The worked example of head ``head`` at query ``query`` of the call ``call`` (all counted from 0).

    ``call``: one call of the attention as ``attnlab.integrations.transformers.calls()`` keeps it (with
    the weights: the model ran with ``output_attentions=True``); ``tokens``: the text's tokens."""
    if call["sinks"] is not None:
        raise ValueError("this model's attention has sinks (an extra logit per head) that the walkthrough has "
                         "no step for; explain --hf walks through models without them")
    q, k, v = call["query"], call["key"], call["value"]
    group = q.shape[1] // k.shape[1]
    k_len = k.shape[-2]
    mask = _mask_row(call, head, query, k_len)
    params: dict[str, Any] = {}
    if call["scaling"] is not None:
        params["scale"] = float(call["scaling"])
    if call["softcap"] is not None:
        params["cap"] = Decimal(repr(float(call["softcap"])))
    weights, context = call["weights"][0, head, query], call["output"][0, query, head]  # (k,), (d_v,)
    shown = tokens[query] if query < len(tokens) else str(query + 1)
    kv = f" (key/value head {head // group + 1} of {k.shape[1]})" if group > 1 else ""
    return Example(
        name=f"{model}-layer-{layer + 1}-head-{head + 1}-query-{query + 1}",
        mechanism="softcap" if "cap" in params else "scaled-dot",
        title=f"A real head of {model}: layer {layer + 1}, head {head + 1}{kv}, query {query + 1} “{shown}” "
              f"over {k_len} keys, as the model computed it",
        title_zh=f"{model} 的一个真实注意力头：第 {layer + 1} 层，第 {head + 1} 个头，第 {query + 1} 个查询"
                 f"“{shown}”，共 {k_len} 个键，即模型自己的计算",
        inputs={"query": _rows(q[0, head, query]), "keys": _rows(k[0, head // group]),
                "values": _rows(v[0, head // group]), "mask": mask},
        params=params, tokens=[shown], key_tokens=list(tokens[:k_len]) if len(tokens) >= k_len else None,
        # what the model itself computed, as claims the walkthrough checks against its float64 steps
        claims=[{"step": "weights", "value": [round(float(w), 4) for w in weights]},
                {"step": "context", "value": [round(float(c), 4) for c in context]}],
    )


__all__ = ["head_example"]
