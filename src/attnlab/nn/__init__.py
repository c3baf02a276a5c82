"""attnlab.nn: modules that own parameters and call ``attnlab.functional``.

Importing this package imports every module file, which fills the registry
behind ``attnlab.create``.
"""

from .additive import AdditiveAttention
from .attentional import AttentionalOutput
from .backends import Backend, BlockSparse, ContextParallel, Dense
from .cache import KVCache, LayerCache, MemoryCache, WindowCache
from .channel import CBAM, ChannelAttention, SpatialAttention

# Attention as it is used today (docs/modern.md)
from .differential import DifferentialAttention  # noqa: E402
from .dot import DotProductAttention
from .eca import ECA
from .latent import LatentCache, MultiHeadLatentAttention  # noqa: E402
from .layers import TransformerDecoderLayer, TransformerEncoderLayer
from .linear import LinearAttention  # noqa: E402
from .luong import LuongAttention
from .multihead import CrossAttention, GroupedQueryAttention, MultiHeadAttention
from .neighborhood import NeighborhoodAttention2D  # noqa: E402
from .positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    T5RelativePositionBias,
)
from .recommendation import SASRec, SASRecBlock, TargetAttention
from .registry import available, create, register
from .se import SqueezeExcite
from .softcap import SoftcapAttention  # noqa: E402
from .sparse import BigBirdAttention, LocalAttention, LongformerAttention, SparseAttention

__all__ = [
    "DotProductAttention",
    "MultiHeadAttention",
    "GroupedQueryAttention",
    "CrossAttention",
    "Backend",
    "Dense",
    "BlockSparse",
    "ContextParallel",
    "KVCache",
    "LayerCache",
    "MemoryCache",
    "WindowCache",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "T5RelativePositionBias",
    "SparseAttention",
    "LocalAttention",
    "LongformerAttention",
    "BigBirdAttention",
    "AdditiveAttention",
    "AttentionalOutput",
    "LuongAttention",
    "ChannelAttention",
    "SpatialAttention",
    "CBAM",
    "SqueezeExcite",
    "ECA",
    "SoftcapAttention",
    "LinearAttention",
    "DifferentialAttention",
    "MultiHeadLatentAttention",
    "LatentCache",
    "NeighborhoodAttention2D",
    "TargetAttention",
    "SASRecBlock",
    "SASRec",
    "available",
    "create",
    "register",
]
