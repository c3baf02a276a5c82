"""The LaTeX of the steps that are built from other steps: multi-head attention's split into heads, and
differential attention's two softmax maps, each named by its own map A_1, A_2 (written out here)."""

from __future__ import annotations

from attnlab.explain import load, run

SOFTMAX = r"\frac{\exp(e_{ij})}{\sum_{j'} \exp(e_{ij'})}"


def test_the_split_into_heads_names_each_heads_matrix():
    t = run(load("tutorial2-multi-head"))  # two heads
    assert [t[n].latex for n in ("query_heads", "key_heads", "value_heads")] == [
        r"Q_1, \dots, Q_{2}", r"K_1, \dots, K_{2}", r"V_1, \dots, V_{2}"]


def test_differential_attention_names_its_two_maps_and_their_difference():
    t = run(load("attnlab-differential"))
    assert t["weights_1"].latex == "(A_1)_{ij} = " + SOFTMAX
    assert t["weights_2"].latex == "(A_2)_{ij} = " + SOFTMAX
    assert t["weights"].latex == r"\alpha = A_1 - \lambda A_2"
    assert t["weights_1"].formula.startswith("(A_1)_ij") and t["weights_2"].formula.startswith("(A_2)_ij")
