"""attnlab._limits: every config field and numeric flag is checked against one table.

The reference is written here independently: a value passes exactly when it has the declared
type and (for a field of the table) lies in the field's range, finite.
"""

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab._limits import (
    LIMITS,
    MAX_PARAMETERS,
    check_fields,
    check_parameters,
    check_step,
    check_value,
    check_values,
)
from attnlab.models import MODELS, GPTConfig, count_parameters
from attnlab.train.caption import CaptionTrainConfig
from attnlab.train.lm import LMTrainConfig
from attnlab.train.loop import TrainConfig

ANY = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
                st.lists(st.integers(-3, 3), max_size=2))


def _in_range(name: str, v: float) -> bool:
    lim = LIMITS[name]
    lo_ok = v > lim.lo if lim.open_lo else v >= lim.lo
    hi_ok = v < lim.hi if lim.open_hi else v <= lim.hi
    return lo_ok and hi_ok


def _accepts(name: str, v, kind: type) -> bool:
    """The rule, written again: an int field takes an int (not a bool), a float field a finite number."""
    if isinstance(v, bool):
        return False
    if kind is int and not isinstance(v, int):
        return False
    if kind is float and not (isinstance(v, (int, float)) and math.isfinite(v)):
        return False
    return _in_range(name, v)


INT_FIELDS = sorted(n for n in LIMITS if n not in ("lr", "weight_decay", "clip", "val_fraction", "max_seconds",
                                                   "dropout", "temperature"))
FLOAT_FIELDS = ["lr", "weight_decay", "clip", "val_fraction", "max_seconds", "dropout", "temperature"]


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(INT_FIELDS + FLOAT_FIELDS), value=ANY)
def test_a_value_passes_exactly_when_typed_finite_and_in_range(name, value):
    kind = float if name in FLOAT_FIELDS else int
    if _accepts(name, value, kind):
        check_value(name, value, kind)
        return
    with pytest.raises(ValueError) as e:
        check_value(name, value, kind)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{name} must be ") and "got " in msg


@pytest.mark.parametrize("value, words", [(float("nan"), "finite number in [0, 10]; got nan"),
                                          (float("inf"), "finite number in [0, 10]; got inf"),
                                          (-0.5, ">= 0; got -0.5"), (11, "<= 10; got 11"),
                                          (None, "a number in [0, 10], not null; got null"), ("0.1", "a number in [0, 10]; got '0.1'"),
                                          (True, "got True")])
def test_messages_name_field_value_and_range(value, words):
    with pytest.raises(ValueError, match="^weight_decay must be ") as e:
        check_value("weight_decay", value, float)
    assert str(e.value).endswith(words)


def test_optional_and_tuple_fields():
    check_value("num_kv_heads", None, int | None)
    check_value("widths", (16, 32), tuple[int, ...] | None)
    for bad in ([], [16, 0], [16, 2.5], "16"):
        with pytest.raises(ValueError, match="^widths must be "):
            check_value("widths", bad, tuple[int, ...] | None)


def test_a_flag_is_named_by_its_label():
    with pytest.raises(ValueError, match=r"^--top-k must be >= 1; got 0$"):
        check_value("top_k", 0, int | None, label="--top-k")


@pytest.mark.parametrize("cls", [TrainConfig, LMTrainConfig, CaptionTrainConfig])
@pytest.mark.parametrize("field, value", [("lr", float("nan")), ("lr", float("inf")), ("lr", 1e400), ("seed", -1),
                                          ("batch_size", 2**40), ("steps", 2.0), ("batch_size", None)])
def test_every_training_config_checks_itself(cls, field, value):
    if field == "steps" and cls is CaptionTrainConfig:
        field = "epochs"
    with pytest.raises(ValueError, match=f"^{field} must be "):
        cls(**{field: value})


def test_check_values_on_a_mapping_names_where_and_what_is_missing():
    @dataclass
    class C:
        dim: int
        lr: float = 0.1

    with pytest.raises(ValueError, match=r"^config.json: model.dim is missing$"):
        check_values(C, {"lr": 0.1}, "config.json: model.")
    with pytest.raises(ValueError, match=r"^config.json: model.lr must be a finite number"):
        check_values(C, {"dim": 4, "lr": float("-inf")}, "config.json: model.")
    check_fields(C(dim=4))


def test_model_size_is_counted_before_anything_is_allocated():
    # GPT: tied embeddings V·d, learned positions B·d, final LayerNorm 2d; a layer: qkv + out 4d² + 4d, two
    # LayerNorms 4d, FFN d→4d→d 8d² + 5d: by hand, 12d² + 13d per layer
    d, V, B, L = 16, 11, 8, 3
    cfg = GPTConfig(vocab_size=V, block_size=B, dim=d, num_layers=L, num_heads=2)
    assert count_parameters(cfg) == V * d + B * d + 2 * d + L * (12 * d * d + 13 * d)
    for cfg_cls, model_cls in MODELS.values():  # the extrapolation from shallow copies is exact for every model
        fields = {"vocab_size": 7, "src_vocab": 7, "tgt_vocab": 5, "num_layers": 3, "num_encoder_layers": 3,
                  "num_decoder_layers": 2, "layers": 3, "decoder": "transformer"}
        kw = {k: v for k, v in fields.items() if k in cfg_cls.__dataclass_fields__}
        if cfg_cls.__name__ == "Seq2SeqConfig":
            kw.pop("decoder")
        cfg = cfg_cls(**kw)
        built = model_cls(cfg)
        assert count_parameters(cfg) == sum(t.numel() for t in (*built.parameters(), *built.buffers())), cfg_cls
    big = GPTConfig(vocab_size=2**24, block_size=2**20, dim=2**16, num_layers=1024, num_heads=4096)
    assert count_parameters(big) > MAX_PARAMETERS
    with pytest.raises(ValueError, match=r"would have [\d,]+ parameters .* at most [\d,]+"):
        check_parameters(count_parameters(big), "the GPT model")


def test_counting_parameters_imports_no_compiler():
    """Counting runs before every model is built (each load): it must not pull in torch's compiler
    (meta-device arithmetic and normal_ do, seconds on first use)."""
    import subprocess
    import sys

    code = ("import sys, torch; from attnlab.models import GPTConfig, Seq2SeqConfig, count_parameters; "
            "n = count_parameters(GPTConfig(vocab_size=80, block_size=128, dim=128, num_layers=4, num_heads=4, "
            "num_kv_heads=2, positional='rope')); m = count_parameters(Seq2SeqConfig(src_vocab=20000, tgt_vocab=14000)); "
            "print(n, m, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[2] == "False"
    assert int(out[0]) > 700_000 and int(out[1]) > 4_000_000


def test_every_registered_model_has_every_numeric_field_in_the_table():
    import typing

    for cfg_cls, _ in MODELS.values():
        for name, hint in typing.get_type_hints(cfg_cls).items():
            if "int" in str(hint) or "float" in str(hint):
                assert name in LIMITS, f"{cfg_cls.__name__}.{name} has no range in attnlab._limits.LIMITS"


@pytest.mark.parametrize("value", [-1, 1.5, "3", None, True])
def test_a_step_counter_is_a_non_negative_integer(value):
    with pytest.raises(ValueError, match=r"^state.step must be an integer >= 0; got "):
        check_step(value, "state.step")
    assert check_step(7, "state.step") == 7
