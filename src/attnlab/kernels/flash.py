"""PyTorch's fused CPU flash kernel, and how partial results over disjoint key sets combine.

The kernel (``aten._scaled_dot_product_flash_attention_for_cpu``) computes, per
query row, the output o = softmax(q kᵀ · scale + mask) v and the row's
log-sum-exp ℓ = log Σ_j exp(q·k_j · scale + mask_j), in one pass without a
score tensor; its backward recomputes the weights from ℓ (FlashAttention).

Two parts of one softmax, over disjoint key sets S₁ and S₂ of the same query,
combine exactly (the split-KV trick of Flash-Decoding):

    ℓ = log(e^{ℓ₁} + e^{ℓ₂}),    o = e^{ℓ₁ − ℓ} o₁ + e^{ℓ₂ − ℓ} o₂

and the backward of each part, given the *combined* o and ℓ, yields exactly that
part's share of the gradients: the kernel forms P_ij = exp(s_ij − ℓ_i) and
Δ_i = rowsum(dO_i ∘ O_i), which are then the combined softmax's. So a pattern
that is a sliding window plus other keys runs the window as contiguous spans
(``band``) and only the rest through gathered tiles (``block_sparse``).

These are private ops: where a torch build lacks them ``HAS_FUSED`` is False and
the kernels take their explicit paths (same numbers, slower).

Reference: Dao et al., "FlashAttention", 2022, https://arxiv.org/abs/2205.14135;
Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html.
"""

from __future__ import annotations

import torch

FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
HAS_FUSED = FLASH is not None and FLASH_BWD is not None


def additive(allow: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool, True = may attend → the kernel's additive mask (0 or −inf)."""
    return torch.zeros(allow.shape, dtype=dtype, device=allow.device).masked_fill_(~allow, float("-inf"))


def merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """[(o_p (..., n, d), ℓ_p (..., n))] over disjoint key sets → (o, ℓ); rows with no key anywhere: o = 0, ℓ = −inf."""
    if len(parts) == 1:
        return parts[0]
    lse = parts[0][1]
    for _, lp in parts[1:]:
        lse = torch.logaddexp(lse, lp)
    dead = torch.isneginf(lse)
    out = None
    for o, lp in parts:
        w = torch.exp(lp - lse).masked_fill_(dead, 0.0)  # (..., n) the part's share of the row's mass
        out = o * w[..., None] if out is None else out.addcmul_(o, w[..., None])
    return out, lse


__all__: list[str] = []
