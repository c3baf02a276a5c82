"""A step that saves a checkpoint prints its line once the checkpoint is on disk: a run killed right
after a line that names a step never loses that step's checkpoint. Steps that do not save print at once."""

from __future__ import annotations

import torch

from attnlab.train import fit as fit_module
from attnlab.train.fit import FitConfig, Step, fit


class Toy(Step):
    """One weight, the loss of step i: (w + i); evaluated to a fixed loss."""

    def __init__(self):
        self.model = torch.nn.Linear(1, 1, bias=False)

    def optimizer(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.0)

    def batch(self, step, rt):
        return step, True

    def loss_sum(self, net, i):
        return net.weight[0, 0] + i, 1

    def evaluate(self, rt):
        return {"loss": 1.0}

    def model_config(self):
        return {"kind": "toy"}


def test_the_line_of_a_saving_step_comes_after_its_save(tmp_path, monkeypatch):
    events = []
    save = fit_module.save_checkpoint

    def recorded_save(out, tensors, config, files):
        path = save(out, tensors, config, files)
        events.append(f"saved {config['state']['step']}")
        return path

    monkeypatch.setattr(fit_module, "save_checkpoint", recorded_save)
    fit(Toy(), FitConfig(steps=4, log_every=1, eval_every=2, save_every=2), out=tmp_path / "run", log=events.append)
    assert [e.split("  loss")[0] for e in events] == [
        "train: step 1",  # no save at step 1: its line at once
        "saved 2", "train: step 2",
        "train: step 3",
        "saved 4", "train: step 4",
    ]
