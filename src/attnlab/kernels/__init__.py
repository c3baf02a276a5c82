"""attnlab.kernels: custom-autograd kernels that give sparse patterns their real cost.

``plan(pattern, n, block, device=...)`` prepares a mask once (``Plan``: its CPU tiles and its CUDA
BlockMask, built on first use and held by the plan); ``block_sparse_attention`` takes a plan or a
pattern and chooses its kernel by the tensors' device (``devices``): the CPU
block-sparse kernels, flex attention on CUDA, dense masked attention elsewhere.
``attention_lse`` returns a block's ``PartialResult(out, lse)`` and ``merge`` combines such partial
results exactly (``partial``)."""

from .block_sparse import BlockWeights, block_sparse_attention, weights_for_rows
from .devices import backend_for, block_mask, flex_pattern_attention
from .lse import attention_lse
from .neighborhood import neighborhood_attention_2d
from .partial import PartialResult, merge
from .plans import Plan, plan
from .topk import TopK, top_k, topk_attention, topk_indices
from .varlen import varlen_attention

__all__ = [
    "varlen_attention",
    "neighborhood_attention_2d",
    "block_sparse_attention",
    "weights_for_rows",
    "BlockWeights",
    "plan",
    "Plan",
    "attention_lse",
    "PartialResult",
    "merge",
    "backend_for",
    "block_mask",
    "flex_pattern_attention",
    "TopK",
    "top_k",
    "topk_attention",
    "topk_indices",
]
