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

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

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

# Checkpoints written before every model entry carried its kind: the run's kind names it.
_RUN_KINDS = {"char-lm": "gpt", "captioner": "captioner"}

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


@dataclass
class LoadedModel:
    """What ``load_model`` reads: the model (eval mode), its kind, the checkpoint's config,
    its vocabularies by file stem (``"vocab"``, ``"src_vocab"``, ``"tgt_vocab"``) and the folder."""

    model: nn.Module
    kind: str
    config: dict[str, Any]
    vocabs: dict[str, Any]
    path: Path


def load_model(directory: str | Path, *, kind: str | tuple[str, ...] | None = None) -> LoadedModel:
    """Read any attnlab checkpoint folder: weights into the registered model, the vocabularies.

    ``kind`` (one name or several) is what the caller can use; another kind raises
    ``CheckpointError`` naming both. Every failure (missing folder, corrupt file, a config
    that does not fit, weights that do not fit) is a ``CheckpointError`` (a ``ValueError``).
    """
    # The checkpoint format and the vocabulary files live a layer up (train/, data/); the
    # import is local so that models/ itself does not depend on them at import time.
    from ..data.vocab import read_vocab
    from ..train.checkpoint import CheckpointError, load_checkpoint, read_text

    tensors, config, path = load_checkpoint(directory)
    entry = config.get("model")
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}/config.json has no 'model' entry: not a model checkpoint")
    if "kind" not in entry and config.get("kind") in _RUN_KINDS:
        entry = {"kind": _RUN_KINDS[config["kind"]], **entry}
    wanted = (kind,) if isinstance(kind, str) else kind
    if wanted is not None and entry.get("kind") not in wanted:
        raise CheckpointError(
            f"{path} holds a {entry.get('kind')!r} model; expected {' or '.join(repr(w) for w in wanted)}")
    try:
        model = build_model(entry)
    except ValueError as e:
        raise CheckpointError(f"{path}/config.json: {e}") from None
    # A training checkpoint flattens the model as ``model.*`` beside ``optim.*`` and ``rng.*``.
    prefixed = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    weights = prefixed if set(prefixed) == set(model.state_dict()) else tensors
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:  # missing, unexpected or mis-shaped tensors
        first = " ".join(str(e).split())[:300]
        raise CheckpointError(f"the weights in {path}/model.safetensors do not fit the {entry['kind']} model "
                              f"its config.json describes: {first}") from None
    vocabs = {}
    for name in VOCABS[entry["kind"]]:
        text = read_text(path, f"{name}.json")  # a CheckpointError naming the file if it is missing
        try:
            vocabs[name] = read_vocab(text)
        except ValueError as e:
            raise CheckpointError(f"{path}/{name}.json: {e}") from None
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if size is not None and "vocab" in vocabs and len(vocabs["vocab"]) != size:
        raise CheckpointError(f"{path}/vocab.json has {len(vocabs['vocab'])} tokens, the model {size}")
    return LoadedModel(model.eval(), entry["kind"], config, vocabs, path)


__all__ = ["Seq2Seq", "Seq2SeqConfig", "TransformerTranslator", "TransformerConfig", "GPT", "GPTConfig", "Captioner",
           "CaptionerConfig", "SmallCNN", "CNNConfig", "DECODERS", "MODELS", "VOCABS", "LoadedModel", "build_model",
           "load_model", "model_config"]
