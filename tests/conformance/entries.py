"""The conformance entries: one per registered mechanism and per public functional entry point.

Like PyTorch's OpInfo: an ``Entry`` says how to build a tiny case of the
mechanism (its module or weights and its inputs, at a dtype, on a device, with
sizes b, q, k) and how to call it on each of its paths; ``test_contract.py``
runs the contract's checks over every entry for which they apply.

Add an entry when you register a mechanism (``@register("name")``): the suite
fails for a name in ``attnlab.available()`` without one. Fields:

* ``make(dtype, device, b, q, k) -> Case``: build with ``torch.manual_seed(0)``
  so two calls give the same weights and inputs (inputs are leaf tensors).
* ``paths``: the paths ``Case.run`` takes: ``fast`` (no weights), ``weights``,
  ``trace`` (the reference path, recording), ``reference``, ``precompute`` (``projected_keys`` from
  ``precompute(keys, mask)``), ``precompute-unmasked`` (from ``precompute(keys)``), ``cached``
  (incremental decoding / a memory cache), ``window-cached`` (a ``WindowCache`` and its chunk mask).
* ``masked``: it takes a padding mask over keys (``run`` gets a (b, k) bool
  mask, True = real, and converts it to its own format); ``kv`` names the
  inputs whose axis ``kv_axis`` runs over the key positions.
* ``causal``: it takes ``causal=True`` (q = k in the causal check).
* ``self_attention``: the keys are the queries (padded tokens are not queries).
* ``params_under_causal``: parameter gradients are compared in the causal
  check. False where a NaN token is also a query of the same projection (its
  own row is NaN, and W's gradient sums 0 · NaN over every row).
* ``context_is_output``: a fully masked row gives a zero *output* (False where
  an output projection with a bias follows the zero context).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import attnlab
from attnlab import functional as AF
from attnlab import nn as ann
from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention, topk_attention
from attnlab.kernels.chunked_additive import chunked_additive_scores

D, DIM, HEADS = 4, 8, 2


@dataclass
class Case:
    inputs: dict[str, torch.Tensor]
    run: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]  # run(path, pad, causal) → (out, weights)
    params: list[torch.Tensor] = field(default_factory=list)
    q_axis: int = 1  # the query rows' axis in the output (-2 for (b, h, q, d))


@dataclass
class Entry:
    name: str
    make: Callable[..., Case]
    paths: tuple[str, ...] = ("fast", "weights")
    masked: bool = True
    kv: tuple[str, ...] = ()
    kv_axis: int = 1
    causal: bool = False
    self_attention: bool = False
    params_under_causal: bool = True
    context_is_output: bool = True
    compile: bool = True
    gradcheck: bool = True
    sizes: tuple[str, ...] = ("b", "q", "k")  # the sizes the empty-input check sets to 0
    output_has_k: bool = False  # the output's last axis runs over the keys (weights, scores)
    notes: str = ""
    bad: dict[str, Callable[[], object]] = field(default_factory=dict)


def _leaf(*shape, dtype, device, scale=1.0):
    t = (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)
    return t.to(device).requires_grad_(True)


def _module(m: torch.nn.Module, dtype, device) -> torch.nn.Module:
    return m.double().to(dtype).to(device).eval()


def _need(path: str) -> bool:
    return path != "fast"


def _traced(path: str, fn):
    if path == "trace":
        with attnlab.trace():
            return fn()
    return fn()


# ---- the core and the modules that call it directly ------------------------------------------

def make_core(dtype=torch.float64, device="cpu", b=2, q=4, k=6, score="scaled_dot"):
    torch.manual_seed(0)
    x = {"query": _leaf(b, HEADS, q, D, dtype=dtype, device=device),
         "key": _leaf(b, HEADS, k, D, dtype=dtype, device=device),
         "value": _leaf(b, HEADS, k, D, dtype=dtype, device=device)}
    params, score_fn = [], score
    if score == "additive":
        w_q, w_k, v = (_leaf(*s, dtype=dtype, device=device) for s in ((5, D), (5, D), (5,)))
        params, score_fn = [w_q, w_k, v], functools.partial(attnlab.scores.additive, w_q=w_q, w_k=w_k, v=v)

    def run(path, pad, causal):
        mask = None if pad is None else pad[:, None, None, :]
        return _traced(path, lambda: attnlab.attention(
            x["query"], x["key"], x["value"], score=score_fn, mask=mask, causal=causal, need_weights=_need(path)))

    return Case(x, run, params, q_axis=2)


def make_dot(scaled: bool, name: str | None = None, **kw):
    def make(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
        torch.manual_seed(0)
        m = attnlab.create(name or ("scaled-dot" if scaled else "dot"), **kw)
        x = {"query": _leaf(b, q, D, dtype=dtype, device=device), "key": _leaf(b, k, D, dtype=dtype, device=device),
             "value": _leaf(b, k, D, dtype=dtype, device=device)}

        def run(path, pad, causal):
            mask = None if pad is None else pad[:, None, :]
            return _traced(path, lambda: m(x["query"], x["key"], x["value"], mask=mask, causal=causal,
                                           need_weights=_need(path)))

        return Case(x, run)
    return make


def make_softmax(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
    torch.manual_seed(0)
    x = {"scores": _leaf(b, q, k, dtype=dtype, device=device)}

    def run(path, pad, causal):
        mask = None if pad is None else pad[:, None, :]
        w = attnlab.masked_softmax(x["scores"], mask)
        return w, w

    return Case(x, run)


# ---- multi-head -----------------------------------------------------------------------------

def make_mha(name: str, **kw):
    def make(dtype=torch.float64, device="cpu", b=2, q=6, k=6):
        torch.manual_seed(0)
        m = _module(attnlab.create(name, dim=DIM, num_heads=HEADS, **kw), dtype, device)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1 * torch.randn(p.shape, dtype=torch.float64).to(p.dtype).to(p.device))
        x = {"x": _leaf(b, q, DIM, dtype=dtype, device=device)}

        def run(path, pad, causal):
            if path == "cached":  # the prefix, then the last two tokens, through a LayerCache
                cache, n = ann.LayerCache(), x["x"].shape[1]
                cut = max(0, n - 2)
                key = None if pad is None else pad[:, None, None, :]  # (b, 1, 1, k): explicit, as 2 tokens = b
                a, _ = m(x["x"][:, :cut], mask=None if key is None else key[..., :cut], causal=True, cache=cache)
                c, _ = m(x["x"][:, cut:], mask=key, causal=True, cache=cache)
                return torch.cat([a, c], 1), None
            if path == "window-cached":  # a WindowCache keeping every token; the last chunk as long as the batch
                return _window_cached(m, x["x"]), None
            return _traced(path, lambda: m(x["x"], mask=pad, causal=causal, need_weights=_need(path)))

        return Case(x, run, list(m.parameters()))
    return make


def _window_cached(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Causal decoding in two chunks through a ``WindowCache`` wide enough to evict nothing, each chunk
    with ``mask=cache.chunk_mask(n)``: the second chunk has b tokens, so a (q, k) chunk mask has the
    shape of a (b, k) padding mask."""
    b, n = x.shape[:2]
    cache, cut = ann.WindowCache(n + 1), max(0, n - b)
    outs = [m(part, mask=cache.chunk_mask(part.shape[1]), causal=True, cache=cache)[0]
            for part in (x[:, :cut], x[:, cut:]) if part.shape[1]]
    return torch.cat(outs, 1)


def make_cross(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
    torch.manual_seed(0)
    m = _module(attnlab.create("cross", dim=DIM, num_heads=HEADS), dtype, device)
    x = {"query": _leaf(b, q, DIM, dtype=dtype, device=device), "context": _leaf(b, k, DIM, dtype=dtype, device=device)}

    def run(path, pad, causal):
        if path == "cached":  # twice over one memory: the second call reads the MemoryCache
            cache = ann.MemoryCache()
            m(x["query"], x["context"], mask=pad, cache=cache)
            return m(x["query"], x["context"], mask=pad, cache=cache)
        return _traced(path, lambda: m(x["query"], x["context"], mask=pad, need_weights=_need(path)))

    return Case(x, run, list(m.parameters()))


def make_fn_mha(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
    torch.manual_seed(0)
    x = {"query": _leaf(b, q, DIM, dtype=dtype, device=device), "key": _leaf(b, k, DIM, dtype=dtype, device=device),
         "value": _leaf(b, k, DIM, dtype=dtype, device=device)}
    w = {n: _leaf(DIM, DIM, dtype=dtype, device=device, scale=0.3) for n in ("w_q", "w_k", "w_v", "w_o")}
    w["b_o"] = _leaf(DIM, dtype=dtype, device=device)

    def run(path, pad, causal):
        return _traced(path, lambda: AF.multi_head_attention(
            x["query"], x["key"], x["value"], w, num_heads=HEADS, mask=pad, causal=causal, need_weights=_need(path)))

    return Case(x, run, list(w.values()))


def make_latent(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
    """MLA's attention (eqs. 10–11, 16–18): W^UK, W^UV up-project the latents c^KV inside the call."""
    torch.manual_seed(0)
    dc, dr = 3, 2
    x = {"q_content": _leaf(b, HEADS, q, D, dtype=dtype, device=device),
         "q_rope": _leaf(b, HEADS, q, dr, dtype=dtype, device=device),
         "c_kv": _leaf(b, k, dc, dtype=dtype, device=device), "k_rope": _leaf(b, k, dr, dtype=dtype, device=device)}
    w = [_leaf(HEADS * D, dc, dtype=dtype, device=device, scale=0.5) for _ in range(2)]  # W^UK, W^UV

    def run(path, pad, causal):
        mask = None if pad is None else pad[:, None, None, :]
        return _traced(path, lambda: AF.latent_attention(*x.values(), *w, num_heads=HEADS, mask=mask, causal=causal,
                                                         need_weights=_need(path)))

    return Case(x, run, w, q_axis=2)


# ---- Bahdanau and Luong -----------------------------------------------------------------------

def make_keyed(name: str):
    def make(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
        torch.manual_seed(0)
        kw = {"attn_dim": 5} if name in ("bahdanau", "luong-concat") else {}
        m = _module(attnlab.create(name, query_dim=DIM, key_dim=DIM, **kw), dtype, device)
        ref = None
        if name == "bahdanau":
            ref = _module(attnlab.create(name, query_dim=DIM, key_dim=DIM, impl="reference", **kw), dtype, device)
            ref.load_state_dict(m.state_dict())
        x = {"query": _leaf(b, q, DIM, dtype=dtype, device=device), "keys": _leaf(b, k, DIM, dtype=dtype, device=device)}

        def run(path, pad, causal):
            if path.startswith("precompute"):  # the keys' part once, with the padding mask or without it
                pk = m.precompute(x["keys"], mask=pad if path == "precompute" else None)
                return m(x["query"], x["keys"], mask=pad, need_weights=_need(path), projected_keys=pk)
            mod = ref if path == "reference" else m
            return _traced(path, lambda: mod(x["query"], x["keys"], mask=pad, need_weights=_need(path)))

        return Case(x, run, list(m.parameters()) + ([] if ref is None else list(ref.parameters())))
    return make


# ---- recommendation: DIN's target attention ------------------------------------------------

def make_target(normalise: str):
    """The candidate (b, d) attends over the history (b, k, d); q is unused (one query per user)."""
    def make(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
        torch.manual_seed(0)
        m = _module(attnlab.create("target-attention", dim=DIM, hidden_dim=5, normalise=normalise), dtype, device)
        x = {"candidate": _leaf(b, DIM, dtype=dtype, device=device), "history": _leaf(b, k, DIM, dtype=dtype, device=device)}

        def run(path, pad, causal):
            return _traced(path, lambda: m(x["candidate"], x["history"], mask=pad, need_weights=_need(path)))

        return Case(x, run, list(m.parameters()))
    return make


def _bad_target():
    m = attnlab.create("target-attention", dim=DIM)
    c, h = torch.randn(2, DIM), torch.randn(2, 5, DIM)
    return {"history of another feature size": lambda: m(c, h[..., :3]),
            "integer history": lambda: m(c, h.long()),
            "mask of another length": lambda: m(c, h, mask=torch.ones(2, 4, dtype=torch.bool)),
            "float mask": lambda: m(c, h, mask=torch.ones(2, 5)),
            "unknown normalise": lambda: attnlab.create("target-attention", dim=DIM, normalise="sum")}


# ---- sparse ---------------------------------------------------------------------------------

SPARSE_KW = {
    "local": {"window": 2, "block": 4},
    "longformer": {"window": 1, "global_indices": [0], "block": 4},
    "bigbird": {"window": 1, "global_indices": [0], "random_per_row": 1, "random_block": 4, "block": 4},
    "sparse": {"pattern": P.sliding_window(2, 0) | P.global_tokens([1]), "block": 4},
}


def make_block_sparse(dtype=torch.float64, device="cpu", b=2, q=6, k=6):
    torch.manual_seed(0)
    x = {n: _leaf(b, HEADS, q, D, dtype=dtype, device=device) for n in ("query", "key", "value")}
    pattern = P.sliding_window(2) | P.global_tokens([0])

    def run(path, pad, causal):
        pat = pattern & P.causal() if causal else pattern
        return block_sparse_attention(x["query"], x["key"], x["value"], pat, block=4, mask=pad)[0], None

    return Case(x, run, q_axis=2)


def make_block_sparse_full_mask(dtype=torch.float64, device="cpu", b=2, q=6, k=6):
    """A pattern AND a full (b, 1, n, n) mask: the padding as a full mask, with the pair (4, 3) also
    forbidden, so that every call takes the full-mask path over the pattern's tiles (plain torch ops
    with a loop over the tile groups: not compiled as one graph)."""
    torch.manual_seed(0)
    x = {n: _leaf(b, HEADS, q, D, dtype=dtype, device=device) for n in ("query", "key", "value")}
    pattern = P.sliding_window(2) | P.global_tokens([0])

    def run(path, pad, causal):
        n = x["key"].shape[2]  # (self-attention: q = k = n)
        keys = torch.ones(b, n, dtype=torch.bool, device=device) if pad is None else pad
        full = keys[:, None, None, :].expand(b, 1, n, n).clone()
        if n > 4:
            full[:, :, 4, 3] = False
        pat = pattern & P.causal() if causal else pattern
        return block_sparse_attention(x["query"], x["key"], x["value"], pat, block=4, mask=full)[0], None

    return Case(x, run, q_axis=2)


def make_topk(dtype=torch.float64, device="cpu", b=2, q=6, k=6, kk=3):
    torch.manual_seed(0)
    x = {n: _leaf(b, HEADS, q, D, dtype=dtype, device=device) for n in ("query", "key", "value")}

    def run(path, pad, causal):
        mask = None if pad is None else pad[:, None, :]
        return topk_attention(x["query"], x["key"], x["value"], kk, mask=mask), None

    return Case(x, run, q_axis=2)


def make_ring(dtype=torch.float64, device="cpu", b=2, q=6, k=6):
    """Ring attention in a gloo group of one process (a HashStore, no port), made and destroyed around
    each call: one block (the diagonal), so the core's rule across the ring on its autograd path.
    The fused path and the merge of several blocks run on two processes in tests/distributed."""
    import torch.distributed as dist

    from attnlab.distributed import ring_attention

    torch.manual_seed(0)
    x = {n: _leaf(b, HEADS, q, D, dtype=dtype, device=device) for n in ("query", "key", "value")}

    def run(path, pad, causal):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            return ring_attention(x["query"], x["key"], x["value"], causal=causal, mask=pad), None
        finally:
            dist.destroy_process_group()

    return Case(x, run, q_axis=2)


# ---- functions without a mask: scores, attentional output, chunked additive, vision gates ----

def make_fn(fn: Callable, shapes: dict[str, tuple[str | int, ...]], out_index: int | None = None):
    """A function of named tensors; shapes use 'b', 'q', 'k' for the sizes."""
    def make(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
        torch.manual_seed(0)
        size = {"b": b, "q": q, "k": k}
        x = {n: _leaf(*(size.get(s, s) for s in shp), dtype=dtype, device=device) for n, shp in shapes.items()}

        def run(path, pad, causal):
            out = fn(**x)
            out = out if out_index is None else out[out_index]
            return out, None

        return Case(x, run)
    return make


def make_vision(name: str, **kw):
    def make(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
        torch.manual_seed(0)
        m = _module(attnlab.create(name, **kw), dtype, device)
        x = {"x": _leaf(b, 4, q, 3, dtype=dtype, device=device)}

        def run(path, pad, causal):
            out, _ = m(x["x"], need_weights=_need(path))
            return out, None

        return Case(x, run, list(m.parameters()))
    return make


def make_neighborhood(dtype=torch.float64, device="cpu", b=2, q=4, k=6):
    torch.manual_seed(0)
    m = _module(attnlab.create("neighborhood-2d", dim=DIM, num_heads=HEADS, kernel_size=3, block=4), dtype, device)
    x = {"x": _leaf(b, DIM, q, 3, dtype=dtype, device=device)}  # (b, C, H, W)

    def run(path, pad, causal):
        return m(x["x"], need_weights=_need(path))

    return Case(x, run, list(m.parameters()))


_V = {"masked": False, "gradcheck": True, "paths": ("fast", "weights"), "sizes": ("b",),
      "notes": "no mask concept: the masking, causal and key/value checks do not apply"}
_F = {"masked": False, "paths": ("fast",), "notes": "a pure function without a mask: empty, gradcheck, dtypes, "
      "compile, meta and bad-input checks only"}
_FV = {**_F, "sizes": ("b",)}
_KEYED = {"kv": ("keys",), "paths": ("fast", "weights", "trace", "precompute", "precompute-unmasked")}
_SELF = {"kv": ("x",), "causal": True, "self_attention": True, "params_under_causal": False}


def _bad_core():
    q = torch.randn(1, 2, 3, 4)
    return {
        "integer query": lambda: attnlab.attention(q.long(), q, q),
        "mixed dtypes": lambda: attnlab.attention(q, q.double(), q.double()),
        "float mask of another dtype": lambda: attnlab.attention(q, q, q, mask=torch.zeros(3, 3, dtype=torch.float64)),
        "scale nan": lambda: attnlab.attention(q, q, q, scale=float("nan")),
        "scale 0": lambda: attnlab.attention(q, q, q, scale=0.0),
        "scale -1": lambda: attnlab.attention(q, q, q, scale=-1.0),
        "scale inf": lambda: attnlab.attention(q, q, q, scale=float("inf")),
        "mask with +inf": lambda: attnlab.attention(q, q, q, mask=torch.full((3, 3), float("inf"))),
        "d = 0": lambda: attnlab.attention(q[..., :0], q[..., :0], q),
    }


def _bad_keyed(name):
    def projected():
        m = attnlab.create(name, query_dim=DIM, key_dim=DIM, **({"attn_dim": 5} if name != "luong-general" else {}))
        keys = torch.randn(2, 6, DIM)
        return m(torch.randn(2, DIM), keys, projected_keys=m.precompute(keys)[:, :5])
    return {"projected_keys of another key length": projected,
            "integer keys": lambda: attnlab.create(name, query_dim=DIM, key_dim=DIM, **({"attn_dim": 5} if name != "luong-general" else {}))(
                torch.randn(2, DIM), torch.ones(2, 6, DIM, dtype=torch.long))}


def _bad_mha(name, **kw):
    def heads():
        attnlab.create(name, dim=10, num_heads=4, **kw)
    m = attnlab.create(name, dim=DIM, num_heads=HEADS, **kw)
    x = torch.ones(1, 3, DIM, dtype=torch.long)
    return {"heads that do not divide dim": heads, "integer input": lambda: m(x, x) if name == "cross" else m(x)}


ENTRIES: dict[str, Entry] = {e.name: e for e in [
    # registered modules (attnlab.available())
    Entry("dot", make_dot(False), kv=("key", "value"), causal=True, bad=_bad_core()),
    Entry("scaled-dot", make_dot(True), kv=("key", "value"), causal=True),
    Entry("multi-head", make_mha("multi-head"), paths=("fast", "weights", "trace", "cached"), **_SELF,
          context_is_output=True, bad=_bad_mha("multi-head")),
    Entry("multi-head[window cache]", make_mha("multi-head"), paths=("fast", "window-cached"), masked=False,
          causal=True, self_attention=True, params_under_causal=False,
          notes="a chunk of b tokens with its cache's chunk mask: never read as a (b, k) padding mask"),
    Entry("gqa", make_mha("gqa", num_kv_heads=1), paths=("fast", "weights", "cached"), **_SELF, bad=_bad_mha("gqa", num_kv_heads=1)),
    Entry("cross", make_cross, paths=("fast", "weights", "trace", "cached"), kv=("context",), context_is_output=False,
          bad=_bad_mha("cross")),
    Entry("bahdanau", make_keyed("bahdanau"), **{**_KEYED, "paths": (*_KEYED["paths"], "reference")},
          bad=_bad_keyed("bahdanau")),
    Entry("luong-dot", make_keyed("luong-dot"), **_KEYED),
    Entry("luong-general", make_keyed("luong-general"), **_KEYED, bad=_bad_keyed("luong-general")),
    Entry("luong-concat", make_keyed("luong-concat"), **_KEYED, bad=_bad_keyed("luong-concat")),
    *(Entry(n, make_mha(n, **kw), **_SELF, bad=_bad_mha(n, **kw)) for n, kw in SPARSE_KW.items()),
    # what models since 2023 use
    Entry("softcap", make_dot(True, "softcap", cap=5.0), kv=("key", "value"), causal=True),
    Entry("softcap[cap=inf]", make_dot(True, "softcap", cap=math.inf), kv=("key", "value"), causal=True,
          notes="cap = inf is no cap: plain attention, not inf · tanh(e / inf) = NaN"),
    Entry("linear", make_mha("linear"), **_SELF, context_is_output=False),
    Entry("differential", make_mha("differential"), **_SELF, context_is_output=False),
    Entry("mla", make_mha("mla", kv_latent_dim=4, rope_dim=2), **_SELF, context_is_output=False),
    Entry("target-attention", make_target("softmax"), kv=("history",), sizes=("b", "k"), bad=_bad_target(),
          notes="DIN's candidate over the history, softmax through the core"),
    Entry("target-attention[none]", make_target("none"), kv=("history",), sizes=("b", "k"),
          notes="DIN's own sum pooling: raw scores times the mask, no softmax"),
    Entry("sasrec-block", make_mha("sasrec-block"), **_SELF,
          bad={"integer input": lambda: attnlab.create("sasrec-block", dim=DIM, num_heads=HEADS)(
              torch.ones(1, 3, DIM, dtype=torch.long))}),
    Entry("neighborhood-2d", make_neighborhood, **{**_V,
          "notes": "(b, C, H, W) maps without a mask; through the block-sparse kernel"}),
    Entry("channel", make_vision("channel", channels=4, reduction=2), **_V),
    Entry("spatial", make_vision("spatial", kernel_size=3), **_V),
    Entry("cbam", make_vision("cbam", channels=4, reduction=2, kernel_size=3), **_V),
    Entry("se", make_vision("se", channels=4, reduction=2), **_V),
    Entry("eca", make_vision("eca", channels=4, kernel_size=3), **_V),
    # functional entry points
    Entry("fn:attention", make_core, paths=("fast", "weights", "trace"), kv=("key", "value"), kv_axis=2, causal=True,
          bad=_bad_core()),
    Entry("fn:attention[additive score]", functools.partial(make_core, score="additive"), paths=("weights", "trace"),
          kv=("key", "value"), kv_axis=2, causal=True),
    Entry("fn:latent_attention", make_latent, paths=("fast", "weights", "trace"), kv=("c_kv", "k_rope"), causal=True,
          notes="NaN latents where the mask forbids must not reach W^UK's or W^UV's gradient"),
    Entry("fn:masked_softmax", make_softmax, paths=("fast",), kv=("scores",), kv_axis=2, output_has_k=True,
          notes="the masked positions are scores: NaN/inf there must not reach the weights or gradients",
          bad={"integer scores": lambda: attnlab.masked_softmax(torch.ones(2, 3, dtype=torch.long)),
               "float mask of another dtype": lambda: attnlab.masked_softmax(torch.randn(2, 3), torch.zeros(2, 3).double())}),
    Entry("fn:multi_head_attention", make_fn_mha, paths=("fast", "weights", "trace"), kv=("key", "value"), causal=True,
          params_under_causal=False, context_is_output=False,
          bad={"heads that do not divide": lambda: AF.multi_head_attention(
              torch.randn(1, 2, 6), torch.randn(1, 2, 6), torch.randn(1, 2, 6),
              {"w_q": torch.randn(6, 6), "w_k": torch.randn(6, 6), "w_v": torch.randn(6, 6), "w_o": torch.randn(6, 6)},
              num_heads=4)}),
    Entry("fn:scores.dot", make_fn(attnlab.scores.dot, {"q": ("b", "q", D), "k": ("b", "k", D)}), **_F),
    Entry("fn:scores.scaled_dot", make_fn(attnlab.scores.scaled_dot, {"q": ("b", "q", D), "k": ("b", "k", D)}), **_F,
          bad={"scale -1": lambda: attnlab.scores.scaled_dot(torch.randn(2, 3), torch.randn(2, 3), -1.0),
               "d = 0": lambda: attnlab.scores.scaled_dot(torch.randn(2, 0), torch.randn(2, 0))}),
    Entry("fn:scores.general", make_fn(attnlab.scores.general, {"q": ("b", "q", D), "k": ("b", "k", 3), "weight": (D, 3)}), **_F),
    Entry("fn:scores.additive", make_fn(attnlab.scores.additive, {"q": ("b", "q", D), "k": ("b", "k", 3), "w_q": (5, D),
                                                                   "w_k": (5, 3), "v": (5,)}), **_F,
          bad={"v of the wrong size": lambda: attnlab.scores.additive(
              torch.randn(2, 3), torch.randn(2, 3), torch.randn(5, 3), torch.randn(5, 3), torch.randn(4))}),
    Entry("fn:scores.concat", make_fn(attnlab.scores.concat, {"q": ("b", "q", D), "k": ("b", "k", 3), "weight": (5, D + 3),
                                                               "v": (5,)}), **_F),
    Entry("fn:attentional_output", make_fn(AF.attentional_output, {"context": ("b", "q", D), "state": ("b", "q", 3),
                                                                    "weight": (5, D + 3), "bias": (5,)}),
          **{**_F, "sizes": ("b", "q")}),
    Entry("fn:chunked_additive", make_fn(lambda a, b, v: chunked_additive_scores(a, b, v, chunk=2),
                                         {"a": ("b", "q", 5), "b": ("b", "k", 5), "v": (5,)}), **_F),
    Entry("fn:channel_attention", make_fn(AF.channel_attention, {"x": ("b", 4, "q", 3), "w1": (2, 4), "b1": (2,),
                                                                  "w2": (4, 2), "b2": (4,)}, 0), **_FV),
    Entry("fn:spatial_attention", make_fn(AF.spatial_attention, {"x": ("b", 4, "q", 3), "weight": (1, 2, 3, 3),
                                                                  "bias": (1,)}, 0), **_FV),
    Entry("fn:cbam", make_fn(AF.cbam, {"x": ("b", 4, "q", 3), "w1": (2, 4), "b1": (2,), "w2": (4, 2), "b2": (4,),
                                        "weight": (1, 2, 3, 3), "bias": (1,)}, 0), **_FV),
    Entry("fn:se", make_fn(AF.se, {"x": ("b", 4, "q", 3), "w1": (2, 4), "b1": (2,), "w2": (4, 2), "b2": (4,)}, 0), **_FV),
    Entry("fn:eca", make_fn(AF.eca, {"x": ("b", 4, "q", 3), "weight": (1, 1, 3)}, 0), **_FV),
    Entry("kernels.block_sparse_attention", make_block_sparse, paths=("fast",), kv=("key", "value"), kv_axis=2,
          causal=True, self_attention=False),
    Entry("kernels.block_sparse_attention[pattern and mask]", make_block_sparse_full_mask, paths=("fast",),
          kv=("key", "value"), kv_axis=2, causal=True, self_attention=False, compile=False,
          notes="the full-mask path runs eagerly over the tile groups; no torch.compile"),
    Entry("distributed.ring_attention[one process]", make_ring, paths=("fast",), kv=("key", "value"), kv_axis=2,
          causal=True, compile=False, sizes=("b",), notes="q = k (a shard of one sequence); no torch.compile"),
    Entry("kernels.topk_attention", make_topk, paths=("fast",), kv=("key", "value"), kv_axis=2),
    Entry("kernels.topk_attention[k > real keys]", functools.partial(make_topk, kk=5), paths=("fast",),
          kv=("key", "value"), kv_axis=2, notes="k = 5 of 6 keys, 2 of them padding: padded keys are gathered"),
]}

# Known breaks of the contract inside the sparse kernels (strict: a fix makes the test pass, and the
# mark must then go). (entry, check) marks every case of that check, (entry, check, param) one case;
# check names are those passed to ``_params`` in test_contract.py.
SPARSE_KERNEL_XFAIL: set[tuple[str, ...]] = set()  # none open


# Known breaks of the contract in the modern mechanisms, each with what is wrong. Strict: a fix
# makes the test pass and the mark must then go.
KNOWN_GAPS: dict[tuple[str, str], str] = {}
