"""One vision training run against a training loop written here: the model built from the seed at the configured
widths, gate and reduction, Adam under a one-cycle schedule stepped after every batch, batches drawn by a
generator seeded with the same seed, every epoch a new order; the seconds are the clock read around training
only. And vision's 95 % t-interval against a printed table of Student t quantiles."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlab.experiments.vision as vision
from attnlab.experiments.vision import VisionConfig, interval, train_one
from attnlab.models.cnn import CNNConfig, SmallCNN

pytestmark = pytest.mark.usefixtures("one_thread")


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _reference(seed, widths, gate, reduction, lr, epochs, batch, x, y):
    torch.manual_seed(seed)
    model = SmallCNN(CNNConfig(widths=widths, attention=gate, reduction=reduction))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    per_epoch = -(-len(y) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * per_epoch)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=g)
        for k in range(per_epoch):
            idx = order[k * batch : (k + 1) * batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model


def test_train_one_matches_the_loop_written_here(monkeypatch):
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(vision, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    train, test = _data(10, 1), _data(7, 2)
    cfg = VisionConfig(widths=(4, 2), reduction=2, lr=0.02, epochs=2, batch_size=4, out_dir=None)
    model, acc, seconds = train_one(cfg, "se", 3, train, test)
    assert (
        seconds == 2.5
    )  # read before the first step and after the last, not around the evaluation
    assert (model.config.widths, model.config.attention, model.config.reduction) == (
        (4, 2),
        "se",
        2,
    )
    want = _reference(3, (4, 2), "se", 2, 0.02, 2, 4, *train)
    for (name, p), q in zip(model.state_dict().items(), want.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    want.eval()
    with torch.no_grad():
        right = int((want(test[0]).argmax(-1) == test[1]).sum())
    assert acc == right / 7


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 21, 31])
def test_interval_uses_t_of_n_minus_1_degrees_of_freedom(n):
    # two-sided 95 % Student t quantiles t(0.975, df), from a printed table
    t975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
            10: 2.228, 11: 2.201, 20: 2.086, 30: 2.042}
    values = np.array([0.1 * i * i for i in range(n)])  # the run passes arrays (paired differences)
    mean, hw = interval(values)
    assert mean == pytest.approx(np.mean(values), rel=1e-12)
    assert hw == pytest.approx(t975[n - 1] * np.std(values, ddof=1) / math.sqrt(n), rel=1e-12)


def test_interval_of_one_value_is_its_value_with_no_width():
    mean, hw = interval([0.75])
    assert mean == 0.75 and isinstance(hw, float) and math.isnan(hw)
