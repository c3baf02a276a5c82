"""Seq2Seq: packed encoder, each decoder learns to reverse strings, greedy == beam 1, exact resume."""

import random

import pytest
import torch

from attnlab.data.batching import collate, encode_pairs
from attnlab.data.vocab import EOS, Vocab
from attnlab.models import Seq2Seq, Seq2SeqConfig, build_model
from attnlab.train.decode import beam_search, greedy, length_guard
from attnlab.train.loop import TrainConfig, train

LETTERS = "abcdef"


pytestmark = pytest.mark.usefixtures("one_thread")  # small RNN steps: one thread is fastest


def reversal(n, seed, lo=2, hi=5):
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        s = "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))
        pairs.append((s, s[::-1]))
    return pairs


VOCAB = Vocab(list(LETTERS), "char")


def small(decoder, **kw):
    torch.manual_seed(0)
    cfg = dict(src_vocab=len(VOCAB), tgt_vocab=len(VOCAB), decoder=decoder, emb_dim=16, hidden=32, attn_dim=32)
    cfg.update(kw)
    return Seq2Seq(Seq2SeqConfig(**cfg))


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_packed_encoder_ignores_padding(rnn, bidirectional):
    m = small("bahdanau", rnn=rnn, bidirectional=bidirectional).eval()
    src = torch.tensor([[4, 5, 6, 7]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    out1, fin1, _ = m.encoder(src, mask)
    for extra in (1, 5):
        padded = torch.cat([src, torch.full((1, extra), 9)], 1)  # junk ids beyond the mask
        pmask = torch.cat([mask, torch.zeros(1, extra, dtype=torch.bool)], 1)
        out2, fin2, _ = m.encoder(padded, pmask)
        torch.testing.assert_close(out2[:, :4], out1, atol=1e-6, rtol=0)
        assert torch.all(out2[:, 4:] == 0)
        torch.testing.assert_close(fin2, fin1, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="empty"):
        m.encoder(src, torch.zeros(1, 4, dtype=torch.bool))


def test_teacher_forcing_equals_stepwise_decoding():
    m = small("luong").eval()
    src = torch.tensor([[4, 5, 6], [7, 8, 0]])
    mask = src != 0
    tgt = torch.tensor([[1, 6, 5, 4], [1, 8, 7, 2]])
    logits, w = m(src, mask, tgt, need_weights=True)
    memory, state = m.start(src, mask)
    for t in range(4):
        lg, state, wt = m.step(memory, state, tgt[:, t])
        torch.testing.assert_close(lg, logits[:, t])
        torch.testing.assert_close(wt, w[:, t])
    assert torch.all(w[1, :, 2] == 0)  # padding gets no weight


@pytest.mark.parametrize("decoder,steps,lr", [("none", 500, 3e-3), ("bahdanau", 250, 1e-2), ("luong", 250, 1e-2)])
def test_each_decoder_learns_reversal(decoder, steps, lr):
    train_ex = encode_pairs(reversal(1500, 0), VOCAB, VOCAB)
    test_ex = encode_pairs(reversal(100, 1), VOCAB, VOCAB)
    m = small(decoder)
    train(m, train_ex, [], TrainConfig(steps=steps, batch_size=32, lr=lr, eval_every=0, save_every=0), progress=False)
    m.eval()
    batch = collate(test_ex)
    hyps = greedy(m, batch.src, batch.src_mask, max_len=12)
    acc = sum(h.tokens == t for h, (_, t) in zip(hyps, test_ex)) / len(test_ex)
    assert acc >= 0.9, f"{decoder}: {acc:.2f}"
    if decoder != "none":
        # the alignment of a reversal is the anti-diagonal: output i looks most at source n-1-i
        hits = total = 0
        for h, (s, _) in zip(hyps, test_ex):
            assert h.ended and h.weights.shape == (len(h.tokens) + 1, len(s))  # + the EOS step
            if len(h.tokens) == len(s):
                hits += sum(a == len(s) - 1 - i for i, a in enumerate(h.weights.argmax(-1).tolist()))
                total += len(s)
        assert hits / total >= 0.7, f"{decoder}: {hits}/{total} outputs aligned to their mirror position"


@pytest.mark.parametrize("decoder", ["none", "bahdanau", "luong"])
def test_beam_one_is_greedy_and_wider_beams_score_no_worse(decoder):
    m = small(decoder, rnn="lstm").eval()
    ex = encode_pairs(reversal(8, 2), VOCAB, VOCAB)
    b = collate(ex)
    g = greedy(m, b.src, b.src_mask, max_len=7)
    b1 = beam_search(m, b.src, b.src_mask, beam=1, max_len=7)
    b4 = beam_search(m, b.src, b.src_mask, beam=4, max_len=7)
    assert [h.tokens for h in g] == [h.tokens for h in b1]
    for x, y, z in zip(g, b1, b4):
        assert abs(x.score - y.score) < 1e-5
        assert z.score >= x.score - 1e-5
        if x.weights is not None:
            torch.testing.assert_close(x.weights, y.weights)


def test_max_len_guard():
    m = small("bahdanau").eval()
    with torch.no_grad():
        m.output.predict.bias[EOS] = -1e4  # never ends
    b = collate(encode_pairs(reversal(3, 3), VOCAB, VOCAB))
    for h in greedy(m, b.src, b.src_mask, max_len=9) + beam_search(m, b.src, b.src_mask, beam=2, max_len=9):
        assert len(h.tokens) == 9 and not h.ended
    with pytest.raises(ValueError, match="max_len"):
        greedy(m, b.src, b.src_mask, max_len=0)


def test_held_out_translations_are_cut_at_twice_the_longest_reference_plus_ten():
    from attnlab.train.heldout import translate_examples

    assert length_guard([3, 7]) == 24 and length_guard([0]) == 10 and length_guard(iter([5, 1])) == 20
    m = small("luong").eval()
    with torch.no_grad():  # never ends, and writes only letters (no padding or sentence start, which decoding drops)
        m.output.predict.bias[[EOS, VOCAB.pad_id, VOCAB.bos_id]] = -1e4
    ex = encode_pairs(reversal(6, 4), VOCAB, VOCAB)
    hyps, refs, lengths = translate_examples(m, ex, VOCAB, batch_size=3)
    batches = [sorted(range(6), key=lambda j: len(ex[j][0]))[i : i + 3] for i in (0, 3)]  # by source length
    for idx in batches:
        guard = 2 * max(len(ex[i][1]) for i in idx) + 10
        assert [len(hyps[i]) for i in idx] == [guard] * 3  # one character a token
    assert refs == [VOCAB.decode(t) for _, t in ex] and lengths == [len(s) for s, _ in ex]


def test_resume_gives_the_same_weights(tmp_path):
    train_ex = encode_pairs(reversal(300, 0), VOCAB, VOCAB)
    valid_ex = encode_pairs(reversal(20, 1), VOCAB, VOCAB)
    cfg = TrainConfig(steps=24, batch_size=16, lr=5e-3, eval_every=8, save_every=8, log_every=4)
    full = small("bahdanau", dropout=0.1)
    train(full, train_ex, valid_ex, cfg, out=tmp_path / "full", progress=False)
    part = small("bahdanau", dropout=0.1)
    train(part, train_ex, valid_ex, cfg, out=tmp_path / "part", progress=False, stop_after=13)  # "killed" at 13
    again = small("bahdanau", dropout=0.1)  # a fresh process: new model, state from the checkpoint (step 8)
    r = train(again, train_ex, valid_ex, cfg, out=tmp_path / "part", resume=True, progress=False)
    assert r.step == 24
    for (n, a), (_, b) in zip(full.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), n
    assert not torch.equal(small("bahdanau").state_dict()["bridge.weight"], full.state_dict()["bridge.weight"])


def test_build_model_checks_config():
    m = small("luong")
    assert isinstance(build_model(m.config_dict()), Seq2Seq)
    with pytest.raises(ValueError, match="unknown model kind"):
        build_model({"kind": "rnn"})
    with pytest.raises(ValueError, match="unknown fields"):
        build_model({**m.config_dict(), "heads": 4})
    with pytest.raises(ValueError, match="decoder must be"):
        Seq2SeqConfig(src_vocab=5, tgt_vocab=5, decoder="transformer")


def test_the_models_padding_id_is_the_vocabularies():
    from attnlab.data.vocab import PAD
    from attnlab.models import Seq2Seq, Seq2SeqConfig

    m = Seq2Seq(Seq2SeqConfig(src_vocab=7, tgt_vocab=5))
    assert m.config.pad_id == PAD == m.encoder.embed.padding_idx == m.embed.padding_idx


@pytest.mark.parametrize("decoder", ["none", "bahdanau", "luong"])
@pytest.mark.parametrize("training", [False, True])
def test_teacher_forcing_equals_stepwise_decoding_for_every_decoder(decoder, training):
    """forward() (whose output layer runs once over all steps for bahdanau and none) equals
    start() + step() one token at a time, in values and in gradients."""
    m = small(decoder).double().train(training)
    src = torch.tensor([[4, 5, 6, 7], [7, 8, 0, 0], [5, 0, 0, 0]])
    mask = src != 0
    tgt = torch.tensor([[1, 6, 5, 4, 2], [1, 8, 7, 2, 0], [1, 4, 4, 4, 3]])
    logits, w = m(src, mask, tgt, need_weights=True)
    g1 = torch.autograd.grad(logits.square().sum(), list(m.parameters()), allow_unused=True)
    memory, state = m.start(src, mask)
    steps = []
    for t in range(tgt.shape[1]):
        lg, state, wt = m.step(memory, state, tgt[:, t])
        steps.append(lg)
        if w is not None:
            torch.testing.assert_close(wt, w[:, t], atol=1e-12, rtol=0)
        else:
            assert wt is None
    stepwise = torch.stack(steps, 1)
    torch.testing.assert_close(logits, stepwise, atol=1e-12, rtol=0)
    g2 = torch.autograd.grad(stepwise.square().sum(), list(m.parameters()), allow_unused=True)
    for a, b in zip(g1, g2):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_gru_encoder_equals_torch_packed_gru_with_gradients(bidirectional):
    """The CPU GRU encoder (each direction over the padded batch) against torch's packed GRU,
    the same module's weights: outputs, final states and every weight's gradient."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    m = small("bahdanau", bidirectional=bidirectional).double()
    src = torch.tensor([[4, 5, 6, 7, 8], [7, 8, 9, 0, 0], [5, 0, 0, 0, 0]])
    mask = src != 0
    out, fin, _ = m.encoder(src, mask)
    g = torch.randn_like(out)
    params = list(m.encoder.parameters())
    ours = torch.autograd.grad((out * g).sum() + fin.square().sum(), params)
    x = m.encoder.embed(src)
    packed = pack_padded_sequence(x, mask.sum(1), batch_first=True, enforce_sorted=False)
    ref, h = m.encoder.rnn(packed)
    ref, _ = pad_packed_sequence(ref, batch_first=True, total_length=src.shape[1])
    ref_fin = h.transpose(0, 1).reshape(src.shape[0], -1)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(fin, ref_fin, atol=1e-12, rtol=0)
    theirs = torch.autograd.grad((ref * g).sum() + ref_fin.square().sum(), params)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("decoder, dropout, training, calls", [
    ("bahdanau", 0.3, False, 1), ("none", 0.3, False, 1), ("bahdanau", 0.0, True, 1), ("none", 0.0, True, 1),
    ("bahdanau", 0.3, True, 5), ("luong", 0.0, False, 5), ("luong", 0.3, False, 5),
])
def test_the_output_layer_runs_once_over_all_steps_unless_dropout_is_active_or_luong_feeds_it_back(
        decoder, dropout, training, calls):
    """Dropout in eval mode is off, as is a training model with dropout 0: bahdanau and none then run the
    output layer once over the 5 target steps; luong (h̃_t fed back) or active dropout, once a step."""
    m = small(decoder, dropout=dropout).train(training)
    seen = []
    m.output.register_forward_hook(lambda *_: seen.append(1))
    src = torch.tensor([[4, 5, 6, 7], [7, 8, 0, 0]])
    tgt = torch.tensor([[1, 6, 5, 4, 2], [1, 8, 7, 2, 0]])
    assert m(src, src != 0, tgt).shape == (2, 5, len(VOCAB))
    assert len(seen) == calls
