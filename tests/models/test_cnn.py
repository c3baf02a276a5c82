"""The small CNN's config: the attention gate's name and the blocks' widths, refused with the reason."""

import pytest
import torch

from attnlab.models import SmallCNN


def test_a_small_cnn_needs_a_known_gate_and_at_least_one_block():
    with pytest.raises(ValueError) as e:
        SmallCNN(widths=())
    assert str(e.value) == "widths must name at least one block"
    with pytest.raises(ValueError) as e:
        SmallCNN(attention="gate")
    assert str(e.value) == "attention must be one of none, cbam, channel, eca, se; got 'gate'"
    m = SmallCNN(widths=(4,), num_classes=3).eval()
    assert m(torch.rand(2, 1, 8, 8)).shape == (2, 3)  # one block is enough


def test_a_block_convolves_without_bias_before_its_batch_norm():
    """conv 3 × 3 (2 → 4 channels, no bias: the batch norm's shift does that) and batch norm (scale and
    shift, 4 each): 2·4·9 + 8 = 80 parameters; a fresh block in eval mode maps a zero image to zero."""
    from attnlab.models.cnn import Block

    block = Block(2, 4, None).eval()
    assert block.conv.bias is None
    assert sum(p.numel() for p in block.parameters()) == 2 * 4 * 9 + 2 * 4
    out, maps = block(torch.zeros(1, 2, 4, 4))
    assert maps is None and out.shape == (1, 4, 2, 2) and torch.equal(out, torch.zeros(1, 4, 2, 2))


def test_a_gate_is_the_registered_module_built_with_the_configs_options_it_takes():
    """The gate is ``attnlab.create(name, channels=C, ...)``: SE takes the reduction (hidden = 8 // 2 = 4),
    ECA no reduction and its adaptive k = ψ(8) = 3 unless a kernel size is given, CBAM both; CBAM's channel
    half alone is a gate too. With one seed the weights are those of the gate made by hand, then the conv."""
    import attnlab
    from attnlab.nn import CBAM, ECA, ChannelAttention, SqueezeExcite

    se = SmallCNN(attention="se", widths=(8,), reduction=2).blocks[0].gate
    assert type(se) is SqueezeExcite and se.hidden == 4
    assert type(eca := SmallCNN(attention="eca", widths=(8,)).blocks[0].gate) is ECA and eca.kernel_size == 3
    assert SmallCNN(attention="eca", widths=(8,), kernel_size=5).blocks[0].gate.kernel_size == 5
    cbam = SmallCNN(attention="cbam", widths=(8,), reduction=4).blocks[0].gate
    assert type(cbam) is CBAM and cbam.spatial.kernel_size == 7 and cbam.channel.hidden == 2
    assert type(SmallCNN(attention="channel", widths=(8,)).blocks[0].gate) is ChannelAttention
    torch.manual_seed(0)
    m = SmallCNN(attention="cbam", widths=(8,), kernel_size=3, reduction=2)
    torch.manual_seed(0)
    by_hand = attnlab.create("cbam", channels=8, reduction=2, kernel_size=3)
    conv = torch.nn.Conv2d(1, 8, 3, padding=1, bias=False)
    for a, b in zip(m.blocks[0].gate.parameters(), by_hand.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(m.blocks[0].conv.weight, conv.weight)
