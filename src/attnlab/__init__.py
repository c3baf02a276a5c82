"""attnlab: the whole family of attention mechanisms, correct, fast and explainable.

Public names (shape legend: b batch, h heads, q query length, k key length, d features):

* ``attnlab.scores``: dot, scaled_dot, general, additive, concat: (..., q, d), (..., k, d) → (..., q, k)
* ``attnlab.masked_softmax(scores, mask=None, dim=-1)``
* ``attnlab.attention(query, key, value, *, score=..., mask=..., causal=..., need_weights=...)``
* ``attnlab.masks``: padding, causal (bottom-right), combine, as_key_mask, score_mask (how modules read short masks)
* ``attnlab.patterns``: sparse patterns (window, strided, global, random, block, top-k) composing with & and |
* ``attnlab.trace()``: record the named steps of the reference path
* ``attnlab.create(name, **kwargs)``: build a registered module (``attnlab.available()`` lists them)

Mask convention everywhere: bool True = may attend; float = additive bias.
"""

from . import functional, masks, patterns
from .functional import scores
from .functional.attention import attention
from .functional.softmax import masked_softmax
from .nn.registry import available, create
from .trace import Step, Trace, trace

__version__ = "0.1.0"

__all__ = [
    "attention",
    "masked_softmax",
    "functional",
    "masks",
    "patterns",
    "scores",
    "trace",
    "Trace",
    "Step",
    "create",
    "available",
    "__version__",
]
