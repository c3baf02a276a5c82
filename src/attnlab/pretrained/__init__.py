"""Trained models that ship inside attnlab: load them by name, offline, in a second.

    >>> from attnlab import pretrained
    >>> pretrained.names()
    ['de-en', 'zh-en-numbers', 'char-gpt', 'caption']
    >>> loaded = pretrained.load("zh-en-numbers")      # a train.load.LoadedModel
    >>> loaded.kind
    'seq2seq'
    >>> pretrained.translate("zh-en-numbers", "三千零五").text
    'three thousand and five'

Each model is a checkpoint folder in this package (``attnlab/pretrained/NAME/``): the
weights (``model.safetensors``, no optimizer state), ``config.json`` (model, training
recipe, data), its vocabularies, and ``card.json``, the model card: data and licence, the
command that trained it, how long that took and on what, the held-out scores with 95 %
bootstrap intervals, known failure modes and the seed. ``attnlab pretrained info NAME``
prints the card; everywhere a command takes ``--checkpoint DIR`` it takes
``--pretrained NAME`` too.

``attnlab train --recipe NAME --out DIR [overrides]`` runs the card's recipe again;
``python -m attnlab.pretrained.make`` turns a finished run into a shipped folder and
measures its card.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The shipped models, in the order `attnlab pretrained list` prints them.
NAMES = ("de-en", "zh-en-numbers", "char-gpt", "caption")


class UnknownModel(ValueError):
    """A name that is not a shipped model."""


def names() -> list[str]:
    """The shipped models' names."""
    return list(NAMES)


def folder(name: str) -> Path:
    """The checkpoint folder of a shipped model; ``UnknownModel`` names the choices."""
    if name not in NAMES:
        raise UnknownModel(f"no pretrained model {name!r}; the shipped models are {', '.join(NAMES)}")
    path = HERE / name
    if not (path / "model.safetensors").is_file():
        raise UnknownModel(f"pretrained model {name!r} is not installed ({path} has no model.safetensors); "
                           "reinstall attnlab")
    return path


def card(name: str) -> dict[str, Any]:
    """The model card of a shipped model, as a dict (``card.json``)."""
    return json.loads((folder(name) / "card.json").read_text(encoding="utf-8"))


def load(name: str, *, device: str | None = None):
    """A shipped model as ``train.load.LoadedModel`` (model in eval mode, vocabularies, config).

    ``device``: None (stay on the CPU) or what ``--device`` takes (auto, cpu, cuda, mps; a
    ``torch.device`` too); a device that is not here is refused as the command line refuses it."""
    from ..train.load import load_model
    from ..train.runtime import resolve_device

    where = None if device is None else resolve_device(device)
    loaded = load_model(folder(name))
    if where is not None:
        loaded.model.to(where)
    return loaded


@dataclass
class Translation:
    """A greedy translation and its attention: ``weights[i, j]`` is how much output token ``i``
    attended to source token ``j`` (for a Transformer, the last layer's cross-attention, mean over heads)."""

    text: str
    tokens: list[str]
    source_tokens: list[str]
    weights: Any
    notes: list[str] = field(default_factory=list)  # what ``input_notes`` says of the source


# Sources in German, from the Ding dictionary: every training sentence starts with a capital letter and ends
# with . ! or ?
_SENTENCE_DATA = ("ding-de-en", "ding-phrases-de-en")


def _data_name(config: dict[str, Any]) -> str:
    data = config.get("data")
    return str(data.get("name", "")) if isinstance(data, dict) else ""


def as_trained(text: str, config: dict[str, Any]) -> str:
    """``text`` in the form the model was trained on, where that is one character for one character:
    for Chinese numerals, 两 → 二 (两千, 两万: the everyday form) and 〇 → 零."""
    if _data_name(config).startswith("numbers-zh-"):
        from ..data.numbers import normalise_chinese

        return normalise_chinese(text)
    return text


def input_notes(text: str, n_tokens: int, config: dict[str, Any]) -> list[str]:
    """One-line notes on a source unlike anything the model was trained on (``n_tokens`` tokens long):
    longer than its longest training sentence, a number of more digits than its training numbers, a
    sentence without the capital letter and the final . ! or ? of all its training sentences."""
    notes, name, text = [], _data_name(config), text.strip()
    digits = config.get("data", {}).get("max_digits") if name.startswith("numbers-zh-") else None
    if isinstance(digits, int):
        from ..data.numbers import chinese_value

        value = chinese_value(text)
        if value is not None and len(str(value)) > digits:
            notes.append(f"note: a number of {len(str(value))} digits; this model was trained on numbers of at "
                         f"most {digits} digits, so the translation is likely wrong")
    longest = config.get("max_src_len")
    if isinstance(longest, int) and n_tokens > longest and not notes:
        notes.append(f"note: {n_tokens} tokens, longer than any sentence this model was trained on (at most "
                     f"{longest}); the translation is likely wrong")
    if name in _SENTENCE_DATA and text and not (text[0].isupper() and text[-1] in ".!?"):
        notes.append("note: the model was trained on sentences that start with a capital letter and end with "
                     f". ! or ?; try {_as_sentence(text)!r}")
    return notes


def _as_sentence(text: str) -> str:
    return text[0].upper() + text[1:] + ("" if text[-1] in ".!?" else ".")


def source_ids(text: object, vocab, config: dict[str, Any]) -> list[int]:
    """The token ids of one sentence to translate, checked as ``attnlab translate`` checks its texts:
    a str (``TypeError`` otherwise) that is not blank, of known tokens, at most twice as long as the
    longest source the model was trained on (``config["max_src_len"]``); ``ValueError`` otherwise.
    The text is read ``as_trained`` (两千 as 二千 by a Chinese numbers model)."""
    if not isinstance(text, str):
        raise TypeError(f"the text to translate must be a str; got {type(text).__name__}")
    if not text.strip():
        raise ValueError("an empty sentence cannot be translated")
    limit = 2 * int(config.get("max_src_len", 1000))
    try:
        ids = vocab.encode(as_trained(text.strip(), config), strict=True)
    except ValueError as e:
        raise ValueError(f"{e}{_other_case(text, vocab)}") from None
    if len(ids) > limit:
        raise ValueError(f"the sentence has {len(ids)} tokens; this model was trained on at most {limit // 2} "
                         f"(limit {limit})")
    return ids


def _other_case(text: str, vocab) -> str:
    """"; it knows 'Wetter'" for the unknown words that the vocabulary holds with another first letter."""
    from ..data.vocab import tokenize

    if vocab.level != "word":
        return ""
    other = [t[0].swapcase() + t[1:] for t in tokenize(text.strip(), "word") if t not in vocab.stoi]
    known = [repr(t) for t in dict.fromkeys(other) if t in vocab.stoi]
    return f"; it knows {', '.join(known)}" if known else ""


def translate(name: str, text: str) -> Translation:
    """Translate ``text`` greedily with a shipped translator (``de-en``, ``zh-en-numbers``)."""
    from ..data import source_batch
    from ..data.vocab import tokenize
    from ..train.decode import greedy, length_guard

    folder(name)  # an unknown name is refused before anything is loaded
    loaded = _cached(name)
    if loaded.kind not in ("seq2seq", "transformer"):
        raise ValueError(f"{name} is a {loaded.kind} model, not a translator")
    sv, tv = loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"]
    ids = source_ids(text, sv, loaded.config)
    hyp = greedy(loaded.model, *source_batch([ids]), max_len=length_guard([len(ids)]))[0]
    return Translation(tv.decode(hyp.tokens), tv.tokens(hyp.tokens) + (["</s>"] if hyp.ended else []),
                       tokenize(text.strip(), sv.level), hyp.weights, input_notes(text, len(ids), loaded.config))


@functools.lru_cache(maxsize=4)
def _cached(name: str):
    return load(name)


def recipe(name: str) -> list[str]:
    """The arguments of ``attnlab`` that trained the shipped model (``["train", "seq2seq", ...]``)."""
    return list(card(name)["recipe"])


def with_recipe(args: list[str]) -> list[str]:
    """``attnlab train`` arguments holding ``--recipe NAME`` → the recipe's arguments, then the rest
    (argparse keeps the last value of a flag, so the rest overrides the recipe)."""
    rest, name = list(args), ""
    for i, a in enumerate(rest):
        if a == "--recipe" or a.startswith("--recipe="):
            name = a.split("=", 1)[1] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
            del rest[i: i + (1 if "=" in a else 2)]
            break
    if name not in NAMES:
        raise UnknownModel(f"--recipe needs a shipped model's name ({', '.join(NAMES)}); got {name!r}")
    return recipe(name) + rest


def _interval(score: dict[str, Any]) -> str:
    low, high = score.get("low"), score.get("high")
    return f"{score['value']:.{score.get('digits', 1)}f}" + (
        f" (95% interval {low:.{score.get('digits', 1)}f}–{high:.{score.get('digits', 1)}f})" if low is not None else "")


def info_text(name: str) -> str:
    """The model card as text: what ``attnlab pretrained info NAME`` prints."""
    c = card(name)
    lines = [f"{name}: {c['title']}", "", c["summary"], "",
             f"model       {c['model']}",
             f"parameters  {c['parameters']:,} (shipped as {c['dtype']}, {c['size_bytes'] / 1e6:.1f} MB)",
             f"data        {c['data']}",
             f"licence     {c['licence']}",
             f"seed        {c['seed']}",
             f"trained     {c['train_seconds'] / 60:.1f} min on {c['machine']}",
             f"recipe      attnlab {' '.join(c['recipe'])}",
             "", f"held-out scores ({c['held_out']}):"]
    lines += [f"  {metric:<24} {_interval(s)}" for metric, s in c["scores"].items()]
    lines += ["", "known failure modes:"] + [f"  - {m}" for m in c["failure_modes"]]
    if c.get("try"):
        lines += ["", "try:"] + [f"  attnlab {t}" for t in c["try"]]
    return "\n".join(lines)


__all__ = ["NAMES", "UnknownModel", "names", "folder", "card", "load", "recipe", "with_recipe", "info_text", "translate",
           "Translation", "source_ids", "as_trained", "input_notes"]
