"""attnlab.nn: modules that own parameters and call ``attnlab.functional``.

Importing this package imports every module file, which fills the registry
behind ``attnlab.create``.
"""

from .dot import DotProductAttention
from .registry import available, create, register
from .sparse import BigBirdAttention, LocalAttention, LongformerAttention, SparseAttention

__all__ = [
    "DotProductAttention",
    "SparseAttention",
    "LocalAttention",
    "LongformerAttention",
    "BigBirdAttention",
    "available",
    "create",
    "register",
]
