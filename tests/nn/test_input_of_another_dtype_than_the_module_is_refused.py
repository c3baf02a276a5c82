"""A float64 input to a float32 module (or float32 to float64) is refused with one DtypeError (a
ValueError and a TypeError) that names both dtypes and the two ways to make them agree; nothing is
cast silently. Under ``torch.autocast`` mixed dtypes are expected and pass. Integer inputs are
refused as not floating point."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab import _checks
from attnlab.nn import AttentionalOutput, SASRec, TransformerDecoderLayer, TransformerEncoderLayer


def _seq(dtype, d=8):
    return (torch.randn(2, 3, d, dtype=dtype),)


def _img(dtype):
    return (torch.randn(2, 4, 5, 5, dtype=dtype),)


def _keyed(dtype):
    return torch.randn(2, 4, dtype=dtype), torch.randn(2, 5, 4, dtype=dtype)


# name → (the module, its inputs at a dtype, the names of what the message reports first)
MODULES = {
    "bahdanau": (lambda: attnlab.create("bahdanau", query_dim=4, key_dim=4, attn_dim=3), _keyed, "query"),
    "luong-general": (lambda: attnlab.create("luong-general", query_dim=4, key_dim=4), _keyed, "query"),
    "luong-concat": (lambda: attnlab.create("luong-concat", query_dim=4, key_dim=4), _keyed, "query"),
    "linear": (lambda: attnlab.create("linear", dim=8, num_heads=2), _seq, "x"),
    "differential": (lambda: attnlab.create("differential", dim=8, num_heads=2), _seq, "x"),
    "mla": (lambda: attnlab.create("mla", dim=8, num_heads=2, kv_latent_dim=4), _seq, "x"),
    "sasrec-block": (lambda: attnlab.create("sasrec-block", dim=8, num_heads=2), _seq, "x"),
    "target-attention": (lambda: attnlab.create("target-attention", dim=4),
                         lambda dt: (torch.randn(2, 4, dtype=dt), torch.randn(2, 5, 4, dtype=dt)), "candidate"),
    "neighborhood-2d": (lambda: attnlab.create("neighborhood-2d", dim=4, num_heads=2, kernel_size=3), _img, "x"),
    "channel": (lambda: attnlab.create("channel", channels=4, reduction=2), _img, "x"),
    "spatial": (lambda: attnlab.create("spatial", kernel_size=3), _img, "x"),
    "cbam": (lambda: attnlab.create("cbam", channels=4, reduction=2, kernel_size=3), _img, "x"),
    "se": (lambda: attnlab.create("se", channels=4, reduction=2), _img, "x"),
    "eca": (lambda: attnlab.create("eca", channels=4, kernel_size=3), _img, "x"),
    "AttentionalOutput": (lambda: AttentionalOutput(4, 3, 5, 7),
                          lambda dt: (torch.randn(2, 4, dtype=dt), torch.randn(2, 3, dtype=dt)), "context"),
    "TransformerEncoderLayer": (lambda: TransformerEncoderLayer(8, 2), _seq, "x"),
    "TransformerDecoderLayer": (lambda: TransformerDecoderLayer(8, 2),
                                lambda dt: (torch.randn(2, 3, 8, dtype=dt), torch.randn(2, 4, 8, dtype=dt)), "x"),
}
# Class names as the message spells them (the registry's names build these classes).
CLASS = {"bahdanau": "AdditiveAttention", "luong-general": "LuongAttention", "luong-concat": "LuongAttention",
         "linear": "LinearAttention", "differential": "DifferentialAttention", "mla": "MultiHeadLatentAttention",
         "sasrec-block": "SASRecBlock", "target-attention": "TargetAttention",
         "neighborhood-2d": "NeighborhoodAttention2D", "channel": "ChannelAttention", "spatial": "SpatialAttention",
         "cbam": "ChannelAttention", "se": "SqueezeExcite", "eca": "ECA"}


def _message(name: str, given: torch.dtype, own: torch.dtype) -> str:
    first = MODULES[name][2]
    return (f"{first} has dtype {given}, but {CLASS.get(name, name)}'s parameters are {own}; convert the input "
            f"({first}.to({own})) or the module (module.to({given}))")


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("own,given", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_an_input_of_another_dtype_is_one_error_naming_both(name, own, given):
    make, inputs, _ = MODULES[name]
    m = make().to(own)
    with pytest.raises(_checks.DtypeError) as e:
        m(*inputs(given))
    assert str(e.value) == _message(name, given, own)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TypeError)


@pytest.mark.parametrize("name", list(MODULES))
def test_the_module_runs_at_its_own_dtype_and_under_autocast(name):
    make, inputs, _ = MODULES[name]
    torch.manual_seed(0)
    m = make()
    out = m(*inputs(torch.float32))
    first = out[0] if isinstance(out, tuple) else out
    assert first.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the matmuls cast; mixed dtypes are expected here
        m(*inputs(torch.bfloat16))


@pytest.mark.parametrize("name", ["linear", "mla", "channel", "eca", "AttentionalOutput"])
def test_an_integer_input_is_refused_as_not_floating(name):
    make, inputs, _ = MODULES[name]
    ints = tuple(t.long() for t in inputs(torch.float32))
    with pytest.raises(_checks.DtypeError) as e:
        make()(*ints)
    first = MODULES[name][2]
    assert str(e.value) == (f"{first} must be a floating-point tensor (float16, bfloat16, float32 or float64); "
                            "got dtype torch.int64")


def test_sasrec_score_refuses_states_of_another_dtype():
    model = SASRec(10, 8, 5)
    with pytest.raises(_checks.DtypeError) as e:
        model.score(torch.randn(2, 8, dtype=torch.float64), torch.tensor([[1], [2]]))
    assert str(e.value) == ("states has dtype torch.float64, but SASRec's parameters are torch.float32; convert the "
                            "input (states.to(torch.float32)) or the module (module.to(torch.float64))")


MULTI_HEAD = {"multi-head": {}, "gqa": {"num_kv_heads": 1}, "local": {"window": 2}}


@pytest.mark.parametrize("name", list(MULTI_HEAD))
def test_the_multi_head_family_refuses_it_the_same_way(name):
    m = attnlab.create(name, dim=8, num_heads=2, **MULTI_HEAD[name])
    with pytest.raises(_checks.DtypeError) as e:
        m(torch.randn(2, 3, 8, dtype=torch.float64))
    cls = type(m).__name__
    assert str(e.value) == (f"x has dtype torch.float64, but {cls}'s parameters are torch.float32; convert the input "
                            "(x.to(torch.float32)) or the module (module.to(torch.float64))")
