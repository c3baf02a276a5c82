"""Held-out translation (train.heldout.translate_examples) on a model whose next-token probabilities
are a table written here, where the best two-token sentence is not the greedy one: ``beam=1`` decodes
greedily, a wider beam finds the better sentence; the hypotheses come back in the examples' order
whatever the batches, with the references and the source lengths."""

from __future__ import annotations

import math

import torch

from attnlab.data.vocab import BOS, EOS, Vocab
from attnlab.train.heldout import translate_examples

VOCAB = Vocab(["a", "b"], "word")  # a = 4, b = 5
A, B = 4, 5


def _table(rows):
    t = torch.full((6, 6), -1e9)
    for prev, probs in rows.items():
        for tok, p in probs.items():
            t[prev, tok] = math.log(p)
    return t


# greedy: a (0.5) then EOS (0.4) = 0.2; the beam finds b then EOS = 0.4 · 0.9 = 0.36
TABLE = _table(
    {
        BOS: {A: 0.5, B: 0.4, EOS: 0.1},
        A: {EOS: 0.4, A: 0.3, B: 0.3},
        B: {EOS: 0.9, A: 0.05, B: 0.05},
        EOS: {EOS: 1.0},
    }
)


class Table(torch.nn.Module):
    def __init__(self, table=TABLE):
        super().__init__()
        self.batches, self.table = [], table

    def start(self, src, src_mask):
        self.batches.append(src.shape[0])
        return {}, {}

    def step(self, memory, state, y):
        return self.table[y], state, None


EXAMPLES = [([A, A, A], [B]), ([A], [A]), ([B, B], [A, B])]


def test_one_beam_is_greedy_and_a_wider_beam_finds_the_better_sentence():
    model = Table()
    hyps, refs, lengths = translate_examples(model, EXAMPLES, VOCAB)
    assert hyps == ["a", "a", "a"] and model.batches == [3]  # one batch of up to 64
    assert refs == ["b", "a", "a b"] and lengths == [3, 1, 2]
    hyps, _, _ = translate_examples(Table(), EXAMPLES, VOCAB, beam=2)
    assert hyps == ["b", "b", "b"]


def test_the_beam_asked_reaches_the_search(monkeypatch):
    from attnlab.train import decode

    seen, search = [], decode.beam_search

    def spy(model, src, mask, *, beam, max_len):
        seen.append((beam, max_len))
        return search(model, src, mask, beam=beam, max_len=max_len)

    monkeypatch.setattr(decode, "beam_search", spy)
    translate_examples(Table(), EXAMPLES, VOCAB, beam=3)
    assert seen == [(3, 2 * 2 + 10)]  # the longest reference has two tokens


# "a b" then the end, whatever the source
TWO = _table({BOS: {A: 0.9, EOS: 0.1}, A: {B: 0.9, EOS: 0.1}, B: {EOS: 1.0}, EOS: {EOS: 1.0}})


def test_batches_of_similar_length_and_results_in_the_examples_order():
    model = Table(TWO)
    examples = [([A] * n, [A] * n) for n in (5, 1, 3, 2, 4)]
    hyps, refs, lengths = translate_examples(model, examples, VOCAB, batch_size=2)
    assert model.batches == [2, 2, 1]
    assert lengths == [5, 1, 3, 2, 4] and refs == [" ".join("a" * n) for n in (5, 1, 3, 2, 4)]
    assert hyps == ["a b"] * 5
