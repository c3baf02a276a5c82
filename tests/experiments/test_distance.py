"""The distance experiment: its task, statistics and gradient measurement, checked by hand; the quick CLI run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import attnlab.experiments.distance as distance
from attnlab.cli import main
from attnlab.experiments.distance import (
    DistanceConfig,
    gradient_by_distance,
    interval,
    make_batch,
    train_one,
)


def test_the_cue_sits_k_positions_before_the_query():
    cfg = DistanceConfig(classes=3, distractors=5, prefix=2)
    x, y = make_batch(cfg, 7, 50, torch.Generator().manual_seed(0))
    assert x.shape == (50, 2 + 7 + 1)
    assert (x[:, -1] == 0).all()  # the query token
    assert torch.equal(x[:, -1 - 7], 1 + y)  # the cue: id 1 + class, k = 7 before the query
    others = torch.cat([x[:, : -1 - 7], x[:, -7:-1]], 1)
    assert ((others >= 1 + 3) & (others < 1 + 3 + 5)).all()  # everything else a distractor
    assert set(y.tolist()) == {0, 1, 2}


def test_interval_by_hand():
    mean, hw = interval([1.0, 2.0, 3.0])  # sd = 1, t(0.975, 2) = 4.303
    assert mean == 2.0 and math.isclose(hw, 4.303 / math.sqrt(3))
    assert math.isnan(interval([0.5])[1])


def test_every_model_trains_on_the_same_batches_for_a_seed(monkeypatch):
    """The comparison is fair: for one seed the GRU, the LSTM and the attention model (whose parameter
    initialisations draw different amounts of randomness) see the same training batches, those of a generator
    seeded with the seed, and the same test batch; another seed gives other batches."""
    cfg = DistanceConfig(steps=3, batch_size=4, hidden=8, test_size=5, classes=3, distractors=4, prefix=1)
    seen = {}

    def recording(cfg_, k, size, g):
        x, y = make_batch(cfg_, k, size, g)
        seen[current].append((x.clone(), y.clone()))
        return x, y

    monkeypatch.setattr(distance, "make_batch", recording)
    for current in ("gru", "lstm", "attention"):
        seen[current] = []
        torch.manual_seed(123)  # whatever the global state before: the batches do not depend on it
        train_one(current, 2, 7, cfg)
    current = "other seed"
    seen[current] = []
    train_one("gru", 2, 8, cfg)
    g, t = torch.Generator().manual_seed(7), torch.Generator().manual_seed(10_000 + 7)
    want = [make_batch(cfg, 2, 4, g) for _ in range(3)] + [make_batch(cfg, 2, 5, t)]
    for name in ("gru", "lstm", "attention"):
        assert len(seen[name]) == 4
        for (x, y), (wx, wy) in zip(seen[name], want):
            assert torch.equal(x, wx) and torch.equal(y, wy)
    assert not torch.equal(seen["other seed"][0][0], want[0][0])


class _Weighted(nn.Module):
    """logit_c = Σ_t w_t · e_t[c]: the gradient reaching token t is w_t on the class's coordinate."""

    def __init__(self, w):
        super().__init__()
        self.emb = nn.Embedding(4, 2)
        self.w = w

    def forward(self, e):
        return (e * self.w[None, :, None]).sum(1)


def test_gradient_by_distance_indexes_from_the_last_token():
    w = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5])
    g = gradient_by_distance(_Weighted(w), torch.zeros(3, 5, dtype=torch.long), torch.tensor([0, 1, 1]))
    torch.testing.assert_close(g, torch.tensor([0.5, 0.4, 0.3, 0.2, 0.1]))  # d = 0 is the last token


def test_quick_run_writes_a_table_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["experiment", "distance", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "smoke-run figures" in printed
    res = json.loads((tmp_path / "results.json").read_text())
    cfg = DistanceConfig.quick()
    for m in ("gru", "lstm", "attention"):
        for k in cfg.distances:
            accs = res["accuracy_per_seed"][m][str(k)]
            assert len(accs) == cfg.seeds and all(0.0 <= a <= 1.0 for a in accs)
            assert math.isclose(res["accuracy"][m][str(k)][0], sum(accs) / len(accs))
        for when in ("init", "trained"):
            curve = res["gradient_norm"][m][when]
            assert len(curve) == cfg.prefix + max(cfg.distances) + 1 and all(c >= 0 for c in curve)
    assert (tmp_path / "table.md").read_text().startswith("| model | k = 2 | k = 8 |")
    assert (tmp_path / "distance.png").stat().st_size > 1000


@pytest.mark.parametrize("bad", [["--distances", "0,4"], ["--seeds", "0"], ["--steps", "x"]])
def test_bad_arguments_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["experiment", "distance", *bad])
    assert e.value.code == 2


def test_the_rnn_classifier_reads_the_state_after_the_last_token():
    """logits = W h_n + b, with h_n the GRU's state after the last of n inputs (torch's own GRU, run here)."""
    from attnlab.experiments.distance import RNNClassifier

    torch.manual_seed(0)
    m = RNNClassifier("gru", vocab=5, hidden=4, classes=3)
    e = torch.randn(2, 6, 4)
    _, h_n = m.rnn(e)  # (1, b, hidden): the final state
    torch.testing.assert_close(m(e), m.out(h_n[0]), rtol=0, atol=1e-6)
