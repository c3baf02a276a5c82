"""Module arguments that make no sense raise a ValueError naming the argument and the value given:
RoPE / sinusoidal ``base``, RoPE scaling ``factor`` and YaRN's settings, NeighborhoodAttention2D's sizes;
an input of the wrong dtype is a TypeError naming the dtypes."""

from __future__ import annotations

import re

import pytest
import torch

from attnlab.nn import NeighborhoodAttention2D
from attnlab.nn.positional import RotaryEmbedding, SinusoidalPositionalEncoding, sinusoidal_table

BASE = "base must be a finite number > 1 (the wavelength base, e.g. 10000); got "
BASES = [(1, "1"), (1.0, "1.0"), (0.5, "0.5"), (0, "0"), (-2.0, "-2.0"), (float("nan"), "nan"), (float("inf"), "inf"),
         ("10000", "'10000'"), (True, "True")]


@pytest.mark.parametrize("base,shown", BASES)
def test_a_base_that_is_not_a_finite_number_above_one_is_refused(base, shown):
    for make in (lambda: RotaryEmbedding(8, base=base),
                 lambda: RotaryEmbedding(8, base=base, scaling={"type": "ntk", "factor": 2.0}),
                 lambda: SinusoidalPositionalEncoding(8, base=base),
                 lambda: sinusoidal_table(torch.arange(3), 8, base)):
        with pytest.raises(ValueError, match="^" + re.escape(BASE + shown) + "$"):
            make()


@pytest.mark.parametrize("kind", ["linear", "ntk", "dynamic", "yarn"])
@pytest.mark.parametrize("factor,shown", [(float("inf"), "inf"), (float("nan"), "nan"), (0, "0"), (-1.0, "-1.0"),
                                          (0.5, "0.5")])
def test_a_scaling_factor_that_is_not_finite_and_at_least_one_is_refused(kind, factor, shown):
    message = f"scaling['factor'] must be a finite number >= 1 (the context extension); got {shown}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        RotaryEmbedding(8, scaling={"type": kind, "factor": factor, "original_max_position": 64})


YARN = {"type": "yarn", "factor": 2.0, "original_max_position": 64}
BAD_YARN = [
    ({"beta_fast": 1.0, "beta_slow": 32.0}, "scaling['beta_fast'] must be greater than scaling['beta_slow'] (the fast "
                                             "dims rotate more often); got beta_fast=1, beta_slow=32"),
    ({"beta_fast": 4, "beta_slow": 4}, "scaling['beta_fast'] must be greater than scaling['beta_slow'] (the fast "
                                       "dims rotate more often); got beta_fast=4, beta_slow=4"),
    ({"beta_fast": float("nan")}, "scaling['beta_fast'] must be a finite number > 0 (rotations over L); got nan"),
    ({"beta_fast": float("inf")}, "scaling['beta_fast'] must be a finite number > 0 (rotations over L); got inf"),
    ({"beta_fast": "32"}, "scaling['beta_fast'] must be a finite number > 0 (rotations over L); got '32'"),
    ({"beta_slow": 0}, "scaling['beta_slow'] must be a finite number > 0 (rotations over L); got 0"),
    ({"beta_slow": -1.0}, "scaling['beta_slow'] must be a finite number > 0 (rotations over L); got -1.0"),
    ({"attention_factor": float("nan")},
     "scaling['attention_factor'] must be a finite number > 0 (None for 0.1 ln s + 1); got nan"),
    ({"attention_factor": 0.0}, "scaling['attention_factor'] must be a finite number > 0 (None for 0.1 ln s + 1); got 0.0"),
    ({"original_max_position": 0},
     "scaling type 'yarn' needs 'original_max_position' (the trained context, an int >= 1); got 0"),
    ({"original_max_position": -8},
     "scaling type 'yarn' needs 'original_max_position' (the trained context, an int >= 1); got -8"),
]


@pytest.mark.parametrize("extra,message", BAD_YARN, ids=[m[:60] for _, m in BAD_YARN])
def test_bad_yarn_settings_are_refused_by_name(extra, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        RotaryEmbedding(8, scaling={**YARN, **extra})


def test_a_given_original_length_is_checked_for_every_scaling_type():
    with pytest.raises(ValueError, match=re.escape("scaling type 'linear' needs 'original_max_position' (the trained "
                                                   "context, an int >= 1); got 0")):
        RotaryEmbedding(8, scaling={"type": "linear", "factor": 2.0, "original_max_position": 0})


@pytest.mark.parametrize("head_dim", [8.0, True, 7, 0])
def test_rope_head_dim_must_be_an_even_integer(head_dim):
    with pytest.raises(ValueError, match=re.escape(f"rotary embeddings need an even head_dim; got {head_dim!r}")):
        RotaryEmbedding(head_dim)


def test_valid_settings_still_build_finite_rotations():
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    for rope in (RotaryEmbedding(8, base=2), RotaryEmbedding(8, scaling={**YARN, "beta_fast": 2.5, "beta_slow": 2.0}),
                 RotaryEmbedding(8, scaling={"type": "dynamic", "factor": 1, "original_max_position": 2})):
        assert torch.isfinite(rope(x)).all()


# --- NeighborhoodAttention2D ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,name,shown", [
    (dict(dim=4.0), "dim", "4.0"), (dict(num_heads=2.0), "num_heads", "2.0"),
    (dict(kernel_size=3.0), "kernel_size", "3.0"), (dict(dilation=True), "dilation", "True"),
])
def test_neighborhood_module_sizes_must_be_integers(kwargs, name, shown):
    args = dict(dim=4, num_heads=2, kernel_size=3, dilation=1) | kwargs
    with pytest.raises(ValueError, match=re.escape(f"{name} must be an integer; got {shown}")):
        NeighborhoodAttention2D(**args)


def test_neighborhood_module_refuses_integer_or_other_dtype_maps_naming_them():
    m = NeighborhoodAttention2D(4, 2, kernel_size=3)
    x = torch.randn(1, 4, 3, 3)
    with pytest.raises(TypeError, match=re.escape("x must be a floating-point tensor (float16, bfloat16, float32 or "
                                                  "float64); got dtype torch.int64")):
        m(x.long())
    with pytest.raises(TypeError, match=re.escape("x has dtype torch.float64, but NeighborhoodAttention2D's parameters "
                                                  "are torch.float32; convert the input (x.to(torch.float32)) or the "
                                                  "module (module.to(torch.float64))")):
        m(x.double())
    with pytest.raises(ValueError, match=re.escape("x must be a torch.Tensor; got list")):
        m([[1.0]])
