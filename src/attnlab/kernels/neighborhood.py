"""2-D neighbourhood attention (Hassani et al. 2023): each pixel attends the k × k pixels around it.

"Neighborhood Attention Transformer", CVPR 2023, https://arxiv.org/abs/2204.07143; dilated:
"Dilated Neighborhood Attention Transformer", https://arxiv.org/abs/2209.15001. NATTEN's semantics:

    ρ(i) = the kernel × kernel pixels j = (r, c) with r, c in the window around i's row and column
           (every ``dilation``-th pixel, within i's dilation group), shifted to stay inside the grid
    o_i  = Σ_{j ∈ ρ(i)} softmax_j(q_i·k_j · scale) v_j

so every query sees exactly kernel² keys (when the grid has that many per dilation group). The
pattern is ``attnlab.patterns.neighborhood_2d(H, W, kernel, dilation)`` over the row-major
positions i = r·W + c; the block-sparse CPU kernel computes only the tiles it touches: O(H·W·k²)
instead of O((H·W)²). The weights path materialises the (HW, HW) mask and runs the core.

| paper / NATTEN     | argument                                  |
|--------------------|-------------------------------------------|
| q, k, v            | ``query``, ``key`` (b, h, H, W, d), ``value`` (b, h, H, W, d_v) |
| kernel_size k      | ``kernel`` (odd)                          |
| dilation δ         | ``dilation``                              |

Caveat: NATTEN's relative positional bias (rpb) is not modelled.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..functional.attention import attention
from ..patterns import Neighborhood2D, neighborhood_2d
from ._compile import assume_constant
from .block_sparse import block_sparse_attention

# One pattern object per grid (the kernel keeps its plan on it), found by its sizes: under
# torch.compile the key is a constant of the graph and the lookup reads a plain dict, so no
# pattern object is built inside the traced code.
_GRIDS: dict[tuple[int, int, int, int], Neighborhood2D] = {}


@assume_constant
def _grid(height: int, width: int, kernel: int, dilation: int) -> tuple[int, int, int, int]:
    key = (height, width, kernel, dilation)
    if key not in _GRIDS:
        if len(_GRIDS) >= 64:
            _GRIDS.clear()
        _GRIDS[key] = neighborhood_2d(height, width, kernel, dilation)
    return key


def _pattern(height: int, width: int, kernel: int, dilation: int) -> Neighborhood2D:
    return _GRIDS[_grid(height, width, kernel, dilation)]


def neighborhood_attention_2d(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    kernel: int,
    dilation: int = 1,
    scale: float | None = None,
    block: int = 64,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(output (b, h, H, W, d_v), weights (b, h, H·W, H·W) or None)``."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _checks.tensor(name, t).dim() != 5:
            raise ValueError(f"{name} must be (b, h, H, W, d); got shape {_checks.shape(t)}")
    if query.shape[:4] != key.shape[:4] or key.shape[:4] != value.shape[:4] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query, key (b, h, H, W, d) and value (b, h, H, W, d_v) must share b, h, H, W (and d); got "
            f"{_checks.shape(query)}, {_checks.shape(key)}, {_checks.shape(value)}"
        )
    _checks.floating(("query", "key", "value"), (query, key, value))
    if scale is not None:
        scale = _checks.scale(scale)
    b, h, H, W, _ = query.shape
    pattern = _pattern(H, W, kernel, dilation)
    q, k, v = (t.flatten(2, 3) for t in (query, key, value))  # (b, h, H·W, d)
    if need_weights:
        mask = pattern.materialize(H * W, device=query.device)  # (HW, HW)
        out, weights = attention(q, k, v, mask=mask, scale=scale, need_weights=True)
    elif H * W == 0 or b * h == 0:
        out, weights = v.new_zeros(*q.shape[:-1], v.shape[-1]), None
    else:
        out, weights = block_sparse_attention(q, k, v, pattern, block=block, scale=scale)[0], None
    return out.unflatten(2, (H, W)), weights


__all__ = ["neighborhood_attention_2d"]
