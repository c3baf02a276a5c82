"""Worked examples: a TOML file with a mechanism, its inputs, parameters and claims.

    mechanism = "additive"
    [inputs]   query = [...]; keys = [[...], ...]; values = (default: the keys)
               x = [[...], ...]  (self_attention, multi_head: Q, K, V = x projected)
               feature_map = [[[...]]]  (channel, spatial: (C, H, W) or (b, C, H, W))
               mask = [[1, 0, ...], ...]  (optional; 1/true = may attend)
    [params]   w_q, w_k, v, weight, w_v, w_o, num_heads, scale, causal, score, w_c, b_c, ...
               (matrices as the seeds write them: W acting on a column, W x)
    [[claim]]  step = "scores"; index = [2]; value = 1.32     (index is 1-based)

``run(example)`` computes the example with the library inside ``attnlab.trace()``
in float64 and returns the trace; nothing here does arithmetic of its own (the
only additions to a trace are the library's own ``split_heads`` views of the
projections, so a walkthrough can show the heads). Numbers are parsed as
``Decimal`` so a claim keeps its written precision (``0.10`` has two decimals).

Mechanisms are a registry (``MECHANISMS``: name → ``Mechanism``); each entry
says how to run an example and how its steps are laid out (batched runs drop
their batch axis of one for display; a single query vector drops the query axis).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..attention import attention
from ..attentional import attentional_output
from ..multihead import multi_head_attention, split_heads
from ..scores import additive, concat, general
from ..trace import Step, Trace, trace
from ..vision import channel_attention, spatial_attention

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ExampleError(ValueError):
    """A malformed worked-example file; the message names the field (and its line)."""


@dataclass
class Example:
    name: str
    mechanism: str
    inputs: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    source: str = ""
    tokens: list[str] | None = None
    key_tokens: list[str] | None = None
    text: str = ""
    title_zh: str = ""

    def line(self, table: str, key: str | None = None, nth: int | None = None) -> int | None:
        """The 1-based line of ``[table] key`` (or of the nth ``[[claim]]``) in the file, if found."""
        return _locate(self.text, table, key, nth)

    def at(self, table: str, key: str | None = None, nth: int | None = None) -> str:
        """``name, line N: [table] key`` for messages."""
        n = self.line(table, key, nth)
        where = f"{self.name}, line {n}" if n else self.name
        what = f"[[claim]] #{nth + 1}" if nth is not None else f"[{table}]" + (f" {key}" if key else "")
        return f"{where}: {what}"


def _locate(text: str, table: str, key: str | None, nth: int | None) -> int | None:
    current, seen = "", -1
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[[") and line.endswith("]]"):
            current = line[2:-2].strip()
            if current == table and nth is not None:
                seen += 1
                if seen == nth and key is None:
                    return n
            continue
        if line.startswith("[") and "]" in line:
            current = line[1 : line.index("]")].strip()
            if current == table and key is None and nth is None:
                return n
            continue
        if key is not None and current == ("" if table == "" else table) and re.match(rf"{re.escape(key)}\s*=", line):
            if nth is None or seen == nth:
                return n
    return None


def _tensor(where: str, value: Any) -> torch.Tensor:
    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        if isinstance(x, (int, float, Decimal)) and not isinstance(x, bool):
            return float(x)
        raise ExampleError(f"{where}: expected numbers or nested lists of numbers; got {x!r}")

    try:
        return torch.tensor(conv(value), dtype=torch.float64)
    except ValueError as e:  # ragged lists
        raise ExampleError(f"{where}: rows must all have the same length ({e})") from None


def parse(text: str, name: str = "<string>") -> Example:
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as e:
        msg = str(e).replace("(at end of document)", f"(at the end of the file, line {len(text.splitlines())})")
        raise ExampleError(f"{name}: not valid TOML: {msg}") from None
    if "mechanism" not in data:
        raise ExampleError(f"{name}: missing the field 'mechanism' (one of {', '.join(sorted(MECHANISMS))})")
    mech = data["mechanism"]
    if mech not in MECHANISMS:
        n = _locate(text, "", "mechanism", None)
        where = f"{name}, line {n}" if n else name
        raise ExampleError(f"{where}: unknown mechanism {mech!r}; known: {', '.join(sorted(MECHANISMS))}")
    if "inputs" not in data or not isinstance(data["inputs"], dict):
        raise ExampleError(f"{name}: missing the table [inputs]")
    claims = data.get("claim", [])
    if not isinstance(claims, list):
        raise ExampleError(f"{name}: 'claim' must be an array of tables ([[claim]])")
    return Example(
        name=name,
        mechanism=mech,
        inputs=data["inputs"],
        params=data.get("params", {}),
        claims=claims,
        title=str(data.get("title", "")),
        source=str(data.get("source", "")),
        tokens=data.get("tokens"),
        key_tokens=data.get("key_tokens"),
        text=text,
        title_zh=str(data.get("title_zh", "")),
    )


def builtin_names() -> list[str]:
    folder = resources.files("attnlab.explain") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str | Path) -> Example:
    """A built-in example by name (``seed-000-additive``) or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ExampleError(f"no such file: {path}")
        return parse(path.read_text(encoding="utf-8"), str(path))
    name = str(name_or_path)
    if name not in builtin_names():
        raise ExampleError(f"no built-in example {name!r}; available: {', '.join(builtin_names())}")
    text = (resources.files("attnlab.explain") / "examples" / f"{name}.toml").read_text(encoding="utf-8")
    return parse(text, name)


# --- reading inputs and parameters --------------------------------------------


def _need(ex: Example, table: str, key: str) -> torch.Tensor:
    src = ex.inputs if table == "inputs" else ex.params
    if key not in src:
        raise ExampleError(f"{ex.at(table)}: mechanism {ex.mechanism!r} needs {key}")
    return _tensor(ex.at(table, key), src[key])


def _opt(ex: Example, table: str, key: str) -> torch.Tensor | None:
    src = ex.inputs if table == "inputs" else ex.params
    return _need(ex, table, key) if key in src else None


def _int(ex: Example, key: str, default: int | None = None) -> int:
    if key not in ex.params:
        if default is None:
            raise ExampleError(f"{ex.at('params')}: mechanism {ex.mechanism!r} needs {key}")
        return default
    v = ex.params[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ExampleError(f"{ex.at('params', key)} must be a positive integer; got {v!r}")
    return v


def _rows(ex: Example, key: str) -> torch.Tensor:
    t = _need(ex, "inputs", key)
    if t.dim() != 2:
        raise ExampleError(f"{ex.at('inputs', key)} must be a matrix (one row per position); got shape {tuple(t.shape)}")
    return t


def _query(ex: Example) -> torch.Tensor:
    q = _need(ex, "inputs", "query")
    if q.dim() == 1:
        q = q.unsqueeze(0)
    if q.dim() != 2:
        raise ExampleError(f"{ex.at('inputs', 'query')} must be a vector or rows of queries; got shape {tuple(q.shape)}")
    return q


def _qkv(ex: Example) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = _query(ex)
    k = _rows(ex, "keys")
    v = _rows(ex, "values") if "values" in ex.inputs else k
    if v.shape[0] != k.shape[0]:
        raise ExampleError(f"{ex.at('inputs', 'values')}: {v.shape[0]} values for {k.shape[0]} keys")
    return q, k, v


def _mask(ex: Example, q_len: int, k_len: int) -> torch.Tensor | None:
    """[inputs] mask (1/true = may attend; a row per query, or one row for all) and/or [params] causal."""
    m = None
    if "mask" in ex.inputs:
        raw = ex.inputs["mask"]

        def conv(x):
            if isinstance(x, list):
                return [conv(y) for y in x]
            if isinstance(x, bool) or x in (0, 1):
                return bool(x)
            raise ExampleError(f"{ex.at('inputs', 'mask')}: entries must be 1/0 or true/false; got {x!r}")

        try:
            m = torch.tensor(conv(raw), dtype=torch.bool)
        except ValueError as e:
            raise ExampleError(f"{ex.at('inputs', 'mask')}: rows must all have the same length ({e})") from None
        if m.dim() == 1:
            m = m.unsqueeze(0)
        if m.dim() != 2 or m.shape[1] != k_len or m.shape[0] not in (1, q_len):
            raise ExampleError(
                f"{ex.at('inputs', 'mask')} must be ({q_len}, {k_len}) or ({k_len},) (queries × keys); "
                f"got shape {tuple(m.shape)}"
            )
    if ex.params.get("causal", False) is True:
        causal = torch.arange(k_len) <= torch.arange(q_len).unsqueeze(-1) + (k_len - q_len)
        m = causal if m is None else (m & causal)
    return m


def _scale(ex: Example) -> float | None:
    return float(ex.params["scale"]) if "scale" in ex.params else None


# Score choices for mechanisms that take a ``score`` parameter (masked, attentional, ...).
SCORE_BUILDERS: dict[str, Callable[[Example], Any]] = {
    "dot": lambda ex: "dot",
    "scaled_dot": lambda ex: "scaled_dot",
    "general": lambda ex: partial(general, weight=_need(ex, "params", "weight")),
    "additive": lambda ex: partial(
        additive, w_q=_need(ex, "params", "w_q"), w_k=_need(ex, "params", "w_k"), v=_need(ex, "params", "v")
    ),
    "concat": lambda ex: partial(concat, weight=_need(ex, "params", "weight"), v=_need(ex, "params", "v")),
}


def _score(ex: Example, default: str) -> Any:
    name = ex.params.get("score", default)
    if name not in SCORE_BUILDERS:
        raise ExampleError(f"{ex.at('params', 'score')}: unknown score {name!r}; known: {', '.join(SCORE_BUILDERS)}")
    return SCORE_BUILDERS[name](ex)


# --- running an example -------------------------------------------------------


def _run_attention(ex: Example, score: str, *, need_mask: bool = False) -> Trace:
    q, k, v = _qkv(ex)  # inputs are read (and checked) before parameters
    score_arg = _score(ex, score)
    mask = _mask(ex, q.shape[0], k.shape[0])
    if need_mask and mask is None:
        raise ExampleError(f"{ex.at('inputs')}: mechanism {ex.mechanism!r} needs a mask (or [params] causal = true)")
    scale = _scale(ex) if score_arg == "scaled_dot" else None
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
        n = _rows(ex, "keys").shape[0]
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
        q_len = _query(ex).shape[0]
        ex.inputs["mask"] = pat.materialize(n)[n - q_len :].int().tolist()
    return _run_attention(ex, "scaled_dot", need_mask=True)


def _eye(n: int) -> torch.Tensor:
    return torch.eye(n, dtype=torch.float64)


def _run_projected(ex: Example, q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, heads: int) -> Trace:
    """Projections + (multi-head) attention via ``attnlab.multihead``; absent weights are identities."""
    given = {n: _opt(ex, "params", n) for n in ("w_q", "w_k", "w_v", "w_o")}
    w_q = given["w_q"] if given["w_q"] is not None else _eye(q_in.shape[-1])
    w_k = given["w_k"] if given["w_k"] is not None else _eye(k_in.shape[-1])
    w_v = given["w_v"] if given["w_v"] is not None else _eye(v_in.shape[-1])
    w_o = given["w_o"] if given["w_o"] is not None else _eye(w_v.shape[0])
    mask = _mask(ex, q_in.shape[0], k_in.shape[0])
    with trace() as t:
        multi_head_attention(
            q_in[None], k_in[None], v_in[None], num_heads=heads, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o,
            mask=mask, scale=_scale(ex), need_weights=True,
        )
    drop = {f"projected_{s}" for s, w in (("query", "w_q"), ("keys", "w_k"), ("values", "w_v")) if given[w] is None}
    if heads == 1:
        drop.add("heads")  # the concatenation of one head is that head
    if given["w_o"] is None:
        drop.add("output")
    steps = [s for s in t.steps if s.name not in drop]
    if heads > 1:  # show the split: the library's own split_heads of the recorded projections
        split = [
            Step(f"{part}_heads", f"split {sym} into {heads} heads of {w_q.shape[0] // heads}",
                 split_heads(t[f"projected_{src}"].value, heads), latex=rf"{sym}_1, \dots, {sym}_{{{heads}}}")
            for part, src, sym in (("query", "query", "Q"), ("key", "keys", "K"), ("value", "values", "V"))
        ]
        at = max(i for i, s in enumerate(steps) if s.name.startswith("projected_")) + 1 if any(
            s.name.startswith("projected_") for s in steps) else 0
        steps[at:at] = split
    return Trace(steps)


def _run_self(ex: Example) -> Trace:
    x = _rows(ex, "x")
    return _run_projected(ex, x, x, x, 1)


def _run_multi_head(ex: Example) -> Trace:
    if "x" in ex.inputs:
        x = _rows(ex, "x")
        q = k = v = x
    else:
        q, k, v = _qkv(ex)
    return _run_projected(ex, q, k, v, _int(ex, "num_heads"))


def _run_cross(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    return _run_projected(ex, q, k, v, _int(ex, "num_heads", 1))


def _feature_map(ex: Example) -> torch.Tensor:
    f = _need(ex, "inputs", "feature_map")
    if f.dim() == 3:
        f = f.unsqueeze(0)
    if f.dim() != 4:
        raise ExampleError(f"{ex.at('inputs', 'feature_map')} must be (C, H, W) or (b, C, H, W); got shape {tuple(f.shape)}")
    return f


def _run_channel(ex: Example) -> Trace:
    f = _feature_map(ex)
    w1, w2 = _need(ex, "params", "w1"), _need(ex, "params", "w2")
    with trace() as t:
        channel_attention(f, w1, _opt(ex, "params", "b1"), w2, _opt(ex, "params", "b2"))
    return t


def _run_spatial(ex: Example) -> Trace:
    f = _feature_map(ex)
    w = _need(ex, "params", "weight")
    if w.dim() == 3:
        w = w.unsqueeze(0)  # (2, k, k) as written → (1, 2, k, k)
    b = _opt(ex, "params", "bias")
    with trace() as t:
        spatial_attention(f, w, b.reshape(1) if b is not None else None)
    return t


def _run_attentional(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    score_arg = _score(ex, "dot")
    w_c, b_c = _need(ex, "params", "w_c"), _opt(ex, "params", "b_c")
    with trace() as t:
        context, _ = attention(q, k, v, score=score_arg, mask=_mask(ex, q.shape[0], k.shape[0]),
                               scale=_scale(ex) if score_arg == "scaled_dot" else None, need_weights=True)
        attentional_output(context, q, w_c, b_c)
    return t


@dataclass(frozen=True)
class Mechanism:
    """How to run a mechanism's example, and how its steps are laid out for display.

    batched: the run adds a batch axis of one (multihead, vision), which display drops.
    squeeze: drop every axis of size one after that (vision maps: M_c (C, 1, 1) → (C,)).
    """

    run: Callable[[Example], Trace]
    summary: str
    batched: bool = False
    squeeze: bool = False


MECHANISMS: dict[str, Mechanism] = {
    "dot": Mechanism(lambda ex: _run_attention(ex, "dot"), "Luong dot score qᵀk"),
    "scaled_dot": Mechanism(lambda ex: _run_attention(ex, "scaled_dot"), "scaled dot product qᵀk/√d"),
    "general": Mechanism(lambda ex: _run_attention(ex, "general"), "Luong general score qᵀWk"),
    "additive": Mechanism(lambda ex: _run_attention(ex, "additive"), "Bahdanau additive score vᵀtanh(W_q q + W_k k)"),
    "concat": Mechanism(lambda ex: _run_attention(ex, "concat"), "Luong concat score vᵀtanh(W[q; k])"),
    "masked": Mechanism(lambda ex: _run_attention(ex, "scaled_dot", need_mask=True), "attention with a mask"),
    "sparse": Mechanism(_run_sparse, "sparse attention: a pattern as a mask"),
    "attentional": Mechanism(_run_attentional, "Luong attentional output tanh(W_c[c; s] + b_c)"),
    "self_attention": Mechanism(_run_self, "self-attention from x with W_q, W_k, W_v", batched=True),
    "multi_head": Mechanism(_run_multi_head, "multi-head: split, per head, concat, W_o", batched=True),
    "cross_attention": Mechanism(_run_cross, "cross-attention: queries from one sequence, keys from another", batched=True),
    "channel": Mechanism(_run_channel, "CBAM channel attention", batched=True, squeeze=True),
    "spatial": Mechanism(_run_spatial, "CBAM spatial attention", batched=True, squeeze=True),
}


def run(ex: Example) -> Trace:
    """Compute the example with the library and return its trace."""
    try:
        return MECHANISMS[ex.mechanism].run(ex)
    except ExampleError:
        raise
    except ValueError as e:  # the library's own shape errors, with the file's name in front
        raise ExampleError(f"{ex.name}: {e}") from None


# Steps with no query axis (they depend on the keys only).
KEY_STEPS = {"projected_keys", "projected_values", "key_heads", "value_heads"}
# Steps of batched runs with a head axis (b, h, ·, ·).
HEAD_STEPS = {"scores", "scaled_scores", "masked_scores", "weights", "context", "query_heads", "key_heads", "value_heads"}


def single_query(ex: Example) -> bool:
    q = ex.inputs.get("query")
    return isinstance(q, list) and bool(q) and not isinstance(q[0], list)


def num_heads(ex: Example) -> int:
    h = ex.params.get("num_heads", 1)
    return h if isinstance(h, int) and not isinstance(h, bool) else 1


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


__all__ = [
    "Example", "ExampleError", "Mechanism", "parse", "load", "run", "builtin_names", "MECHANISMS",
    "display_value", "head_axis",
]
