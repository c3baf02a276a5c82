"""attnlab.nn: modules that own parameters and call ``attnlab.functional``.

Importing this package imports every module file, which fills the registry
behind ``attnlab.create``.
"""

from .dot import DotProductAttention
from .registry import available, create, register
from .vision import CBAM, ECA, ChannelAttention, SpatialAttention, SqueezeExcite

__all__ = [
    "DotProductAttention",
    "ChannelAttention",
    "SpatialAttention",
    "CBAM",
    "SqueezeExcite",
    "ECA",
    "available",
    "create",
    "register",
]
