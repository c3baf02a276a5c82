"""Models against references written here: every config's defaults and refusal texts, the CNN's and GPT's
forward passes in float64 with copied weights, sampling's distribution, the Transformer's embedding scale
and init, greedy decoding's stop, the captioner's shapes, and the registry's counts and messages."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.models import (
    MODELS,
    VOCABS,
    Captioner,
    CaptionerConfig,
    CNNConfig,
    GPTConfig,
    Seq2SeqConfig,
    SmallCNN,
    TransformerConfig,
    TransformerTranslator,
    build_model,
    count_parameters,
    model_config,
)
from attnlab.models import cnn as cnn_mod
from attnlab.models.gpt import GPT, sample
from attnlab.models.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")


def _keep(store, key, index=None):
    """A hook that records its module's input (index 0 of the positional arguments) or output, changing nothing."""

    def hook(module, args, *rest):
        store[key] = args[0] if index == "in" else rest[-1]

    return hook


def test_config_defaults():
    c = CNNConfig()
    assert (c.in_channels, c.num_classes, c.widths, c.attention, c.reduction, c.kernel_size) == (
        1,
        10,
        (16, 32),
        "none",
        4,
        None,
    )
    g = GPTConfig(vocab_size=5)
    assert (
        g.block_size,
        g.dim,
        g.num_layers,
        g.num_heads,
        g.num_kv_heads,
        g.ffn_dim,
        g.dropout,
        g.positional,
    ) == (128, 128, 4, 4, None, None, 0.0, "learned")
    t = TransformerConfig(src_vocab=5, tgt_vocab=6)
    assert (
        t.dim,
        t.num_heads,
        t.num_encoder_layers,
        t.num_decoder_layers,
        t.ffn_dim,
        t.dropout,
        t.norm_first,
        t.num_kv_heads,
        t.positional,
        t.max_len,
    ) == (128, 4, 2, 2, None, 0.1, True, None, "sinusoidal", 512)
    s = Seq2SeqConfig(src_vocab=5, tgt_vocab=6)
    assert (
        s.decoder,
        s.rnn,
        s.emb_dim,
        s.hidden,
        s.bidirectional,
        s.attn_dim,
        s.luong_score,
        s.dropout,
        s.pad_id,
    ) == ("bahdanau", "gru", 64, 128, True, 128, "general", 0.0, 0)
    k = CaptionerConfig(vocab_size=9)
    assert (k.image_size, k.widths, k.d_model, k.num_heads, k.max_len, k.decoder, k.layers) == (
        32,
        (32, 64, 64),
        64,
        1,
        12,
        "gru",
        2,
    )
    assert k.grid == 4
    assert VOCABS == {
        "seq2seq": ("src_vocab", "tgt_vocab"),
        "transformer": ("src_vocab", "tgt_vocab"),
        "gpt": ("vocab",),
        "captioner": ("vocab",),
        "cnn": (),
    }
    assert list(MODELS) == ["seq2seq", "transformer", "gpt", "captioner", "cnn"]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"vocab_size": 0}, "vocab_size must be >= 1; got 0"),
        ({"block_size": 0}, "block_size must be >= 1; got 0"),
        ({"dim": 0}, "dim must be >= 1; got 0"),
        ({"num_layers": 0}, "num_layers must be >= 1; got 0"),
        ({"num_heads": 0}, "num_heads must be >= 1; got 0"),
        (
            {"positional": "abs"},
            "positional must be one of ('sinusoidal', 'learned', 'rope', 'alibi'); got 'abs'",
        ),
    ],
)
def test_gpt_config_refusals(kw, msg):
    with pytest.raises(ValueError) as e:
        GPTConfig(**{"vocab_size": 5, **kw})
    assert str(e.value) == msg


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"src_vocab": 0}, "src_vocab must be >= 1; got 0"),
        ({"tgt_vocab": 0}, "tgt_vocab must be >= 1; got 0"),
        ({"num_encoder_layers": 0}, "num_encoder_layers must be >= 1; got 0"),
        ({"num_decoder_layers": 0}, "num_decoder_layers must be >= 1; got 0"),
        ({"max_len": 0}, "max_len must be >= 1; got 0"),
        ({"dim": 0}, "dim must be >= 1; got 0"),
        ({"num_heads": 0}, "num_heads must be >= 1; got 0"),
        ({"ffn_dim": 0}, "ffn_dim must be >= 1; got 0"),
        ({"dropout": 1.0}, "dropout must be in [0, 1); got 1.0"),
        ({"dropout": -0.1}, "dropout must be in [0, 1); got -0.1"),
        (
            {"positional": "alibi"},
            "positional must be one of ('sinusoidal', 'learned', 'rope'); got 'alibi'",
        ),
        ({"dim": 6, "num_heads": 4}, "dim must be a multiple of num_heads; got dim=6, num_heads=4"),
        (
            {"dim": 6, "num_heads": 2, "positional": "rope"},
            "rope positions need an even the head size dim / num_heads; got dim=6, num_heads=2",
        ),
        (
            {"dim": 3, "num_heads": 1},
            "sinusoidal positions need an even dim; got dim=3, num_heads=1",
        ),
    ],
)
def test_transformer_config_refusals(kw, msg):
    with pytest.raises(ValueError) as e:
        TransformerConfig(**{"src_vocab": 5, "tgt_vocab": 5, **kw})
    assert str(e.value) == msg


def test_transformer_config_edges_accepted():
    TransformerConfig(
        src_vocab=1,
        tgt_vocab=1,
        dim=6,
        num_heads=3,
        positional="learned",
        max_len=1,
        ffn_dim=1,
        dropout=0.0,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    TransformerConfig(src_vocab=1, tgt_vocab=1, dim=4, num_heads=2, positional="rope")


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"vocab_size": 4}, "vocab_size must be at least 5 (4 special tokens + 1 word); got 4"),
        (
            {"image_size": 12, "widths": (4, 4, 4)},
            "image_size 12 must be divisible by 2^3 (one halving per encoder stage, widths=(4, 4, 4))",
        ),
        (
            {"image_size": 4, "widths": (4, 4, 4)},
            "image_size 4 must be divisible by 2^3 (one halving per encoder stage, widths=(4, 4, 4))",
        ),
        ({"d_model": 6, "num_heads": 4}, "d_model=6 must be divisible by num_heads=4"),
        ({"decoder": "lstm"}, "decoder must be one of gru, transformer; got 'lstm'"),
        ({"layers": 0}, "layers must be >= 1; got 0"),
    ],
)
def test_captioner_config_refusals(kw, msg):
    with pytest.raises(ValueError) as e:
        CaptionerConfig(**{"vocab_size": 5, **kw}).validate()
    assert str(e.value) == msg
    CaptionerConfig(
        vocab_size=5, image_size=8, widths=(2, 2, 2), layers=1
    ).validate()  # grid 1: the edge


def _cnn_reference(m: SmallCNN, x: torch.Tensor) -> torch.Tensor:
    """conv (no bias) → batch norm (running stats) → ReLU → max-pool 2, per block; mean; linear; in float64."""
    h = x.double()
    for b in m.blocks:
        h = F.conv2d(h, b.conv.weight.double(), padding=1)
        bn = b.bn
        h = (h - bn.running_mean.double()[:, None, None]) / torch.sqrt(
            bn.running_var.double()[:, None, None] + bn.eps
        )
        h = h * bn.weight.double()[:, None, None] + bn.bias.double()[:, None, None]
        h = F.max_pool2d(torch.clamp(h, min=0), 2)
    return h.mean((2, 3)) @ m.head.weight.double().T + m.head.bias.double()


def test_small_cnn_forward_matches_a_float64_reference():
    torch.manual_seed(0)
    m = SmallCNN(CNNConfig(in_channels=2, num_classes=3, widths=(3, 4)))
    with torch.no_grad():
        for b in m.blocks:  # non-trivial batch norm statistics and affine
            b.bn.running_mean.uniform_(-0.5, 0.5)
            b.bn.running_var.uniform_(0.5, 2.0)
            b.bn.weight.uniform_(0.5, 1.5)
            b.bn.bias.uniform_(-0.2, 0.2)
    m.eval()
    x = torch.randn(2, 2, 8, 8)
    logits, maps = m(x, need_weights=True)
    assert logits.shape == (2, 3) and maps == [None, None]
    torch.testing.assert_close(logits.double(), _cnn_reference(m, x), atol=1e-5, rtol=1e-5)
    assert torch.equal(m(x), logits)
    assert [tuple(b.conv.weight.shape) for b in m.blocks] == [(3, 2, 3, 3), (4, 3, 3, 3)]
    assert all(isinstance(b.pool, torch.nn.MaxPool2d) and b.pool.kernel_size == 2 for b in m.blocks)


def test_small_cnn_gates_and_input_check():
    torch.manual_seed(0)
    m = SmallCNN(attention="se", widths=(8,), reduction=2).eval()
    _, maps = m(torch.rand(1, 1, 4, 4), need_weights=True)
    assert maps[0].shape == (1, 8, 1, 1)
    se = m.blocks[0].gate
    assert sum(p.numel() for p in se.parameters()) == 8 * 4 + 4 + 4 * 8 + 8  # hidden = C // r = 4
    cbam = SmallCNN(attention="cbam", widths=(8,), kernel_size=3, reduction=4).eval()
    _, maps = cbam(torch.rand(1, 1, 4, 4), need_weights=True)
    assert maps[0].spatial.shape == (1, 1, 4, 4)
    assert any(
        isinstance(x, torch.nn.Conv2d) and x.kernel_size == (3, 3)
        for x in cbam.blocks[0].gate.modules()
    )
    assert SmallCNN(attention="eca", widths=(8,)).blocks[0].gate is not None
    assert SmallCNN(widths=(8,)).blocks[0].gate is None
    for bad in (torch.rand(1, 2, 8, 8), torch.rand(1, 8, 8)):
        with pytest.raises(ValueError) as e:
            m(bad)
        assert str(e.value) == f"SmallCNN expects images (b, 1, H, W); got shape {tuple(bad.shape)}"
    frozen = SmallCNN(widths=(2,), num_classes=2)
    frozen.head.weight.requires_grad_(False)
    assert (
        cnn_mod.count_parameters(frozen) == 1 * 2 * 9 + 2 * 2 + 2
    )  # the head's 4 frozen weights not counted


def _gpt(positional="learned", **kw):
    torch.manual_seed(0)
    cfg = GPTConfig(
        **{
            "vocab_size": 7,
            "block_size": 6,
            "dim": 8,
            "num_layers": 1,
            "num_heads": 2,
            "positional": positional,
            **kw,
        }
    )
    return GPT(cfg).eval()


def test_gpt_input_is_token_plus_position_and_output_is_tied_to_the_embedding():
    m = _gpt()
    seen = {}
    m.blocks[0].register_forward_pre_hook(_keep(seen, "x0", "in"))
    m.norm.register_forward_hook(_keep(seen, "h"))
    tokens = torch.tensor([[1, 6, 0, 3]])
    logits = m(tokens)
    assert logits.shape == (1, 4, 7)
    want_x0 = m.tok.weight[tokens[0]] + m.pos.weight[:4]
    torch.testing.assert_close(seen["x0"][0], want_x0)
    ref = seen["h"].double() @ m.tok.weight.double().T  # logits = LN(x_L) Eᵀ, no bias
    torch.testing.assert_close(logits.double(), ref, atol=1e-6, rtol=1e-6)
    assert _gpt("rope").pos is None and _gpt("alibi").pos is None


def test_gpt_forward_refusals():
    m = _gpt()
    with pytest.raises(ValueError) as e:
        m(torch.zeros(1, 7, dtype=torch.long))
    assert (
        str(e.value)
        == "7 positions exceed block_size=6 of the learned position table; crop the input"
    )
    m(torch.zeros(1, 6, dtype=torch.long))  # exactly block_size is fine
    _gpt("sinusoidal")(torch.zeros(1, 7, dtype=torch.long))  # no table, no limit
    with pytest.raises(ValueError) as e:
        m(torch.zeros(1, 3))
    assert str(e.value) == "tokens must be (b, n) integer ids; got shape (1, 3) dtype torch.float32"
    with pytest.raises(ValueError) as e:
        m(torch.zeros(3, dtype=torch.long))
    assert str(e.value) == "tokens must be (b, n) integer ids; got shape (3,) dtype torch.int64"
    m(torch.zeros(1, 2, dtype=torch.int32))
    with pytest.raises(ValueError) as e:
        m.generate(torch.zeros(1, 0, dtype=torch.long), 1)
    assert str(e.value) == "prompt must be (b, n) with n >= 1; got (1, 0)"
    for t in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError) as e:
            m.generate(torch.zeros(1, 1, dtype=torch.long), 1, temperature=t)
        assert str(e.value) == f"temperature must be a finite number >= 0; got {t}"
    with pytest.raises(ValueError) as e:
        m.generate(torch.zeros(1, 1, dtype=torch.long), 1, top_k=0)
    assert str(e.value) == "top_k must be >= 1; got 0"


@torch.no_grad()
def test_gpt_init_biases_zero_and_std_002_in_every_linear_and_embedding():
    torch.manual_seed(1)
    m = GPT(GPTConfig(vocab_size=300, block_size=8, dim=64, num_layers=1, num_heads=2))
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            assert (
                abs(float(mod.weight.std()) - 0.02) < 0.003
                and abs(float(mod.weight.mean())) < 0.003
            )
            assert mod.bias is None or not mod.bias.any()
        elif isinstance(mod, torch.nn.Embedding):
            assert abs(float(mod.weight.std()) - 0.02) < 0.003
    ln = m.norm
    assert torch.equal(ln.weight, torch.ones(64)) and not ln.bias.any()
    assert len(m.new_cache().layers) == 1


def test_gpt_greedy_generation_is_the_argmax_of_each_prefix_with_and_without_cache():
    m = _gpt("sinusoidal", block_size=4)
    m.train()
    prompt = torch.tensor([[2, 5]])
    out = m.generate(prompt, 5, temperature=0)
    assert m.training  # the mode is given back
    seq = prompt
    for _ in range(5):
        with torch.no_grad():
            m.eval()
            nxt = m(seq[:, -4:])[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert out.shape == (1, 7) and out[:, :2].tolist() == [[2, 5]]
    assert m.generate(prompt, 5, temperature=0, use_cache=False).tolist() == seq.tolist()
    assert m.generate(prompt, 0).tolist() == [[2, 5]]


def test_sample_is_softmax_of_logits_over_temperature_within_the_top_k():
    logits = torch.tensor([[1.0, 3.0, 2.0, -1.0], [0.5, 0.0, 4.0, 1.0]])
    assert sample(logits, temperature=0).tolist() == [[1], [2]]
    for T, k in ((0.7, None), (2.0, 2), (1.0, 3), (1.0, 4), (1.0, 9)):
        z = logits.double() / T
        if k is not None and k < 4:
            kth = torch.topk(z, k, -1).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        probs = torch.softmax(z, -1).float()
        g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        want = torch.multinomial(probs, 1, generator=g1)
        got = sample(logits, temperature=T, top_k=k, generator=g2)
        assert got.shape == (2, 1) and torch.equal(got, want), (T, k)
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([sample(logits, temperature=1.0, top_k=1, generator=g) for _ in range(20)], 1)
    assert (draws[0] == 1).all() and (draws[1] == 2).all()  # top_k=1 keeps only the best
    flat = logits.repeat(
        100, 1
    )  # a high temperature: every kept token is likely, the dropped one never drawn
    drawn = sample(flat, temperature=50.0, top_k=3, generator=g)[:, 0]
    assert set(drawn[0::2].tolist()) == {0, 1, 2} and set(drawn[1::2].tolist()) == {0, 2, 3}
    tiny = sample(torch.tensor([[0.0, 1e-3, -1e-3]]), temperature=1e-40, generator=g)
    assert tiny.tolist() == [[1]]  # a tiny temperature is floored, not divided by zero


def _transformer(**kw):
    torch.manual_seed(0)
    return Transformer(
        TransformerConfig(
            **{
                "src_vocab": 9,
                "tgt_vocab": 8,
                "dim": 8,
                "num_heads": 2,
                "num_encoder_layers": 1,
                "num_decoder_layers": 1,
                "dropout": 0.0,
                **kw,
            }
        )
    )


def test_transformer_embeddings_are_scaled_by_sqrt_dim_and_drawn_with_std_one_over_sqrt_dim():
    torch.manual_seed(3)
    big = Transformer(
        TransformerConfig(
            src_vocab=400,
            tgt_vocab=400,
            dim=64,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
        )
    )
    for emb in (big.src_emb, big.tgt_emb):
        assert abs(float(emb.weight.std()) - 64**-0.5) < 0.005
    m = _transformer(positional="learned", max_len=5).eval()
    seen = {}
    m.encoder[0].register_forward_pre_hook(_keep(seen, "x", "in"))
    src = torch.tensor([[3, 4, 1]])
    m.encode(src)
    table = m.pos.weight
    assert tuple(table.shape) == (5, 8)
    torch.testing.assert_close(seen["x"][0], m.src_emb.weight[src[0]] * math.sqrt(8) + table[:3])
    assert _transformer(positional="rope").pos is None
    assert isinstance(_transformer(norm_first=False).enc_norm, torch.nn.Identity)
    assert isinstance(_transformer().dec_norm, torch.nn.LayerNorm)


def test_transformer_output_layer_and_config_dict():
    m = _transformer().eval()
    seen = {}
    m.dec_norm.register_forward_hook(_keep(seen, "h"))
    logits = m(torch.tensor([[1, 2]]), torch.tensor([[1, 5, 6]]))
    assert logits.shape == (1, 3, 8)
    torch.testing.assert_close(logits, seen["h"] @ m.out.weight.T + m.out.bias)
    d = m.config_dict()
    assert d["src_vocab"] == 9 and d["tgt_vocab"] == 8 and "kind" not in d


def test_greedy_stops_at_eos_and_pads_finished_rows_with_eos():
    m = _transformer().eval()
    with torch.no_grad():
        m.out.weight.zero_()
        m.out.bias.copy_(torch.tensor([0.0, 0, 5, 0, 0, 0, 0, 0]))  # always predicts id 2
    out = m.greedy(torch.tensor([[3, 4], [5, 6]]), bos=1, eos=2, max_len=7)
    assert out.tolist() == [[1, 2], [1, 2]]  # stopped after one step
    with torch.no_grad():
        m.out.bias.copy_(torch.tensor([0.0, 0, 0, 0, 0, 5, 0, 0]))  # always id 5, never eos
    out = m.greedy(torch.tensor([[3]]), bos=1, eos=2, max_len=3)
    assert out.tolist() == [[1, 5, 5, 5]]


def test_translator_label_source_checks_and_head_average():
    tr = TransformerTranslator(
        TransformerConfig(
            src_vocab=9,
            tgt_vocab=8,
            dim=8,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=3,
            dropout=0.0,
            positional="rope",
        )
    ).eval()
    assert tr.label == "transformer (1+3 layers, 2 heads, dim 8, rope positions)"
    assert tr.config_dict()["kind"] == "transformer" and tr.config_dict()["num_decoder_layers"] == 3
    assert tr.alignment == "cross-attention of the last decoder layer, averaged over heads"
    src, mask = torch.tensor([[3, 4, 0]]), torch.tensor([[True, True, False]])
    tgt = torch.tensor([[1, 5]])
    logits, w = tr(src, mask, tgt, need_weights=True)
    _, per_head = tr.transformer.decode(
        tgt, tr.transformer.encode(src, mask), src_mask=mask, need_weights=True
    )
    torch.testing.assert_close(w, per_head.mean(1))
    assert w.shape == (1, 2, 3)
    torch.testing.assert_close(logits, tr(src, mask, tgt))
    memory, state = tr.start(src, mask)
    assert state["length"].tolist() == [0] and torch.equal(memory["mask"], mask)
    lg, new, sw = tr.step(memory, state, torch.tensor([1]))
    assert new["length"].tolist() == [1] and lg.shape == (1, 8) and sw.shape == (1, 3)
    assert sorted(k for k in new if k != "length") == ["k.0", "k.1", "k.2", "v.0", "v.1", "v.2"]
    with pytest.raises(ValueError) as e:
        tr(src, mask[0], tgt)
    assert str(e.value) == "src_mask must be (b, s); got shape (3,)"
    with pytest.raises(ValueError) as e:
        tr.start(src, torch.zeros(1, 3, dtype=torch.bool))
    assert str(e.value) == "every source sentence needs at least one token; got an empty one"


def test_captioner_shapes_start_state_and_generation_length():
    torch.manual_seed(0)
    cfg = CaptionerConfig(
        vocab_size=6, image_size=8, widths=(2, 2), d_model=4, num_heads=2, max_len=3
    )
    m = Captioner(cfg).eval()
    assert cfg.grid == 2 and tuple(m.encoder.pos.shape) == (4, 4)
    assert not m.decoder.start.any() and m.decoder.gru.input_size == 8
    convs = [x for x in m.encoder.features if isinstance(x, torch.nn.Conv2d)]
    assert [c.bias for c in convs] == [None, None] and m.encoder.proj.bias is not None
    img = torch.rand(2, 3, 8, 8)
    logits, w = m(img, torch.tensor([[1, 4], [1, 5]]))
    assert logits.shape == (2, 2, 6) and w.shape == (2, 2, 2, 4)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 2))
    with torch.no_grad():
        m.decoder.out.weight.zero_()
        m.decoder.out.bias.copy_(torch.tensor([0.0, 0, 0, 0, 3, 0]))  # never <eos>: max_len tokens
    toks, ws = m.generate(img, bos=1, eos=2)
    assert toks.tolist() == [[4, 4, 4], [4, 4, 4]] and ws.shape == (2, 2, 3, 4)
    with torch.no_grad():
        m.decoder.out.bias.copy_(torch.tensor([0.0, 0, 3, 0, 0, 0]))  # <eos> at once
    assert m.generate(img, bos=1, eos=2)[0].tolist() == [[2], [2]]
    with pytest.raises(ValueError) as e:
        m(torch.rand(1, 3, 8, 4), torch.tensor([[1]]))
    assert str(e.value) == "images must be (b, 3, 8, 8); got shape (1, 3, 8, 4)"
    t = Captioner(
        CaptionerConfig(
            vocab_size=6,
            image_size=8,
            widths=(2, 2),
            d_model=4,
            max_len=3,
            decoder="transformer",
            layers=1,
        )
    ).eval()
    assert tuple(t.decoder.pos.shape) == (4, 4) and len(t.decoder.layers) == 1
    assert t.decoder.layers[0].linear1.out_features == 8  # ffn 2·d
    with pytest.raises(ValueError) as e:
        t(img, torch.ones(2, 5, dtype=torch.long))
    assert str(e.value) == "at most 4 tokens; got 5"


def _real_count(model):
    return sum(t.numel() for t in (*model.parameters(), *model.buffers()))


@pytest.mark.parametrize(
    "cfg",
    [
        CNNConfig(widths=(3, 4), num_classes=5),
        GPTConfig(vocab_size=11, block_size=5, dim=8, num_layers=3, num_heads=2),
        TransformerConfig(
            src_vocab=7, tgt_vocab=9, dim=8, num_heads=2, num_encoder_layers=3, num_decoder_layers=2
        ),
        Seq2SeqConfig(src_vocab=7, tgt_vocab=9, emb_dim=4, hidden=6, attn_dim=5),
        CaptionerConfig(
            vocab_size=7, image_size=8, widths=(2, 3), d_model=4, decoder="transformer", layers=3
        ),
    ],
)
def test_count_parameters_equals_the_built_models_numbers(cfg):
    cls = {
        CNNConfig: SmallCNN,
        GPTConfig: GPT,
        TransformerConfig: TransformerTranslator,
        CaptionerConfig: Captioner,
    }
    from attnlab.models.seq2seq import Seq2Seq

    model = {**cls, Seq2SeqConfig: Seq2Seq}[type(cfg)](cfg)
    assert count_parameters(cfg) == _real_count(model)


def test_build_model_messages_and_model_config_lists():
    with pytest.raises(ValueError) as e:
        build_model({"kind": "rnn"})
    assert (
        str(e.value) == "unknown model kind 'rnn'; known: seq2seq, transformer, gpt, captioner, cnn"
    )
    with pytest.raises(ValueError) as e:
        build_model(["cnn"])
    assert (
        str(e.value)
        == "unknown model kind ['cnn']; known: seq2seq, transformer, gpt, captioner, cnn"
    )
    with pytest.raises(ValueError) as e:
        build_model({"kind": "cnn", "depth": 3, "alpha": 1})
    assert (
        str(e.value)
        == "model config has unknown fields ['alpha', 'depth'] (written by another attnlab version?)"
    )
    with pytest.raises(ValueError) as e:
        build_model({"kind": "gpt"})
    assert str(e.value) == "model.vocab_size is missing"
    m = build_model({"kind": "cnn", "widths": [3], "num_classes": 2})
    assert isinstance(m, SmallCNN) and m.config.widths == (3,)
    d = model_config(m)
    assert d == {
        "kind": "cnn",
        "in_channels": 1,
        "num_classes": 2,
        "widths": [3],
        "attention": "none",
        "reduction": 4,
        "kernel_size": None,
    }
    with pytest.raises(TypeError) as e:
        model_config(torch.nn.Linear(1, 1))
    assert str(e.value) == (
        "model_config expects one of the registered models (seq2seq, transformer, gpt, captioner, "
        "cnn); got Linear"
    )
