"""attnlab.kernels: custom-autograd kernels that give sparse patterns their real cost."""

from .block_sparse import BlockWeights, block_sparse_attention, plan, weights_for_rows
from .neighborhood import neighborhood_attention_2d
from .topk import TopK, top_k, topk_attention, topk_indices
from .varlen import varlen_attention  # noqa: E402

__all__ = [
    "varlen_attention",
    "neighborhood_attention_2d",
    "block_sparse_attention",
    "weights_for_rows",
    "BlockWeights",
    "plan",
    "TopK",
    "top_k",
    "topk_attention",
    "topk_indices",
]
