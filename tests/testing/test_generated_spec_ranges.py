"""The ranges that ``check(fn, examples=N)`` draws its inputs from, as documented in
``attnlab.testing.generate``: batch 0–3, heads 1–3, queries 0–5, keys 0–6, features 1–4, a seed in
0–2¹⁶, each mask kind a signature can express (all five for a dense mask, none and key padding for a
padding mask, none alone for ``is_causal``) and NaN/inf planted only where a mask leaves keys
unattended. ``hypothesis.find`` shows each edge is drawn and nothing beyond it is."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="needs the testing extra (pip install 'attnlab[testing]')")
from hypothesis import find, settings  # noqa: E402
from hypothesis.errors import NoSuchExample  # noqa: E402

from attnlab.testing.generate import specs  # noqa: E402

FAST = settings(max_examples=200, database=None, deadline=None, derandomize=True)
RANGES = {"b": (0, 3), "h": (1, 3), "q": (0, 5), "k": (0, 6), "d": (1, 4), "seed": (0, 2**16)}


@pytest.mark.parametrize("field", sorted(RANGES))
def test_each_size_reaches_both_ends_of_its_range_and_never_beyond(field):
    lo, hi = RANGES[field]
    strategy = specs("qkv_mask")
    assert getattr(find(strategy, lambda s: getattr(s, field) == lo, settings=FAST), field) == lo
    assert getattr(find(strategy, lambda s: getattr(s, field) >= hi, settings=FAST), field) == hi
    with pytest.raises(NoSuchExample):
        find(strategy, lambda s: not lo <= getattr(s, field) <= hi, settings=FAST)


@pytest.mark.parametrize(
    ("signature", "masks", "plants"),
    [
        ("qkv_mask", {"none", "key padding", "broadcast (q, k)", "random", "fully masked rows"},
         {None, "masked NaN value", "masked inf key"}),
        ("qkv_bias", {"none", "key padding", "broadcast (q, k)", "random", "fully masked rows"},
         {None, "masked NaN value", "masked inf key"}),
        ("qkv_padding", {"none", "key padding"}, {None, "masked NaN value", "masked inf key"}),
        ("qkv_causal", {"none"}, {None}),
    ],
)
def test_each_signature_draws_the_masks_it_can_express_and_plants_only_behind_a_mask(signature, masks, plants):
    strategy = specs(signature)
    for mask in masks:
        assert find(strategy, lambda s, m=mask: s.mask == m, settings=FAST).mask == mask
    for plant in plants:
        assert find(strategy, lambda s, p=plant: s.plant == p, settings=FAST).plant == plant
    with pytest.raises(NoSuchExample):
        find(strategy, lambda s: s.mask not in masks or s.plant not in plants, settings=FAST)
