"""Channel and spatial attention on feature maps (CBAM), as pure functions.

Woo et al. 2018, "CBAM: Convolutional Block Attention Module", https://arxiv.org/abs/1807.06521;
Hu et al. 2018, "Squeeze-and-Excitation Networks", https://arxiv.org/abs/1709.01507;
Wang et al. 2020, "ECA-Net: Efficient Channel Attention", https://arxiv.org/abs/1910.03151.

    channel:  M_c = σ(MLP(AvgPool(F)) + MLP(MaxPool(F))),  MLP(x) = W_1 δ(W_0 x + b_0) + b_1
              F' = F ⊗ M_c                                  M_c ∈ ℝ^{C}  (per sample: (b, C, 1, 1))
    spatial:  M_s = σ(conv([mean_c F; max_c F]))            M_s ∈ ℝ^{1×H×W} (per sample: (b, 1, H, W))
              F' = F ⊗ M_s
    cbam:     F' = F ⊗ M_c(F),  F'' = F' ⊗ M_s(F')           (channel first, then spatial)
    se:       s = σ(W_2 δ(W_1 AvgPool(F) + b_1) + b_2),  F' = F ⊗ s      (average pool only)
    eca:      w = σ(conv1d_k(AvgPool(F))),  F' = F ⊗ w       (k neighbouring channels, no MLP)

| paper | argument |
|-------|----------|
| W_0 (C/r × C), b_0 | ``w1``, ``b1`` |
| W_1 (C × C/r), b_1 | ``w2``, ``b2`` |
| f^{7×7}            | ``weight`` (1, 2, k, k), ``bias`` (1,) |
| SE's W_1, W_2      | ``w1`` (C/r, C), ``w2`` (C, C/r) (+ ``b1``, ``b2``) |
| ECA's 1-D kernel   | ``weight`` (1, 1, k), no bias (as in the paper's code) |

The bottleneck width is ``reduced_channels(C, r) = max(1, C // r)``: with fewer
channels than the reduction ratio (C < r) the MLP keeps one hidden unit rather
than failing. ECA's adaptive kernel is ``eca_kernel_size(C) = |(log₂ C + 1) / 2|_odd``
(the paper's γ = 2, b = 1; an even value is rounded up to the next odd one).

Feature maps are (b, C, H, W). Each function returns ``(gated map, attention map)``
and records its steps while a trace is active.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _checks
from ..trace import record


def _feature_map(x: torch.Tensor, **params: torch.Tensor | None) -> None:
    """x a floating (b, C, H, W) map; the given parameters tensors of its dtype (None: absent)."""
    _checks.tensor("feature map", x)
    if x.dim() != 4:
        raise ValueError(f"feature map must be (b, C, H, W); got shape {_checks.shape(x)}")
    given = {n: _checks.tensor(n, t) for n, t in params.items() if t is not None}
    _checks.floating(("x", *given), (x, *given.values()))


def reduced_channels(channels: int, reduction: int) -> int:
    """The MLP's hidden width: ``max(1, channels // reduction)`` (C < r keeps one unit)."""
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive int; got {channels!r}")
    if isinstance(reduction, bool) or not isinstance(reduction, int) or reduction < 1:
        raise ValueError(f"reduction must be a positive int (the ratio r of C to C/r); got {reduction!r}")
    return max(1, channels // reduction)


def _mlp_gate_inputs(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor,
                     b2: torch.Tensor | None) -> None:
    """The inputs of a gate with the bottleneck MLP (CBAM's channel half, SE): the map as ``_feature_map``
    checks it, w1 (C/r, C) and w2 (C, C/r)."""
    _feature_map(x, w1=w1, b1=b1, w2=w2, b2=b2)
    c = x.shape[1]
    if w1.dim() != 2 or w1.shape[1] != c:
        raise ValueError(f"w1 must be (C/r, C) = (·, {c}); got {_checks.shape(w1)}")
    _checks.param("w2", w2, (c, w1.shape[0]), "the MLP's second layer, (C, C/r)")


def bottleneck_mlp(z: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor,
                   b2: torch.Tensor | None) -> torch.Tensor:
    """The gates' shared MLP: W_2 δ(W_1 z + b_1) + b_2, z (b, C) → (b, C) (CBAM's and SE's)."""
    return F.linear(F.relu(F.linear(z, w1, b1)), w2, b2)


# --- the steps (``functional.steps`` names them for ``attnlab verify``) ------------------------


def mean_pool(f: torch.Tensor) -> torch.Tensor:
    """AvgPool over H, W: (b, C, H, W) → (b, C); zeros for an empty image (H or W = 0)."""
    if f.shape[2] * f.shape[3] == 0:  # the mean of no pixel: 0, as a fully masked row gives 0
        return f.new_zeros(f.shape[:2])
    return f.mean(dim=(2, 3))


def max_pool(f: torch.Tensor) -> torch.Tensor:
    """MaxPool over H, W: (b, C, H, W) → (b, C); zeros for an empty image (H or W = 0)."""
    if f.shape[2] * f.shape[3] == 0:
        return f.new_zeros(f.shape[:2])
    return f.amax(dim=(2, 3))


def shared_mlp(avg: torch.Tensor, mx: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None,
               w2: torch.Tensor, b2: torch.Tensor | None) -> torch.Tensor:
    """MLP(avg) + MLP(max), MLP(x) = W_1 relu(W_0 x + b_0) + b_1: (b, C) → (b, C)."""
    return bottleneck_mlp(avg, w1, b1, w2, b2) + bottleneck_mlp(mx, w1, b1, w2, b2)


def channel_gate(logits: torch.Tensor) -> torch.Tensor:
    """M_c = σ(logits) as (b, C, 1, 1)."""
    return torch.sigmoid(logits)[:, :, None, None]


def channel_pool(f: torch.Tensor) -> torch.Tensor:
    """[mean_c F; max_c F]: (b, C, H, W) → (b, 2, H, W); zeros when C = 0."""
    if f.shape[1] == 0:
        return f.new_zeros(f.shape[0], 2, *f.shape[2:])
    return torch.cat([f.mean(dim=1, keepdim=True), f.amax(dim=1, keepdim=True)], dim=1)


def same_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A 2-D convolution with 'same' padding (odd kernel); an empty map (H or W = 0) stays empty."""
    if x.shape[2] * x.shape[3] == 0:  # conv2d refuses a map smaller than its kernel
        return x.new_zeros(x.shape[0], weight.shape[0], *x.shape[2:])
    return F.conv2d(x, weight, bias, padding=weight.shape[-1] // 2)


def gate(f: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """F' = F ⊗ M (broadcast)."""
    return f * m


# --- the mechanisms ---------------------------------------------------------------------------


def channel_attention(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CBAM channel attention. x (b, C, H, W), w1 (C_r, C), w2 (C, C_r) → (F', M_c (b, C, 1, 1))."""
    _mlp_gate_inputs(x, w1, b1, w2, b2)
    avg = mean_pool(x)  # (b, C)
    mx = max_pool(x)  # (b, C)
    record("avg_pool", "F_avg = AvgPool(F)", avg, latex=r"F^c_{avg} = \mathrm{AvgPool}(F)")
    record("max_pool", "F_max = MaxPool(F)", mx, latex=r"F^c_{max} = \mathrm{MaxPool}(F)")

    logits = shared_mlp(avg, mx, w1, b1, w2, b2)  # (b, C)
    record("mlp", "MLP(F_avg) + MLP(F_max)", logits, latex=r"\mathrm{MLP}(F_{avg}) + \mathrm{MLP}(F_{max})")
    m_c = channel_gate(logits)  # (b, C, 1, 1)
    record("weights", "M_c = σ(MLP(F_avg) + MLP(F_max))", m_c, latex=r"M_c = \sigma(\cdot)")
    out = gate(x, m_c)
    record("output", "F' = F ⊗ M_c", out, latex=r"F' = F \otimes M_c")
    return out, m_c


def spatial_attention(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """CBAM spatial attention. x (b, C, H, W), weight (1, 2, k, k), k odd → (F', M_s (b, 1, H, W))."""
    _feature_map(x, weight=weight, bias=bias)
    if weight.dim() != 4 or weight.shape[:2] != (1, 2) or weight.shape[2] != weight.shape[3] or weight.shape[2] % 2 == 0:
        raise ValueError(f"weight must be (1, 2, k, k) with k odd; got {_checks.shape(weight)}")
    pooled = channel_pool(x)  # (b, 2, H, W)
    record("pooled", "[mean_c F; max_c F]", pooled, latex=r"[F^s_{avg}; F^s_{max}]")
    logits = same_conv(pooled, weight, bias)  # (b, 1, H, W)
    record("conv", f"f^{{{weight.shape[-1]}×{weight.shape[-1]}}}([F_avg; F_max])", logits, latex=r"f([F_{avg}; F_{max}])")
    m_s = torch.sigmoid(logits)
    record("weights", "M_s = σ(f([F_avg; F_max]))", m_s, latex=r"M_s = \sigma(\cdot)")
    out = gate(x, m_s)
    record("output", "F' = F ⊗ M_s", out, latex=r"F' = F \otimes M_s")
    return out, m_s


def cbam(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CBAM: channel then spatial attention → (F'' (b, C, H, W), M_c (b, C, 1, 1), M_s (b, 1, H, W)).

    While a trace records, the channel steps come first, then the spatial ones
    (``weights`` and ``output`` appear twice; ``trace[name]`` gives the spatial one).
    """
    f1, m_c = channel_attention(x, w1, b1, w2, b2)
    f2, m_s = spatial_attention(f1, weight, bias)
    return f2, m_c, m_s


__all__ = ["channel_attention", "spatial_attention", "cbam", "reduced_channels"]
