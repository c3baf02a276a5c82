"""The recommendation experiment: its ranking metrics by hand, the held-out split, and the quick CLI run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.data.interactions import InteractionConfig, generate
from attnlab.experiments.recommendation import MODELS, RecommendationConfig, evaluate, held_out


class _Fixed(torch.nn.Module):
    """Scores given in advance: candidate 0 is the held-out item."""

    kind = "mean"

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def forward(self, hist, cands):
        return self.scores[: len(hist)]


def test_hit_rate_and_ndcg_by_hand():
    cfg = RecommendationConfig(eval_negatives=12, k=10)
    scores = torch.zeros(3, 13)
    scores[0, 0] = 1.0  # rank 0: hit, NDCG 1
    scores[1, 0], scores[1, 1:4] = 0.5, 1.0  # rank 3: hit, NDCG 1 / log2(5)
    scores[2, 0], scores[2, 1:12] = -1.0, 1.0  # rank 11 (the 12th negative ties at 0 and is below): miss
    scores[2, 12] = -2.0
    test = (torch.ones(3, 4, dtype=torch.long), torch.zeros(3, 13, dtype=torch.long), np.full(3, -1))
    got = evaluate(_Fixed(scores), test, cfg)
    assert got["hr"] == pytest.approx(2 / 3)
    assert got["ndcg"] == pytest.approx((1 + 1 / np.log2(5)) / 3)


def test_the_held_out_item_is_last_its_negatives_unseen_and_its_cause_located():
    cfg = RecommendationConfig(data=InteractionConfig(num_users=30, min_len=12, max_len=20), window=8, eval_negatives=20)
    data = generate(cfg.data, seed=0)
    hist, cands, source = held_out(data, cfg, 0)
    for u, h in enumerate(data.histories):
        real = hist[u][hist[u] != 0].numpy()
        assert np.array_equal(real, h[-9:-1])  # the 8 items before the held-out one
        assert cands[u, 0] == h[-1] and not np.isin(cands[u, 1:].numpy(), h).any()
        s = data.sources[u][-1]
        if s >= 0:  # the window's index of the cause: lag = 3 before the held-out item
            assert source[u] == 8 - 3 and hist[u, source[u]] == h[s]
        else:
            assert source[u] == -1


def test_quick_run_writes_the_table_and_attention_beats_mean_pooling(tmp_path, capsys):
    """The quick size (500 users, 2 seeds, 800 steps): every number in range; DIN's target attention
    and SASRec beat mean pooling in each seed; each attention model puts more weight on the cause than chance."""
    assert main(["experiment", "recommendation", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["metrics"]) == set(MODELS) and all(f"| {m} |" in out for m in MODELS)
    assert (tmp_path / "table.md").read_text() in out
    for m, d in res["per_seed"].items():
        assert all(0 <= v <= 1 for vs in d.values() for v in vs), m
        assert all(n <= h for n, h in zip(d["ndcg"], d["hr"])), m  # NDCG@k ≤ HR@k
        assert min(d["hr"]) > 2 * res["chance_hr"], m  # every model learns something
    ps = res["per_seed"]
    for m in ("din", "sasrec"):  # in each seed, by NDCG and by hit rate
        assert all(a > b for a, b in zip(ps[m]["ndcg"], ps["mean"]["ndcg"])), m
        assert all(a > b for a, b in zip(ps[m]["hr"], ps["mean"]["hr"])), m
    for m in ("din", "sasrec"):
        assert min(ps[m]["weight_on_source"]) > 1.5 * res["chance_weight_on_source"], m


@pytest.mark.parametrize("bad", [["--seeds", "0"], ["--steps", "-1"]])
def test_bad_flags_exit_with_one_line(bad, capsys):
    with pytest.raises(SystemExit) as info:
        main(["experiment", "recommendation", *bad])
    assert info.value.code != 0


def test_progress_reports_each_seed_and_model_with_the_numbers_it_records():
    from attnlab.experiments.recommendation import run

    lines = []
    cfg = RecommendationConfig(data=InteractionConfig(num_users=60, min_len=6, max_len=8), seeds=2, steps=3,
                               batch_size=16, dim=8, window=8, train_negatives=3)
    res = run(cfg, progress=lines.append)
    want = [f"seed {s} {m:6s}: hit rate@{cfg.k} {res['per_seed'][m]['hr'][s]:.3f}, "
            f"NDCG@{cfg.k} {res['per_seed'][m]['ndcg'][s]:.3f}" for s in range(2) for m in cfg.models]
    assert [line for line in lines if line.startswith("seed ")] == want
