"""The named steps of each mechanism's reference path, one small pure function per step.

A mechanism's reference path (Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473;
Luong et al. 2015, https://arxiv.org/abs/1508.04025; Vaswani et al. 2017,
https://arxiv.org/abs/1706.03762; Woo et al. 2018 (CBAM), https://arxiv.org/abs/1807.06521)
is a sequence of steps, each recorded under a name while ``attnlab.trace()``
is active:

    additive:    projected_query = W_q q,  projected_keys = W_k k,  preactivation = W_q q_i + W_k k_j,
                 tanh = tanh(·),  scores = vᵀ u_ij
    dot family:  scores = qᵀk (general: qᵀ(W k)),  scaled_scores = e · s,  masked_scores = e ← −∞
    core:        weights = masked softmax(e),  context = α v
    multi-head:  projected_* = X Wᵀ,  *_heads = split,  …core…,  heads = concat,  output = heads W_oᵀ
    attentional: context_state = [c; s],  output_preactivation = W_c[c; s] + b_c,  output = tanh(·)
    CBAM:        avg_pool, max_pool, mlp, weights = σ(·), output = F ⊗ M (channel);
                 pooled, conv, weights, output (spatial)
    modern:      softcap: …scaled_scores, softcapped_scores = c·tanh(e/c), …core…;
                 linear: query_features = φ(Q), key_features = φ(K), similarities, weights = s / Σ s, context;
                 differential: the core twice (*_1, *_2), weights = A_1 − λ A_2, context;
                 latent (MLA): content_keys = W^UK c, value_heads = W^UV c, query_heads, key_heads = [·^C; ·^R], …core…;
                 gqa: multi-head with key_groups / value_groups = repeat_kv(key_heads / value_heads);
                 neighborhood: the core with the 2-D neighbourhood pattern as the mask
    DIN target:  features = [e_j, v_A, e_j − v_A, e_j ⊙ v_A], hidden = W_1 x + b_1, activated = PReLU(·),
                 scores = W_2 · + b_2, then the core (softmax) or weights = a_j, context = Σ_j a_j e_j (none)

A path (``PATHS["attention/<score>"]``, ``MULTI_HEAD``, ``SOFTCAP``, ...) maps each step name to a ``StepFn``: the step's
function and the names of the earlier steps (or inputs and parameters) it
reads. ``attnlab verify`` recomputes a step "from the example's own rounded
values" by calling that step's function on the (rounded) earlier values.
Every step function is the one the mechanism's own code calls (``scores.project``,
``scores.pair_sum``, ``attention.mask_scores``, ``attention.combine_values``,
``channel.channel_pool``, ``masked_softmax``, ``split_heads``, ...): this module only
names them, so the traced run and the recomputation share one copy of the arithmetic.

| symbol   | argument name in an environment |
|----------|---------------------------------|
| q, k, v  | ``q``, ``k``, ``v`` (query, keys, values as the mechanism used them) |
| s        | ``scale`` (a 0-d tensor)        |
| W_q, W_k, v (additive) | ``w_q``, ``w_k``, ``v_vec`` |
| W_c, b_c | ``w_c``, ``b_c``                |
| F        | ``f`` (b, C, H, W)              |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .attention import combine_values, mask_scores
from .attentional import concat_features
from .channel import channel_gate, channel_pool, gate, max_pool, mean_pool, same_conv, shared_mlp
from .differential import difference
from .latent import join_rope, up_project
from .linear import elu_feature_map, feature_similarities, normalize_similarities
from .multihead import merge_heads, repeat_kv, split_heads
from .scores import dot, pair_sum, project, scale_scores, vector_scores
from .softcap import softcap
from .softmax import masked_softmax
from .target import (
    din_features,
    sum_pool,
    sum_pool_weights,
    unit_activation,
    unit_hidden,
    unit_scores,
)

# --- the paths: step name → (function, names of what it reads) -------------------------


@dataclass(frozen=True)
class StepFn:
    """One step of a path: ``fn(*[env[a] for a in args])``; an argument ending in ``?`` may be absent (None)."""

    fn: Callable[..., torch.Tensor]
    args: tuple[str, ...]

    def __call__(self, env: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.fn(*(env.get(a[:-1]) if a.endswith("?") else env[a] for a in self.args))


Path = dict[str, StepFn]


def _heads(x: str) -> StepFn:
    return StepFn(lambda t, h: split_heads(t, int(h)), (x, "h"))


def _core(score_step: str, values: str) -> Path:
    return {
        "masked_scores": StepFn(mask_scores, (score_step, "mask")),
        "weights": StepFn(masked_softmax, (score_step, "mask?")),
        "context": StepFn(combine_values, ("weights", values)),
    }


SCORE_PATHS: dict[str, Path] = {
    "dot": {"scores": StepFn(dot, ("q", "k"))},
    "scaled_dot": {"scores": StepFn(dot, ("q", "k")), "scaled_scores": StepFn(scale_scores, ("scores", "scale"))},
    "general": {"projected_keys": StepFn(project, ("k", "w_k")), "scores": StepFn(dot, ("q", "projected_keys"))},
    "additive": {
        "projected_query": StepFn(project, ("q", "w_q")),
        "projected_keys": StepFn(project, ("k", "w_k")),
        "preactivation": StepFn(pair_sum, ("projected_query", "projected_keys")),
        "tanh": StepFn(torch.tanh, ("preactivation",)),
        "scores": StepFn(vector_scores, ("tanh", "v_vec")),
    },
}
SCORE_PATHS["concat"] = SCORE_PATHS["additive"]  # W [q; k] = W_q q + W_k k with W split by columns


def attention_path(score: str) -> Path:
    """The steps of ``attention(q, k, v, score=...)``."""
    s = SCORE_PATHS[score]
    return {**s, **_core("scaled_scores" if "scaled_scores" in s else "scores", "v")}


ATTENTIONAL: Path = {
    "context_state": StepFn(concat_features, ("context", "q")),
    "output_preactivation": StepFn(project, ("context_state", "w_c", "b_c?")),
    "output": StepFn(torch.tanh, ("output_preactivation",)),
}

MULTI_HEAD: Path = {
    "projected_query": StepFn(project, ("q", "w_q")),
    "projected_keys": StepFn(project, ("k", "w_k")),
    "projected_values": StepFn(project, ("v", "w_v")),
    "query_heads": _heads("projected_query"),
    "key_heads": _heads("projected_keys"),
    "value_heads": _heads("projected_values"),
    "scores": StepFn(lambda qh, kh: dot(qh, kh), ("query_heads", "key_heads")),
    "scaled_scores": StepFn(scale_scores, ("scores", "scale")),
    **_core("scaled_scores", "value_heads"),
    "heads": StepFn(merge_heads, ("context",)),
    "output": StepFn(project, ("heads", "w_o")),
}

CHANNEL: Path = {
    "avg_pool": StepFn(mean_pool, ("f",)),
    "max_pool": StepFn(max_pool, ("f",)),
    "mlp": StepFn(shared_mlp, ("avg_pool", "max_pool", "w1", "b1?", "w2", "b2?")),
    "weights": StepFn(channel_gate, ("mlp",)),
    "output": StepFn(gate, ("f", "weights")),
}

SPATIAL: Path = {
    "pooled": StepFn(channel_pool, ("f",)),
    "conv": StepFn(same_conv, ("pooled", "weight", "bias?")),
    "weights": StepFn(torch.sigmoid, ("conv",)),
    "output": StepFn(gate, ("f", "weights")),
}

SOFTCAP: Path = {
    **SCORE_PATHS["scaled_dot"],
    "softcapped_scores": StepFn(lambda e, c: softcap(e, float(c)), ("scaled_scores", "cap")),
    **_core("softcapped_scores", "v"),
}

LINEAR: Path = {
    "query_features": StepFn(elu_feature_map, ("q",)),
    "key_features": StepFn(elu_feature_map, ("k",)),
    "similarities": StepFn(feature_similarities, ("query_features", "key_features", "mask?")),
    "weights": StepFn(normalize_similarities, ("similarities",)),
    "context": StepFn(combine_values, ("weights", "v")),
}


def _map(n: int) -> Path:
    """One of differential attention's two softmax maps, its steps named ``*_n``."""
    return {
        f"scores_{n}": StepFn(dot, (f"q{n}", f"k{n}")),
        f"scaled_scores_{n}": StepFn(scale_scores, (f"scores_{n}", "scale")),
        f"masked_scores_{n}": StepFn(mask_scores, (f"scaled_scores_{n}", "mask")),
        f"weights_{n}": StepFn(masked_softmax, (f"scaled_scores_{n}", "mask?")),
    }


DIFFERENTIAL: Path = {
    **_map(1),
    **_map(2),
    "weights": StepFn(difference, ("weights_1", "weights_2", "lam")),
    "context": StepFn(combine_values, ("weights", "v")),
}

LATENT: Path = {
    "content_keys": StepFn(lambda c, w, h: up_project(c, w, int(h)), ("c_kv", "w_uk", "h")),
    "value_heads": StepFn(lambda c, w, h: up_project(c, w, int(h)), ("c_kv", "w_uv", "h")),
    "query_heads": StepFn(join_rope, ("q_c", "q_r")),
    "key_heads": StepFn(join_rope, ("content_keys", "k_r")),
    "scores": StepFn(dot, ("query_heads", "key_heads")),
    "scaled_scores": StepFn(scale_scores, ("scores", "scale")),
    **_core("scaled_scores", "value_heads"),
}

GQA: Path = {
    **MULTI_HEAD,
    "key_heads": StepFn(lambda t, h: split_heads(t, int(h)), ("projected_keys", "h_kv")),
    "value_heads": StepFn(lambda t, h: split_heads(t, int(h)), ("projected_values", "h_kv")),
    "key_groups": StepFn(lambda t, g: repeat_kv(t, int(g)), ("key_heads", "groups")),
    "value_groups": StepFn(lambda t, g: repeat_kv(t, int(g)), ("value_heads", "groups")),
    "scores": StepFn(lambda qh, kh: dot(qh, kh), ("query_heads", "key_groups")),
    **_core("scaled_scores", "value_groups"),
}

_UNIT: Path = {
    "features": StepFn(din_features, ("candidate", "history")),
    "hidden": StepFn(unit_hidden, ("features", "w1", "b1?")),
    "activated": StepFn(unit_activation, ("hidden", "prelu")),
    "scores": StepFn(unit_scores, ("activated", "w2", "b2?")),
}

TARGET_SOFTMAX: Path = {  # the core on the scores as one query row (b, 1, n); mask (b, 1, n)
    **_UNIT,
    "masked_scores": StepFn(lambda e, m: mask_scores(e.unsqueeze(-2), m), ("scores", "mask")),
    "weights": StepFn(lambda e, m: masked_softmax(e.unsqueeze(-2), m), ("scores", "mask?")),
    "context": StepFn(combine_values, ("weights", "history")),
}

TARGET_SUM: Path = {  # DIN's sum pooling; mask (b, n), history with padded rows zero
    **_UNIT,
    "weights": StepFn(sum_pool_weights, ("scores", "mask?")),
    "context": StepFn(sum_pool, ("weights", "history")),
}

# The core's path for each score (``attention/dot``, ...); the other paths are the constants above,
# which each mechanism's record names (``explain.recompute``).
PATHS: dict[str, Path] = {f"attention/{s}": attention_path(s) for s in SCORE_PATHS}


def evaluate(path: Path, env: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """The value of step ``name``: ``env[name]`` if known, else its function on its arguments.

    Arguments that are missing are computed first by their own step functions
    (and kept in ``env``): e.g. the query heads of a one-head run, which has
    no ``query_heads`` step of its own.
    """
    if name in env:
        return env[name]
    step = path[name]
    for a in step.args:
        a = a.rstrip("?")
        if a not in env and a in path:
            env[a] = evaluate(path, env, a)
    return step(env)


__all__ = [
    "StepFn", "Path", "PATHS", "SCORE_PATHS", "ATTENTIONAL", "MULTI_HEAD", "CHANNEL", "SPATIAL",
    "SOFTCAP", "LINEAR", "DIFFERENTIAL", "LATENT", "GQA", "TARGET_SOFTMAX", "TARGET_SUM",
    "attention_path", "evaluate", "project", "pair_sum", "vector_scores", "scale_scores", "mask_scores",
    "combine_values", "concat_features", "mean_pool", "max_pool", "shared_mlp", "channel_gate",
    "channel_pool", "same_conv", "gate",
]
