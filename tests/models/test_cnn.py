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
    assert str(e.value) == "attention must be one of none, se, eca, cbam; got 'gate'"
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
