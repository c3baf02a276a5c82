"""How a function under test is called: the signatures the caller declares (never guessed).

Every case describes its mask once, in attnlab's polarity (``allow``: bool, True = may attend,
broadcastable to (b, h, q, k)) plus ``causal`` (False, or the alignment the caller declared: ``"top_left"``, ``"bottom_right"``). A signature
turns that into the one argument its functions take after (q, k, v), or says it cannot express it
(a padding mask cannot forbid a single (query, key) pair): the case is then not run.

====================  =========================================================================
``"qkv_mask"``        ``fn(q, k, v, mask)``: bool mask, True = may attend (attnlab's polarity)
``"qkv_torch_mask"``  ``fn(q, k, v, mask)``: bool mask, True = masked out (``nn.MultiheadAttention``)
``"qkv_bias"``        ``fn(q, k, v, bias)``: additive float mask, ``-inf`` forbids
``"qkv_padding"``     ``fn(q, k, v, key_padding)``: (b, k) bool, True = a real key
``"qkv_causal"``      ``fn(q, k, v, is_causal)``: a bool; no other mask
====================  =========================================================================

q, k, v are (b, h, n, d). The function returns the output (b, h, q, d_v), or a tuple whose first
element is the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .reference import causal_pairs


class NotExpressible(Exception):
    """The signature has no way to say this mask; the case does not apply."""


def _pairs(allow, causal, shape, device):
    """The mask in the shape the case gave it (a broadcast mask stays broadcast), causal folded in."""
    n, m = shape[-2:]
    if causal:
        pairs = causal_pairs(n, m, causal)
        allow = pairs if allow is None else allow & pairs
    return (torch.ones(1, 1, n, m, dtype=torch.bool) if allow is None else allow).to(device)


def _keys(allow, causal, shape, device):
    b, h, n, m = shape
    if causal or allow is None or allow.shape[-3:-1] != (1, 1):
        raise NotExpressible("a (b, k) padding mask cannot forbid single (query, key) pairs")
    return allow.to(device).expand(b, 1, 1, m)[:, 0, 0, :]


def _causal_flag(allow, causal, shape, device):
    if allow is not None and not bool(allow.all()):
        raise NotExpressible("is_causal cannot forbid keys")
    return bool(causal)


@dataclass(frozen=True)
class Signature:
    """One way of calling an attention function: ``name`` of its mask argument, how to build it."""

    name: str
    argument: str  # the parameter's name in reproducers
    comment: str
    build: Callable  # (allow, causal, shape (b, h, q, k), device) -> argument (no dtype yet)
    float_mask: bool = False
    pairs: bool = True  # can forbid single (query, key) pairs (a dense mask)

    def encode(self, allow, causal, shape, dtype, device):
        """The argument after (q, k, v) for this mask, or raise ``NotExpressible``."""
        arg = self.build(allow, causal, shape, device)
        if self.name == "qkv_torch_mask":
            arg = ~arg
        if self.float_mask:
            arg = torch.zeros(arg.shape, dtype=dtype, device=device).masked_fill(~arg, -torch.inf)
        return arg

    def call(self, fn, q, k, v, arg):
        out = fn(q, k, v, arg)
        return out[0] if isinstance(out, (tuple, list)) else out


SIGNATURES = {s.name: s for s in (
    Signature("qkv_mask", "mask", "bool, True = may attend", _pairs),
    Signature("qkv_torch_mask", "mask", "bool, True = masked out (nn.MultiheadAttention's polarity)", _pairs),
    Signature("qkv_bias", "bias", "additive float mask, -inf forbids", _pairs, float_mask=True),
    Signature("qkv_padding", "key_padding", "(b, k) bool, True = a real key", _keys, pairs=False),
    Signature("qkv_causal", "is_causal", "True = causal (key <= query)", _causal_flag, pairs=False),
)}


def signature(name: str) -> Signature:
    """The signature called ``name``; ``ValueError`` lists the known ones."""
    if name not in SIGNATURES:
        raise ValueError(f"signature={name!r} is not one of {sorted(SIGNATURES)}")
    return SIGNATURES[name]


__all__ = ["SIGNATURES", "NotExpressible", "Signature", "signature"]
