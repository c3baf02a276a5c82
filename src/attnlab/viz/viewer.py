"""An offline, self-contained HTML viewer of attention weights.

``write_html(data, path)`` writes one page with all its script inline (no CDN,
no network, no external files): hover or click a query token to see its
weights over the keys, switch layer and head, toggle masked positions.

The data (``ViewerData``, a dict) is

    {"title": str, "tokens": [...], "key_tokens": [...] (default: tokens),
     "layers": layers × heads × q × k weights, "masked": same shape, true = masked (optional)}

It comes from a worked example's trace (``from_example``: its ``weights`` step,
and ``masked_scores`` for the masked positions) or from a JSON file
(``load_json``): the ``{"tokens", "layers"}`` format that models write, or the
output of ``attnlab explain --format json``.
"""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import torch


def _depth(x: Any) -> int:
    d = 0
    while isinstance(x, list) and x:
        x, d = x[0], d + 1
    return d


def _as_4d(w: Any, what: str) -> list:
    if isinstance(w, torch.Tensor):
        w = w.detach().to(torch.float64).cpu().tolist()
    if hasattr(w, "tolist") and not isinstance(w, list):
        w = w.tolist()
    d = _depth(w)
    if d not in (2, 3, 4):
        raise ValueError(f"{what} must be (q, k), (heads, q, k) or (layers, heads, q, k) nested lists; got depth {d}")
    for _ in range(4 - d):
        w = [w]
    return w


def _clean(x: Any) -> Any:
    if isinstance(x, list):
        return [_clean(y) for y in x]
    if isinstance(x, str):  # "inf"/"-inf" from JSON documents
        return None
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return float(x)


def normalise(data: dict) -> dict:
    """Check and complete viewer data: 4-d layers, rectangular, labels of the right length."""
    if "layers" not in data:
        raise ValueError("viewer data needs 'layers' (layers × heads × q × k weights)")
    layers = _clean(_as_4d(data["layers"], "layers"))
    q, k = len(layers[0][0]), len(layers[0][0][0])
    for li, layer in enumerate(layers):
        for hi, head in enumerate(layer):
            if len(head) != q or any(len(row) != k for row in head):
                raise ValueError(f"layers[{li}][{hi}] is not a {q} × {k} matrix like layers[0][0]")
    out = {"title": str(data.get("title") or "attention"), "layers": layers}
    tokens = data.get("tokens")
    key_tokens = data.get("key_tokens") or (tokens if tokens and len(tokens) == k else None)
    if tokens is not None and len(tokens) != q:
        if len(tokens) == k and key_tokens is None:
            key_tokens, tokens = tokens, None
        elif len(tokens) != q:
            raise ValueError(f"'tokens' has {len(tokens)} labels for {q} queries")
    if key_tokens is not None and len(key_tokens) != k:
        raise ValueError(f"'key_tokens' has {len(key_tokens)} labels for {k} keys")
    out["tokens"] = [str(t) for t in tokens] if tokens else [str(i + 1) for i in range(q)]
    out["key_tokens"] = [str(t) for t in key_tokens] if key_tokens else [str(j + 1) for j in range(k)]
    if data.get("masked") is not None:
        m = _as_4d(data["masked"], "masked")  # broadcast a single layer or head over all of them
        out["masked"] = [
            [[[bool(x) for x in row] for row in m[li if len(m) > 1 else 0][hi if len(m[0]) > 1 else 0]]
             for hi in range(len(layer))]
            for li, layer in enumerate(layers)
        ]
    return out


def from_example(ex, t) -> dict:
    """Viewer data from a worked example and its trace (the trace's weights; -inf masked scores)."""
    from ..explain.mechanisms import display_value

    w = display_value(ex, "weights", t["weights"].value)
    if w.dim() == 1:
        w = w.unsqueeze(0)
    data: dict[str, Any] = {"title": ex.title or ex.name, "layers": w, "tokens": ex.tokens,
                            "key_tokens": ex.key_tokens or (ex.tokens if ex.tokens and len(ex.tokens) == w.shape[-1] else None)}
    if data["tokens"] is not None and len(data["tokens"]) != w.shape[-2]:
        data["tokens"] = None
    if "masked_scores" in t:
        ms = display_value(ex, "masked_scores", t["masked_scores"].value)
        if ms.dim() == 1:
            ms = ms.unsqueeze(0)
        data["masked"] = torch.isneginf(ms).tolist()
    return normalise(data)


def _neg_inf(x: Any) -> Any:
    """Masked positions of a JSON document's masked scores: the entries written "-inf"."""
    return [_neg_inf(y) for y in x] if isinstance(x, list) else x == "-inf"


def _from_document(doc: dict) -> dict:
    steps = {s["name"]: s for s in doc.get("steps", [])}
    if "weights" not in steps:
        raise ValueError("this JSON document has no 'weights' step")
    w = steps["weights"]["value"]
    if _depth(w) == 1:
        w = [w]
    data = {"title": doc.get("title"), "layers": w, "tokens": doc.get("tokens"), "key_tokens": doc.get("key_tokens")}
    if data["tokens"] and len(data["tokens"]) != len(_as_4d(w, "weights")[0][0]):
        data["tokens"] = None
    if "masked_scores" in steps:
        ms = steps["masked_scores"]["value"]
        ms = [ms] if _depth(ms) == 1 else ms
        data["masked"] = _neg_inf(ms)
    return normalise(data)


def _check_weights(x: Any, where: str = "layers") -> None:
    """Every weight a finite number in [0, 1]; the error names the first entry that is not."""
    if isinstance(x, list):
        for i, y in enumerate(x):
            _check_weights(y, f"{where}[{i}]")
        return
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"weights must be numbers in [0, 1]; {where} is {x!r} (a {type(x).__name__})")
    if not math.isfinite(x):
        raise ValueError(f"weights must be finite numbers in [0, 1]; {where} is {x} (NaN or infinite)")
    if x < 0 or x > 1 + 1e-6:
        raise ValueError(f"weights must be in [0, 1]; {where} is {x}" + (" (negative)" if x < 0 else ""))


def _check_labels(doc: dict) -> None:
    for key in ("tokens", "key_tokens"):
        labels = doc.get(key)
        if labels is None:
            continue
        if not isinstance(labels, list):
            raise ValueError(f"'{key}' must be a list of strings; got {type(labels).__name__}")
        for i, t in enumerate(labels):
            if not isinstance(t, str):
                raise ValueError(f"'{key}' must be strings (the token labels); {key}[{i}] is {t!r} (a {type(t).__name__})")


def load_json(path: str | Path) -> dict:
    """Viewer data from a JSON file: {"tokens", "layers"} or an ``attnlab explain --format json`` document."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object with 'layers' (or 'steps'); got {type(doc).__name__}")
    if "steps" in doc:
        return _from_document(doc)
    try:
        _check_labels(doc)
        _check_weights(doc.get("layers"))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return normalise(doc)


def render_html(data: dict) -> str:
    """The page as a string; the data is inline JSON (``</`` escaped so it cannot end the script)."""
    data = normalise(data)
    template = (resources.files("attnlab.viz") / "viewer.html").read_text(encoding="utf-8")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return template.replace("__TITLE__", html.escape(data["title"])).replace("__DATA__", payload)


def write_html(data: dict, path: str | Path) -> Path:
    """Write the viewer page to ``path`` (atomically: a temporary file, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(path)
    return path


__all__ = ["write_html", "render_html", "from_example", "load_json", "normalise"]
