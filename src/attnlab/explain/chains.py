"""Step chains: each step of a mechanism as a function of the steps before it.

``attnlab verify`` must answer "what would this step be if the earlier steps
had the *written* (rounded) values?", which the library's functions cannot be
asked (they start from the inputs). A chain restates each recorded step as a
small function of the earlier steps' values, built from the library's own
pieces (``masked_softmax``, ``split_heads``, ``merge_heads``, ``F.linear``).

A chain is checked against the library: run with no substitutions it
reproduces every recorded step of every built-in example to 1e-12
(tests/test_verify.py). A step with no function in the chain keeps the
library's value.

``base(ex)`` gives the inputs and parameters under the names the functions read:
q, k, v (query, keys, values as the mechanism used them), mask, scale and the
parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..functional.multihead import merge_heads, split_heads
from ..functional.softmax import masked_softmax
from .examples import Example, _feature_map, _mask, _need, _opt, _qkv, _rows
from .mechanisms import num_heads

Env = dict[str, torch.Tensor]
Chain = dict[str, Callable[[Env], torch.Tensor]]


def _score_step(e: Env) -> torch.Tensor:
    return e["scaled_scores"] if "scaled_scores" in e else e["scores"]


def _masked(e: Env) -> torch.Tensor:
    return _score_step(e).masked_fill(~e["mask"], float("-inf"))


def _weights(e: Env) -> torch.Tensor:
    return masked_softmax(_score_step(e), e.get("mask"))


ATTENTION: Chain = {
    "projected_query": lambda e: e["q"] @ e["w_q"].T,
    "projected_keys": lambda e: e["k"] @ e["w_k"].T,
    "preactivation": lambda e: e["projected_query"][..., :, None, :] + e["projected_keys"][..., None, :, :],
    "tanh": lambda e: torch.tanh(e["preactivation"]),
    "scaled_scores": lambda e: e["scores"] * e["scale"],
    "masked_scores": _masked,
    "weights": _weights,
    "context": lambda e: e["weights"] @ e["v"],
}
SCORES: dict[str, Callable[[Env], torch.Tensor]] = {
    "dot": lambda e: e["q"] @ e["k"].T,
    "scaled_dot": lambda e: e["q"] @ e["k"].T,
    "general": lambda e: e["q"] @ e["projected_keys"].T,
    "additive": lambda e: e["tanh"] @ e["v_vec"],
    "concat": lambda e: e["tanh"] @ e["v_vec"],
}
ATTENTIONAL: Chain = {
    "context_state": lambda e: torch.cat([e["context"], e["q"]], dim=-1),
    "output_preactivation": lambda e: F.linear(e["context_state"], e["w_c"], e.get("b_c")),
    "output": lambda e: torch.tanh(e["output_preactivation"]),
}


def _heads(e: Env, part: str, proj: str, x: str) -> torch.Tensor:
    return e[part] if part in e else split_heads(e.get(proj, e[x]), int(e["h"]))


PROJECTED: Chain = {
    "projected_query": lambda e: F.linear(e["q"], e["w_q"]),
    "projected_keys": lambda e: F.linear(e["k"], e["w_k"]),
    "projected_values": lambda e: F.linear(e["v"], e["w_v"]),
    "query_heads": lambda e: split_heads(e.get("projected_query", e["q"]), int(e["h"])),
    "key_heads": lambda e: split_heads(e.get("projected_keys", e["k"]), int(e["h"])),
    "value_heads": lambda e: split_heads(e.get("projected_values", e["v"]), int(e["h"])),
    "scores": lambda e: _heads(e, "query_heads", "projected_query", "q")
    @ _heads(e, "key_heads", "projected_keys", "k").transpose(-2, -1),
    "scaled_scores": lambda e: e["scores"] * e["scale"],
    "masked_scores": _masked,
    "weights": _weights,
    "context": lambda e: e["weights"] @ _heads(e, "value_heads", "projected_values", "v"),
    "heads": lambda e: merge_heads(e["context"]),
    "output": lambda e: F.linear(e["heads"] if "heads" in e else merge_heads(e["context"]), e["w_o"]),
}


def _mlp(e: Env, z: torch.Tensor) -> torch.Tensor:
    return F.linear(F.relu(F.linear(z, e["w1"], e.get("b1"))), e["w2"], e.get("b2"))


CHANNEL: Chain = {
    "avg_pool": lambda e: e["f"].mean(dim=(2, 3)),
    "max_pool": lambda e: e["f"].amax(dim=(2, 3)),
    "mlp": lambda e: _mlp(e, e["avg_pool"]) + _mlp(e, e["max_pool"]),
    "weights": lambda e: torch.sigmoid(e["mlp"])[:, :, None, None],
    "output": lambda e: e["f"] * e["weights"],
}
SPATIAL: Chain = {
    "pooled": lambda e: torch.cat([e["f"].mean(dim=1, keepdim=True), e["f"].amax(dim=1, keepdim=True)], dim=1),
    "conv": lambda e: F.conv2d(e["pooled"], e["weight"], e.get("bias"), padding=e["weight"].shape[-1] // 2),
    "weights": lambda e: torch.sigmoid(e["conv"]),
    "output": lambda e: e["f"] * e["weights"],
}


def _attention_base(ex: Example, score: str) -> Env:
    q, k, v = _qkv(ex)
    e: Env = {"q": q, "k": k, "v": v}
    m = _mask(ex, q.shape[0], k.shape[0])
    if m is not None:
        e["mask"] = m
    e["scale"] = torch.tensor(float(ex.params["scale"]) if "scale" in ex.params else 1 / math.sqrt(q.shape[-1]), dtype=torch.float64)
    if score in ("additive", "concat"):
        e["v_vec"] = _need(ex, "params", "v")
    if score == "additive":
        e["w_q"], e["w_k"] = _need(ex, "params", "w_q"), _need(ex, "params", "w_k")
    elif score == "concat":
        w = _need(ex, "params", "weight")
        e["w_q"], e["w_k"] = w[:, : q.shape[-1]], w[:, q.shape[-1] :]
    elif score == "general":
        e["w_k"] = _need(ex, "params", "weight")
    return e


def _projected_base(ex: Example) -> Env:
    if "x" in ex.inputs:
        q = k = v = _rows(ex, "x")
    else:
        q, k, v = _qkv(ex)
    e: Env = {"q": q[None], "k": k[None], "v": v[None], "h": torch.tensor(num_heads(ex))}
    for name, x in (("w_q", q), ("w_k", k), ("w_v", v)):
        w = _opt(ex, "params", name)
        e[name] = w if w is not None else torch.eye(x.shape[-1], dtype=torch.float64)
    w_o = _opt(ex, "params", "w_o")
    e["w_o"] = w_o if w_o is not None else torch.eye(e["w_v"].shape[0], dtype=torch.float64)
    m = _mask(ex, q.shape[0], k.shape[0])
    if m is not None:
        e["mask"] = m
    d_h = e["w_q"].shape[0] // num_heads(ex)
    e["scale"] = torch.tensor(float(ex.params["scale"]) if "scale" in ex.params else 1 / math.sqrt(d_h), dtype=torch.float64)
    return e


def _vision_base(ex: Example) -> Env:
    e: Env = {"f": _feature_map(ex)}
    for name in ("w1", "b1", "w2", "b2", "weight", "bias"):
        t = _opt(ex, "params", name)
        if t is not None:
            e[name] = t
    if "weight" in e and e["weight"].dim() == 3:
        e["weight"] = e["weight"].unsqueeze(0)
    if "bias" in e:
        e["bias"] = e["bias"].reshape(1)
    return e


def _score_name(ex: Example, default: str) -> str:
    return str(ex.params.get("score", default))


def _attention(default: str) -> Callable[[Example], tuple[Env, Chain]]:
    def make(ex: Example) -> tuple[Env, Chain]:
        s = _score_name(ex, default)
        return _attention_base(ex, s), {**ATTENTION, "scores": SCORES[s]}

    return make


def _attentional(ex: Example) -> tuple[Env, Chain]:
    s = _score_name(ex, "dot")
    e = _attention_base(ex, s)
    e["w_c"] = _need(ex, "params", "w_c")
    b = _opt(ex, "params", "b_c")
    if b is not None:
        e["b_c"] = b
    return e, {**ATTENTION, "scores": SCORES[s], **ATTENTIONAL}


CHAINS: dict[str, Callable[[Example], tuple[Env, Chain]]] = {
    "dot": _attention("dot"),
    "scaled_dot": _attention("scaled_dot"),
    "general": _attention("general"),
    "additive": _attention("additive"),
    "concat": _attention("concat"),
    "masked": _attention("scaled_dot"),
    "sparse": _attention("scaled_dot"),
    "attentional": _attentional,
    "self_attention": lambda ex: (_projected_base(ex), PROJECTED),
    "multi_head": lambda ex: (_projected_base(ex), PROJECTED),
    "cross_attention": lambda ex: (_projected_base(ex), PROJECTED),
    "channel": lambda ex: (_vision_base(ex), CHANNEL),
    "spatial": lambda ex: (_vision_base(ex), SPATIAL),
}


def chain_for(ex: Example) -> tuple[Env, Chain]:
    """The inputs/parameters and the step functions of an example's mechanism."""
    return CHAINS[ex.mechanism](ex)


__all__ = ["CHAINS", "chain_for", "Env", "Chain"]
