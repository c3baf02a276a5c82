"""attnlab.functional: the pure functions, in one namespace (function first, module second)."""

from .attention import attention
from .masks import as_key_mask, causal, combine, padding
from .multihead import merge_heads, multi_head_attention, repeat_kv, split_heads
from .scores import additive, concat, dot, general, scaled_dot
from .softmax import masked_softmax
from .vision import (
    cbam,
    channel_attention,
    eca,
    eca_kernel_size,
    reduced_channels,
    se,
    spatial_attention,
)

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
