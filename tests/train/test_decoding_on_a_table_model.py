"""Greedy and beam-search decoding (train.decode) on a model whose next-token probabilities are a
table written here: the tokens, the summed log-probabilities, where each stops, the length
normalisation and the attention rows kept (padding cut), all worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.data.vocab import BOS, EOS
from attnlab.train.decode import DECODERS, Hypothesis, beam_search, greedy

A, B = 4, 5  # two word tokens after the specials (pad, bos, eos, unk)
V = 6


def _table(rows: dict[int, dict[int, float]]) -> torch.Tensor:
    """Log-probabilities: row = previous token, column = next token (missing entries impossible)."""
    t = torch.full((V, V), float("-inf"))
    for prev, probs in rows.items():
        for tok, p in probs.items():
            t[prev, tok] = math.log(p)
    return t


# Sentence kind 1 (first source token A): greedy takes A (0.5) then EOS (0.4): 0.2 in all; B then
# EOS is 0.4 * 0.9 = 0.36, which a beam of two finds.
T1 = _table(
    {
        BOS: {A: 0.5, B: 0.4, EOS: 0.1},
        A: {EOS: 0.4, A: 0.3, B: 0.3},
        B: {EOS: 0.9, A: 0.05, B: 0.05},
        EOS: {EOS: 1.0},
    }
)
# Sentence kind 2 (first source token B): B after B forever (0.7), A then EOS at once (0.3).
T2 = _table(
    {BOS: {B: 0.6, A: 0.3, EOS: 0.1}, A: {EOS: 1.0}, B: {B: 0.7, EOS: 0.3}, EOS: {EOS: 1.0}}
)
COLUMN = {BOS: 0, A: 1, B: 2, EOS: 0}  # the source position each previous token "attends" to


class TableModel:
    """The step interface of attnlab.models.Seq2Seq over the two tables; the attention of a step is
    one-hot at ``COLUMN[previous token]`` (float16, to see it come back as float32)."""

    def __init__(self, weights: bool = True, t2: torch.Tensor = T2):
        self.weights, self.t2 = weights, t2
        self.calls = 0

    def start(self, src, src_mask):
        return {"first": src[:, 0], "mask": src_mask}, {
            "n": torch.zeros(src.shape[0]),
            "nothing": None,
        }

    def step(self, memory, state, y):
        self.calls += 1
        logits = torch.where((memory["first"] == B)[:, None], self.t2[y], T1[y])
        cols = torch.tensor([COLUMN[int(t)] for t in y])
        w = (
            torch.nn.functional.one_hot(cols, memory["mask"].shape[1]).half()
            if self.weights
            else None
        )
        assert state["nothing"] is None
        return logits, {"n": state["n"] + 1, "nothing": None}, w


SRC = torch.tensor([[A, 7, 8], [B, 7, 0]])  # the second sentence has two tokens and a pad
MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_greedy_takes_each_most_probable_token_and_stops_at_eos_or_the_guard():
    h1, h2 = greedy(TableModel(), SRC, MASK, max_len=3)
    assert (h1.tokens, h1.ended) == ([A], True)
    assert h1.score == pytest.approx(math.log(0.5 * 0.4), abs=1e-6)  # nothing added once it ended
    assert (h2.tokens, h2.ended) == ([B, B, B], False)
    assert h2.score == pytest.approx(math.log(0.6 * 0.7 * 0.7), abs=1e-6)
    # a row per step (one more for EOS when it ended), the source's padding cut, in float32
    assert h1.weights.dtype == torch.float32 and h1.weights.tolist() == [[1, 0, 0], [0, 1, 0]]
    assert h2.weights.tolist() == [[1, 0], [0, 0], [0, 0]]  # B attends to position 2: padding


def test_greedy_stops_as_soon_as_every_sentence_ended():
    m = TableModel()
    (h,) = greedy(m, SRC[:1], MASK[:1], max_len=50)
    assert h.tokens == [A] and m.calls == 2
    (h,) = greedy(TableModel(), SRC[:1], MASK[:1], max_len=1)  # the guard cuts before EOS
    assert (h.tokens, h.ended, h.weights.shape) == ([A], False, (1, 3))
    assert h.score == pytest.approx(math.log(0.5), abs=1e-6)


def test_beam_search_keeps_the_better_second_choice_greedy_drops():
    h1, h2 = beam_search(TableModel(), SRC, MASK, beam=2, max_len=3)
    assert (h1.tokens, h1.ended) == ([B], True)
    assert h1.score == pytest.approx(math.log(0.4 * 0.9), abs=1e-6)
    assert h1.weights.tolist() == [
        [1, 0, 0],
        [0, 0, 1],
    ]  # the rows of its own history, not greedy's
    # kind 2: after 3 steps A,EOS (0.3) beats B,B,B (0.6 * 0.7 * 0.7 = 0.294) by summed log-probability
    assert (h2.tokens, h2.ended) == ([A], True)
    assert h2.score == pytest.approx(math.log(0.3), abs=1e-6)
    assert h2.weights.tolist() == [[1, 0], [0, 1]]


def test_beam_search_divides_by_length_to_the_alpha():
    """alpha = 1: A,EOS has length 2 (the EOS counts, the free EOS after it not): log 0.3 / 2 = -0.602;
    B,B,B has length 3: log 0.294 / 3 = -0.408, so the unfinished one wins; its score stays unnormalised."""
    _, h2 = beam_search(TableModel(), SRC, MASK, beam=2, max_len=3, alpha=1.0)
    assert (h2.tokens, h2.ended) == ([B, B, B], False)
    assert h2.score == pytest.approx(math.log(0.294), abs=1e-6)
    _, h2 = beam_search(TableModel(), SRC, MASK, beam=2, max_len=3, alpha=0.5)  # -0.851 vs -0.707
    assert h2.tokens == [B, B, B]


def test_beam_search_stops_when_every_beam_ended_and_one_beam_is_greedy():
    m = TableModel()
    beam_search(m, SRC[:1], MASK[:1], beam=2, max_len=50)
    assert m.calls == 2  # both beams (B,EOS and A,EOS) end at the second step
    g = greedy(TableModel(), SRC, MASK, max_len=3)
    b1 = beam_search(TableModel(), SRC, MASK, beam=1, max_len=3)
    assert [(h.tokens, h.ended) for h in b1] == [(h.tokens, h.ended) for h in g]
    assert [h.score for h in b1] == pytest.approx([h.score for h in g], abs=1e-6)
    assert all(torch.equal(x.weights, y.weights) for x, y in zip(b1, g))


def test_a_model_without_attention_gives_no_weights_and_the_defaults():
    (h,) = greedy(TableModel(weights=False), SRC[:1], MASK[:1])
    (k,) = beam_search(TableModel(weights=False), SRC[:1], MASK[:1])  # four beams by default
    assert h.weights is None and k.weights is None and k.tokens == [B]
    assert Hypothesis([1], 0.0, None).ended is True
    assert DECODERS == {"greedy": greedy, "beam": beam_search}


def test_the_default_guard_is_a_hundred_tokens():
    forever = T2.clone()
    forever[B, EOS], forever[B, B] = (
        float("-inf"),
        0.0,
    )  # B after B for sure: only the guard stops it
    src = torch.tensor([[B, 7, 8]])
    (h,) = greedy(TableModel(t2=forever), src, torch.ones_like(src, dtype=torch.bool))
    assert len(h.tokens) == 100 and not h.ended
    (k,) = beam_search(TableModel(t2=forever), src, torch.ones_like(src, dtype=torch.bool), beam=1)
    assert len(k.tokens) == 100 and not k.ended


def test_shapes_and_sizes_are_refused_in_words():
    with pytest.raises(ValueError) as err:
        greedy(TableModel(), SRC[0], MASK[0])
    assert str(err.value) == "src and src_mask must both be (b, s); got (3,) and (3,)"
    with pytest.raises(ValueError) as err:
        beam_search(TableModel(), SRC, MASK[:, :2])
    assert str(err.value) == "src and src_mask must both be (b, s); got (2, 3) and (2, 2)"
    with pytest.raises(ValueError) as err:
        beam_search(TableModel(), SRC, MASK, max_len=0)
    assert str(err.value) == "max_len must be >= 1; got 0"
    with pytest.raises(ValueError) as err:
        beam_search(TableModel(), SRC, MASK, beam=0)
    assert str(err.value) == "beam must be >= 1; got 0"
    assert beam_search(TableModel(), SRC[:1], MASK[:1], beam=1, max_len=1)[0].tokens == [A]
