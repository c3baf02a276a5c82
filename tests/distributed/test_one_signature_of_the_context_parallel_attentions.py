"""The context-parallel attentions share one signature, written once (``distributed.call.ShardedCall``):
``ring_attention`` and ``ulysses_attention`` take exactly its options, ``context_parallel_attention`` them
and ``mode``; an unknown keyword is refused before any process group is needed, naming what is taken."""

from __future__ import annotations

import inspect

import pytest
import torch

from attnlab import patterns as P
from attnlab.distributed import context_parallel_attention, ring_attention, ulysses_attention
from attnlab.distributed.call import ShardedCall

WANT = ("(q, k, v, *, causal: 'bool' = False, pattern: 'Pattern | None' = None, mask: 'torch.Tensor | None' = None, "
        "scale: 'float | None' = None, group: 'Any' = None, layout: 'str' = 'contiguous')")


def test_ring_and_ulysses_have_the_one_signature_and_the_entry_adds_the_mode():
    assert str(inspect.signature(ring_attention)) == WANT
    assert str(inspect.signature(ulysses_attention)) == WANT
    assert str(inspect.signature(context_parallel_attention)) == WANT.replace("*, ", "*, mode: 'str' = 'ring', ")
    assert ring_attention.__name__ == "ring_attention" and "ring_attention(q, k, v, *," in ring_attention.__doc__


@pytest.mark.parametrize("entry", [ring_attention, ulysses_attention, context_parallel_attention])
def test_an_unknown_keyword_is_refused_with_the_names_taken(entry):
    q = torch.zeros(1, 2, 4, 3)
    with pytest.raises(TypeError) as e:
        entry(q, q, q, window=2)
    assert str(e.value) == (f"{entry.__name__}() got an unexpected keyword argument 'window'; it takes q, k, v and "
                            "causal=, pattern=, mask=, scale=, group=, layout=")


def test_the_call_holds_the_options_themselves():
    mask, pattern = torch.ones(1, 4, dtype=torch.bool), P.sliding_window(1, 0)
    call = ShardedCall.of("f", {"mask": mask, "pattern": pattern, "causal": True})
    options = call.options()
    assert options["mask"] is mask and options["pattern"] is pattern
    assert options == {"causal": True, "pattern": pattern, "mask": mask, "scale": None, "group": None,
                       "layout": "contiguous"}
    q = torch.zeros(1, 2, 4, 3)
    assert call.check(q, q, q) is None and ShardedCall(scale=0.5).check(q, q, q) == 0.5
