"""2-D neighbourhood attention: each argument check word for word, empty grids and batches, a 1 × 1 grid
(the only key is the query's own pixel, so the output is its value), and weights only on request."""

import re

import pytest
import torch

from attnlab.kernels.neighborhood import neighborhood_attention_2d


@pytest.mark.parametrize("bad", ["query", "key", "value"])
def test_neighborhood_names_the_argument_that_is_not_a_five_dimensional_tensor(bad):
    args = {n: torch.zeros(1, 1, 2, 2, 3) for n in ("query", "key", "value")}
    args[bad] = [0.0]
    with pytest.raises(ValueError, match=re.escape(f"{bad} must be a torch.Tensor; got list")):
        neighborhood_attention_2d(args["query"], args["key"], args["value"], kernel=1)
    args[bad] = torch.zeros(1, 2, 2, 3)
    with pytest.raises(ValueError, match=re.escape(f"{bad} must be (b, h, H, W, d); got shape (1, 2, 2, 3)")):
        neighborhood_attention_2d(args["query"], args["key"], args["value"], kernel=1)


@pytest.mark.parametrize("shapes", [
    ((1, 1, 2, 2, 3), (1, 1, 2, 3, 3), (1, 1, 2, 3, 3)),  # query's grid differs from key's and value's
    ((1, 1, 2, 2, 3), (1, 1, 2, 2, 3), (1, 1, 3, 2, 3)),  # only value's grid differs
    ((1, 1, 2, 2, 3), (1, 1, 2, 2, 4), (1, 1, 2, 2, 5)),  # only d differs
])
def test_neighborhood_refuses_shapes_that_disagree(shapes):
    q, k, v = (torch.zeros(*s) for s in shapes)
    shown = ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)
    want = f"query, key (b, h, H, W, d) and value (b, h, H, W, d_v) must share b, h, H, W (and d); got {shown}"
    with pytest.raises(ValueError, match=re.escape(want)):
        neighborhood_attention_2d(q, k, v, kernel=3)


@pytest.mark.parametrize("size", [(2, 3, 0, 4), (2, 3, 4, 0), (2, 0, 4, 4), (0, 3, 4, 4)])
def test_neighborhood_of_an_empty_grid_or_batch_is_empty_with_values_width(size):
    q = torch.zeros(*size, 5)
    v = torch.zeros(*size, 7)
    out, w = neighborhood_attention_2d(q, q, v, kernel=3)
    assert out.shape == (*size, 7) and w is None


def test_neighborhood_of_one_pixel_is_its_value_and_weights_come_only_on_request():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 1, 1, 4, dtype=torch.float64, generator=g) for _ in range(2))
    v = torch.randn(2, 3, 1, 1, 5, dtype=torch.float64, generator=g)
    out, w = neighborhood_attention_2d(q, k, v, kernel=3)
    assert w is None
    torch.testing.assert_close(out, v, atol=1e-12, rtol=0)
    out, w = neighborhood_attention_2d(q, k, v, kernel=3, need_weights=True)
    assert w is not None and w.tolist() == torch.ones(2, 3, 1, 1).tolist()
