"""attnlab.nn: modules that own parameters and call ``attnlab.functional``.

Importing this package imports every module file, which fills the registry
behind ``attnlab.create``.
"""

from .additive import AdditiveAttention
from .attentional import AttentionalOutput
from .dot import DotProductAttention
from .luong import LuongAttention
from .registry import available, create, register
from .sparse import BigBirdAttention, LocalAttention, LongformerAttention, SparseAttention

__all__ = [
    "DotProductAttention",
    "SparseAttention",
    "LocalAttention",
    "LongformerAttention",
    "BigBirdAttention",
    "AdditiveAttention",
    "AttentionalOutput",
    "LuongAttention",
    "available",
    "create",
    "register",
]
