"""The distance experiment's parts against references written here: the 95 % t-interval for every number of
seeds (Student t quantiles from a printed table up to 30 degrees of freedom,
beyond it the quantile found here by integrating Student's density), the models' sizes and the position
each reads its answer from, one training step against Adam run by hand (its first step is lr · g / (|g| + ε), so clipping cannot show), the test
accuracy on its own seeded batch, and a whole run's records, progress lines and files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import attnlab.experiments.distance as distance
from attnlab.experiments.distance import (
    AttentionClassifier,
    DistanceConfig,
    RNNClassifier,
    build,
    interval,
    make_batch,
    train_one,
)

pytestmark = pytest.mark.usefixtures("one_thread")

# two-sided 95 % Student t quantiles t(0.975, df), from a printed table
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
        29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t_quantile(df: int, p: float = 0.975) -> float:
    """Student's t quantile in float64: its density integrated from 0 (Simpson, 20 000 panels), bisected."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 20_001)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
        h = t / 20_000
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("n", list(range(2, 32)) + [41, 61, 121])
def test_interval_uses_the_t_quantile_of_n_minus_1_degrees_of_freedom(n):
    values = [0.1 * i * i for i in range(n)]
    mean, hw = interval(values)
    sd = np.std(values, ddof=1)
    assert mean == pytest.approx(np.mean(values), rel=1e-12)
    assert hw == pytest.approx(T975[n - 1] * sd / math.sqrt(n), abs=5e-4 * sd / math.sqrt(n))


@pytest.mark.parametrize("df", [1, 2, 5, 10, 20, 30, 31, 35, 50, 100, 1000])
def test_the_t_quantile_against_students_density_integrated_here(df):
    # the printed table to its three decimals; beyond 30 degrees of freedom, within 1e-4 of the integral
    want = t_quantile(df)
    got = distance.t975(df)
    assert got == pytest.approx(want, abs=5e-4 if df <= 30 else 1e-4)


def test_the_interval_takes_numpy_arrays_and_returns_floats():
    mean, hw = interval(np.array([0.5, 0.75, 1.0], dtype=np.float32))
    assert type(mean) is float and type(hw) is float
    assert (mean, hw) == pytest.approx((0.75, 4.303 * 0.25 / math.sqrt(3)), rel=1e-12)


def test_interval_of_one_value_has_no_width():
    mean, hw = interval([0.25])
    assert mean == 0.25 and math.isnan(hw)


def test_the_sizes_of_the_models():
    cfg = DistanceConfig(hidden=8, classes=3, distractors=5)
    for cell, kind in (("gru", nn.GRU), ("lstm", nn.LSTM)):
        m = build(cell, cfg)
        assert isinstance(m, RNNClassifier) and type(m.rnn) is kind
        assert (m.emb.num_embeddings, m.emb.embedding_dim) == (
            1 + 3 + 5,
            8,
        )  # query, cues, distractors
        assert (m.rnn.input_size, m.rnn.hidden_size, m.rnn.batch_first) == (8, 8, True)
        assert (m.out.in_features, m.out.out_features) == (8, 3)
    a = build("attention", cfg)
    assert isinstance(a, AttentionClassifier)
    assert (a.emb.num_embeddings, a.emb.embedding_dim) == (9, 8) and a.pos.dim == 8
    layer = a.layer
    assert (
        layer.self_attn.num_heads == 4 and layer.linear1.out_features == 2 * 8 and layer.norm_first
    )
    assert layer.dropout.p == 0.0 and layer.dropout1.p == 0.0
    assert a.norm.normalized_shape == (8,) and (a.out.in_features, a.out.out_features) == (8, 3)


def test_the_attention_classifier_reads_the_last_position():
    torch.manual_seed(0)
    m = AttentionClassifier(vocab=6, hidden=8, classes=3).eval()
    e = torch.randn(2, 5, 8)
    pe = torch.zeros(
        5, 8
    )  # sinusoidal table: sin at even, cos at odd columns, θ = pos / 10000^(2i/d)
    pos = torch.arange(5.0)[:, None]
    freq = 10000.0 ** (-torch.arange(0, 8, 2) / 8)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    want = m.out(m.norm(m.layer(e + pe))[:, -1])
    torch.testing.assert_close(m(e), want, rtol=1e-5, atol=1e-6)


def test_the_lstm_classifier_reads_the_state_after_the_last_token():
    torch.manual_seed(1)
    m = RNNClassifier("lstm", vocab=5, hidden=4, classes=2)
    e = torch.randn(3, 6, 4)
    _, (h_n, _) = m.rnn(e)
    torch.testing.assert_close(m(e), m.out(h_n[0]), rtol=0, atol=1e-6)


def test_one_training_step_is_adam_at_the_configured_rate_and_the_accuracy_is_on_the_seeded_test_batch():
    cfg = DistanceConfig(
        steps=1, batch_size=6, lr=0.05, hidden=4, classes=3, distractors=4, prefix=1, test_size=301
    )
    model, acc = train_one("gru", 2, 5, cfg)
    torch.manual_seed(5)
    ref = build("gru", cfg)
    x, y = make_batch(cfg, 2, 6, torch.Generator().manual_seed(5))
    loss = nn.functional.cross_entropy(ref(ref.emb(x)), y)
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    scale = min(1.0, 1.0 / (float(norm) + 1e-6))
    with torch.no_grad():
        for p, g, q in zip(ref.parameters(), grads, model.parameters()):
            g = g * scale
            # Adam's first step: m̂ = g, v̂ = g², p − lr · g / (|g| + eps)
            torch.testing.assert_close(q, p - 0.05 * g / (g.abs() + 1e-8), rtol=1e-5, atol=1e-6)
    xt, yt = make_batch(cfg, 2, 301, torch.Generator().manual_seed(10_000 + 5))
    with torch.no_grad():
        want = (model(model.emb(xt)).argmax(-1) == yt).double().mean().item()
    assert acc == pytest.approx(want, abs=1e-7) and 0 <= acc <= 1


def test_a_whole_run_its_records_progress_and_files(tmp_path, monkeypatch):
    cfg = DistanceConfig(
        distances=(1, 3),
        models=("gru", "attention"),
        seeds=2,
        steps=1,
        batch_size=2,
        hidden=4,
        classes=2,
        distractors=3,
        prefix=1,
        test_size=4,
    )
    trained = []
    real = distance.train_one

    def recording(name, k, seed, cfg_):
        model, acc = real(name, k, seed, cfg_)
        trained.append((name, k, seed, model, acc))
        return model, acc

    monkeypatch.setattr(distance, "train_one", recording)
    lines = []
    res = distance.run(cfg, tmp_path, progress=lines.append)
    assert [t[:3] for t in trained] == [
        (m, k, s) for s in range(2) for m in ("gru", "attention") for k in (1, 3)
    ]
    assert lines == [
        f"seed {s} {m:9s} k={k:4d}: test accuracy {100 * a:.1f} %" for m, k, s, _, a in trained
    ]
    assert lines[0].startswith("seed 0 gru       k=   1: test accuracy ")
    per_seed = {
        m: {str(k): [a for m2, k2, _, _, a in trained if (m2, k2) == (m, k)] for k in (1, 3)}
        for m in ("gru", "attention")
    }
    assert res["accuracy_per_seed"] == per_seed
    for m in per_seed:
        for k, v in per_seed[m].items():
            assert res["accuracy"][m][k][0] == pytest.approx(np.mean(v))
            assert res["accuracy"][m][k][1] == pytest.approx(
                12.706 * np.std(v, ddof=1) / math.sqrt(2)
            )
    # the gradient at initialisation and after training at the largest k, on 64 sequences of a seeded batch,
    # averaged over the seeds
    for m in ("gru", "attention"):
        init, after = [], []
        for s in range(2):
            xg, yg = make_batch(cfg, 3, 64, torch.Generator().manual_seed(20_000 + s))
            torch.manual_seed(s)
            init.append(distance.gradient_by_distance(build(m, cfg), xg, yg).numpy())
            model = [t[3] for t in trained if t[0] == m and t[1] == 3 and t[2] == s][0]
            after.append(distance.gradient_by_distance(model, xg, yg).numpy())
        np.testing.assert_allclose(res["gradient_norm"][m]["init"], np.mean(init, 0), rtol=1e-5)
        np.testing.assert_allclose(res["gradient_norm"][m]["trained"], np.mean(after, 0), rtol=1e-5)
        assert len(res["gradient_norm"][m]["init"]) == 1 + 3 + 1
    assert res["config"]["distances"] == (1, 3) and res["seconds"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".attnlab-files",
        "distance.png",
        "results.json",
        "table.md",
    ]
    text = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert text.startswith(
        '{\n "config": {\n  "distances": [\n   1,'
    )  # indented by one space per level
    assert json.loads(text)["accuracy_per_seed"] == per_seed
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == distance.table(json.loads(text))


def test_progress_is_optional():
    cfg = DistanceConfig(
        distances=(1,),
        models=("gru",),
        seeds=1,
        steps=1,
        batch_size=2,
        hidden=4,
        classes=2,
        distractors=3,
        prefix=1,
        test_size=2,
    )
    res = distance.run(cfg)
    assert list(res) == ["config", "accuracy", "accuracy_per_seed", "gradient_norm", "seconds"]
