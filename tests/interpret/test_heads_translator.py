"""Head importance and ablation on the Transformer translator (encoder self-, decoder self- and
cross-attention), against references computed here: importance against a central finite difference
of the loss in each head's gate (the head's columns of ``out_proj`` scaled by 1 ± ε on a float64 copy),
ablation against zeroing the removed heads' columns of ``out_proj`` by hand on a copy."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from attnlab.interpret import (
    ablation_curve,
    attention_modules,
    gated_loss,
    head_importance,
    plot_ablation,
)
from attnlab.models import Seq2Seq, Seq2SeqConfig, TransformerConfig, TransformerTranslator
from attnlab.nn import MultiHeadAttention

pytestmark = pytest.mark.usefixtures("one_thread")
HEADS = 2


def loss_of(src, mask, tgt_in, tgt_out):
    return lambda m: F.cross_entropy(m(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)


@torch.no_grad()
def value(loss, model) -> float:
    return float(loss(model))


def scaled_copy(model, scales: dict[tuple[int, int], float]):
    """A copy of the model with head h of attention module l multiplied by scales[(l, h)], by hand."""
    twin = copy.deepcopy(model)
    mods = [m for _, m in attention_modules(twin)]
    with torch.no_grad():
        for (layer, head), s in scales.items():
            w = mods[layer].out_proj.weight  # (dim, h·d_h)
            d_h = w.shape[1] // HEADS
            w[:, head * d_h:(head + 1) * d_h] *= s
    return twin


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = TransformerTranslator(TransformerConfig(src_vocab=9, tgt_vocab=10, dim=16, num_heads=HEADS,
                                                    num_encoder_layers=1, num_decoder_layers=2, ffn_dim=32,
                                                    dropout=0.0)).double().eval()
    for prm in model.parameters():  # larger than the init so every head matters
        prm.data.normal_(0, 0.5)
    src = torch.randint(1, 9, (3, 5))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False  # padding at the end of one source sentence
    src[~mask] = 0
    tgt_in, tgt_out = torch.randint(1, 10, (3, 4)), torch.randint(1, 10, (3, 4))
    tgt_out[2, 3] = 0  # and one padded target position
    return model, loss_of(src, mask, tgt_in, tgt_out)


def test_every_attention_module_is_gated(setup):
    model, _ = setup
    names = [n for n, _ in attention_modules(model)]
    assert len(names) == 1 + 2 * 2  # encoder self; decoder self and cross per layer
    assert sum(n.endswith("multihead_attn") for n in names) == 2  # the cross-attention modules


def test_importance_is_the_finite_difference_of_the_loss_in_a_gate(setup):
    model, loss = setup
    imp = head_importance(model, loss=loss)
    assert imp.shape == (5, HEADS)
    eps = 1e-5
    for layer in range(5):
        for head in range(HEADS):
            up = value(loss, scaled_copy(model, {(layer, head): 1 + eps}))
            down = value(loss, scaled_copy(model, {(layer, head): 1 - eps}))
            assert float(imp[layer, head]) == pytest.approx(abs(up - down) / (2 * eps), rel=1e-5, abs=1e-8)
    assert float(imp.min()) > 1e-4  # every head, cross-attention too, moves the loss


def test_ablating_heads_equals_zeroing_their_out_proj_columns(setup):
    model, loss = setup
    order, losses = ablation_curve(model, loss=loss)
    assert len(order) == 10 and sorted(order) == [(la, h) for la in range(5) for h in range(HEADS)]
    assert losses[0] == value(loss, model)  # the first point is the unablated loss
    for k in (1, 4, 10):
        by_hand = value(loss, scaled_copy(model, {lh: 0.0 for lh in order[:k]}))
        assert losses[k] == pytest.approx(by_hand, rel=1e-12, abs=1e-12)
    assert losses[1] != losses[0]
    gates = torch.ones(5, HEADS, dtype=torch.float64)
    gates[order[0]] = 0
    with torch.no_grad():
        assert float(gated_loss(model, gates=gates, loss=loss)) == pytest.approx(losses[1], rel=1e-12)


def test_the_plot_is_written(setup, tmp_path):
    model, loss = setup
    order, losses = ablation_curve(model, loss=loss)
    path = tmp_path / "ablation.png"
    plot_ablation(losses, str(path), labels=[f"{la}.{h}" for la, h in order])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["ablation.png"]  # no temporary file left


def test_bad_calls_say_what_was_expected(setup):
    model, loss = setup
    both = r"^pass either tokens and targets \(the model's own \.loss\) or loss=callable, not both$"
    with pytest.raises(TypeError, match=both):
        head_importance(model, torch.zeros(1, 2), torch.zeros(1, 2), loss=loss)
    with pytest.raises(TypeError, match=both):  # one of the two is already one too many
        head_importance(model, torch.zeros(1, 2), loss=loss)
    neither = r"^pass tokens and targets \(for model\.loss\), or loss=callable\(model\) -> scalar$"
    with pytest.raises(TypeError, match=neither):
        head_importance(model)
    with pytest.raises(TypeError, match=neither):
        head_importance(model, torch.zeros(1, 2))
    with pytest.raises(TypeError, match=r"^loss must be a callable loss\(model\) -> scalar; got int$"):
        head_importance(model, loss=3)
    with pytest.raises(ValueError, match=r"^gates must be \(modules, heads\) = \(5, 2\); got \(2, 2\)$"):
        gated_loss(model, gates=torch.ones(2, 2), loss=loss)
    with pytest.raises(ValueError, match=r"^gates must be \(modules, heads\) = \(5, 2\); got None$"):
        gated_loss(model, loss=loss)
    with pytest.raises(ValueError, match=r"^importance must be \(modules, heads\) = \(5, 2\); got \(2, 3\)$"):
        ablation_curve(model, importance=torch.ones(2, 3), loss=loss)
    rnn = Seq2Seq(Seq2SeqConfig(src_vocab=9, tgt_vocab=10, emb_dim=4, hidden=4, attn_dim=4))
    with pytest.raises(ValueError, match="^Seq2Seq has no attnlab.nn.MultiHeadAttention modules to gate$"):
        head_importance(rnn, loss=loss)
    mixed = torch.nn.ModuleList([MultiHeadAttention(8, 2), MultiHeadAttention(8, 4)])
    with pytest.raises(ValueError, match=r"the same number of heads to share one gate table; got \[2, 4\]$"):
        head_importance(mixed, loss=loss)


def test_ties_in_importance_keep_module_head_order(setup):
    model, loss = setup
    order, _ = ablation_curve(model, importance=torch.zeros(5, 2, dtype=torch.float64), loss=loss)
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (4, 1)]
