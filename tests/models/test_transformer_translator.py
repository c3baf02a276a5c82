"""The translation lab with a Transformer: learning, cached decoding, resume, the CLI and the experiment."""

import json
import random
import re
import shutil

import pytest
import torch
from evaluate_check import check_evaluate_against_translate

from attnlab.cli import main
from attnlab.data.batching import collate, encode_pairs
from attnlab.data.vocab import BOS, EOS, Vocab
from attnlab.models import MODELS, TransformerConfig, TransformerTranslator, build_model
from attnlab.nn.cache import LayerCache
from attnlab.train.decode import beam_search, greedy
from attnlab.train.loop import TrainConfig, train

LETTERS = "abcdef"
VOCAB = Vocab(list(LETTERS), "char")
POSITIONS = ("sinusoidal", "learned", "rope")


pytestmark = pytest.mark.usefixtures("one_thread")


def reversal(n, seed, lo=2, hi=5):  # the toy task of tests/test_seq2seq.py
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        s = "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))
        pairs.append((s, s[::-1]))
    return pairs


def small(positional="sinusoidal", **kw):
    torch.manual_seed(0)
    cfg = dict(src_vocab=len(VOCAB), tgt_vocab=len(VOCAB), dim=32, num_heads=2, num_encoder_layers=2,
               num_decoder_layers=2, ffn_dim=64, dropout=0.0, positional=positional, max_len=32)
    cfg.update(kw)
    return TransformerTranslator(TransformerConfig(**cfg))


def test_registered_and_rebuilt_from_its_config():
    m = small("rope", num_kv_heads=1)
    assert MODELS["transformer"] == (TransformerConfig, TransformerTranslator)
    again = build_model(json.loads(json.dumps(m.config_dict())))  # as read back from config.json
    assert isinstance(again, TransformerTranslator) and again.config == m.config
    assert again.state_dict().keys() == m.state_dict().keys()
    with pytest.raises(ValueError, match="unknown fields"):
        build_model({**m.config_dict(), "decoder": "luong"})
    with pytest.raises(ValueError, match="multiple of num_heads"):
        TransformerConfig(src_vocab=5, tgt_vocab=5, dim=30, num_heads=4)
    with pytest.raises(ValueError, match="positional"):
        TransformerConfig(src_vocab=5, tgt_vocab=5, positional="alibi")


def test_positions_need_an_even_dim_for_sinusoidal_and_an_even_head_size_for_rope():
    """Sinusoidal positions pair the model's dim (sin, cos); rotary ones pair each head's dims: dim=6 over
    2 heads (head size 3) suits sinusoidal and learned positions, not rope; dim=6 over 3 heads (size 2) suits all."""
    for positional in ("sinusoidal", "learned"):
        cfg = TransformerConfig(src_vocab=5, tgt_vocab=5, dim=6, num_heads=2, positional=positional)
        assert TransformerTranslator(cfg).config.dim == 6
    with pytest.raises(ValueError) as e:
        TransformerConfig(src_vocab=5, tgt_vocab=5, dim=6, num_heads=2, positional="rope")
    assert str(e.value) == "rope positions need an even the head size dim / num_heads; got dim=6, num_heads=2"
    assert TransformerTranslator(TransformerConfig(src_vocab=5, tgt_vocab=5, dim=6, num_heads=3, positional="rope"))
    TransformerConfig(src_vocab=5, tgt_vocab=5, dim=5, num_heads=1, positional="learned")  # an odd dim: learned only
    with pytest.raises(ValueError) as e:
        TransformerConfig(src_vocab=5, tgt_vocab=5, dim=5, num_heads=1, positional="sinusoidal")
    assert str(e.value) == "sinusoidal positions need an even dim; got dim=5, num_heads=1"


def test_transformer_learns_reversal():
    train_ex = encode_pairs(reversal(1500, 0), VOCAB, VOCAB)
    test_ex = encode_pairs(reversal(100, 1), VOCAB, VOCAB)
    m = small()
    train(m, train_ex, [], TrainConfig(steps=400, batch_size=32, lr=3e-3, eval_every=0, save_every=0), progress=False)
    m.eval()
    batch = collate(test_ex)
    hyps = greedy(m, batch.src, batch.src_mask, max_len=12)
    acc = sum(h.tokens == t for h, (_, t) in zip(hyps, test_ex)) / len(test_ex)
    assert acc >= 0.9, f"exact match {acc:.2f}"
    hits = total = 0
    for h, (s, _) in zip(hyps, test_ex):
        assert h.ended and h.weights.shape == (len(h.tokens) + 1, len(s))
        torch.testing.assert_close(h.weights.sum(-1), torch.ones(len(h.tokens) + 1))  # a distribution over the source
        if len(h.tokens) == len(s):
            hits += sum(a == len(s) - 1 - i for i, a in enumerate(h.weights.argmax(-1).tolist()))
            total += len(s)
    # the last layer's cross-attention, averaged over heads, finds the mirror position of a reversal
    assert hits / total >= 0.7, f"{hits}/{total} outputs aligned to their mirror position"


def _src():
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 4, 0, 0, 0], [6, 6, 7, 0, 0]])
    return src, src != 0


def _no_cache_greedy(model, src, mask, max_len):
    """Greedy decoding that recomputes the whole prefix at every step (no cache), written here."""
    tf = model.transformer
    memory = tf.encode(src, mask)
    prefix = torch.full((src.shape[0], 1), BOS)
    logits_steps, weight_steps = [], []
    for _ in range(max_len):
        logits, w = tf.decode(prefix, memory, src_mask=mask, need_weights=True)  # (b, t, V), (b, h, t, s)
        logits_steps.append(logits[:, -1])
        weight_steps.append(w[:, :, -1].mean(1))
        prefix = torch.cat([prefix, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return prefix[:, 1:], torch.stack(logits_steps, 1), torch.stack(weight_steps, 1)


@pytest.mark.parametrize("positional", POSITIONS)
@torch.no_grad()
def test_cached_greedy_equals_decoding_without_cache(positional):
    m = small(positional, num_kv_heads=1).eval()
    with torch.no_grad():
        m.transformer.out.bias[EOS] = -1e4  # never ends: compare all max_len steps
    src, mask = _src()
    toks, logits, weights = _no_cache_greedy(m, src, mask, max_len=20)  # past the cache's first buffer (16)
    hyps = greedy(m, src, mask, max_len=20)
    assert [h.tokens for h in hyps] == toks.tolist()
    memory, state = m.start(src, mask)  # the step interface, step by step, against the recomputation
    y = torch.full((3,), BOS)
    for t in range(20):
        lg, state, w = m.step(memory, state, y)
        torch.testing.assert_close(lg, logits[:, t], atol=1e-5, rtol=0)
        torch.testing.assert_close(w, weights[:, t], atol=1e-6, rtol=0)
        y = toks[:, t]
    for i, h in enumerate(hyps):
        n = int(mask[i].sum())
        torch.testing.assert_close(h.weights, weights[i, :, :n], atol=1e-6, rtol=0)
        assert torch.all(weights[i, :, n:] == 0)  # padding gets no weight


@pytest.mark.parametrize("positional", POSITIONS)
@torch.no_grad()
def test_teacher_forcing_equals_steps_and_beam_one_is_greedy(positional):
    m = small(positional).eval()
    src, mask = _src()
    tgt = torch.tensor([[BOS, 8, 7, 6], [BOS, 4, 9, 5], [BOS, 7, 6, 6]])
    logits, w = m(src, mask, tgt, need_weights=True)
    memory, state = m.start(src, mask)
    for t in range(4):
        lg, state, wt = m.step(memory, state, tgt[:, t])
        torch.testing.assert_close(lg, logits[:, t], atol=1e-5, rtol=0)
        torch.testing.assert_close(wt, w[:, t], atol=1e-6, rtol=0)
    g = greedy(m, src, mask, max_len=6)
    b1 = beam_search(m, src, mask, beam=1, max_len=6)
    b3 = beam_search(m, src, mask, beam=3, max_len=6)
    assert [h.tokens for h in g] == [h.tokens for h in b1]
    for x, y, z in zip(g, b1, b3):
        assert abs(x.score - y.score) < 1e-4 and z.score >= x.score - 1e-4
        torch.testing.assert_close(x.weights, y.weights)


@torch.no_grad()
def test_learned_positions_end_with_a_clear_error():
    m = small("learned", max_len=8).eval()
    m.transformer.out.bias[EOS] = -1e4  # never ends
    src, mask = _src()
    assert len(greedy(m, src, mask, max_len=8)[0].tokens) == 8
    with pytest.raises(ValueError, match="max_len=8"):
        greedy(m, src, mask, max_len=9)


def test_layer_cache_from_buffers():
    c = LayerCache()
    for i in range(3):
        c.update(torch.full((2, 1, 1, 4), float(i)), torch.full((2, 1, 1, 4), -float(i)))
    k, v = c.buffers()
    again = LayerCache.from_buffers(k, v, c.length)
    keys, values = again.update(torch.full((2, 1, 1, 4), 3.0), torch.full((2, 1, 1, 4), -3.0))
    assert torch.equal(keys[0, 0, :, 0], torch.arange(4.0)) and torch.equal(values, -keys)
    assert LayerCache.from_buffers(None, None, 0).length == 0
    with pytest.raises(ValueError, match="length"):
        LayerCache.from_buffers(k, v, k.shape[2] + 1)


def test_resume_gives_the_same_weights(tmp_path):
    train_ex = encode_pairs(reversal(300, 0), VOCAB, VOCAB)
    valid_ex = encode_pairs(reversal(20, 1), VOCAB, VOCAB)
    cfg = TrainConfig(steps=24, batch_size=16, lr=3e-3, eval_every=8, save_every=8, log_every=4)
    full = small(dropout=0.1)
    train(full, train_ex, valid_ex, cfg, out=tmp_path / "full", progress=False)
    part = small(dropout=0.1)
    train(part, train_ex, valid_ex, cfg, out=tmp_path / "part", progress=False, stop_after=13)  # "killed" at 13
    again = small(dropout=0.1)  # a fresh process: new model, state from the checkpoint (step 8)
    r = train(again, train_ex, valid_ex, cfg, out=tmp_path / "part", resume=True, progress=False)
    assert r.step == 24
    for (n, a), (_, b) in zip(full.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), n
    name = "transformer.out.weight"
    assert not torch.equal(small(dropout=0.1).state_dict()[name], full.state_dict()[name])


# -- the command line ---------------------------------------------------------------------------

TRAIN = ["train", "seq2seq", "--model", "transformer", "--data", "numbers-de-en", "--n", "300", "--max-digits", "3",
         "--num-layers", "1", "--num-heads", "2", "--dim", "16", "--ff", "32", "--batch-size", "16", "--eval-every", "10",
         "--save-every", "10", "--quiet"]
ALIGNMENT = "(alignment: cross-attention of the last decoder layer, averaged over heads)"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf") / "run"
    assert main([*TRAIN, "--steps", "20", "--positional", "learned", "--out", str(out)]) == 0
    return out


def test_cli_train_translate_evaluate(run_dir, capsys, tmp_path):
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model"]["kind"] == "transformer" and cfg["model"]["positional"] == "learned"
    assert cfg["model"]["dim"] == 16 and cfg["model"]["num_heads"] == 2 and cfg["model"]["ffn_dim"] == 32
    assert cfg["state"]["step"] == 20 and cfg["data"]["name"] == "numbers-de-en"
    png = tmp_path / "a.png"
    assert main(["translate", "--checkpoint", str(run_dir), "vierhundertzwei", "--max-len", "4", "--picture", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vierhundertzwei → ") and ALIGNMENT in out and "   vierhundertzwei" in out and "←" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["translate", "--checkpoint", str(run_dir), "zwei", "elf", "--beam", "3", "--no-alignment"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("zwei → ") and "\nelf → " in out and ALIGNMENT not in out
    check_evaluate_against_translate(run_dir, capsys, "transformer (1+1 layers, 2 heads, dim 16, learned positions)", beam=2)


def test_cli_resume_continues(run_dir, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(run_dir, d)
    assert main(["train", "seq2seq", "--out", str(d), "--resume", "--steps", "30", "--quiet"]) == 0
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["state"]["step"] == 30 and cfg["model"]["kind"] == "transformer"


def _err(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match(r"attnlab [\w ]+: error: ", err) and "Traceback" not in err
    return err


def test_cli_bad_input(run_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own clean exit 2
        main([*TRAIN, "--model", "nonsense", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*TRAIN, "--positional", "alibi", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    capsys.readouterr()
    err = _err(capsys, [*TRAIN, "--num-heads", "3", "--out", str(tmp_path / "x")])
    assert "--dim=16" in err and "--num-heads=3" in err
    assert "--dropout" in _err(capsys, [*TRAIN, "--dropout", "1.5", "--out", str(tmp_path / "x")])
    assert "--num-layers must be >= 1" in _err(capsys, [*TRAIN, "--num-layers", "0", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
    assert "'X'" in _err(capsys, ["translate", "--checkpoint", str(run_dir), "vierXhundert"])
    assert "empty" in _err(capsys, ["translate", "--checkpoint", str(run_dir), "  "])
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    cfg = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**cfg, "model": {**cfg["model"], "dim": 32}}))
    assert "do not fit" in _err(capsys, ["translate", "--checkpoint", str(old), "zwei"])
    (old / "config.json").write_text(json.dumps({**cfg, "model": {**cfg["model"], "num_heads": 3}}))
    assert "num_heads" in _err(capsys, ["evaluate", "--checkpoint", str(old)])


def test_experiment_bottleneck_with_the_transformer(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["experiment", "bottleneck", "--quick", "--quiet", "--models", "none,transformer", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "none exact / chrF" in text and "transformer exact / chrF" in text and "bahdanau" not in text
    res = json.loads((out / "results.json").read_text())
    assert list(res["models"]) == ["none", "transformer"]
    assert res["config"]["decoders"] == ["none", "transformer"]
    assert res["models"]["transformer"]["parameters"] > 0
    assert "--models" in _err(capsys, ["experiment", "bottleneck", "--quick", "--models", "none,gpt"])
    assert "--models" in _err(capsys, ["experiment", "bottleneck", "--quick", "--models", "luong,luong"])


def test_every_layer_has_the_feed_forward_width_of_the_config():
    from attnlab.models.transformer import Transformer

    c = TransformerConfig(src_vocab=5, tgt_vocab=6, dim=8, num_heads=2, num_encoder_layers=2, num_decoder_layers=3,
                          ffn_dim=7, dropout=0.0, max_len=16)  # 7: not the layers' default of 4 · dim
    model = Transformer(c)
    for layer in [*model.encoder, *model.decoder]:
        assert tuple(layer.linear1.weight.shape) == (7, 8) and tuple(layer.linear2.weight.shape) == (8, 7)
    # by hand: embeddings 5·8 + 6·8; an encoder layer 4·(8·8 + 8) for attention, 8·7 + 7 + 7·8 + 8 for the
    # feed-forward, 2·2·8 for two norms; a decoder layer one attention and one norm more; the output 8·6 + 6;
    # pre-norm (the default) ends the encoder and the decoder with one norm each
    attn, ffn = 4 * (8 * 8 + 8), 8 * 7 + 7 + 7 * 8 + 8
    encoder, decoder = attn + ffn + 2 * 16, 2 * attn + ffn + 3 * 16
    want = 5 * 8 + 6 * 8 + 2 * encoder + 3 * decoder + 8 * 6 + 6 + 2 * 16
    assert c.norm_first and c.positional == "sinusoidal"  # no parameters for the positions
    assert sum(p.numel() for p in model.parameters()) == want
