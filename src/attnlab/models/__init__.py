"""attnlab.models: whole models built from attnlab parts, one registry, one loader.

``MODELS`` maps a model kind to (config class, model class) for every model of the
package: the RNN encoder–decoders (``"seq2seq"``), the Transformer translator
(``"transformer"``), the character GPT (``"gpt"``), the image captioner
(``"captioner"``) and the small CNN (``"cnn"``). A checkpoint's
``config["model"]`` is ``{"kind": ..., **config fields}``; ``build_model`` rebuilds
the model from it and ``load_model(directory)`` reads a whole checkpoint folder
(weights, config, vocabularies) — the one loader every command uses.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, replace

import torch
from torch import nn

from .._limits import check_fields, check_parameters, check_values
from .captioner import Captioner, CaptionerConfig
from .cnn import CNNConfig, SmallCNN
from .gpt import GPT, GPTConfig
from .seq2seq import DECODERS, Seq2Seq, Seq2SeqConfig
from .transformer import TransformerConfig
from .transformer_translator import TransformerTranslator

MODELS: dict[str, tuple[type, type[nn.Module]]] = {
    "seq2seq": (Seq2SeqConfig, Seq2Seq),
    "transformer": (TransformerConfig, TransformerTranslator),
    "gpt": (GPTConfig, GPT),
    "captioner": (CaptionerConfig, Captioner),
    "cnn": (CNNConfig, SmallCNN),
}


# The vocabulary files a checkpoint of each kind holds beside its weights (``NAME.json``).
VOCABS: dict[str, tuple[str, ...]] = {
    "seq2seq": ("src_vocab", "tgt_vocab"),
    "transformer": ("src_vocab", "tgt_vocab"),
    "gpt": ("vocab",),
    "captioner": ("vocab",),
    "cnn": (),
}


def model_config(model: nn.Module) -> dict:
    """``{"kind": ..., **config fields}`` of a registered model, as a checkpoint stores it."""
    for kind, (cfg_cls, model_cls) in MODELS.items():
        if type(model) is model_cls and isinstance(getattr(model, "config", None), cfg_cls):
            out = {"kind": kind}
            for f in fields(cfg_cls):
                v = getattr(model.config, f.name)
                out[f.name] = list(v) if isinstance(v, tuple) else v
            return out
    raise TypeError(f"model_config expects one of the registered models ({', '.join(MODELS)}); got {type(model).__name__}")


def _is_tuple_field(f) -> bool:
    return f.default is not MISSING and isinstance(f.default, tuple)


def _model_class(cfg: object) -> type[nn.Module]:
    for cfg_cls, model_cls in MODELS.values():
        if type(cfg) is cfg_cls:
            return model_cls
    raise TypeError(f"expected the config of a registered model ({', '.join(MODELS)}); got {type(cfg).__name__}")


# Config fields that count repeated layers: a model's size is affine in each of them.
DEPTHS = ("num_layers", "num_encoder_layers", "num_decoder_layers", "layers")


class _Shapes(torch.overrides.TorchFunctionMode):
    """Build a model for its shapes only: a tensor made with more than ``SMALL`` numbers (the
    weights) goes to the meta device, nothing allocated; smaller ones (tables computed in
    ``__init__``, such as RoPE's frequencies) are made on the CPU, for real and cheaply. The random
    initialisers leave a meta tensor as it is. Why not all on meta: meta arithmetic and ``normal_``
    are Python references that import torch's compiler on first use, seconds that every command
    loading a model would pay."""

    SMALL = 1 << 16
    MAKE = {torch.empty, torch.zeros, torch.ones, torch.full, torch.randn, torch.rand}
    FILL = {torch.nn.init.normal_, torch.nn.init.uniform_, torch.nn.init.trunc_normal_, torch.nn.init.xavier_normal_,
            torch.nn.init.xavier_uniform_, torch.nn.init.kaiming_normal_, torch.nn.init.kaiming_uniform_,
            torch.nn.init.orthogonal_, torch.Tensor.normal_, torch.Tensor.uniform_}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.FILL:  # the tensor to fill: the first argument (torch.nn.init names it "tensor")
            t = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if t.is_meta:
                return t
        elif func in self.MAKE and kwargs.get("device") is None:
            if not args and "size" in kwargs:
                args = (kwargs.pop("size"), *((kwargs.pop("fill_value"),) if "fill_value" in kwargs else ()))
            size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else \
                args[: 1 if func is torch.full else len(args)]
            size = size[0] if func is torch.full else size
            numel = 1
            for n in size:
                numel *= int(n)
            if numel > self.SMALL:
                kwargs.pop("generator", None)
                made = torch.empty if func in (torch.randn, torch.rand) else func
                args = (tuple(size),) if made is torch.empty else args
                return made(*args, **{**kwargs, "device": "meta"})
        return func(*args, **kwargs)


def _count(cfg: object) -> int:
    try:
        with _Shapes():  # the weights on the meta device, nothing allocated for them, nothing drawn
            model = _model_class(cfg)(cfg)
    except (RuntimeError, NotImplementedError):  # a model mixing a big and a small table: all on meta
        with torch.device("meta"):
            model = _model_class(cfg)(cfg)
    return sum(t.numel() for t in (*model.parameters(), *model.buffers()))


def count_parameters(cfg: object) -> int:
    """The parameters and buffers (numbers in all) of the model ``cfg`` describes, counted on the
    meta device without allocating: built with one layer, and with two of each kind, the size is
    extrapolated to the config's depths (exact: each layer of a kind has the same size)."""
    depths = {f: getattr(cfg, f) for f in DEPTHS if hasattr(cfg, f)}
    shallow = replace(cfg, **{f: 1 for f in depths})
    one = _count(shallow)
    return one + sum((n - 1) * (_count(replace(shallow, **{f: 2})) - one) for f, n in depths.items())


def create_model(cfg: object) -> nn.Module:
    """The model that the config ``cfg`` describes, built once its size is known to be sane (a
    ValueError, before any allocation, for one that would not fit in memory)."""
    check_fields(cfg)
    check_parameters(count_parameters(cfg), f"the {type(cfg).__name__} model")
    return _model_class(cfg)(cfg)


def build_model(config: dict) -> nn.Module:
    """A model from ``{"kind": ..., **config fields}`` (as written in a checkpoint); every field is
    checked (``attnlab._limits``) before anything is built."""
    if not isinstance(config, dict) or config.get("kind") not in MODELS:
        got = config.get("kind") if isinstance(config, dict) else config
        raise ValueError(f"unknown model kind {got!r}; known: {', '.join(MODELS)}")
    cfg_cls, model_cls = MODELS[config["kind"]]
    fs = {f.name: f for f in fields(cfg_cls)}
    extra = set(config) - set(fs) - {"kind"}
    if extra:
        raise ValueError(f"model config has unknown fields {sorted(extra)} (written by another attnlab version?)")
    check_values(cfg_cls, config, "model.")
    kwargs = {k: tuple(v) if _is_tuple_field(fs[k]) and isinstance(v, list) else v
              for k, v in config.items() if k in fs}
    try:
        cfg = cfg_cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"model config does not fit {cfg_cls.__name__}: {e}") from None
    return create_model(cfg)



__all__ = ["Seq2Seq", "Seq2SeqConfig", "TransformerTranslator", "TransformerConfig", "GPT", "GPTConfig", "Captioner",
           "CaptionerConfig", "SmallCNN", "CNNConfig", "DECODERS", "MODELS", "VOCABS", "build_model",
           "model_config", "create_model", "count_parameters"]
