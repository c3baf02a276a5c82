"""What ``verify`` says of a wrong claim in DIN's target attention, and a default of latent attention.

- A wrong ``scores`` claim is judged wrong, and the value it shows as the example's own is the one
  worked out by hand in the shipped example (its hidden layer's bias b1 = [0, −1] included):
  scores 1, 0.75, −0.75.
- A multi-head latent example that does not write ``num_heads`` has one head.
"""

from __future__ import annotations

from importlib.resources import files

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
