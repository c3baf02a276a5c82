"""The faithfulness experiment: the replacements are what they claim, the decoder's weights_override changes
nothing when it returns the model's own weights (bit for bit) and otherwise forms the context from the new
weights (checked against the decoder's cell and output layer called by hand), the adversary keeps the output
within ε (recomputed here), the distances against float64 NumPy, and the CLI writes its files."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.experiments.faithfulness import (
    FaithfulnessConfig,
    adversarial_weights,
    dirichlet_weights,
    jsd,
    permuted_weights,
    tvd,
    uniform_weights,
)
from attnlab.models import Seq2Seq, Seq2SeqConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def mask():
    m = torch.ones(4, 6, dtype=torch.bool)
    m[1, 4:] = False
    m[2, 1:] = False  # a single real key
    m[3, :2] = False  # padding in front too: nothing assumes it comes last
    return m


def model_and_step(decoder: str, rnn: str = "gru"):
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(src_vocab=11, tgt_vocab=12, decoder=decoder, rnn=rnn, emb_dim=8, hidden=16,
                                  attn_dim=8)).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.6)
    src = torch.randint(4, 11, (4, 6))
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    src[~mask] = 0
    with torch.no_grad():
        memory, state = model.start(src, mask)
    return model, memory, state, torch.randint(4, 12, (4,))


def test_uniform_is_one_over_n_on_real_keys(mask):
    u = uniform_weights(mask)
    n = mask.sum(1, keepdim=True).double()
    np.testing.assert_array_equal(u.numpy(), np.where(mask.numpy(), 1 / n.numpy(), 0.0).astype(np.float32))
    torch.testing.assert_close(u.sum(1), torch.ones(4))


def test_permutation_keeps_the_multiset_and_the_padding(mask):
    g = torch.Generator().manual_seed(0)
    w = torch.rand(4, 6).masked_fill(~mask, 0)
    w = w / w.sum(1, keepdim=True)
    moved = 0
    for _ in range(20):
        p = permuted_weights(w, mask, g)
        assert bool((p[~mask] == 0).all())
        for row in range(4):
            assert sorted(p[row][mask[row]].tolist()) == sorted(w[row][mask[row]].tolist())
        moved += int((p != w).any(1).sum())
    assert moved > 20  # it does permute (rows 0, 1, 3 have several keys)


def test_dirichlet_draws_sum_to_one_on_real_keys_with_mean_one_over_n(mask):
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([dirichlet_weights(mask, g) for _ in range(3000)])  # (3000, 4, 6)
    assert bool((draws[:, ~mask] == 0).all()) and bool((draws[:, mask] > 0).all())
    torch.testing.assert_close(draws.sum(-1), torch.ones(3000, 4))
    mean = draws.mean(0)
    n = mask.sum(1, keepdim=True).float()
    torch.testing.assert_close(mean[mask], (1 / n).expand(4, 6)[mask], atol=0.02, rtol=0)  # E[Dir(1..1)] = 1/n


def test_replacement_draws_come_from_the_given_generator_alone(mask):
    """Seeded alike, two generators give the same Dirichlet and permutation draws whatever the global RNG
    has done meanwhile; another seed gives other draws."""
    w = uniform_weights(mask) * torch.linspace(1, 2, 6)
    draws = []
    for seed, global_seed in ((3, 0), (3, 1), (4, 1)):
        torch.manual_seed(global_seed)
        g = torch.Generator().manual_seed(seed)
        draws.append((dirichlet_weights(mask, g, torch.float64), permuted_weights(w, mask, g)))
    assert draws[0][0].dtype == torch.float64
    assert torch.equal(draws[0][0], draws[1][0]) and torch.equal(draws[0][1], draws[1][1])
    assert not torch.equal(draws[0][0], draws[2][0])


def test_distances_against_numpy():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7), 5), rng.dirichlet(np.ones(7), 5)
    q[0, 3] = 0.0
    q[0] /= q[0].sum()
    m = (p + q) / 2
    kl = lambda a, b: np.sum(np.where(a > 0, a * np.log(np.where(a > 0, a, 1) / b), 0.0), -1)  # noqa: E731
    np.testing.assert_allclose(jsd(torch.tensor(p), torch.tensor(q)).numpy(), 0.5 * kl(p, m) + 0.5 * kl(q, m), rtol=1e-12)
    np.testing.assert_allclose(tvd(torch.tensor(p), torch.tensor(q)).numpy(), 0.5 * np.abs(p - q).sum(-1), rtol=1e-12)
    one_hot = torch.eye(2, dtype=torch.float64)
    assert float(jsd(one_hot[0], one_hot[1])) == pytest.approx(math.log(2)) and float(tvd(one_hot[0], one_hot[1])) == 1.0


@pytest.mark.parametrize("decoder, rnn", [("bahdanau", "gru"), ("luong", "gru"), ("luong", "lstm")])
def test_own_weights_change_nothing(decoder, rnn):
    model, memory, state, y = model_and_step(decoder, rnn)
    with torch.no_grad():
        logits, new, w = model.step(memory, state, y)
        logits2, new2, w2 = model.step(memory, state, y, weights_override=lambda weights: weights)
    assert torch.equal(logits, logits2) and torch.equal(w, w2)
    assert new.keys() == new2.keys() and all(torch.equal(new[k], new2[k]) for k in new)


def test_the_override_forms_the_context():
    """Bahdanau with one-hot weights on key j: c_t = h_j, then the cell and the output layer, called by hand."""
    model, memory, state, y = model_and_step("bahdanau")
    j = torch.tensor([0, 2, 5, 1])  # row 1 puts the weight on a real key, row 2 on the last one
    one_hot = torch.nn.functional.one_hot(j, 6).float()
    assert bool(memory["mask"][torch.arange(4), j].all())  # every chosen key is a real one
    with torch.no_grad():
        logits, new, w = model.step(memory, state, y, weights_override=lambda weights: one_hot)
        context = memory["keys"][torch.arange(4), j]  # (b, d_e)
        h = model.cell(torch.cat([model.embed(y), context], -1), state["h"])
        _, ref = model.output(context, h)
    assert torch.equal(w, one_hot)
    torch.testing.assert_close(new["h"], h, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits, ref, rtol=1e-6, atol=1e-6)


def test_override_errors():
    model, memory, state, y = model_and_step("bahdanau")
    with pytest.raises(ValueError, match=r"\(4, 6\)"):
        model.step(memory, state, y, weights_override=lambda w: w[:, :3])
    none = Seq2Seq(Seq2SeqConfig(src_vocab=11, tgt_vocab=12, decoder="none", emb_dim=8, hidden=16))
    mem, st = none.start(torch.randint(4, 11, (2, 3)), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="'none'"):
        none.step(mem, st, torch.ones(2, dtype=torch.long), weights_override=lambda w: w)


@pytest.mark.parametrize("decoder", ["bahdanau", "luong"])
def test_the_adversary_stays_within_epsilon(decoder):
    model, memory, state, y = model_and_step(decoder)
    with torch.no_grad():
        logits, _, w = model.step(memory, state, y)
    p = torch.softmax(logits, -1)
    eps = 0.05
    adv, j, t = adversarial_weights(model, memory, state, y, w, p, epsilon=eps, steps=30, lr=0.3, penalty=10.0,
                                    generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        q = torch.softmax(model.step(memory, state, y, weights_override=lambda _w: adv)[0], -1)
    pn, qn, an, wn = (x.double().numpy() for x in (p, q, adv, w))
    out_tvd = 0.5 * np.abs(pn - qn).sum(-1)
    assert (out_tvd <= eps + 1e-6).all()
    np.testing.assert_allclose(t.numpy(), out_tvd, atol=1e-6)
    assert bool((adv[~memory["mask"]] == 0).all())
    torch.testing.assert_close(adv.sum(-1), torch.ones(4))
    torch.testing.assert_close(j, jsd(adv, w), atol=1e-6, rtol=0)
    assert float(j.max()) > 0.05  # it does move the weights somewhere
    assert not any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


def test_the_adversary_works_in_the_model_dtype():
    """A bfloat16 model: α', its JSD and the output TVD come back in bfloat16, within ε (recomputed in float64)."""
    model, _, _, y = model_and_step("luong")
    model = model.to(torch.bfloat16)
    src, mask = torch.randint(4, 11, (4, 6)), torch.ones(4, 6, dtype=torch.bool)
    mask[1, 3:] = False
    with torch.no_grad():
        memory, state = model.start(src.masked_fill(~mask, 0), mask)
        logits, _, w = model.step(memory, state, y)
    assert w.dtype == torch.bfloat16
    p = torch.softmax(logits, -1)
    eps = 0.05
    adv, j, t = adversarial_weights(model, memory, state, y, w, p, epsilon=eps, steps=5, lr=0.3, penalty=10.0,
                                    generator=torch.Generator().manual_seed(0))
    assert adv.dtype == j.dtype == t.dtype == torch.bfloat16
    with torch.no_grad():
        q = torch.softmax(model.step(memory, state, y, weights_override=lambda _w: adv)[0], -1)
    out_tvd = 0.5 * np.abs(p.double().numpy() - q.double().numpy()).sum(-1)
    assert (out_tvd <= eps + 1e-2).all()
    np.testing.assert_allclose(t.double().numpy(), out_tvd, atol=1e-2)


def test_config_checks():
    with pytest.raises(ValueError, match="bahdanau, luong"):
        FaithfulnessConfig(decoders=("none",))
    with pytest.raises(ValueError, match="epsilon"):
        FaithfulnessConfig(epsilon=0)


def test_cli_quick_writes_its_files(tmp_path, capsys):
    out = tmp_path / "f"
    assert main(["experiment", "faithfulness", "--quick", "--quiet", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".attnlab-files", "faithfulness.png", "results.json", "table.md"]
    res = json.loads((out / "results.json").read_text())
    assert set(res["models"]) == {"bahdanau", "luong"}
    for r in res["models"].values():
        assert set(r["methods"]) == {"uniform", "permuted", "random", "adversarial"}
        assert r["methods"]["adversarial"]["out_tvd_max"] <= res["config"]["epsilon"] + 1e-6
    text = capsys.readouterr().out
    assert "adversarial (TVD ≤ 0.01)" in text and (out / "table.md").read_text() in text


def test_cli_on_a_run(tmp_path, capsys):
    train = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "200", "--max-digits", "3", "--emb", "8",
             "--hidden", "8", "--attn-dim", "8", "--batch-size", "16", "--eval-every", "0", "--save-every", "0",
             "--steps", "3", "--quiet"]
    run = tmp_path / "run"
    assert main([*train, "--attention", "luong", "--out", str(run)]) == 0
    out = tmp_path / "f"
    t0 = time.perf_counter()
    assert main(["experiment", "faithfulness", "--checkpoint", str(run), "--test-size", "5", "--adv-steps", "2",
                 "--quiet", "--out", str(out)]) == 0
    took = time.perf_counter() - t0
    assert "| luong | uniform |" in capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["run"] == str(run) and 0 < res["seconds"] <= took  # the measurement's own wall time
    none = tmp_path / "none"
    assert main([*train, "--attention", "none", "--out", str(none)]) == 0
    capsys.readouterr()
    assert main(["experiment", "faithfulness", "--checkpoint", str(none), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no attention" in err and len(err.splitlines()) == 1
