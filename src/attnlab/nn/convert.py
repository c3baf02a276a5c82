"""Converters between ``attnlab.nn.MultiHeadAttention`` and ``torch.nn.MultiheadAttention``.

Weights copy one to one (both use the ``nn.Linear`` layout and the same packed
``in_proj_weight``). What differs, and what the converters translate:

| torch.nn.MultiheadAttention                          | attnlab.nn.MultiHeadAttention             |
|------------------------------------------------------|-------------------------------------------|
| bool ``attn_mask`` True = **not** allowed            | bool ``mask`` True = **may attend**       |
| ``key_padding_mask`` (b, k) True = padding           | ``mask`` (b, k) True = real token         |
| float masks: additive                                | float masks: additive (same)              |
| ``batch_first=False`` by default: (n, b, d)          | always batch-first (b, n, d)              |
| weights averaged over heads by default               | per-head weights (b, h, q, k)             |
| ``bias`` for in- and output projections              | ``qkv_bias`` and ``proj_bias``            |
| ``add_bias_kv`` (``bias_k``, ``bias_v`` (1, 1, E))   | ``add_bias_kv`` (same parameters)         |
| ``add_zero_attn``                                    | ``add_zero_attn``                         |
| unbatched (L, E) inputs, ``key_padding_mask`` (S,)   | unbatched (L, E) inputs, ``mask`` (S,)    |

With ``add_bias_kv``/``add_zero_attn`` the appended key columns are never masked, in both
modules, so no query row is ever fully masked and the outputs are torch's. Caveats:
grouped-query modules (``num_kv_heads < num_heads``) and rotary or ALiBi modules cannot
become a ``torch.nn.MultiheadAttention``.
"""

from __future__ import annotations

import torch
from torch import nn

from .multihead import MultiHeadAttention


def _present(p: torch.Tensor | None) -> torch.Tensor:
    """A weight that this module's layout has (packed or separate, with or without biases)."""
    assert p is not None  # the callers check the layout first
    return p


def from_torch(mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` with ``mha``'s weights (copied); batch-first whatever ``mha.batch_first``."""
    if not isinstance(mha, nn.MultiheadAttention):
        raise ValueError(f"from_torch expects a torch.nn.MultiheadAttention; got {type(mha).__name__}")
    has_bias = mha.in_proj_bias is not None
    out = MultiHeadAttention(
        mha.embed_dim,
        mha.num_heads,
        kdim=mha.kdim,
        vdim=mha.vdim,
        qkv_bias=has_bias,
        proj_bias=mha.out_proj.bias is not None,
        attn_drop=mha.dropout,
        add_bias_kv=mha.bias_k is not None,
        add_zero_attn=mha.add_zero_attn,
    )
    p = mha.in_proj_weight
    ref = p if p is not None else mha.q_proj_weight
    out = out.to(device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        if out.packed:
            w = mha.in_proj_weight
            if w is None:  # torch keeps separate weights when kdim/vdim were passed equal to dim
                w = torch.cat([mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight])
            _present(out.in_proj_weight).copy_(w)
        else:
            _present(out.q_proj_weight).copy_(mha.q_proj_weight)
            _present(out.k_proj_weight).copy_(mha.k_proj_weight)
            _present(out.v_proj_weight).copy_(mha.v_proj_weight)
        if has_bias:
            _present(out.in_proj_bias).copy_(mha.in_proj_bias)
        out.out_proj.weight.copy_(mha.out_proj.weight)
        if mha.out_proj.bias is not None:
            _present(out.out_proj.bias).copy_(mha.out_proj.bias)
        if mha.bias_k is not None:
            _present(out.bias_k).copy_(mha.bias_k)
            _present(out.bias_v).copy_(_present(mha.bias_v))
    return out.train(mha.training)


def to_torch(module: MultiHeadAttention, *, batch_first: bool = True) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` with ``module``'s weights (copied)."""
    if not isinstance(module, MultiHeadAttention):
        raise ValueError(f"to_torch expects an attnlab.nn.MultiHeadAttention; got {type(module).__name__}")
    if module.num_kv_heads != module.num_heads:
        raise ValueError(
            f"torch.nn.MultiheadAttention has no grouped-query heads; this module has "
            f"num_kv_heads={module.num_kv_heads} < num_heads={module.num_heads}"
        )
    if module.rotary is not None or module.alibi is not None:
        raise ValueError("torch.nn.MultiheadAttention has no rotary or ALiBi positions; convert a module without them")
    if getattr(module, "scale", None) is not None:
        raise ValueError(f"torch.nn.MultiheadAttention always scales by 1/sqrt(head_dim); this module has "
                         f"scale={module.scale}: convert a module with scale=None")
    has_bias = module.in_proj_bias is not None
    if has_bias != (module.out_proj.bias is not None):
        raise ValueError("torch.nn.MultiheadAttention has one bias flag for in- and output projections; "
                         f"this module has qkv_bias={has_bias}, proj_bias={module.out_proj.bias is not None}")
    ref = module.out_proj.weight
    mha = nn.MultiheadAttention(
        module.dim,
        module.num_heads,
        dropout=module.attn_drop,
        bias=has_bias,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=batch_first,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        device=ref.device,
        dtype=ref.dtype,
    )
    with torch.no_grad():
        if module.packed:
            mha.in_proj_weight.copy_(_present(module.in_proj_weight))
        else:
            mha.q_proj_weight.copy_(_present(module.q_proj_weight))
            mha.k_proj_weight.copy_(_present(module.k_proj_weight))
            mha.v_proj_weight.copy_(_present(module.v_proj_weight))
        if has_bias:
            mha.in_proj_bias.copy_(_present(module.in_proj_bias))
            mha.out_proj.bias.copy_(_present(module.out_proj.bias))
        mha.out_proj.weight.copy_(module.out_proj.weight)
        if module.bias_k is not None:
            _present(mha.bias_k).copy_(module.bias_k)
            _present(mha.bias_v).copy_(_present(module.bias_v))
    return mha.train(module.training)


def mask_from_torch(
    attn_mask: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    *,
    num_heads: int | None = None,
) -> torch.Tensor | None:
    """PyTorch's masks → one attnlab mask broadcastable to (b, h, q, k).

    attn_mask: (q, k) or (b·h, q, k) (give ``num_heads`` for the latter); bool True = forbidden,
    or float bias. key_padding_mask: (b, k), or (k,) for unbatched inputs; bool True = padding, or
    float bias. Float masks of different dtypes add in the widest one, as torch adds them.
    """
    from .. import masks

    out = []
    if attn_mask is not None:
        m = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
        if m.dim() == 3:
            if num_heads is None:
                raise ValueError("a 3-D attn_mask is (b·h, q, k): pass num_heads to unflatten it")
            m = m.unflatten(0, (-1, num_heads))  # (b, h, q, k)
        out.append(m)
    if key_padding_mask is not None:
        m = ~key_padding_mask if key_padding_mask.dtype == torch.bool else key_padding_mask
        out.append(m.reshape(-1, 1, 1, m.shape[-1]))  # (b, 1, 1, k); (k,) unbatched → (1, 1, 1, k)
    return masks.combine(*out)


def mask_to_torch(mask: torch.Tensor) -> torch.Tensor:
    """An attnlab bool mask (True = may attend) → PyTorch polarity (True = forbidden); floats unchanged."""
    return ~mask if mask.dtype == torch.bool else mask


__all__ = ["from_torch", "to_torch", "mask_from_torch", "mask_to_torch"]
