"""attnlab.functional: the pure functions, one file per computation (function first, module second).

| file             | what it computes                                              |
|------------------|---------------------------------------------------------------|
| ``scores``       | e = score(q, k): dot, scaled dot, general, additive, concat   |
| ``softmax``      | α = masked softmax(e): the one mask convention                |
| ``attention``    | the core: score → masked softmax → weighted sum (fast path and reference path) |
| ``attentional``  | Luong's attentional output h̃ = tanh(W_c [c; h])               |
| ``multihead``    | the multi-head steps: project, split, attend, concatenate, W_o |
| ``channel``      | channel and spatial attention, CBAM (Woo et al. 2018)          |
| ``se``           | squeeze-and-excitation (Hu et al. 2018)                        |
| ``eca``          | efficient channel attention (Wang et al. 2020)                 |
"""

from ..masks import as_key_mask, causal, combine, padding
from .attention import attention
from .attentional import attentional_output
from .channel import cbam, channel_attention, reduced_channels, spatial_attention
from .eca import eca, eca_kernel_size
from .multihead import merge_heads, multi_head_attention, repeat_kv, split_heads
from .scores import additive, concat, dot, general, scaled_dot
from .se import se
from .softmax import masked_softmax

__all__ = [
    "attention",
    "masked_softmax",
    "dot",
    "scaled_dot",
    "general",
    "additive",
    "concat",
    "padding",
    "causal",
    "combine",
    "as_key_mask",
    "attentional_output",
    "multi_head_attention",
    "split_heads",
    "merge_heads",
    "repeat_kv",
    "channel_attention",
    "spatial_attention",
    "cbam",
    "se",
    "eca",
    "reduced_channels",
    "eca_kernel_size",
]
