"""The attention decoders of ``Seq2Seq`` against their papers' equations, written here in float64 NumPy.

The encoder is PyTorch's (Bi)GRU; what is checked is the decoder recurrence, the one place
where a wrong index (attending from s_t instead of s_{t-1}, or the reverse) changes every
logit. With the model's weights copied, the reference computes, step by step:

Bahdanau et al. 2015 (https://arxiv.org/abs/1409.0473), eqs. (4)–(6) and App. A:
    e_tj = vᵀ tanh(W_q s_{t-1} + W_k h_j),   α_t = softmax(e_t),   c_t = Σ_j α_tj h_j
    s_t = GRU([E y_{t-1}; c_t], s_{t-1})
Luong et al. 2015 (https://arxiv.org/abs/1508.04025), §3 with input feeding (§3.3):
    s_t = GRU([E y_{t-1}; h̃_{t-1}], s_{t-1}),   e_tj = score(s_t, h_j),   c_t = Σ_j α_tj h_j
    score: general s_tᵀ W_a h_j | dot s_tᵀ h_j | concat vᵀ tanh(W_a [s_t; h_j])
Both: h̃_t = tanh(W_c [c_t; s_t] + b_c),  logits_t = W_s h̃_t + b_s,  s_0 = tanh(W_b [h→_S; h←_1] + b_b).
Padded source positions get no weight.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.models import Seq2Seq, Seq2SeqConfig


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru(cell: torch.nn.GRUCell, x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """PyTorch's GRUCell: gates (r, z, n) stacked in weight_ih / weight_hh."""
    wi, wh, bi, bh = _np(cell.weight_ih), _np(cell.weight_hh), _np(cell.bias_ih), _np(cell.bias_hh)
    gi, gh = x @ wi.T + bi, h @ wh.T + bh
    H = h.shape[-1]
    r = _sigmoid(gi[:, :H] + gh[:, :H])
    z = _sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
    n = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
    return (1 - z) * n + z * h


def _softmax_masked(e: np.ndarray, mask: np.ndarray) -> np.ndarray:
    e = np.where(mask, e, -np.inf)
    e = e - e.max(-1, keepdims=True)
    w = np.exp(e)
    return w / w.sum(-1, keepdims=True)


def _reference(model: Seq2Seq, src, src_mask, tgt_in):
    memory, _ = model.start(src, src_mask)
    H = _np(memory["keys"])  # (b, S, d_e) encoder states h_j
    mask = src_mask.numpy()
    f = _np(memory["fixed"])
    s = np.tanh(f @ _np(model.bridge.weight).T + _np(model.bridge.bias))  # s_0
    E = _np(model.embed.weight)
    Wc, bc = _np(model.output.combine.weight), _np(model.output.combine.bias)
    Ws, bs = _np(model.output.predict.weight), _np(model.output.predict.bias)
    att = model.attention
    kind = model.config.decoder
    h_tilde = np.zeros((src.shape[0], model.config.hidden))
    logits, weights = [], []

    def score(q):  # q (b, d_q) → e (b, S)
        if kind == "bahdanau":
            u = np.tanh((q @ _np(att.w_q.weight).T)[:, None, :] + H @ _np(att.w_k.weight).T)
            return u @ _np(att.v)
        if att.score == "general":
            return np.einsum("bd,bsd->bs", q, H @ _np(att.weight.weight).T)
        if att.score == "dot":
            return np.einsum("bd,bsd->bs", q, H)
        W = _np(att.weight.weight)
        u = np.tanh((q @ W[:, : q.shape[1]].T)[:, None, :] + H @ W[:, q.shape[1] :].T)
        return u @ _np(att.v)

    for t in range(tgt_in.shape[1]):
        y = E[tgt_in[:, t].numpy()]
        if kind == "bahdanau":
            a = _softmax_masked(score(s), mask)  # from s_{t-1}
            c = np.einsum("bs,bsd->bd", a, H)
            s = _gru(model.cell, np.concatenate([y, c], -1), s)
        else:
            s = _gru(model.cell, np.concatenate([y, h_tilde], -1), s)
            a = _softmax_masked(score(s), mask)  # from s_t
            c = np.einsum("bs,bsd->bd", a, H)
        h_tilde = np.tanh(np.concatenate([c, s], -1) @ Wc.T + bc)
        logits.append(h_tilde @ Ws.T + bs)
        weights.append(a)
    return np.stack(logits, 1), np.stack(weights, 1)


@pytest.mark.parametrize(
    "decoder, score, bidirectional",
    [("bahdanau", "general", True), ("luong", "general", True), ("luong", "concat", True), ("luong", "dot", False)],
)
def test_decoder_against_the_paper(decoder, score, bidirectional):
    torch.manual_seed(0)
    cfg = Seq2SeqConfig(src_vocab=11, tgt_vocab=13, decoder=decoder, luong_score=score, emb_dim=4, hidden=5,
                        attn_dim=6, bidirectional=bidirectional)
    model = Seq2Seq(cfg).double().eval()
    with torch.no_grad():  # non-zero biases everywhere, so a dropped bias is seen too
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 4, 5, 0, 0], [6, 6, 7, 8, 0]])
    src_mask = src != 0
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 10], [1, 11, 12, 5]])
    with torch.no_grad():
        logits, weights = model(src, src_mask, tgt_in, need_weights=True)
    want_logits, want_weights = _reference(model, src, src_mask, tgt_in)
    np.testing.assert_allclose(_np(weights), want_weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(_np(logits), want_logits, rtol=0, atol=1e-10)
    assert np.all(want_weights[1, :, 3:] == 0) and np.all(want_weights[2, :, 4:] == 0)  # padding gets nothing
