"""Padding in self-attention modules: a ``(b, n)`` padding mask marks padded *queries* too.

The rule of ``MultiHeadAttention`` and ``attnlab.functional.multi_head_attention``, shared by the
self-attention modules that project their own queries, keys and values (linear, differential,
latent attention): the input rows of padded tokens are zeroed with ``torch.where`` before any
projection, so NaN or inf there never reaches an output or a gradient, and the outputs (and
weights) of padded tokens are zero. It is written once, in ``attnlab.functional.multihead``.
"""

from __future__ import annotations

from ..functional.multihead import padded_queries, zero_padded

__all__ = ["padded_queries", "zero_padded"]
