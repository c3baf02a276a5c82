"""What the contract costs where the CPU's look-ahead is off (CUDA and every other device).

Run on the ``meta`` device (the path a GPU takes: no host reads), every torch call that reads
the data of query, key or value is recorded (metadata such as ``shape`` is not). Outside the
attention kernel (SDPA) the budget is: nothing without a mask; with ``causal``, two reads and
one write of key and value (a sum for the row flags, ``nan_to_num``); with a padding mask, one
read and one write (``masked_fill`` of the padded rows); the query one read (its sum), and one
more read and a write with a gradient (``nan_to_num``). One query over a cache with ``causal``
has nothing masked, so it costs nothing either; a causal chunk (q < k) uses SDPA's bottom-right
causal kernel, never a dense mask.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import attnlab

METADATA = {"dim", "numel", "is_floating_point", "__get__", "size", "stride", "element_size", "is_contiguous",
            "__len__", "requires_grad", "dtype", "device", "shape", "new_ones", "new_zeros", "new_empty"}  # (no data read)


class DataReads(TorchFunctionMode):
    """Records (function name, bytes of watched tensors among its arguments) for every call that
    reads a watched tensor (or a view of one)."""

    def __init__(self, *watched: torch.Tensor):
        super().__init__()
        self.watched, self.calls, self.masks = watched, [], []

    def _is_watched(self, t: torch.Tensor) -> bool:
        return any(t is w or t._base is w for w in self.watched)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if func is F.scaled_dot_product_attention:
            self.masks.append(kwargs.get("attn_mask"))
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        watched = [t for t in tensors if self._is_watched(t)]
        if watched and name not in METADATA:
            self.calls.append((name, sum(t.numel() * t.element_size() for t in watched)))
        return func(*args, **kwargs)

    def outside_kernel(self) -> list[tuple[str, int]]:
        return [c for c in self.calls if c[0] != "scaled_dot_product_attention"]


def _qkv(q_len=64, k_len=64, grad=False):
    q, k, v = (torch.empty(2, 4, n, 32, device="meta") for n in (q_len, k_len, k_len))
    return q.requires_grad_(grad), k, v


def _run(q, k, v, **kw):
    with DataReads(q, k, v) as rec:
        out, _ = attnlab.attention(q, k, v, **kw)
    assert out.shape == (*q.shape[:-1], v.shape[-1])
    return rec


def _bytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def test_no_mask_reads_nothing_outside_the_kernel():
    q, k, v = _qkv()
    rec = _run(q, k, v)
    assert rec.outside_kernel() == []
    assert [c[0] for c in rec.calls] == ["scaled_dot_product_attention"]


def test_one_query_over_a_cache_with_causal_reads_nothing_and_builds_no_mask():
    q, k, v = _qkv(q_len=1, k_len=4096)
    rec = _run(q, k, v, causal=True)
    assert rec.outside_kernel() == []
    assert rec.masks == [None]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("case", ["causal", "padding", "chunked prefill"])
def test_masked_calls_pass_over_each_input_once(case, grad):
    q_len = 16 if case == "chunked prefill" else 64
    q, k, v = _qkv(q_len=q_len, grad=grad)
    kw = {"mask": torch.ones(2, 1, 1, 64, dtype=torch.bool, device="meta")} if case == "padding" else {"causal": True}
    rec = _run(q, k, v, **kw)
    outside = rec.outside_kernel()
    # causal: key and value summed (a read: the row flags) and cleaned (nan_to_num: read + write); padding:
    # their padded rows set to zero (masked_fill: read + write; the flags are summed from that copy);
    # the query summed, and cleaned as well with a gradient
    kv_reads = 1 if case == "padding" else 2
    assert sum(b for _, b in outside) == kv_reads * _bytes(k, v) + (2 if grad else 1) * _bytes(q), outside
    assert [name for name, _ in outside].count("nan_to_num") == (0 if case == "padding" else 2) + grad
    if case != "padding":  # the kernel's own causal mask: never a dense (q, k) tensor
        mask = rec.masks[0]
        assert mask is None or type(mask).__name__ == "CausalBias", type(mask)


def test_the_device_path_builds_no_score_sized_tensor_for_causal():
    """Every tensor made outside the kernel is at most (b, h, k) or an input's size (no (q, k) mask)."""
    q, k, v = _qkv(q_len=256, k_len=256, grad=True)
    made = []

    class Sizes(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is not F.scaled_dot_product_attention:
                for t in out if isinstance(out, tuple) else (out,):
                    if isinstance(t, torch.Tensor):
                        made.append(t.numel())
            return out

    with Sizes():
        attnlab.attention(q, k, v, causal=True)
    assert max(made) <= q.numel() < 256 * 256 * 2 * 4
