"""``attnlab view --hf`` runs the model once with ``attn_implementation="attnlab"``: the weights on the
page come from attnlab's own attention in that pass (no eager reload), and equal eager's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from transformers import AttentionInterface  # noqa: E402

from attnlab.cli import main  # noqa: E402
from attnlab.integrations import transformers as hf_attnlab  # noqa: E402
from attnlab.viz.hf import load_and_run  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-llama")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    torch.manual_seed(0)
    model = transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=11, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    model.save_pretrained(folder / "llama")
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder / "llama")
    return folder / "llama"


@pytest.fixture
def calls(monkeypatch):
    """Every call of the registered "attnlab" attention, counted."""
    seen: list[bool] = []

    def spy(*args, **kwargs):
        out = hf_attnlab.attnlab_attention_forward(*args, **kwargs)
        seen.append(out[1] is not None)
        return out

    monkeypatch.setitem(AttentionInterface._global_mapping, "attnlab", spy)
    return seen


def test_the_weights_through_attnlab_equal_eagers(llama, calls):
    ours = load_and_run(llama, "the cats sat on the mat", attn_implementation="attnlab")
    eager = load_and_run(llama, "the cats sat on the mat")
    assert calls == [True, True, True]  # one pass: three layers, each returning its weights
    assert ours["layers"].shape == (3, 4, 9, 9)
    np.testing.assert_allclose(ours["layers"], eager["layers"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(ours["layers"].sum(-1), 1.0, atol=1e-5)


def test_view_hf_runs_one_pass_through_attnlab(llama, calls, tmp_path, capsys):
    page = tmp_path / "llama.html"
    assert main(["view", "--hf", str(llama), "--text", "the cat sat", "-o", str(page)]) == 0
    assert calls == [True, True, True]
    assert capsys.readouterr().out == f"wrote {page}\n" and page.stat().st_size > 0
