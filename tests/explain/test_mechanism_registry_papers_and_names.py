"""The registry of worked-example mechanisms as documented: each one's summary, paper, [inputs] and
[params] keys, display flags; the papers cited (authors, year, arXiv link); the names and spellings."""

from __future__ import annotations

import pytest

from attnlab.explain.mechanisms import HEAD_STEPS, KEY_STEPS, MECHANISMS
from attnlab.explain.names import NAMES, WALKTHROUGH_OF, canonical, spellings
from attnlab.explain.papers import PAPERS

QKV = ("query", "keys", "values?", "mask?")
PROJ = ("w_q?", "w_k?", "w_v?", "w_o?", "scale?", "causal?")

# name: (summary, paper, inputs, params, batched, squeeze)
TABLE = {
    "dot": ("Luong dot score qᵀk", "luong", QKV, ("causal?",), False, False),
    "scaled-dot": (
        "scaled dot product qᵀk/√d",
        "vaswani",
        QKV,
        ("scale?", "causal?"),
        False,
        False,
    ),
    "luong-general": (
        "Luong general score qᵀWk",
        "luong",
        QKV,
        ("weight", "causal?"),
        False,
        False,
    ),
    "bahdanau": (
        "Bahdanau additive score vᵀtanh(W_q q + W_k k)",
        "bahdanau",
        QKV,
        ("w_q", "w_k", "v", "causal?"),
        False,
        False,
    ),
    "luong-concat": (
        "Luong concat score vᵀtanh(W[q; k])",
        "luong",
        QKV,
        ("weight", "v", "causal?"),
        False,
        False,
    ),
    "masked": (
        "attention with a mask",
        "vaswani",
        QKV,
        ("scale?", "causal?", "score?"),
        False,
        False,
    ),
    "sparse": (
        "sparse attention: a pattern as a mask",
        "child",
        QKV,
        ("pattern?", "combine?", "scale?", "causal?"),
        False,
        False,
    ),
    "attentional": (
        "Luong attentional output tanh(W_c[c; s] + b_c)",
        "luong",
        QKV,
        ("w_c", "b_c?", "score?", "causal?", "weight?", "w_q?", "w_k?", "v?", "scale?"),
        False,
        False,
    ),
    "self-attention": (
        "self-attention from x with W_q, W_k, W_v",
        "vaswani",
        ("x", "mask?"),
        PROJ,
        True,
        False,
    ),
    "multi-head": (
        "multi-head: split, per head, concat, W_o",
        "vaswani",
        ("x|query", "keys?", "values?", "mask?"),
        ("num_heads", *PROJ),
        True,
        False,
    ),
    "cross": (
        "cross-attention: queries from one sequence, keys from another",
        "vaswani",
        QKV,
        ("num_heads?", *PROJ),
        True,
        False,
    ),
    "channel": (
        "CBAM channel attention",
        "woo",
        ("feature_map",),
        ("w1", "b1?", "w2", "b2?"),
        True,
        True,
    ),
    "spatial": ("CBAM spatial attention", "woo", ("feature_map",), ("weight", "bias?"), True, True),
    "softcap": (
        "logit soft-capping c·tanh(e/c) before the softmax (Gemma 2)",
        "gemma",
        QKV,
        ("cap", "scale?", "causal?"),
        False,
        False,
    ),
    "linear": (
        "linear attention: feature map φ = elu + 1 instead of the softmax",
        "katharopoulos",
        QKV,
        ("causal?",),
        False,
        False,
    ),
    "differential": (
        "differential attention: two softmax maps, A_1 − λ A_2",
        "ye",
        ("query_1", "keys_1", "query_2", "keys_2", "values", "mask?"),
        ("lambda", "scale?", "causal?"),
        False,
        False,
    ),
    "mla": (
        "multi-head latent attention: keys and values up-projected from a cached latent",
        "deepseek",
        ("query", "query_rope", "latents", "key_rope", "mask?"),
        ("w_uk", "w_uv", "num_heads?", "causal?"),
        True,
        False,
    ),
    "gqa": (
        "grouped-query attention: h query heads share h_kv key/value heads",
        "ainslie",
        ("x", "mask?"),
        ("num_heads", "num_kv_heads", *PROJ),
        True,
        False,
    ),
    "neighborhood-2d": (
        "2-D neighbourhood attention: a k × k window on an H × W grid",
        "hassani",
        ("query", "keys", "values?"),
        ("height", "width", "kernel", "dilation?", "scale?"),
        False,
        False,
    ),
    "target-attention": (
        "DIN target attention: an MLP scores each history item against the candidate",
        "zhou",
        ("candidate", "history", "mask?"),
        ("w1", "b1?", "prelu", "w2", "b2?", "normalise?"),
        True,
        True,
    ),
}


def test_the_registry_has_one_entry_per_name_in_order():
    assert list(MECHANISMS) == NAMES == list(TABLE)


@pytest.mark.parametrize("name", list(TABLE))
def test_each_mechanism_is_described_as_documented(name):
    m = MECHANISMS[name]
    assert (m.summary, m.paper, m.inputs, m.params, m.batched, m.squeeze) == TABLE[name]


def test_the_papers_cited():
    want = {
        "bahdanau": ("Bahdanau, Cho, Bengio", 2015, "1409.0473"),
        "luong": ("Luong, Pham, Manning", 2015, "1508.04025"),
        "vaswani": ("Vaswani et al.", 2017, "1706.03762"),
        "child": ("Child, Gray, Radford, Sutskever", 2019, "1904.10509"),
        "woo": ("Woo, Park, Lee, Kweon", 2018, "1807.06521"),
        "gemma": ("Gemma Team", 2024, "2408.00118"),
        "katharopoulos": ("Katharopoulos, Vyas, Pappas, Fleuret", 2020, "2006.16236"),
        "ye": ("Ye et al.", 2024, "2410.05258"),
        "deepseek": ("DeepSeek-AI", 2024, "2405.04434"),
        "ainslie": ("Ainslie et al.", 2023, "2305.13245"),
        "hassani": ("Hassani, Walton, Li, Li, Shi", 2023, "2204.07143"),
        "zhou": ("Zhou et al.", 2018, "1706.06978"),
    }
    got = {k: (p.authors, p.year, p.url) for k, p in PAPERS.items()}
    assert got == {k: (a, y, f"https://arxiv.org/abs/{n}") for k, (a, y, n) in want.items()}
    assert {m.paper for m in MECHANISMS.values()} == set(PAPERS)


def test_the_step_sets_of_display():
    assert KEY_STEPS == {
        "projected_keys",
        "projected_values",
        "key_heads",
        "value_heads",
        "key_features",
        "content_keys",
        "key_groups",
        "value_groups",
    }
    assert HEAD_STEPS == {
        "scores",
        "scaled_scores",
        "masked_scores",
        "weights",
        "context",
        "query_heads",
        "key_heads",
        "value_heads",
        "content_keys",
        "key_groups",
        "value_groups",
    }


@pytest.mark.parametrize(
    "written, name",
    [
        ("multi_head", "multi-head"),
        ("luong-dot", "dot"),
        ("luong_dot", "dot"),
        ("scaled_dot", "scaled-dot"),
        ("neighborhood_2d", "neighborhood-2d"),
        ("no-such", "no-such"),
    ],
)
def test_canonical_reads_underscores_and_walkthrough_names(written, name):
    assert canonical(written) == name


def test_walkthrough_of_and_spellings():
    assert WALKTHROUGH_OF == {"luong-dot": "dot"}
    dot = spellings("dot")
    assert dot[:1] == ["dot"] and "luong-dot" in dot and "luong_dot" in dot
    assert spellings("target-attention")[:2] == ["target-attention", "target_attention"]
    assert len(dot) == len(set(dot))
