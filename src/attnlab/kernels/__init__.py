"""attnlab.kernels: custom-autograd kernels that give sparse patterns their real cost."""

from .block_sparse import BlockWeights, block_sparse_attention, plan, weights_for_rows
from .topk import TopK, top_k, topk_attention, topk_indices

__all__ = [
    "block_sparse_attention",
    "weights_for_rows",
    "BlockWeights",
    "plan",
    "TopK",
    "top_k",
    "topk_attention",
    "topk_indices",
]
