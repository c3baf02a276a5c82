"""``check`` fails kernels that are wrong only where real kernels differ from small examples: past a
tile of keys, past a cache's length, at large head sizes, in the gradients under a row-varying mask,
and with more queries than keys. Each kernel is written twice, wrong and right, with the same code but
for the defect: the checker fails the wrong one (naming the case and the rule) and passes the right
one, so the failure is the defect's. Correct kernels (attnlab's attention, torch SDPA wrapped to keep
the contract) pass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.testing import check


def _scrubbed(t: torch.Tensor) -> torch.Tensor:
    """``t`` with NaN and inf replaced by zeros (a row that may see such a key is not judged)."""
    return torch.where(torch.isfinite(t), t, torch.zeros((), dtype=t.dtype, device=t.device))


def tiled(q, k, v, mask, *, rescale=True, tile=8):
    """Flash-style online softmax over tiles of ``tile`` keys: a running max, sum and accumulator per
    row; when a tile raises the max, the sum and accumulator so far are rescaled by exp(old - new)."""
    b, h, n, _ = q.shape
    allow = mask.expand(b, h, n, k.shape[-2])
    k, v = _scrubbed(k), _scrubbed(v)
    top = torch.full((b, h, n, 1), -math.inf, dtype=q.dtype)
    total = torch.zeros(b, h, n, 1, dtype=q.dtype)
    acc = torch.zeros(b, h, n, v.shape[-1], dtype=q.dtype) + 0 * (q.sum() + v.sum())  # carries a gradient at k = 0
    for start in range(0, k.shape[-2], tile):
        s = q @ k[..., start:start + tile, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~allow[..., start:start + tile], -math.inf)
        new = torch.maximum(top, s.amax(-1, keepdim=True)).detach()
        safe = torch.where(torch.isfinite(new), new, 0.0)  # a row with no allowed key so far
        if rescale:
            fix = torch.exp(top - safe)
            total, acc = total * fix, acc * fix
        p = torch.exp(s - safe)
        total = total + p.sum(-1, keepdim=True)
        acc = acc + p @ v[..., start:start + tile, :]
        top = new
    return acc / torch.where(total > 0, total, 1.0)


def last_keys(q, k, v, mask, *, keep=6):
    """A cache that keeps only the last ``keep`` keys and values (and their mask columns)."""
    return attnlab.attention(q, k[..., -keep:, :], v[..., -keep:, :], mask=mask[..., -keep:])[0]


def head_size_scale(q, k, v, mask, *, right_up_to=4):
    """1/√d up to head size ``right_up_to``, 1/d above it."""
    d = q.shape[-1]
    return attnlab.attention(q, k, v, mask=mask, scale=d**-0.5 if d <= right_up_to else 1 / d)[0]


def scrubs_keys(q, k, v, mask, *, only_unused=True):
    """The output is right with NaN anywhere masked (masked weights are exact zeros and non-finite values
    are zeroed), but ``only_unused`` zeroes only the keys no row may attend (padding): a NaN in a key
    that a later row may attend gives 0 · NaN in the gradient of q at every earlier row."""
    b, h, n, _ = q.shape
    allow = mask.expand(b, h, n, k.shape[-2])
    keys = torch.where(allow.any(-2)[..., None], k, 0.0) if only_unused else _scrubbed(k)
    s = (q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allow, -math.inf)
    return torch.where(allow, s.softmax(-1), 0.0) @ _scrubbed(v)


def causal_by_offset(q, k, v, is_causal, *, clamp=True):
    """A bottom-right causal mask (the last query sees every key) from the offset k - q; ``clamp``
    clamps that offset at 0, which is top-left aligned when there are more queries than keys."""
    n, m = q.shape[-2], k.shape[-2]
    if not is_causal:
        return attnlab.attention(q, k, v)[0]
    offset = max(m - n, 0) if clamp else m - n
    return attnlab.attention(q, k, v, mask=torch.ones(n, m, dtype=torch.bool).tril(offset))[0]


def textbook_bottom_right(q, k, v, is_causal):
    """masked_fill(-inf), softmax, @ v on scrubbed keys and values, with a bottom-right causal mask:
    a row that sees no key gives NaN."""
    n, m = q.shape[-2], k.shape[-2]
    allow = torch.ones(n, m, dtype=torch.bool).tril(m - n if is_causal else m)
    s = q @ _scrubbed(k).transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(~allow, -math.inf).softmax(-1) @ _scrubbed(v)


TAG = " [float32, cpu]"
# (wrong, right, signature, check's options, the failed case and rule, the smallest input that shows it)
DEFECTS = {
    "flash tiles without rescaling": (
        lambda *a: tiled(*a, rescale=False), tiled, "qkv_mask", {},
        "values", "differs from the reference", "b=2 h=2 q=9 k=17 d=8"),
    "a cache of the last 6 keys": (
        last_keys, lambda *a: last_keys(*a, keep=10**6), "qkv_mask", {},
        "values", "differs from the reference", "b=2 h=2 q=9 k=17 d=8"),
    "a scale wrong above head size 4": (
        head_size_scale, lambda *a: head_size_scale(*a, right_up_to=math.inf), "qkv_mask", {},
        "values", "differs from the reference", "b=2 h=2 q=9 k=17 d=8"),
    "a NaN future key in earlier rows' gradients": (
        scrubs_keys, lambda *a: scrubs_keys(*a, only_unused=False), "qkv_mask", {},
        "causal", "a NaN in a future key reached the gradient of q at an earlier row", "b=1 h=1 q=2 k=2 d=1"),
    "bottom-right alignment clamped": (
        causal_by_offset, lambda *a: causal_by_offset(*a, clamp=False), "qkv_causal", {"causal": "bottom_right"},
        "causal alignment (q > k)", "the causal mask looks top-left aligned", "b=1 h=1 q=3 k=1 d=1"),
}


@pytest.mark.parametrize("defect", DEFECTS)
def test_a_kernel_wrong_only_at_real_sizes_or_masks_fails_and_its_fixed_twin_passes(defect):
    wrong, right, signature, options, case, rule, shape = DEFECTS[defect]
    report = check(wrong, signature=signature, **options)
    assert rule in report.rules(), str(report)
    (failure,) = [f for f in report.failures if f.rule == rule and f.case == case + TAG]
    assert failure.shape() == shape
    assert check(right, signature=signature, **options).ok


def test_rows_that_see_no_key_under_a_bottom_right_mask_must_be_zero():
    report = check(textbook_bottom_right, signature="qkv_causal", causal="bottom_right")
    assert [(f.case, f.message, f.shape()) for f in report.failures] == [
        ("causal alignment (q > k)" + TAG, "a fully masked row gives NaN", "b=1 h=1 q=3 k=1 d=1")]


def test_attnlab_attention_and_sdpa_kept_to_the_contract_pass_every_case():
    def sdpa(q, k, v, mask):
        return F.scaled_dot_product_attention(q, _scrubbed(k), _scrubbed(v), attn_mask=mask)

    def sdpa_causal(q, k, v, is_causal):
        return F.scaled_dot_product_attention(q, _scrubbed(k), _scrubbed(v), is_causal=is_causal)

    for fn, signature, causal in ((lambda q, k, v, m: attnlab.attention(q, k, v, mask=m), "qkv_mask", "top_left"),
                                  (lambda q, k, v, c: attnlab.attention(q, k, v, causal=c), "qkv_causal", "bottom_right"),
                                  (sdpa, "qkv_mask", "top_left"), (sdpa_causal, "qkv_causal", "top_left")):
        report = check(fn, signature=signature, causal=causal)
        assert report.ok, str(report)
    assert len(report.passed) == 6  # the three causal cases and the empty ones: is_causal says no other mask


def test_the_largest_case_has_the_sizes_kernels_tile_at():
    seen = []

    def record(q, k, v, mask):
        seen.append((*q.shape, k.shape[-2]))
        return attnlab.attention(q, k, v, mask=mask)[0]

    check(record, cases=("values", "causal alignment (q > k)"), grad=False)
    assert seen == [(2, 2, 130, 128, 257), (2, 2, 258, 128, 130)]  # (b, h, q, d, k): past 128, ragged ends
