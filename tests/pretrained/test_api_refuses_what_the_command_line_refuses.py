"""``attnlab.pretrained`` checks its arguments as the command line does, with the same one-line
messages (one check serves both): a text that is not a str, blank or too long for the model; a
device that is not one of auto, cpu, cuda, mps or is not here; a name that is not a shipped model."""

from __future__ import annotations

import pytest
import torch

from attnlab import pretrained
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

TOO_LONG = "三" * 60  # 60 tokens; zh-en-numbers was trained on sentences of at most 25
LONG_MESSAGE = "the sentence has 60 tokens; this model was trained on at most 25 (limit 50)"


def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("text", [None, 3, b"abc", ["三"]])
def test_a_text_that_is_not_a_str_is_a_type_error(text):
    with pytest.raises(TypeError) as e:
        pretrained.translate("zh-en-numbers", text)
    assert str(e.value) == f"the text to translate must be a str; got {type(text).__name__}"


@pytest.mark.parametrize("text,message", [("", "an empty sentence cannot be translated"),
                                          ("  \t", "an empty sentence cannot be translated"),
                                          (TOO_LONG, LONG_MESSAGE)])
def test_blank_and_too_long_texts_get_the_command_lines_message(capsys, text, message):
    with pytest.raises(ValueError) as e:
        pretrained.translate("zh-en-numbers", text)
    assert str(e.value) == message
    assert _cli_error(capsys, ["translate", "--pretrained", "zh-en-numbers", text]) == (
        f"attnlab translate: error: {message}")


@pytest.mark.parametrize("device", ["bogus", 3, "cuda:7"])
def test_a_device_that_is_not_a_choice_is_refused_before_loading(device):
    with pytest.raises(ValueError) as e:
        pretrained.load("zh-en-numbers", device=device)
    assert str(e.value) == f"device must be one of auto, cpu, cuda, mps; got {device!r}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_missing_cuda_device_is_the_command_lines_line(capsys):
    with pytest.raises(ValueError) as e:
        pretrained.load("zh-en-numbers", device="cuda")
    assert _cli_error(capsys, ["translate", "--pretrained", "zh-en-numbers", "--device", "cuda", "三"]) == (
        f"attnlab translate: error: {e.value}")
    assert str(e.value).startswith("--device cuda: no CUDA device is available here")


def test_an_available_device_loads_and_a_name_is_checked_first():
    loaded = pretrained.load("zh-en-numbers", device="cpu")
    assert next(loaded.model.parameters()).device.type == "cpu"
    assert pretrained.translate("zh-en-numbers", "  三千零五 ").text == "three thousand and five"
    with pytest.raises(pretrained.UnknownModel) as e:
        pretrained.translate(["zh-en-numbers"], "三")
    assert str(e.value) == ("no pretrained model ['zh-en-numbers']; the shipped models are de-en, zh-en-numbers, "
                            "char-gpt, caption")
