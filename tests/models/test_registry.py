"""One model registry and one loader: every registered model survives save → load_model."""

import pytest
import torch

from attnlab.data.vocab import Vocab
from attnlab.models import MODELS, VOCABS, build_model, model_config
from attnlab.train.checkpoint import CheckpointError, save_checkpoint
from attnlab.train.load import load_model

SMALL = {
    "seq2seq": {"src_vocab": 11, "tgt_vocab": 13, "emb_dim": 8, "hidden": 8},
    "transformer": {"src_vocab": 11, "tgt_vocab": 13, "dim": 8, "num_heads": 2, "num_encoder_layers": 1,
                    "num_decoder_layers": 1, "ffn_dim": 16},
    "gpt": {"vocab_size": 5, "block_size": 8, "dim": 8, "num_layers": 1, "num_heads": 2},
    "captioner": {"vocab_size": 9, "image_size": 16, "widths": [4, 4], "d_model": 8},
    "cnn": {"widths": [4, 8]},
}


def _vocab_files(kind: str) -> dict[str, str]:
    files = {}
    for name in VOCABS[kind]:
        if kind == "gpt":
            files[f"{name}.json"] = Vocab.chars("abcd").to_json()
        elif kind == "captioner":
            files[f"{name}.json"] = Vocab(["a", "b", "c", "d", "e"], "tokens").to_json()
        else:
            files[f"{name}.json"] = Vocab(["x", "y"], "word").to_json()
    return files


def test_every_model_is_registered():
    assert set(MODELS) == {"seq2seq", "transformer", "gpt", "captioner", "cnn"} == set(VOCABS)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_load_model_gives_back_the_saved_weights(kind, tmp_path):
    torch.manual_seed(0)
    model = build_model({"kind": kind, **SMALL[kind]})
    entry = model_config(model)
    assert entry["kind"] == kind
    save_checkpoint(tmp_path / "ck", model.state_dict(), {"model": entry}, files=_vocab_files(kind))
    torch.manual_seed(1)  # a different initialisation: only the file can make them equal
    loaded = load_model(tmp_path / "ck")
    assert loaded.kind == kind and not loaded.model.training
    assert set(loaded.vocabs) == set(VOCABS[kind])
    want, got = model.state_dict(), loaded.model.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_load_model_refuses_another_kind_and_missing_vocab(tmp_path):
    model = build_model({"kind": "gpt", **SMALL["gpt"]})
    save_checkpoint(tmp_path / "ck", model.state_dict(), {"model": model_config(model)}, files=_vocab_files("gpt"))
    with pytest.raises(CheckpointError, match="'gpt' model; expected 'captioner'"):
        load_model(tmp_path / "ck", kind="captioner")
    save_checkpoint(tmp_path / "nv", model.state_dict(), {"model": model_config(model)})
    with pytest.raises(CheckpointError, match="vocab.json"):
        load_model(tmp_path / "nv")


def test_old_lm_checkpoint_without_model_kind_still_loads(tmp_path):
    model = build_model({"kind": "gpt", **SMALL["gpt"]})
    entry = {k: v for k, v in model_config(model).items() if k != "kind"}  # as written before the registry
    save_checkpoint(tmp_path / "ck", model.state_dict(), {"kind": "char-lm", "model": entry}, files=_vocab_files("gpt"))
    assert load_model(tmp_path / "ck").kind == "gpt"


def test_model_config_refuses_an_unregistered_module():
    with pytest.raises(TypeError, match="Linear"):
        model_config(torch.nn.Linear(2, 2))


def test_counting_builds_big_tensors_on_meta_and_small_or_placed_ones_for_real():
    """``_Shapes`` (what ``count_parameters`` builds under): more than 2**16 numbers in all (not per axis)
    goes to meta, drawn or not; a small table, or a tensor made with an explicit device, is made as asked."""
    from attnlab.models import _Shapes

    assert _Shapes.SMALL == 2**16
    with _Shapes():
        wide = torch.zeros(2, 40_000)  # 80,000 numbers, each axis under 2**16
        drawn = torch.randn(300, 300, generator=torch.Generator().manual_seed(0))
        filled = torch.full((3, 30_000), 1.5)
        small = torch.ones(4, 4)
        placed = torch.zeros(300, 300, device="cpu")
    for t, shape in ((wide, (2, 40_000)), (drawn, (300, 300)), (filled, (3, 30_000))):
        assert t.is_meta and t.shape == shape
    assert not small.is_meta and torch.equal(small, torch.ones(4, 4))
    assert placed.device.type == "cpu" and torch.equal(placed, torch.zeros(300, 300))


def test_load_model_refuses_a_vocabulary_of_another_size_than_the_model(tmp_path):
    model = build_model({"kind": "gpt", **SMALL["gpt"]})  # vocab_size 5
    save_checkpoint(tmp_path / "ck", model.state_dict(), {"model": model_config(model)},
                    files={"vocab.json": Vocab.chars("abc").to_json()})  # 4 tokens: U+FFFD, a, b, c
    with pytest.raises(CheckpointError, match=r"ck/vocab.json has 4 tokens, the model 5$"):
        load_model(tmp_path / "ck")
