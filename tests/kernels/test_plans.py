"""A plan is a value: built once, held by the caller, used by every call; nothing kept in a module."""

import gc
import importlib
import pkgutil
import weakref

import numpy as np
import pytest
import torch

import attnlab.kernels
from attnlab import kernels as K
from attnlab import patterns as P
from attnlab.kernels import plans


def _ref(q, k, v, allow, scale):
    """float64 NumPy attention over the allowed keys; a row with no key gives zeros."""
    s = np.where(allow, q @ k.swapaxes(-1, -2) * scale, -np.inf)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    tot = e.sum(-1, keepdims=True)
    return np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0) @ v


def _qkv(b=2, h=3, n=37, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3))


PATTERNS = {
    "window": P.sliding_window(3, 1),
    "bigbird": P.sliding_window(2) | P.global_tokens([0, 9]) | P.random_blocks(1, 8, seed=3),
    "strided": P.causal() & (P.sliding_window(4, 0) | P.strided(5)),
}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_a_held_plan_gives_the_patterns_result_against_float64(name):
    pattern, n = PATTERNS[name], 37
    q, k, v = _qkv(n=n)
    real = torch.ones(2, n, dtype=torch.bool)
    real[1, 30:] = False
    held = K.Plan(pattern, n, block=8)
    got, _ = K.block_sparse_attention(q, k, v, held, mask=real)
    again, _ = K.block_sparse_attention(q, k, v, held, mask=real)
    by_pattern, _ = K.block_sparse_attention(q, k, v, pattern, block=8, mask=real)
    allow = pattern.materialize(n).numpy()[None, None] & real.numpy()[:, None, None, :]
    want = _ref(q.numpy(), k.numpy(), v.numpy(), allow, 0.5)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    assert torch.equal(again, got) and torch.equal(by_pattern, got)
    assert all(key[0] == "tiles" for key in held.forms)  # what it built, it holds
    assert bool(held.forms) == (name != "window")  # a window alone needs no tiles (contiguous spans)


def test_a_held_plan_gives_the_gradients_of_the_pattern():
    pattern, n = PATTERNS["bigbird"], 37
    held = K.plan(pattern, n, 8)
    grads = []
    for mask in (held, pattern):
        q, k, v = (t.requires_grad_() for t in _qkv(n=n, seed=2))
        out, _ = K.block_sparse_attention(q, k, v, mask, block=8)
        (out * torch.linspace(-1, 1, 4, dtype=torch.float64)).sum().backward()
        grads.append([t.grad for t in (q, k, v)])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_plan_of_a_pattern_is_one_object_per_length_block_and_device():
    pattern = P.sliding_window(2)
    a = K.plan(pattern, 16, 4)
    assert K.plan(pattern, 16, 4) is a and K.plan(pattern, 16, 4, device=torch.device("cpu")) is a
    assert K.plan(pattern, 17, 4) is not a and K.plan(pattern, 16, 8) is not a
    assert K.Plan(pattern, 16, block=4) is not a  # a plan nothing else holds
    assert set(pattern.kernel_plans) == {(16, 4, "cpu"), (17, 4, "cpu"), (16, 8, "cpu")}


def test_a_plan_built_for_n_refuses_another_n_naming_both():
    held = K.plan(P.causal(), 16, 4)
    q = torch.randn(1, 2, 12, 4)
    with pytest.raises(ValueError, match=r"built for n=16; the tensors have n=12"):
        K.block_sparse_attention(q, q, q, held)
    with pytest.raises(ValueError, match=r"built for n=16; the tensors have n=12"):
        K.weights_for_rows(q, q, held, [0])


def test_a_plan_refuses_another_device_and_another_block():
    held = K.Plan(P.causal(), 8, block=4, device="meta")
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(ValueError, match=r"built for device 'meta'; the tensors are on 'cpu'"):
        K.block_sparse_attention(q, q, q, held)
    with pytest.raises(ValueError, match=r"block=8 was given with a plan built for block=4"):
        K.block_sparse_attention(q, q, q, K.plan(P.causal(), 8, 4), block=8)
    out, _ = K.block_sparse_attention(q, q, q, K.plan(P.causal(), 8, 4), block=4)  # the same block: fine
    assert out.shape == (1, 1, 8, 4)


@pytest.mark.parametrize("bad, msg", [
    (dict(n=-1), "n must be a non-negative integer"), (dict(n=2.0), "n must be a non-negative integer"),
    (dict(block=0), "block must be a positive integer"), (dict(device="gpu!"), "device must be"),
])
def test_plan_arguments_are_checked(bad, msg):
    args = dict(n=8, block=4, device="cpu") | bad
    with pytest.raises(ValueError, match=msg):
        K.Plan(P.causal(), args["n"], block=args["block"], device=args["device"])
    with pytest.raises(ValueError, match="pattern must be an attnlab.patterns.Pattern; got str"):
        K.plan("causal", 8)


def test_a_plan_is_collected_with_its_pattern_and_leaves_the_ops_registry():
    pattern = P.sliding_window(1) | P.strided(3)
    q = torch.randn(1, 1, 12, 4)
    K.block_sparse_attention(q, q, q, pattern, block=4)
    (held,) = pattern.kernel_plans.values()
    number, gone = held.id, weakref.ref(held)
    assert plans.live(number) is held
    del pattern, held
    gc.collect()
    assert gone() is None
    with pytest.raises(KeyError):
        plans.live(number)


def test_a_held_plan_outlives_its_calls_and_goes_when_dropped():
    held = K.Plan(P.causal(), 12, block=4)
    q = torch.randn(1, 1, 12, 4, requires_grad=True)
    out, _ = K.block_sparse_attention(q, q, q, held)
    gone = weakref.ref(held)
    del held
    out.sum().backward()  # the backward still finds the plan: the graph holds it until then
    assert torch.isfinite(q.grad).all()
    del out
    gc.collect()
    assert gone() is None


# the module globals that may hold containers, and why each is no plan cache
ALLOWED = {
    ("plans", "_LIVE"),  # weak references only: the custom op's number → the live plan
    ("devices", "_COMPILED"),  # the compiled flex_attention function (one, no mask in it)
    # the functional neighbourhood's pattern per grid size (bounded): under torch.compile the pattern
    # cannot be built inside the traced code, and the grid's sizes are known only at the call
    ("neighborhood", "_GRIDS"),
    ("devices", "ATTEND"),  # the backends by name (functions)
}


def test_no_kernels_module_keeps_a_cache_of_plans_masks_or_patterns():
    found = set()
    for info in pkgutil.iter_modules(attnlab.kernels.__path__):
        mod = importlib.import_module(f"attnlab.kernels.{info.name}")
        for name, value in vars(mod).items():
            assert not hasattr(value, "cache_info"), f"kernels.{info.name}.{name} is a functools cache"
            if isinstance(value, (dict, set, list, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
                if name not in ("__all__", "__path__") and not name.startswith("__"):
                    found.add((info.name, name))
    assert found <= ALLOWED, found - ALLOWED
    assert not any(isinstance(v, weakref.WeakKeyDictionary) for _, v in vars(plans).items())


def test_a_plans_counts_are_the_patterns_tiles_and_pairs():
    pattern, n, B = P.causal(), 10, 4
    held = K.plan(pattern, n, B, 6)  # warm: the tiles for b·h = 6
    allow = np.tril(np.ones((n, n), dtype=bool))
    pad = np.zeros((12, 12), dtype=bool)
    pad[:n, :n] = allow
    tiles = pad.reshape(3, B, 3, B).any(axis=(1, 3))
    assert held.nnz_blocks == int(tiles.sum()) == 6 and held.allowed == int(allow.sum()) == 55
    assert list(held.forms) == [("tiles", "whole", 6)]  # the counts came from the held tiles
    assert held.n_blocks == 3
