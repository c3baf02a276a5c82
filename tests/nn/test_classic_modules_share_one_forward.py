"""The classic modules' forward is written once: Bahdanau and Luong share the decoder-side one
(``nn._keyed.keyed_forward``), the dot-product and soft-capped modules the one over a functional call
(``nn._signature.core_forward``); and Bahdanau refuses a query or keys of the wrong width as Luong does."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.additive import AdditiveAttention
from attnlab.nn.dot import DotProductAttention
from attnlab.nn.luong import LuongAttention
from attnlab.nn.softcap import SoftcapAttention


def test_bahdanau_and_luong_share_one_forward_and_dot_and_softcap_another():
    assert AdditiveAttention.forward is LuongAttention.forward
    assert DotProductAttention.forward is SoftcapAttention.forward
    assert AdditiveAttention.forward is not DotProductAttention.forward


@pytest.mark.parametrize("query_width, key_width", [(4, 4), (3, 3)])
def test_bahdanau_refuses_a_query_or_keys_of_the_wrong_width(query_width, key_width):
    module = AdditiveAttention(3, 4, 5)
    q, k = torch.zeros(2, 1, query_width), torch.zeros(2, 5, key_width)
    with pytest.raises(ValueError) as e:
        module(q, k)
    assert str(e.value) == (f"expected query (..., 3) and keys (b, k, 4); got query (2, 1, {query_width}) "
                            f"and keys (2, 5, {key_width})")


def test_the_shared_core_forward_passes_the_modules_own_arguments():
    """softcap with a cap far above the scores is the scaled dot product; dropout only in training."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.rand(2, 3, 5) > 0.3
    want_w = torch.softmax((q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf")), -1).nan_to_num()
    for module in (DotProductAttention(scaled=True, attn_drop=0.5), SoftcapAttention(cap=1e6, attn_drop=0.5)):
        module.eval()
        out, w = module(q, k, v, mask=mask, need_weights=True)
        torch.testing.assert_close(w, want_w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out, want_w @ v, rtol=1e-5, atol=1e-6)
        causal_out, _ = module(q, k[:, :3], v[:, :3], causal=True)
        c = torch.softmax((q @ k[:, :3].transpose(-2, -1) / 2.0).masked_fill(~torch.ones(3, 3).tril().bool(), float("-inf")), -1)
        torch.testing.assert_close(causal_out, c @ v[:, :3], rtol=1e-5, atol=1e-6)
        module.train()
        assert not torch.allclose(module(q, k, v)[0], module(q, k, v)[0])  # dropout draws
