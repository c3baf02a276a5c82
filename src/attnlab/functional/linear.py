"""Linear attention (Katharopoulos et al. 2020): a kernel feature map instead of the softmax.

"Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention", ICML 2020,
https://arxiv.org/abs/2006.16236, eqs. 4–6 and 16–20:

    sim(q, k) = φ(q)ᵀ φ(k),   φ(x) = elu(x) + 1  (> 0)
    V'_i = φ(Q_i)ᵀ Σ_j φ(K_j) V_jᵀ / φ(Q_i)ᵀ Σ_j φ(K_j)        (eq. 5, non-causal: O(n·d·d_v))
    causal (j ≤ i):  S_i = S_{i−1} + φ(K_i) V_iᵀ,  z_i = z_{i−1} + φ(K_i)        (eqs. 18–19)
                     V'_i = φ(Q_i)ᵀ S_i / φ(Q_i)ᵀ z_i                            (eq. 20)

Three forms compute the same numbers:

* **linear** (non-causal): the associative order φ(Q) (φ(K)ᵀ V), O(n·d·d_v) time, no n × n tensor;
* **parallel** (the weights path, and causal): α_ij = φ(q_i)ᵀφ(k_j) / Σ_j' φ(q_i)ᵀφ(k_j') over the
  allowed keys, V' = α V; O(n²), it returns the weights;
* **recurrent** (``linear_attention_step``): one token at a time with the state (S, z) of
  O(d·d_v): the "transformer as an RNN" of the paper, for decoding in constant memory.

| paper               | argument / name                       |
|---------------------|---------------------------------------|
| Q, K, V             | ``query`` (..., q, d), ``key`` (..., k, d), ``value`` (..., k, d_v) |
| φ                   | ``feature_map`` (default ``elu_feature_map``) |
| S_i (d × d_v), z_i (d) | ``LinearState.s`` (..., d, d_v), ``LinearState.z`` (..., d) |

Masking follows the library's contract, without a softmax: a key the mask forbids contributes
neither to the numerator nor to the denominator; a query with no allowed key gets a zero output
and zero gradients. Non-finite inputs follow the core's rule through the core's own helpers
(``attention._guard`` / ``finish_nonfinite``, applied before φ): whenever a mask or ``causal`` is given,
NaN/inf entries of Q, K and V are zeroed (zero gradient there), and a row that may attend such a
key or value, or whose own query holds one, is set to NaN afterwards; so a NaN in a future token
reaches neither an earlier row nor any gradient. (The key-mask linear form replaces φ(k) and v at
masked keys with zeros through ``torch.where``.) The linear form takes a key mask (broadcastable to (..., 1, k));
any other bool mask, a float mask or ``need_weights`` takes the parallel form. Causal is
aligned bottom-right, as in ``attnlab.masks.causal``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import _checks, masks
from ..trace import record
from .attention import _guard, combine_values, finish_nonfinite


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so the normaliser φ(q)ᵀ Σ φ(k) never vanishes on an allowed key."""
    return F.elu(x) + 1.0


@dataclass
class LinearState:
    """The recurrent state after t tokens: S = Σ φ(k_j) v_jᵀ (..., d, d_v), z = Σ φ(k_j) (..., d)."""

    s: torch.Tensor
    z: torch.Tensor
    length: int = 0


def _safe_divide(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with zero where den = 0 (no key allowed), finite gradients there."""
    ok = den > 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def _validate(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    _checks.tensor("query", query, 2), _checks.tensor("key", key, 2), _checks.tensor("value", value, 2)
    if key.shape[-2] != value.shape[-2] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"linear attention needs query (..., q, d), key (..., k, d) and value (..., k, d_v); got "
            f"query {_checks.shape(query)}, key {_checks.shape(key)}, value {_checks.shape(value)}"
        )
    _checks.floating(("query", "key", "value"), (query, key, value))
    _checks.features("query", query)  # φ(q)ᵀ Σ φ(k) over no feature: no similarity at all


def _is_key_mask(mask: torch.Tensor | None) -> bool:
    return mask is None or (mask.dtype == torch.bool and mask.dim() >= 2 and mask.shape[-2] == 1)


def feature_similarities(fq: torch.Tensor, fk: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Step: s_ij = φ(q_i)ᵀ φ(k_j), 0 where the bool mask forbids j.  (..., q, d), (..., k, d) → (..., q, k), ≥ 0."""
    sim = fq @ fk.transpose(-2, -1)  # (..., q, k)
    if allowed is not None:
        sim = torch.where(allowed, sim, torch.zeros((), dtype=sim.dtype))
    return sim


def normalize_similarities(sim: torch.Tensor) -> torch.Tensor:
    """Step: α_ij = s_ij / Σ_j' s_ij' (a row with nothing allowed stays 0).  (..., q, k) → (..., q, k)."""
    return _safe_divide(sim, sim.sum(-1, keepdim=True))


def _parallel(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor | None,
    feature_map: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The parallel form, each step recorded while ``attnlab.trace()`` is active."""
    phi = "elu(x) + 1" if feature_map is elu_feature_map else "φ(x)"
    fq, fk = feature_map(query), feature_map(key)  # (..., q, d), (..., k, d)
    record("query_features", f"φ(q_i), φ(x) = {phi}", fq, latex=r"\phi(q_i)")
    record("key_features", f"φ(k_j), φ(x) = {phi}", fk, latex=r"\phi(k_j)")
    sim = feature_similarities(fq, fk, allowed)  # (..., q, k)
    record("similarities", "s_ij = φ(q_i)ᵀ φ(k_j)", sim, latex=r"s_{ij} = \phi(q_i)^\top \phi(k_j)")
    weights = normalize_similarities(sim)  # (..., q, k)
    record("weights", "α_ij = s_ij / Σ_j' s_ij'", weights, latex=r"\alpha_{ij} = s_{ij} / \sum_{j'} s_{ij'}")
    return combine_values(weights, value), weights  # (..., q, d_v), recorded as context


def linear_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Linear attention: ``(output (..., q, d_v), weights (..., q, k) or None)``.

    mask: bool, True = may attend, broadcastable to (..., q, k); a key mask (..., 1, k) keeps the
    linear form. Float (additive) masks have no meaning without a softmax and are refused.
    """
    _validate(query, key, value)
    if mask is not None:
        if _checks.tensor("mask", mask, 0).dtype != torch.bool:
            raise TypeError(f"linear attention takes a bool mask (True = may attend); got dtype {mask.dtype} (an additive bias needs a softmax)")
        lead = _checks.broadcast_shapes(query.shape[:-2], key.shape[:-2])
        _checks.mask(mask, torch.Size((*lead, query.shape[-2], key.shape[-2])))
    q_len, k_len = query.shape[-2], key.shape[-2]
    if need_weights or causal or not _is_key_mask(mask):
        allowed = mask
        if causal:
            allowed = masks.combine(allowed, masks.causal(q_len, k_len, device=query.device))
        hit = dead = None
        if allowed is not None:  # the core's non-finite rule, by the core's own helpers (before φ)
            query, key, value, hit = _guard(query, key, value, allowed)
            dead = ~allowed.any(-1, keepdim=True)  # (..., q|1, 1): rows that may attend nothing
        out, weights = _parallel(query, key, value, allowed, feature_map)
        return finish_nonfinite(out, hit, dead), (weights if need_weights else None)
    fq, fk = feature_map(query), feature_map(key)  # (..., q, d), (..., k, d)
    if mask is not None:  # key mask (..., 1, k) → (..., k, 1)
        keep = mask.transpose(-2, -1)
        fk = torch.where(keep, fk, torch.zeros((), dtype=fk.dtype))
        value = torch.where(keep, value, torch.zeros((), dtype=value.dtype))
    kv = fk.transpose(-2, -1) @ value  # (..., d, d_v)  Σ_j φ(k_j) v_jᵀ
    z = fk.sum(-2, keepdim=True)  # (..., 1, d)       Σ_j φ(k_j)
    num = fq @ kv  # (..., q, d_v)
    den = (fq * z).sum(-1, keepdim=True)  # (..., q, 1)
    return _safe_divide(num, den), None


def _check_state(state: object, lead: torch.Size, d: int, d_v: int, dtype: torch.dtype) -> LinearState:
    """A ``LinearState`` whose S is (..., d, d_v) and z (..., d) for these inputs, of their dtype."""
    expected = f"S {(*lead, d, d_v)} and z {(*lead, d)} of dtype {dtype}"
    if not isinstance(state, LinearState):
        raise TypeError(f"state must be a LinearState (the previous call's, or LinearAttention.empty_state(b)); "
                        f"got {type(state).__name__}")
    s, z = state.s, state.z
    if not (isinstance(s, torch.Tensor) and isinstance(z, torch.Tensor)) or s.shape[-2:] != (d, d_v) \
            or z.shape[-1:] != (d,) or s.shape[:-2] != z.shape[:-1] or s.shape[:-2] != lead:
        raise ValueError(f"state does not fit these inputs: expected {expected}; got S "
                         f"{_checks.shape(s) if isinstance(s, torch.Tensor) else type(s).__name__} and z "
                         f"{_checks.shape(z) if isinstance(z, torch.Tensor) else type(z).__name__}")
    if (s.dtype != dtype or z.dtype != dtype) and not _checks.autocasting(s):
        raise _checks.DtypeError(f"state must have the inputs' dtype {dtype}; got S {s.dtype}, z {z.dtype} "
                                 "(convert with .to(dtype), or start from empty_state(b, dtype=...))")
    return state


def linear_attention_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    state: LinearState | None = None,
    *,
    feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
) -> tuple[torch.Tensor, LinearState]:
    """The recurrent (causal) form over new tokens query, key (..., n, d), value (..., n, d_v), one
    at a time: S += φ(k_t) v_tᵀ, z += φ(k_t), out_t = φ(q_t)ᵀ S / φ(q_t)ᵀ z. Memory O(d·d_v) whatever
    the length. Returns ``(output (..., n, d_v), new state)`` (the given state is not modified)."""
    _validate(query, key, value)
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(f"the recurrent form takes one key per query; got q={query.shape[-2]}, k={key.shape[-2]}")
    fq, fk = feature_map(query), feature_map(key)
    lead = _checks.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    if state is None:
        s = query.new_zeros(*lead, query.shape[-1], value.shape[-1])
        z = query.new_zeros(*lead, query.shape[-1])
        length = 0
    else:
        state = _check_state(state, lead, query.shape[-1], value.shape[-1], query.dtype)
        s, z, length = state.s, state.z, state.length
    outs = []
    for t in range(query.shape[-2]):
        s = s + fk[..., t, :, None] * value[..., t, None, :]  # (..., d, d_v)
        z = z + fk[..., t, :]  # (..., d)
        num = (fq[..., t, :, None] * s).sum(-2)  # (..., d_v)
        den = (fq[..., t, :] * z).sum(-1, keepdim=True)  # (..., 1)
        outs.append(_safe_divide(num, den))
    out = torch.stack(outs, -2) if outs else value.new_zeros(*lead, 0, value.shape[-1])
    return out, LinearState(s, z, length + query.shape[-2])


__all__ = ["linear_attention", "linear_attention_step", "elu_feature_map", "LinearState", "feature_similarities",
           "normalize_similarities"]
