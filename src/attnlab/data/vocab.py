"""Tokenisers and the one vocabulary class: character, word or pre-tokenised level, saved as JSON.

Ids 0–3 are the specials ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``. Word-level
tokens are runs of letters/digits and single punctuation marks (``"it's 4."`` →
``it ' s 4 .``); character level keeps every character, spaces included; ``"tokens"``
level takes text already split into a list of tokens (the captioner's captions) and gives
the list back. The file is ``{"level": ..., "tokens": [...]}``; the captioner's older
files (a JSON list starting with the specials) still load, as ``"tokens"`` level.
``encode(..., strict=True)`` raises ``ValueError`` naming the tokens that are not
in the vocabulary (the command line uses it, so a typo gets a clear message).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
LEVELS = ("char", "word", "tokens")
_WORD = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str | list[str], level: str) -> list[str]:
    if level == "tokens":
        if isinstance(text, str) or not all(isinstance(t, str) for t in text):
            raise TypeError(f"a tokens-level vocabulary encodes a list of tokens; got {type(text).__name__}")
        return list(text)
    if not isinstance(text, str):
        raise TypeError(f"a {level}-level vocabulary encodes a str; got {type(text).__name__}")
    if level == "char":
        return list(text)
    if level == "word":
        return _WORD.findall(text)
    raise ValueError(f"tokenisation level must be one of {LEVELS}; got {level!r}")


def detokenize(tokens: list[str], level: str) -> str:
    if level == "tokens":
        return " ".join(tokens)
    if level == "char":
        return "".join(tokens)
    out = ""
    for t in tokens:
        glue = not out or re.fullmatch(r"[.,!?;:)\]'’-]", t) or out.endswith(("(", "[", "'", "’", "-"))
        out += t if glue else " " + t
    return out


class Vocab:
    """Token ↔ id map for one side of a corpus."""

    def __init__(self, tokens: Iterable[str], level: str):
        if level not in LEVELS:
            raise ValueError(f"tokenisation level must be one of {LEVELS}; got {level!r}")
        self.level = level
        self.itos = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, texts: Iterable[str], level: str, min_count: int = 1) -> Vocab:
        counts = Counter(t for s in texts for t in tokenize(s, level))
        return cls(sorted(t for t, c in counts.items() if c >= min_count), level)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, strict: bool = False) -> list[int]:
        toks = tokenize(text, self.level)
        unknown = [t for t in toks if t not in self.stoi]
        if strict and unknown:
            shown = ", ".join(repr(t) for t in dict.fromkeys(unknown))
            raise ValueError(f"{shown} not in the {self.level}-level vocabulary ({len(self)} tokens) of this model")
        return [self.stoi.get(t, UNK) for t in toks]

    def decode(self, ids: Iterable[int]) -> str:
        return detokenize(self.tokens(ids), self.level)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK])
        return out

    def to_json(self) -> str:
        return json.dumps({"level": self.level, "tokens": self.itos}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocab:
        try:
            d = json.loads(text)
            level, tokens = ("tokens", d) if isinstance(d, list) else (d["level"], d["tokens"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"not a vocabulary file: {e}") from None
        if tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError("vocabulary file does not start with the special tokens " + ", ".join(SPECIALS))
        return cls(tokens[len(SPECIALS) :], level)


def read_vocab(text: str):
    """A vocabulary file of a checkpoint: ``Vocab`` (also the captioner's older word lists)
    or the language model's ``CharVocab`` (``{"kind": "chars", ...}``)."""
    from .chars import CharVocab

    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a vocabulary file: {e}") from None
    if isinstance(d, dict) and d.get("kind") == "chars":
        return CharVocab.from_json(text)
    return Vocab.from_json(text)


__all__ = ["read_vocab", "Vocab", "tokenize", "detokenize", "PAD", "BOS", "EOS", "UNK", "SPECIALS", "LEVELS"]
