"""How order enters a GPT: what its first block receives for each ``positional`` choice, against the
sinusoidal table written out in float64 NumPy; and the shape-only build puts a large tensor made with
``size=`` as a keyword on the meta device, like one made with the size as an argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.models import _Shapes
from attnlab.models.gpt import GPT, GPTConfig


def _first_block_input(positional: str, tokens: torch.Tensor) -> tuple[GPT, np.ndarray]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=4, dim=8, num_layers=1, num_heads=2, positional=positional)).eval()
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().double().numpy()))
    with torch.no_grad():
        model(tokens)
    return model, seen[0]


def _sinusoids(n: int, d: int) -> np.ndarray:
    pe = np.zeros((n, d))
    for p in range(n):
        for i in range(0, d, 2):
            angle = p / 10000.0 ** (i / d)
            pe[p, i], pe[p, i + 1] = np.sin(angle), np.cos(angle)
    return pe


def test_sinusoidal_positions_add_the_table_and_are_not_limited_by_block_size():
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])  # 6 > block_size 4: a fixed table has no length limit
    model, x = _first_block_input("sinusoidal", tokens)
    emb = model.tok.weight.detach().double().numpy()[tokens[0].numpy()]
    np.testing.assert_allclose(x[0], emb + _sinusoids(6, 8), rtol=0, atol=1e-6)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_rope_and_alibi_add_nothing_before_the_first_block(positional):
    tokens = torch.tensor([[3, 1, 4, 1]])
    model, x = _first_block_input(positional, tokens)
    assert model.pos is None
    np.testing.assert_array_equal(x[0], model.tok.weight.detach().double().numpy()[[3, 1, 4, 1]])


def test_learned_positions_add_row_p_of_the_table():
    tokens = torch.tensor([[3, 1, 4]])
    model, x = _first_block_input("learned", tokens)
    want = model.tok.weight.detach().double().numpy()[[3, 1, 4]] + model.pos.weight.detach().double().numpy()[:3]
    np.testing.assert_allclose(x[0], want, rtol=0, atol=1e-7)


def test_shape_only_build_sends_a_large_keyword_sized_tensor_to_meta():
    big = _Shapes.SMALL + 1
    with _Shapes():
        by_keyword = torch.zeros(size=(big,))
        by_argument = torch.zeros(big)
        small = torch.zeros(size=(3,))
        filled = torch.full(size=(big,), fill_value=2.0)
    assert by_keyword.is_meta and by_argument.is_meta and filled.is_meta
    assert by_keyword.shape == (big,) and filled.shape == (big,)
    assert not small.is_meta and small.tolist() == [0.0, 0.0, 0.0]
