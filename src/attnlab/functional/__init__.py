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
| ``softcap``      | logit soft-capping c·tanh(e/c) (Gemma 2)                       |
| ``varlen``       | packed variable-length sequences (``cu_seqlens``)              |
| ``linear``       | linear attention, φ = elu + 1 (Katharopoulos et al. 2020)      |
| ``differential`` | differential attention (Ye et al. 2024)                        |
| ``latent``       | multi-head latent attention (DeepSeek-V2)                      |
| ``neighborhood`` | 2-D neighbourhood attention (Hassani et al. 2023)              |
| ``target``       | DIN's target attention (Zhou et al. 2018)                     |
"""

from ..masks import as_key_mask, causal, combine, padding
from .attention import attention
from .attentional import attentional_output
from .channel import cbam, channel_attention, reduced_channels, spatial_attention

# Attention as it is used today (docs/modern.md)
from .differential import differential_attention  # noqa: E402
from .eca import eca, eca_kernel_size
from .latent import latent_attention  # noqa: E402
from .linear import linear_attention, linear_attention_step  # noqa: E402
from .multihead import ProjectionWeights, merge_heads, multi_head_attention, repeat_kv, split_heads
from .scores import additive, concat, dot, general, scaled_dot
from .se import se
from .softcap import softcap, softcap_attention, softcapped  # noqa: E402
from .softmax import masked_softmax
from .target import target_attention

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
    "ProjectionWeights",
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
    "softcap",
    "softcapped",
    "softcap_attention",
    "linear_attention",
    "linear_attention_step",
    "differential_attention",
    "latent_attention",
    "target_attention",
]
