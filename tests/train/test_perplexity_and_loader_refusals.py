"""Held-out perplexity of a character model whose next-character probabilities are a bigram table
written here (the windows, their count, the nats and the bootstrap interval computed in float64 NumPy),
and every refusal of the one model loader and of the translation split, in full."""

from __future__ import annotations

import inspect
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnlab.data.vocab import Vocab
from attnlab.models import build_model, model_config
from attnlab.train.checkpoint import CheckpointError, save_checkpoint
from attnlab.train.heldout import lm_perplexity, translation_split
from attnlab.train.load import LoadedModel, load_model

rng = random.Random(0)
TEXT = "".join(rng.choice("abcd") for _ in range(400))
VOCAB = Vocab.chars(TEXT)  # U+FFFD, a, b, c, d
P = np.array(
    [
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.05, 0.5, 0.25, 0.1, 0.1],
        [0.05, 0.1, 0.2, 0.3, 0.35],
        [0.1, 0.3, 0.3, 0.2, 0.1],
        [0.04, 0.16, 0.4, 0.2, 0.2],
    ]
)  # P[previous id, next id]


class Bigram(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.config = SimpleNamespace(block_size=block)
        self.table = torch.tensor(np.log(P), dtype=torch.float32)
        self.batches = []

    def forward(self, x):
        self.batches.append(x.shape[0])
        return self.table[x]


def _loaded(block, val_fraction):
    return SimpleNamespace(
        model=Bigram(block),
        config={"train": {"val_fraction": val_fraction}},
        vocabs={"vocab": VOCAB},
    )


def test_perplexity_over_the_held_out_windows_against_numpy():
    """Half of 400 characters held out, block 4: (200 − 1) // 4 = 49 windows, 196 characters scored,
    read 32 windows at a time."""
    loaded = _loaded(4, 0.5)
    got = lm_perplexity(loaded, TEXT, resamples=200, seed=3)
    ids = np.array([VOCAB.encode(c)[0] for c in TEXT[200:]])
    x, y = ids[:196].reshape(49, 4), ids[1:197].reshape(49, 4)
    per_window = -np.log(P[x, y]).sum(1)
    assert (got["characters"], got["windows"]) == (196, 49)
    assert got["perplexity"] == pytest.approx(math.exp(per_window.sum() / 196), rel=1e-6)
    r = np.random.default_rng(3)
    draws = np.array([per_window[r.integers(0, 49, 49)].sum() for _ in range(200)]) / 196
    assert got["low"] == pytest.approx(math.exp(np.percentile(draws, 2.5)), rel=1e-6)
    assert got["high"] == pytest.approx(math.exp(np.percentile(draws, 97.5)), rel=1e-6)
    assert got["low"] < got["perplexity"] < got["high"]
    assert list(got) == ["perplexity", "low", "high", "characters", "windows"]
    assert loaded.model.batches == [32, 17]


def test_perplexity_defaults_and_a_single_window():
    params = inspect.signature(lm_perplexity).parameters
    assert (params["resamples"].default, params["seed"].default) == (1000, 0)
    loaded = _loaded(8, 0.05)  # 20 held out characters: two windows of 8
    got = lm_perplexity(loaded, TEXT)
    ids = np.array([VOCAB.encode(c)[0] for c in TEXT[380:]])
    per_window = -np.log(P[ids[:16].reshape(2, 8), ids[1:17].reshape(2, 8)]).sum(1)
    r = np.random.default_rng(0)
    draws = np.array([per_window[r.integers(0, 2, 2)].sum() for _ in range(1000)]) / 16
    assert got["low"] == pytest.approx(math.exp(np.percentile(draws, 2.5)), rel=1e-6)
    assert got["high"] == pytest.approx(math.exp(np.percentile(draws, 97.5)), rel=1e-6)
    assert (got["characters"], got["windows"]) == (16, 2)


SMALL_GPT = {
    "kind": "gpt",
    "vocab_size": 5,
    "block_size": 8,
    "dim": 8,
    "num_layers": 1,
    "num_heads": 2,
}


def _save(path, tensors, config, vocab=True):
    files = {"vocab.json": Vocab.chars("abcd").to_json()} if vocab else {}
    return save_checkpoint(path, tensors, config, files)


def test_the_loaders_refusals_in_full(tmp_path):
    torch.manual_seed(0)
    model = build_model(SMALL_GPT)
    entry = model_config(model)
    d = _save(tmp_path / "a", model.state_dict(), {"kind": "char-lm"})
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert str(e.value) == f"{d}/config.json has no 'model' entry: not a model checkpoint"
    d = _save(tmp_path / "b", model.state_dict(), {"model": entry})
    with pytest.raises(CheckpointError) as e:
        load_model(d, kind=("seq2seq", "transformer"))
    assert str(e.value) == f"{d} holds a 'gpt' model; expected 'seq2seq' or 'transformer'"
    assert load_model(d, kind=("transformer", "gpt")).kind == "gpt"
    d = _save(tmp_path / "c", model.state_dict(), {"model": {**entry, "kind": "nope"}})
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert str(e.value).startswith(f"{d}/config.json: ") and "nope" in str(e.value)
    sd = dict(list(model.state_dict().items())[:1])  # every other tensor missing: a long error, cut
    d = _save(tmp_path / "d", sd, {"model": entry})
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    msg = str(e.value)
    assert msg.startswith(
        f"the weights in {d}/model.safetensors do not fit the gpt model its config.json describes: "
    )
    assert "\n" not in msg and "  " not in msg
    tail = msg.split("describes: ", 1)[1]
    assert len(tail) == 300 and tail.startswith("Error(s) in loading state_dict")
    bad = {k: v.clone() for k, v in model.state_dict().items()}
    names = [n for n, _ in model.named_parameters()]
    bad[names[1]][0] = float("nan")
    bad[names[2]].fill_(float("inf"))
    d = _save(tmp_path / "e", bad, {"model": entry})
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert str(e.value) == (
        f"{d}/model.safetensors holds NaN or infinite weights (2 tensors, e.g. {names[1]}): a diverged run; "
        "train it again or use an earlier checkpoint"
    )
    d = save_checkpoint(
        tmp_path / "f", model.state_dict(), {"model": entry}, {"vocab.json": '{"level": 3}'}
    )
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert str(e.value).startswith(f"{d}/vocab.json: ")


def test_a_training_checkpoints_prefixed_weights_load_and_old_run_kinds_name_the_model(tmp_path):
    torch.manual_seed(0)
    model = build_model(SMALL_GPT)
    entry = {k: v for k, v in model_config(model).items() if k != "kind"}
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors["optim.0.step"] = torch.tensor(3.0)
    tensors["rng.torch"] = torch.get_rng_state()
    cfg = {"kind": "char-lm", "model": entry, "train": {"steps": 3}}
    d = _save(tmp_path / "t", tensors, cfg)
    torch.manual_seed(1)
    got = load_model(d)
    assert (
        isinstance(got, LoadedModel)
        and got.kind == "gpt"
        and got.path == d
        and not got.model.training
    )
    assert got.config["train"] == {"steps": 3} and set(got.vocabs) == {"vocab"}
    for k, v in model.state_dict().items():
        assert torch.equal(got.model.state_dict()[k], v), k
    cfg["kind"] = "something-else"  # not a run kind the loader knows: no kind to build
    d = _save(tmp_path / "u", model.state_dict(), cfg)
    with pytest.raises(CheckpointError, match=f"^{d}/config.json: "):
        load_model(d)


def test_a_translation_checkpoint_that_does_not_name_its_data_is_refused():
    for data in (None, "numbers", {"n": 5}):
        loaded = SimpleNamespace(
            vocabs={"src_vocab": Vocab(["a"], "char"), "tgt_vocab": Vocab(["b"], "char")},
            config={} if data is None else {"data": data},
            path="runs/t",
        )
        with pytest.raises(ValueError) as e:
            translation_split(loaded, "test")
        assert str(e.value) == "runs/t/config.json does not say which data it was trained on"
