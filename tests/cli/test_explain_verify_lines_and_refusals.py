"""``attnlab explain`` and ``attnlab verify``, run in this process: explain's example list in three
columns, the range of ``--digits``, the first built-in example of a mechanism, each refusal's exact line; a
real decoder step as a worked example (its name, title, inputs and parameters' sizes, the model's own weights
as a claim rounded to four decimals, checked against float64 NumPy); verify's lines per file, ``--quiet``,
``--digits``, ``--lang``, the JSON fields and the exit code (1 when a claim is wrong)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab import pretrained
from attnlab.cli import main
from attnlab.explain import builtin_names, load
from attnlab.explain.mechanisms import MECHANISMS

pytestmark = pytest.mark.usefixtures("one_thread")


def _err(capsys, argv, verb="explain") -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnlab {verb}: error: ") and err.count("\n") == 1
    return err[len(f"attnlab {verb}: error: ") : -1]


def test_the_list_has_name_mechanism_and_title_columns(capsys):
    assert main(["explain", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = builtin_names()
    assert len(lines) == len(names)
    for line, name in zip(lines, names):
        ex = load(name)
        assert line[:30] == name.ljust(30) and line[30] == " "
        assert line[31:47] == ex.mechanism.ljust(16) and line[47] == " "
        assert line[48:] == ex.title


@pytest.mark.parametrize("digits", ["0", "12"])
def test_digits_from_0_to_12_are_accepted(capsys, digits):
    assert main(["explain", "--example", "attnlab-gqa", "--digits", digits]) == 0


@pytest.mark.parametrize("digits", ["-1", "13"])
def test_digits_outside_0_to_12_are_refused(capsys, digits):
    assert _err(capsys, ["explain", "--example", "attnlab-gqa", "--digits", digits]) == (
        f"--digits must be between 0 and 12; got {digits}"
    )


def test_the_digits_reach_the_walkthrough(capsys):
    assert main(["explain", "--example", "attnlab-gqa", "--digits", "2"]) == 0
    two = capsys.readouterr().out
    assert main(["explain", "--example", "attnlab-gqa"]) == 0
    four = capsys.readouterr().out
    assert "true: [0.58  0.14  0.28]" in two and "true: [0.5760  0.1400  0.2840]" in four


def test_a_mechanism_alone_walks_through_its_first_built_in_example(capsys):
    first = next(n for n in builtin_names() if load(n).mechanism == "scaled-dot")
    assert main(["explain", "scaled_dot", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["example"] == first == "tutorial2-scaled-dot"


def test_each_format_and_language(capsys):
    assert main(["explain", "--example", "attnlab-gqa", "--format", "markdown"]) == 0
    assert "$$" in capsys.readouterr().out
    assert main(["explain", "--example", "attnlab-gqa", "--format", "json", "--lang", "zh"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["example"] == "attnlab-gqa" and doc["ok"] is True
    assert main(["explain", "--example", "attnlab-gqa", "--lang", "zh"]) == 0
    assert "机制：gqa\n" in capsys.readouterr().out


def test_explain_refusals(capsys, tmp_path):
    known = ", ".join(sorted(MECHANISMS))
    assert _err(capsys, ["explain", "nope"]) == f"unknown mechanism 'nope'; known: {known}"
    text_rule = "--text goes with --checkpoint DIR or --pretrained NAME, and they need it"
    assert _err(capsys, ["explain", "--example", "attnlab-gqa", "--text", "x"]) == text_rule
    assert _err(capsys, ["explain", "--pretrained", "zh-en-numbers"]) == text_rule
    assert (
        _err(capsys, ["explain", "--file", str(tmp_path / "none.toml")])
        == f"--file {tmp_path / 'none.toml'}: no such file"
    )
    assert (
        _err(capsys, ["explain", "--file", str(tmp_path)])
        == f"--file {tmp_path}: is a folder, not a file"
    )
    assert _err(capsys, ["explain"]) == (
        "give a MECHANISM (e.g. 'additive'), --example NAME or --file FILE.toml; --list shows the examples"
    )
    assert (
        _err(capsys, ["explain", "dot", "--example", "attnlab-gqa"])
        == "attnlab-gqa is a 'gqa' example, not 'dot'"
    )
    assert (
        _err(capsys, ["explain", "--pretrained", "zh-en-numbers", "--text", "  "])
        == "--text must not be empty"
    )


def _weights_by_hand(text: str, step: int) -> np.ndarray:
    """α at decoder step ``step`` in float64 NumPy: vᵀ tanh(W_q s + W_k h_j), then a softmax."""
    from attnlab.data import source_batch
    from attnlab.data.vocab import BOS

    loaded = pretrained.load("zh-en-numbers")
    model = loaded.model
    src, mask = source_batch([loaded.vocabs["src_vocab"].encode(text)])
    with torch.no_grad():
        memory, state = model.start(src, mask)
        y = torch.tensor([BOS])
        for _ in range(step - 1):
            logits, state, _ = model.step(memory, state, y)
            y = logits.argmax(-1)
    att = model.attention
    s, h = state["h"][0].double().numpy(), memory["keys"][0].double().numpy()
    w_q, w_k, v = (t.detach().double().numpy() for t in (att.w_q.weight, att.w_k.weight, att.v))
    e = np.tanh(w_q @ s + h @ w_k.T) @ v
    return np.exp(e - e.max()) / np.exp(e - e.max()).sum()


def test_the_first_decoder_step_as_a_worked_example(capsys):
    assert (
        main(
            ["explain", "--pretrained", "zh-en-numbers", "--text", " 三千零五 ", "--format", "json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["example"] == "zh-en-numbers-step-1" and doc["mechanism"] == "bahdanau"
    assert doc["title"] == (
        "A real decoder step of the trained translator: step 1 of “三千零五”; "
        "written so far: (nothing yet); this step writes “three”"
    )
    assert np.shape(doc["inputs"]["query"]) == (128,) and np.shape(doc["inputs"]["keys"]) == (
        4,
        256,
    )
    assert [np.shape(doc["params"][k]) for k in ("w_q", "w_k", "v")] == [
        (128, 128),
        (128, 256),
        (128,),
    ]
    assert (doc["tokens"], doc["key_tokens"]) == (["three"], list("三千零五"))
    (claim,) = doc["claims"]
    assert (claim["step"], claim["status"], doc["ok"]) == ("weights", "exact", True)
    # The model's own α, rounded to four decimals, against float64 NumPy from its weights and states.
    want = _weights_by_hand("三千零五", 1)
    assert claim["claimed"] == [f"{w:.4f}" for w in want]


def test_the_last_step_writes_the_end_and_one_more_is_refused(capsys):
    assert (
        main(
            [
                "explain",
                "--pretrained",
                "zh-en-numbers",
                "--text",
                "三千零五",
                "--step",
                "5",
                "--lang",
                "zh",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(
        "训练好的翻译模型的真实解码一步：“三千零五”的第 5 步；"
        "已写出：three thousand and five；这一步写出“</s>”\n"
    )
    assert _err(
        capsys, ["explain", "--pretrained", "zh-en-numbers", "--text", "三千零五", "--step", "6"]
    ) == ("the translation ends after 5 steps; --step must be 1 to 5")


# -- verify --------------------------------------------------------------------------------------


def test_verify_prints_each_file_then_a_blank_line(capsys):
    assert main(["verify", "attnlab-gqa", "attnlab-latent"]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert blocks[-1] == ""
    assert [b.splitlines()[0] for b in blocks[:-1]] == ["attnlab-gqa", "attnlab-latent"]
    assert blocks[0].splitlines()[1] == "Claims written in the example, checked against attnlab:"
    assert blocks[0].splitlines()[3].startswith("  ✓ exact  weights[2, 3] = [0.58, 0.14, 0.28]")
    assert blocks[0].splitlines()[3].endswith("true: [0.5760  0.1400  0.2840]")


def test_verify_digits_quiet_and_language(capsys):
    assert main(["verify", "attnlab-gqa", "--digits", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[3].endswith("true: [0.58  0.14  0.28]")
    assert main(["verify", "attnlab-gqa", "-q"]) == 0
    assert capsys.readouterr().out == "attnlab-gqa: 3 claims: 3 exact, 0 rounding drift, 0 wrong.\n"
    assert main(["verify", "attnlab-gqa", "--quiet", "--lang", "zh"]) == 0
    assert (
        capsys.readouterr().out == "attnlab-gqa：共 3 个数值：3 个正确，0 个舍入误差，0 个错误。\n"
    )


def test_verify_exits_one_when_a_claim_is_wrong(capsys):
    assert main(["verify", "tutorial1-additive", "-q"]) == 1
    assert (
        capsys.readouterr().out
        == "tutorial1-additive: 9 claims: 3 exact, 3 rounding drift, 3 wrong.\n"
    )
    assert main(["verify", "attnlab-gqa", "tutorial1-additive", "-q"]) == 1


def test_verify_all_checks_every_built_in_example(capsys):
    assert main(["verify", "--all", "-q"]) == 1  # the tutorials' examples keep their wrong claims
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == builtin_names()
    assert main(["verify", "attnlab-gqa", "--all", "-q"]) == 1
    assert len(capsys.readouterr().out.splitlines()) == len(builtin_names()) + 1


def test_verify_json_is_one_list_of_five_fields(capsys):
    assert main(["verify", "attnlab-gqa", "tutorial1-additive", "--format", "json"]) == 1
    out = capsys.readouterr().out
    docs = json.loads(out)
    assert out.startswith('[\n {\n  "example"')  # indent 1
    assert [list(d) for d in docs] == [["example", "mechanism", "claims", "summary", "ok"]] * 2
    assert [(d["example"], d["ok"]) for d in docs] == [
        ("attnlab-gqa", True),
        ("tutorial1-additive", False),
    ]
    assert main(["verify", "tutorial2-multi-head", "--format", "json", "--lang", "zh"]) == 0
    assert (
        json.loads(capsys.readouterr().out)[0]["summary"]
        == "共 5 个数值：5 个正确，0 个舍入误差，0 个错误。"
    )


def test_verify_refusals(capsys, tmp_path):
    assert (
        _err(capsys, ["verify"], "verify")
        == "give one or more FILEs (TOML paths or built-in names), or --all"
    )
    missing = tmp_path / "none.toml"
    assert _err(capsys, ["verify", str(missing)], "verify") == f"{missing}: no such file"
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert _err(capsys, ["verify", str(folder)], "verify") == f"{folder}: is a folder, not a file"
