"""``attention()``: score → masked softmax → weighted sum, with a fast and a reference path.

    e = score(q, k)          (..., q, k)      e.g. qᵀk/√d, vᵀ tanh(W_q q + W_k k)
    α = softmax(e + mask)    (..., q, k)      rows sum to 1 (0 where fully masked)
    c = α v                  (..., q, d_v)    the context vectors

Shape legend: ``b`` batch, ``h`` heads, ``q`` query length, ``k`` key length,
``d`` features. Tensors are batch-first; any leading dimensions broadcast.

Two paths compute the same numbers:

* the **fast path** calls ``torch.nn.functional.scaled_dot_product_attention``
  (a fused kernel). It runs when the weights are not asked for, the score is
  ``"dot"`` or ``"scaled_dot"`` and no trace is recording;
* the **reference path** computes each step in plain tensor algebra, returns
  the weights on request and records every step while ``attnlab.trace()`` is
  active. It is the source of truth that the fast path is tested against.

Masks follow the library convention (``attnlab.masks``): bool True = may
attend, float = additive bias. A query row that may attend nothing gets zero
weights and a zero output, with zero gradients, on both paths.

The non-finite rule (``attnlab.functional.nonfinite``, written once for every
mechanism): keys and values at masked positions never influence an output or a
gradient, even when they are NaN or inf. Whenever a mask (or ``causal``) is
given, the non-finite entries of the keys and values are replaced by zeros
*before* the kernel runs, and an output row that was allowed to attend such a
key or value is set to NaN afterwards (``hit``; the whole row: per-feature
tracking would cost a second weighted sum). A non-finite query row is zeroed
the same way and its output set to NaN, so its NaN reaches no other row's
gradient; a fully masked row is zero regardless.

What the rule costs:

* no mask and no ``causal``: nothing (SDPA alone); one query over a cache with
  ``causal=True`` has nothing masked either, and runs as such;
* on the CPU, run eagerly: one summation pass over query, key and value to
  look, and the cleaning copies only when something is not finite;
* on CUDA and every other device (and under ``torch.compile``), where looking
  would wait for the device: no host read and no data-dependent branch. For
  ``causal`` and for key padding, an ``attnlab.Mask`` or a bool (b|1, 1, 1, k)
  tensor (``_device_lean``): the masked keys cleaned (the padded rows set to
  zero whole, one ``masked_fill`` each; for causal ``nan_to_num`` of key and
  value), one sum per input to find the rows that see a non-finite entry (a
  running sum along the keys for causal), one fused ``addcmul_`` that puts NaN
  in those rows of the kernel's output, and one ``masked_fill_`` of the rows
  that may attend nothing where there may be some: 8 operations for causal, 7
  for a padding value (8 with an empty sequence), 11 for a padding tensor (its
  padded rows and empty rows read each call), without a gradient (with one,
  the query is cleaned too). For other masks:
  one cleaning pass (``nan_to_num``: read once, write once) and one
  matrix-vector read for the row flags over key and value, the same over the
  query when a gradient will flow (only the read otherwise), small work on the
  (..., k) row flags and one pass over the output. The backward adds nothing. ``causal`` runs as SDPA's own causal kernel (bottom-right
  aligned, also when q < k: chunked prefill), never as a dense mask.

``kv_finite=True`` is the caller's word that the keys and values hold no NaN or
inf where the mask forbids (an RNN decoder attending, at every step, to encoder
states whose padding it zeroed once): the passes over keys and values are then
skipped (the query is still guarded), and a NaN at an allowed position reaches
the output through the arithmetic itself (in the features it touches).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import _checks, masks
from ..mask import Mask
from ..trace import active, record
from . import scores
from .nonfinite import (
    finish_nonfinite,
    flag_rows,
    host_checks,
    nonfinite_rows,
    sanitize,
    zero_nonfinite,
    zero_nonfinite_entries,
)
from .softmax import _softmax

_host_checks = host_checks  # (a module global: the tests turn the CPU's look-ahead off through it)
ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
FUSED_SCORES = ("dot", "scaled_dot")
UNKNOWN: Any = object()  # the fully masked rows, not known in advance (a raw mask tensor)


def _resolve_score(score: str | ScoreFn, scale: float | None) -> ScoreFn:
    if callable(score):
        if scale is not None:
            raise ValueError("scale applies to score='scaled_dot' only; a callable score scales itself")
        return score
    if score == "dot":
        if scale is not None:
            raise ValueError("scale applies to score='scaled_dot'; got score='dot' with scale set")
        return scores.dot
    if score == "scaled_dot":
        return lambda q, k: scores.scaled_dot(q, k, scale)
    raise ValueError(
        f"score must be 'dot', 'scaled_dot' or a callable (q, k) -> scores; got {score!r}. "
        "For general, additive or concat scores pass e.g. functools.partial(attnlab.scores.additive, ...)"
    )


def _validate(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score: str | ScoreFn
) -> torch.Size:
    _checks.tensor("query", query, 2), _checks.tensor("key", key, 2), _checks.tensor("value", value, 2)
    _checks.floating(("query", "key", "value"), (query, key, value))
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length k: key {_checks.shape(key)} has k={key.shape[-2]}, "
            f"value {_checks.shape(value)} has k={value.shape[-2]}"
        )
    lead = _checks.leading_broadcast(("query", "key", "value"), (query, key, value))
    if isinstance(score, str) and score in FUSED_SCORES:
        _checks.features("query", query)
        _checks.features("key", key)
        _checks.features_match(f"the {score} score", query, key)
    return torch.Size((*lead, query.shape[-2], key.shape[-2]))


def _guard(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attend: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero the non-finite entries of query, key and value; the query rows whose output is NaN (``hit``).

    attend: bool (..., q|1, k) where queries may attend, or None for the bottom-right causal mask
    (q <= k: query i attends j <= i + k - q). A row is hit when it may
    attend a key or value row holding a non-finite entry, or when its own query holds one.
    Returns (query, key, value, hit (..., q|1)).
    """
    query, key, value, bad_q, bad = zero_nonfinite(query, key, value)  # bad_q (..., q), bad (..., k)
    return query, key, value, _reach(bad, attend, query.shape[-2]) | bad_q


def _reach(bad: torch.Tensor, attend: torch.Tensor | None, q_len: int) -> torch.Tensor:
    """bad (..., k) → (..., q|1): the query rows that may attend a bad key (``attend`` None: causal,
    bottom-right aligned, q <= k, so query i sees the keys j <= i + k - q: i + k - q >= the first bad j)."""
    if attend is None:
        k_len = bad.shape[-1]
        j = torch.arange(k_len, device=bad.device)
        first = torch.where(bad, j, k_len).amin(-1, keepdim=True)  # (..., 1): the first bad key, k if none
        return j[k_len - q_len :] >= first
    return (attend & bad.unsqueeze(-2)).any(-1)


def _guard_host(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    kv_finite: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The rule on the CPU, run eagerly: look first (one summation pass), guard only when something
    is not finite (``mask`` None: causal). Returns (query, key, value, hit (..., q|1) or None)."""
    if kv_finite:  # the caller vouches for key and value: the query's part of the rule only
        if _checks.all_finite(query):
            return query, key, value, None
        return zero_nonfinite_entries(query), key, value, nonfinite_rows(query)
    if _checks.all_finite(query, key, value):  # finite inputs need no guard
        return query, key, value, None
    return _guard(query, key, value, None if mask is None else masks.allowed(mask))


def _guard_device(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attend: torch.Tensor | None,
    dead: torch.Tensor | None,
    kv_finite: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rule without host reads: one ``sanitize`` pass over key and value (none with ``kv_finite``)
    and, when a gradient will flow, over the query (zeroing the fully masked rows in the same pass);
    without a gradient the query is only read (its NaN stays in its own row, which is set to NaN).
    Returns (query, key, value, hit (..., q|1))."""
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        # (any gradient: the kernel's backward multiplies a NaN query row's weights into dK and dV)
        query, bad_q = sanitize(query, None if dead is None else dead[..., 0])
    else:
        bad_q = flag_rows(query)
    if kv_finite:
        return query, key, value, bad_q
    key, bad_k = sanitize(key)
    value, bad_v = sanitize(value)
    return query, key, value, _reach(bad_k | bad_v, attend, query.shape[-2]) | bad_q


def _fast(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    dead: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    lead: torch.Size,
    zero_dead_query: bool,
) -> torch.Tensor:
    """One SDPA call. ``causal`` (no mask): SDPA's own causal kernel, bottom-right aligned (``is_causal``
    when q = k, ``causal_lower_right`` when q < k). A fully masked row (``dead``) is opened onto every
    key (uniform inside, zeroed by ``finish_nonfinite``); ``zero_dead_query`` also zeroes its query
    here (the device path zeroed it in its ``sanitize`` pass, or needs no gradient)."""
    query, key, value = (t if t.shape[:-2] == lead else t.expand(*lead, *t.shape[-2:]) for t in (query, key, value))
    if mask is not None and dead is not None:  # (None: no row is fully masked, checked on the CPU)
        # its raw scores may overflow: a zero query keeps them (and its zero gradients) finite
        mask = mask | dead if mask.dtype == torch.bool else mask.masked_fill(dead, 0.0)
        if zero_dead_query:
            query = query.masked_fill(dead, 0.0)
    q_len, k_len = query.shape[-2], key.shape[-2]
    if causal and q_len != k_len:
        from torch.nn.attention.bias import causal_lower_right

        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_lower_right(q_len, k_len), dropout_p=dropout_p, scale=scale
        )
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=causal, scale=scale
    )


def _lean_keys(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, rows: torch.Tensor | None, acc: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys and values for the kernel, and what each query row sees of their non-finite entries, as a
    (..., q|1, 1) sum (made without a gradient) that is non-finite exactly where the row may attend one.

    ``rows`` (b, 1, k, 1) bool, the padded key rows of a padding mask: they are the masked keys, set to
    zero whole (one ``masked_fill`` each); every query of a sequence may attend all its other keys, so
    one sum over them all tells. ``rows`` None: causal, bottom-right aligned (q <= k): both are cleaned
    (``nan_to_num``), and row i sees the running sum of the key rows up to its last, i + k - q."""
    if rows is not None:
        key, value = key.masked_fill(rows, 0.0), value.masked_fill(rows, 0.0)
        with torch.no_grad():
            return key, value, key.sum((-2, -1), keepdim=True, dtype=acc) + value.sum((-2, -1), keepdim=True, dtype=acc)
    with torch.no_grad():
        kv = key.sum(-1, keepdim=True, dtype=acc) + value.sum(-1, keepdim=True, dtype=acc)  # (..., k, 1)
        seen = kv.cumsum(-2)  # (..., k, 1): non-finite from the first non-finite key row on
        if seen.shape[-2] != query.shape[-2]:
            seen = seen[..., seen.shape[-2] - query.shape[-2]:, :]  # (..., q, 1)
    return zero_nonfinite_entries(key), zero_nonfinite_entries(value), seen


def _device_lean(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, causal: bool,
    scale: float, dropout_p: float, lead: torch.Size, kv_finite: bool, dead: torch.Tensor | None,
    rows: torch.Tensor | None,
) -> torch.Tensor:
    """The rule for key padding (``rows``) and for the kernel's own causal mask, in a handful of operations:
    the masked keys cleaned (the padded rows whole, or every non-finite entry for causal), the query
    rows that see a non-finite input found by sums, and NaN added to those rows of the output (``add``
    with ``alpha=0``: 0 · a finite sum is 0, 0 · NaN or inf is NaN). A NaN at an allowed position also
    reaches its row by the arithmetic itself. With a gradient, the query, keys and values are cleaned
    whole as well, so that no NaN reaches a gradient through the kernel's backward."""
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    # the sums in float64 (a device without it: float32), so a finite product of two sums stays finite
    acc = torch.float32 if query.device.type == "mps" else torch.float64
    with torch.no_grad():
        seen = query.sum(-1, keepdim=True, dtype=acc)  # (..., q, 1)
    kv = None
    if not kv_finite:
        key, value, kv = _lean_keys(query, key, value, rows, acc)
        if grad and rows is not None:  # a NaN at an allowed key: the output's row only, never a gradient
            key, value = zero_nonfinite_entries(key), zero_nonfinite_entries(value)
    if grad:
        query = zero_nonfinite_entries(query)
    # A fully masked row (a sequence with no key: all its keys are padded, so zeroed) is opened onto
    # its keys only for a gradient's sake, and its query needs zeroing only when the keys were not
    # cleaned (kv_finite); without a gradient its output, whatever the kernel made of it, is zeroed below.
    out = _fast(query, key, value, mask, dead if grad else None, causal, scale, dropout_p, lead, grad and kv_finite)
    if grad:  # not in place (the kernel keeps its output for its backward): 0 or NaN per row, then one add
        out = out + (seen if kv is None else seen * kv).mul_(0.0).to(out.dtype)
        return out if dead is None else out.masked_fill(dead, 0.0)
    # 0 · (the query's sum) · (what it sees): 0 where both are finite, NaN otherwise
    out = out.add_(seen, alpha=0.0) if kv is None else out.addcmul_(seen, kv, value=0.0)
    return out if dead is None else out.masked_fill_(dead, 0.0)


def _device_fast(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    lead: torch.Size,
    kv_finite: bool,
    dead: Any = UNKNOWN,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """The fast path without host reads: the rule's cleaning, one SDPA call, the rule's finish. Key
    padding whose rows are known (``rows``) and the kernel's own causal mask take ``_device_lean``."""
    if dead is not UNKNOWN and (rows is not None or (causal and mask is None)):
        return _device_lean(query, key, value, mask, causal, scale, dropout_p, lead, kv_finite, dead, rows)
    query, key, value, hit, dead = _device_guard(query, key, value, mask, lead, kv_finite, dead)
    out = _fast(query, key, value, mask, dead, causal, scale, dropout_p, lead, False)
    return finish_nonfinite(out, hit, dead)


def _device_guard(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, lead: torch.Size,
    kv_finite: bool, dead: Any = UNKNOWN,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``_guard_device`` with the mask's fully masked rows: (query, key, value, hit, dead (..., q|1, 1) or None).
    ``dead``: the rows that may attend nothing when the mask value knows them (None: none), else UNKNOWN."""
    attend = masks.allowed(mask) if mask is not None else None
    if dead is UNKNOWN:
        dead = None if attend is None else ~attend.any(-1, keepdim=True)  # (..., q|1, 1)
    if dead is not None and query.shape[:-2] != lead:  # (its dead rows are zeroed in the cleaning)
        query = query.expand(*lead, *query.shape[-2:])
    query, key, value, hit = _guard_device(query, key, value, attend, dead, kv_finite)
    return query, key, value, hit, dead


_COMPILED: dict[bool, Callable[..., torch.Tensor]] = {}
_SHAPES: set[tuple] = set()
STATIC_SHAPES = 8  # distinct (query, key, mask) shapes compiled one by one; after them, one kernel for all


def _device_path(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
                 lower_right: bool) -> Callable[..., torch.Tensor]:
    """``_device_fast`` compiled on CUDA (its dozen small operations fused into a few kernels, launched
    from one call: each eager launch costs the host more than the pass costs the GPU), eagerly on other
    devices, under an enclosing ``torch.compile`` and for causal chunks (SDPA's bottom-right mask object
    does not compile)."""
    if query.device.type != "cuda" or _checks.tracing() or lower_right:
        return _device_fast
    args_shapes = (query.shape, key.shape, None if mask is None else mask.shape)
    if len(_SHAPES) <= STATIC_SHAPES:
        _SHAPES.add((*args_shapes, query.dtype))
    # a cache that grows by a step (q != k) changes shape every call: one dynamic kernel from the start
    dynamic = len(_SHAPES) > STATIC_SHAPES or args_shapes[0][-2] != args_shapes[1][-2]
    if dynamic not in _COMPILED:
        compiled = torch.compile(_device_fast, dynamic=dynamic)

        def run(*args: Any) -> torch.Tensor:
            try:
                return compiled(*args)
            except Exception:  # a compiler that cannot build it here (no Triton, say): the same numbers, eagerly
                _COMPILED[dynamic] = _device_fast
                return _device_fast(*args)

        _COMPILED[dynamic] = run
    return _COMPILED[dynamic]


def _scaled_scores(q: torch.Tensor, k: torch.Tensor, s: float) -> torch.Tensor:
    """s · q kᵀ (..., q, k) as one batched GEMM with alpha = s (no scaled copy of q or of the scores)."""
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or q.dim() < 3:
        return scores.dot(q * s, k)
    q3, k3 = q.flatten(0, -3), k.flatten(0, -3)  # (B, q, d), (B, k, d)
    out = q3.new_empty(()).expand(q3.shape[0], q3.shape[1], k3.shape[1])  # ignored: beta = 0
    return torch.baddbmm(out, q3, k3.transpose(1, 2), beta=0.0, alpha=s).view(*lead, q.shape[-2], k.shape[-2])


def _reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    score_fn: ScoreFn,
    mask: torch.Tensor | None,
    dead: torch.Tensor | None,
    dropout_p: float,
    owned: bool,
    need_weights: bool = True,
    return_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The steps one by one: (context, weights, ℓ or None). ``owned``: the score function makes a fresh
    tensor that may be overwritten. ``return_lse``: ℓ_i = log Σ_j exp(e_ij) over the allowed keys, from
    the same scores, before the softmax may overwrite them (``_row_lse``).

    Fully masked rows (``dead``) are left uniform inside and zeroed where it is cheap: in the
    context (by ``finish_nonfinite``, which zeroes their gradient too) and in the returned weights.
    """
    e = score_fn(query, key)  # (..., q, k)
    if mask is not None and active():
        masked = mask_scores(e, mask)
        n_out = int((~masks.allowed(mask)).expand(masked.shape).sum())
        record(
            "masked_scores",
            "e_ij ← −∞ where the mask forbids j" if mask.dtype == torch.bool else "e_ij ← e_ij + bias_ij",
            masked,
            latex=r"e_{ij} \leftarrow -\infty \text{ where masked}",
            note=f"{n_out} of {masked.numel()} scores masked",
        )
    lse = _row_lse(e, mask, dead) if return_lse else None
    inplace = owned and not active()
    if active() or dead is None:
        weights = weigh(e, mask, inplace=inplace)  # (..., q, k), fully masked rows zero
    else:
        weights = _softmax(e, mask, -1, inplace=inplace, zero_dead=False)
    w = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    context = combine_values(w, value)
    if dead is not None and need_weights and not active():
        # only what is returned (the context rows are zeroed by finish_nonfinite); in place when autograd keeps no copy
        ours = not (torch.is_grad_enabled() and weights.requires_grad)
        # (a multiplication: the weights are finite, and a broadcast mul is one fast pass)
        weights = weights.masked_fill_(dead, 0.0) if ours else weights * (~dead).to(weights.dtype)
    return context, weights, lse


def _row_lse(e: torch.Tensor, mask: torch.Tensor | None, dead: torch.Tensor | None) -> torch.Tensor:
    """ℓ (..., q) = log Σ_j exp(e_ij) over the keys the mask allows (with a float mask, of e + bias),
    computed in float32 or wider and returned in the scores' dtype; a fully masked row (``dead`` (..., q|1, 1)) gets −∞ with a zero
    gradient (its scores are replaced by zeros first, so no −∞ − (−∞) is formed)."""
    x = e if e.dtype in (torch.float32, torch.float64) else e.float()
    if mask is not None:
        x = mask_scores(x, mask)
        if dead is None:
            dead = ~masks.allowed(mask).any(-1, keepdim=True)
        x = x.masked_fill(dead, 0.0)
    lse = torch.logsumexp(x, -1).to(e.dtype)
    return lse if dead is None else lse.masked_fill(dead[..., 0], float("-inf"))


def mask_scores(e: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Step: e_ij ← −∞ where the bool mask forbids j (True = may attend); e_ij + bias_ij for a float mask."""
    return e.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else e + mask


def weigh(e: torch.Tensor, mask: torch.Tensor | None, *, inplace: bool = False) -> torch.Tensor:
    """Step: α = masked softmax(e) over the last dimension, recorded as ``weights``.  (..., q, k) → (..., q, k)."""
    weights = _softmax(e, mask, -1, inplace=inplace)
    record(
        "weights",
        "α_ij = exp(e_ij) / Σ_j' exp(e_ij')",
        weights,
        latex=r"\alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{j'} \exp(e_{ij'})}",
    )
    return weights


def combine_values(weights: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Step: c_i = Σ_j α_ij v_j, recorded as ``context``.  (..., q, k), (..., k, d_v) → (..., q, d_v)."""
    context = weights.to(value.dtype) @ value  # (..., q, d_v)
    record("context", "c_i = Σ_j α_ij v_j", context, latex=r"c_i = \sum_j \alpha_{ij} v_j")
    return context


def _plain(query: Any, key: Any, value: Any, score: object, scale: object, dropout_p: object, extra: bool) -> bool:
    """A call with nothing to check beyond what SDPA checks itself: tensors of one floating dtype and
    one leading shape, features that match, keys present, the default score and scale, no trace."""
    if extra or scale is not None or not (score == "scaled_dot" or score == "dot") or type(dropout_p) is not float:
        return False
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor)):
        return False
    qs, ks, vs, dtype = query.shape, key.shape, value.shape, query.dtype
    return (len(qs) >= 2 and qs[:-2] == ks[:-2] == vs[:-2] and ks[-2] == vs[-2] > 0 and qs[-1] == ks[-1] > 0
            and dtype == key.dtype == value.dtype and dtype.is_floating_point and 0.0 <= dropout_p < 1.0
            and not active())


def _from_value(
    m: Mask, causal: bool, scores_shape: torch.Size, query: torch.Tensor, on_host: bool
) -> tuple[torch.Tensor | None, bool, torch.Tensor | None, torch.Tensor | None]:
    """A mask value at a call → (the mask as SDPA takes it or None, causal, the rows that attend nothing
    or None, the padded key rows (b, 1, k, 1) of key padding or None). Checked against the call's sizes once per size; what the call needs is the value's plan."""
    if causal:  # the value's causal form, made once and kept with it
        m = m.plan(("& causal",), lambda: m & Mask.causal())
    if m.is_causal:  # nothing to keep (a cache that grows by a token a step would add a plan a step)
        return _plan_call(m, scores_shape, query.device, query.dtype, on_host)
    key = (tuple(scores_shape), query.device, query.dtype, on_host)
    return m.plan(key, lambda: _plan_call(m, scores_shape, query.device, query.dtype, on_host))


def _plan_call(
    m: Mask, scores_shape: torch.Size, device: torch.device, dtype: torch.dtype, on_host: bool
) -> tuple[torch.Tensor | None, bool, torch.Tensor | None, torch.Tensor | None]:
    lead, q_len, k_len = scores_shape[:-2], scores_shape[-2], scores_shape[-1]
    if len(lead) > 2:
        raise ValueError(f"an attnlab.Mask is for scores (b, h, q, k), (b, q, k) or (q, k); got scores "
                         f"{tuple(scores_shape)}: pass a mask tensor for more leading dimensions")
    m.check(lead[0] if lead else 1, q_len, k_len)
    if m.is_causal and m.aligned_bottom_right and q_len == 1 and k_len > 0:
        return None, False, None, None  # one query at the end of the keys may attend every key
    if m.is_causal and (q_len == k_len or (m.aligned_bottom_right and q_len < k_len and not on_host)):
        return None, True, None, None  # the kernel's own causal mask
    if m.is_causal:  # made for this call only (see _from_value)
        t, dead = m._dense(q_len, k_len, device), m._empty_rows(q_len, k_len, device)
    else:
        t, dead = m.tensor(q_len, k_len, device), m.empty_rows(q_len, k_len, device)
    if len(lead) < 2:  # (b, q, k) or (q, k) scores: the value's (b|1, 1, q|1, k) without its head axis
        t, dead = t[:, 0], None if dead is None else dead[:, 0]
        if not lead:
            t, dead = t[0], None if dead is None else dead[0]
    keys = m.keys  # key padding alone: its padded rows are the masked keys (cleaned whole on a device)
    rows = None if keys is None or len(lead) != 2 or on_host else ~keys[:, None, :, None].to(device)  # (b, 1, k, 1)
    return masks.in_dtype(t, dtype), False, dead, rows


def _query_finite(query: torch.Tensor) -> bool:
    """False for a CPU query holding a NaN or inf: SDPA's CPU kernel writes 0 for a row whose scores are
    all NaN, where the reference path (and the arithmetic) gives NaN, so such a call takes the reference
    path. One read of the query (a single row when decoding); nothing elsewhere (no host read)."""
    if not _host_checks(query):
        return True
    return math.isfinite(float((query.detach() if query.requires_grad else query).sum())) or _checks.all_finite(query)


def _check_call(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score: str | ScoreFn, scale: float | None,
    dropout_p: float, need_weights: bool, return_lse: bool,
) -> tuple[torch.Size, float | None, ScoreFn]:
    """The call's inputs and options checked: (the scores' shape (..., q, k), the scale, the score function)."""
    if _plain(query, key, value, score, None, dropout_p, False):  # checked as for SDPA: no more to check
        scores_shape = torch.Size((*query.shape[:-1], key.shape[-2]))
    else:
        scores_shape = _validate(query, key, value, score)
    if scale is not None:
        scale = _checks.scale(scale)
    score_fn = _resolve_score(score, scale)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    if need_weights and return_lse:
        raise ValueError("need_weights and return_lse both asked for: attention returns (output, weights) "
                         "or (output, lse); call it with one of them")
    return scores_shape, scale, score_fn


def _raw_padding(mask: torch.Tensor, scores_shape: torch.Size, dtype: torch.dtype,
                 on_host: bool) -> tuple[torch.Tensor | None, Any]:
    """A raw mask checked against the scores; off the CPU's look-ahead, a bool (b|1, 1, 1, k) key padding
    gives (its padded key rows (b|1, 1, k, 1), its rows that may attend nothing (b|1, 1, 1, 1)), as
    ``Mask.padding``'s plan does; any other mask (None, UNKNOWN)."""
    _checks.mask(mask, scores_shape, dtype)
    lead = scores_shape[:-2]
    if on_host or mask.dtype != torch.bool or mask.dim() != 4 or len(lead) != 2 or tuple(mask.shape[1:3]) != (1, 1):
        return None, UNKNOWN
    padded = ~mask  # (b|1, 1, 1, k): one negation serves both
    return padded.transpose(-1, -2), padded.all(-1, keepdim=True)


def _empty_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(..., q|1, 1) bool: the rows of a raw mask that may attend nothing, None when there is none (a host read)."""
    if mask is None:
        return None
    dead = ~masks.allowed(mask).any(-1, keepdim=True)
    return dead if bool(dead.any()) else None


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    score: str | ScoreFn = "scaled_dot",
    mask: torch.Tensor | Mask | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    kv_finite: bool = False,
    return_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attend from ``query`` to ``key``/``value``.

    Args:
        query: (..., q, d_q).
        key: (..., k, d_k).
        value: (..., k, d_v).
        score: ``"scaled_dot"`` (default, qᵀk/√d), ``"dot"`` (qᵀk), or a callable
            ``(q, k) -> (..., q, k)`` such as ``partial(attnlab.scores.additive, w_q=..., ...)``.
        mask: an ``attnlab.Mask`` (built once, e.g. ``Mask.padding(lengths, k)``: the cheapest form),
            or a tensor: bool (True = may attend) or float (additive bias), broadcastable to
            the scores (..., q, k). A (b, k) padding mask is passed as (b, 1, 1, k).
        causal: also apply the bottom-right-aligned causal mask ``attnlab.masks.causal``.
        scale: the factor of ``"scaled_dot"``; default 1/√d_q.
        dropout_p: dropout on the weights (applied whenever > 0: pass 0 in eval).
        need_weights: return the weights (..., q, k) (before dropout) as well.
        kv_finite: the caller vouches that key and value are finite wherever the mask forbids;
            skips the non-finite rule's passes over them (see the module docstring).
        return_lse: return the row log-sum-exp ℓ_i = log Σ_j exp(e_ij) over the allowed keys in place
            of the weights, computed from the same scores as the output (one score computation, on
            the reference path). A fully masked row gets ℓ = −∞ (and a zero output), a row whose
            output is NaN (the non-finite rule) gets ℓ = NaN: ``(output, lse)`` is a
            ``attnlab.kernels.PartialResult``, and ``attnlab.kernels.merge`` of the results over
            disjoint key sets equals the call over all of them. Not with ``need_weights`` (ValueError).

    Returns:
        ``(output, weights)``: output (..., q, d_v); weights (..., q, k) or None;
        with ``return_lse``: ``(output, lse)``, lse (..., q) in the scores' dtype.
    """
    if mask is None and (not causal or query.shape[-2] == 1) and _plain(query, key, value, score, scale, dropout_p,
                                                                         need_weights or return_lse) and (
            _query_finite(query)):
        # nothing masked (one query at the end of the keys may attend every key): SDPA alone
        s = 1.0 if score == "dot" else scores.default_scale(query.shape[-1])
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p, scale=s), None
    scores_shape, scale, score_fn = _check_call(query, key, value, score, scale, dropout_p, need_weights, return_lse)
    dead: Any = UNKNOWN  # the rows that may attend nothing: known in advance for a mask value
    rows = None  # the padded key rows of a key padding value
    on_host = _host_checks(query)
    if isinstance(mask, Mask):
        mask, causal, dead, rows = _from_value(mask, causal, scores_shape, query, on_host)
    elif mask is not None:  # checked; on a device, a bool key padding tensor runs as a padding value does
        rows, dead = _raw_padding(mask, scores_shape, query.dtype, on_host)
    if mask is not None and mask.dim() < 2:  # a (k,) mask: every query alike
        mask = mask.reshape(1, -1).expand(1, scores_shape[-1]) if mask.dim() else mask.reshape(1, 1)
    q_len, k_len = scores_shape[-2], scores_shape[-1]
    if causal and mask is None and q_len == 1:
        causal = False  # one query at the end of the keys (bottom-right) may attend every key: no mask
    # causal without a mask runs as the kernel's own causal mask: q = k everywhere, q < k off the CPU
    fused_causal = causal and mask is None and (q_len == k_len or (not on_host and q_len < k_len))
    dead = None if fused_causal and dead is UNKNOWN else dead  # bottom-right, q <= k: every row sees key 0
    if causal and not fused_causal:
        mask = masks.combine(mask, masks.causal(q_len, k_len, device=query.device))
    use_fast = not need_weights and not return_lse and isinstance(score, str) and not active() and k_len > 0
    use_fast = use_fast and (mask is not None or fused_causal or _query_finite(query))
    s = 1.0 if score == "dot" else (scores.default_scale(query.shape[-1]) if scale is None else scale)
    guarded = mask is not None or fused_causal  # the non-finite rule (``attnlab.functional.nonfinite``)
    if use_fast and guarded and not on_host:  # the rule, SDPA and the finish as one function (compiled on CUDA)
        args = (query, key, value, mask, fused_causal, s, dropout_p, scores_shape[:-2], kv_finite, dead, rows)
        return _device_path(query, key, mask, fused_causal and q_len != k_len)(*args), None

    hit = None
    if guarded and not on_host:  # no host reads: one pass per guarded tensor
        query, key, value, hit, dead = _device_guard(query, key, value, mask, scores_shape[:-2], kv_finite, dead)
    elif guarded:
        if dead is UNKNOWN:
            dead = _empty_rows(mask)
        query, key, value, hit = _guard_host(query, key, value, mask, kv_finite)
    if dead is UNKNOWN:
        dead = None

    if use_fast:
        out = _fast(query, key, value, mask, dead, fused_causal, s, dropout_p, scores_shape[:-2], on_host)
        return finish_nonfinite(out, hit, dead), None

    if fused_causal:
        mask = masks.causal(q_len, k_len, device=query.device)
    owned = isinstance(score, str)
    if score == "scaled_dot" and not active():  # the scale as the GEMM's alpha: no pass over (q, k)
        s = scores.default_scale(query.shape[-1]) if scale is None else scale
        score_fn = lambda q, k: _scaled_scores(q, k, s)  # noqa: E731
    context, weights, lse = _reference(query, key, value, score_fn, mask, dead, dropout_p, owned, need_weights,
                                       return_lse)
    if lse is not None:  # NaN where the output is NaN; a row with no key stays −∞, as its output stays 0
        if hit is None:  # unguarded (no mask): a non-finite input reached the output by the arithmetic itself
            hit = context.isnan().any(-1) | torch.isposinf(lse)
        lse = lse.masked_fill(hit & ~torch.isneginf(lse), float("nan"))
        return finish_nonfinite(context, hit, dead), lse
    return finish_nonfinite(context, hit, dead), (weights if need_weights else None)


__all__ = ["attention", "weigh", "combine_values", "mask_scores", "zero_nonfinite", "finish_nonfinite", "nonfinite_rows",
           "zero_nonfinite_entries"]
