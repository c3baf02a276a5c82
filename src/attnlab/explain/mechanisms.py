"""The mechanisms of worked examples: how each one runs, and how its steps are laid out.

``run(example)`` computes the example with the library inside ``attnlab.trace()``
in float64 and returns the trace; nothing here does arithmetic of its own (the
only additions to a trace are the library's own ``split_heads`` views of the
projections, so a walkthrough can show the heads).

Mechanisms are a registry (``MECHANISMS``: name → ``Mechanism``); each entry
says how to run an example and how its steps are laid out (batched runs drop
their batch axis of one for display; a single query vector drops the query axis).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

import torch

from ..functional.attention import attention, combine_values
from ..functional.attentional import attentional_output
from ..functional.channel import channel_attention, spatial_attention
from ..functional.differential import difference
from ..functional.latent import latent_attention
from ..functional.linear import linear_attention
from ..functional.multihead import multi_head_attention, repeat_kv, split_heads
from ..functional.scores import additive, concat, general
from ..functional.softcap import softcap_attention
from ..functional.target import target_attention
from ..trace import Step, Trace, record, trace
from . import inputs, names
from . import recompute as R
from .examples import Example, ExampleError
from .inputs import neighborhood_mask, normalise, num_heads, target_inputs
from .names import ALIASES, canonical
from .papers import PAPERS, Paper

# Score choices for mechanisms that take a ``score`` parameter (masked, attentional, ...).
SCORE_BUILDERS: dict[str, Callable[[Example], Any]] = {
    "dot": lambda ex: "dot",
    "scaled_dot": lambda ex: "scaled_dot",
    "general": lambda ex: partial(general, weight=inputs.need(ex, "params", "weight")),
    "additive": lambda ex: partial(
        additive, w_q=inputs.need(ex, "params", "w_q"), w_k=inputs.need(ex, "params", "w_k"), v=inputs.need(ex, "params", "v")
    ),
    "concat": lambda ex: partial(concat, weight=inputs.need(ex, "params", "weight"), v=inputs.need(ex, "params", "v")),
}


def _score(ex: Example, default: str) -> Any:
    name = ex.params.get("score", default)
    if name not in SCORE_BUILDERS:
        raise ExampleError(f"{ex.at('params', 'score')}: unknown score {name!r}; known: {', '.join(SCORE_BUILDERS)}")
    return SCORE_BUILDERS[name](ex)


# --- running an example -------------------------------------------------------


def _run_attention(ex: Example, score: str, *, need_mask: bool = False) -> Trace:
    q, k, v = inputs.qkv(ex)  # inputs are read (and checked) before parameters
    score_arg = _score(ex, score)
    mask = inputs.mask(ex, q.shape[0], k.shape[0])
    if need_mask and mask is None:
        raise ExampleError(f"{ex.at('inputs')}: mechanism {ex.mechanism!r} needs a mask (or [params] causal = true)")
    scale = inputs.scale(ex) if score_arg == "scaled_dot" else None
    with trace() as t:
        attention(q, k, v, score=score_arg, mask=mask, scale=scale, need_weights=True)
    return t


def _run_sparse(ex: Example) -> Trace:
    """Attention masked by a pattern from ``attnlab.patterns`` or by an explicit [inputs] mask.

    ``[params] pattern`` is a table ``{name = "sliding_window", before = 1, after = 1}`` or a
    list ``[{kind = "sliding_window", args = [1, 1]}, ...]`` joined by ``combine`` ("or", "and").
    """
    from .. import patterns

    pattern = ex.params.get("pattern")
    if pattern is not None and "mask" not in ex.inputs:
        n = inputs.rows(ex, "keys").shape[0]
        if isinstance(pattern, list):
            try:
                pat = patterns.from_spec(pattern, str(ex.params.get("combine", "or")))
            except (ValueError, TypeError) as e:
                raise ExampleError(f"{ex.at('params', 'pattern')}: {e}") from None
        elif isinstance(pattern, dict) and "name" in pattern:
            fn = patterns.BUILDERS.get(str(pattern["name"]))
            if fn is None:
                raise ExampleError(
                    f"{ex.at('params', 'pattern')}: no pattern {pattern['name']!r}; known: {', '.join(patterns.BUILDERS)}"
                )
            kwargs = {k: (int(v) if isinstance(v, int) else float(v)) for k, v in pattern.items() if k != "name"}
            try:
                pat = fn(**kwargs)
            except (ValueError, TypeError) as e:
                raise ExampleError(f"{ex.at('params', 'pattern')}: {e}") from None
        else:
            raise ExampleError(
                f"{ex.at('params', 'pattern')} must be a table with a name, e.g. "
                '{name = "sliding_window", before = 1, after = 1}, or a list of {kind, args} tables'
            )
        q_len = inputs.query(ex).shape[0]
        ex.inputs["mask"] = pat.materialize(n)[n - q_len :].int().tolist()
    return _run_attention(ex, "scaled_dot", need_mask=True)


def _eye(n: int) -> torch.Tensor:
    return torch.eye(n, dtype=torch.float64)


def _run_projected(ex: Example, q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, heads: int,
                   kv_heads: int | None = None) -> Trace:
    """Projections + (multi-head or grouped-query) attention via ``attnlab.multihead``; absent weights are
    identities. ``kv_heads`` < ``heads``: grouped-query attention, its key/value heads shown before and
    after ``repeat_kv`` (the library's own) shares each among ``heads // kv_heads`` query heads."""
    given = {n: inputs.optional(ex, "params", n) for n in ("w_q", "w_k", "w_v", "w_o")}
    w_q = given["w_q"] if given["w_q"] is not None else _eye(q_in.shape[-1])
    w_k = given["w_k"] if given["w_k"] is not None else _eye(k_in.shape[-1])
    w_v = given["w_v"] if given["w_v"] is not None else _eye(v_in.shape[-1])
    w_o = given["w_o"] if given["w_o"] is not None else _eye(w_q.shape[0])  # acts on concat(heads): h·d_h
    mask = inputs.mask(ex, q_in.shape[0], k_in.shape[0])
    with trace() as t:
        multi_head_attention(
            q_in[None], k_in[None], v_in[None], {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}, num_heads=heads,
            mask=mask, scale=inputs.scale(ex), need_weights=True, num_kv_heads=kv_heads,
        )
    drop = {f"projected_{s}" for s, w in (("query", "w_q"), ("keys", "w_k"), ("values", "w_v")) if given[w] is None}
    if heads == 1:
        drop.add("heads")  # the concatenation of one head is that head
    if given["w_o"] is None:
        drop.add("output")
    steps = [s for s in t.steps if s.name not in drop]
    if heads > 1:  # show the split: the library's own split_heads of the recorded projections
        d_h, kv = w_q.shape[0] // heads, kv_heads or heads
        split = [
            Step(f"{part}_heads", f"split {sym} into {n} heads of {d_h}",
                 split_heads(t[f"projected_{src}"].value, n), latex=rf"{sym}_1, \dots, {sym}_{{{n}}}")
            for part, src, sym, n in (("query", "query", "Q", heads), ("key", "keys", "K", kv), ("value", "values", "V", kv))
        ]
        if kv != heads:  # grouped-query: each key/value head serves heads // kv query heads
            split += [
                Step(f"{part}_groups", f"{sym} head ⌈i·{kv}/{heads}⌉ for query head i",
                     repeat_kv(split[n].value, heads // kv), latex=rf"{sym}_{{\lceil i h_{{kv}} / h \rceil}}")
                for n, part, sym in ((1, "key", "K"), (2, "value", "V"))
            ]
        at = max(i for i, s in enumerate(steps) if s.name.startswith("projected_")) + 1 if any(
            s.name.startswith("projected_") for s in steps) else 0
        steps[at:at] = split
    return Trace(steps)


def _run_self(ex: Example) -> Trace:
    x = inputs.rows(ex, "x")
    return _run_projected(ex, x, x, x, 1)


def _run_multi_head(ex: Example) -> Trace:
    if "x" in ex.inputs:
        x = inputs.rows(ex, "x")
        q = k = v = x
    else:
        q, k, v = inputs.qkv(ex)
    return _run_projected(ex, q, k, v, inputs.positive_int(ex, "num_heads"))


def _run_gqa(ex: Example) -> Trace:
    x = inputs.rows(ex, "x")
    heads, kv = inputs.positive_int(ex, "num_heads"), inputs.positive_int(ex, "num_kv_heads")
    if heads % kv:
        raise ExampleError(f"{ex.at('params', 'num_kv_heads')}: must divide num_heads={heads}; got {kv}")
    return _run_projected(ex, x, x, x, heads, kv)


def _run_softcap(ex: Example) -> Trace:
    q, k, v = inputs.qkv(ex)
    cap = ex.params.get("cap")
    if isinstance(cap, bool) or not isinstance(cap, (int, Decimal)):
        raise ExampleError(f"{ex.at('params')}: mechanism 'softcap' needs cap (a positive number); got {cap!r}")
    with trace() as t:
        softcap_attention(q, k, v, cap=float(cap), scale=inputs.scale(ex), mask=inputs.mask(ex, q.shape[0], k.shape[0]),
                          need_weights=True)
    return t


def _run_linear(ex: Example) -> Trace:
    q, k, v = inputs.qkv(ex)
    with trace() as t:
        linear_attention(q, k, v, mask=inputs.mask(ex, q.shape[0], k.shape[0]), need_weights=True)
    return t


def _lambda(ex: Example) -> float:
    lam = ex.params.get("lambda")
    if isinstance(lam, bool) or not isinstance(lam, (int, Decimal)):
        raise ExampleError(f"{ex.at('params')}: mechanism 'differential' needs lambda (a number); got {lam!r}")
    return float(lam)


def _run_differential(ex: Example) -> Trace:
    """The core once per map (their steps named ``*_1``, ``*_2``), then the library's A_1 − λ A_2 and context."""
    v = inputs.rows(ex, "values")
    lam, steps, weights = _lambda(ex), [], []
    for n in (1, 2):
        q, k = inputs.rows(ex, f"query_{n}"), inputs.rows(ex, f"keys_{n}")
        with trace() as t:
            _, w = attention(q, k, v, mask=inputs.mask(ex, q.shape[0], k.shape[0]), scale=inputs.scale(ex), need_weights=True)
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
    h = inputs.positive_int(ex, "num_heads", 1)
    q_c, q_r = inputs.rows(ex, "query"), inputs.rows(ex, "query_rope")
    c_kv, k_r = inputs.rows(ex, "latents"), inputs.rows(ex, "key_rope")
    for name, t in (("query", q_c), ("query_rope", q_r)):
        if t.shape[-1] % h:
            raise ExampleError(f"{ex.at('inputs', name)}: {t.shape[-1]} features do not split into num_heads={h}")
    with trace() as t:
        latent_attention(split_heads(q_c[None], h), split_heads(q_r[None], h), c_kv[None], k_r[None],
                         inputs.need(ex, "params", "w_uk"), inputs.need(ex, "params", "w_uv"), num_heads=h,
                         mask=inputs.mask(ex, q_c.shape[0], c_kv.shape[0]), need_weights=True)
    return t


def _run_neighborhood(ex: Example) -> Trace:
    q, k, v = inputs.qkv(ex)
    with trace() as t:
        attention(q, k, v, mask=neighborhood_mask(ex), scale=inputs.scale(ex), need_weights=True)
    return t


def _run_cross(ex: Example) -> Trace:
    q, k, v = inputs.qkv(ex)
    return _run_projected(ex, q, k, v, inputs.positive_int(ex, "num_heads", 1))


def _run_channel(ex: Example) -> Trace:
    f = inputs.feature_map(ex)
    w1, w2 = inputs.need(ex, "params", "w1"), inputs.need(ex, "params", "w2")
    with trace() as t:
        channel_attention(f, w1, inputs.optional(ex, "params", "b1"), w2, inputs.optional(ex, "params", "b2"))
    return t


def _run_spatial(ex: Example) -> Trace:
    f = inputs.feature_map(ex)
    w = inputs.need(ex, "params", "weight")
    if w.dim() == 3:
        w = w.unsqueeze(0)  # (2, k, k) as written → (1, 2, k, k)
    b = inputs.optional(ex, "params", "bias")
    with trace() as t:
        spatial_attention(f, w, b.reshape(1) if b is not None else None)
    return t


def _run_attentional(ex: Example) -> Trace:
    q, k, v = inputs.qkv(ex)
    score_arg = _score(ex, "dot")
    w_c, b_c = inputs.need(ex, "params", "w_c"), inputs.optional(ex, "params", "b_c")
    with trace() as t:
        context, _ = attention(q, k, v, score=score_arg, mask=inputs.mask(ex, q.shape[0], k.shape[0]),
                               scale=inputs.scale(ex) if score_arg == "scaled_dot" else None, need_weights=True)
        attentional_output(context, q, w_c, b_c)
    return t


def _run_target(ex: Example) -> Trace:
    c, h, m = target_inputs(ex)
    norm, p = normalise(ex), {n: inputs.optional(ex, "params", n) for n in ("b1", "b2")}
    with trace() as t:
        target_attention(c, h, inputs.need(ex, "params", "w1"), p["b1"], inputs.need(ex, "params", "prelu"),
                         inputs.need(ex, "params", "w2"), p["b2"], mask=m, normalise=norm)
    return t


@dataclass(frozen=True)
class Mechanism:
    """A mechanism as ``attnlab explain`` and ``verify`` see it: how to run its example, what the example's
    tables hold (the JSON Schema is generated from ``inputs`` and ``params``), how ``verify`` recomputes
    its steps, and how they are laid out for display. Its key in ``MECHANISMS`` is the registry's name
    (``attnlab.nn.registry``) where the mechanism has a module.

    batched: the run adds a batch axis of one (multihead, vision), which display drops.
    squeeze: drop every axis of size one after that (vision maps: M_c (C, 1, 1) → (C,)).
    """

    run: Callable[[Example], Trace]
    summary: str
    paper: str  # a key of PAPERS
    inputs: tuple[str, ...]  # [inputs] keys; "a|b": one of them; "?": optional
    params: tuple[str, ...]  # [params] keys; "?": optional
    recompute: Callable[[Example], tuple[R.Env, Any]]  # verify's environment and step functions (explain.recompute)
    batched: bool = False
    squeeze: bool = False
    shows: tuple[str, ...] = ()  # registered modules whose arithmetic this walkthrough shows (their own name reads as this)
    keys: dict[str, tuple[dict, str]] = field(default_factory=dict)  # its own keys' JSON Schema and meaning (others: spec's)


_QKV = ("query", "keys", "values?", "mask?")
_SCORE = ("score?", "causal?")
_PROJ = ("w_q?", "w_k?", "w_v?", "w_o?", "scale?", "causal?")

MECHANISMS: dict[str, Mechanism] = {
    "dot": Mechanism(lambda ex: _run_attention(ex, "dot"), "Luong dot score qᵀk", "luong", _QKV, ("causal?",),
                     recompute=R.attention("dot"), shows=("luong-dot",)),
    "scaled-dot": Mechanism(lambda ex: _run_attention(ex, "scaled_dot"), "scaled dot product qᵀk/√d", "vaswani",
                            _QKV, ("scale?", "causal?"), recompute=R.attention("scaled_dot")),
    "luong-general": Mechanism(lambda ex: _run_attention(ex, "general"), "Luong general score qᵀWk", "luong",
                               _QKV, ("weight", "causal?"), recompute=R.attention("general")),
    "bahdanau": Mechanism(lambda ex: _run_attention(ex, "additive"), "Bahdanau additive score vᵀtanh(W_q q + W_k k)",
                          "bahdanau", _QKV, ("w_q", "w_k", "v", "causal?"), recompute=R.attention("additive")),
    "luong-concat": Mechanism(lambda ex: _run_attention(ex, "concat"), "Luong concat score vᵀtanh(W[q; k])", "luong",
                              _QKV, ("weight", "v", "causal?"), recompute=R.attention("concat")),
    "masked": Mechanism(lambda ex: _run_attention(ex, "scaled_dot", need_mask=True), "attention with a mask",
                        "vaswani", _QKV, ("scale?", "causal?", "score?"), recompute=R.attention("scaled_dot")),
    "sparse": Mechanism(_run_sparse, "sparse attention: a pattern as a mask", "child", _QKV,
                        ("pattern?", "combine?", "scale?", "causal?"), recompute=R.attention("scaled_dot")),
    "attentional": Mechanism(_run_attentional, "Luong attentional output tanh(W_c[c; s] + b_c)", "luong", _QKV,
                             ("w_c", "b_c?", *_SCORE, "weight?", "w_q?", "w_k?", "v?", "scale?"), recompute=R.attentional),
    "self-attention": Mechanism(_run_self, "self-attention from x with W_q, W_k, W_v", "vaswani", ("x", "mask?"),
                                _PROJ, recompute=R.projected, batched=True),
    "multi-head": Mechanism(_run_multi_head, "multi-head: split, per head, concat, W_o", "vaswani",
                            ("x|query", "keys?", "values?", "mask?"), ("num_heads", *_PROJ), recompute=R.projected,
                            batched=True),
    "cross": Mechanism(_run_cross, "cross-attention: queries from one sequence, keys from another",
                       "vaswani", _QKV, ("num_heads?", *_PROJ), recompute=R.projected, batched=True),
    "channel": Mechanism(_run_channel, "CBAM channel attention", "woo", ("feature_map",),
                         ("w1", "b1?", "w2", "b2?"), recompute=R.channel, batched=True, squeeze=True),
    "spatial": Mechanism(_run_spatial, "CBAM spatial attention", "woo", ("feature_map",), ("weight", "bias?"),
                         recompute=R.spatial, batched=True, squeeze=True),
    "softcap": Mechanism(_run_softcap, "logit soft-capping c·tanh(e/c) before the softmax (Gemma 2)", "gemma",
                         _QKV, ("cap", "scale?", "causal?"), recompute=R.softcap),
    "linear": Mechanism(_run_linear, "linear attention: feature map φ = elu + 1 instead of the softmax", "katharopoulos",
                        _QKV, ("causal?",), recompute=R.linear),
    "differential": Mechanism(_run_differential, "differential attention: two softmax maps, A_1 − λ A_2", "ye",
                              ("query_1", "keys_1", "query_2", "keys_2", "values", "mask?"),
                              ("lambda", "scale?", "causal?"), recompute=R.differential),
    "mla": Mechanism(_run_latent, "multi-head latent attention: keys and values up-projected from a cached latent",
                     "deepseek", ("query", "query_rope", "latents", "key_rope", "mask?"),
                     ("w_uk", "w_uv", "num_heads?", "causal?"), recompute=R.latent, batched=True),
    "gqa": Mechanism(_run_gqa, "grouped-query attention: h query heads share h_kv key/value heads", "ainslie",
                     ("x", "mask?"), ("num_heads", "num_kv_heads", *_PROJ), recompute=R.gqa, batched=True),
    "neighborhood-2d": Mechanism(_run_neighborhood, "2-D neighbourhood attention: a k × k window on an H × W grid",
                                 "hassani", ("query", "keys", "values?"), ("height", "width", "kernel", "dilation?", "scale?"),
                                 recompute=R.neighborhood),
    "target-attention": Mechanism(_run_target, "DIN target attention: an MLP scores each history item against the candidate",
                                  "zhou", ("candidate", "history", "mask?"),
                                  ("w1", "b1?", "prelu", "w2", "b2?", "normalise?"), recompute=R.target, batched=True,
                                  squeeze=True),
}


def add(name: str, mechanism: Mechanism) -> None:
    """Add a mechanism's walkthrough: ``attnlab explain``, ``verify``, the example parser and the schema read it."""
    if name in MECHANISMS:
        raise ValueError(f"mechanism {name!r} has a walkthrough already")
    MECHANISMS[name] = mechanism
    names.add(name, mechanism.shows)


for _name, _mechanism in MECHANISMS.items():
    names.add(_name, _mechanism.shows)


def path_for(ex: Example) -> tuple[R.Env, Any]:
    """The inputs/parameters (by the names the step functions read) and the mechanism's step functions."""
    return MECHANISMS[canonical(ex.mechanism)].recompute(ex)


def run(ex: Example) -> Trace:
    """Compute the example with the library and return its trace."""
    try:
        return MECHANISMS[ex.mechanism].run(ex)
    except ExampleError:
        raise
    except ValueError as e:  # the library's own shape errors, with the file's name in front
        raise ExampleError(f"{ex.name}: {e}") from None


# Steps with no query axis (they depend on the keys only).
KEY_STEPS = {"projected_keys", "projected_values", "key_heads", "value_heads", "key_features", "content_keys",
             "key_groups", "value_groups"}
# Steps of batched runs with a head axis (b, h, ·, ·).
HEAD_STEPS = {"scores", "scaled_scores", "masked_scores", "weights", "context", "query_heads", "key_heads", "value_heads",
              "content_keys", "key_groups", "value_groups"}


def single_query(ex: Example) -> bool:
    q = ex.inputs.get("query")
    return isinstance(q, list) and bool(q) and not isinstance(q[0], list)


def display_value(ex: Example, name: str, value: torch.Tensor) -> torch.Tensor:
    """A step's value as the example writes it (a view: no arithmetic).

    Batched runs drop the batch axis; one head drops the head axis; a single
    query vector drops the query axis; vision maps drop axes of size one.
    """
    mech = MECHANISMS[ex.mechanism]
    if mech.batched and value.dim() >= 1 and value.shape[0] == 1:
        value = value[0]
    if mech.squeeze:
        return value.squeeze() if value.numel() > 1 else value.reshape(1)
    if mech.batched and name in HEAD_STEPS and num_heads(ex) == 1 and value.dim() >= 3:
        value = value[0]
    if single_query(ex) and name not in KEY_STEPS and value.dim() >= 1 and value.shape[0] == 1:
        return value[0]
    return value


def head_axis(ex: Example, name: str) -> bool:
    """True when a displayed step's first axis is the head axis (multi-head)."""
    return MECHANISMS[ex.mechanism].batched and name in HEAD_STEPS and num_heads(ex) > 1


__all__ = ["Mechanism", "MECHANISMS", "add", "path_for", "neighborhood_mask", "Paper", "PAPERS", "ALIASES", "canonical", "run", "display_value", "head_axis", "num_heads", "single_query"]
