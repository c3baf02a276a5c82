"""Head importance and ablation on the GPT against an independent float64 forward written here:
pre-norm blocks with explicit per-head softmax, where head h's attention weights are multiplied by
a gate (0 = the head's weights masked out). ``attnlab.interpret`` gates the output projection instead;
the two must agree on the loss and on ∂L/∂gate."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.interpret import ablation_curve, gated_loss, head_importance
from attnlab.models.gpt import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_loss(model: GPT, tokens, targets, gates):
    """The GPT's loss, by hand in float64, with attention weights of head (l, h) scaled by gates[l, h]."""
    p = {k: v.detach().double() for k, v in model.state_dict().items()}
    b, n = tokens.shape
    heads = model.config.num_heads
    x = p["tok.weight"][tokens] + p["pos.weight"][:n]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in range(model.config.num_layers):
        pre = f"blocks.{layer}."
        h = F.layer_norm(x, x.shape[-1:], p[pre + "norm1.weight"], p[pre + "norm1.bias"])
        qkv = h @ p[pre + "self_attn.in_proj_weight"].T + p[pre + "self_attn.in_proj_bias"]
        q, k, v = (t.reshape(b, n, heads, -1).transpose(1, 2) for t in qkv.chunk(3, -1))  # (b, h, n, d)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~causal, float("-inf"))
        a = torch.softmax(scores, -1) * gates[layer].view(1, heads, 1, 1)  # (b, h, q, k), head h gated
        ctx = (a @ v).transpose(1, 2).reshape(b, n, -1)
        x = x + ctx @ p[pre + "self_attn.out_proj.weight"].T + p[pre + "self_attn.out_proj.bias"]
        h = F.layer_norm(x, x.shape[-1:], p[pre + "norm2.weight"], p[pre + "norm2.bias"])
        x = x + F.gelu(h @ p[pre + "linear1.weight"].T + p[pre + "linear1.bias"]) @ p[pre + "linear2.weight"].T \
            + p[pre + "linear2.bias"]
    logits = F.layer_norm(x, x.shape[-1:], p["norm.weight"], p["norm.bias"]) @ p["tok.weight"].T
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, dim=16, num_layers=2, num_heads=4))
    for prm in model.parameters():  # larger weights than the 0.02 init so heads matter
        prm.data.normal_(0, 0.4)
    tokens = torch.randint(0, 11, (3, 8))
    targets = torch.randint(0, 11, (3, 8))
    return model, tokens, targets


@torch.no_grad()
def test_removing_a_head_matches_masking_its_weights(setup):
    model, tokens, targets = setup
    ones = torch.ones(2, 4, dtype=torch.float64)
    assert float(gated_loss(model, tokens, targets, ones)) == pytest.approx(float(reference_loss(model, tokens, targets, ones)), abs=1e-5)
    assert float(gated_loss(model, tokens, targets, ones)) == pytest.approx(float(model.loss(tokens, targets)), abs=1e-6)
    for layer, head in [(0, 0), (0, 3), (1, 2)]:
        g = ones.clone()
        g[layer, head] = 0
        ours = float(gated_loss(model, tokens, targets, g))
        ref = float(reference_loss(model, tokens, targets, g))
        assert ours == pytest.approx(ref, abs=1e-5)
        assert abs(ours - float(model.loss(tokens, targets))) > 1e-4  # the head did matter


def test_importance_is_the_gate_gradient(setup):
    model, tokens, targets = setup
    gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    (ref,) = torch.autograd.grad(reference_loss(model, tokens, targets, gates), gates)
    torch.testing.assert_close(head_importance(model, tokens, targets), ref.abs(), atol=1e-5, rtol=1e-4)


def test_ablation_curve(setup):
    model, tokens, targets = setup
    imp = head_importance(model, tokens, targets)
    order, losses = ablation_curve(model, tokens, targets, imp)
    assert ablation_curve(model, tokens, targets) == (order, losses)  # computes the importance itself
    assert len(order) == 8 and sorted(order) == [(la, h) for la in range(2) for h in range(4)]
    assert [float(imp[la, h]) for la, h in order] == sorted(float(v) for v in imp.flatten())
    assert len(losses) == 9 and losses[0] == pytest.approx(model.loss(tokens, targets).item(), abs=1e-6)
    gates = torch.ones(2, 4, dtype=torch.float64)
    for i in (1, 5, 8):  # the loss after removing the first i heads, recomputed by the reference
        gates[:] = 1
        for la, h in order[:i]:
            gates[la, h] = 0
        assert losses[i] == pytest.approx(float(reference_loss(model, tokens, targets, gates)), abs=1e-5)


def test_gates_shape_checked(setup):
    model, tokens, targets = setup
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        gated_loss(model, tokens, targets, torch.ones(4, 2))
