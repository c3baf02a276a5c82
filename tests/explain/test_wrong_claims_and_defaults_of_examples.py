"""What ``verify`` says of a wrong claim in DIN's target attention, and a default of latent attention.

- A wrong ``scores`` claim is judged wrong, and the value it shows as the example's own is the one
  worked out by hand in the shipped example (its hidden layer's bias b1 = [0, −1] included):
  scores 1, 0.75, −0.75.
- A multi-head latent example that does not write ``num_heads`` has one head.
"""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pytest

from attnlab.explain import parse, run, verify

TARGET = files("attnlab.explain").joinpath("examples/attnlab-target-attention.toml").read_text(encoding="utf-8")


def test_a_wrong_score_claim_shows_the_hand_worked_scores_with_the_bias():
    text = TARGET.replace("value = [1, 0.75, -0.75]", "value = [9, 9, 9]")
    assert text != TARGET
    verdicts = {v.step: v for v in verify(parse(text, "t.toml"))}
    v = verdicts["scores"]
    assert v.status == "wrong"
    assert v.own == pytest.approx([1.0, 0.75, -0.75], abs=1e-12)
    assert v.true == pytest.approx([1.0, 0.75, -0.75], abs=1e-12)


LATENT = """mechanism = "mla"
[inputs]
query = [[1, 0]]
query_rope = [[0, 1]]
latents = [[1, 0], [0, 1]]
key_rope = [[1, 0], [0, 1]]
[params]
w_uk = [[1, 0], [0, 1]]
w_uv = [[1, 0], [0, 1]]
"""


def test_latent_attention_has_one_head_unless_told():
    t = run(parse(LATENT, "l.toml"))
    assert tuple(t["weights"].value.shape) == (1, 1, 1, 2)  # (batch, heads, queries, keys)


CROSS = files("attnlab.explain").joinpath("examples/attnlab-cross-attention.toml").read_text(encoding="utf-8")


def test_a_wrong_weights_claim_shows_the_softmax_of_the_written_scores():
    text = CROSS.replace("value = [0.14, 0.28, 0.58]", "value = [0.9, 0.05, 0.05]")
    assert text != CROSS
    v = {v.step: v for v in verify(parse(text, "c.toml"))}["weights"]
    written = np.array([0.71, 1.41, 2.12])  # the example's rounded scaled scores, the earlier claim
    own = np.exp(written) / np.exp(written).sum()
    assert v.status == "wrong"
    assert v.own == pytest.approx(own.tolist(), abs=1e-12)  # one query, one head: a row of three


def test_latent_attention_recomputes_with_one_head_unless_told():
    text = LATENT + '[[claim]]\nstep = "weights"\nvalue = [0.9, 0.1]\n'
    v = {v.step: v for v in verify(parse(text, "l.toml"))}["weights"]
    assert v.status == "wrong"
    # one head: scores q^C·c_j + q^R·k^R_j = [1 + 0, 0 + 1] for both keys, so equal weights
    np.testing.assert_allclose(v.own, [[0.5, 0.5]], rtol=0, atol=1e-12)
