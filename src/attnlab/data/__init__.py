"""attnlab.data: corpora (numbers in words, the Ding sentence pairs), vocabularies, batches.

``load_dataset(name)`` maps a dataset name to train / valid / test text pairs
and the default tokenisation levels of its two sides:

* ``numbers-SRC-TGT`` (SRC, TGT in en, de, fr, es, it, zh, digits), generated with a fixed seed;
* ``ding-de-en`` / ``ding-en-de``: the Ding dictionary's sentences (Debian ``trans-de-en``);
  ``path=`` points at another file in its format.
"""

from __future__ import annotations

from dataclasses import dataclass

from .batching import Batch, batch_order, collate, encode_pairs, source_batch
from .ding import DEFAULT_PATH, ding_splits, load_pairs
from .numbers import DEFAULT_LEVEL, LANGS, Splits, number_pairs, parse_name
from .vocab import BOS, EOS, PAD, UNK, Vocab


@dataclass(frozen=True)
class Dataset:
    name: str
    splits: Splits
    src_level: str
    tgt_level: str


DING = {"ding-de-en": False, "ding-en-de": True}
# The same sentences, the training split joined by the dictionary's word and phrase pairs.
DING_PHRASES = {"ding-phrases-de-en": False, "ding-phrases-en-de": True}


def dataset_names() -> list[str]:
    return [f"numbers-{a}-{b}" for a in LANGS for b in LANGS if a != b] + list(DING) + list(DING_PHRASES)


def load_dataset(name: str, *, n: int = 20000, seed: int = 0, max_digits: int = 13, path: str | None = None) -> Dataset:
    """Train / valid / test pairs of a named dataset (``n``, ``max_digits`` apply to numbers-*)."""
    if name in DING or name in DING_PHRASES:
        reverse = DING.get(name, DING_PHRASES.get(name))
        splits = ding_splits(path or DEFAULT_PATH, seed=seed, reverse=reverse, phrases=name in DING_PHRASES)
        return Dataset(name, splits, "word", "word")
    if name.startswith("numbers-"):
        src, tgt = parse_name(name)
        return Dataset(name, number_pairs(src, tgt, n, seed=seed, max_digits=max_digits), DEFAULT_LEVEL[src], DEFAULT_LEVEL[tgt])
    raise ValueError(f"unknown dataset {name!r}; use numbers-SRC-TGT (e.g. numbers-de-en) or one of {', '.join([*DING, *DING_PHRASES])}")


@dataclass
class Corpus:
    """A dataset as token ids: train / valid / test examples and the two vocabularies."""

    dataset: Dataset
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: list
    valid: list
    test: list


def build_corpus(dataset: Dataset, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None) -> Corpus:
    """Vocabularies from the training split (unless given) and id examples of every split."""
    sp = dataset.splits
    sv = src_vocab or Vocab.build([s for s, _ in sp.train], dataset.src_level)
    tv = tgt_vocab or Vocab.build([t for _, t in sp.train], dataset.tgt_level)
    return Corpus(dataset, sv, tv, encode_pairs(sp.train, sv, tv), encode_pairs(sp.valid, sv, tv), encode_pairs(sp.test, sv, tv))


__all__ = [
    "Corpus",
    "build_corpus",
    "Batch", "Dataset", "Splits", "Vocab", "load_dataset", "dataset_names", "number_pairs", "load_pairs",
    "ding_splits", "encode_pairs", "collate", "batch_order", "source_batch", "PAD", "BOS", "EOS", "UNK",
]
