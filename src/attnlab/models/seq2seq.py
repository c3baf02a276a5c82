"""RNN encoder–decoder translation models, with and without attention.

    encoder   h_1..h_S = BiGRU/LSTM(embed(x))             packed: padding never enters the recurrence
    none      c = [h→_S; h←_1] fixed for every step        Cho et al. 2014, https://arxiv.org/abs/1406.1078
              s_t = RNN([e(y_{t-1}); c], s_{t-1})
    bahdanau  c_t = Σ_j α_tj h_j,  α_t = a(s_{t-1}, h)      Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473
              s_t = RNN([e(y_{t-1}); c_t], s_{t-1})
    luong     s_t = RNN([e(y_{t-1}); h̃_{t-1}], s_{t-1})    Luong et al. 2015, https://arxiv.org/abs/1508.04025
              c_t = Σ_j α_tj h_j,  α_t = a(s_t, h)          (input feeding: h̃_{t-1} enters the next step)
    all       h̃_t = tanh(W_c [c_t; s_t] + b_c),  p(y_t) = softmax(W_s h̃_t)    (``attnlab.nn.AttentionalOutput``)

The initial decoder state is s_0 = tanh(W_b [h→_S; h←_1]). Every decoder shares
the output layer, so the three differ only in where c_t comes from: the fixed
vector of the ``none`` baseline is the bottleneck that attention removes.

Interface (shared with any model the training loop and decoders accept):

* ``forward(src, src_mask, tgt_in) -> logits (b, t, V)`` (teacher forcing);
  ``need_weights=True`` also returns the weights (b, t, s) (None for ``none``).
  The same numbers as ``step`` one token at a time (tested); where h̃_t is not fed back
  (bahdanau, none) and no dropout is active, the embedding and output layer run once over all steps.
* ``start(src, src_mask) -> (memory, state)`` and
  ``step(memory, state, y_prev (b,)) -> (logits (b, V), state, weights (b, s) | None)``:
  memory and state are dicts of tensors whose first dimension is the batch, so
  beam search can reorder them (``attnlab.train.decode``).
* ``step(..., weights_override=fn)`` replaces this step's attention weights α_t by
  ``fn(α_t) -> (b, s)`` before the context is formed: c_t = Σ_j fn(α_t)_j h_j through the
  core's ``combine_values`` (the same weighted sum the attention module runs), so
  ``fn = lambda w: w`` changes nothing, bit for bit. The faithfulness experiment
  (``attnlab.experiments.faithfulness``) swaps in uniform, permuted, random and adversarial
  weights this way. ``fn`` must return rows that are zero on padding (a bool ``memory["mask"]``).

src (b, s) long, src_mask (b, s) bool (True on real tokens), tgt_in (b, t) long.

The attention module takes the source's padding as one ``attnlab.Mask`` (``Mask.padding(src_mask)``),
built once per ``forward`` for every target step, and once per ``step``: ``memory`` keeps the (b, s)
tensor, which beam search reorders with the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .._limits import check_fields
from ..functional.attention import combine_values
from ..mask import Mask
from ..nn.additive import AdditiveAttention
from ..nn.attentional import AttentionalOutput
from ..nn.luong import LuongAttention

DECODERS = ("none", "bahdanau", "luong")
RNNS = {"gru": (nn.GRU, nn.GRUCell), "lstm": (nn.LSTM, nn.LSTMCell)}


@dataclass
class Seq2SeqConfig:
    src_vocab: int
    tgt_vocab: int
    decoder: str = "bahdanau"  # none | bahdanau | luong
    rnn: str = "gru"  # gru | lstm
    emb_dim: int = 64
    hidden: int = 128  # decoder state size; each encoder direction has the same
    bidirectional: bool = True
    attn_dim: int = 128  # d_a of the additive / concat scores
    luong_score: str = "general"  # dot | general | concat (decoder="luong")
    dropout: float = 0.0
    pad_id: int = 0  # the vocabularies' padding id (attnlab.data.vocab.PAD): its embedding stays zero

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges (attnlab._limits)
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}; got {self.decoder!r}")
        if self.rnn not in RNNS:
            raise ValueError(f"rnn must be one of {tuple(RNNS)}; got {self.rnn!r}")
        for f in ("src_vocab", "tgt_vocab", "emb_dim", "hidden", "attn_dim"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"{f} must be >= 1; got {getattr(self, f)}")


def _reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (b, s, d) with each row's first L_i steps reversed, padding left in place (its own inverse)."""
    j = torch.arange(x.shape[1], device=x.device)  # (s,)
    idx = torch.where(j < lengths[:, None], lengths[:, None] - 1 - j, j)  # (b, s)
    return x.gather(1, idx.unsqueeze(-1).expand_as(x))


class Encoder(nn.Module):
    """embed + (Bi)GRU/LSTM over the real tokens only: src (b, s) → outputs (b, s, d_e), final (b, d_e).

    Padding never enters the recurrence. The LSTM (and any GRU on CUDA, where cuDNN runs packed
    sequences natively) goes through ``pack_padded_sequence``. A GRU on the CPU runs each
    direction over the padded batch instead: the forward direction reads padding only after
    a sentence's last token, the backward direction reads each sentence reversed within its
    length (padding still at the end), and each direction's final state is its output at
    step L − 1. The same numbers, but PyTorch's CPU backward of a packed RNN slices one
    time step at a time, and each slice's gradient is a zero-filled copy of the whole
    packed input (quadratic in the source length: at the CLI defaults ~40 % of a training step).
    """

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.lstm = cfg.rnn == "lstm"
        self.embed = nn.Embedding(cfg.src_vocab, cfg.emb_dim, padding_idx=cfg.pad_id)
        self.rnn = RNNS[cfg.rnn][0](cfg.emb_dim, cfg.hidden, batch_first=True, bidirectional=cfg.bidirectional)
        self.dropout = nn.Dropout(cfg.dropout)
        self.out_dim = cfg.hidden * (2 if cfg.bidirectional else 1)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor):
        lengths = src_mask.sum(1)
        if bool((lengths == 0).any()):
            raise ValueError("every source sentence needs at least one token; got an empty one")
        x = self.dropout(self.embed(src))  # (b, s, d_emb)
        if not self.lstm and x.device.type != "cuda":
            return self._unpacked_gru(x, src_mask, lengths)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (b, s, d_e)
        def last(h):  # (dirs, b, H) → (b, dirs * H): forward's last state and backward's first
            return h.transpose(0, 1).reshape(h.shape[1], -1)
        if self.lstm:
            return out, last(final[0]), last(final[1])
        return out, last(final), None

    def _unpacked_gru(self, x: torch.Tensor, src_mask: torch.Tensor, lengths: torch.Tensor):
        rnn, b = self.rnn, x.shape[0]
        h0 = x.new_zeros(1, b, rnn.hidden_size)
        at_last = (lengths - 1).view(b, 1, 1).expand(b, 1, rnn.hidden_size)  # step L - 1 of each row
        outs, finals = [], []
        for suffix in ("", "_reverse") if rnn.bidirectional else ("",):
            weights = [getattr(rnn, f"{n}_l0{suffix}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            xi = _reverse_within(x, lengths) if suffix else x
            out = torch._VF.gru(xi, h0, weights, True, 1, 0.0, self.training, False, True)[0]  # (b, s, H)
            finals.append(out.gather(1, at_last).squeeze(1))  # (b, H)
            outs.append(_reverse_within(out, lengths) if suffix else out)
        out = torch.cat(outs, -1) if len(outs) > 1 else outs[0]  # (b, s, d_e)
        out = torch.where(src_mask.unsqueeze(-1), out, out.new_zeros(()))  # padding: zero, as pad_packed_sequence
        return out, (torch.cat(finals, -1) if len(finals) > 1 else finals[0]), None


class Seq2Seq(nn.Module):
    """An RNN encoder–decoder; ``Seq2Seq(Seq2SeqConfig(src_vocab=..., tgt_vocab=..., decoder="luong"))``."""

    kind = "seq2seq"

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = cfg = config
        self.encoder = Encoder(cfg)
        d_e, H = self.encoder.out_dim, cfg.hidden
        self.bridge = nn.Linear(d_e, H)
        self.bridge_c = nn.Linear(d_e, H) if cfg.rnn == "lstm" else None
        self.embed = nn.Embedding(cfg.tgt_vocab, cfg.emb_dim, padding_idx=cfg.pad_id)
        feed = H if cfg.decoder == "luong" else d_e  # input feeding of h̃ (luong) or the context c
        self.cell = RNNS[cfg.rnn][1](cfg.emb_dim + feed, H)
        if cfg.decoder == "bahdanau":
            self.attention = AdditiveAttention(H, d_e, cfg.attn_dim)
        elif cfg.decoder == "luong":
            self.attention = LuongAttention(H, d_e, score=cfg.luong_score, attn_dim=cfg.attn_dim)
        else:
            self.attention = None
        self.output = AttentionalOutput(d_e, H, H, cfg.tgt_vocab, dropout=cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    @property
    def label(self) -> str:
        """What the command line prints for this model."""
        return f"{self.config.decoder} decoder"

    def config_dict(self) -> dict:
        """``{"kind": ..., **config}``: what ``attnlab.models.model_config`` (the one way a checkpoint
        saves a model's configuration) gives for this model."""
        return {"kind": self.kind, **asdict(self.config)}

    # -- the step interface ------------------------------------------------------------------
    def start(self, src: torch.Tensor, src_mask: torch.Tensor):
        """Encode once: memory {keys (b, s, d_e), mask (b, s), projected (b, s, ·), fixed (b, d_e)}, state."""
        keys, final, final_c = self.encoder(src, src_mask)
        memory = {"keys": keys, "mask": src_mask, "fixed": final}
        if self.attention is not None:
            memory["projected"] = self.attention.precompute(keys)
        state = {"h": torch.tanh(self.bridge(final))}  # s_0
        if self.bridge_c is not None:
            state["c"] = torch.tanh(self.bridge_c(final_c))
        if self.config.decoder == "luong":
            state["feed"] = keys.new_zeros(keys.shape[0], self.config.hidden)  # h̃_0
        return memory, state

    def _attend(self, memory, query, mask: Mask, weights_override=None):
        # kv_finite: the encoder's states (and their bias-free projections) are exactly zero on padding
        context, weights = self.attention(query, memory["keys"], mask=mask, need_weights=True,
                                          projected_keys=memory["projected"], kv_finite=True)
        if weights_override is None:
            return context, weights
        new = weights_override(weights)  # (b, s)
        if not isinstance(new, torch.Tensor) or new.shape != weights.shape:
            raise ValueError(f"weights_override must return a tensor of the weights' shape (b, s) = "
                             f"{tuple(weights.shape)}; got {tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__}")
        return combine_values(new.unsqueeze(1), memory["keys"]).squeeze(1), new  # c_t = Σ_j α'_tj h_j: (b, d_e)

    def _cell(self, x, state):
        if self.bridge_c is None:
            return {"h": self.cell(x, state["h"])}
        h, c = self.cell(x, (state["h"], state["c"]))
        return {"h": h, "c": c}

    def step(self, memory, state, y_prev: torch.Tensor, *, weights_override=None):
        """One decoding step: y_prev (b,) → logits (b, V), the next state, weights (b, s) or None.

        ``weights_override``: optional ``fn(weights (b, s)) -> (b, s)`` that replaces the attention
        weights before the context is formed (see the module docstring); the returned weights are fn's.
        """
        if weights_override is not None and self.config.decoder == "none":
            raise ValueError("weights_override needs an attention decoder (bahdanau or luong); this one is 'none'")
        mask = None if self.attention is None else Mask.padding(memory["mask"])  # one value for this step
        return self._step(memory, state, y_prev, mask, weights_override)

    def _step(self, memory, state, y_prev: torch.Tensor, mask: Mask | None, weights_override=None):
        """``step`` with the source's mask value given (``forward`` builds one for every step)."""
        e = self.dropout(self.embed(y_prev))  # (b, d_emb)
        weights = None
        kind = self.config.decoder
        if kind == "none":
            context = memory["fixed"]  # (b, d_e), the same at every step
            new = self._cell(torch.cat([e, context], -1), state)
        elif kind == "bahdanau":
            context, weights = self._attend(memory, state["h"], mask, weights_override)  # from s_{t-1}
            new = self._cell(torch.cat([e, context], -1), state)
        else:
            new = self._cell(torch.cat([e, state["feed"]], -1), state)
            context, weights = self._attend(memory, new["h"], mask, weights_override)  # from s_t
        h_tilde, logits = self.output(context, new["h"])
        if kind == "luong":
            new["feed"] = h_tilde
        return logits, new, weights

    # -- teacher forcing ----------------------------------------------------------------------
    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False):
        """src (b, s), src_mask (b, s), tgt_in (b, t) → logits (b, t, V) [, weights (b, t, s) | None]."""
        memory, state = self.start(src, src_mask)
        mask = None if self.attention is None else Mask.padding(memory["mask"])  # one value for every step
        if self.config.decoder != "luong" and not (self.training and self.config.dropout > 0):
            return self._forward_batched_output(memory, state, tgt_in, mask, need_weights)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            lg, state, w = self._step(memory, state, tgt_in[:, t], mask)
            logits.append(lg)
            weights.append(w)
        out = torch.stack(logits, 1)  # (b, t, V)
        if not need_weights:
            return out
        return out, (torch.stack(weights, 1) if self.attention is not None else None)

    def _forward_batched_output(self, memory, state, tgt_in, mask, need_weights):
        """Teacher forcing for the decoders whose h̃_t is not fed back (bahdanau, none): the recurrence
        runs step by step, the embedding and the output layer once over all steps (b, t, ·)."""
        e = self.embed(tgt_in)  # (b, t, d_emb)
        contexts, states, weights = [], [], []
        for t in range(tgt_in.shape[1]):
            if self.attention is None:
                context, w = memory["fixed"], None  # (b, d_e)
            else:
                context, w = self._attend(memory, state["h"], mask)  # from s_{t-1}
            state = self._cell(torch.cat([e[:, t], context], -1), state)
            contexts.append(context), states.append(state["h"]), weights.append(w)
        _, out = self.output(torch.stack(contexts, 1), torch.stack(states, 1))  # (b, t, V)
        if not need_weights:
            return out
        return out, (torch.stack(weights, 1) if self.attention is not None else None)


__all__ = ["Seq2Seq", "Seq2SeqConfig", "Encoder", "DECODERS"]
