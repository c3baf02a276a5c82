"""An offline, self-contained HTML viewer of attention weights (head, model, neuron and matrix views).

``write_html(data, path)`` writes one page with all its script inline (no CDN,
no network, no external files). The page has four views of each section
(encoder, decoder, cross-attention of an encoder–decoder, or just "attention"):

* head view: lines from each token to the tokens it attends, one colour per head
  (after bertviz's head view, Vig 2019, https://arxiv.org/abs/1906.05714); hover a token;
* model view: a layers × heads grid of thumbnails; click one to open it in the matrix view;
* neuron view: for one query–key pair, q, k, q⊙k and their sum (the score), from the
  trace's ``query_heads``/``key_heads`` (present only when the data has queries and keys: a worked
  example, a GPT's trace through ``from_trace``, a Hugging Face model);
* matrix view: the weights as a heatmap on a canvas, queries' labels on the rows and keys' on the
  columns (the pane scrolls past ~64 tokens, the labels stay in sight), the query's row as labelled keys.

Every number a person reads counts from 1 (layer 1, head 1, query 1), and is rounded as the command line
prints it (Python's ``f"{x:.2f}"``: the exact value, a tie to the even digit). Masked positions (the data's
``masked``) are hatched and written "–", never as a weight of zero. The page opens on the
``start`` state (view, layer, head, query token), which the address can override:
``page.html#view=matrix&head=2&query=3``.

The weights travel compactly: float32 (small pages) or 8-bit (large ones), zlib-compressed
and base64-encoded, decompressed in the page (``DecompressionStream``), drawn on canvases.
A 12-layer, 12-head model over 512 tokens fits in a few MB.

The data (a ``View``, a dict that also shows itself inline in Jupyter) is

    {"title": str, "tokens": [...], "key_tokens": [...] (default: tokens),
     "layers": layers × heads × q × k weights, "masked": same shape, true = masked (optional),
     "queries"/"keys": layers × heads × n × d (optional, for the neuron view),
     "sections": [{"name": "encoder", "tokens", "key_tokens", "layers", ...}, ...] (optional)}

Without ``sections``, the top-level keys are the one section. It comes from a worked
example's trace (``from_example``), from the trace of a model's forward pass (``from_trace``: every
layer's weights, masked positions and per-head q and k), from a JSON file (``load_json``: ``{"tokens", "layers"}``
or the output of ``attnlab explain --format json``; ``attention_json`` writes a section of it, as
``attnlab generate``, ``translate`` and ``caption`` do with ``--attention-out``), or from a Hugging Face model's
outputs (``attnlab.viz.hf.from_transformers``).
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .._files import write_text

#: Pages whose weights have at most this many entries store them as float32; larger ones as 8-bit.
FLOAT32_LIMIT = 1 << 20


def _depth(x: Any) -> int:
    d = 0
    while isinstance(x, list) and x:
        x, d = x[0], d + 1
    return d


def _clean(x: Any) -> Any:
    if isinstance(x, list):
        return [_clean(y) for y in x]
    if isinstance(x, str) or x is None:  # "inf"/"-inf" from JSON documents: no weight
        return math.nan
    return float(x)


def _array(w: Any, what: str, dims: tuple[int, ...] = (2, 3, 4)) -> np.ndarray:
    """A tensor, array or nested list as a float32 array with 4 dims (layers, heads, q, k); None/str → NaN."""
    if hasattr(w, "detach"):
        w = w.detach().float().cpu().numpy()
    if isinstance(w, list):
        d = _depth(w)
        if d not in dims:
            raise ValueError(f"{what} must be (q, k), (heads, q, k) or (layers, heads, q, k) nested lists; "
                             f"got depth {d}")
        try:
            w = np.array(_clean(w), dtype=np.float32)
        except ValueError:
            w = None
        if w is None or w.ndim != d:
            raise ValueError(f"{what} is not rectangular: every layer and head must be a q × k matrix "
                             "like the first") from None
    a = np.asarray(w)
    if a.dtype != bool:
        a = a.astype(np.float32)
    if a.ndim not in dims:
        raise ValueError(f"{what} must have {' or '.join(map(str, dims))} dimensions; got shape {a.shape}")
    while a.ndim < 4:
        a = a[None]
    return a


def _section(d: dict, name: str) -> dict:
    if d.get("layers") is None:
        raise ValueError("viewer data needs 'layers' (layers × heads × q × k weights)")
    layers = _array(d["layers"], "layers")
    n_layers, n_heads, q, k = layers.shape
    tokens, key_tokens = d.get("tokens"), d.get("key_tokens")
    if key_tokens is None and tokens is not None and len(tokens) == k:
        key_tokens = tokens
    if tokens is not None and len(tokens) != q:
        if len(tokens) == k:
            tokens = None
        else:
            raise ValueError(f"'tokens' has {len(tokens)} labels for {q} queries")
    if key_tokens is not None and len(key_tokens) != k:
        raise ValueError(f"'key_tokens' has {len(key_tokens)} labels for {k} keys")
    out: dict[str, Any] = {
        "name": str(d.get("name") or name), "layers": layers,
        "tokens": [str(t) for t in tokens] if tokens is not None else [str(i + 1) for i in range(q)],
        "key_tokens": [str(t) for t in key_tokens] if key_tokens is not None else [str(j + 1) for j in range(k)],
        "x_axis": str(d.get("x_axis") or "key"), "y_axis": str(d.get("y_axis") or "query"),
    }
    if d.get("masked") is not None:
        m = _array(d["masked"], "masked").astype(bool)
        try:
            out["masked"] = np.broadcast_to(m, layers.shape).copy()
        except ValueError:
            raise ValueError(f"'masked' has shape {m.shape}; it must broadcast to the weights' {layers.shape}") from None
    for key, n in (("queries", q), ("keys", k)):
        if d.get(key) is not None:
            v = _array(d[key], key, dims=(4,))
            if v.shape[:3] != (n_layers, n_heads, n):
                raise ValueError(f"'{key}' has shape {v.shape}; expected ({n_layers}, {n_heads}, {n}, d)")
            out[key] = v
    if ("queries" in out) != ("keys" in out) or ("queries" in out and out["queries"].shape[-1] != out["keys"].shape[-1]):
        raise ValueError("the neuron view needs both 'queries' and 'keys', with one head size")
    return out


class View(dict):
    """Viewer data (a dict, see the module docstring) that renders itself: ``html()``, ``save(path)``,
    and inline in Jupyter (``_repr_html_``: the page in a sandboxed iframe)."""

    def html(self, precision: str = "auto", start: dict | None = None) -> str:
        return render_html(self, precision=precision, start=start)

    def save(self, path: str | Path, precision: str = "auto", start: dict | None = None) -> Path:
        return write_html(self, path, precision=precision, start=start)

    def _repr_html_(self) -> str:
        page = html.escape(self.html(), quote=True)
        return f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:1px solid #ddd"></iframe>'


def normalise(data: dict) -> View:
    """Check and complete viewer data: 4-d float32 weights, labels of the right length, sections."""
    if isinstance(data, View) and "sections" in data and all(isinstance(s.get("layers"), np.ndarray)
                                                           and s["layers"].ndim == 4 for s in data["sections"]):
        return data
    raw = data.get("sections") or [data]
    sections = [_section(s, "attention" if len(raw) == 1 else f"section {i + 1}") for i, s in enumerate(raw)]
    out = View(title=str(data.get("title") or "attention"), sections=sections)
    out.update({k: v for k, v in sections[0].items() if k != "name"})
    return out


_AXES = {"spatial": ("row (height)", "column (width)"), "channel": ("", "channel")}


def from_example(ex, t) -> View:
    """Viewer data from a worked example and its trace (weights; -inf masked scores; per-head q and k)."""
    from ..explain.mechanisms import display_value

    w = display_value(ex, "weights", t["weights"].value)
    data: dict[str, Any] = {"title": ex.title or ex.name, "layers": w, "tokens": ex.tokens, "key_tokens": ex.key_tokens}
    q_len = w.shape[-2] if w.dim() > 1 else 1
    if w.dim() == 1:
        data["layers"] = w.unsqueeze(0)
    if data["tokens"] is not None and len(data["tokens"]) != q_len:
        data["tokens"] = None
    # what the two axes are: the spatial map is rows × columns of the image, channel weights one per channel
    data["y_axis"], data["x_axis"] = _AXES.get(ex.mechanism, ("query", "key"))
    names = t.names()
    if "masked_scores" in names:
        ms = display_value(ex, "masked_scores", t["masked_scores"].value)
        data["masked"] = np.isneginf((ms.unsqueeze(0) if ms.dim() == 1 else ms).numpy())
    if "query_heads" in names and "key_heads" in names:  # (b, h, n, d) → one layer
        qh = t["query_heads"].value  # grouped-query: each query head's keys are its key group
        kh = t["key_groups" if "key_groups" in names else "key_heads"].value
        if qh.dim() == 4 and qh.shape[0] == 1:
            data["queries"], data["keys"] = qh.float(), kh.float()
    return normalise(data)


def _layers_of(t) -> list[dict[str, Any]]:
    """The steps of a forward pass through a stack of attention layers, one dict per layer: each ``weights``
    step closes a layer, with the ``masked_scores``, ``query_heads`` and ``key_heads`` recorded before it."""
    layers, current = [], {}
    for step in t:
        if step.name in ("masked_scores", "query_heads", "key_heads"):
            current[step.name] = step.value
        elif step.name == "weights":
            layers.append({**current, "weights": step.value})
            current = {}
    return layers


def from_trace(t, tokens: list[str], *, title: str = "attention", name: str = "attention",
               key_tokens: list[str] | None = None, x_axis: str | None = None, y_axis: str | None = None) -> View:
    """Viewer data from the trace of one forward pass (batch 1) through a stack of attention layers, e.g. a GPT's:
    each layer's ``weights`` (1, h, q, k); its masked positions, where its ``masked_scores`` are −∞; and, for
    the neuron view, its per-head ``query_heads`` (1, h, q, d) and ``key_heads`` (1, h_kv, k, d) as the scores
    used them (grouped-query attention: each key head shown for every query head it serves)."""
    layers = _layers_of(t)
    if not layers:
        raise ValueError(f"this trace has no 'weights' step; recorded steps: {t.names()}")
    w = [lay["weights"] for lay in layers]
    if any(x.dim() != 4 or x.shape[0] != 1 or x.shape != w[0].shape for x in w):
        raise ValueError(f"from_trace reads one sequence through layers of one shape, weights (1, h, q, k) each; "
                         f"got {[tuple(x.shape) for x in w]}")
    data: dict[str, Any] = {"title": title, "name": name, "tokens": tokens, "key_tokens": key_tokens,
                            "layers": _stack(w), "x_axis": x_axis, "y_axis": y_axis}
    if any("masked_scores" in lay for lay in layers):
        data["masked"] = np.stack([np.isneginf(lay["masked_scores"][0].float().cpu().numpy()) if "masked_scores" in lay
                                   else np.zeros(w[0].shape[1:], bool) for lay in layers])
    h, q, k = w[0].shape[1:]
    if all("query_heads" in lay and "key_heads" in lay for lay in layers):
        qs = [lay["query_heads"][0] for lay in layers]  # (h, q, d)
        ks = [lay["key_heads"][0] for lay in layers]  # (h_kv, k, d)
        if all(a.shape[:2] == (h, q) and b.shape[1] == k and h % b.shape[0] == 0 and a.shape[-1] == b.shape[-1]
               for a, b in zip(qs, ks)):
            data["queries"] = _stack(qs, batch=False)
            data["keys"] = _stack([b.repeat_interleave(h // b.shape[0], dim=0) for b in ks], batch=False)
    return normalise(data)


def _stack(xs: list, batch: bool = True) -> np.ndarray:
    """Tensors of one shape as one float32 array (layers, ...), the batch dimension of each dropped when ``batch``."""
    return np.stack([(x[0] if batch else x).detach().float().cpu().numpy() for x in xs])


def _neg_inf(x: Any) -> Any:
    """Masked positions of a JSON document's masked scores: the entries written "-inf"."""
    return [_neg_inf(y) for y in x] if isinstance(x, list) else x == "-inf"


def _from_document(doc: dict) -> View:
    steps = {s["name"]: s for s in doc.get("steps", [])}
    if "weights" not in steps:
        raise ValueError("this JSON document has no 'weights' step")
    w = steps["weights"]["value"]
    if _depth(w) == 1:
        w = [w]
    data = {"title": doc.get("title"), "layers": w, "tokens": doc.get("tokens"), "key_tokens": doc.get("key_tokens")}
    if data["tokens"] and len(data["tokens"]) != _array(w, "weights").shape[2]:
        data["tokens"] = None
    if "masked_scores" in steps:
        ms = steps["masked_scores"]["value"]
        data["masked"] = _neg_inf([ms] if _depth(ms) == 1 else ms)
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


def attention_json(tokens: list[str], maps: Any, *, key_tokens: list[str] | None = None, name: str | None = None,
                   x_axis: str | None = None, y_axis: str | None = None, masked: Any = None) -> dict:
    """One section of the viewer's JSON: ``{"tokens", ["key_tokens",] "layers": weights[layer][head][q][k]}``.

    ``maps`` (layers, h, q, k) as a tensor or array; ``tokens`` label the q queries, ``key_tokens`` the k
    keys (default: ``tokens``, for self-attention). ``name``, ``x_axis`` and ``y_axis`` name the section
    and its axes; ``masked`` (q, k) or (layers, h, q, k), True where a query may not attend (a causal
    model's later keys), is written as ``"masked"`` and shown as masked, not as a weight of zero.
    Several sections make one file as ``{"title": ..., "sections": [section, ...]}``.
    """
    w = maps.detach().float().cpu().numpy() if hasattr(maps, "detach") else np.asarray(maps, dtype=np.float32)
    keys = list(tokens) if key_tokens is None else list(key_tokens)
    if w.ndim != 4 or w.shape[-2] != len(tokens) or w.shape[-1] != len(keys):
        raise ValueError(f"maps must be (layers, h, q, k) with q={len(tokens)} tokens and k={len(keys)} key tokens; "
                         f"got {tuple(w.shape)}")
    out: dict[str, Any] = {"name": name} if name else {}
    out["tokens"] = list(tokens)
    if key_tokens is not None:
        out["key_tokens"] = keys
    out.update({k: v for k, v in (("x_axis", x_axis), ("y_axis", y_axis)) if v})
    # each weight as the shortest decimal that reads back as the same float32 (numpy's str): the page shows the
    # numbers the command line prints from the model's own, a tie (0.125) included, where 6 decimals could move one
    short = np.array([float(str(x)) for x in w.astype(np.float32).ravel()], dtype=np.float64)
    out["layers"] = short.reshape(w.shape).tolist()
    if masked is not None:
        m = np.asarray(masked.cpu() if hasattr(masked, "cpu") else masked, dtype=bool)
        if m.shape not in (w.shape[2:], w.shape):
            raise ValueError(f"masked must be (q, k) = {w.shape[2:]} or the maps' {tuple(w.shape)}; got {m.shape}")
        out["masked"] = m.tolist()
    return out


def load_json(path: str | Path) -> View:
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
        for s in doc.get("sections") or [doc]:
            _check_labels(s)
            _check_weights(s.get("layers"))
        return normalise(doc)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _pack(a: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(a).tobytes(), 6)).decode("ascii")


def encode_weights(w: np.ndarray, precision: str) -> dict:
    """The weights as {"dtype", "shape", "b64"}: float32 (NaN = none) or uint8 (w·254 rounded, 255 = none)."""
    if precision == "float32":
        return {"dtype": "float32", "shape": list(w.shape), "b64": _pack(w.astype("<f4"))}
    if precision != "uint8":
        raise ValueError(f"precision must be 'auto', 'float32' or 'uint8'; got {precision!r}")
    u = np.where(np.isfinite(w), np.rint(np.clip(np.nan_to_num(w), 0.0, 1.0) * 254.0), 255).astype(np.uint8)
    return {"dtype": "uint8", "shape": list(w.shape), "b64": _pack(u)}


VIEWS = ("head", "model", "neuron", "matrix")


def check_start(start: dict | None, section: dict) -> dict:
    """The state a page opens in: ``{"view": one of VIEWS, "layer", "head", "query"}``, numbers from 1
    (as the page shows them) within the first section's sizes; every key optional."""
    if not start:
        return {}
    unknown = set(start) - {"view", "layer", "head", "query"}
    if unknown:
        raise ValueError(f"the page's start state has view, layer, head and query; got {', '.join(sorted(unknown))}")
    if "view" in start and start["view"] not in VIEWS:
        raise ValueError(f"the start view must be one of {', '.join(VIEWS)}; got {start['view']!r}")
    n_layers, n_heads, q, _ = section["layers"].shape
    for key, top in (("layer", n_layers), ("head", n_heads), ("query", q)):
        v = start.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top):
            raise ValueError(f"the start {key} counts from 1 and must be in 1..{top}; got {v!r}")
    return {k: v for k, v in start.items() if v is not None}


def payload(data: dict, precision: str = "auto", start: dict | None = None) -> dict:
    """The page's data: labels as JSON, arrays packed (see ``encode_weights``; masks as packed bits), and
    the state it opens in (``check_start``)."""
    data = normalise(data)
    first = check_start(start, data["sections"][0])
    sections = []
    for s in data["sections"]:
        p = precision if precision != "auto" else ("float32" if s["layers"].size <= FLOAT32_LIMIT else "uint8")
        out = {"name": s["name"], "tokens": s["tokens"], "key_tokens": s["key_tokens"],
               "x_axis": s["x_axis"], "y_axis": s["y_axis"],
               "weights": encode_weights(s["layers"], p)}
        if "masked" in s:
            out["masked"] = {"dtype": "bits", "shape": list(s["masked"].shape), "b64": _pack(np.packbits(s["masked"]))}
        for key in ("queries", "keys"):
            if key in s:
                out[key] = {"dtype": "float32", "shape": list(s[key].shape), "b64": _pack(s[key].astype("<f4"))}
        sections.append(out)
    return {"title": data["title"], "sections": sections, "start": first}


#: Characters that could end or re-open the page's data block: written as JSON escapes, which
#: ``JSON.parse`` reads back as the same characters (U+2028/2029 and every other non-ASCII character
#: are escaped by ``ensure_ascii``).
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe between ``<script type="application/json">`` tags: ASCII only
    (a lone surrogate stays an escape), and no ``<``, ``>`` or ``&``, so no text can close the block
    (``</script>``) or switch the parser's state (``<!--<script>``)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.translate(str.maketrans(_JSON_ESCAPES))


def _html_text(s: str) -> str:
    """``s`` escaped for HTML text; a lone surrogate (not writable as UTF-8) becomes U+FFFD."""
    return html.escape(s.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))


def render_html(data: dict, precision: str = "auto", start: dict | None = None) -> str:
    """The page as a string; the data is inline JSON, escaped by ``script_json``. ``start``: the view,
    layer, head and query token it opens on (numbers from 1; see ``check_start``)."""
    p = payload(data, precision, start)
    template = (resources.files("attnlab.viz") / "viewer.html").read_text(encoding="utf-8")
    fill = {"__TITLE__": _html_text(p["title"]), "__DATA__": script_json(p)}
    return re.sub("__TITLE__|__DATA__", lambda m: fill[m.group(0)], template)  # one pass: a title may say __DATA__


def write_html(data: dict, path: str | Path, precision: str = "auto", start: dict | None = None) -> Path:
    """Write the viewer page to ``path`` (atomically: a temporary file, then renamed)."""
    return write_text(path, render_html(data, precision, start))


__all__ = ["View", "attention_json", "write_html", "render_html", "payload", "from_example", "from_trace", "load_json", "normalise", "encode_weights"]
