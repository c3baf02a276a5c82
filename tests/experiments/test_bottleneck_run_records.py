"""The bottleneck experiment's run with training replaced by a recorder: each model is built at the
configured sizes from the configured seed, put in eval mode, decoded greedily in batches of ``batch_size``
(sorted by source length, at most 2·longest reference + 10 tokens), and recorded with its parameter count,
its seconds (the clock read around training and decoding) and, with ``keep_outputs``, its outputs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import attnlab.experiments.bottleneck as bottleneck
from attnlab.data import build_corpus, load_dataset
from attnlab.experiments.bottleneck import BottleneckConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_run_records_sizes_seconds_parameters_and_outputs(monkeypatch):
    models, decoded = [], []

    def recorder(model, train, valid, cfg, *, progress, desc):
        models.append(model)
        # the initial parameters are those of a fresh model built right after torch.manual_seed(seed)
        models[-1].initial = [p.detach().clone() for p in model.parameters()]
        return SimpleNamespace(train_loss=2.5, tokens_per_s=7.0)

    real_greedy = bottleneck.greedy

    def greedy(model, src, mask, max_len):
        decoded.append((model.training, src.shape[0], max_len))
        return real_greedy(model, src, mask, max_len=max_len)

    clock = iter([10.0, 13.5, 20.0, 24.25])
    monkeypatch.setattr(bottleneck, "train", recorder)
    monkeypatch.setattr(bottleneck, "greedy", greedy)
    monkeypatch.setattr(bottleneck, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    cfg = BottleneckConfig.quick(
        n=120,
        max_digits=3,
        steps=2,
        batch_size=2,
        test_size=5,
        decoders=("luong", "transformer"),
        emb_dim=6,
        hidden=10,
        attn_dim=7,
        tf_dim=8,
        tf_heads=2,
        tf_layers=3,
        tf_ff=12,
        tf_dropout=0.25,
        seed=3,
    )
    res = bottleneck.run(cfg, None, keep_outputs=True)

    s2s, tf = models
    assert (s2s.config.decoder, s2s.config.emb_dim, s2s.config.hidden, s2s.config.attn_dim) == (
        "luong",
        6,
        10,
        7,
    )
    c = tf.config
    assert (
        c.dim,
        c.num_heads,
        c.num_encoder_layers,
        c.num_decoder_layers,
        c.ffn_dim,
        c.dropout,
    ) == (8, 2, 3, 3, 12, 0.25)
    for m, cls, conf in ((s2s, type(s2s), s2s.config), (tf, type(tf), tf.config)):
        torch.manual_seed(3)
        fresh = cls(conf)
        for p, q in zip(fresh.parameters(), m.initial):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        assert m.training is False  # evaluated in eval mode

    # 5 test sentences in batches of 2: 2, 2, 1, all in eval mode
    assert [(t, b) for t, b, _ in decoded] == [(False, 2), (False, 2), (False, 1)] * 2

    for name, m, secs in (("luong", s2s, 3.5), ("transformer", tf, 4.25)):
        r = res["models"][name]
        assert set(r) == {
            "overall",
            "by_length",
            "train_loss",
            "tokens_per_s",
            "seconds",
            "parameters",
            "outputs",
        }
        assert r["train_loss"] == 2.5 and r["tokens_per_s"] == 7.0
        assert r["seconds"] == secs
        assert r["parameters"] == sum(p.numel() for p in m.parameters())
        out = r["outputs"]
        assert set(out) == {"hyps", "refs", "lengths"} and len(out["hyps"]) == len(out["refs"]) == 5
        assert out["lengths"] == sorted(out["lengths"])  # sorted by source length
        assert r["overall"]["n"] == 5

    # the references and lengths are the test split's in source-length order; the length guard is 2·max + 10
    corpus = build_corpus(load_dataset("numbers-en-zh", n=120, seed=3, max_digits=3))
    test = sorted(corpus.test[:5], key=lambda ex: len(ex[0]))
    sizes = (len(corpus.src_vocab), len(corpus.tgt_vocab))
    assert sizes[0] != sizes[1]  # the two vocabularies differ in size: a swap would show
    assert (s2s.config.src_vocab, s2s.config.tgt_vocab) == sizes
    assert (tf.config.src_vocab, tf.config.tgt_vocab) == sizes
    out = res["models"]["luong"]["outputs"]
    assert out["refs"] == [corpus.tgt_vocab.decode(t) for _, t in test]
    assert out["lengths"] == [len(s) for s, _ in test]
    assert res["models"]["transformer"]["outputs"]["refs"] == out["refs"]
    want = [2 * max(len(t) for _, t in test[i : i + 2]) + 10 for i in (0, 2, 4)]
    assert [m for _, _, m in decoded] == want * 2


def test_without_keep_outputs_no_outputs_are_kept(monkeypatch):
    monkeypatch.setattr(
        bottleneck, "train", lambda *a, **k: SimpleNamespace(train_loss=1.0, tokens_per_s=1.0)
    )
    cfg = BottleneckConfig.quick(
        n=120,
        max_digits=3,
        steps=2,
        batch_size=4,
        test_size=3,
        decoders=("none",),
        emb_dim=4,
        hidden=6,
        attn_dim=4,
    )
    r = bottleneck.run(cfg, None)["models"]["none"]
    assert "outputs" not in r
    assert set(r) == {"overall", "by_length", "train_loss", "tokens_per_s", "seconds", "parameters"}
