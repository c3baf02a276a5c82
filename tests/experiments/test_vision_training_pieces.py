"""The vision experiment's pieces: pixels scaled to [0, 1] then normalised with MNIST's mean 0.1307 and
standard deviation 0.3081; the evaluation in batches of 500 (the share of right answers); one training run
schedules one-cycle over epochs · ⌈n / batch_size⌉ steps, peaking at the configured rate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab.experiments.vision as vision
from attnlab.experiments.vision import VisionConfig, _tensors, evaluate, train_one

pytestmark = pytest.mark.usefixtures("one_thread")


def test_tensors_normalise_pixels_like_mnist():
    images = np.array([[[0, 255], [51, 102]]], dtype=np.uint8)
    x, y = _tensors(images, np.array([7]))
    want = (images.astype(np.float64) / 255.0 - 0.1307) / 0.3081
    assert x.shape == (1, 1, 2, 2) and x.dtype == torch.float32
    np.testing.assert_allclose(x.numpy()[:, 0], want, rtol=1e-6)
    assert y.tolist() == [7]


class _Counting(torch.nn.Module):
    """Predicts class 1 for every item; records each batch's size and its mode."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def forward(self, x):
        self.sizes.append((x.shape[0], self.training))
        return torch.tensor([0.0, 1.0]).expand(x.shape[0], 2)


def test_evaluate_in_batches_of_500():
    model = _Counting()
    y = torch.zeros(1001, dtype=torch.long)
    y[::4] = 1  # 251 of 1001 are class 1
    acc = evaluate(model, (torch.zeros(1001, 1, 1, 1), y))
    assert model.sizes == [(500, False), (500, False), (1, False)]
    assert acc == pytest.approx(251 / 1001, abs=1e-12)


def test_train_one_runs_one_cycle_over_all_its_steps(monkeypatch):
    made = []
    real = torch.optim.lr_scheduler.OneCycleLR

    class Recording(real):
        def __init__(self, opt, **kw):
            made.append(kw)
            self.calls = 0
            super().__init__(opt, **kw)

    monkeypatch.setattr(torch.optim.lr_scheduler, "OneCycleLR", Recording)
    cfg = VisionConfig(
        epochs=2, batch_size=4, lr=0.05, widths=(2,), variants=("none",), out_dir=None
    )
    rng = np.random.default_rng(0)
    train = _tensors(rng.integers(0, 256, (10, 28, 28)).astype(np.uint8), rng.integers(0, 10, 10))
    test = _tensors(rng.integers(0, 256, (3, 28, 28)).astype(np.uint8), rng.integers(0, 10, 3))
    model, acc, seconds = train_one(cfg, "none", 0, train, test)
    assert made == [
        {"max_lr": 0.05, "total_steps": 2 * 3}
    ]  # 10 items in batches of 4: 3 steps per epoch
    assert 0 <= acc <= 1 and acc * 3 == pytest.approx(round(acc * 3)) and seconds >= 0
    assert model.training is False  # evaluated in eval mode
    assert vision.count_parameters(model) == sum(p.numel() for p in model.parameters())
