"""Greedy and beam-search decoding, batched, returning the attention weights of every step.

Works with any model that has the step interface of ``attnlab.models.Seq2Seq``:

    memory, state = model.start(src, src_mask)
    logits, state, weights = model.step(memory, state, y_prev)   # (b, V), dict, (b, s) | None

where ``memory`` and ``state`` are dicts of tensors (or None) with the batch
first. Decoding stops at EOS or after ``max_len`` tokens (the guard against a
model that never ends). Beam search keeps ``beam`` hypotheses per sentence,
scores them by summed log-probability divided by ``length ** alpha``
(``alpha=0``: no length normalisation) and, with ``beam=1``, gives exactly the
greedy result. The model and the source may be on any device; the
hypotheses (tokens, scores, float32 weights) come back on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data.vocab import BOS, EOS


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # summed log-probability (including EOS when it ended)
    weights: torch.Tensor | None  # (len(tokens) [+1 for EOS], s_i): a row per output step, source padding cut
    ended: bool = True  # False when max_len stopped it


def _map(tree, fn):
    if isinstance(tree, dict):
        return {k: _map(v, fn) for k, v in tree.items()}
    return None if tree is None else fn(tree)


def _finish(tokens: torch.Tensor, scores, weights, src_mask) -> list[Hypothesis]:
    """The hypotheses on the CPU (each tensor copied once, whatever the device; the weights in float32)."""
    tokens, scores, lengths = tokens.cpu(), scores.cpu(), src_mask.sum(1).cpu()
    weights = weights.float().cpu() if weights is not None else None
    out = []
    for i in range(tokens.shape[0]):
        row = tokens[i].tolist()
        n = row.index(EOS) if EOS in row else len(row)
        s = int(lengths[i])
        ended = EOS in row
        w = weights[i, : n + ended, :s] if weights is not None else None
        out.append(Hypothesis(row[:n], float(scores[i]), w, ended))
    return out


def _check(src, src_mask, max_len):
    if src.dim() != 2 or src_mask.shape != src.shape:
        raise ValueError(f"src and src_mask must both be (b, s); got {tuple(src.shape)} and {tuple(src_mask.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1; got {max_len}")


def length_guard(lengths) -> int:
    """How many tokens a decoder may write before it is cut: twice the longest of ``lengths`` (the
    references' lengths, or the source's where there is no reference), plus 10."""
    return 2 * max(lengths) + 10


@torch.no_grad()
def greedy(model, src: torch.Tensor, src_mask: torch.Tensor, *, max_len: int = 100) -> list[Hypothesis]:
    """The most probable token at every step, for a batch src (b, s) with src_mask (b, s)."""
    _check(src, src_mask, max_len)
    memory, state = model.start(src, src_mask)
    b = src.shape[0]
    y = torch.full((b,), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    score = torch.zeros(b, device=src.device)
    toks, ws = [], []
    for _ in range(max_len):
        logits, state, w = model.step(memory, state, y)
        logp = torch.log_softmax(logits.float(), -1)  # (b, V)
        y = logp.argmax(-1)
        score = score + torch.where(done, torch.zeros_like(score), logp.gather(1, y[:, None]).squeeze(1))
        y = y.masked_fill(done, EOS)
        toks.append(y)
        ws.append(w)
        done = done | (y == EOS)
        if bool(done.all()):
            break
    weights = torch.stack(ws, 1) if ws[0] is not None else None  # (b, t, s)
    return _finish(torch.stack(toks, 1), score, weights, src_mask)


@torch.no_grad()
def beam_search(
    model, src: torch.Tensor, src_mask: torch.Tensor, *, beam: int = 4, max_len: int = 100, alpha: float = 0.0
) -> list[Hypothesis]:
    """The best of ``beam`` hypotheses per sentence (score / length**alpha)."""
    _check(src, src_mask, max_len)
    if beam < 1:
        raise ValueError(f"beam must be >= 1; got {beam}")
    b, K = src.shape[0], beam
    memory, state = model.start(src, src_mask)
    memory = _map(memory, lambda t: t.repeat_interleave(K, 0))  # (b*K, ...)
    state = _map(state, lambda t: t.repeat_interleave(K, 0))
    dev = src.device
    scores = torch.full((b, K), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # one live hypothesis at the start
    y = torch.full((b * K,), BOS, dtype=torch.long, device=dev)
    done = torch.zeros(b * K, dtype=torch.bool, device=dev)
    length = torch.zeros(b * K, device=dev)
    tokens = torch.zeros(b * K, 0, dtype=torch.long, device=dev)
    hist = None
    for _ in range(max_len):
        logits, state, w = model.step(memory, state, y)
        logp = torch.log_softmax(logits.float(), -1)  # (b*K, V)
        V = logp.shape[-1]
        ended = torch.full_like(logp, float("-inf"))
        ended[:, EOS] = 0.0  # a finished hypothesis continues with EOS at no cost
        logp = torch.where(done[:, None], ended, logp)
        cand = (scores.reshape(-1, 1) + logp).reshape(b, K * V)
        top, idx = cand.topk(K, dim=1)  # (b, K)
        parent = (torch.arange(b, device=dev)[:, None] * K + idx // V).reshape(-1)
        y = (idx % V).reshape(-1)
        state = _map(state, lambda t, p=parent: t.index_select(0, p))
        tokens = torch.cat([tokens.index_select(0, parent), y[:, None]], 1)
        if w is not None:
            step_w = w.index_select(0, parent)[:, None]
            hist = step_w if hist is None else torch.cat([hist.index_select(0, parent), step_w], 1)
        length = length.index_select(0, parent) + (~done.index_select(0, parent)).float()
        done = done.index_select(0, parent) | (y == EOS)
        scores = top
        if bool(done.all()):
            break
    norm = scores / length.reshape(b, K).clamp(min=1) ** alpha if alpha else scores
    best = norm.argmax(1)  # (b,)
    pick = torch.arange(b, device=dev) * K + best
    weights = hist.index_select(0, pick) if hist is not None else None
    return _finish(tokens.index_select(0, pick), scores.reshape(-1).index_select(0, pick), weights, src_mask)


DECODERS = {"greedy": greedy, "beam": beam_search}

__all__ = ["greedy", "beam_search", "length_guard", "Hypothesis", "DECODERS"]
