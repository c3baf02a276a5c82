"""The bottleneck experiment's training set-up, with the training itself replaced by a recorder: every model
gets the same budget and seed, no validation or checkpoints, and five progress intervals per run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import attnlab.experiments.bottleneck as bottleneck
from attnlab.experiments.bottleneck import BottleneckConfig
from attnlab.train.loop import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("steps, log_every", [(30, 6), (4, 1)])  # steps // 5, at least 1
def test_every_model_gets_the_same_training_config(monkeypatch, steps, log_every):
    calls = []

    def recorder(model, train, valid, cfg, *, progress, desc):
        calls.append((desc, type(model).__name__, len(train), valid, cfg, progress))
        return SimpleNamespace(train_loss=1.5, tokens_per_s=10.0)

    monkeypatch.setattr(bottleneck, "train", recorder)
    cfg = BottleneckConfig.quick(n=120, max_digits=3, steps=steps, batch_size=8, test_size=3,
                                 decoders=("none", "luong", "transformer"), lr=0.01, tf_lr=0.001, seed=5)
    res = bottleneck.run(cfg, None, progress=True)
    same = dict(steps=steps, batch_size=8, seed=5, eval_every=0, save_every=0, log_every=log_every)
    want = {"none": TrainConfig(lr=0.01, **same), "luong": TrainConfig(lr=0.01, **same),
            "transformer": TrainConfig(lr=0.001, **same)}
    assert [c[0] for c in calls] == ["none", "luong", "transformer"]
    assert [c[1] for c in calls] == ["Seq2Seq", "Seq2Seq", "TransformerTranslator"]
    assert len({c[2] for c in calls}) == 1 and all(c[3] == [] and c[5] is True for c in calls)
    for desc, _, _, _, tcfg, _ in calls:
        assert tcfg == want[desc]
    assert all(res["models"][d]["train_loss"] == 1.5 for d in want)
