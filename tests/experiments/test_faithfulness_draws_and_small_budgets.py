"""The faithfulness measurement draws its permuted, random and adversarial weights from one generator of its
own, seeded with ``cfg.seed`` (never the global one), and builds the uniform weights in the model's dtype;
a run of fewer than ten steps logs every step (``log_every`` is at least 1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import attnlab.experiments.faithfulness as faithfulness
from attnlab.experiments.faithfulness import FaithfulnessConfig, measure
from attnlab.models import Seq2Seq, Seq2SeqConfig

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLES = [([4, 5, 6], [4, 7]), ([8, 9], [5, 6, 7])]


def test_replacements_share_one_generator_seeded_with_the_config_seed(monkeypatch):
    seen = []
    for name, pos in (("permuted_weights", 2), ("dirichlet_weights", 1)):
        real = getattr(faithfulness, name)

        def wrapped(*a, _real=real, _name=name, _pos=pos, **k):
            seen.append((_name, a[_pos]))
            return _real(*a, **k)

        monkeypatch.setattr(faithfulness, name, wrapped)
    real_adv, real_uniform = faithfulness.adversarial_weights, faithfulness.uniform_weights

    def adversarial(*a, generator, **k):
        seen.append(("adversarial_weights", generator))
        return real_adv(*a, generator=generator, **k)

    def uniform(mask, dtype=torch.float32):
        seen.append(("uniform_weights", dtype))
        return real_uniform(mask, dtype)

    monkeypatch.setattr(faithfulness, "adversarial_weights", adversarial)
    monkeypatch.setattr(faithfulness, "uniform_weights", uniform)
    torch.manual_seed(0)
    model = Seq2Seq(
        Seq2SeqConfig(src_vocab=11, tgt_vocab=12, decoder="luong", emb_dim=4, hidden=6)
    ).double()
    cfg = FaithfulnessConfig(batch_size=2, adv_steps=1, seed=17)
    res = measure(model, EXAMPLES, cfg)
    assert res["positions"] == 2 + 3 + 2  # target words and <eos> of each example
    # one target step of the batch at a time (4 steps: the longest target and <eos>), four replacements per step
    names = ["uniform_weights", "permuted_weights", "dirichlet_weights", "adversarial_weights"]
    assert [n for n, _ in seen] == names * 4
    assert all(d is torch.float64 for n, d in seen if n == "uniform_weights")
    gens = [g for n, g in seen if n != "uniform_weights"]
    assert all(isinstance(g, torch.Generator) for g in gens)
    assert len({id(g) for g in gens}) == 1 and gens[0] is not torch.default_generator
    assert gens[0].initial_seed() == 17


def test_a_run_of_few_steps_logs_every_step(monkeypatch):
    cfgs = []
    monkeypatch.setattr(
        faithfulness,
        "train",
        lambda m, e, v, c, **k: cfgs.append(c) or SimpleNamespace(train_loss=1.0),
    )
    monkeypatch.setattr(faithfulness, "measure", lambda *a: {})
    cfg = FaithfulnessConfig(
        n=100, max_digits=2, steps=9, decoders=("bahdanau",), emb_dim=4, hidden=4, attn_dim=4
    )
    faithfulness.run(cfg)
    assert [(c.steps, c.log_every) for c in cfgs] == [
        (9, 1)
    ]  # 9 // 5 = 1; fewer than 5 steps would give 0
    cfgs.clear()
    faithfulness.run(
        FaithfulnessConfig(
            n=100, max_digits=2, steps=4, decoders=("luong",), emb_dim=4, hidden=4, attn_dim=4
        )
    )
    assert [(c.steps, c.log_every) for c in cfgs] == [(4, 1)]


@pytest.mark.parametrize("name", ["dirichlet_weights", "uniform_weights"])
def test_random_and_uniform_weights_are_made_on_the_masks_device(name):
    """On the ``meta`` device (shapes only), the proxy for a GPU run: a draw on the CPU would not mix with it."""
    mask = torch.tensor([[True, True, False]]).to("meta")
    w = getattr(faithfulness, name)(mask)
    assert w.device.type == "meta" and tuple(w.shape) == (1, 3) and w.dtype == torch.float32
