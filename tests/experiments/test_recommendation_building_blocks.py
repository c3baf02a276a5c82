"""The recommendation experiment's parts against references written here: the history window (left-padded), a
training batch (a cut before the held-out item, the true item first, negatives among the items), the models'
sizes and user vectors (mean pooling and the GRU's last state recomputed with torch), the chance weight, the
weight put on the cause, and a run's records and files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnlab.experiments.recommendation as rec
from attnlab.data.interactions import InteractionConfig, Interactions, generate
from attnlab.experiments.recommendation import (
    RecommendationConfig,
    Recommender,
    _window,
    chance_weight,
    train_batch,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(**kw):
    return RecommendationConfig(
        data=InteractionConfig(num_users=20, num_items=40, num_clusters=4, min_len=6, max_len=9),
        **{
            **dict(
                seeds=1,
                steps=2,
                batch_size=5,
                dim=4,
                window=5,
                train_negatives=3,
                eval_negatives=6,
                k=2,
            ),
            **kw,
        },
    )


def test_the_window_holds_the_n_items_before_end_left_padded():
    items = np.array([11, 12, 13, 14, 15, 16])
    assert _window(items, 4, 3).tolist() == [12, 13, 14]
    assert _window(items, 2, 4).tolist() == [0, 0, 11, 12]
    assert _window(items, 0, 2).tolist() == [0, 0]
    assert _window(items, 6, 6).tolist() == [11, 12, 13, 14, 15, 16]
    assert _window(items, 6, 5).dtype == np.int64


def test_a_training_batch_cuts_before_the_held_out_item():
    cfg = _cfg(batch_size=200)
    data = Interactions(
        cfg.data,
        [np.arange(1, 8), np.arange(20, 26)],
        [np.full(7, -1), np.full(6, -1)],
        [np.array([0]), np.array([1])],
    )
    hist, cands = train_batch(data, cfg, np.random.default_rng(0))
    assert hist.shape == (200, 5) and cands.shape == (200, 1 + 3)
    assert hist.dtype == cands.dtype == torch.int64
    cuts = set()
    for h, c in zip(hist.numpy(), cands.numpy()):
        user = data.histories[0] if c[0] < 20 else data.histories[1]
        t = int(np.flatnonzero(user == c[0])[0])
        assert 1 <= t <= len(user) - 2  # predict h[t] from h[:t], never the last (held-out) item
        assert h.tolist() == _window(user, t, 5).tolist()
        cuts.add((int(c[0]) >= 20, t))
    assert cuts == {(False, t) for t in range(1, 6)} | {
        (True, t) for t in range(1, 5)
    }  # every cut drawn
    neg = cands[:, 1:].numpy()
    assert neg.min() == 1 and neg.max() == 40  # negatives: any item id, 1 … num_items


def test_the_models_sizes():
    cfg = _cfg(dim=6, window=7)
    for kind in ("mean", "gru", "din"):
        m = Recommender(kind, cfg)
        assert (m.emb.num_embeddings, m.emb.embedding_dim, m.emb.padding_idx) == (41, 6, 0)
        assert (m.proj.in_features, m.proj.out_features) == (6, 6)
    gru = Recommender("gru", cfg).gru
    assert (gru.input_size, gru.hidden_size, gru.batch_first) == (6, 6, True)
    din = Recommender("din", cfg).attn
    assert (din.dim, din.hidden_dim, din.normalise) == (6, 12, "softmax")
    s = Recommender("sasrec", cfg).sasrec
    assert (s.num_items, s.max_len, len(s.blocks), s.item_embedding.embedding_dim) == (40, 7, 2, 6)
    assert s.blocks[0].attn.num_heads == 1
    with pytest.raises(ValueError) as e:
        Recommender("bert", cfg)
    assert str(e.value) == "model must be one of ('mean', 'gru', 'din', 'sasrec'); got 'bert'"


def test_mean_pooling_and_the_gru_score_candidates_with_their_user_vector():
    cfg = _cfg()
    torch.manual_seed(0)
    hist = torch.tensor([[0, 0, 3, 5, 9], [1, 2, 3, 4, 5]])
    cands = torch.tensor([[3, 7, 11], [40, 1, 2]])
    m = Recommender("mean", cfg)
    e, c = m.emb(hist), m.emb(cands)
    u = torch.stack([e[0, 2:].mean(0), e[1].mean(0)])  # the real items only
    torch.testing.assert_close(m(hist, cands), (m.proj(u)[:, None] * c).sum(-1))
    g = Recommender("gru", cfg)
    _, h_n = g.gru(g.emb(hist))
    torch.testing.assert_close(
        g(hist, cands), (g.proj(h_n[0])[:, None] * g.emb(cands)).sum(-1), rtol=1e-5, atol=1e-6
    )


def test_din_scores_each_candidate_with_its_own_pooled_history_and_returns_its_weights():
    cfg = _cfg()
    torch.manual_seed(1)
    m = Recommender("din", cfg)
    hist = torch.tensor([[0, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    cands = torch.tensor([[3, 7], [11, 12]])
    s, w = m(hist, cands, need_weights=True)
    assert w.shape == (2, 2, 5)
    for b in range(2):
        for j in range(2):
            pooled, wj = m.attn(
                m.emb(cands[b, j])[None],
                m.emb(hist[b])[None],
                mask=(hist[b] != 0)[None],
                need_weights=True,
            )
            torch.testing.assert_close(w[b, j], wj[0])
            torch.testing.assert_close(
                s[b, j], (m.proj(pooled[0]) * m.emb(cands[b, j])).sum(), rtol=1e-5, atol=1e-6
            )
    assert float(w[0, :, 0].detach().abs().max()) == 0.0  # no weight on padding
    torch.testing.assert_close(m(hist, cands), s)


def test_chance_weight_is_the_mean_of_one_over_the_history_length_where_a_cause_is_known():
    hist = torch.tensor([[0, 0, 1, 2], [1, 2, 3, 4], [0, 5, 6, 7]])
    assert chance_weight((hist, None, np.array([2, -1, 3]))) == pytest.approx((1 / 2 + 1 / 3) / 2)
    # a cause at the window's first slot (index 0) is known too: 1/4 from the full second row
    assert chance_weight((hist, None, np.array([2, 0, -1]))) == pytest.approx((1 / 2 + 1 / 4) / 2)


class _Weights(torch.nn.Module):
    def __init__(self, kind, scores, weights):
        super().__init__()
        self.kind, self.scores, self.weights = kind, scores, weights

    def forward(self, hist, cands, need_weights=False):
        idx = hist[:, 0]  # each row's index, smuggled in the first history slot
        return (self.scores[idx], self.weights[idx]) if need_weights else self.scores[idx]


def test_the_weight_on_the_cause_din_reads_the_held_out_candidates_row():
    scores = torch.tensor([[1.0, 0.0, 2.0], [1.0, 0.5, 0.0], [0.0, 1.0, 2.0]])  # ranks 1, 0, 2
    w_din = torch.zeros(3, 3, 4)
    w_din[:, 0] = torch.tensor([[0.0, 0.1, 0.2, 0.7], [0.0, 0.5, 0.25, 0.25], [0.0, 0.0, 0.9, 0.1]])
    w_din[:, 1:] = 0.3  # the negatives' weights: never read
    hist = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1], [2, 1, 1, 1]])
    test = (hist, torch.zeros(3, 3, dtype=torch.long), np.array([3, -1, 2]))
    cfg = _cfg(k=2)
    got = rec.evaluate(_Weights("din", scores, w_din), test, cfg, chunk=2)
    assert got["hr"] == pytest.approx(2 / 3)
    assert got["ndcg"] == pytest.approx((1 / np.log2(3) + 1) / 3)
    assert got["weight_on_source"] == pytest.approx((0.7 + 0.9) / 2)
    w_sas = w_din[:, 0]  # SASRec: (b, n) already
    got = rec.evaluate(_Weights("sasrec", scores, w_sas), test, cfg, chunk=1)
    assert got["weight_on_source"] == pytest.approx(0.8)
    none_known = (hist, test[1], np.array([-1, -1, -1]))
    assert "weight_on_source" not in rec.evaluate(_Weights("din", scores, w_din), none_known, cfg)


def test_a_run_records_every_seed_and_writes_its_files(tmp_path):
    cfg = _cfg(seeds=2, models=("mean", "din"))
    res = rec.run(cfg, tmp_path)
    assert list(res) == [
        "config",
        "per_seed",
        "metrics",
        "chance_weight_on_source",
        "chance_hr",
        "seconds",
    ]
    assert res["chance_hr"] == 2 / 7
    chance = [chance_weight(rec.held_out(generate(cfg.data, seed=s), cfg, s)) for s in range(2)]
    assert res["chance_weight_on_source"] == pytest.approx(np.mean(chance))
    assert set(res["per_seed"]["mean"]) == {"hr", "ndcg"} and set(res["per_seed"]["din"]) == {
        "hr",
        "ndcg",
        "weight_on_source",
    }
    for m, d in res["per_seed"].items():
        for key, v in d.items():
            assert len(v) == 2
            assert res["metrics"][m][key][0] == pytest.approx(np.mean(v))
            assert res["metrics"][m][key][1] == pytest.approx(
                12.706 * np.std(v, ddof=1) / np.sqrt(2)
            )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".attnlab-files", "results.json", "table.md"]
    text = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert text.startswith('{\n "config": {\n  "data": {\n   "num_users": 20,')
    assert json.loads(text)["per_seed"] == res["per_seed"]
    assert (tmp_path / "table.md").read_text(encoding="utf-8") == rec.table(json.loads(text))
