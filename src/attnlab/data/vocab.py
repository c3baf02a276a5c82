"""Tokenisers and the one vocabulary class: character, word or pre-tokenised level, saved as JSON.

Ids 0–3 are the specials ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` for the translation and
caption models. Word-level tokens are runs of letters/digits and single punctuation marks
(``"it's 4."`` → ``it ' s 4 .``); character level keeps every character, spaces included;
``"tokens"`` level takes text already split into a list of tokens (the captioner's captions)
and gives the list back. The character language model's vocabulary (``Vocab.chars(text)``)
is the same class with one special only, the unknown character U+FFFD at id 0: a language
model has no padding, no sentence start and no end.

The file is ``{"level": ..., "tokens": [...]}`` (plus ``"specials": n`` when the first n
tokens are specials other than the four above). Older files still load: the captioner's JSON
list starting with the specials (as ``"tokens"`` level) and the language model's
``{"kind": "chars", "itos": [...]}``. ``encode(..., strict=True)`` raises ``ValueError``
naming the tokens that are not in the vocabulary (the command line uses it, so a typo gets a
clear message).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence

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


UNK_CHAR = "\ufffd"  # the character language model's unknown character (id 0)


class Vocab:
    """Token ↔ id map for one side of a corpus, or a language model's characters.

    ``specials``: the tokens that take the first ids (default the four of the translation and
    caption models). ``pad_id``, ``bos_id``, ``eos_id``, ``unk_id`` are their ids (None where
    a vocabulary has no such special)."""

    def __init__(self, tokens: Iterable[str], level: str, specials: Sequence[str] = SPECIALS):
        if level not in LEVELS:
            raise ValueError(f"tokenisation level must be one of {LEVELS}; got {level!r}")
        self.level = level
        self.specials = list(specials)
        self.itos = self.specials + [t for t in tokens if t not in self.specials]
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        ids = {name: (self.specials.index(tok) if tok in self.specials else None)
               for name, tok in zip(("pad", "bos", "eos", "unk"), SPECIALS)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids["pad"], ids["bos"], ids["eos"], ids["unk"]
        if UNK_CHAR in self.specials:
            self.unk_id = self.specials.index(UNK_CHAR)
        if self.unk_id is None:
            raise ValueError(f"a vocabulary needs an unknown token ({SPECIALS[UNK]} or U+FFFD) among its specials; "
                             f"got {self.specials}")

    @classmethod
    def build(cls, texts: Iterable[str], level: str, min_count: int = 1) -> Vocab:
        counts = Counter(t for s in texts for t in tokenize(s, level))
        return cls(sorted(t for t, c in counts.items() if c >= min_count), level)

    @classmethod
    def chars(cls, text: str) -> Vocab:
        """A character language model's vocabulary: U+FFFD (unknown) at id 0, then the text's
        distinct characters, sorted."""
        if not text:
            raise ValueError("cannot build a character vocabulary from an empty text")
        return cls(sorted(set(text) - {UNK_CHAR}), "char", specials=[UNK_CHAR])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, strict: bool = False) -> list[int]:
        toks = tokenize(text, self.level)
        unknown = [t for t in toks if t not in self.stoi]
        if strict and unknown:
            shown = ", ".join(repr(t) for t in dict.fromkeys(unknown))
            raise ValueError(f"{shown} not in the {self.level}-level vocabulary ({len(self)} tokens) of this model")
        return [self.stoi.get(t, self.unk_id) for t in toks]

    def encode_tensor(self, text: str, *, strict: bool = False):
        """``encode`` as a (n,) long tensor."""
        import torch

        return torch.tensor(self.encode(text, strict=strict), dtype=torch.long)

    def decode(self, ids: Iterable[int]) -> str:
        return detokenize(self.tokens(ids), self.level)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The tokens of ``ids``: up to the end-of-sentence id, without padding and sentence starts;
        an id outside the vocabulary reads as the unknown token."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        skip = {self.pad_id, self.bos_id} - {None}
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in skip:
                out.append(self.itos[i] if 0 <= i < len(self.itos) else self.itos[self.unk_id])
        return out

    def to_json(self) -> str:
        d: dict = {"level": self.level, "tokens": self.itos}
        if self.specials != SPECIALS:
            d["specials"] = len(self.specials)
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocab:
        try:
            d = json.loads(text)
            if isinstance(d, dict) and d.get("kind") == "chars":  # the language model's older files
                itos = d["itos"]
                if not (isinstance(itos, list) and itos and itos[0] == UNK_CHAR):
                    raise ValueError("a character vocabulary file starts with U+FFFD")
                return cls(itos[1:], "char", specials=[UNK_CHAR])
            level, tokens = ("tokens", d) if isinstance(d, list) else (d["level"], d["tokens"])
            n = d.get("specials") if isinstance(d, dict) else None
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"not a vocabulary file: {e}") from None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("not a vocabulary file: 'tokens' must be a list of strings")
        if n is not None:
            if not isinstance(n, int) or not 1 <= n <= len(tokens):
                raise ValueError(f"not a vocabulary file: 'specials' must be a count of leading tokens; got {n!r}")
            return cls(tokens[n:], level, specials=tokens[:n])
        if tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError("vocabulary file does not start with the special tokens " + ", ".join(SPECIALS))
        return cls(tokens[len(SPECIALS) :], level)

    def __repr__(self) -> str:
        return f"Vocab(level={self.level!r}, size={len(self)})"


def read_vocab(text: str) -> Vocab:
    """A vocabulary file of a checkpoint, in any of the formats ``Vocab.from_json`` reads."""
    return Vocab.from_json(text)


__all__ = ["read_vocab", "Vocab", "tokenize", "detokenize", "PAD", "BOS", "EOS", "UNK", "SPECIALS", "LEVELS",
           "UNK_CHAR"]
