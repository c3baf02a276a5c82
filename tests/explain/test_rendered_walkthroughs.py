"""The rendered walkthroughs of tiny hand-worked examples, pinned line by line: plain text and
Markdown, in English and Chinese, for one query against two unit keys (scores [1, 0], weights
softmax = [e/(1+e), 1/(1+e)] = [0.7311, 0.2689]), a masked example (1 of 2 keys masked, -inf shown
as ``-inf`` and ``-\\infty``), a two-head example (each head's matrix under its head label) and a
3-d feature map (each slice under ``[i]``)."""

from __future__ import annotations

from attnlab.explain import document, parse, render, render_markdown, run, verify

TINY = """mechanism = "dot"
title = "tiny"
title_zh = "小例子"
tokens = ["a"]
key_tokens = ["x", "y"]
[inputs]
query = [1.0, 0.0]
keys = [[1.0, 0.0], [0.0, 1.0]]
[[claim]]
step = "scores"
value = [1, 0]
[[claim]]
step = "weights"
index = [1]
value = 0.73
[[claim]]
step = "weights"
index = [2]
value = 0.26
[[claim]]
step = "weights"
relation = "argmax"
value = 1
[[claim]]
step = "context"
value = [0.5, 0.5]
"""

SOFTMAX_TEXT = "α_ij = exp(e_ij) / Σ_j' exp(e_ij')"

TINY_EN = f"""tiny
mechanism: dot
paper: Luong, Pham, Manning 2015, https://arxiv.org/abs/1508.04025
tokens: 1:a
key tokens: 1:x 2:y

inputs:
  query
    [1.0000  0.0000]
  keys
    │ 1.0000  0.0000 │
    │ 0.0000  1.0000 │

Step 1. scores (scores): e_ij = q_iᵀ k_j
  [1.0000  0.0000]

Step 2. weights (attention weights): {SOFTMAX_TEXT}
  [0.7311  0.2689]

Step 3. context (context vector): c_i = Σ_j α_ij v_j
  [0.7311  0.2689]

Claims written in the example, checked against attnlab:
  ✓ exact      scores = [1, 0]                      true: [1.0000  0.0000]
  ✓ exact      weights[1] = 0.73                    true: 0.7311
  ~ convention weights[2] = 0.26                    true: 0.2689
           another convention: truncated at the written precision (not rounded)
  ✓ exact      largest entry of weights at position 1 true: position 1 (0.7311)
  ✗ WRONG      context = [0.5, 0.5]                 true: [0.7311  0.2689]
           the example's own earlier values give [0.7300  0.2600]
  5 claims: 3 exact, 0 rounding drift, 1 in another convention, 1 wrong.
"""

TINY_ZH = f"""小例子
机制：dot
论文：Luong, Pham, Manning 2015，https://arxiv.org/abs/1508.04025
词元：1:a
键的词元：1:x 2:y

输入：
  query
    [1.0000  0.0000]
  keys
    │ 1.0000  0.0000 │
    │ 0.0000  1.0000 │

第 1 步. scores（注意力得分）：e_ij = q_iᵀ k_j
  [1.0000  0.0000]

第 2 步. weights（注意力权重）：{SOFTMAX_TEXT}
  [0.7311  0.2689]

第 3 步. context（上下文向量）：c_i = Σ_j α_ij v_j
  [0.7311  0.2689]

例子中写下的数值，与 attnlab 的计算核对：
  ✓ 正确     scores = [1, 0]                      真值：[1.0000  0.0000]
  ✓ 正确     weights[1] = 0.73                    真值：0.7311
  ~ 另一约定 weights[2] = 0.26                    真值：0.2689
           另一种约定：按书写精度截断（而非四舍五入）
  ✓ 正确     weights 的最大值在第 1 位            真值：第 1 位（0.7311）
  ✗ 错误     context = [0.5, 0.5]                 真值：[0.7311  0.2689]
           按例子自己前面的数值算得 [0.7300  0.2600]
  共 5 个数值：3 个正确，0 个舍入误差，1 个另一约定，1 个错误。
"""

SOFTMAX_TEX = r"\alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{j'} \exp(e_{ij'})}"

TINY_MD = (
    "# tiny\n\n"
    "mechanism: dot  \n"
    "paper: Luong, Pham, Manning 2015, https://arxiv.org/abs/1508.04025  \n"
    "tokens: 1:a  \n"
    "key tokens: 1:x 2:y  \n\n"
    "**inputs:**\n\n"
    "`query`\n\n"
    "$$\\begin{bmatrix} 1.0000 & 0.0000 \\end{bmatrix}$$\n\n"
    "`keys`\n\n"
    "$$\\begin{bmatrix} 1.0000 & 0.0000 \\\\ 0.0000 & 1.0000 \\end{bmatrix}$$\n\n"
    "## 1. `scores` (scores)\n\n"
    "$$e_{ij} = q_i^\\top k_j$$\n\n"
    "$$\\begin{bmatrix} 1.0000 & 0.0000 \\end{bmatrix}$$\n\n"
    "## 2. `weights` (attention weights)\n\n"
    f"$${SOFTMAX_TEX}$$\n\n"
    "$$\\begin{bmatrix} 0.7311 & 0.2689 \\end{bmatrix}$$\n\n"
    "## 3. `context` (context vector)\n\n"
    "$$c_i = \\sum_j \\alpha_{ij} v_j$$\n\n"
    "$$\\begin{bmatrix} 0.7311 & 0.2689 \\end{bmatrix}$$\n\n"
    "## Claims written in the example, checked against attnlab:\n\n"
    "| | claim | attnlab | |\n"
    "|---|---|---|---|\n"
    "| ✓ exact | scores = [1, 0] | true: [1.0000  0.0000] |  |\n"
    "| ✓ exact | weights[1] = 0.73 | true: 0.7311 |  |\n"
    "| ~ convention | weights[2] = 0.26 | true: 0.2689 | another convention: truncated at the written precision (not rounded) |\n"
    "| ✓ exact | largest entry of weights at position 1 | true: position 1 (0.7311) |  |\n"
    "| ✗ WRONG | context = [0.5, 0.5] | true: [0.7311  0.2689] | the example's own earlier values give [0.7300  0.2600] |\n"
    "\n"
    "5 claims: 3 exact, 0 rounding drift, 1 in another convention, 1 wrong.\n"
)


def _tiny():
    ex = parse(TINY, "tiny.toml")
    t = run(ex)
    return ex, t, verify(ex, t)


def test_the_plain_text_walkthrough_in_english_and_chinese():
    ex, t, v = _tiny()
    assert render(ex, t, v) == TINY_EN
    assert render(ex, t, v, lang="zh") == TINY_ZH


def test_the_markdown_walkthrough_in_english():
    ex, t, v = _tiny()
    assert render_markdown(ex, t, v) == TINY_MD


def test_the_markdown_claims_table_in_chinese():
    ex, t, v = _tiny()
    md = render_markdown(ex, t, v, lang="zh")
    assert md.startswith(
        "# 小例子\n\n机制：dot  \n论文：Luong, Pham, Manning 2015，https://arxiv.org/abs/1508.04025  \n"
        "词元：1:a  \n键的词元：1:x 2:y  \n\n**输入：**\n\n"
    )
    assert "## 2. `weights` (注意力权重)\n\n" in md
    assert md.endswith(
        "## 例子中写下的数值，与 attnlab 的计算核对：\n\n"
        "| | 写下的值 | attnlab | |\n|---|---|---|---|\n"
        "| ✓ 正确 | scores = [1, 0] | 真值：[1.0000  0.0000] |  |\n"
        "| ✓ 正确 | weights[1] = 0.73 | 真值：0.7311 |  |\n"
        "| ~ 另一约定 | weights[2] = 0.26 | 真值：0.2689 | 另一种约定：按书写精度截断（而非四舍五入） |\n"
        "| ✓ 正确 | weights 的最大值在第 1 位 | 真值：第 1 位（0.7311） |  |\n"
        "| ✗ 错误 | context = [0.5, 0.5] | 真值：[0.7311  0.2689] | 按例子自己前面的数值算得 [0.7300  0.2600] |\n"
        "\n共 5 个数值：3 个正确，0 个舍入误差，1 个另一约定，1 个错误。\n"
    )


def test_without_claims_no_claims_section_and_no_title_falls_back_to_the_name():
    ex = parse(TINY.replace('title = "tiny"\ntitle_zh = "小例子"\n', ""), "tiny.toml")
    t = run(ex)
    text = render(ex, t)
    assert text.startswith("tiny.toml\nmechanism: dot\n")
    assert text.endswith(
        "Step 3. context (context vector): c_i = Σ_j α_ij v_j\n  [0.7311  0.2689]\n"
    )
    assert render(ex, t, []) == text  # an empty list of verdicts: no section either
    md = render_markdown(ex, t)
    assert md.startswith("# tiny.toml\n\n")
    assert md.endswith("$$\\begin{bmatrix} 0.7311 & 0.2689 \\end{bmatrix}$$\n")
    assert render(ex, t, lang="zh").startswith("tiny.toml\n机制：dot\n")  # no title_zh: the name
    ex.title = "only English"
    assert render(ex, t, lang="zh").startswith("only English\n")  # no title_zh: the English title


def test_digits_sets_the_decimals_of_every_number():
    ex, t, v = _tiny()
    text = render(ex, t, v, digits=2)
    assert "\nStep 2. weights (attention weights): " + SOFTMAX_TEXT + "\n  [0.73  0.27]\n" in text
    assert "  ✓ exact      largest entry of weights at position 1 true: position 1 (0.73)\n" in text
    md = render_markdown(ex, t, v, digits=1)
    assert "$$\\begin{bmatrix} 0.7 & 0.3 \\end{bmatrix}$$" in md


MASKED = """mechanism = "masked"
[inputs]
query = [[1.0, 0.0]]
keys = [[1.0, 0.0], [0.0, 1.0]]
values = [[10.0, 0.0], [0.0, 10.0]]
mask = [[1, 0]]
[params]
scale = 0.5
causal = false
"""

MASKED_EN = f"""m.toml
mechanism: masked
paper: Vaswani et al. 2017, https://arxiv.org/abs/1706.03762

inputs:
  query
    │ 1.0000  0.0000 │
  keys
    │ 1.0000  0.0000 │
    │ 0.0000  1.0000 │
  values
    │ 10.0000   0.0000 │
    │  0.0000  10.0000 │
  mask
    │ 1  0 │

parameters:
  scale = 0.5
  causal = false

Step 1. scores (scores): e_ij = q_iᵀ k_j
  │ 1.0000  0.0000 │

Step 2. scaled_scores (scaled scores): e_ij = q_iᵀ k_j · 0.5
  │ 0.5000  0.0000 │

Step 3. masked_scores (masked scores): e_ij ← −∞ where the mask forbids j
  (1 of 2 scores masked)
  │ 0.5000    -inf │

Step 4. weights (attention weights): {SOFTMAX_TEXT}
  │ 1.0000  0.0000 │

Step 5. context (context vector): c_i = Σ_j α_ij v_j
  │ 10.0000   0.0000 │
"""


def test_a_masked_walkthrough_shows_the_mask_as_bits_the_parameters_and_minus_infinity():
    ex = parse(MASKED, "m.toml")
    assert render(ex, run(ex)) == MASKED_EN


def test_a_masked_markdown_walkthrough_in_chinese():
    ex = parse(MASKED, "m.toml")
    md = render_markdown(ex, run(ex), lang="zh")
    assert md.startswith(
        "# m.toml\n\n机制：masked  \n论文：Vaswani et al. 2017，https://arxiv.org/abs/1706.03762  \n\n"
        "**输入：**\n\n`query`\n\n"
    )
    assert (
        "`mask`\n\n$$\\begin{bmatrix} 1 & 0 \\end{bmatrix}$$\n\n**参数：**\n\n`scale = 0.5`  \n`causal = false`  \n\n"
        in md
    )
    assert (
        "## 3. `masked_scores` (掩码后的得分)\n\n$$e_{ij} \\leftarrow -\\infty \\text{ where masked}$$\n\n"
        "*2 个得分中 1 个被遮住*\n\n$$\\begin{bmatrix} 0.5000 & -\\infty \\end{bmatrix}$$\n\n"
    ) in md
    assert "(2 个得分中 1 个被遮住)" in render(ex, run(ex), lang="zh")


def test_the_document_of_a_masked_example():
    ex = parse(MASKED, "m.toml")
    t = run(ex)
    doc = document(ex, t)
    assert "claims" not in doc and "summary" not in doc and "ok" not in doc
    assert {
        k: doc[k]
        for k in ("example", "title", "source", "mechanism", "paper", "tokens", "key_tokens")
    } == {
        "example": "m.toml",
        "title": "m.toml",
        "source": "",
        "mechanism": "masked",
        "paper": {
            "authors": "Vaswani et al.",
            "year": 2017,
            "url": "https://arxiv.org/abs/1706.03762",
        },
        "tokens": None,
        "key_tokens": None,
    }
    assert doc["inputs"] == {
        "query": [[1.0, 0.0]],
        "keys": [[1.0, 0.0], [0.0, 1.0]],
        "values": [[10.0, 0.0], [0.0, 10.0]],
        "mask": [[1.0, 0.0]],
    }
    assert doc["params"] == {"scale": 0.5, "causal": False}
    assert [s["name"] for s in doc["steps"]] == [
        "scores",
        "scaled_scores",
        "masked_scores",
        "weights",
        "context",
    ]
    masked = doc["steps"][2]
    assert masked == {
        "name": "masked_scores",
        "label": "masked scores",
        "formula": "e_ij ← −∞ where the mask forbids j",
        "latex": r"e_{ij} \leftarrow -\infty \text{ where masked}",
        "note": "1 of 2 scores masked",
        "shape": [1, 2],
        "head_axis": False,
        "value": [[0.5, "-inf"]],
    }
    assert doc["steps"][4]["value"] == [[10.0, 0.0]]
    zh = document(ex, t, lang="zh")
    assert (
        zh["steps"][2]["label"] == "掩码后的得分"
        and zh["steps"][2]["note"] == "2 个得分中 1 个被遮住"
    )
    assert zh["steps"][0]["note"] == ""


def test_the_document_lists_each_claims_verdict_the_summary_and_ok():
    ex, t, v = _tiny()
    ex.source = "by hand"
    doc = document(ex, t, v)
    assert doc["title"] == "tiny" and doc["source"] == "by hand"
    assert document(ex, t, v, lang="zh")["title"] == "小例子"
    assert doc["tokens"] == ["a"] and doc["key_tokens"] == ["x", "y"]
    assert (
        doc["inputs"] == {"query": [1.0, 0.0], "keys": [[1.0, 0.0], [0.0, 1.0]]}
        and doc["params"] == {}
    )
    assert doc["summary"] == "5 claims: 3 exact, 0 rounding drift, 1 in another convention, 1 wrong."
    assert doc["ok"] is False
    assert [c["status"] for c in doc["claims"]] == [
        "exact",
        "exact",
        "another convention",
        "exact",
        "wrong",
    ]
    assert doc["claims"][1] == {
        "step": "weights",
        "index": [1],
        "relation": "equal",
        "claimed": "0.73",
        "true": doc["claims"][1]["true"],
        "status": "exact",
        "rule": "",
        "own": None,
        "follows_from": "",
        "upstream": "",
    }
    assert abs(doc["claims"][1]["true"] - 0.7310585786300049) < 1e-12  # e / (1 + e)
    assert doc["claims"][0]["claimed"] == [1, 0]  # integers stay integers
    assert doc["claims"][2]["rule"] == "truncated"
    argmax = doc["claims"][3]
    assert (argmax["relation"], argmax["claimed"], argmax["true"], argmax["index"]) == (
        "argmax",
        1,
        1,
        [],
    )
    wrong = doc["claims"][4]
    assert wrong["claimed"] == ["0.5", "0.5"] and wrong["own"] == [0.73, 0.26]
    ok_doc = document(ex, t, v[:4])
    assert ok_doc["ok"] is True


MULTI_HEAD = """mechanism = "multi-head"
[inputs]
x = [[1.0, 0.0], [0.0, 2.0]]
[params]
num_heads = 2
scale = 1.0
"""


def test_each_heads_matrix_is_shown_under_its_head_label():
    ex = parse(MULTI_HEAD, "mh.toml")
    t = run(ex)
    # head 1 sees features [1, 0]: scores [[1, 0], [0, 0]]; head 2 sees [0, 2]: scores [[0, 0], [0, 4]]
    assert (
        "\n第 4 步. scores（注意力得分）：e_ij = q_iᵀ k_j\n  头 1\n    │ 1.0000  0.0000 │\n    │ 0.0000  0.0000 │\n"
        "  头 2\n    │ 0.0000  0.0000 │\n    │ 0.0000  4.0000 │\n"
    ) in render(ex, t, lang="zh")
    assert (
        "\nStep 1. query_heads (query split into heads): split Q into 2 heads of 1\n  head 1\n    │ 1.0000 │\n"
        "    │ 0.0000 │\n  head 2\n    │ 0.0000 │\n    │ 2.0000 │\n"
    ) in render(ex, t)
    md = render_markdown(ex, t)
    assert (
        "## 4. `scores` (scores)\n\n$$e_{ij} = q_i^\\top k_j$$\n\n*head 1*\n\n"
        "$$\\begin{bmatrix} 1.0000 & 0.0000 \\\\ 0.0000 & 0.0000 \\end{bmatrix}$$\n\n*head 2*\n\n"
        "$$\\begin{bmatrix} 0.0000 & 0.0000 \\\\ 0.0000 & 4.0000 \\end{bmatrix}$$\n\n## 5."
    ) in md
    assert "*头 2*" in render_markdown(ex, t, lang="zh")
    assert "\n## 8. `heads` (heads concatenated)\n\n" in md
    assert md.endswith("$$\\begin{bmatrix} 0.7311 & 1.0000 \\\\ 0.5000 & 1.9640 \\end{bmatrix}$$\n")
    doc = document(ex, t)
    assert [(s["name"], s["head_axis"], s["shape"]) for s in doc["steps"]] == [
        ("query_heads", True, [2, 2, 1]),
        ("key_heads", True, [2, 2, 1]),
        ("value_heads", True, [2, 2, 1]),
        ("scores", True, [2, 2, 2]),
        ("scaled_scores", True, [2, 2, 2]),
        ("weights", True, [2, 2, 2]),
        ("context", True, [2, 2, 1]),
        ("heads", False, [2, 2]),
    ]


SPATIAL = """mechanism = "spatial"
[inputs]
feature_map = [[[1.0, 2.0]], [[3.0, 4.0]]]
[params]
weight = [[[1.0]], [[0.0]]]
"""


def test_a_three_dimensional_input_is_shown_slice_by_slice():
    ex = parse(SPATIAL, "sp.toml")
    t = run(ex)
    text = render(ex, t)
    assert (
        "\ninputs:\n  feature_map\n    [1]\n      │ 1.0000  2.0000 │\n    [2]\n      │ 3.0000  4.0000 │\n\n"
        "parameters:\n  weight\n    [1]\n      │ 1.0000 │\n    [2]\n      │ 0.0000 │\n\n"
    ) in text
    # mean and max over the two channels: [2, 3] and [3, 4]; the 1 × 1 kernel [1, 0] keeps the mean
    assert (
        "\nStep 1. pooled (pooled maps): [mean_c F; max_c F]\n  │ 2.0000  3.0000 │\n  │ 3.0000  4.0000 │\n"
        in text
    )
    assert "\nStep 2. conv (convolution): f^{1×1}([F_avg; F_max])\n  [2.0000  3.0000]\n" in text
    md = render_markdown(ex, t)
    assert (
        "**inputs:**\n\n`feature_map`\n\n*[1]*\n\n$$\\begin{bmatrix} 1.0000 & 2.0000 \\end{bmatrix}$$\n\n"
        "*[2]*\n\n$$\\begin{bmatrix} 3.0000 & 4.0000 \\end{bmatrix}$$\n\n**parameters:**\n\n"
    ) in md
