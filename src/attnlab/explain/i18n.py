"""The words of the walkthroughs and the checker, in English (en) and Chinese (zh).

Formulas are the library's own (recorded with each step) and are not
translated; step names stay as they are (they are what claims are written
against) and get a translated label next to them. ``t(lang, key, **kw)``
formats a phrase; ``label(lang, step)`` names a step; ``note(lang, text)``
translates the library's known step notes (e.g. how many scores a mask removed).
"""

from __future__ import annotations

import re

LANGS = ("en", "zh")

PHRASES: dict[str, dict[str, str]] = {
    "en": {
        "mechanism": "mechanism: {name}",
        "paper": "paper: {authors} {year}, {url}",
        "inputs": "inputs:",
        "params": "parameters:",
        "tokens": "tokens: {tokens}",
        "key_tokens": "key tokens: {tokens}",
        "step": "Step {n}. {name} ({label}): {formula}",
        "head": "head {i}",
        "slice": "[{i}]",
        "claims": "Claims written in the example, checked against attnlab:",
        "col_claim": "claim",
        "exact": "exact",
        "rounding drift": "drift",
        "wrong": "WRONG",
        "another convention": "convention",
        "another step": "other step",
        "claim_equal": "{where} = {claimed}",
        "claim_argmax": "largest entry of {where} at position {claimed}",
        "true_value": "true: {value}",
        "true_position": "true: position {pos} ({value})",
        "rule": "rounding drift ({rule})",
        "own values": "from the example's own rounded values",
        "working precision": "intermediates written to the example's precision",
        "double rounding": "rounded twice",
        "follows": "right arithmetic from the wrong {where}",
        "upstream": "after the wrong {where}",
        "own": "the example's own earlier values give {value}",
        "summary": "{total} claims: {exact} exact, {drift} rounding drift, {more}{wrong} wrong.",
        "summary_one": "1 claim: {exact} exact, {drift} rounding drift, {more}{wrong} wrong.",
        "summary_convention": "{n} in another convention, ",
        "summary_other": "{n} from another step, ",
        "convention": "another convention: {what}",
        "truncated": "truncated at the written precision (not rounded)",
        "rounded up": "rounded up at the written precision",
        "rounded down": "rounded down at the written precision",
        "percent": "written as percentages (× 100)",
        "0-based index": "the index counted from 0 (it is the next entry's value)",
        "transposed": "the matrix written transposed",
        "other_step": "matches another step: {name} ({label}), {formula}",
        "other:scaled_scores<scores": "matches the raw scores qᵀk (before ÷√d)",
        "other:scores<scaled_scores": "matches the scaled scores qᵀk/√d (after ÷√d)",
        "other:weights<scores": "matches the scores before softmax",
        "other:weights<scaled_scores": "matches the scaled scores before softmax",
        "no_claims": "(no claims written)",
        "masked": "{n} of {total} scores masked",
        "verify_file": "{name}: {summary}",
    },
    "zh": {
        "mechanism": "机制：{name}",
        "paper": "论文：{authors} {year}，{url}",
        "inputs": "输入：",
        "params": "参数：",
        "tokens": "词元：{tokens}",
        "key_tokens": "键的词元：{tokens}",
        "step": "第 {n} 步. {name}（{label}）：{formula}",
        "head": "头 {i}",
        "slice": "[{i}]",
        "claims": "例子中写下的数值，与 attnlab 的计算核对：",
        "col_claim": "写下的值",
        "exact": "正确",
        "rounding drift": "舍入误差",
        "wrong": "错误",
        "another convention": "另一约定",
        "another step": "另一步",
        "claim_equal": "{where} = {claimed}",
        "claim_argmax": "{where} 的最大值在第 {claimed} 位",
        "true_value": "真值：{value}",
        "true_position": "真值：第 {pos} 位（{value}）",
        "rule": "舍入误差（{rule}）",
        "own values": "由例子自己的舍入值算出",
        "working precision": "中间结果按例子的精度书写",
        "double rounding": "两次舍入",
        "follows": "计算本身正确，但出自错误的 {where}",
        "upstream": "在错误的 {where} 之后",
        "own": "按例子自己前面的数值算得 {value}",
        "summary": "共 {total} 个数值：{exact} 个正确，{drift} 个舍入误差，{more}{wrong} 个错误。",
        "summary_one": "共 1 个数值：{exact} 个正确，{drift} 个舍入误差，{more}{wrong} 个错误。",
        "summary_convention": "{n} 个另一约定，",
        "summary_other": "{n} 个另一步的值，",
        "convention": "另一种约定：{what}",
        "truncated": "按书写精度截断（而非四舍五入）",
        "rounded up": "按书写精度向上取整",
        "rounded down": "按书写精度向下取整",
        "percent": "写成百分数（× 100）",
        "0-based index": "下标从 0 数起（这是下一项的值）",
        "transposed": "矩阵写成了转置",
        "other_step": "与另一步相符：{name}（{label}），{formula}",
        "other:scaled_scores<scores": "与未缩放的得分 qᵀk 相符（除以 √d 之前）",
        "other:scores<scaled_scores": "与缩放后的得分 qᵀk/√d 相符（除以 √d 之后）",
        "other:weights<scores": "与 softmax 之前的得分相符",
        "other:weights<scaled_scores": "与 softmax 之前的缩放得分相符",
        "no_claims": "（没有写下的数值）",
        "masked": "{total} 个得分中 {n} 个被遮住",
        "verify_file": "{name}：{summary}",
    },
}

LABELS: dict[str, tuple[str, str]] = {
    "projected_query": ("projected query", "投影后的查询"),
    "projected_keys": ("projected keys", "投影后的键"),
    "projected_values": ("projected values", "投影后的值"),
    "query_heads": ("query split into heads", "查询分头"),
    "key_heads": ("keys split into heads", "键分头"),
    "value_heads": ("values split into heads", "值分头"),
    "preactivation": ("sum before tanh", "tanh 之前的和"),
    "tanh": ("tanh", "tanh 激活"),
    "scores": ("scores", "注意力得分"),
    "scaled_scores": ("scaled scores", "缩放后的得分"),
    "masked_scores": ("masked scores", "掩码后的得分"),
    "weights": ("attention weights", "注意力权重"),
    "context": ("context vector", "上下文向量"),
    "heads": ("heads concatenated", "拼接各头"),
    "output": ("output", "输出"),
    "context_state": ("context and state", "上下文与状态拼接"),
    "output_preactivation": ("sum before tanh", "tanh 之前的和"),
    "avg_pool": ("average pooling", "平均池化"),
    "max_pool": ("max pooling", "最大池化"),
    "mlp": ("shared MLP", "共享 MLP"),
    "pooled": ("pooled maps", "池化图"),
    "conv": ("convolution", "卷积"),
    "softcapped_scores": ("soft-capped scores", "软上限后的得分"),
    "query_features": ("query features φ(q)", "查询的特征 φ(q)"),
    "key_features": ("key features φ(k)", "键的特征 φ(k)"),
    "similarities": ("similarities", "相似度"),
    "content_keys": ("content keys from the latents", "由潜向量得到的内容键"),
    "key_groups": ("key heads shared by the query heads", "各查询头共享的键头"),
    "value_groups": ("value heads shared by the query heads", "各查询头共享的值头"),
    "features": ("activation unit input [e_j, v_A, e_j − v_A, e_j ⊙ v_A]", "激活单元的输入 [e_j, v_A, e_j − v_A, e_j ⊙ v_A]"),
    "hidden": ("hidden layer before PReLU", "PReLU 之前的隐藏层"),
    "activated": ("hidden layer after PReLU", "PReLU 之后的隐藏层"),
    **{f"{step}_{n}": (f"{en}, map {n}", f"第 {n} 张图的{zh}") for n in (1, 2) for step, en, zh in (
        ("scores", "scores", "得分"), ("scaled_scores", "scaled scores", "缩放得分"),
        ("masked_scores", "masked scores", "掩码得分"), ("weights", "attention weights", "注意力权重"))},
}


def check_lang(lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; choose one of {', '.join(LANGS)}")
    return lang


def t(lang: str, key: str, **kw: object) -> str:
    return PHRASES[check_lang(lang)][key].format(**kw)


def has(lang: str, key: str) -> bool:
    return key in PHRASES[check_lang(lang)]


def label(lang: str, step: str) -> str:
    pair = LABELS.get(step)
    if pair is None:
        return step.replace("_", " ")
    return pair[LANGS.index(check_lang(lang))]


_MASKED = re.compile(r"^(\d+) of (\d+) scores masked$")


def note(lang: str, text: str) -> str:
    m = _MASKED.match(text)
    if m:
        return t(lang, "masked", n=m.group(1), total=m.group(2))
    return text


__all__ = ["LANGS", "t", "has", "label", "note", "check_lang"]
