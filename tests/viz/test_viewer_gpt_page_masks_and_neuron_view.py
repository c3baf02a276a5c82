"""A GPT's page (``from_trace``; ``attnlab view --pretrained char-gpt``) carries what the model did: its causal
positions as masked (not as weights of zero), and each head's queries and keys as the scores used them
(after rotary positions, a grouped key head for each query head it serves), so the neuron view's q·k/√d is
the model's own score."""

from __future__ import annotations

import base64
import json
import re
import zlib

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.models.gpt import GPT, GPTConfig, attention_maps
from attnlab.trace import trace
from attnlab.viz.viewer import from_trace

TOKENS = list("abcdef")


def _traced(positional: str = "rope", kv: int = 1):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, dim=16, num_layers=2, num_heads=4, num_kv_heads=kv,
                          positional=positional)).eval()
    ids = torch.tensor([1, 4, 2, 7, 3, 9])
    with trace() as t:
        model(ids[None])
    return model, ids, t


def test_a_gpt_trace_gives_its_weights_its_causal_mask_and_the_heads_q_and_k():
    model, ids, t = _traced()
    view = from_trace(t, TOKENS, title="tiny", name="causal self-attention")
    assert view["sections"][0]["name"] == "causal self-attention" and view["tokens"] == TOKENS
    assert np.array_equal(view["layers"], attention_maps(model, ids).numpy())
    causal = np.triu(np.ones((6, 6), bool), k=1)  # by hand: query i may not see the keys after it
    assert view["masked"].shape == (2, 4, 6, 6) and (view["masked"] == causal).all()
    assert view["queries"].shape == view["keys"].shape == (2, 4, 6, 4)
    # the neuron view's score, q·k/√d in float64 here, is the score the model softmaxed
    q, k = view["queries"].astype(np.float64), view["keys"].astype(np.float64)
    scores = np.einsum("lhqd,lhkd->lhqk", q, k) / np.sqrt(q.shape[-1])
    recorded = np.stack([s.value[0].double().numpy() for s in t if s.name == "scaled_scores"])
    assert np.allclose(scores, recorded, atol=1e-5)


def test_grouped_query_heads_share_their_key_head():
    _, _, t = _traced(kv=2)  # 4 query heads, 2 key heads: heads 1-2 read key head 1, heads 3-4 key head 2
    view = from_trace(t, TOKENS)
    kh = [s.value[0].numpy() for s in t if s.name == "key_heads"][0]  # (2, 6, d)
    assert kh.shape[0] == 2
    for h, g in enumerate([0, 0, 1, 1]):
        assert np.array_equal(view["keys"][0, h], kh[g])


def test_a_trace_without_weights_is_refused_by_name():
    with trace() as t:
        pass
    with pytest.raises(ValueError) as e:
        from_trace(t, TOKENS)
    assert str(e.value) == "this trace has no 'weights' step; recorded steps: []"


def _section(page: str) -> dict:
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1))
    return data["sections"][0]


def _unpack(e: dict, dtype) -> np.ndarray:
    raw = zlib.decompress(base64.b64decode(e["b64"]))
    if e["dtype"] == "bits":
        return np.unpackbits(np.frombuffer(raw, np.uint8))[: int(np.prod(e["shape"]))].reshape(e["shape"]).astype(bool)
    return np.frombuffer(raw, dtype).reshape(e["shape"])


def test_view_pretrained_char_gpt_page_has_masked_cells_and_the_neuron_view_data(tmp_path, capsys):
    out = tmp_path / "gpt.html"
    assert main(["view", "--pretrained", "char-gpt", "--text", "To be", "-o", str(out)]) == 0
    s = _section(out.read_text(encoding="utf-8"))
    assert s["tokens"] == list("To be") and s["name"] == "causal self-attention"
    masked = _unpack(s["masked"], bool)
    assert masked.shape == (4, 4, 5, 5) and (masked == np.triu(np.ones((5, 5), bool), k=1)).all()
    w = _unpack(s["weights"], "<f4")
    assert np.allclose(w.sum(-1), 1, atol=1e-5) and (w[masked] == 0).all()
    assert s["queries"]["shape"] == s["keys"]["shape"] == [4, 4, 5, 32]  # 4 layers, 4 heads, d_h = 128 / 4
