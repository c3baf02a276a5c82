"""``attnlab generate`` prints its text as it goes: the prompt first, then each character as soon as
the model has drawn it (flushed, before the next step runs), the whole equal to the greedy text
computed here; ``--tokens`` above the bound its help states is one line."""

from __future__ import annotations

import io
import sys

import pytest
import torch

from attnlab import pretrained
from attnlab.cli import main
from attnlab.models.gpt import GPT

pytestmark = pytest.mark.usefixtures("one_thread")


class _Screen(io.StringIO):
    """stdout that remembers what had been flushed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = ""

    def flush(self) -> None:
        self.flushed = self.getvalue()


def _greedy_by_hand(prompt: str, n: int) -> str:
    loaded = pretrained.load("char-gpt")
    model, vocab = loaded.model, loaded.vocabs["vocab"]
    ids = vocab.encode_tensor(prompt).tolist()
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids[-model.config.block_size:]]))[0, -1]
            ids.append(int(logits.argmax()))
    return "".join(vocab.itos[i] for i in ids)


def test_each_character_is_on_the_screen_before_the_next_is_drawn(monkeypatch):
    screen, seen, real = _Screen(), [], GPT.stream

    def watched(self, prompt, n, **kwargs):
        for token in real(self, prompt, n, **kwargs):
            yield token
            seen.append(screen.flushed)  # the CLI asks for the next token: what is on the screen now?

    monkeypatch.setattr(GPT, "stream", watched)
    monkeypatch.setattr(sys, "stdout", screen)
    assert main(["generate", "--pretrained", "char-gpt", "--text", "ROMEO:", "--tokens", "8",
                 "--temperature", "0"]) == 0
    want = _greedy_by_hand("ROMEO:", 8)
    assert seen == [want[: 6 + i] for i in range(1, 9)]  # prompt + i characters after the i-th step
    assert screen.getvalue() == want + "\n"


def test_tokens_above_the_bound_its_help_states_is_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "characters to generate, 0 to 100000 (default 300)" in " ".join(capsys.readouterr().out.split())
    assert main(["generate", "--pretrained", "char-gpt", "--tokens", "100001"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "attnlab generate: error: --tokens must be <= 100000; got 100001\n"
    assert captured.out == ""


def test_the_stream_draws_what_generate_draws():
    model = pretrained.load("char-gpt").model
    prompt = torch.tensor([[5, 6, 7]])
    whole = model.generate(prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(3))
    steps = list(model.stream(prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(torch.cat([prompt, *steps], 1), whole)
    with pytest.raises(ValueError) as e:
        model.stream(prompt, 3, top_k=0)  # checked when called, before any step
    assert str(e.value) == "top_k must be >= 1; got 0"
