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

from dataclasses import MISSING, fields

from torch import nn

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


def build_model(config: dict) -> nn.Module:
    """A model from ``{"kind": ..., **config fields}`` (as written in a checkpoint)."""
    if not isinstance(config, dict) or config.get("kind") not in MODELS:
        got = config.get("kind") if isinstance(config, dict) else config
        raise ValueError(f"unknown model kind {got!r}; known: {', '.join(MODELS)}")
    cfg_cls, model_cls = MODELS[config["kind"]]
    fs = {f.name: f for f in fields(cfg_cls)}
    extra = set(config) - set(fs) - {"kind"}
    if extra:
        raise ValueError(f"model config has unknown fields {sorted(extra)} (written by another attnlab version?)")
    kwargs = {k: tuple(v) if _is_tuple_field(fs[k]) and isinstance(v, list) else v
              for k, v in config.items() if k in fs}
    try:
        return model_cls(cfg_cls(**kwargs))
    except TypeError as e:
        raise ValueError(f"model config does not fit {cfg_cls.__name__}: {e}") from None



__all__ = ["Seq2Seq", "Seq2SeqConfig", "TransformerTranslator", "TransformerConfig", "GPT", "GPTConfig", "Captioner",
           "CaptionerConfig", "SmallCNN", "CNNConfig", "DECODERS", "MODELS", "VOCABS", "build_model",
           "model_config"]
