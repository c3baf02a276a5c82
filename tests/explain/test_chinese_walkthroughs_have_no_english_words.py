"""``attnlab explain --lang zh`` speaks Chinese: every shipped example, as text and as Markdown, has
no English word left but the names below (an explicit list), the formulas' symbols and the example's
own data (its tokens) and code (a module's name, a pattern as the library call it stands for)."""

from __future__ import annotations

import re

import pytest

from attnlab.explain import builtin_names, load, render, render_markdown, run, verify
from attnlab.explain.mechanisms import PAPERS

# Names, not words to translate: the project, the paper's function names in the formulas, the
# numbers' inf/nan, the paper's symbol head_i, and the names that the examples' titles give
# (Luong's "general" and "concat" scores, CBAM). The papers' authors are names too (added below).
NAMES = {
    "attnlab", "exp", "tanh", "softmax", "elu", "MLP", "PReLU", "AvgPool", "MaxPool", "MultiHead", "concat",
    "mean", "max", "inf", "nan", "head", "Luong", "Bahdanau", "CBAM", "DIN", "general",
}
AUTHORS = {w for p in PAPERS.values() for w in re.findall(r"[A-Za-z]{2,}", p.authors)} - {"et", "al", "Team"}

MARKUP = [
    re.compile(r"https?://\S+"),  # the paper's address
    re.compile(r"attnlab(?:\.\w+)+(?:\([^)]*\))?"),  # code: a module, a pattern as the library call it stands for
    re.compile(r"\\(?:begin|end)\{\w+\}"),  # LaTeX environments (bmatrix)
    re.compile(r"\\[A-Za-z]+"),  # LaTeX commands; the text of \text{...} and \mathrm{...} stays
    re.compile(r"[_^]\{[^}]*\}|[_^][A-Za-z0-9]+"),  # sub- and superscripts: e_ij, W^UK, h_{kv}, w_uk
]
WORD = re.compile(r"[A-Za-z]{2,}")


def english_words(text: str, data: list[str]) -> set[str]:
    for word in data:
        text = re.sub(rf"(?<![A-Za-z]){re.escape(word)}(?![A-Za-z])", " ", text)
    for pattern in MARKUP:
        text = pattern.sub(" ", text)
    return set(WORD.findall(text)) - NAMES - AUTHORS


def test_the_rule_finds_english_and_passes_symbols_and_names():
    shown = "第 1 步. projected query：W_q q_i + tanh(x)，where the mask forbids j，$$\\text{ where masked}$$"
    assert english_words(shown, []) == {"projected", "query", "where", "the", "mask", "forbids", "masked"}
    assert english_words("$$F^c_{avg} = \\mathrm{AvgPool}(F)$$ c_j^KV Vaswani 等 inf", []) == set()


@pytest.mark.parametrize("name", builtin_names())
def test_every_shipped_example_in_chinese_has_no_english_word(name):
    ex = load(name)
    trace = run(ex)
    checks = verify(ex, trace)
    data = [*(ex.tokens or []), *(ex.key_tokens or []), f"（{ex.mechanism}）"]  # the example's words; the command's name
    for out in (render(ex, trace, checks, lang="zh"), render_markdown(ex, trace, checks, lang="zh")):
        found = english_words(out, data)
        assert not found, f"{name}: English left in the Chinese walkthrough: {sorted(found)}"


def test_the_multi_head_walkthrough_in_chinese():
    ex = load("tutorial2-multi-head")
    trace = run(ex)
    out = render(ex, trace, verify(ex, trace), lang="zh")
    lines = [line for line in out.splitlines() if not line.lstrip().startswith("│")]
    assert lines[1:3] == ["机制：多头注意力（multi-head）", "论文：Vaswani 等 2017，https://arxiv.org/abs/1706.03762"]
    assert lines[5:11] == ["输入：", "  查询", "  键", "  值", "", "参数："]
    assert "第 1 步. 查询分头：把 Q 分成 2 个头，每头 2 维" in lines
    assert "第 9 步. 输出：MultiHead = concat(各头) W_oᵀ" in lines
    assert "  ✓ 正确     缩放后的得分[1, 1, 4] = 8.49         真值：8.4853" in lines


def test_a_shipped_translators_step_in_chinese(capsys):
    from attnlab.cli import main

    assert main(["explain", "--pretrained", "zh-en-numbers", "--text", "三千零五", "--step", "3", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert english_words(out, ["three", "thousand", "and", "（bahdanau）"]) == set()  # its own English output
    assert "  （共 128 个数）\n" in out  # a long vector's length, in Chinese
