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
