"""attnlab.functional: the pure functions, in one namespace (function first, module second)."""

from .attention import attention
from .masks import as_key_mask, causal, combine, padding
from .scores import additive, concat, dot, general, scaled_dot
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
]
