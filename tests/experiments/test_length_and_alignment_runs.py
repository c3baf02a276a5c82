"""The length and alignment experiments' runs with their data or models replaced by stand-ins: what each passes
on (the bottleneck run's sizes, the training budget), the verses it keeps and splits, the records it returns
(per-bucket scores with bootstrap intervals seeded per bucket; AER per method overall and per length bucket,
recomputed here by hand) and the files it writes (UTF-8 JSON, the table)."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnlab.experiments.alignment as alignment
import attnlab.experiments.length as length
from attnlab.data.bible import Verse
from attnlab.experiments.bottleneck import BottleneckConfig
from attnlab.experiments.length import LengthConfig, bootstrap
from attnlab.train.loop import TrainConfig

sacrebleu = pytest.importorskip("sacrebleu")
pytestmark = pytest.mark.usefixtures("one_thread")


def test_bootstrap_against_resampling_written_here():
    refs = [f"the cat number {i} sat on the mat" for i in range(12)]
    hyps = [r if i % 3 else f"a dog {i} ran off" for i, r in enumerate(refs)]
    rng = random.Random(7)
    bleu, chrf = [], []
    for _ in range(41):
        idx = [rng.randrange(12) for _ in range(12)]
        h, r = [hyps[i] for i in idx], [refs[i] for i in idx]
        bleu.append(sacrebleu.corpus_bleu(h, [r]).score)
        chrf.append(sacrebleu.corpus_chrf(h, [r]).score)
    bleu.sort(), chrf.sort()
    # 41 draws: the 2.5 % percentile is draw int(0.025 · 40) = 1, the 97.5 % one draw round(0.975 · 40) = 39
    got = bootstrap(hyps, refs, 41, seed=7)
    assert got == {
        "bleu": pytest.approx((bleu[1], bleu[39])),
        "chrf": pytest.approx((chrf[1], chrf[39])),
    }
    assert chrf[1] < chrf[39]


LONG_HYPS = [
    "word 0 of a longer sentence here",
    "word",
    "word 2 of a",
    "sentence here",
    "word 4 of a longer",
    "no",
]


def _fake_bottleneck(seen):
    def run_models(bcfg, out, progress, keep_outputs):
        seen.append((bcfg, out, progress, keep_outputs))
        lengths = [2, 3, 3] + [9] * 6
        refs = ["a b", "c d e", "f g h"] + [f"word {k} of a longer sentence here" for k in range(6)]
        outputs = {
            "none": {"hyps": ["a b", "x", "f g h"] + LONG_HYPS, "refs": refs, "lengths": lengths},
            "luong": {"hyps": refs, "refs": refs, "lengths": lengths},
        }
        models = {}
        for dec, o in outputs.items():
            models[dec] = {
                "overall": {"n": 4, "bleu": 50.0, "chrf": 60.0},
                "by_length": [
                    {"lo": 1, "hi": 3, "n": 3, "bleu": 40.0, "chrf": 50.0},
                    {"lo": 4, "hi": 8, "n": 0, "bleu": 0.0, "chrf": 0.0},
                    {"lo": 9, "hi": 9, "n": 6, "bleu": 10.0, "chrf": 20.0},
                ],
                "seconds": 1.5,
                "tokens_per_s": 99.0,
                "parameters": 1234,
                "train_loss": 0.5,
                "outputs": o,
            }
        return {"buckets": [[1, 3], [4, 8], [9, 9]], "models": models}

    return run_models


def test_length_run_passes_its_sizes_on_and_adds_a_bootstrap_interval_per_bucket(
    tmp_path, monkeypatch
):
    seen = []
    monkeypatch.setattr(length, "run_models", _fake_bottleneck(seen))
    cfg = LengthConfig.quick(resamples=9, seed=3, decoders=("none", "luong"))
    res = length.run(cfg, tmp_path, progress=True)
    ((bcfg, out, progress, keep),) = seen
    assert bcfg == BottleneckConfig(
        data="ding-de-en",
        steps=15,
        batch_size=16,
        lr=3e-3,
        emb_dim=16,
        hidden=24,
        attn_dim=24,
        buckets=2,
        test_size=40,
        seed=3,
        decoders=("none", "luong"),
    )
    assert (out, progress, keep) == (None, True, True)
    assert list(res) == ["config", "buckets", "models"] and res["buckets"] == [
        [1, 3],
        [4, 8],
        [9, 9],
    ]
    none = res["models"]["none"]
    assert list(none) == [
        "overall",
        "by_length",
        "seconds",
        "tokens_per_s",
        "parameters",
        "train_loss",
    ]
    assert (none["seconds"], none["tokens_per_s"], none["parameters"], none["train_loss"]) == (
        1.5,
        99.0,
        1234,
        0.5,
    )
    # bucket i is resampled with seed cfg.seed + i, over its own sentences; an empty bucket gets (0, 0)
    want0 = bootstrap(["a b", "x", "f g h"], ["a b", "c d e", "f g h"], 9, 3)
    want2 = bootstrap(LONG_HYPS, [f"word {k} of a longer sentence here" for k in range(6)], 9, 5)
    rows = none["by_length"]
    assert rows[0] == {
        "lo": 1,
        "hi": 3,
        "n": 3,
        "bleu": 40.0,
        "chrf": 50.0,
        "bleu_ci": want0["bleu"],
        "chrf_ci": want0["chrf"],
    }
    assert rows[1] == {
        "lo": 4,
        "hi": 8,
        "n": 0,
        "bleu": 0.0,
        "chrf": 0.0,
        "bleu_ci": (0.0, 0.0),
        "chrf_ci": (0.0, 0.0),
    }
    assert rows[2]["bleu_ci"] == want2["bleu"] and rows[2]["chrf_ci"] == want2["chrf"]
    assert res["models"]["luong"]["by_length"][0]["chrf_ci"] == pytest.approx((100.0, 100.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".attnlab-files", "length.png", "results.json", "table.md"]
    raw = (tmp_path / "results.json").read_text(encoding="utf-8")
    written = json.loads(raw)
    assert raw == json.dumps(written, indent=2)  # indented by two for a reader
    assert written["models"]["none"]["by_length"][1]["bleu_ci"] == [0.0, 0.0]
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == length.table(written)


# -- alignment ------------------------------------------------------------------------------------


def _verses():
    """12 verses: source words s0 … and target words t0 …, each linked t_j ↔ s_j where both exist."""
    out = []
    for i in range(12):
        n_src, n_tgt = 2 + i % 4, 2 + (i * 5) % 3
        src = tuple(f"s{(i + j) % 5}" for j in range(n_src))
        tgt = tuple(f"t{(i + j) % 5}" for j in range(n_tgt))
        out.append(Verse(f"{i:08d}", src, tgt, frozenset((j, j) for j in range(min(n_src, n_tgt)))))
    # verses the filter drops: too long a source, too long a target, no target
    out += [
        Verse("x1", ("s0",) * 7, ("t0",), frozenset({(0, 0)})),
        Verse("x2", ("s0",), ("t0",) * 9, frozenset()),
        Verse("x3", ("s0",), (), frozenset()),
    ]
    return out


def test_alignment_run_keeps_splits_trains_and_scores(tmp_path, monkeypatch):
    verses = _verses()
    forms = []
    monkeypatch.setattr(
        alignment, "load_verses", lambda source_form: forms.append(source_form) or verses
    )
    trained = []

    def recorder(model, train, valid, cfg, *, progress, desc):
        trained.append((desc, model.config, len(train), valid, cfg, progress))
        return SimpleNamespace()

    monkeypatch.setattr(alignment, "train", recorder)
    cfg = alignment.AlignmentConfig(
        max_src=6,
        max_tgt=8,
        max_verses=10,
        test_size=4,
        min_count=1,
        steps=30,
        batch_size=3,
        lr=0.01,
        emb_dim=4,
        hidden=6,
        attn_dim=5,
        threshold=0.25,
        ibm_iterations=2,
        buckets=2,
        seed=1,
    )
    res = alignment.run(cfg, tmp_path, progress=True)
    assert forms == ["lemma"]
    kept = verses[:10]  # the filter keeps the 12 valid verses, max_verses cuts at 10
    order = torch.randperm(10, generator=torch.Generator().manual_seed(1)).tolist()
    test = [kept[i] for i in order[:4]]
    assert (res["n_train"], res["n_test"]) == (6, 4)
    assert [d for d, *_ in trained] == ["bahdanau", "luong"]
    for desc, mc, n_train, valid, tcfg, progress in trained:
        assert (mc.decoder, mc.emb_dim, mc.hidden, mc.attn_dim) == (desc, 4, 6, 5)
        assert n_train == 6 and valid == [] and progress is True
        assert tcfg == TrainConfig(
            steps=30, batch_size=3, lr=0.01, seed=1, eval_every=0, save_every=0, log_every=3
        )
    methods = [
        "diagonal",
        "ibm1",
        "bahdanau argmax",
        "bahdanau ≥0.25",
        "luong argmax",
        "luong ≥0.25",
    ]
    assert list(res["aer"]) == methods and list(res["aer_by_length"]) == methods
    assert list(res["seconds"]) == ["ibm1", "bahdanau", "luong"]
    # the diagonal's AER, by hand from the gold links and ⌊(t + ½) · S / T⌋
    gold = [set(v.links) for v in test]
    diag = [
        {(int((t + 0.5) * len(v.source) / len(v.target)), t) for t in range(len(v.target))}
        for v in test
    ]
    hit = sum(len(d & g) for d, g in zip(diag, gold))
    assert res["aer"]["diagonal"] == pytest.approx(
        1 - 2 * hit / sum(len(d) + len(g) for d, g in zip(diag, gold))
    )
    lengths = [len(v.source) for v in test]
    for (lo, hi), a in zip(res["buckets"], res["aer_by_length"]["diagonal"]):
        sel = [i for i, n in enumerate(lengths) if lo <= n <= hi]
        h = sum(len(diag[i] & gold[i]) for i in sel)
        assert a == pytest.approx(1 - 2 * h / sum(len(diag[i]) + len(gold[i]) for i in sel))
    assert res["config"]["threshold"] == 0.25 and res["wall_seconds"] >= sum(
        res["seconds"].values()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".attnlab-files",
        "alignment.png",
        "results.json",
        "table.md",
    ]
    raw = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert '"bahdanau ≥0.25"' in raw and raw.startswith('{\n  "config": {\n    "max_src": 6,')
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == alignment.table(json.loads(raw))
    assert np.isfinite(list(res["aer"].values())).all()
