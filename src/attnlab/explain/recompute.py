"""What ``verify`` recomputes a step from: the example's inputs and parameters, and the step functions.

``attnlab verify`` must answer "what would this step be if the earlier steps
had the *written* (rounded) values?". It asks the functional layer's own step
functions (``attnlab.functional.steps``: the named steps of each mechanism's
reference path), fed with the written values of the earlier steps. This module
does no arithmetic: it only reads the example into an environment (the names
the step functions read: q, k, v, mask, scale, the parameters) and picks the
mechanism's path. Each mechanism's record (``explain.mechanisms.MECHANISMS``) names its function
here: ``record.recompute(example)`` gives the environment and the step functions.
"""

from __future__ import annotations

import torch

from ..functional import steps
from ..functional.multihead import split_heads, zero_unreachable
from ..functional.scores import default_scale
from . import inputs
from .examples import Example
from .inputs import neighborhood_mask, normalise, num_heads, target_inputs

Env = dict[str, torch.Tensor]


def _scalar(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def _score_name(ex: Example, default: str) -> str:
    return str(ex.params.get("score", default))


def _attention_env(ex: Example, score: str) -> Env:
    q, k, v = inputs.qkv(ex)
    e: Env = {"q": q, "k": k, "v": v}
    m = inputs.mask(ex, q.shape[0], k.shape[0])
    if m is not None:
        e["mask"] = m
    e["scale"] = _scalar(float(ex.params["scale"]) if "scale" in ex.params else default_scale(q.shape[-1]))
    if score in ("additive", "concat"):
        e["v_vec"] = inputs.need(ex, "params", "v")
    if score == "additive":
        e["w_q"], e["w_k"] = inputs.need(ex, "params", "w_q"), inputs.need(ex, "params", "w_k")
    elif score == "concat":  # W [q; k] = W_q q + W_k k: W's query and key columns (views)
        w = inputs.need(ex, "params", "weight")
        e["w_q"], e["w_k"] = w[:, : q.shape[-1]], w[:, q.shape[-1] :]
    elif score == "general":
        e["w_k"] = inputs.need(ex, "params", "weight")
    return e


def _projected_env(ex: Example) -> Env:
    if "x" in ex.inputs:
        q = k = v = inputs.rows(ex, "x")
    else:
        q, k, v = inputs.qkv(ex)
    e: Env = {"q": q[None], "k": k[None], "v": v[None], "h": torch.tensor(num_heads(ex))}
    for name, x in (("w_q", q), ("w_k", k), ("w_v", v)):
        w = inputs.optional(ex, "params", name)
        e[name] = w if w is not None else torch.eye(x.shape[-1], dtype=torch.float64)
    w_o = inputs.optional(ex, "params", "w_o")
    e["w_o"] = w_o if w_o is not None else torch.eye(e["w_q"].shape[0], dtype=torch.float64)  # on concat(heads)
    m = inputs.mask(ex, q.shape[0], k.shape[0])
    if m is not None:  # as the run: keys and values no query may see are zeros before their projections
        e["mask"] = m
        e["k"], e["v"] = zero_unreachable(e["k"], m), zero_unreachable(e["v"], m)
    d_h = e["w_q"].shape[0] // num_heads(ex)
    e["scale"] = _scalar(float(ex.params["scale"]) if "scale" in ex.params else default_scale(d_h))
    return e


def _vision_env(ex: Example) -> Env:
    e: Env = {"f": inputs.feature_map(ex)}
    for name in ("w1", "b1", "w2", "b2", "weight", "bias"):
        t = inputs.optional(ex, "params", name)
        if t is not None:
            e[name] = t
    if "weight" in e and e["weight"].dim() == 3:
        e["weight"] = e["weight"].unsqueeze(0)
    if "bias" in e:
        e["bias"] = e["bias"].reshape(1)
    return e


def attention(default: str):
    def make(ex: Example) -> tuple[Env, steps.Path]:
        s = _score_name(ex, default)
        return _attention_env(ex, s), steps.PATHS[f"attention/{s}"]

    return make


def attentional(ex: Example) -> tuple[Env, steps.Path]:
    s = _score_name(ex, "dot")
    e = _attention_env(ex, s)
    e["w_c"] = inputs.need(ex, "params", "w_c")
    b = inputs.optional(ex, "params", "b_c")
    if b is not None:
        e["b_c"] = b
    return e, {**steps.PATHS[f"attention/{s}"], **steps.ATTENTIONAL}


def softcap(ex: Example) -> tuple[Env, steps.Path]:
    e = _attention_env(ex, "scaled_dot")
    e["cap"] = _scalar(float(ex.params["cap"]))
    return e, steps.SOFTCAP


def linear(ex: Example) -> tuple[Env, steps.Path]:
    e = _attention_env(ex, "dot")
    del e["scale"]
    return e, steps.LINEAR


def differential(ex: Example) -> tuple[Env, steps.Path]:
    e: Env = {"v": inputs.rows(ex, "values"), "lam": _scalar(float(ex.params["lambda"]))}
    for n in (1, 2):
        e[f"q{n}"], e[f"k{n}"] = inputs.rows(ex, f"query_{n}"), inputs.rows(ex, f"keys_{n}")
    m = inputs.mask(ex, e["q1"].shape[0], e["k1"].shape[0])
    if m is not None:
        e["mask"] = m
    e["scale"] = _scalar(float(ex.params["scale"]) if "scale" in ex.params else default_scale(e["q1"].shape[-1]))
    return e, steps.DIFFERENTIAL


def latent(ex: Example) -> tuple[Env, steps.Path]:
    h = inputs.positive_int(ex, "num_heads", 1)
    q_c, q_r = split_heads(inputs.rows(ex, "query")[None], h), split_heads(inputs.rows(ex, "query_rope")[None], h)
    e: Env = {"q_c": q_c, "q_r": q_r, "c_kv": inputs.rows(ex, "latents")[None], "k_r": inputs.rows(ex, "key_rope")[None],
              "w_uk": inputs.need(ex, "params", "w_uk"), "w_uv": inputs.need(ex, "params", "w_uv"), "h": torch.tensor(h)}
    m = inputs.mask(ex, q_c.shape[-2], e["c_kv"].shape[1])
    if m is not None:
        e["mask"] = m
    e["scale"] = _scalar(default_scale(q_c.shape[-1] + q_r.shape[-1]))  # 1/√(d_h + d_R)
    return e, steps.LATENT


def gqa(ex: Example) -> tuple[Env, steps.Path]:
    e = _projected_env(ex)
    h, kv = num_heads(ex), inputs.positive_int(ex, "num_kv_heads")
    e["h_kv"], e["groups"] = torch.tensor(kv), torch.tensor(h // kv)
    return e, steps.GQA


def neighborhood(ex: Example) -> tuple[Env, steps.Path]:
    e = _attention_env(ex, "scaled_dot")
    e["mask"] = neighborhood_mask(ex)
    return e, steps.PATHS["attention/scaled_dot"]


def target(ex: Example) -> tuple[Env, steps.Path]:
    """The run's own batch of one: candidate (1, 1, d), history (1, n, d); the mask as each path reads it."""
    c, h, m = target_inputs(ex)
    e: Env = {"candidate": c[None, None], "history": h[None], "w1": inputs.need(ex, "params", "w1"),
              "prelu": inputs.need(ex, "params", "prelu"), "w2": inputs.need(ex, "params", "w2")}
    for name in ("b1", "b2"):
        t = inputs.optional(ex, "params", name)
        if t is not None:
            e[name] = t
    if normalise(ex) == "none":
        if m is not None:  # padded rows are zeros before any arithmetic, as the run does
            e["history"], e["mask"] = torch.where(m[:, None], h, torch.zeros((), dtype=h.dtype))[None], m[None]
        return e, steps.TARGET_SUM
    if m is not None:
        e["mask"] = m[None, None]
    return e, steps.TARGET_SOFTMAX


def projected(ex: Example) -> tuple[Env, steps.Path]:
    return _projected_env(ex), steps.MULTI_HEAD


def channel(ex: Example) -> tuple[Env, steps.Path]:
    return _vision_env(ex), steps.CHANNEL


def spatial(ex: Example) -> tuple[Env, steps.Path]:
    return _vision_env(ex), steps.SPATIAL


__all__ = ["Env", "attention", "attentional", "softcap", "linear", "differential", "latent", "gqa", "neighborhood", "target",
           "projected", "channel", "spatial"]
