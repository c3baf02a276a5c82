"""``attnlab interpret rollout|flow --hf DIR --text T``: the weights of one forward pass through
``attn_implementation="attnlab"``, giving what the same command prints on eager's weights."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.cli import main  # noqa: E402
from attnlab.viz.hf import load_and_run  # noqa: E402
from attnlab.viz.viewer import attention_json  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-qwen2")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    torch.manual_seed(0)
    model = transformers.Qwen2Model(transformers.Qwen2Config(
        vocab_size=11, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    with torch.no_grad():  # sharper weights than the initialisation's near-uniform ones
        for layer in model.layers:
            layer.self_attn.q_proj.weight.mul_(20.0)
    model.save_pretrained(folder / "qwen2")
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder / "qwen2")
    return folder / "qwen2"


@pytest.mark.parametrize("method", ["rollout", "flow"])
def test_interpret_hf_prints_what_the_eager_weights_give(qwen2, method, tmp_path, capsys):
    eager = load_and_run(qwen2, "the cats sat on the mat")  # transformers' own attention
    path = tmp_path / "eager.json"
    path.write_text(json.dumps(attention_json(eager["tokens"], eager["layers"])))
    assert main(["interpret", method, "--json", str(path)]) == 0
    expected = capsys.readouterr().out
    assert main(["interpret", method, "--hf", str(qwen2), "--text", "the cats sat on the mat"]) == 0
    assert capsys.readouterr().out == expected


def _refused(capsys, argv, message):
    assert main(["interpret", *argv]) == 2
    assert capsys.readouterr().err == f"attnlab interpret: error: {message}\n"


def test_interpret_hf_refusals(qwen2, tmp_path, capsys):
    _refused(capsys, ["rollout", "--hf", str(qwen2)], "--hf needs --text: the text to run the model on")
    _refused(capsys, ["flow", "--hf", str(tmp_path / "none"), "--text", "the cat"],
             f"no such model folder: {tmp_path / 'none'}")
    _refused(capsys, ["rollout", "--hf", str(qwen2), "--json", "a.json", "--text", "the cat"],
             "give --json FILE or --hf MODEL_DIR, not both")
    _refused(capsys, ["heads", "--hf", str(qwen2)], "--hf goes with rollout or flow; interpret heads reads --checkpoint DIR")
