"""A registered mechanism's record says what its call takes (``supports``: a mask, causal=True, weights, a
cache); the contract suite runs exactly those checks on its entry, so the record's claim is what is tested."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.nn.registry import SUPPORTS, Record, record

from .entries import ENTRIES


def _checked(entry) -> set[str]:
    """What the contract suite checks of an entry, in the records' words."""
    words = {"mask": entry.masked, "causal": entry.causal, "weights": "weights" in entry.paths,
             "cache": "cached" in entry.paths}
    return {w for w, on in words.items() if on}


@pytest.mark.parametrize("name", attnlab.available())
def test_the_record_claims_what_its_entry_checks(name):
    assert set(record(name).supports) == _checked(ENTRIES[name])


def test_supports_takes_only_its_words():
    class Probe(attnlab.nn.DotProductAttention):
        pass

    with pytest.raises(ValueError) as e:
        attnlab.nn.registry.add(Record("probe-supports", Probe, supports=frozenset({"mask", "flash"})))
    assert str(e.value) == ("probe-supports: supports takes words of ('mask', 'causal', 'weights', 'cache'); "
                            "got ('flash', 'mask')")
    assert "probe-supports" not in attnlab.available() and SUPPORTS == ("mask", "causal", "weights", "cache")
