"""attnlab as a Hugging Face ``attn_implementation``: ``from_pretrained(..., attn_implementation="attnlab")``.

Importing this module registers the name ``"attnlab"`` with transformers' two registries:

* ``AttentionInterface``: the attention function every model that routes through the interface calls
  with its projected heads (after its positions, e.g. RoPE, and after its cache). It runs attnlab's one
  core, ``attnlab.attention``: the fused path when no weights are asked for, the reference path (the
  weights from the same call, no eager fallback) for ``output_attentions=True`` or a soft-cap, and the
  recorded steps of every layer under ``attnlab.trace()``;
* ``AttentionMaskInterface``: transformers' boolean mask builder (``sdpa_mask``: ``(b, 1, q, k)``,
  True = may attend, attnlab's own convention), so padding, windows and causality reach the function;
  a plain causal mask without padding is skipped and runs as the kernel's own causal mask.

What a model passes, and what attnlab does with it:

| transformers keyword          | attnlab                                                            |
|-------------------------------|--------------------------------------------------------------------|
| ``attention_mask`` (bool/float)| ``mask`` (bool True = may attend; float = additive bias)          |
| ``scaling``                   | ``scale`` of the ``scaled_dot`` score                               |
| ``softcap``                   | ``attnlab.functional.softcap.softcapped`` score (Gemma 2)           |
| ``sliding_window``            | already in the mask transformers builds (a window mask here only if none came) |
| ``is_causal``                 | ``causal`` when no mask came (bottom-right aligned; upper-left on an empty static cache) |
| ``dropout``                   | ``dropout_p``                                                       |
| ``position_bias`` (T5)       | added to the mask: a float mask (an additive bias)                  |
| ``s_aux`` (attention sinks)   | one extra zero key whose bias is the sink's logit; its weight is dropped |
| grouped-query heads           | the g query heads of a key/value head stacked along the queries, (b, h_kv, g·q, d), against the keys as they are: no ``repeat_kv`` |

Shapes: query (b, h, q, d), key and value (b, h_kv, k, d); returns (output (b, q, h, d), weights
(b, h, q, k) or None), as transformers expects. A query row that may attend nothing (a left-padded
position) gets zero weights and a zero output (attnlab's contract; eager gives it uniform weights).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch
import transformers
from transformers import AttentionInterface

try:
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError as err:  # pragma: no cover - the versions before transformers' mask registry
    raise ImportError(
        f"attn_implementation='attnlab' needs transformers.masking_utils.AttentionMaskInterface, which "
        f"transformers {transformers.__version__} lacks; upgrade it: pip install -U 'attnlab[hf]'"
    ) from err

try:  # what the model's output hooks are collecting in this forward (transformers 5)
    from transformers.utils.output_capturing import _active_collector as _collector
except ImportError:  # pragma: no cover - older transformers pass output_attentions down
    _collector = None

from ..functional.attention import ScoreFn, attention
from ..functional.softcap import softcapped

NAME = "attnlab"
_CALLS: contextvars.ContextVar[list[dict] | None] = contextvars.ContextVar("attnlab_hf_calls", default=None)


@contextlib.contextmanager
def calls() -> Iterator[list[dict]]:
    """Keep every call of the attention inside the block, in order (one per layer and pass), as a dict:
    ``query`` (b, h, q, d) and ``key``, ``value`` (b, h_kv, k, d) as the model made them (after its
    positions and its cache), ``mask`` as attnlab ran it ((b|1, 1|h, q, k) bool or float, or None with
    ``causal``), ``scaling``, ``softcap``, ``sinks``, the ``output`` (b, q, h, d) and the ``weights``
    (b, h, q, k) or None, and the model's ``module``. Nothing is kept outside the block."""
    kept: list[dict] = []
    token = _CALLS.set(kept)
    try:
        yield kept
    finally:
        _CALLS.reset(token)


def _wants_weights(module: torch.nn.Module, kwargs: dict) -> bool:
    """``output_attentions`` from the call; else whether the model is collecting attentions now (some
    models, GPT-2 among them, do not pass the flag down: their output hooks collect what the layers
    return), else the model's config."""
    if kwargs.get("output_attentions") is not None:
        return bool(kwargs["output_attentions"])
    collecting = _collector.get() if _collector is not None else None
    if collecting is not None:
        return "attentions" in collecting or "cross_attentions" in collecting
    return bool(getattr(getattr(module, "config", None), "output_attentions", False))


def _causal_mask(q_len: int, k_len: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    """(1, 1, q, k) bool: causal, bottom-right aligned, and at most ``window`` keys back (transformers' window)."""
    pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (q, 1) the queries' positions
    j = torch.arange(k_len, device=device)[None, :]
    allowed = (j <= pos) if window is None else (j <= pos) & (pos - j < window)
    return allowed[None, None]


def _with_sinks(
    key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, sinks: torch.Tensor, q_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention sinks as one more key: a zero key and value (score 0) whose additive bias is the head's
    sink logit, so softmax([e, s]) equals the sink formula and the sink adds nothing to the output.
    key, value (b, h_kv, k, d) → (b, h_kv, k+1, d); mask (B, 1|h, q, k) → float mask (B, h, q, k+1)."""
    b, h_kv, k_len, _ = key.shape
    key = torch.cat([key, key.new_zeros(b, h_kv, 1, key.shape[-1])], dim=-2)
    value = torch.cat([value, value.new_zeros(b, h_kv, 1, value.shape[-1])], dim=-2)
    bias = key.new_zeros(1, 1, q_len, k_len) if mask is None else _as_bias(mask, key.dtype)
    n, h = bias.shape[0], sinks.shape[0]
    sink = sinks.to(key.dtype).view(1, h, 1, 1).expand(n, h, q_len, 1)
    return key, value, torch.cat([bias.expand(n, h, q_len, k_len), sink], dim=-1)


def _fold(query: torch.Tensor, mask: torch.Tensor | None, g: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grouped-query heads without ``repeat_kv``: the g query heads that share a key/value head stacked
    along the queries, so that one 4-D kernel call serves them all against the keys as they are.
    query (b, h, q, d) → (b, h_kv, g·q, d) (head h reads key/value head h // g, as repeat_kv);
    mask (B, 1|h, q|1, k) → (B, 1|h_kv, g·q, k) (a per-head mask as a view; a shared one repeated g times)."""
    b, h, q_len, d = query.shape
    query = query.reshape(b, h // g, g * q_len, d)
    if mask is not None:
        n, mh, _, k_len = mask.shape
        if mh == 1:
            mask = mask.unsqueeze(2).expand(n, 1, g, q_len, k_len).reshape(n, 1, g * q_len, k_len)
        else:
            mask = mask.expand(n, mh, q_len, k_len).reshape(n, h // g, g * q_len, k_len)
    return query, mask


def _as_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask as an additive bias in ``dtype``: 0 where a bool mask allows, −∞ where it forbids."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def _score(scaling: float | None, softcap: float | None) -> str | ScoreFn:
    """The score: ``"scaled_dot"`` (scale ``scaling``), soft-capped when the model asks for it."""
    if softcap is None:
        return "scaled_dot"
    return softcapped("scaled_dot", float(softcap), scale=scaling)


def _prepare_mask(
    mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool,
    window: int | None, position_bias: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, bool]:
    """The mask and keys attnlab runs with: (mask, key, value, causal).

    A mask that came is used as is (``causal`` off: transformers built causality into it). Without one,
    a causal call over more keys than queries is an empty static cache's prefill (upper-left aligned,
    the keys past the queries unwritten: they are cut off, as transformers' SDPA does), and a window
    narrower than the keys becomes a window mask. A position bias (T5's relative positions, (b|1, h, q, k))
    is added to the mask, which becomes a float mask (−∞ where the bool mask forbade)."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    if mask is None:
        causal = causal and q_len > 1
        if causal and k_len > q_len:
            key, value, k_len = key[..., :q_len, :], value[..., :q_len, :], q_len
        if window is not None and causal and k_len > window:
            mask, causal = _causal_mask(q_len, k_len, query.device, window), False
    else:
        causal = False
    if position_bias is not None:
        position_bias = position_bias[..., :k_len].to(query.dtype)
        if causal:
            mask, causal = _causal_mask(q_len, k_len, query.device), False
        mask = position_bias if mask is None else position_bias + _as_bias(mask, query.dtype)
    return mask, key, value, causal


def attnlab_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The function transformers calls: query (b, h, q, d), key, value (b, h_kv, k, d), the mask
    (b|1, 1|h, q, k) or None → (output (b, q, h, d), weights (b, h, q, k) or None)."""
    b, h, q_len, d = query.shape
    h_kv = key.shape[1]
    if h % h_kv:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({h_kv}); got query "
                         f"{tuple(query.shape)} and key {tuple(key.shape)}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    mask, key, value, causal = _prepare_mask(attention_mask, query, key, value, causal, sliding_window,
                                             kwargs.get("position_bias"))
    g, k_len = h // h_kv, key.shape[-2]
    if causal and (g > 1 or s_aux is not None):  # folded heads and sinks need the causal mask as a value
        mask, causal = _causal_mask(q_len, k_len, query.device), False
    k, v, m = _with_sinks(key, value, mask, s_aux, q_len) if s_aux is not None else (key, value, mask)
    q, m = _fold(query, m, g) if g > 1 else (query, m)  # (b, h_kv, g·q, d): 4-D, the kernel's fast layout
    out, weights = attention(
        q, k, v, score=_score(scaling, softcap), mask=m, causal=causal,
        scale=scaling if softcap is None else None, dropout_p=dropout, need_weights=_wants_weights(module, kwargs),
    )
    out = out.reshape(b, h, q_len, -1).transpose(1, 2).contiguous()  # (b, q, h, d)
    if weights is not None:  # (b, h, q, k), the sink's column dropped
        weights = weights.reshape(b, h, q_len, -1)[..., :k_len].to(query.dtype)
    kept = _CALLS.get()
    if kept is not None:
        kept.append({"query": query, "key": key, "value": value, "mask": mask, "causal": causal,
                     "scaling": scaling, "softcap": softcap, "sinks": s_aux, "output": out, "weights": weights,
                     "module": module})
    return out, weights


AttentionInterface.register(NAME, attnlab_attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)

__all__ = ["NAME", "attnlab_attention_forward", "calls"]
