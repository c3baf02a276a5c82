"""The worked-example format, specified from the mechanism registry (so it cannot drift).

* ``schema()``: the JSON Schema (draft 2020-12) of a worked example, read as
  JSON (TOML's tables are objects). Shipped as ``explain/example.schema.json``;
  a test checks that the shipped file is ``schema()`` and that every built-in
  example validates against it.
* ``format_doc()``: the Markdown page ``docs/examples-format.md``: each
  mechanism's inputs, parameters and steps (the steps of its built-in example's
  trace).
* ``as_json(example)``: an example's TOML data as JSON-ready values (Decimals → floats).

Regenerate both files with ``python -m attnlab.explain.spec`` after changing the registry.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from .._files import write_text
from .examples import Example, builtin_names, load, tomllib
from .mechanisms import MECHANISMS, PAPERS, run
from .names import ALIASES, WALKTHROUGH_OF, spellings

_NUM = {"type": "number"}
_VEC = {"type": "array", "items": _NUM, "minItems": 1}
_MAT = {"type": "array", "items": _VEC, "minItems": 1}
_ARR3 = {"type": "array", "items": _MAT, "minItems": 1}
_ARR4 = {"type": "array", "items": _ARR3, "minItems": 1}
_BIT = {"anyOf": [{"type": "boolean"}, {"enum": [0, 1]}]}
_NESTED = {"anyOf": [_NUM, {"type": "array", "items": {"$ref": "#/$defs/nested"}}]}

INPUTS: dict[str, tuple[dict, str]] = {
    "query": ({"anyOf": [_VEC, _MAT]}, "one query vector, or rows of queries (q, d)"),
    "keys": (_MAT, "rows of keys (k, d_k)"),
    "values": (_MAT, "rows of values (k, d_v); default: the keys"),
    "x": (_MAT, "the tokens' vectors (n, d); Q, K, V are x projected"),
    "mask": ({"anyOf": [{"type": "array", "items": _BIT}, {"type": "array", "items": {"type": "array", "items": _BIT}}]},
             "1/true = may attend; (q, k) or one row (k,)"),
    "feature_map": ({"anyOf": [_ARR3, _ARR4]}, "(C, H, W) or (b, C, H, W)"),
    "query_1": (_MAT, "Q_1, the queries of the first map (q, d)"),
    "keys_1": (_MAT, "K_1, the keys of the first map (k, d)"),
    "query_2": (_MAT, "Q_2, the queries of the second map (q, d)"),
    "keys_2": (_MAT, "K_2, the keys of the second map (k, d)"),
    "query_rope": (_MAT, "q^R, the rotary part of the queries (q, h·d_R), already rotated"),
    "latents": (_MAT, "c^KV, the cached latent vectors (k, d_c)"),
    "key_rope": (_MAT, "k^R, the rotary key shared by the heads (k, d_R), already rotated"),
    "candidate": (_VEC, "v_A, the candidate item (d,)"),
    "history": (_MAT, "e_1 … e_n, the user's history items (n, d)"),
}
PARAMS: dict[str, tuple[dict, str]] = {
    "w_q": (_MAT, "W_q, acting on a column (W q)"),
    "w_k": (_MAT, "W_k"),
    "w_v": (_MAT, "W_v"),
    "w_o": (_MAT, "W_o (output projection)"),
    "v": (_VEC, "the score vector v (additive, concat)"),
    "weight": ({"anyOf": [_MAT, _ARR3, _ARR4]}, "W of the general/concat score, or the spatial kernel (2, k, k)"),
    "bias": ({"anyOf": [_NUM, _VEC]}, "the spatial convolution's bias"),
    "w_c": (_MAT, "W_c of the attentional output"),
    "b_c": (_VEC, "b_c of the attentional output"),
    "w1": (_MAT, "the MLP's first layer: CBAM's (C/r, C), DIN's activation unit (h, 4d)"),
    "b1": (_VEC, "its bias"),
    "w2": (_MAT, "the MLP's second layer: CBAM's (C, C/r), DIN's activation unit (1, h)"),
    "b2": (_VEC, "its bias"),
    "num_heads": ({"type": "integer", "minimum": 1}, "number of heads"),
    "scale": ({"type": "number", "exclusiveMinimum": 0}, "the score's factor (default 1/√d)"),
    "causal": ({"type": "boolean"}, "also mask the future (bottom-right aligned)"),
    "score": ({"enum": ["dot", "scaled_dot", "general", "additive", "concat"]}, "the score function"),
    "pattern": ({"anyOf": [{"type": "object", "required": ["name"]}, {"type": "array", "items": {"type": "object"}}]},
                "an attnlab.patterns pattern: {name = ..., ...} or [{kind, args}, ...]"),
    "combine": ({"enum": ["or", "and"]}, "how a list of patterns is joined"),
    "cap": ({"type": "number", "exclusiveMinimum": 0}, "the soft cap c of c·tanh(e/c)"),
    "lambda": ({"type": "number"}, "λ of A_1 − λ A_2"),
    "w_uk": (_MAT, "W^UK (h·d_h, d_c): latents to content keys"),
    "w_uv": (_MAT, "W^UV (h·d_v, d_c): latents to values"),
    "num_kv_heads": ({"type": "integer", "minimum": 1}, "number of key/value heads (divides num_heads)"),
    "height": ({"type": "integer", "minimum": 1}, "the grid's height H (positions are row-major, n = H·W)"),
    "width": ({"type": "integer", "minimum": 1}, "the grid's width W"),
    "kernel": ({"type": "integer", "minimum": 1}, "the window's side k (odd)"),
    "dilation": ({"type": "integer", "minimum": 1}, "every dilation-th position (default 1)"),
    "prelu": ({"anyOf": [_NUM, _VEC]}, "the PReLU slope of DIN's activation unit: one, or one per hidden unit (h,)"),
    "normalise": ({"enum": ["softmax", "none"]}, "DIN's scores: softmax (default) or none (raw sum pooling)"),
}


def _types(table: str) -> dict[str, tuple[dict, str]]:
    """The key types of ``table`` ("inputs" or "params"): the shared ones, and each mechanism's own (``Mechanism.keys``)."""
    shared = INPUTS if table == "inputs" else PARAMS
    own = {k: t for m in MECHANISMS.values() for k, t in m.keys.items() if k in _names(getattr(m, table))}
    return {**shared, **own}


def _names(spec: tuple[str, ...]) -> list[str]:
    return [n.rstrip("?") for s in spec for n in s.split("|")]


def _required(spec: tuple[str, ...]) -> list[dict]:
    """JSON Schema clauses: every plain name is required; ``a|b`` needs one of them."""
    out: list[dict] = []
    for s in spec:
        if s.endswith("?"):
            continue
        alts = s.split("|")
        out.append({"required": alts} if len(alts) == 1 else {"anyOf": [{"required": [a]} for a in alts]})
    return out


def schema() -> dict[str, Any]:
    per_mechanism = []
    for name, m in MECHANISMS.items():
        per_mechanism.append({
            "if": {"properties": {"mechanism": {"enum": spellings(name)}}},
            "then": {
                "properties": {
                    table: {"propertyNames": {"enum": _names(spec)}, **({"allOf": _required(spec)} if _required(spec) else {})}
                    for table, spec in (("inputs", m.inputs), ("params", m.params))
                },
                **({"required": ["params"]} if _required(m.params) else {}),
            },
        })
    mechanisms = sorted({s for name in MECHANISMS for s in spellings(name)})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/attnlab/attnlab/explain/example.schema.json",
        "title": "attnlab worked example",
        "description": "A TOML file read by `attnlab explain --file` and `attnlab verify` (as JSON: tables are objects). "
        "Generated from attnlab.explain.mechanisms.MECHANISMS by attnlab.explain.spec.",
        "type": "object",
        "required": ["mechanism", "inputs"],
        "additionalProperties": False,
        "properties": {
            "mechanism": {"enum": mechanisms},
            "title": {"type": "string"},
            "title_zh": {"type": "string"},
            "source": {"type": "string"},
            "tokens": {"type": "array", "items": {"type": "string"}},
            "key_tokens": {"type": "array", "items": {"type": "string"}},
            **{table: {"type": "object", "properties": {k: s for k, (s, _) in _types(table).items()},
                       "additionalProperties": False} for table in ("inputs", "params")},
            "claim": {"type": "array", "items": {"$ref": "#/$defs/claim"}},
        },
        "allOf": per_mechanism,
        "$defs": {
            "nested": _NESTED,
            "claim": {
                "type": "object",
                "required": ["step", "value"],
                "additionalProperties": False,
                "properties": {
                    "step": {"type": "string"},
                    "index": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "relation": {"enum": ["equal", "argmax"]},
                    "value": {"$ref": "#/$defs/nested"},
                },
            },
        },
    }


def as_json(ex: Example) -> dict[str, Any]:
    """The example's top-level data as JSON values (Decimals → floats)."""
    def conv(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        if isinstance(x, list):
            return [conv(v) for v in x]
        return float(x) if isinstance(x, Decimal) else x

    return conv(tomllib.loads(ex.text, parse_float=Decimal))


def _spec_text(spec: tuple[str, ...], table: dict[str, tuple[dict, str]]) -> list[str]:
    out = []
    for s in spec:
        alts = s.rstrip("?").split("|")
        need = "optional" if s.endswith("?") else ("one of these" if len(alts) > 1 else "required")
        out.append(f"  - {' or '.join(f'`{a}`' for a in alts)} ({need}): {'; '.join(table[a][1] for a in alts)}")
    return out


def format_doc() -> str:
    lines = [
        "# The worked-example format",
        "",
        "<!-- Generated by `python -m attnlab.explain.spec` from the mechanism registry; do not edit. -->",
        "",
        "A worked example is a TOML file: `mechanism = \"...\"`, an `[inputs]` table, a `[params]` table and",
        "`[[claim]]` tables (`step`, 1-based `index`, `relation` = `\"equal\"` or `\"argmax\"`, `value`).",
        "Matrices act on a column (`W x`), as the papers write them. Optional: `title`, `title_zh`,",
        "`tokens`, `key_tokens`. The JSON Schema is `attnlab/explain/example.schema.json` (in the package).",
        "Mechanism names are `attnlab.nn`'s (`attnlab.available()`), with hyphens (`multi-head`); underscores",
        "are read as hyphens (`multi_head`), and other names as the registry reads them",
        f"({', '.join(f'`{a}` = `{c}`' for a, c in sorted({**ALIASES, **WALKTHROUGH_OF}.items()))}).",
        "",
    ]
    examples: dict[str, str] = {}
    for n in builtin_names():
        examples.setdefault(load(n).mechanism, n)
    for name, m in MECHANISMS.items():
        paper = PAPERS[m.paper]
        lines += [f"## `{name}`", "", f"{m.summary} ({paper.authors} {paper.year}, {paper.url}).", "", "- inputs:"]
        lines += _spec_text(m.inputs, _types("inputs"))
        lines += ["- parameters:"]
        lines += _spec_text(m.params, _types("params")) or ["  - none"]
        if name in examples:
            steps = run(load(examples[name])).names()
            lines += [f"- steps (example `{examples[name]}`): " + ", ".join(f"`{s}`" for s in steps)]
        lines.append("")
    return "\n".join(lines)


SCHEMA_FILE = Path(__file__).with_name("example.schema.json")


def schema_text() -> str:
    return json.dumps(schema(), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the schema next to this module and the Markdown page to ``docs/examples-format.md`` (or argv[0])."""
    argv = sys.argv[1:] if argv is None else argv
    write_text(SCHEMA_FILE, schema_text(), package_ok=True)  # the package's own generated file; never half-written
    write_text(Path(argv[0] if argv else "docs/examples-format.md"), format_doc())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["schema", "schema_text", "format_doc", "as_json", "SCHEMA_FILE", "INPUTS", "PARAMS"]
