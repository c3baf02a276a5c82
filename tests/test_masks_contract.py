"""Edges of attnlab.masks and masked_softmax found by mutation testing (make mutation).

Empty lengths, the exact error messages, the device and dtype a mask is built on,
and the dtype that ``combine`` and ``to_bias`` return.
"""

import pytest
import torch

from attnlab import masks
from attnlab.functional.softmax import masked_softmax


def test_padding_edges():
    assert masks.padding(torch.tensor([], dtype=torch.long)).shape == (0, 0)
    assert masks.padding(torch.tensor([], dtype=torch.long), max_len=3).shape == (0, 3)
    assert masks.padding([0, 2]).tolist() == [[False, False], [True, True]]
    with pytest.raises(ValueError) as e:
        masks.padding([2, -1])
    assert str(e.value) == "lengths must be >= 0; got [2, -1]"


def test_causal_edges_and_device():
    assert masks.causal(0).shape == (0, 0)
    assert masks.causal(0, 3).shape == (0, 3) and masks.causal(3, 0).shape == (3, 0)
    assert masks.causal(2, 3).tolist() == [[True, True, False], [True, True, True]]
    for q, k in ((-1, 2), (2, -1)):
        with pytest.raises(ValueError) as e:
            masks.causal(q, k)
        assert str(e.value) == f"lengths must be >= 0; got q_len={q}, k_len={k}"
    assert masks.causal(3, 4, device="meta").device.type == "meta"  # built where asked, not on the CPU


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_to_bias_dtype_and_device(dtype):
    m = torch.tensor([[True, False]])
    b = masks.to_bias(m, dtype)
    assert b.dtype == dtype and b.tolist() == [[0.0, float("-inf")]]
    assert masks.to_bias(m.to("meta"), dtype).device.type == "meta"
    f = torch.tensor([[0.5, -1.0]])
    assert masks.to_bias(f, dtype).dtype == dtype


def test_combine_keeps_the_float_dtype_and_names_shapes():
    bias = torch.tensor([[0.5, -1.0, 0.0]], dtype=torch.float64)
    keep = torch.tensor([[True, True, False]])
    for args in ((bias, keep), (keep, bias), (keep, None, bias)):
        out = masks.combine(*args)
        assert out.dtype == torch.float64
        assert out.tolist() == [[0.5, -1.0, float("-inf")]]
    assert masks.combine(keep, bias.half()).dtype == torch.float16
    assert masks.combine(bias.half(), keep).dtype == torch.float16  # the bool mask's bias in the float's dtype
    with pytest.raises(ValueError) as e:
        masks.combine(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
    assert str(e.value) == "masks do not broadcast together: (2, 3), (4)"


def test_masked_softmax_input_checks():
    torch.testing.assert_close(masked_softmax(torch.zeros(4)), torch.full((4,), 0.25))  # 1-d is fine
    with pytest.raises(ValueError) as e:
        masked_softmax(torch.tensor(1.0))
    assert str(e.value) == "scores must have at least 1 dimensions; got shape ()"
    with pytest.raises(ValueError, match="^scores must be a torch.Tensor; got list$"):
        masked_softmax([1.0, 2.0])


def test_combine_adds_biases_of_different_dtypes_in_the_widest():
    """float16 + float64 biases add in float64 (PyTorch's promotion), whichever comes first: 0.5 + 0.25 by hand."""
    half = torch.tensor([[0.5, float("-inf")]], dtype=torch.float16)
    wide = torch.tensor([[0.25, 1.0]], dtype=torch.float64)
    for args in ((half, wide), (wide, half)):
        out = masks.combine(*args)
        assert out.dtype == torch.float64 and out.tolist() == [[0.75, float("-inf")]]


def test_in_dtype_converts_float_masks_only_and_append_keys_opens_the_new_columns():
    bias = torch.tensor([[0.5, -1.0]], dtype=torch.float16)
    assert masks.in_dtype(bias, torch.float64).dtype == torch.float64
    keep = torch.tensor([[True, False]])
    assert masks.in_dtype(keep, torch.float64) is keep and masks.in_dtype(None, torch.float64) is None
    assert masks.append_keys(keep, 2, 1).tolist() == [[True, False, True]]
    assert masks.append_keys(bias, 2, 2).tolist() == [[0.5, -1.0, 0.0, 0.0]]
    assert masks.append_keys(torch.tensor([[True], [False]]), 2, 1).tolist() == [[True, True, True],
                                                                                [False, False, True]]
    assert masks.append_keys(None, 2, 1) is None
