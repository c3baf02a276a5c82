"""Token-id tensors with padding masks, in length-bucketed batches.

A ``Batch`` holds, for b sentence pairs (shapes: s source length, t target length + 1):

    src       (b, s)  long   source ids, padded with PAD
    src_mask  (b, s)  bool   True on real source tokens (the library's mask convention)
    tgt_in    (b, t)  long   BOS y_1 ... y_n   (decoder input, teacher forcing)
    tgt_out   (b, t)  long   y_1 ... y_n EOS   (what the decoder must predict; PAD = ignore)

Any model with ``forward(src, src_mask, tgt_in) -> logits (b, t, V)`` trains on
these (``attnlab.train.loop``). ``batch_order`` makes the batches of epoch e a
pure function of (seed, e): sentences are sorted by length within buckets of
``bucket`` batches, so a batch holds similar lengths and little padding, and a
resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .vocab import BOS, EOS, PAD, Vocab


@dataclass
class Batch:
    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    @property
    def n_tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device`` (the four tensors moved once, together)."""
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.src_mask, self.tgt_in, self.tgt_out)))


Example = tuple[list[int], list[int]]


def encode_pairs(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab) -> list[Example]:
    """Texts → id lists (unknown tokens become UNK); empty sides are dropped."""
    out = []
    for s, t in pairs:
        si, ti = src_vocab.encode(s), tgt_vocab.encode(t)
        if si and ti:
            out.append((si, ti))
    return out


def pad(seqs: Sequence[Sequence[int]], value: int = PAD) -> torch.Tensor:
    n = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), n), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def source_batch(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Source id lists → (src (b, s), src_mask (b, s))."""
    src = pad(seqs)
    lengths = torch.tensor([len(s) for s in seqs])
    return src, torch.arange(src.shape[1]) < lengths[:, None]


def collate(examples: Sequence[Example]) -> Batch:
    src, src_mask = source_batch([s for s, _ in examples])
    return Batch(src, src_mask, pad([[BOS, *t] for _, t in examples]), pad([[*t, EOS] for _, t in examples]))


def batch_order(examples: Sequence[Example], batch_size: int, *, seed: int, epoch: int, bucket: int = 20) -> list[list[int]]:
    """The batches (lists of example indices) of one epoch, deterministic in (seed, epoch)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    rng = random.Random(seed * 1_000_003 + epoch)
    idx = list(range(len(examples)))
    rng.shuffle(idx)
    chunk = batch_size * bucket
    batches = []
    for i in range(0, len(idx), chunk):
        part = sorted(idx[i : i + chunk], key=lambda j: (len(examples[j][0]), len(examples[j][1])))
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def batches_in_order(examples: Sequence[Example], batch_size: int) -> list[list[int]]:
    """Evaluation batches: sorted by source length (less padding), every example once."""
    idx = sorted(range(len(examples)), key=lambda j: len(examples[j][0]))
    return [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]


__all__ = ["Batch", "Example", "encode_pairs", "pad", "source_batch", "collate", "batch_order", "batches_in_order"]
