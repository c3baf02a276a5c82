"""attnlab.models: whole models built from attnlab parts.

``MODELS`` maps a checkpoint's ``config["model"]["kind"]`` to (config class,
model class), so ``build_model(config_dict)`` rebuilds any saved model: the RNN
encoder–decoders (``"seq2seq"``) and the Transformer translator (``"transformer"``).
"""

from __future__ import annotations

from dataclasses import fields

from .seq2seq import DECODERS, Seq2Seq, Seq2SeqConfig
from .transformer import TransformerConfig
from .transformer_translator import TransformerTranslator

MODELS = {"seq2seq": (Seq2SeqConfig, Seq2Seq), "transformer": (TransformerConfig, TransformerTranslator)}


def build_model(config: dict):
    """A model from ``{"kind": ..., **config fields}`` (as written in a checkpoint)."""
    if not isinstance(config, dict) or config.get("kind") not in MODELS:
        got = config.get("kind") if isinstance(config, dict) else config
        raise ValueError(f"unknown model kind {got!r}; known: {', '.join(MODELS)}")
    cfg_cls, model_cls = MODELS[config["kind"]]
    names = {f.name for f in fields(cfg_cls)}
    extra = set(config) - names - {"kind"}
    if extra:
        raise ValueError(f"model config has unknown fields {sorted(extra)} (written by another attnlab version?)")
    try:
        return model_cls(cfg_cls(**{k: v for k, v in config.items() if k in names}))
    except TypeError as e:
        raise ValueError(f"model config does not fit {cfg_cls.__name__}: {e}") from None


__all__ = ["Seq2Seq", "Seq2SeqConfig", "TransformerTranslator", "TransformerConfig", "DECODERS", "MODELS", "build_model"]
