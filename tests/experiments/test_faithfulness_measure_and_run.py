"""The faithfulness measurement against a step-by-step reference written here, and its run with training
and measuring replaced by recorders.

* ``measure``: every target position (teacher forcing, ``<eos>`` included, padding left out) is counted;
  the learned accuracy, and the uniform replacement's output TVD / JSD, attention JSD (mean, lower
  median, histogram of 20 bins over [0, 0.7]), argmax changes and accuracy (both in %) equal float64
  NumPy recomputed one sentence at a time from ``Seq2Seq.step``;
* ``run``: each decoder's model is built at the configured sizes from the seed, trained with the
  configured budget (no validation, no checkpoints, five log intervals), measured on the first
  ``test_size`` test sentences; its record holds the measurement, the training loss and the two
  clocks' seconds; one progress line per decoder; the files are written only when a folder is given.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnlab.experiments.faithfulness as faithfulness
from attnlab.data import build_corpus, collate, load_dataset
from attnlab.experiments.faithfulness import FaithfulnessConfig, measure
from attnlab.models import Seq2Seq, Seq2SeqConfig
from attnlab.train.loop import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def _np_tvd(p, q):
    return 0.5 * np.abs(p - q).sum()


def _np_jsd(p, q):
    m = 0.5 * (p + q)
    kl = lambda a: float(np.sum(np.where(a > 0, a * np.log(np.where(a > 0, a, 1) / m), 0.0)))  # noqa: E731
    return 0.5 * kl(p) + 0.5 * kl(q)


def _model():
    torch.manual_seed(1)
    model = Seq2Seq(
        Seq2SeqConfig(
            src_vocab=11, tgt_vocab=12, decoder="bahdanau", emb_dim=6, hidden=8, attn_dim=6
        )
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.8)
    return model


EXAMPLES = [([4, 5, 6], [4, 7]), ([8, 9, 10, 4, 5], [5, 6, 7, 8]), ([6], [9, 9, 4]), ([7, 8], [10])]


def _reference(model):
    rows = []  # per position: learned correct, uniform (tvd, jsd, att_jsd, changed, correct)
    model.eval()
    with torch.no_grad():
        for ex in EXAMPLES:
            b = collate([ex])
            memory, state = model.start(b.src, b.src_mask)
            n = b.src.shape[1]
            for t in range(b.tgt_in.shape[1]):
                logits, nxt, w = model.step(memory, state, b.tgt_in[:, t])
                u = torch.full((1, n), 1.0 / n)
                lq = model.step(memory, state, b.tgt_in[:, t], weights_override=lambda _w, u=u: u)[
                    0
                ]
                p = torch.softmax(logits[0].double(), -1).numpy()
                q = torch.softmax(lq[0].double(), -1).numpy()
                gold = int(b.tgt_out[0, t])
                a, wn = np.full(n, 1.0 / n), w[0].double().numpy()
                rows.append(
                    (
                        p.argmax() == gold,
                        _np_tvd(p, q),
                        _np_jsd(p, q),
                        _np_jsd(a, wn),
                        p.argmax() != q.argmax(),
                        q.argmax() == gold,
                    )
                )
                state = nxt
    return rows


def test_measure_counts_every_real_position_and_the_uniform_row_by_hand():
    model = _model()
    rows = _reference(model)
    model.train()
    cfg = FaithfulnessConfig(batch_size=2, adv_steps=1, epsilon=0.05)
    got = measure(model, EXAMPLES, cfg)
    assert model.training is True  # the mode it came in with is restored
    n = sum(len(t) + 1 for _, t in EXAMPLES)
    assert got["positions"] == n == len(rows) == 14
    assert set(got) == {"positions", "learned_accuracy", "methods"}
    assert list(got["methods"]) == ["uniform", "permuted", "random", "adversarial"]
    assert got["learned_accuracy"] == pytest.approx(100 * np.mean([r[0] for r in rows]), abs=1e-5)
    u = got["methods"]["uniform"]
    cols = [np.array([r[k] for r in rows], dtype=float) for k in range(6)]
    assert u["out_tvd"] == pytest.approx(cols[1].mean(), rel=1e-4)
    assert u["out_jsd"] == pytest.approx(cols[2].mean(), rel=1e-3, abs=1e-7)
    assert u["att_jsd"] == pytest.approx(cols[3].mean(), rel=1e-4)
    assert u["att_jsd_median"] == pytest.approx(
        np.sort(cols[3])[(n - 1) // 2], rel=1e-4
    )  # the lower middle
    assert u["out_tvd_max"] == pytest.approx(cols[1].max(), rel=1e-4)
    assert u["changed"] == pytest.approx(100 * cols[4].mean(), abs=1e-5)
    assert u["accuracy"] == pytest.approx(100 * cols[5].mean(), abs=1e-5)
    want_hist, _ = np.histogram(cols[3], bins=20, range=(0.0, 0.7))
    assert u["att_jsd_hist"] == want_hist.tolist()
    assert (
        sum(want_hist) == n and cols[3].max() > 0.035
    )  # the values spread over more than the first bin
    for m in got["methods"].values():
        assert len(m["att_jsd_hist"]) == 20 and sum(m["att_jsd_hist"]) == n
        assert set(m) == {
            "out_tvd",
            "out_jsd",
            "att_jsd",
            "att_jsd_median",
            "changed",
            "accuracy",
            "out_tvd_max",
            "att_jsd_hist",
        }
    assert got["methods"]["adversarial"]["out_tvd_max"] <= 0.05


def test_run_builds_trains_and_measures_each_decoder(monkeypatch, tmp_path):
    trained, measured, lines = [], [], []

    def train(model, examples, valid, cfg, *, progress, desc):
        trained.append(
            (
                model,
                [p.detach().clone() for p in model.parameters()],
                len(examples),
                valid,
                cfg,
                progress,
                desc,
            )
        )
        return SimpleNamespace(train_loss=0.75)

    def fake_measure(model, examples, cfg):
        measured.append((model, examples, cfg))
        return {"positions": 9, "learned_accuracy": 50.0, "methods": {}}

    clock = iter([100.0, 101.0, 104.0, 110.0, 111.0, 120.0, 125.0, 133.0, 134.5, 150.0])
    monkeypatch.setattr(faithfulness, "train", train)
    monkeypatch.setattr(faithfulness, "measure", fake_measure)
    monkeypatch.setattr(faithfulness, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    written = []
    monkeypatch.setattr(faithfulness, "write", lambda results, out: written.append((results, out)))
    cfg = FaithfulnessConfig(
        n=200,
        max_digits=3,
        steps=25,
        batch_size=8,
        lr=0.02,
        emb_dim=5,
        hidden=7,
        attn_dim=9,
        test_size=6,
        seed=4,
    )
    res = faithfulness.run(cfg, tmp_path, progress=lines.append)

    corpus = build_corpus(load_dataset("numbers-de-en", n=200, seed=4, max_digits=3))
    want_cfg = TrainConfig(
        steps=25, batch_size=8, lr=0.02, seed=4, eval_every=0, save_every=0, log_every=5
    )
    assert [t[6] for t in trained] == ["bahdanau", "luong"]
    for (model, initial, n_train, valid, tcfg, progress, desc), (m2, examples, mcfg) in zip(
        trained, measured
    ):
        assert m2 is model and mcfg is cfg
        assert examples == corpus.test[:6] and n_train == len(corpus.train)
        assert valid == [] and tcfg == want_cfg and progress is True
        c = model.config
        assert (c.decoder, c.emb_dim, c.hidden, c.attn_dim) == (desc, 5, 7, 9)
        assert (c.src_vocab, c.tgt_vocab) == (len(corpus.src_vocab), len(corpus.tgt_vocab))
        torch.manual_seed(4)
        for p, q in zip(Seq2Seq(c).parameters(), initial):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert res["models"]["bahdanau"] == {
        "positions": 9,
        "learned_accuracy": 50.0,
        "methods": {},
        "train_loss": 0.75,
        "train_seconds": 3.0,
        "measure_seconds": 6.0,
    }
    assert (
        res["models"]["luong"]["train_seconds"] == 5.0
        and res["models"]["luong"]["measure_seconds"] == 8.0
    )
    assert lines == [
        "bahdanau: trained in 3 s, measured in 7 s",
        "luong: trained in 5 s, measured in 10 s",
    ]
    assert res["seconds"] == 50.0
    assert res["config"]["hidden"] == 7 and res["config"]["decoders"] == ("bahdanau", "luong")
    assert written == [(res, tmp_path)]


def test_run_without_progress_trains_quietly_and_writes_nothing(monkeypatch):
    seen = []
    monkeypatch.setattr(
        faithfulness,
        "train",
        lambda *a, progress, desc: seen.append(progress) or SimpleNamespace(train_loss=1.0),
    )
    monkeypatch.setattr(faithfulness, "measure", lambda *a: {})
    monkeypatch.setattr(
        faithfulness, "write", lambda *a: pytest.fail("nothing is written without a folder")
    )
    cfg = FaithfulnessConfig(
        n=100, max_digits=2, steps=3, decoders=("luong",), emb_dim=4, hidden=4, attn_dim=4
    )
    res = faithfulness.run(cfg)
    assert seen == [False] and list(res["models"]) == ["luong"]
