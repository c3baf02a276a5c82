"""The recommendation experiment's models (``Recommender``, every kind) and ``SASRec.score`` refuse
item ids outside [0, num_items], histories with no position or longer than the window, batches that
differ and non-integer ids, each with one error naming what was given; an all-padding history (a user
with no items yet), an empty batch and no candidates still give scores of the right shape."""

from __future__ import annotations

import pytest
import torch

from attnlab.data.interactions import InteractionConfig
from attnlab.experiments.recommendation import MODELS, RecommendationConfig, Recommender
from attnlab.nn import SASRec

CFG = RecommendationConfig(data=InteractionConfig(num_users=20, num_items=30, min_len=5, max_len=8), dim=8, window=6)
IDS = "item ids must be in [0, 30] (0 = padding); got "
HIST_LEN = "hist must be (b, n) with 1 <= n <= window = 6 (a user with fewer items is left-padded with 0); got shape "

CASES = [
    ((torch.tensor([[1, 31]]), torch.tensor([[1, 2]])), ValueError, "hist: " + IDS + "[1, 31]"),
    ((torch.tensor([[-1, 2]]), torch.tensor([[1, 2]])), ValueError, "hist: " + IDS + "[-1, 2]"),
    ((torch.tensor([[1, 2]]), torch.tensor([[1, 35]])), ValueError, "cands: " + IDS + "[1, 35]"),
    ((torch.zeros(1, 0, dtype=torch.long), torch.tensor([[1, 2]])), ValueError, HIST_LEN + "(1, 0)"),
    ((torch.ones(1, 7, dtype=torch.long), torch.tensor([[1, 2]])), ValueError, HIST_LEN + "(1, 7)"),
    ((torch.tensor([1, 2]), torch.tensor([[1, 2]])), ValueError, "hist must be (b, n) item ids; got shape (2)"),
    ((torch.tensor([[1, 2]]), torch.tensor([[1, 2], [3, 4]])), ValueError,
     "hist and cands must have one row per user each; got hist (1, 2), cands (2, 2)"),
    ((torch.tensor([[1.0, 2.0]]), torch.tensor([[1, 2]])), TypeError,
     "hist must be an integer tensor of item ids; got dtype torch.float32"),
    (([[1, 2]], torch.tensor([[1, 2]])), ValueError, "hist must be a torch.Tensor; got list"),
]


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("inputs,error,message", CASES, ids=[m for *_, m in CASES])
def test_bad_ids_and_shapes_are_one_error(kind, inputs, error, message):
    torch.manual_seed(0)
    with pytest.raises(error) as e:
        Recommender(kind, CFG)(*inputs)
    assert str(e.value) == message


@pytest.mark.parametrize("kind", MODELS)
def test_padding_only_histories_empty_batches_and_no_candidates_give_empty_or_finite_scores(kind):
    torch.manual_seed(0)
    m = Recommender(kind, CFG).eval()
    assert m(torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 2, dtype=torch.long)).shape == (0, 2)
    assert m(torch.tensor([[1, 2]]), torch.zeros(1, 0, dtype=torch.long)).shape == (1, 0)
    s = m(torch.tensor([[0, 0, 0]]), torch.tensor([[1, 2]]))
    assert s.shape == (1, 2) and bool(torch.isfinite(s).all())


def test_din_scores_each_candidate_by_its_own_pooled_history():
    """The DIN model's score of candidate c is proj(TargetAttention(e_c, history)) · e_c, candidate by candidate."""
    torch.manual_seed(0)
    m = Recommender("din", CFG).eval()
    hist, cands = torch.tensor([[0, 3, 4, 5], [1, 2, 7, 9]]), torch.tensor([[3, 8, 1], [2, 2, 30]])
    got = m(hist, cands)
    e = m.emb(hist)
    for b in range(2):
        for j in range(3):
            c = m.emb(cands[b, j:j + 1])  # (1, d)
            pooled, _ = m.attn(c, e[b:b + 1], mask=(hist[b:b + 1] != 0))
            torch.testing.assert_close(got[b, j], (m.proj(pooled) * c).sum())


def test_sasrec_score_refuses_what_does_not_fit():
    model = SASRec(10, 8, 5)
    states, items = torch.randn(2, 8), torch.tensor([[1], [2]])
    cases = [((torch.randn(3, 8), items), "states must be (b, d) = (2, 8), one row per row of items (2, 1); got (3, 8)"),
             ((torch.randn(2, 7), items), "states must be (b, d) = (2, 8), one row per row of items (2, 1); got (2, 7)"),
             ((torch.randn(2, 1, 8), items),
              "states must be (b, d) = (2, 8), one row per row of items (2, 1); got (2, 1, 8)"),
             ((states, torch.tensor([1, 2])), "items must be (b, n) item ids; got shape (2)"),
             ((states, torch.tensor([[1], [11]])), "items: item ids must be in [0, 10] (0 = padding); got [1, 11]")]
    for args, message in cases:
        with pytest.raises(ValueError) as e:
            model.score(*args)
        assert str(e.value) == message
    torch.testing.assert_close(model.score(states, items),
                               (model.item_embedding.weight[items[:, 0]] * states).sum(-1, keepdim=True))
