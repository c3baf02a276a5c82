"""The GPT over one sequence sharded across processes (``GPT.context_parallel``): each rank's logits
are the matching rows of the whole sequence's logits, and the ranks' parameter gradients of their
shares of the loss add up to the whole sequence's gradient.

The reference is the same model, with the same weights, run on the whole sequence in one process
(its attention is checked against float64 NumPy in ``tests/distributed`` and ``tests/nn``). Two gloo
processes, float64, learned, sinusoidal and rotary positions, the zigzag and contiguous layouts.
"""

from __future__ import annotations

import pytest
import torch
from gloo_processes import run_in_processes

from attnlab.models.gpt import GPT, GPTConfig

N, VOCAB = 16, 11
CASES = {
    "learned-zigzag": dict(positional="learned", layout="zigzag", mode="ring"),
    "sinusoidal-zigzag-ulysses": dict(positional="sinusoidal", layout="zigzag", mode="ulysses"),
    "rope-contiguous": dict(positional="rope", layout="contiguous", mode="ring"),
    "learned-contiguous-gqa": dict(positional="learned", layout="contiguous", mode="ring", num_kv_heads=1),
}


def _model(case) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=VOCAB, block_size=N, dim=8, num_layers=2, num_heads=2,
                    num_kv_heads=case.get("num_kv_heads"), positional=case["positional"])
    return GPT(cfg).double()


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (2, N), generator=g), torch.randint(0, VOCAB, (2, N), generator=g)


def _sharded(case):
    """This rank's logits gathered in sequence order, and the sum over ranks of its parameter gradients."""
    import torch.distributed as dist

    from attnlab.distributed import gather, positions, shard

    model = _model(case).context_parallel(mode=case["mode"], layout=case["layout"])
    x, y = _data()
    lay, rank, world = case["layout"], dist.get_rank(), dist.get_world_size()
    pos = positions(N, world, rank, lay)
    logits = model(shard(x, dim=1, layout=lay), positions=pos)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), shard(y, dim=1, layout=lay).flatten(), reduction="sum")
    (loss / y.numel()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    for g in grads.values():
        dist.all_reduce(g)
    return gather(logits.detach(), dim=1, layout=lay), grads


def _all_cases() -> dict:
    return {name: _sharded(case) for name, case in CASES.items()}


@pytest.fixture(scope="module")
def sharded():
    return run_in_processes(_all_cases, world=2)


@pytest.mark.parametrize("name", list(CASES))
def test_sharded_logits_and_gradients_equal_the_whole_sequence(sharded, name):
    model = _model(CASES[name])
    x, y = _data()
    logits = model(x)
    model.loss(x, y).backward()
    got_logits, got_grads = sharded[name]
    torch.testing.assert_close(got_logits, logits.detach(), rtol=0, atol=1e-10)
    assert set(got_grads) == {n for n, _ in model.named_parameters()}
    for n, p in model.named_parameters():
        torch.testing.assert_close(got_grads[n], p.grad, rtol=0, atol=1e-10, msg=f"{name}: gradient of {n}")


def test_positions_are_checked():
    model = _model(CASES["learned-zigzag"])
    x, _ = _data()
    with pytest.raises(ValueError, match=r"positions must be integer \(16,\), one per row of x; got torch.float32"):
        model(x, positions=torch.zeros(N))
    with pytest.raises(ValueError, match=r"positions 0\.\.16 exceed the learned table of max_len=16"):
        model(x, positions=torch.arange(N) + torch.arange(N).eq(N - 1))


def test_rotary_positions_refuse_the_zigzag_layout():
    with pytest.raises(ValueError, match="rope=True only on the contiguous layout"):
        _model(CASES["rope-contiguous"]).context_parallel(layout="zigzag")
