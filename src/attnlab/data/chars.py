"""A character vocabulary: each distinct character of a text is one token.

    vocab = CharVocab.from_text("to be or not")
    ids = vocab.encode("be")          # [id('b'), id('e')]
    vocab.decode(ids) == "be"

Characters not seen when the vocabulary was built map to ``unk`` (the first
id, shown as U+FFFD when decoded) unless ``strict=True``, which raises
``ValueError`` naming the characters. Saved as JSON (``to_json``/``from_json``)
next to a checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import torch

UNK = "\ufffd"


class CharVocab:
    """Sorted distinct characters; id 0 is the unknown character."""

    def __init__(self, chars: Iterable[str]):
        chars = sorted(set(chars) - {UNK})
        if any(len(c) != 1 for c in chars):
            raise ValueError("CharVocab takes single characters")
        self.itos: list[str] = [UNK, *chars]
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        if not text:
            raise ValueError("cannot build a character vocabulary from an empty text")
        return cls(set(text))

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, strict: bool = False) -> list[int]:
        if strict:
            missing = sorted({c for c in text if c not in self.stoi})
            if missing:
                raise ValueError(f"characters not in the vocabulary: {''.join(missing)!r}")
        return [self.stoi.get(c, 0) for c in text]

    def encode_tensor(self, text: str, *, strict: bool = False) -> torch.Tensor:
        return torch.tensor(self.encode(text, strict=strict), dtype=torch.long)

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        n = len(self.itos)
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise ValueError(f"ids out of range 0..{n - 1}: {bad[:5]}")
        return "".join(self.itos[i] for i in ids)

    def to_json(self) -> str:
        return json.dumps({"kind": "chars", "itos": self.itos}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> CharVocab:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("kind") != "chars" or not isinstance(data.get("itos"), list):
            raise ValueError("not a character vocabulary file (expected {'kind': 'chars', 'itos': [...]})")
        vocab = cls(data["itos"][1:])
        if vocab.itos != data["itos"]:
            raise ValueError("character vocabulary file is not in canonical order")
        return vocab

    def __repr__(self) -> str:
        return f"CharVocab(size={len(self)})"


__all__ = ["CharVocab", "UNK"]
