"""Seq2Seq decoders against float64 NumPy written here from the papers' equations.

The encoder (packed BiGRU/LSTM), the bridge s_0 = tanh(W_b [h→_S; h←_1]), each
decoder's step and the output layer h̃_t = tanh(W_c [c_t; s_t] + b_c),
logits = W_s h̃_t + b_s are re-implemented in NumPy with the model's weights
copied out, and compared with the model's teacher-forced logits and attention
weights on a padded batch (the model in float64, tolerance 1e-10).

* Bahdanau et al. 2015 (https://arxiv.org/abs/1409.0473): e_tj = vᵀ tanh(W s_{t−1} + U h_j),
  α_t = softmax(e_t), c_t = Σ α_tj h_j, s_t = RNN([E y_{t−1}; c_t], s_{t−1}).
* Luong et al. 2015 (https://arxiv.org/abs/1508.04025): s_t = RNN([E y_{t−1}; h̃_{t−1}], s_{t−1})
  (input feeding, h̃_0 = 0), then the scores from s_t: dot s_tᵀ h_j, general s_tᵀ W_a h_j,
  concat v_aᵀ tanh(W_a [s_t; h_j]).

A decoder that attends from the wrong state (s_t for Bahdanau, s_{t−1} for Luong)
changes both the weights and the logits, so these tests fail for it.
"""

import numpy as np
import pytest
import torch

from attnlab.models import Seq2Seq, Seq2SeqConfig

V_SRC, V_TGT = 11, 9
TOL = 1e-10


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_(t):
    return t.detach().double().numpy().copy()


def gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    """PyTorch's GRU (Cho et al. 2014), gates in the order r, z, n."""
    H = h.shape[-1]
    gi, gh = w_ih @ x + b_ih, w_hh @ h + b_hh
    r = sigmoid(gi[:H] + gh[:H])
    z = sigmoid(gi[H : 2 * H] + gh[H : 2 * H])
    n = np.tanh(gi[2 * H :] + r * gh[2 * H :])
    return (1 - z) * n + z * h


def lstm_cell(x, hc, w_ih, w_hh, b_ih, b_hh):
    """PyTorch's LSTM, gates in the order i, f, g, o."""
    h, c = hc
    H = h.shape[-1]
    g = w_ih @ x + b_ih + w_hh @ h + b_hh
    i, f, gg, o = sigmoid(g[:H]), sigmoid(g[H : 2 * H]), np.tanh(g[2 * H : 3 * H]), sigmoid(g[3 * H :])
    c = f * c + i * gg
    return o * np.tanh(c), c


def cell_fn(rnn):
    if rnn == "gru":
        return gru_cell
    return lambda x, hc, *w: lstm_cell(x, hc, *w)


def run_encoder(m, src_row, length):
    """One sentence through the (bi)directional RNN over its real tokens only → H (s, d_e), final h, final c."""
    cfg = m.config
    rnn = m.encoder.rnn
    H = cfg.hidden
    E = np_(m.encoder.embed.weight)
    xs = [E[i] for i in src_row[:length]]
    step = cell_fn(cfg.rnn)
    dirs = [("", range(length))] + ([("_reverse", range(length - 1, -1, -1))] if cfg.bidirectional else [])
    outs, finals_h, finals_c = [], [], []
    for suffix, order in dirs:
        w = [np_(getattr(rnn, f"{n}_l0{suffix}")) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        state = np.zeros(H) if cfg.rnn == "gru" else (np.zeros(H), np.zeros(H))
        out = np.zeros((len(src_row), H))  # padding positions stay zero
        for j in order:
            state = step(xs[j], state, *w)
            out[j] = state if cfg.rnn == "gru" else state[0]
        outs.append(out)
        finals_h.append(state if cfg.rnn == "gru" else state[0])
        finals_c.append(None if cfg.rnn == "gru" else state[1])
    fin_c = None if cfg.rnn == "gru" else np.concatenate(finals_c)
    return np.concatenate(outs, -1), np.concatenate(finals_h), fin_c


def masked_softmax(e, ok):
    e = np.where(ok, e, -np.inf)
    p = np.exp(e - e[ok].max())
    return p / p.sum()


def scores(m, s, Hs):
    """e_j for one decoder state s (d,) against encoder states Hs (S, d_e), from the paper."""
    cfg, att = m.config, m.attention
    if cfg.decoder == "bahdanau":  # v^T tanh(W s + U h_j)
        W, U, v = np_(att.w_q.weight), np_(att.w_k.weight), np_(att.v)
        return np.array([v @ np.tanh(W @ s + U @ h) for h in Hs])
    if cfg.luong_score == "dot":
        return Hs @ s
    if cfg.luong_score == "general":  # s^T W_a h_j
        return np.array([s @ np_(att.weight.weight) @ h for h in Hs])
    Wa, va = np_(att.weight.weight), np_(att.v)  # v_a^T tanh(W_a [s; h_j])
    return np.array([va @ np.tanh(Wa @ np.concatenate([s, h])) for h in Hs])


def reference(m, src, mask, tgt_in, override=None):
    """Teacher-forced logits (b, t, V) and weights (b, t, s), one sentence at a time.

    decoder "none": c = [h→_S; h←_1] at every step (weights stay zero). ``override(α, ok) -> α'``
    replaces the weights before the context is formed."""
    cfg = m.config
    Wb, bb = np_(m.bridge.weight), np_(m.bridge.bias)
    E = np_(m.embed.weight)
    cell_w = [np_(getattr(m.cell, n)) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    Wc, bc = np_(m.output.combine.weight), np_(m.output.combine.bias)
    Ws, bs = np_(m.output.predict.weight), np_(m.output.predict.bias)
    step = cell_fn(cfg.rnn)
    B, T = tgt_in.shape
    logits = np.zeros((B, T, cfg.tgt_vocab))
    weights = np.zeros((B, T, src.shape[1]))
    for b in range(B):
        ok = mask[b]
        Hs, fin, fin_c = run_encoder(m, src[b], int(ok.sum()))
        s = np.tanh(Wb @ fin + bb)  # s_0
        c_mem = None if fin_c is None else np.tanh(np_(m.bridge_c.weight) @ fin_c + np_(m.bridge_c.bias))
        h_tilde = np.zeros(cfg.hidden)  # h̃_0 = 0 (Luong input feeding)
        for t in range(T):
            e_y = E[tgt_in[b, t]]
            if cfg.decoder == "none":
                a, ctx = np.zeros(len(ok)), fin  # the fixed vector
                x = np.concatenate([e_y, ctx])
            elif cfg.decoder == "bahdanau":
                a = masked_softmax(scores(m, s, Hs), ok)  # from s_{t-1}
                a = a if override is None else override(a, ok)
                ctx = a @ Hs
                x = np.concatenate([e_y, ctx])
            else:
                x = np.concatenate([e_y, h_tilde])
            if cfg.rnn == "gru":
                s = step(x, s, *cell_w)
            else:
                s, c_mem = step(x, (s, c_mem), *cell_w)
            if cfg.decoder == "luong":
                a = masked_softmax(scores(m, s, Hs), ok)  # from s_t
                a = a if override is None else override(a, ok)
                ctx = a @ Hs
            h_tilde = np.tanh(Wc @ np.concatenate([ctx, s]) + bc)
            logits[b, t] = Ws @ h_tilde + bs
            weights[b, t] = a
    return logits, weights


CASES = [
    dict(decoder="bahdanau", rnn="gru"),
    dict(decoder="bahdanau", rnn="lstm"),
    dict(decoder="bahdanau", rnn="gru", bidirectional=False),
    dict(decoder="luong", luong_score="dot", rnn="gru", bidirectional=False),
    dict(decoder="luong", luong_score="general", rnn="gru"),
    dict(decoder="luong", luong_score="general", rnn="lstm"),
    dict(decoder="luong", luong_score="concat", rnn="gru"),
    dict(decoder="none", rnn="gru"),
    dict(decoder="none", rnn="lstm"),
]


def batch():
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0], [4, 4, 0, 0, 0]])
    mask = src != 0
    tgt = torch.tensor([[1, 5, 6, 7, 2], [1, 3, 4, 8, 5], [1, 8, 8, 3, 6]])
    return src, mask, tgt


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_decoder_matches_paper_equations(kw):
    torch.manual_seed(1)
    cfg = Seq2SeqConfig(src_vocab=V_SRC, tgt_vocab=V_TGT, emb_dim=5, hidden=6, attn_dim=4, **kw)
    m = Seq2Seq(cfg).double().eval()
    with torch.no_grad():  # larger weights than the default init, so the attention is far from uniform
        for p in m.parameters():
            p.mul_(2.5)
    src, mask, tgt = batch()
    logits, w = m(src, mask, tgt, need_weights=True)
    ref_logits, ref_w = reference(m, src.numpy(), mask.numpy(), tgt.numpy())
    np.testing.assert_allclose(logits.detach().numpy(), ref_logits, atol=TOL, rtol=0)
    if kw["decoder"] == "none":  # no attention: no weights
        assert w is None
        return
    np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=TOL, rtol=0)
    assert np.all(w.detach().numpy()[~mask.numpy()[:, None, :].repeat(tgt.shape[1], 1)] == 0)
    # the weights are not trivially uniform, and they move from step to step
    assert np.abs(ref_w[0, 1:] - ref_w[0, :-1]).max() > 1e-3


def model(**kw):
    torch.manual_seed(1)
    cfg = dict(src_vocab=V_SRC, tgt_vocab=V_TGT, emb_dim=5, hidden=6, attn_dim=4)
    m = Seq2Seq(Seq2SeqConfig(**{**cfg, **kw})).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(2.5)
    return m


def unsorted_batch():
    """Lengths 2, 4, 1 (not sorted; one single-token sentence; every row padded, so s = 5 > 4)."""
    src = torch.tensor([[3, 4, 0, 0, 0], [8, 9, 10, 5, 0], [6, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 2], [1, 3, 4, 8], [1, 8, 8, 3]])
    return src, src != 0, tgt


STEP_CASES = [dict(decoder="none", rnn="gru"), dict(decoder="none", rnn="lstm"), dict(decoder="bahdanau", rnn="gru"),
              dict(decoder="bahdanau", rnn="lstm"), dict(decoder="luong", luong_score="general", rnn="lstm")]


@pytest.mark.parametrize("kw", STEP_CASES, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_start_and_step_match_paper_equations(kw):
    """start() + step() one token at a time (what greedy and beam search run) against the NumPy reference."""
    m = model(**kw)
    src, mask, tgt = unsorted_batch()
    ref_logits, ref_w = reference(m, src.numpy(), mask.numpy(), tgt.numpy())
    memory, state = m.start(src, mask)
    for t in range(tgt.shape[1]):
        lg, state, w = m.step(memory, state, tgt[:, t])
        np.testing.assert_allclose(lg.detach().numpy(), ref_logits[:, t], atol=TOL, rtol=0)
        if kw["decoder"] == "none":
            assert w is None
        else:
            np.testing.assert_allclose(w.detach().numpy(), ref_w[:, t], atol=TOL, rtol=0)
    out = m(src, mask, tgt)  # need_weights defaults to False: logits only
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.detach().numpy(), ref_logits, atol=TOL, rtol=0)


def uniform(a, ok):
    return np.where(ok, 1.0 / ok.sum(), 0.0)


@pytest.mark.parametrize("kw", [dict(decoder="bahdanau", rnn="gru"), dict(decoder="luong", luong_score="general", rnn="gru")],
                         ids=["bahdanau", "luong"])
def test_weights_override_replaces_the_weights_before_the_context(kw):
    """c_t = Σ_j fn(α_t)_j h_j: uniform weights over the real tokens, against the reference with α'_tj = 1/L."""
    m = model(**kw)
    src, mask, tgt = unsorted_batch()
    ref_logits, ref_w = reference(m, src.numpy(), mask.numpy(), tgt.numpy(), override=uniform)
    assert ref_w[0, 0].tolist() == [0.5, 0.5, 0, 0, 0]
    fn = lambda w: mask.double() / mask.sum(1, keepdim=True)  # noqa: E731
    memory, state = m.start(src, mask)
    for t in range(tgt.shape[1]):
        lg, state, w = m.step(memory, state, tgt[:, t], weights_override=fn)
        np.testing.assert_allclose(w.detach().numpy(), ref_w[:, t], atol=TOL, rtol=0)
        np.testing.assert_allclose(lg.detach().numpy(), ref_logits[:, t], atol=TOL, rtol=0)
    memory, state = m.start(src, mask)
    with pytest.raises(ValueError, match=r"weights_override must return a tensor of the weights' shape \(b, s\) = "
                                         r"\(3, 5\); got \(3, 4\)"):
        m.step(memory, state, tgt[:, 0], weights_override=lambda w: w[:, :4])
    with pytest.raises(ValueError, match=r"= \(3, 5\); got list$"):
        m.step(memory, state, tgt[:, 0], weights_override=lambda w: w.tolist())


def test_weights_override_needs_an_attention_decoder():
    m = model(decoder="none")
    src, mask, tgt = unsorted_batch()
    memory, state = m.start(src, mask)
    with pytest.raises(ValueError, match=r"^weights_override needs an attention decoder \(bahdanau or luong\); "
                                         r"this one is 'none'$"):
        m.step(memory, state, tgt[:, 0], weights_override=lambda w: w)


def test_dropout_one_drops_every_embedding_and_h_tilde():
    """Training with p = 1: the embeddings (source and target) and h̃ are dropped to zero, so the logits are
    the output bias b_s, and the weights are the reference's with both embedding tables zero."""
    m = model(decoder="bahdanau", dropout=1.0).train()
    src, mask, tgt = batch()
    logits, w = m(src, mask, tgt, need_weights=True)
    bias = m.output.predict.bias.detach().numpy()
    np.testing.assert_allclose(logits.detach().numpy(), np.broadcast_to(bias, logits.shape), atol=TOL, rtol=0)
    with torch.no_grad():
        m.encoder.embed.weight.zero_()
        m.embed.weight.zero_()
    _, ref_w = reference(m, src.numpy(), mask.numpy(), tgt.numpy())
    np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=TOL, rtol=0)
    # the none decoder has no weights in that (step by step) path too
    logits, w = model(decoder="none", dropout=1.0).train()(src, mask, tgt, need_weights=True)
    assert w is None and logits.shape == (3, 5, V_TGT)


def test_config_checks_and_what_it_sets():
    with pytest.raises(ValueError, match=r"^decoder must be one of \('none', 'bahdanau', 'luong'\); got 'x'$"):
        Seq2SeqConfig(src_vocab=5, tgt_vocab=5, decoder="x")
    with pytest.raises(ValueError, match=r"^rnn must be one of \('gru', 'lstm'\); got 'rnn'$"):
        Seq2SeqConfig(src_vocab=5, tgt_vocab=5, rnn="rnn")
    for f in ("src_vocab", "tgt_vocab", "emb_dim", "hidden", "attn_dim"):
        with pytest.raises(ValueError, match=rf"^{f} must be >= 1; got 0$"):
            Seq2SeqConfig(**{"src_vocab": 5, "tgt_vocab": 5, f: 0})
    Seq2SeqConfig(src_vocab=1, tgt_vocab=1, emb_dim=1, hidden=1, attn_dim=1)  # 1 is allowed
    m = Seq2Seq(Seq2SeqConfig(src_vocab=7, tgt_vocab=5, decoder="luong", luong_score="concat", hidden=6, attn_dim=3,
                              pad_id=2, dropout=0.25))
    assert m.config_dict() == {"kind": "seq2seq", **{k: getattr(m.config, k) for k in m.config.__dataclass_fields__}}
    assert m.config_dict()["pad_id"] == 2
    assert m.attention.weight.weight.shape == (3, 6 + 12)  # W_a (d_a, d + d_e) of the concat score
    assert m.output.dropout.p == 0.25
    for emb in (m.encoder.embed, m.embed):  # the padding id's embedding row is zero
        assert emb.padding_idx == 2 and not emb.weight[2].any()


def test_an_empty_source_sentence_is_refused():
    m = model()
    src = torch.tensor([[3, 4], [0, 0]])
    with pytest.raises(ValueError, match=r"^every source sentence needs at least one token; got an empty one$"):
        m(src, src != 0, torch.tensor([[1], [1]]))
