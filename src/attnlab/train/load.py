"""``load_model(directory)``: any attnlab checkpoint folder back into its registered model.

The one loader every command uses (translate, evaluate, generate, caption, resume): the
checkpoint's ``config["model"]["kind"]`` picks the model class from ``attnlab.models.MODELS``,
the weights load strictly (plain or the training layout with ``model.``/``optim.``/``rng.``
prefixes), and the vocabulary files that kind needs (``attnlab.models.VOCABS``) are read with
``attnlab.data.vocab.read_vocab``. It lives in ``train`` because it reads checkpoints
(``train.checkpoint``) and vocabularies (``data``), both above ``models`` in the layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..data.vocab import read_vocab
from ..models import VOCABS, build_model
from .checkpoint import CheckpointError, load_checkpoint, read_text

# Checkpoints written before every model entry carried its kind: the run's kind names it.
_RUN_KINDS = {"char-lm": "gpt", "captioner": "captioner"}


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
    bad = [name for name, p in model.named_parameters() if not bool(p.isfinite().all())]
    if bad:
        raise CheckpointError(f"{path}/model.safetensors holds NaN or infinite weights ({len(bad)} tensors, e.g. "
                              f"{bad[0]}): a diverged run; train it again or use an earlier checkpoint")
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


__all__ = ["LoadedModel", "load_model"]
